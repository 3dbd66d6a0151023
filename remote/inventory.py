"""Boards from an Ansible inventory (``pip install 'edgesdk[ansible]'``).

The inventory is read by Ansible's own ``InventoryManager`` and ``VariableManager``, so INI and
YAML files, ``group_vars/``/``host_vars/`` folders, inventory plugins and directories of sources all
work as they do for ``ansible-playbook``; ``limit`` is Ansible's host pattern (``jetsons``,
``lab1:&jetsons:!broken``, ``j0[1:8]``). Each host becomes a :class:`~sdk.remote.profiles.BoardProfile`
named after the host: the profile of its ``edgesdk_board`` variable (a board profile name such as
``jetson-orin-nx``, from a host or group variable) with the connection taken from the inventory:

==================================================  ===============================
inventory variable                                   board connection
==================================================  ===============================
``ansible_host`` (default: the inventory name)      ``host``
``ansible_port``                                    ``port``
``ansible_user``                                    ``user``
``ansible_ssh_private_key_file``                    ``identity_file``
``ansible_python_interpreter``                      ``python``
``ansible_ssh_common_args`` / ``_extra_args``:      ``jump``
``-J``, ``-o ProxyJump=``, ``ProxyCommand="ssh -W
%h:%p [-p PORT] [USER@]HOST"``
``ansible_connection: local``                       ``host = "local"``
``edgesdk_workdir``                                 ``workdir``
==================================================  ===============================

(The ``ansible_ssh_host``/``_port``/``_user`` spellings work too.) Values are templated with Ansible's
own templar. Host keys are checked as for every board: ``StrictHostKeyChecking=no`` in the
inventory's ssh arguments and ``ansible_host_key_checking`` are not honoured, and passwords never
are (keys or ssh-agent only).
"""
from __future__ import annotations

import contextlib
import copy
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ..errors import ConfigError, InputError, MissingDependencyError, first_line
from .profiles import LOCAL_HOST, BoardProfile, Connection, get_profile

__all__ = ["inventory_boards", "InventoryHost", "read_inventory", "proxy_jump", "ANSIBLE_INSTALL"]

ANSIBLE_INSTALL = "pip install 'edgesdk[ansible]'"
BOARD_VAR = "edgesdk_board"
WORKDIR_VAR = "edgesdk_workdir"
_ALIASES = {
    "host": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "identity_file": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
    "python": ("ansible_python_interpreter",),
    "ssh_args": ("ansible_ssh_common_args", "ansible_ssh_extra_args"),
}


@dataclass
class InventoryHost:
    """One host of the inventory: its name, groups and (templated) variables."""

    name: str
    groups: List[str]
    vars: Dict[str, Any]

    def first(self, key: str) -> Any:
        """The first variable set among the spellings of ``key`` (see ``_ALIASES``)."""
        for var in _ALIASES[key]:
            if self.vars.get(var) not in (None, ""):
                return self.vars[var]
        return None


def _ansible() -> Any:
    # an unparsable source is an error, not a warning and an empty inventory (read once, at import)
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_FAILED", "true")
    os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "false")
    try:
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar
        from ansible.utils.display import Display
        from ansible.vars.manager import VariableManager
    except ImportError as exc:
        raise MissingDependencyError("boards from an Ansible inventory", "ansible-core", ANSIBLE_INSTALL) from exc
    return AnsibleError, InventoryManager, DataLoader, Templar, VariableManager, Display


@contextlib.contextmanager
def _warnings_kept(display_cls: Any) -> Iterator[List[str]]:
    """Ansible's warnings collected instead of printed (they become part of our one-line errors)."""
    display = display_cls()   # a singleton
    seen: List[str] = []
    display.warning = lambda msg, *a, **k: seen.append(str(msg))
    display.error_as_warning = lambda msg, exception, *a, **k: seen.append(f"{msg} {first_line(exception)}")
    display.deprecated = lambda msg, *a, **k: None
    try:
        yield seen
    finally:
        for name in ("warning", "error_as_warning", "deprecated"):
            delattr(display, name)


def read_inventory(sources: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]],
                   limit: Optional[str] = None) -> List[InventoryHost]:
    """The hosts of ``sources`` (inventory files, folders or plugin configs) that match ``limit``
    (an Ansible host pattern; None: all), in inventory order, with their variables templated."""
    AnsibleError, InventoryManager, DataLoader, Templar, VariableManager, Display = _ansible()
    paths = [str(sources)] if isinstance(sources, (str, os.PathLike)) else [str(s) for s in sources]
    for p in paths:
        if not Path(p).exists():
            raise InputError(f"inventory '{p}' does not exist")
    loader = DataLoader()
    with _warnings_kept(Display) as warned:
        try:
            return _hosts(InventoryManager(loader=loader, sources=paths), loader, paths, limit, Templar,
                          VariableManager)
        except AnsibleError as exc:
            raise ConfigError(f"cannot read the inventory {', '.join(paths)}: {_parse_error(warned, paths, exc)}") from exc


def _parse_error(warned: List[str], paths: List[str], exc: BaseException) -> str:
    """The parser's own complaint: the plugin that fits the file's suffix (yaml, ini), else the first."""
    fails = [w for w in warned if w.startswith("Failed to parse")]
    suffix = Path(paths[0]).suffix.lower()
    plugin = "'yaml'" if suffix in (".yml", ".yaml") else ("'toml'" if suffix == ".toml" else "'ini'")
    best = next((w for w in fails if plugin in w), fails[0] if fails else first_line(exc))
    return best.replace("Failed to parse inventory with ", "").strip().splitlines()[0]


