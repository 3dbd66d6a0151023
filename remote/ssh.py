"""SSH connections to boards with paramiko: verified host keys, keys/agent only, timeouts, retries.

* Host keys are checked against ``/etc/ssh/ssh_known_hosts``, ``~/.ssh/known_hosts`` and the
  profile's ``known_hosts`` file. An unknown key is refused unless ``trust_new_host=True``
  (trust on first use), which appends it to the profile's file or else to ``~/.ssh/known_hosts``.
  A changed key is always refused.
* Authentication: the profile's or ``~/.ssh/config``'s identity files, the default keys in
  ``~/.ssh`` and ssh-agent. Never a password and never keyboard-interactive: a server that asks
  for more than a key (``AuthenticationMethods publickey,keyboard-interactive``) is refused with
  one error, nothing is prompted or sent, stdin is never read.
* ``~/.ssh/config`` aliases are applied here (paramiko parses but does not act on them):
  HostName, User, Port, IdentityFile and ProxyJump (a chain of hops, each opened as a
  ``direct-tcpip`` channel through the previous one and given to ``connect`` as ``sock=``);
  HostKeyAlias (the name looked up and recorded in known_hosts, bare, as OpenSSH does),
  UserKnownHostsFile and GlobalKnownHostsFile (space-separated lists that replace
  ``~/.ssh/known_hosts`` and ``/etc/ssh/ssh_known_hosts``; ``~`` and ``%d %u %h %p %r %n``
  expanded; ``none`` for no file; new keys are recorded in the first user file).
* Every command runs in its own process group on the board (OpenSSH's sshd starts each session
  with ``setsid``); the shell reports its PID on stderr first (stripped from the result). On a
  timeout or an interrupt the group gets TERM, then KILL after ``KILL_GRACE_S``, over a
  second channel, so nothing keeps running on the board. (A server without setsid: the
  shell's process tree, found with ``pgrep -P``, is stopped instead.)
* Timeouts on connect, banner, auth, channel open and every command; keepalive; stdout and
  stderr are drained while a command runs. Transient failures (timeout, reset, banner lost)
  are retried under one :class:`RetryPolicy` per board (connects and operations draw on the same
  budget: by default one retry, so a board that accepts TCP but never speaks SSH costs the
  connect timeout twice); auth and host key failures are not retried.
* paramiko's log lines (banner tracebacks, "Socket exception") never reach stderr unless the
  application configures logging (``sdk --debug`` does).
* Ctrl-C: :func:`sdk.remote.cancel.cancel_all` stops every command in flight (see there).

paramiko is imported inside the functions that need it (``pip install edgesdk[remote]``).
"""
from __future__ import annotations

import errno
import getpass
import os
import re
import secrets
import select
import shlex
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import (AuthenticationError, BoardConnectionError, ConfigError, HostKeyError,
                      MissingDependencyError, RemoteCommandError, RemoteError)
from .cancel import abort_hook, cancelled, check_cancelled, in_flight

__all__ = ["SSHHost", "CommandResult", "SSHConnection", "RetryPolicy", "resolve_host", "user_known_hosts",
           "ssh_config_path", "fingerprint", "is_transient", "exit_status_text"]

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_COMMAND_TIMEOUT_S = 600.0
KEEPALIVE_S = 15
WINDOW_BYTES = 16 * 1024 * 1024       # SSH channel window for uploads (paramiko's default is 2 MiB)
MAX_JUMPS = 8
FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
KILL_GRACE_S = 2.0                    # between TERM and KILL when a command is stopped on the board
CANCEL_GRACE_S = 1.0                  # the same after Ctrl-C: the user waits for it (all done within 3 s)
PGID_WAIT_S = 2.0                     # how long a stopped command's PID report is awaited
HEARTBEAT_S = 2.0                     # a held stdin gets one byte this often (the agent's watchdog)
STDERR_KEEP_BYTES = 64 * 1024         # of a command's stderr only the last this many bytes are kept
EXCERPT_CHARS = 200                   # an error line quotes at most this much of what a board printed
DEFAULT_RETRIES = 1                   # retries per board, connects and operations together
DEFAULT_BACKOFF_S = 0.5


def _paramiko():
    try:
        import paramiko
    except ImportError as exc:
        raise MissingDependencyError("the remote runner (SSH)", "paramiko", "pip install 'edgesdk[remote]'") from exc
    _quiet_paramiko_logs()
    return paramiko


def _quiet_paramiko_logs() -> None:
    """A NullHandler on the ``paramiko`` logger: without any handler Python's last-resort handler
    prints paramiko's warnings (banner tracebacks, socket resets) on stderr. Records still
    propagate to handlers the application sets up (``sdk --debug`` configures logging)."""
    import logging

    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())


