"""The :class:`PowerSource` contract and the sysfs helpers the sources share.

A source reads one kind of sensor. ``kind`` says what ``read()`` returns:

- ``"power"``: instantaneous power per rail, in W;
- ``"energy"``: a cumulative energy counter per rail, in J, already unwrapped (monotonic).

Every path is joined under ``root`` (``"/"`` on a board, a fake tree in tests), so a source never
touches the real ``/sys`` when it is pointed somewhere else. Runs on the board: Python 3.8.
"""
from __future__ import annotations

import glob
import os
import threading
import time
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple, TypeVar

from ....errors import EdgeSDKError

__all__ = ["PowerSource", "Sample", "under", "read_text", "read_number", "total_of", "sum_of", "glob_sorted"]

#: One sample: ``(t_monotonic_s, {rail: value})``; the value is W (power) or cumulative J (energy).
Sample = Tuple[float, Dict[str, float]]

#: Rail names that measure a Jetson module's whole input (VDD_IN; the Nano calls it POM_5V_IN).
MODULE_INPUT_RAILS = ("VDD_IN", "POM_5V_IN")


def under(root: str, path: str) -> str:
    """``path`` (absolute, e.g. ``/sys/class/...``) inside the tree rooted at ``root``."""
    return os.path.join(root or "/", path.lstrip("/"))


def read_text(path: str) -> Optional[str]:
    """The stripped text of a small file (NUL bytes removed), or None when it cannot be read."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read().replace("\x00", "").strip()
    except OSError:
        return None


def read_number(path: str) -> Optional[float]:
    text = read_text(path)
    if text is None:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def total_of(rails: Dict[str, float]) -> Tuple[float, str]:
    """The whole-device figure of a Jetson-style rail set and what it is: the module input rail
    when one is present (its sub-rails are inside it and must not be added), else the sum."""
    for name in MODULE_INPUT_RAILS:
        if name in rails:
            return rails[name], "module input rail " + name
    return sum_of(rails)


def sum_of(rails: Dict[str, float]) -> Tuple[float, str]:
    """The sum of every rail and its label."""
    return float(sum(rails.values())), "sum of rails " + "+".join(sorted(rails))


class PowerSource:
    """Base class of a power source. Subclasses set ``name``, ``kind`` and implement ``probe``
    and ``read``; a source that streams (``tegrastats``) overrides :meth:`run` instead.

    ``probe(root)`` is cheap and says whether the sensor exists under ``root``; it stores what it
    found (paths, channels) for ``read``. ``read()`` returns ``{rail: W}`` (or cumulative J for
    ``kind == "energy"``). ``describe()`` says what is measured, for the result JSON.
    """

    name: ClassVar[str] = ""
    kind: str = "power"
    #: What the rails cover, in words (module input, CPU package, PMIC rails...).
    measures: ClassVar[str] = ""

    def __init__(self) -> None:
        self.root = "/"
        self.why_not = ""

    def probe(self, root: str = "/") -> bool:
        raise NotImplementedError

    def read(self) -> Dict[str, float]:
        raise NotImplementedError

    def total(self, rails: Dict[str, float]) -> Tuple[float, str]:
        """``(value, label)``: the whole-device figure from per-rail W (default: the sum)."""
        return sum_of(rails)

    def describe(self) -> Dict[str, object]:
        return {"source": self.name, "kind": self.kind, "measures": self.measures}

    def run(self, sink: Callable[[Sample], None], rate_hz: float, stop: threading.Event) -> None:
        """Sample until ``stop`` is set, calling ``sink((t_monotonic, rails))`` about ``rate_hz``
        times a second. The time stamp is taken right after the read, on ``time.monotonic``."""
        period = 1.0 / rate_hz
        next_t = time.monotonic()
        while not stop.is_set():
            try:
                rails = self.read()
            except (OSError, EdgeSDKError):  # a sensor that hiccups loses one sample
                rails = {}
            t = time.monotonic()
            if rails:
                sink((t, rails))
            next_t += period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (a busy CPU): skip, do not burst
                next_t = time.monotonic()
                delay = 0.0
            stop.wait(delay)

    @staticmethod
    def _glob(root: str, pattern: str) -> List[str]:
        return glob_sorted(under(root, pattern))


def glob_sorted(pattern: str) -> List[str]:
    """Paths matching ``pattern`` (absolute), sorted."""
    return sorted(glob.glob(pattern))


_S = TypeVar("_S", bound="BackgroundSampler")


class BackgroundSampler:
    """Runs :meth:`_run` on a daemon thread between :meth:`start` and :meth:`stop` (or as a context
    manager); ``_run`` returns once ``self._stop`` is set."""

    thread_name: ClassVar[str] = "sampler"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _run(self) -> None:
        raise NotImplementedError

    def _before_start(self) -> None:
        """Called on the caller's thread just before the sampling thread starts."""

    def start(self: _S) -> _S:
        self._before_start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
