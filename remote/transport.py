"""One interface for "here" and "on the board" (the Fabric idea): ``run``, ``put``, ``get``.

:class:`LocalTransport` runs commands through ``sh -c`` in a subprocess (the ``local`` board, no
SSH), in its own process group (TERM then KILL on a timeout or an interrupt);
:class:`SSHTransport` runs them over an :class:`~sdk.remote.ssh.SSHConnection` and moves
files with pipelined SFTP. Both start commands in the login home folder, so a path relative to
home means the same thing for ``run`` and ``put``. Arguments given as a list are shell-quoted
(``shlex.quote``); a string is passed to the shell as written (quote its parts yourself).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import BoardConnectionError, RemoteCommandError, TransferError
from .cancel import cancelled, check_cancelled, in_flight, signals_deferred
from .ssh import (CANCEL_GRACE_S, DEFAULT_COMMAND_TIMEOUT_S, HEARTBEAT_S, KILL_GRACE_S, STDERR_KEEP_BYTES,
                  CommandResult, SSHConnection, _too_large)

__all__ = ["Transport", "LocalTransport", "SSHTransport", "quote_command", "CommandResult",
           "stop_process_group"]

Command = Union[str, Sequence[str]]
Progress = Callable[[int, int], None]     # (bytes done, bytes total)

CHUNK_BYTES = 128 * 1024         # one SFTP write request (OpenSSH's sftp-server takes up to 256 KiB)
MAX_IN_FLIGHT = 32               # outstanding SFTP write requests (pipelining depth: 4 MiB in flight)


#: A shell function ``_sha256`` (stdin -> 64 hex digits): OpenSSL when the board has it (SHA-NI
#: and ARMv8 crypto extensions: ~5x coreutils here), else coreutils ``sha256sum``.
SHA256_SH = ('_sha256() { if command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r | cut -c1-64; '
             'else sha256sum | cut -c1-64; fi; }')


def quote_command(cmd: Command) -> str:
    """A list becomes a shell-quoted command line; a string is returned as is."""
    if isinstance(cmd, str):
        return cmd
    return " ".join(shlex.quote(str(a)) for a in cmd)


def stop_process_group(proc: "subprocess.Popen[bytes]", grace_s: float = KILL_GRACE_S) -> None:
    """TERM the process group led by ``proc`` (started with ``start_new_session=True``), KILL it
    if anything is left after ``grace_s`` (s), then reap ``proc`` and close its pipes."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    else:
        deadline = time.monotonic() + grace_s
        while True:
            proc.poll()                      # reap the leader, or it counts as a member (a zombie)
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            if time.monotonic() > deadline:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.02)
    if proc.stdin is not None and proc.stdin.closed:
        proc.stdin = None    # closed by the caller already (communicate would flush it)
    try:       # a process that left the group may still hold the pipes: do not wait for it
        proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
        pass


class _TooLarge(Exception):
    """Internal: a local command printed more than its cap (``out``: what was read)."""

    def __init__(self, out: List[bytes]):
        super().__init__("output over the cap")
        self.out = out


_DEATH: Dict[str, Any] = {}


