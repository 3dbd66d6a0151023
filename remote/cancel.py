"""Cancellation of everything running on boards: one Ctrl-C stops every board job of a fleet.

:func:`cancel_all` sets one process-wide flag. Every command in flight (SSH or local) polls it
and, when set, stops its process group on the board (TERM, then KILL) and raises
:class:`KeyboardInterrupt` in its own thread; connections still being opened are aborted
through the hooks registered with :func:`abort_hook`. New commands, uploads and connections
refuse to start. :func:`cancel_all` waits (at most ``wait_s``) until nothing is in flight, so
the caller exits knowing the boards are clean. :func:`reset` re-arms the flag (a long-lived
Python process that wants to go on after an interrupt).
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator

__all__ = ["cancel_all", "cancelled", "check_cancelled", "reset", "in_flight", "abort_hook", "signals_deferred",
           "deferring", "CANCEL_WAIT_S"]

CANCEL_WAIT_S = 2.8          # how long cancel_all waits for board jobs to be stopped (TERM, then KILL)

_flag = threading.Event()
_cond = threading.Condition()
_running = {"n": 0}
_hooks: Dict[int, Callable[[], None]] = {}
_deferred = threading.local()


def cancelled() -> bool:
    """True once :func:`cancel_all` was called (until :func:`reset`)."""
    return _flag.is_set()


def check_cancelled() -> None:
    """Raise :class:`KeyboardInterrupt` when the work was cancelled."""
    if _flag.is_set():
        raise KeyboardInterrupt("cancelled")


def reset() -> None:
    _flag.clear()


@contextmanager
def in_flight() -> Iterator[None]:
    """Count a command (or upload) as running until the block ends."""
    with _cond:
        _running["n"] += 1
    try:
        yield
    finally:
        with _cond:
            _running["n"] -= 1
            _cond.notify_all()


@contextmanager
def signals_deferred() -> Iterator[None]:
    """While the block runs in this thread (a process being started: Python's at-fork hooks
    swallow an exception raised inside them), a signal handler that sees :func:`deferring`
    only cancels; the :class:`KeyboardInterrupt` comes from the next :func:`check_cancelled`."""
    depth = getattr(_deferred, "depth", 0)
    _deferred.depth = depth + 1
    try:
        yield
    finally:
        _deferred.depth = depth


def deferring() -> bool:
    """True inside :func:`signals_deferred` in this thread (signal handlers run in the main one)."""
    return getattr(_deferred, "depth", 0) > 0


@contextmanager
def abort_hook(fn: Callable[[], None]) -> Iterator[None]:
    """While the block runs, :func:`cancel_all` calls ``fn`` (e.g. close a socket being connected)."""
    key = id(fn)
    with _cond:
        _hooks[key] = fn
    try:
        yield
    finally:
        with _cond:
            _hooks.pop(key, None)


def cancel_all(wait_s: float = CANCEL_WAIT_S) -> bool:
    """Cancel every board job of this process; wait up to ``wait_s`` (s) until each command in
    flight has stopped its processes on the board. Returns True when all were stopped in time."""
    _flag.set()
    with _cond:
        hooks = list(_hooks.values())
    for fn in hooks:
        try:
            fn()
        except Exception:  # pragma: no cover - best effort: the socket may be gone already
            pass
    deadline = time.monotonic() + wait_s
    with _cond:
        while _running["n"] > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _cond.wait(left)
    return True