class RetryPolicy:
    """The one retry policy of a board: ``retries`` extra attempts in all, shared by connecting
    and by every operation on the board (a reconnect inside a retried push draws on the same
    budget, so retries never nest), ``backoff_s`` doubling between attempts. Only transient
    :class:`BoardConnectionError` s (timeout, reset, banner lost) are retried. Thread-safe."""

    def __init__(self, retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S):
        self.retries = max(0, int(retries))
        self.backoff_s = backoff_s
        self.used = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RetryPolicy(retries={self.retries}, backoff_s={self.backoff_s}, used={self.used})"

    def spend(self) -> bool:
        """Take one retry from the budget and sleep the backoff; False when none is left."""
        with self._lock:
            if self.used >= self.retries:
                return False
            self.used += 1
            delay = self.backoff_s * (2 ** (self.used - 1))
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            check_cancelled()
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        check_cancelled()
        return True

    def call(self, fn: Callable[[], Any], *, before_retry: Optional[Callable[[], None]] = None) -> Any:
        """``fn()``, retried on a transient :class:`BoardConnectionError` while the budget lasts;
        ``before_retry`` runs before each new attempt (e.g. drop the dead connection)."""
        while True:
            try:
                return fn()
            except BoardConnectionError as exc:
                if not is_transient(exc) or not self.spend():
                    raise
                if before_retry is not None:
                    before_retry()


def ssh_config_path() -> Path:
    """``~/.ssh/config`` (HOME is read at call time, so tests can point it elsewhere)."""
    return Path(os.path.expanduser("~/.ssh/config"))


def user_known_hosts() -> Path:
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")