def _hosts(inv: Any, loader: Any, paths: List[str], limit: Optional[str], Templar: Any,
           VariableManager: Any) -> List[InventoryHost]:
    """The hosts of ``inv`` that match ``limit``, with the variables this module reads."""
    variables = VariableManager(loader=loader, inventory=inv)
    if limit:
        inv.subset(limit)
    out = []
    for h in inv.get_hosts("all"):
        raw = variables.get_vars(host=h, include_hostvars=False)
        out.append(InventoryHost(h.name, sorted(g.name for g in h.get_groups()),
                                 _plain(Templar(loader=loader, variables=raw), raw)))
    if not out:
        groups = sorted(inv.groups) if limit else []
        raise InputError(f"no host of {', '.join(paths)} matches" + (f" --limit '{limit}'" if limit else ""),
                         f"groups: {', '.join(groups)}" if groups else None)
    return out


def _plain(templar: Any, raw: Mapping[str, Any]) -> Dict[str, Any]:
    """The variables this module reads, templated and turned into plain Python values."""
    wanted = {BOARD_VAR, WORKDIR_VAR, "ansible_connection"} | {v for vs in _ALIASES.values() for v in vs}
    out: Dict[str, Any] = {}
    for key in wanted & set(raw):
        value = raw[key]
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            value = templar.template(value)
        out[key] = value if value is None or isinstance(value, (bool, int, float)) else str(value)
    return out


def proxy_jump(ssh_args: Optional[str], host: str = "?") -> Optional[str]:
    """The ProxyJump (``[user@]host[:port]``, or a comma-separated chain) in ssh arguments: ``-J X``,
    ``-o ProxyJump=X`` or ``-o ProxyCommand="ssh -W %h:%p [-p PORT] [-l USER] [USER@]HOST"``."""
    if not ssh_args:
        return None
    try:
        toks = shlex.split(ssh_args)
    except ValueError as exc:
        raise ConfigError(f"{host}: cannot parse ansible_ssh_common_args '{ssh_args}': {exc}") from exc
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok in ("-J", "-o") and i + 1 < len(toks):
            value, i = (tok, toks[i + 1]), i + 2
        elif tok.startswith(("-J", "-o")) and len(tok) > 2:
            value, i = (tok[:2], tok[2:]), i + 1
        else:
            i += 1
            continue
        if value[0] == "-J":
            return value[1]
        key, _, val = value[1].replace("=", " ", 1).partition(" ")
        if key.lower() == "proxyjump" and val.strip():
            return val.strip()
        if key.lower() == "proxycommand":
            return _proxy_command_hop(val.strip(), host)
    return None


def _proxy_command_hop(command: str, host: str) -> str:
    toks = shlex.split(command)
    if not toks or os.path.basename(toks[0]) != "ssh" or "-W" not in toks:
        raise ConfigError(f"{host}: ProxyCommand '{command}' is not 'ssh -W %h:%p HOST'",
                          "use ProxyJump (-J) in ansible_ssh_common_args")
    user = port = dest = None
    i = 1
    while i < len(toks):
        t = toks[i]
        if t in ("-p", "-l", "-W", "-i", "-o", "-F") and i + 1 < len(toks):
            if t == "-p":
                port = toks[i + 1]
            elif t == "-l":
                user = toks[i + 1]
            i += 2
        elif t.startswith("-"):
            i += 1
        else:
            dest = t
            i += 1
    if dest is None:
        raise ConfigError(f"{host}: no jump host in ProxyCommand '{command}'")
    if user and "@" not in dest:
        dest = f"{user}@{dest}"
    return f"{dest}:{port}" if port else dest


def board_profile(host: InventoryHost, source: str) -> BoardProfile:
    """The board of one inventory host: its ``edgesdk_board`` profile, connection from the inventory."""
    base = get_profile(str(host.vars[BOARD_VAR]))
    prof = copy.deepcopy(base)
    local = str(host.vars.get("ansible_connection") or "") == "local"
    port = host.first("port")
    try:
        port = int(port) if port is not None else None
    except ValueError as exc:
        raise ConfigError(f"{host.name}: ansible_port '{port}' is not a number") from exc
    jump = proxy_jump(" ".join(str(host.vars[v]) for v in _ALIASES["ssh_args"] if host.vars.get(v)), host.name)
    c = base.connection
    conn = Connection(host=LOCAL_HOST if local else str(host.first("host") or host.name), port=port,
                      user=host.first("user") or (None if local else c.user),
                      identity_file=host.first("identity_file") or c.identity_file, jump=jump or c.jump,
                      known_hosts=c.known_hosts, python=str(host.first("python") or c.python),
                      workdir=str(host.vars.get(WORKDIR_VAR) or c.workdir))
    return replace(prof, name=host.name, aliases=[], connection=conn,
                   source=f"{source} (host {host.name}, profile {base.name} from {base.source})")


def inventory_boards(sources: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]],
                     limit: Optional[str] = None) -> List[BoardProfile]:
    """The boards of an Ansible inventory (see the module docstring), one profile per host that
    matches ``limit``. Every host needs ``edgesdk_board``; hosts without it are listed in one error."""
    hosts = read_inventory(sources, limit)
    missing = [h.name for h in hosts if not h.vars.get(BOARD_VAR)]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ConfigError(f"host(s) {shown} have no '{BOARD_VAR}' variable",
                          f"set {BOARD_VAR}: <board profile, e.g. jetson-orin-nx> on the host or its group")
    src = ", ".join([str(sources)] if isinstance(sources, (str, os.PathLike)) else [str(s) for s in sources])
    return [board_profile(h, src) for h in hosts]