def _die_with_parent() -> Tuple[List[str], Optional[Callable[[], None]]]:
    """How the local board's shell is TERMed when this process goes
    (``PR_SET_PDEATHSIG``, SIGTERM), so it does not outlive a killed host: an argv prefix
    (util-linux ``setpriv --pdeathsig TERM``), else a ``preexec_fn`` calling ``prctl``. The
    prefix is preferred: a ``preexec_fn`` makes Python run its at-fork hooks in this process,
    and a Ctrl-C/SIGHUP handler that raises inside one is printed and swallowed
    (``Exception ignored in: <function _releaseLock>``). Looked up once; nothing off Linux."""
    if "how" not in _DEATH:
        _DEATH["how"] = ([], None)
        if sys.platform.startswith("linux"):
            import shutil

            setpriv = shutil.which("setpriv")
            if setpriv and subprocess.run([setpriv, "--pdeathsig", "TERM", "true"], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
                _DEATH["how"] = ([setpriv, "--pdeathsig", "TERM"], None)
            else:                               # util-linux before 2.33, busybox: prctl before exec
                try:
                    import ctypes
                    import signal

                    prctl = ctypes.CDLL(None, use_errno=True).prctl
                    term = int(signal.SIGTERM)

                    def preexec() -> None:
                        prctl(1, term, 0, 0, 0)          # PR_SET_PDEATHSIG = 1
                    _DEATH["how"] = ([], preexec)
                except (OSError, AttributeError):
                    pass
    how: Tuple[List[str], Optional[Callable[[], None]]] = _DEATH["how"]
    return how


class Transport:
    """Run commands and move files on a board. Use as a context manager.

    ``round_trips`` counts commands and file transfers (each waits for the board at least once).
    """

    board: str = "board"

    def __init__(self) -> None:
        self.round_trips = 0

    def __enter__(self) -> "Transport":
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def run(self, cmd: Command, *, timeout_s: Optional[float] = DEFAULT_COMMAND_TIMEOUT_S,
            input: Optional[bytes] = None, check: bool = False, hold_stdin: bool = False,
            max_output_bytes: Optional[int] = None) -> CommandResult:
        """Run ``cmd``; with ``check=True`` a non-zero exit raises :class:`RemoteCommandError`.
        ``hold_stdin``: stdin stays open after ``input`` with a heartbeat byte every
        ``HEARTBEAT_S`` s, so the command can tell when its controller is gone (EOF);
        ``max_output_bytes``: a command printing more on stdout is stopped (RemoteCommandError
        naming the board, with a short excerpt)."""
        self.round_trips += 1
        result = self._run(quote_command(cmd), timeout_s, input, hold_stdin, max_output_bytes)
        if check and not result.ok:
            raise RemoteCommandError(f"command failed ({result.error_text()}): {result.command[:120]}",
                                     board=self.board)
        return result

    def put(self, local: Union[str, os.PathLike], remote: str, *, offset: int = 0,
            progress: Optional[Progress] = None) -> int:
        """Copy ``local`` to ``remote`` starting at byte ``offset`` (resume: the remote file
        already holds the first ``offset`` bytes). Returns the bytes sent."""
        self.round_trips += 1
        return self._put(Path(local), remote, offset, progress)

    def get(self, remote: str, local: Union[str, os.PathLike]) -> int:
        """Copy ``remote`` to ``local``; returns the bytes received."""
        self.round_trips += 1
        return self._get(remote, Path(local))

    def sha256(self, remote: str) -> Optional[str]:
        """Hex sha256 of a file on the board, or None when it does not exist."""
        q = shlex.quote(remote)
        r = self.run(f"{SHA256_SH}; [ -f {q} ] && _sha256 < {q}", timeout_s=DEFAULT_COMMAND_TIMEOUT_S)
        return r.text().split()[0] if r.ok and r.stdout.strip() else None

    def exists(self, remote: str) -> bool:
        return self.run(["test", "-e", remote]).ok

    # -- implementations ------------------------------------------------------------------
    def _run(self, command: str, timeout_s: Optional[float], input: Optional[bytes], hold_stdin: bool = False,
             max_output_bytes: Optional[int] = None) -> CommandResult:
        raise NotImplementedError

    def _put(self, local: Path, remote: str, offset: int, progress: Optional[Progress]) -> int:
        raise NotImplementedError

    def _get(self, remote: str, local: Path) -> int:
        raise NotImplementedError


class LocalTransport(Transport):
    """This machine: ``sh -c`` in a subprocess, started in the home folder; files are copied."""

    def __init__(self, board: str = "local") -> None:
        super().__init__()
        self.board = board
        self.home = os.path.expanduser("~")

    def _abs(self, path: str) -> str:
        return os.path.join(self.home, os.path.expanduser(path))

    def _run(self, command: str, timeout_s: Optional[float], input: Optional[bytes], hold_stdin: bool = False,
             max_output_bytes: Optional[int] = None) -> CommandResult:
        start = time.monotonic()
        check_cancelled()
        prefix, preexec = _die_with_parent()
        with in_flight():
            with signals_deferred():    # an interrupt while the process starts cancels; _wait raises it
                proc = subprocess.Popen([*prefix, "sh", "-c", command], cwd=self.home, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                        preexec_fn=preexec)
            try:
                out, err = self._wait(proc, input, timeout_s, start, hold_stdin, max_output_bytes)
            except subprocess.TimeoutExpired as exc:
                stop_process_group(proc)
                raise RemoteCommandError(f"command timed out after {timeout_s:g} s: {command[:80]}",
                                         "raise the timeout, or check what hangs", board=self.board) from exc
            except _TooLarge as exc:
                stop_process_group(proc)
                raise _too_large(self.board, command, exc.out, max_output_bytes or 0) from None
            except BaseException:     # interrupted (KeyboardInterrupt, cancel_all): leave nothing running
                stop_process_group(proc, CANCEL_GRACE_S)
                raise
        return CommandResult(command, proc.returncode, out, err, time.monotonic() - start)

    @staticmethod
    def _wait(proc: "subprocess.Popen[bytes]", input: Optional[bytes], timeout_s: Optional[float],
              start: float, hold_stdin: bool = False, max_output_bytes: Optional[int] = None) -> Any:
        """Feed ``input``, read stdout (at most ``max_output_bytes``) and the tail of stderr in
        threads, and wait in slices of 0.1 s, so a cancellation is seen at once. ``hold_stdin``:
        stdin stays open with a heartbeat byte every ``HEARTBEAT_S`` until the command ends."""
        import threading

        out: List[bytes] = []
        err: deque = deque()
        over = threading.Event()

        def read_out() -> None:
            got = 0
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(1 << 16), b""):   # type: ignore[union-attr,attr-defined]
                out.append(chunk)
                got += len(chunk)
                if max_output_bytes is not None and got > max_output_bytes:
                    over.set()
                    return

        def read_err() -> None:
            kept = 0
            assert proc.stderr is not None
            for chunk in iter(lambda: proc.stderr.read1(1 << 16), b""):   # type: ignore[union-attr,attr-defined]
                err.append(chunk)
                kept += len(chunk)
                while kept - len(err[0]) >= STDERR_KEEP_BYTES:
                    kept -= len(err.popleft())

        readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
        for t in readers:
            t.start()
        assert proc.stdin is not None
        try:
            if input:
                proc.stdin.write(input)
                proc.stdin.flush()
            if not hold_stdin:
                proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        beat = time.monotonic()
        while True:
            check_cancelled()
            if over.is_set():
                raise _TooLarge(out)
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            try:
                proc.wait(0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if hold_stdin and time.monotonic() - beat >= HEARTBEAT_S:
                beat = time.monotonic()
                try:
                    proc.stdin.write(b"\n")
                    proc.stdin.flush()
                except (BrokenPipeError, OSError, ValueError):
                    pass
        try:
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        for t in readers:       # a process that left the group may hold the pipes: do not wait forever
            t.join(5.0)
        if over.is_set():
            raise _TooLarge(out)
        return b"".join(out), b"".join(err)

    def _put(self, local: Path, remote: str, offset: int, progress: Optional[Progress]) -> int:
        """Never through a link: a new file is created exclusively (``O_EXCL``: an existing name,
        a link included, is an error), a resumed one is opened with ``O_NOFOLLOW`` and must be a
        regular file with one link."""
        import stat as st_

        dest = self._abs(remote)
        total = local.stat().st_size
        sent = 0
        try:
            flags = os.O_NOFOLLOW | (os.O_RDWR if offset else os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            fd = os.open(dest, flags, 0o644)
            info = os.fstat(fd)
            if not st_.S_ISREG(info.st_mode) or info.st_nlink != 1:
                os.close(fd)
                raise OSError(0, f"{dest} is not a regular file of its own (a link?)")
            with open(local, "rb") as src, os.fdopen(fd, "r+b" if offset else "wb") as dst:
                src.seek(offset)
                dst.seek(offset)
                dst.truncate()
                while True:
                    check_cancelled()
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    dst.write(chunk)
                    sent += len(chunk)
                    if progress:
                        progress(offset + sent, total)
        except OSError as exc:
            raise TransferError(f"copying {local.name} to {dest} failed: {exc.strerror or exc}",
                                board=self.board) from exc
        return sent

    def _get(self, remote: str, local: Path) -> int:
        import shutil

        try:
            shutil.copyfile(self._abs(remote), local)
        except OSError as exc:
            raise TransferError(f"cannot copy {remote} from the board: {exc.strerror or exc}",
                                board=self.board) from exc
        return local.stat().st_size


def _same_regular_file(sftp: Any, handle: Any, remote: str, board: str) -> None:
    """The file open as ``handle`` is the regular file at ``remote`` (its lstat: not a link), with
    the same owner, size and mtime; else :class:`TransferError` (the upload restarts afresh)."""
    import stat as st_

    opened, named = handle.stat(), sftp.lstat(remote)
    if not st_.S_ISREG(named.st_mode or 0) or (opened.st_uid, opened.st_size, opened.st_mtime) != \
            (named.st_uid, named.st_size, named.st_mtime):
        raise TransferError(f"{remote} on the board is not the regular file it was (a link?)", board=board)


class SSHTransport(Transport):
    """A board over SSH. The connection opens lazily (first command) or on ``open()``/``with``."""

    def __init__(self, connection: SSHConnection) -> None:
        super().__init__()
        self.connection = connection
        self.board = connection.board
        self._sftp: Any = None

    def open(self) -> None:
        self.connection.connect()

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # pragma: no cover - a dead channel
                pass
            self._sftp = None
        self.connection.close()

    def _run(self, command: str, timeout_s: Optional[float], input: Optional[bytes], hold_stdin: bool = False,
             max_output_bytes: Optional[int] = None) -> CommandResult:
        return self.connection.run(command, timeout_s=timeout_s, input=input, hold_stdin=hold_stdin,
                                   max_output_bytes=max_output_bytes)

    def sftp(self):
        if self._sftp is None or self._sftp.sock.closed or not self.connection.connected:
            self._sftp = self.connection.sftp()
        return self._sftp

    def _put(self, local: Path, remote: str, offset: int, progress: Optional[Progress]) -> int:
        """Pipelined SFTP upload: up to ``MAX_IN_FLIGHT`` write requests outstanding, each
        acknowledged in order (paramiko's own pipelining drains to zero every 100 requests)."""
        import paramiko

        total = local.stat().st_size
        try:
            with in_flight():
                return self._put_pipelined(local, remote, offset, progress, total)
        except (paramiko.SSHException, EOFError, ConnectionError, OSError) as exc:
            if cancelled():
                raise KeyboardInterrupt("cancelled") from exc
            msg = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            if isinstance(exc, IOError) and not isinstance(exc, ConnectionError) and self.connection.connected:
                # the server refused a write (SFTP status): a full disk, permissions, a bad path
                raise TransferError(f"upload of {local.name} to {remote} failed: {msg}",
                                    "is the board's disk full? (df -h on the board)", board=self.board) from exc
            self._sftp = None
            raise BoardConnectionError(f"connection lost while uploading {local.name} "
                                       f"({offset / 1e6:.1f} MB were on the board, {total / 1e6:.1f} MB in all): "
                                       f"{msg}", board=self.board) from exc

    def _put_pipelined(self, local: Path, remote: str, offset: int, progress: Optional[Progress],
                       total: int) -> int:
        from paramiko.sftp import CMD_STATUS, CMD_WRITE, int64

        sent = 0
        sftp = self.sftp()
        # a new part is created exclusively (never through a name planted before it); a resumed
        # one must be the regular file at its name once opened (not a link to elsewhere)
        with open(local, "rb") as src, sftp.open(remote, "r+b" if offset else "wxb") as dst:
            if offset:
                _same_regular_file(sftp, dst, remote, self.board)
                dst.truncate(offset)
            src.seek(offset)
            pos = offset
            pending: deque = deque()
            last_report = 0
            while True:
                check_cancelled()
                chunk = src.read(CHUNK_BYTES)
                if not chunk:
                    break
                pending.append(sftp._async_request(type(None), CMD_WRITE, dst.handle, int64(pos), chunk))
                pos += len(chunk)
                if len(pending) >= MAX_IN_FLIGHT:
                    t, _ = sftp._read_response(pending.popleft())
                    if t != CMD_STATUS:
                        raise TransferError("unexpected SFTP reply to a write", board=self.board)
                    sent += CHUNK_BYTES  # approximate until the end
                    if progress and sent - last_report >= (1 << 20):
                        last_report = sent
                        progress(offset + sent, total)
            while pending:
                sftp._read_response(pending.popleft())
            sent = pos - offset
        if progress:
            progress(total, total)
        return sent

    def _get(self, remote: str, local: Path) -> int:
        import paramiko

        try:
            self.sftp().get(remote, str(local), max_concurrent_prefetch_requests=64)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._sftp = None
            raise TransferError(f"cannot fetch {remote} from the board: {exc}", board=self.board) from exc
        return local.stat().st_size