@dataclass
class SSHHost:
    """A host to connect to, after ``~/.ssh/config`` was applied. ``jump`` is the previous hop."""

    hostname: str
    port: int = 22
    user: str = field(default_factory=getpass.getuser)
    identity_files: List[str] = field(default_factory=list)
    jump: Optional["SSHHost"] = None
    known_hosts: Optional[str] = None
    alias: Optional[str] = None
    host_key_alias: Optional[str] = None
    user_known_hosts_files: Optional[List[str]] = None     # None: ~/.ssh/known_hosts; []: none
    global_known_hosts_files: Optional[List[str]] = None   # None: /etc/ssh/ssh_known_hosts; []: none

    def __str__(self) -> str:
        port = "" if self.port == 22 else f":{self.port}"
        via = f" via {self.jump}" if self.jump else ""
        return f"{self.user}@{self.hostname}{port}{via}"

    @property
    def known_hosts_name(self) -> str:
        """How the host appears in known_hosts: its HostKeyAlias as written, else ``host`` or
        ``[host]:port``."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.server_key_name

    @property
    def server_key_name(self) -> str:
        """The name paramiko looks the key up under: ``host`` or ``[host]:port``."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _split_hop(hop: str) -> Tuple[Optional[str], str, Optional[int]]:
    """``[user@]host[:port]`` (also ``ssh://`` and ``[v6]:port``) -> (user, host, port)."""
    hop = hop.strip()
    if hop.startswith("ssh://"):
        hop = hop[len("ssh://"):]
    user = None
    if "@" in hop:
        user, hop = hop.rsplit("@", 1)
    port = None
    if hop.startswith("["):
        host, _, rest = hop[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
    elif hop.count(":") == 1:
        host, port = hop.split(":")
    else:
        host = hop
    try:
        return user, host, int(port) if port else None
    except ValueError as exc:
        raise ConfigError(f"bad port in jump host '{hop}'") from exc


def _load_config():
    paramiko = _paramiko()
    path = ssh_config_path()
    if not path.is_file():
        return None
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except Exception as exc:  # paramiko raises several types for bad lines
        raise ConfigError(f"cannot parse {path}: {exc}") from exc


def _known_hosts_files(value: Optional[str], *, host: str, hostname: str, port: int, user: str,
                       key: str) -> Optional[List[str]]:
    """A ``UserKnownHostsFile``/``GlobalKnownHostsFile`` value -> paths (``~`` and the tokens
    ``%d %u %h %p %r %n %%`` expanded); None when not set, [] for ``none``."""
    if value is None:
        return None
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ConfigError(f"bad {key} '{value}' for '{host}' in {ssh_config_path()}: {exc}") from exc
    if [w.lower() for w in words] == ["none"]:
        return []
    tokens = {"%d": os.path.expanduser("~"), "%u": getpass.getuser(), "%h": hostname, "%p": str(port),
              "%r": user, "%n": host, "%%": "%"}
    out = []
    for w in words:
        w = re.sub(r"%.", lambda m: tokens.get(m.group(0), m.group(0)), w)
        out.append(os.path.expanduser(w))
    return out


def _config_port(value: str, host: str) -> int:
    """The ``Port`` of ``host`` in the ssh config, as a number."""
    try:
        return int(value)
    except ValueError as exc:
        raise ConfigError(f"bad Port '{value}' for '{host}' in {ssh_config_path()}") from exc


def _jump_chain(jump: str, known_hosts: Optional[str], depth: int, config: Any) -> Optional[SSHHost]:
    """The resolved ``ProxyJump`` chain ``jump`` ("a,b,c"): connect to a, then b through a, then c
    through b, then the host through c; returns the last hop (its ``jump`` leads back to a)."""
    previous: Optional[SSHHost] = None
    for hop in jump.split(","):
        h_user, h_host, h_port = _split_hop(hop)
        tgt = resolve_host(h_host, port=h_port, user=h_user, known_hosts=known_hosts,
                             _depth=depth + 1, _config=config)
        # the hop's own ProxyJump is superseded by the chain order
        root = tgt
        while root.jump is not None:
            root = root.jump
        root.jump = previous
        previous = tgt
    return previous


def resolve_host(host: str, *, port: Optional[int] = None, user: Optional[str] = None,
                   identity_file: Optional[str] = None, jump: Optional[str] = None,
                   known_hosts: Optional[str] = None, _depth: int = 0, _config: Any = "load") -> SSHHost:
    """Apply ``~/.ssh/config`` to ``host`` (an alias or a name). Explicit arguments (from the
    profile) win over the config file, as command-line options do for ``ssh``."""
    if _depth > MAX_JUMPS:
        raise ConfigError(f"more than {MAX_JUMPS} jump hosts (a ProxyJump loop?) resolving '{host}'")
    config = _load_config() if _config == "load" else _config
    looked = config.lookup(host) if config is not None else {}
    hostname = looked.get("hostname", host)
    if port is None and "port" in looked:
        port = _config_port(looked["port"], host)
    identities = [os.path.expanduser(identity_file)] if identity_file else []
    if identities and not os.path.isfile(identities[0]):
        raise ConfigError(f"identity file '{identity_file}' does not exist (connection.identity_file of '{host}')")
    identities += [os.path.expanduser(p) for p in looked.get("identityfile", [])]
    jump = jump if jump is not None else looked.get("proxyjump")
    previous = _jump_chain(jump, known_hosts, _depth, config) if jump and jump.lower() != "none" else None
    port = port or 22
    user = user or looked.get("user") or getpass.getuser()
    files = {key: _known_hosts_files(looked.get(key.lower()), host=host, hostname=hostname, port=port, user=user,
                                     key=key) for key in ("UserKnownHostsFile", "GlobalKnownHostsFile")}
    alias = looked.get("hostkeyalias")
    return SSHHost(hostname=hostname, port=port, user=user,
                     identity_files=identities, jump=previous, known_hosts=known_hosts,
                     alias=host if hostname != host else None,
                     host_key_alias=alias if alias and alias.lower() != "none" else None,
                     user_known_hosts_files=files["UserKnownHostsFile"],
                     global_known_hosts_files=files["GlobalKnownHostsFile"])


def fingerprint(key: Any) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a paramiko key."""
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass
class CommandResult:
    """What a command printed and returned. ``seconds``: wall time of the command."""

    command: str
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def error_text(self) -> str:
        """The last non-empty stderr line (or stdout's), for one-line error messages, at most
        ``EXCERPT_CHARS`` of it with control characters made visible; a command killed by a
        signal says which (``killed by signal SIGSEGV``)."""
        status = exit_status_text(self.returncode)
        for blob in (self.stderr, self.stdout):
            tail = blob[-(EXCERPT_CHARS * 8):].decode("utf-8", "replace")
            lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
            if lines:
                line = excerpt(lines[-1])
                return line if "signal" not in status else f"{line} ({status})"
        return status


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most ``limit`` characters of ``text`` (``...`` marks a cut), control characters visible."""
    from ..textsafe import plain

    text = plain(text)
    return text if len(text) <= limit else text[:limit] + "..."



def exit_status_text(returncode: int) -> str:
    """``exit status 3``; ``killed by signal SIGSEGV`` for a negative (subprocess) status or a
    shell's 128+N; paramiko reports -1 when the server sent a signal but no status."""
    import signal

    def name(num: int) -> str:
        try:
            return signal.Signals(num).name
        except ValueError:
            return f"signal {num}"

    if returncode == -1:
        return "killed by a signal (the board sent no exit status)"
    if returncode < 0:
        return f"killed by signal {name(-returncode)}"
    if 128 < returncode < 128 + 65:
        return f"exit status {returncode}: killed by signal {name(returncode - 128)}"
    return f"exit status {returncode}"


_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ETIMEDOUT, errno.ECONNABORTED, errno.EPIPE, errno.EHOSTUNREACH,
                     errno.ENETUNREACH}


def _persistent(err: BoardConnectionError) -> BoardConnectionError:
    """Mark a connection error as not worth retrying (refused, unresolvable): ``transient = False``."""
    err.transient = False  # type: ignore[attr-defined]
    return err


def is_transient(err: BaseException) -> bool:
    """True for a :class:`BoardConnectionError` worth a retry (timeout, reset, dropped link)."""
    return isinstance(err, BoardConnectionError) and getattr(err, "transient", True)


class _Transient(Exception):
    """Internal: a failure worth retrying, carrying the error to raise if retries run out."""

    def __init__(self, error: RemoteError):
        super().__init__(str(error))
        self.error = error


_PID_REPORT = re.compile(rb"\x1eedgesdk-pid ([0-9a-f]+) ([0-9]+)\n")


def _with_pid_report(command: str, token: str) -> str:
    """``command`` preceded by a line that prints the shell's PID to stderr. OpenSSH's sshd
    starts every session with ``setsid``, so that PID is also the process group of everything it starts."""
    return f"printf '\\036edgesdk-pid {token} %s\\n' \"$$\" >&2\n{command}\nexit $?"


def _strip_pid_report(stderr: bytes, token: str) -> Tuple[bytes, Optional[int]]:
    """(stderr without the PID report line, the PID or None)."""
    for m in _PID_REPORT.finditer(stderr):
        if m.group(1) == token.encode():
            return stderr[:m.start()] + stderr[m.end():], int(m.group(2))
    return stderr, None


def _too_large(board: str, command: str, out: List[bytes], cap: int) -> RemoteCommandError:
    """The error for an answer over ``cap`` bytes: names the board, quotes the first bytes only."""
    head = b"".join(out)[:EXCERPT_CHARS * 2].decode("utf-8", "replace")
    return RemoteCommandError(
        f"the board's answer exceeded {cap / (1 << 20):g} MiB and was cut off (it starts: {excerpt(head)!r}); "
        f"command: {excerpt(command, 80)}",
        "a real result is a few MB: check the board's agent, or raise [connection] max_answer_mb", board=board)


def _keep_tail(err: List[bytes], token: str) -> int:
    """Keep the PID report and the last ``STDERR_KEEP_BYTES`` of ``err`` (in place); returns the size kept."""
    blob = b"".join(err)
    m = re.search(rb"\x1eedgesdk-pid " + token.encode() + rb" [0-9]+\n", blob[:4096])
    head = m.group(0) if m else b""
    tail = blob[-STDERR_KEEP_BYTES:]
    err[:] = [head, tail]
    return len(head) + len(tail)


def _kill_group_script(pid: int, grace_s: float = KILL_GRACE_S) -> str:
    """POSIX sh (bash, dash, busybox ash): TERM the process group ``pid``, wait up to ``grace_s``
    for it to go, then KILL it. If ``pid`` leads no group (a server that does not start sessions
    with setsid), TERM then KILL ``pid`` and its descendants (found with ``pgrep -P``) instead."""
    ticks = max(1, int(grace_s * 10))
    return (f'g={int(pid)}; '
            '_k() { kill -s "$1" -- "-$g" 2>/dev/null || kill -s "$1" "-$g" 2>/dev/null; }; '
            '_d() { echo "$1"; for c in $(pgrep -P "$1" 2>/dev/null); do _d "$c"; done; }; '
            'if _k 0; then _k TERM; i=0; '
            f'while _k 0 && [ "$i" -lt {ticks} ]; do sleep 0.1 2>/dev/null || {{ sleep 1; i=$((i+9)); }}; '
            'i=$((i+1)); done; _k KILL; '
            f'else p=$(_d "$g"); kill -s TERM $p 2>/dev/null; sleep {max(1, int(grace_s + 0.5))}; '
            'kill -s KILL $p 2>/dev/null; fi; exit 0')


def _shut(sock: Any) -> None:
    """Close a socket (or channel) another thread is blocked on."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass
    try:
        sock.close()
    except OSError:
        pass


class _KeysOnly(Exception):
    """Internal: the server asked for a password or keyboard-interactive answers (refused)."""

    def __init__(self, methods: str):
        super().__init__(f"the server wants {methods}")
        self.methods = methods


_KEYS_ONLY: Dict[str, Any] = {}


def _keys_only_transport() -> Any:
    """A paramiko ``Transport`` that refuses to send passwords or keyboard-interactive answers.
    paramiko's ``SSHClient`` falls back to ``auth_interactive_dumb`` (a ``Password:`` prompt on
    the terminal, reading stdin) after a partial publickey success; here that fallback, and any
    password or interactive attempt, raises :class:`_KeysOnly` (not an ``SSHException``, so
    paramiko does not swallow it) before anything is prompted or sent."""
    if "cls" not in _KEYS_ONLY:
        paramiko = _paramiko()

        def refuse(self: Any, *_args: Any, **_kw: Any) -> Any:
            raise _KeysOnly("a key and then keyboard-interactive or a password")

        _KEYS_ONLY["cls"] = type("KeysOnlyTransport", (paramiko.Transport,), {
            "auth_password": refuse, "auth_interactive": refuse, "auth_interactive_dumb": refuse})
    return _KEYS_ONLY["cls"]


class SSHConnection:
    """One SSH connection (and its jump hops) to a board. Open with :meth:`connect` or ``with``.

    ``board`` names the board in every error. ``trust_new_host``: record an unknown host key
    instead of refusing it. ``retries``: extra attempts for transient failures, with
    ``backoff_s`` doubling between them.
    """

    def __init__(self, host: SSHHost, *, board: Optional[str] = None, trust_new_host: bool = False,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, keepalive_s: int = KEEPALIVE_S,
                 retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S,
                 ciphers: Optional[List[str]] = None, policy: Optional[RetryPolicy] = None):
        self.host = host
        self.board = board or host.alias or host.hostname
        self.trust_new_host = trust_new_host
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.policy = policy if policy is not None else RetryPolicy(retries, backoff_s)
        self.ciphers = ciphers
        self.client: Any = None
        self._jump: Optional["SSHConnection"] = None
        self.round_trips = 0   # commands and SFTP sessions opened (for benchmarks)

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "SSHConnection":
        self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        t = self.client.get_transport() if self.client is not None else None
        return bool(t is not None and t.is_active())

    def connect(self) -> "SSHConnection":
        """Connect; a transient failure is retried while the :class:`RetryPolicy` (shared with
        whatever else this board does) has retries left."""
        if self.connected:
            return self
        while True:
            check_cancelled()
            try:
                self._connect_once()
                return self
            except _Transient as t:
                self.close()
                if cancelled():
                    raise KeyboardInterrupt("cancelled") from None
                if not self.policy.spend():
                    raise t.error from t.__cause__
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # pragma: no cover - closing a broken transport
                pass
            self.client = None
        if self._jump is not None:
            self._jump.close()
            self._jump = None

    # -- connecting ---------------------------------------------------------------------------
    def _user_files(self) -> List[Path]:
        t = self.host
        return [user_known_hosts()] if t.user_known_hosts_files is None else [Path(p) for p in t.user_known_hosts_files]

    def _host_key_files(self) -> List[Path]:
        t = self.host
        files = [SYSTEM_KNOWN_HOSTS] if t.global_known_hosts_files is None else \
            [Path(p) for p in t.global_known_hosts_files]
        files += self._user_files()
        if t.known_hosts:
            files.append(Path(os.path.expanduser(t.known_hosts)))
        return files

    def _record_file(self) -> Optional[Path]:
        """Where a trusted new key goes: the profile's file, else the first user known_hosts
        file (None with ``UserKnownHostsFile none``: trusted for this connection only)."""
        if self.host.known_hosts:
            return Path(os.path.expanduser(self.host.known_hosts))
        files = self._user_files()
        return files[0] if files else None

    def _policy(self):
        paramiko = _paramiko()
        conn = self

        class Policy(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client, hostname, key):
                fp = f"{key.get_name()} {fingerprint(key)}"
                hostname = conn.host.known_hosts_name    # the HostKeyAlias when there is one
                if not conn.trust_new_host:
                    raise HostKeyError(
                        f"unknown host key for {hostname} ({fp}); refusing to connect",
                        "check the fingerprint on the board (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
                        "then connect once with --trust-new-host (trust_new_host=True) to record it",
                        board=conn.board)
                path = conn._record_file()
                if path is not None:
                    line = paramiko.hostkeys.HostKeyEntry([hostname], key).to_line()
                    try:
                        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                        with open(path, "a", encoding="utf-8") as fh:
                            fh.write(line)
                    except OSError as exc:
                        raise HostKeyError(f"cannot record the host key of {hostname} in {path}: "
                                           f"{exc.strerror or exc}", board=conn.board) from exc
                client.get_host_keys().add(conn.host.server_key_name, key.get_name(), key)

        return Policy()

    def _open_sock(self) -> Any:
        """A socket-like object to the target: a direct-tcpip channel through the jump, or None."""
        if self.host.jump is None:
            return None
        if self._jump is None or not self._jump.connected:
            self._jump = SSHConnection(self.host.jump, board=self.board, trust_new_host=self.trust_new_host,
                                       connect_timeout_s=self.connect_timeout_s, keepalive_s=self.keepalive_s,
                                       policy=RetryPolicy(0))
            self._jump._connect_once()
        paramiko = _paramiko()
        transport = self._jump.client.get_transport()
        try:
            return transport.open_channel("direct-tcpip", (self.host.hostname, self.host.port), ("127.0.0.1", 0),
                                          timeout=self.connect_timeout_s)
        except paramiko.ChannelException as exc:
            raise BoardConnectionError(
                f"jump host {self.host.jump.hostname} cannot reach {self.host.hostname}:{self.host.port} "
                f"({exc.text or exc})", board=self.board) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise _Transient(BoardConnectionError(
                f"jump host {self.host.jump.hostname} dropped the connection to "
                f"{self.host.hostname}:{self.host.port}", board=self.board)) from exc

    def _connect_once(self) -> None:
        paramiko = _paramiko()
        t = self.host
        client = paramiko.SSHClient()
        # only the keys known for the lookup name (the HostKeyAlias, if any), filed under the name
        # paramiko checks them by: so an alias's keys verify the host and nothing else does
        known = client.get_host_keys()
        for f in self._host_key_files():
            if f.is_file():
                try:
                    entry = paramiko.HostKeys(str(f)).lookup(t.known_hosts_name)
                except (OSError, paramiko.SSHException) as exc:
                    raise HostKeyError(f"cannot read known hosts file {f}: {exc}", board=self.board) from exc
                for kind, key in (entry or {}).items():
                    known.add(t.server_key_name, kind, key)
        client.set_missing_host_key_policy(self._policy())
        self.client = client

        def transport_factory(sock, **kw):
            tr = _keys_only_transport()(sock, default_window_size=WINDOW_BYTES, **kw)
            opts = tr.get_security_options()
            if self.ciphers:
                opts.ciphers = tuple(self.ciphers)
            else:   # AES-GCM first: encryption and MAC in one pass, ~1.5x the upload rate of aes-ctr+hmac
                opts.ciphers = tuple(sorted(opts.ciphers, key=lambda c: 0 if c in FAST_CIPHERS else 1))
            return tr

        try:
            check_cancelled()
            sock = self._open_sock()
            if sock is None:
                # our own socket, to turn Nagle off: with it, every small request (channel open, SFTP
                # open, exit status) waits for the peer's delayed ACK, about 40 ms each on Linux
                sock = socket.create_connection((t.hostname, t.port), timeout=self.connect_timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with abort_hook(lambda: _shut(sock)):     # Ctrl-C: stop waiting for a silent board
                check_cancelled()
                self._client_connect(client, sock, transport_factory)
        except RemoteError:
            raise
        except _Transient:
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            if cancelled():
                raise KeyboardInterrupt("cancelled") from exc
            self._translate(exc)
        transport = client.get_transport()
        if self.keepalive_s:
            transport.set_keepalive(self.keepalive_s)

    def _client_connect(self, client: Any, sock: Any, transport_factory: Any) -> None:
        t = self.host
        client.connect(
            t.hostname, port=t.port, username=t.user,
            key_filename=[f for f in t.identity_files if os.path.exists(f)] or None,
            password=None, allow_agent=True, look_for_keys=True, sock=sock,
            timeout=self.connect_timeout_s, banner_timeout=self.connect_timeout_s,
            auth_timeout=self.connect_timeout_s, channel_timeout=self.connect_timeout_s,
            transport_factory=transport_factory)

    def _translate(self, exc: BaseException) -> None:
        """Raise the SDK's error for a failed connect (``_Transient`` for the retryable ones)."""
        paramiko = _paramiko()
        t = self.host
        where = f"{t.hostname}:{t.port}"
        try:
            raise exc
        except paramiko.BadHostKeyException as exc:
            raise HostKeyError(
                f"host key for {t.known_hosts_name} has CHANGED (now {exc.key.get_name()} {fingerprint(exc.key)}, "
                f"known as {fingerprint(exc.expected_key)}); refusing to connect: this may be an attack, "
                "or the board was reinstalled",
                f"if you know why it changed, remove the old key with: ssh-keygen -R '{t.known_hosts_name}'",
                board=self.board) from exc
        except _KeysOnly as exc:
            raise AuthenticationError(
                f"{where} asks for more than a key to log in as '{t.user}' ({exc.methods}); edgesdk "
                "authenticates with keys and ssh-agent only and never sends a password or a typed answer",
                "let this key log in alone on the board (AuthenticationMethods publickey in sshd_config), "
                "or use another account", board=self.board) from exc
        except paramiko.AuthenticationException as exc:
            raise AuthenticationError(
                f"authentication as '{t.user}' on {where} failed ({exc})",
                "only keys and ssh-agent are used: set identity_file in the profile or add the key to the agent, "
                f"and check it is in ~{t.user}/.ssh/authorized_keys on the board", board=self.board) from exc
        except socket.gaierror as exc:
            raise _persistent(BoardConnectionError(f"cannot resolve host name '{t.hostname}' ({exc.strerror})",
                                                   board=self.board)) from exc
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            raise _persistent(BoardConnectionError(f"connection refused by {where} (is sshd running on the board?)",
                                                   board=self.board)) from exc
        except (socket.timeout, TimeoutError) as exc:
            raise _Transient(BoardConnectionError(
                f"timed out after {self.connect_timeout_s:g} s connecting to {where}", board=self.board)) from exc
        except ConnectionRefusedError as exc:
            raise _persistent(BoardConnectionError(f"connection refused by {where} (is sshd running on the board?)",
                                                   board=self.board)) from exc
        except paramiko.SSHException as exc:
            tr = self.client.get_transport() if self.client is not None else None
            if "banner" in str(exc).lower() or (tr is not None and not getattr(tr, "remote_version", "")):
                raise _Transient(BoardConnectionError(
                    f"timed out after {self.connect_timeout_s:g} s waiting for the SSH server of {where} "
                    "(it accepts connections but does not speak SSH)", board=self.board)) from exc
            raise _Transient(BoardConnectionError(f"connection to {where} failed: {exc or type(exc).__name__}",
                                                  board=self.board)) from exc
        except (EOFError, ConnectionError) as exc:
            raise _Transient(BoardConnectionError(f"connection to {where} failed: {exc or type(exc).__name__}",
                                                  board=self.board)) from exc
        except OSError as exc:
            err = BoardConnectionError(f"cannot connect to {where}: {exc.strerror or exc}", board=self.board)
            if exc.errno in _TRANSIENT_ERRNOS:
                raise _Transient(err) from exc
            raise _persistent(err) from exc

    # -- commands -------------------------------------------------------------------------------
    def _transport(self):
        if not self.connected:
            self.connect()
        return self.client.get_transport()

    def run(self, command: str, *, timeout_s: Optional[float] = DEFAULT_COMMAND_TIMEOUT_S,
            input: Optional[bytes] = None, hold_stdin: bool = False,
            max_output_bytes: Optional[int] = None) -> CommandResult:
        """Run ``command`` (already shell-quoted) in the login shell; stdout and stderr are read
        while it runs. Raises :class:`RemoteCommandError` on timeout and :class:`BoardConnectionError`
        if the connection drops. On a timeout or an interrupt (KeyboardInterrupt) the command's
        process group is stopped on the board (TERM, then KILL) before the channel is closed.

        ``hold_stdin``: after ``input``, stdin stays open and gets a byte every ``HEARTBEAT_S``
        (the agent's watchdog: stdin's EOF or silence means this controller is gone).
        ``max_output_bytes``: a command that prints more on stdout is stopped and the error says
        so with a short excerpt (stderr: only its last ``STDERR_KEEP_BYTES`` are kept)."""
        paramiko = _paramiko()
        start = time.monotonic()
        out: List[bytes] = []
        err: List[bytes] = []
        token = secrets.token_hex(6)
        self.round_trips += 1
        check_cancelled()
        with in_flight():
            try:
                chan = self._transport().open_session(timeout=self.connect_timeout_s)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise BoardConnectionError(f"cannot open a session: {exc}", board=self.board) from exc
            rc = self._drive(chan, command, token, input, timeout_s, start, out, err, hold_stdin,
                             max_output_bytes)
        stderr, _ = _strip_pid_report(b"".join(err), token)
        return CommandResult(command, rc, b"".join(out), stderr, time.monotonic() - start)

    def _drive(self, chan: Any, command: str, token: str, input: Optional[bytes], timeout_s: Optional[float],
               start: float, out: List[bytes], err: List[bytes], hold_stdin: bool = False,
               max_output_bytes: Optional[int] = None) -> int:
        """Run ``command`` on ``chan`` to its end; stop it on the board on any way out but its end
        (a timeout, a dropped link, Ctrl-C in this thread, :func:`~sdk.remote.cancel.cancel_all`)."""
        paramiko = _paramiko()
        finished = False
        try:
            chan.settimeout(self.connect_timeout_s)
            chan.exec_command(_with_pid_report(command, token))
            if input:
                chan.sendall(input)
            if not hold_stdin:
                chan.shutdown_write()
            deadline = start + timeout_s if timeout_s else None
            size = [0, 0]      # bytes of stdout read, bytes of stderr kept
            beat = time.monotonic()
            while True:
                got = False
                while chan.recv_ready():
                    out.append(chan.recv(1 << 16))
                    size[0] += len(out[-1])
                    got = True
                    if max_output_bytes is not None and size[0] > max_output_bytes:
                        raise _too_large(self.board, command, out, max_output_bytes)
                while chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(1 << 16))
                    size[1] += len(err[-1])
                    got = True
                    if size[1] > 2 * STDERR_KEEP_BYTES:
                        size[1] = _keep_tail(err, token)
                if hold_stdin and time.monotonic() - beat >= HEARTBEAT_S and not chan.exit_status_ready():
                    beat = time.monotonic()
                    try:
                        if chan.send_ready():
                            chan.send(b"\n")
                    except (OSError, EOFError, paramiko.SSHException):
                        pass
                # sshd may send the exit status before the last output: stop only after EOF too
                if chan.exit_status_ready() and (chan.eof_received or chan.closed) \
                        and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if chan.closed and not chan.exit_status_ready():
                    raise BoardConnectionError(f"the connection dropped while running: {command[:80]}",
                                               board=self.board)
                if deadline is not None and time.monotonic() > deadline:
                    raise RemoteCommandError(f"command timed out after {timeout_s:g} s: {command[:80]}",
                                             "raise the timeout, or check what hangs on the board", board=self.board)
                check_cancelled()
                if not got:
                    if chan.eof_received:
                        chan.status_event.wait(0.05)
                    else:
                        select.select([chan], [], [], 0.05)
                if not self._transport().is_active():
                    raise BoardConnectionError(f"the connection dropped while running: {command[:80]}",
                                               board=self.board)
            rc = chan.recv_exit_status()
            finished = True
        except (socket.timeout, paramiko.SSHException, EOFError, OSError) as exc:
            raise BoardConnectionError(f"the connection failed while running a command: {exc}",
                                       board=self.board) from exc
        finally:
            try:
                if not finished:
                    self._stop_on_board(chan, err, token, interrupted=sys.exc_info()[0] is KeyboardInterrupt)
            finally:
                chan.close()
        return int(rc)

    def _stop_on_board(self, chan: Any, err: List[bytes], token: str, interrupted: bool = False) -> bool:
        """Stop an unfinished command's process group on the board: TERM, then KILL after
        ``KILL_GRACE_S``, over a second channel. Best effort (a dropped link cannot carry it);
        returns True when the kill script ran."""
        transport = self.client.get_transport() if self.client is not None else None
        if transport is None or not transport.is_active():
            return False
        try:
            _, pid = _strip_pid_report(b"".join(err), token)
            wait_until = time.monotonic() + PGID_WAIT_S
            while pid is None and not chan.closed and time.monotonic() < wait_until:   # shell still starting
                if chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(1 << 16))
                    _, pid = _strip_pid_report(b"".join(err), token)
                elif chan.recv_ready():
                    chan.recv(1 << 16)
                else:
                    select.select([chan], [], [], 0.05)
            if pid is None:
                return False
            killer = transport.open_session(timeout=self.connect_timeout_s)
            try:
                grace = CANCEL_GRACE_S if cancelled() or interrupted else KILL_GRACE_S
                killer.exec_command(_kill_group_script(pid, grace))
                killer.shutdown_write()
                killer.status_event.wait(grace + self.connect_timeout_s)
            finally:
                killer.close()
            return True
        except Exception:   # the original error (timeout, dropped link) is the one to report
            return False

    def sftp(self):
        """An SFTP client on a channel with a large window (pipelined uploads)."""
        paramiko = _paramiko()
        self.round_trips += 1
        try:
            return paramiko.SFTPClient.from_transport(self._transport(), window_size=WINDOW_BYTES)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise BoardConnectionError(f"cannot open SFTP (is the sftp subsystem enabled in sshd?): {exc}",
                                       board=self.board) from exc
