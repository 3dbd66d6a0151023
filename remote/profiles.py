"""Board profiles: TOML files that say how to reach a board and what it has.

Packaged profiles live in ``boards/*.toml`` (package ``sdk.boards``). User profiles in
``~/.config/edgesdk/boards/`` and in the folders of ``EDGESDK_BOARDS_PATH`` (``os.pathsep``-
separated, earlier folders win) override packaged ones of the same name. A profile::

    name = "jetson-xavier-nx"
    description = "..."
    aliases = ["jetson-nx"]
    [connection]   host port user identity_file jump known_hosts python workdir cache_max_mb
                   (the board's data cache under <workdir>/data: least recently used files are
                   evicted above this size; default 1024) max_answer_mb (the most the host reads
                   from one agent answer; default 64: a real result is a few MB)
    [runtime]      targets (preference order) precision
    [runtime.<target>]  that target's default options on this board (e.g. tensorrt dla_core,
                   workspace_mib; tflite threads, delegate), under what a caller passes
    [power]        sensors (order to try) sysfs_root (tests / simulation)
    [hardware]     gpu_arch memory_gb peak_tops memory_bandwidth_gbs source
    [hardware.peak_gops]  fp32 fp16 int8: dense peak GOP/s per precision (the roofline's roofs)

Unknown keys are a :class:`~sdk.errors.ConfigError` that names the key and the allowed ones.
Passwords are never accepted: keys or ssh-agent only. ``[connection] host`` is required: a
board name or address, or ``"local"`` for this machine (a profile never falls back to it).

A profile that cannot be read fails only when its board is used (by file stem, name or alias
it would have had); the others still load. :func:`profile_problems` lists the unreadable ones
(``sdk boards`` prints them as warnings).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ..config import check_keys, load_toml
from ..errors import ConfigError, UnknownBoardError

__all__ = [
    "Connection",
    "BoardProfile",
    "LOCAL_HOST",
    "profile_dirs",
    "load_profile",
    "parse_profile",
    "list_profiles",
    "get_profile",
    "profile_problems",
]

LOCAL_HOST = "local"   # ``host = "local"``: run on this machine through a subprocess, no SSH
PRECISIONS = ("fp32", "fp16", "int8")


@dataclass
class Connection:
    """How to reach the board. ``host = "local"`` means this machine, no SSH. ``host`` may be an
    alias of ``~/.ssh/config``. ``jump``: ``[user@]host[:port]`` or another alias (ProxyJump)."""

    host: str = ""
    port: Optional[int] = None
    user: Optional[str] = None
    identity_file: Optional[str] = None
    jump: Optional[str] = None
    known_hosts: Optional[str] = None
    python: str = ""      # empty: the SDK's own interpreter for the local board, python3 over SSH
    workdir: str = "~/edgesdk"
    cache_max_mb: float = 1024.0   # cap of <workdir>/data on the board (LRU eviction)
    max_answer_mb: float = 64.0    # the most the host reads of one agent answer (stdout), MiB

    @property
    def is_local(self) -> bool:
        return self.host == LOCAL_HOST


@dataclass
class Runtime:
    targets: List[str] = field(default_factory=lambda: ["onnxruntime"])
    precision: str = "fp32"
    #: target name -> default options on this board (from ``[runtime.<target>]`` tables)
    options: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    def target_options(self, target: str, given: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """The options to open ``target`` (a name or an alias: ``trt``) with: the profile's
        defaults, overridden by ``given``."""
        from ..targets.registry import TARGETS

        key = TARGETS.canonical(target) if target in TARGETS else target
        return {**self.options.get(key, {}), **dict(given or {})}


@dataclass
class Power:
    sensors: List[str] = field(default_factory=list)
    sysfs_root: Optional[str] = None


@dataclass
class Hardware:
    """What the board's chip can do. ``peak_gops``: dense peak GOP/s per precision (``fp32``,
    ``fp16``, ``int8``) and ``memory_bandwidth_gbs`` (GB/s) are the roofline's roofs
    (``sdk profile --roofline``); ``source`` cites where they come from."""

    gpu_arch: Optional[str] = None
    memory_gb: Optional[float] = None
    peak_tops: Optional[float] = None
    peak_gops: Dict[str, float] = field(default_factory=dict)
    memory_bandwidth_gbs: Optional[float] = None
    source: Optional[str] = None


@dataclass
class BoardProfile:
    """One board profile (see the module docstring). ``source`` is the file it came from."""

    name: str
    description: str = ""
    aliases: List[str] = field(default_factory=list)
    connection: Connection = field(default_factory=Connection)
    runtime: Runtime = field(default_factory=Runtime)
    power: Power = field(default_factory=Power)
    hardware: Hardware = field(default_factory=Hardware)
    source: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


# key -> (type(s), table class); the schema doubles as the list of allowed keys in errors
_TOP = {"name": str, "description": str, "aliases": list}
_TABLES: Dict[str, Tuple[type, Dict[str, Any]]] = {
    "connection": (Connection, {"host": str, "port": int, "user": str, "identity_file": str, "jump": str,
                                "known_hosts": str, "python": str, "workdir": str,
                                "cache_max_mb": (int, float), "max_answer_mb": (int, float)}),
    "runtime": (Runtime, {"targets": list, "precision": str}),
    "power": (Power, {"sensors": list, "sysfs_root": str}),
    "hardware": (Hardware, {"gpu_arch": str, "memory_gb": (int, float), "peak_tops": (int, float),
                            "peak_gops": dict, "memory_bandwidth_gbs": (int, float), "source": str}),
}
_FORBIDDEN = {"password", "passphrase"}


def _check_keys(where: str, data: Mapping[str, Any], allowed: Mapping[str, Any], src: str) -> None:
    for key in data:
        if key in _FORBIDDEN:
            raise ConfigError(f"{src}: '{where}{key}' is not allowed: passwords are never stored in profiles",
                              "use a key (identity_file) or ssh-agent")
    check_keys(data, allowed, f"{src}: unknown key '{where}{{key}}'",
               f"allowed {('in [' + where.rstrip('.') + ']') if where else 'at the top'}")
    for key, value in data.items():
        want = allowed[key]
        if isinstance(value, bool) or not isinstance(value, want):
            wname = " or ".join(t.__name__ for t in want) if isinstance(want, tuple) else want.__name__
            raise ConfigError(f"{src}: '{where}{key}' must be {wname}, not {type(value).__name__}")
        if want is list and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{src}: '{where}{key}' must be a list of strings")
        if want is dict and where and not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                    for v in value.values()):
            raise ConfigError(f"{src}: '{where}{key}' must map names to positive numbers")


def parse_profile(data: Mapping[str, Any], source: str = "<profile>", default_name: Optional[str] = None) -> BoardProfile:
    """Validate a parsed TOML document and build a :class:`BoardProfile`."""
    top_allowed = dict(_TOP, **{t: dict for t in _TABLES})
    _check_keys("", {k: v for k, v in data.items()}, top_allowed, source)
    name = data.get("name", default_name)
    if not name:
        raise ConfigError(f"{source}: the profile has no 'name'")
    kwargs: Dict[str, Any] = {"name": name, "description": data.get("description", ""),
                              "aliases": list(data.get("aliases", [])), "source": source}
    for table, (cls, schema) in _TABLES.items():
        section = dict(data.get(table, {}))
        extra = _target_tables(section, source) if table == "runtime" else {}
        _check_keys(f"{table}.", section, schema, source)
        kwargs[table] = cls(**section, **extra)
    prof = BoardProfile(**kwargs)
    if prof.runtime.precision not in PRECISIONS:
        raise ConfigError(f"{source}: runtime.precision '{prof.runtime.precision}' is not one of "
                          f"{', '.join(PRECISIONS)}")
    port = prof.connection.port
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{source}: connection.port {port} is out of range 1..65535")
    if not prof.connection.host.strip():
        raise ConfigError(f"{source}: [connection] has no host",
                          'name the board (host = "jetson.lab" or an ~/.ssh/config alias), or write '
                          'host = "local" for this machine')
    return prof


def _target_tables(runtime: Dict[str, Any], source: str) -> Dict[str, Any]:
    """Pop the ``[runtime.<target>]`` tables out of ``runtime``; each must name a known target."""
    from ..targets.registry import TARGETS

    options = {}
    for key in [k for k, v in runtime.items() if isinstance(v, dict)]:
        if key not in TARGETS:  # a name or an alias (trt, ort, litert)
            raise ConfigError(f"{source}: unknown table '[runtime.{key}]'",
                              f"runtime option tables are named after a target: {', '.join(TARGETS.names())}")
        options[TARGETS.canonical(key)] = dict(runtime.pop(key))
    return {"options": options} if options else {}


def load_profile(path: Union[str, "os.PathLike[str]"]) -> BoardProfile:
    """Read one profile file (``name`` defaults to the file's stem)."""
    p = Path(path)
    data = load_toml(p, f"board profile '{p}'", "reading board profiles")
    return parse_profile(data, source=str(p), default_name=p.stem)


def _packaged_dir() -> Path:
    from .. import boards  # sdk.boards: the packaged TOML files

    return Path(boards.__file__).resolve().parent


def profile_dirs() -> List[Path]:
    """Folders searched, highest priority first: ``EDGESDK_BOARDS_PATH`` entries,
    ``~/.config/edgesdk/boards``, the packaged ``boards/``."""
    dirs = [Path(os.path.expanduser(d)) for d in os.environ.get("EDGESDK_BOARDS_PATH", "").split(os.pathsep) if d]
    dirs.append(Path(os.path.expanduser("~/.config/edgesdk/boards")))
    dirs.append(_packaged_dir())
    return dirs


def list_profiles() -> Dict[str, BoardProfile]:
    """All readable profiles by name (user ones override packaged ones), sorted by name."""
    return dict(sorted(_by_priority()[0].items()))


def profile_problems() -> List[ConfigError]:
    """The profile files that cannot be read (each a :class:`ConfigError` naming its file)."""
    return [err for _, err in _by_priority()[1]]


def _by_priority() -> Tuple[Dict[str, BoardProfile], List[Tuple[str, ConfigError]]]:
    """(readable profiles by name, [(file stem, error)] for unreadable ones), in priority order."""
    found: Dict[str, BoardProfile] = {}
    broken: List[Tuple[str, ConfigError]] = []
    for d in profile_dirs():
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.toml")):
            try:
                prof = load_profile(f)
            except ConfigError as exc:
                broken.append((f.stem, exc))
                continue
            found.setdefault(prof.name, prof)
    return found, broken


def get_profile(name: str) -> BoardProfile:
    """The profile called ``name`` or having it as an alias; a path to a ``.toml`` file works too.
    Unknown names raise :class:`~sdk.errors.UnknownBoardError` listing the known ones; a profile
    file of that name that cannot be read raises its :class:`~sdk.errors.ConfigError`."""
    if name.endswith(".toml") and Path(name).is_file():
        return load_profile(name)
    profiles, broken = _by_priority()     # user folders first: their aliases win too
    for stem, err in broken:               # an override the user wrote but broke: say so
        if stem == name:
            raise err
    if name in profiles:
        return profiles[name]
    for prof in profiles.values():
        if name in prof.aliases:
            return prof
    unread = f"; unreadable profiles: {', '.join(stem for stem, _ in broken)}" if broken else ""
    raise UnknownBoardError(f"unknown board '{name}'",
                            f"known boards: {', '.join(sorted(profiles))}{unread}; "
                            f"add one in ~/.config/edgesdk/boards/{name}.toml")
