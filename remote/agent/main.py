"""The board agent's command line: ``<python> <agent.pyz> <command> --request <file|->``.

With ``--watch`` the request is the first line of stdin and stdin stays open: a watchdog thread
ends the job (TERM to its process group, KILL after ``WATCHDOG_GRACE_S``) when stdin reaches EOF
or stays silent for ``WATCHDOG_SILENCE_S`` (the host sends a byte every 2 s), i.e. when the
SSH channel or the host process that controls it is gone; on Linux the agent also asks for
TERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``). SIGTERM and SIGHUP are handled like
Ctrl-C (cleanup, then exit 143/129).

Prints exactly ONE JSON document on stdout and exits 0, or, on failure, prints
``{"error": {"type", "message", "hint"}}`` and exits 2 (an :class:`~sdk.errors.EdgeSDKError`:
bad request, missing model, runtime unavailable...) or 1 (anything else; the traceback goes to
stderr, never stdout). While a command runs, file descriptor 1 points at stderr, so a runtime
that prints (TensorRT, ONNX Runtime logs) cannot corrupt the JSON. Commands: see
:data:`.commands.COMMANDS`. Runs on the board: Python 3.8.
"""
from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["main", "parse_args", "WATCHDOG_SILENCE_S", "WATCHDOG_GRACE_S"]

USAGE = "usage: python edgesdk-agent.pyz {version,facts,bench,infer,profile,clean} [--request FILE|-] [--watch]"
WATCHDOG_SILENCE_S = 30.0      # no heartbeat on stdin for this long: the controller is gone
WATCHDOG_GRACE_S = 2.0         # between TERM (cleanup) and KILL of the job's process group
_STATE: Dict[str, Any] = {"watch": False, "signal": None}


def parse_args(argv: List[str]) -> Tuple[str, Optional[str]]:
    """``(command, request path or "-" or None)``; ``--watch`` is noted in ``_STATE``; bad
    arguments raise InputError."""
    from ...errors import InputError

    if not argv or argv[0].startswith("-"):
        raise InputError("no agent command given", USAGE)
    command, request, rest = argv[0], None, argv[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--request" and rest:
            request = rest.pop(0)
        elif arg.startswith("--request="):
            request = arg.split("=", 1)[1]
        elif arg == "--watch":
            _STATE["watch"] = True
        else:
            raise InputError("unexpected argument '%s'" % arg, USAGE)
    return command, request


def _on_signal(signum: int, _frame: Any) -> None:
    """SIGTERM/SIGHUP: like Ctrl-C (the command's cleanup runs: clocks restored, temp files removed)."""
    if _STATE["signal"] is None:
        _STATE["signal"] = signum
        raise KeyboardInterrupt


def _end_job(why: str) -> None:
    """The controller is gone: TERM the job's process group (its own session: sshd or the local
    board started it with setsid), KILL it after ``WATCHDOG_GRACE_S``."""
    try:
        sys.stderr.write("edgesdk agent: %s; stopping\n" % why)
        sys.stderr.flush()
    except (OSError, ValueError):      # stderr went with the controller
        pass
    pg = os.getpgrp()
    group = pg == os.getsid(0)         # a session of its own: the whole group is this job
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            if group:
                os.killpg(pg, sig)
            else:
                os.kill(os.getpid(), sig)
        except OSError:
            pass
        time.sleep(WATCHDOG_GRACE_S)


def _watchdog(fd: int) -> None:
    """Read the heartbeat on ``fd`` (stdin); EOF or silence ends the job."""
    import select

    last = time.monotonic()
    while True:
        try:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                if not os.read(fd, 4096):
                    return _end_job("the controller closed stdin (host or SSH channel gone)")
                last = time.monotonic()
            elif time.monotonic() - last > WATCHDOG_SILENCE_S:
                return _end_job("no heartbeat from the controller for %g s" % WATCHDOG_SILENCE_S)
        except OSError:
            return _end_job("stdin failed")


def _die_with_parent() -> None:
    """Linux: TERM this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``, via ctypes)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:      # the parent went before the request was made
            os.kill(os.getpid(), signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _start_watch() -> None:
    _die_with_parent()
    threading.Thread(target=_watchdog, args=(0,), name="edgesdk-watchdog", daemon=True).start()


def _read_line(fd: int) -> str:
    """The first line of ``fd`` (raw reads: the rest of stdin is the heartbeat)."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buf += chunk
    return buf.decode("utf-8")


def read_request(source: Optional[str]) -> Dict[str, Any]:
    from ...errors import ConfigError, InputError

    if source is None:
        return {}
    try:
        if source == "-" and _STATE["watch"]:
            text = _read_line(0)
            _start_watch()
        elif source == "-":
            text = sys.stdin.read()
        else:
            text = open(source, "r", encoding="utf-8").read()
    except OSError as exc:
        raise InputError("cannot read the request file '%s': %s" % (source, exc)) from exc
    if not text.strip():
        return {}
    try:
        request = json.loads(text)
    except ValueError as exc:
        raise ConfigError("the request is not valid JSON: %s" % exc) from exc
    if not isinstance(request, dict):
        raise ConfigError("the request must be a JSON object")
    return request


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null (strict JSON has no such numbers)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, _on_signal)
    try:
        return _main(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv: List[str]) -> int:
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # anything printed while the command runs goes to stderr
    code = 0
    try:
        from ...errors import EdgeSDKError

        try:
            from .commands import run_command

            command, source = parse_args(argv)
            doc: Dict[str, Any] = run_command(command, read_request(source))
        except EdgeSDKError as exc:
            code = 2
            doc = {"error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}}
        except KeyboardInterrupt:
            code = 128 + int(_STATE["signal"] or signal.SIGINT)
            doc = {"error": {"type": "Interrupted", "message": "the agent was interrupted", "hint": None}}
        except Exception as exc:  # noqa: BLE001 - the one place that turns anything into JSON
            traceback.print_exc(file=sys.stderr)
            code = 1
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            doc = {"error": {"type": type(exc).__name__, "message": first or type(exc).__name__,
                             "hint": "unexpected error in the board agent; its traceback is on stderr"}}
        text = json.dumps(_clean(doc), default=str, allow_nan=False)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):       # the controller is gone: nobody to tell
        pass
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
