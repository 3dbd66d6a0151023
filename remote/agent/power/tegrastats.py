"""NVIDIA ``tegrastats`` as a power source (fallback when sysfs is not readable).

Power fields are ``NAME cur/avg`` in milliwatts, in three dialects:

- JetPack 4 (L4T R32), no unit: ``VDD_IN 5071/4811``, ``POM_5V_IN 933/933``;
- JetPack 5 and 6, after a leading time stamp: ``VDD_IN 2957mW/2957mW``;
- JetPack 7, three values: ``VDD_GPU_SOC 5139mW/5139mW/5139mW``.

Only the first (instantaneous) value is used: the others are the tool's running statistics, and
energy is integrated from the samples, never from those. Runs on the board: Python 3.8.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from .base import PowerSource, Sample, total_of

__all__ = ["TegrastatsSource", "parse_tegrastats"]

# NAME cur[mW]/avg[mW][/max[mW]], delimited by whitespace on both sides. ``RAM 2257/30536MB`` and
# ``IRAM 0/252kB`` do not match: their last number carries another unit.
_RAIL = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?:/(\d+)(?:mW)?)?(?=\s|$)")
#: Memory fields and unconnected channels (``NC 0mW/0mW`` on AGX Orin) are not rails.
_NOT_RAILS = frozenset(("RAM", "SWAP", "IRAM", "LFB", "NC"))


def parse_tegrastats(line: str) -> Dict[str, float]:
    """``{rail: W}`` from one tegrastats line (any dialect): the instantaneous value of each
    power field. A line without power fields gives ``{}``."""
    out = {}
    for m in _RAIL.finditer(line):
        name = m.group(1)
        if name in _NOT_RAILS:
            continue
        out[name] = int(m.group(2)) / 1e3
    return out


class TegrastatsSource(PowerSource):
    """Streams ``tegrastats --interval <ms>`` and time-stamps each line when it arrives."""

    name = "tegrastats"
    measures = "Jetson module rails (tegrastats): the module input, not the carrier board"

    def __init__(self) -> None:
        super().__init__()
        self.exe: Optional[str] = None
        #: Called with ``(t_monotonic, line)`` for every line while :meth:`run` streams (telemetry).
        self.line_listeners: List[Callable[[float, str], None]] = []

    def probe(self, root: str = "/") -> bool:
        self.root = root
        self.exe = shutil.which("tegrastats")
        if self.exe is None:
            self.why_not = "tegrastats is not on PATH"
            return False
        return True

    def total(self, rails: Dict[str, float]) -> Tuple[float, str]:
        return total_of(rails)

    def _spawn(self, interval_ms: int) -> "subprocess.Popen[str]":
        return subprocess.Popen([self.exe or "tegrastats", "--interval", str(interval_ms)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                universal_newlines=True, bufsize=1)

    def read(self) -> Dict[str, float]:
        """One line's rails (starts tegrastats, reads a line with power fields, stops it)."""
        proc = self._spawn(100)
        try:
            deadline = time.monotonic() + 5.0
            assert proc.stdout is not None
            for line in proc.stdout:
                rails = parse_tegrastats(line)
                if rails or time.monotonic() > deadline:
                    return rails
            return {}
        finally:
            _stop(proc)

    def run(self, sink: Callable[[Sample], None], rate_hz: float, stop: threading.Event) -> None:
        proc = self._spawn(max(1, int(round(1000.0 / rate_hz))))

        def stop_when_told() -> None:  # ends the line loop below with EOF; it closes the pipe
            stop.wait()
            if proc.poll() is None:
                proc.terminate()

        threading.Thread(target=stop_when_told, name="tegrastats-stop", daemon=True).start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                t = time.monotonic()
                rails = parse_tegrastats(line)
                if rails:
                    sink((t, rails))
                for listener in self.line_listeners:
                    listener(t, line)
                if stop.is_set():
                    break
        finally:
            _stop(proc)


def _stop(proc: "subprocess.Popen[str]") -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        try:
            proc.stdout.close()
        except OSError:
            pass
