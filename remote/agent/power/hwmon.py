"""Generic hwmon power meters (``power*_input``, uW) and energy meters (``energy*_input``, uJ),
and Intel RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``, uJ, wrapping at
``max_energy_range_uj``). Energy counters are integrated by counter difference, not sampled as
power. Runs on the board: Python 3.8.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from .base import PowerSource, glob_sorted, read_number, read_text

__all__ = ["HwmonSource", "RaplSource", "Unwrapper"]


class Unwrapper:
    """Turn a counter that wraps at ``range_`` (or resets, when the range is unknown) into a
    monotonic one: when a reading goes down, the range is added (the kernel's powercap rule)."""

    def __init__(self, range_: Optional[float]) -> None:
        self.range = range_
        self.last: Optional[float] = None
        self.offset = 0.0

    def __call__(self, raw: float) -> float:
        if self.last is not None and raw < self.last:
            # wrapped: add the range; a counter without a known range restarted from zero
            self.offset += self.range if self.range else self.last
        self.last = raw
        return raw + self.offset


class HwmonSource(PowerSource):
    """Every ``/sys/class/hwmon/hwmon*`` chip with ``power*_input`` (uW). When no chip reports
    power, chips with ``energy*_input`` (uJ) are used as energy counters instead."""

    name = "hwmon"
    measures = "hwmon power meters (what they cover depends on the chip: see the rail names)"

    def __init__(self) -> None:
        super().__init__()
        self.kind = "power"
        self.files: List[Tuple[str, str]] = []
        self._unwrap: Dict[str, Unwrapper] = {}

    def probe(self, root: str = "/") -> bool:
        self.root = root
        for kind, pattern, rx in (("power", "power*_input", r"power(\d+)_input$"),
                                  ("energy", "energy*_input", r"energy(\d+)_input$")):
            files = []
            for chip in self._glob(root, "/sys/class/hwmon/hwmon*"):
                chip_name = read_text(os.path.join(chip, "name")) or os.path.basename(chip)
                for f in glob_sorted(os.path.join(chip, pattern)):
                    m = re.search(rx, f)
                    if not m or read_number(f) is None:
                        continue
                    label = read_text(os.path.join(chip, "%s%s_label" % (kind, m.group(1)))) or "%s%s" % (kind, m.group(1))
                    files.append(("%s/%s" % (chip_name, label), f))
            if files:
                self.kind, self.files = kind, files
                self._unwrap = {rail: Unwrapper(None) for rail, _ in files}
                return True
        self.why_not = "no hwmon chip with power*_input or energy*_input under /sys/class/hwmon"
        return False

    def read(self) -> Dict[str, float]:
        out = {}
        for rail, f in self.files:
            v = read_number(f)
            if v is None:
                continue
            out[rail] = v / 1e6 if self.kind == "power" else self._unwrap[rail](v) / 1e6
        return out


class RaplSource(PowerSource):
    """Intel RAPL package domains (``intel-rapl:N``), cumulative energy in J. The counter wraps
    at ``max_energy_range_uj``; a reading that goes down adds the range. Readable by root only
    since Linux 5.10."""

    name = "rapl"
    kind = "energy"
    measures = "CPU package energy (Intel RAPL): the SoC package, not the wall or the board"

    def __init__(self) -> None:
        super().__init__()
        self.domains: List[Tuple[str, str]] = []
        self._unwrap: Dict[str, Unwrapper] = {}

    def probe(self, root: str = "/") -> bool:
        self.root = root
        zones = [z for z in self._glob(root, "/sys/class/powercap/intel-rapl:*")
                 if re.search(r"intel-rapl:\d+$", z)]
        if not zones:
            self.why_not = "no /sys/class/powercap/intel-rapl:N (not an Intel/AMD x86 CPU, or powercap missing)"
            return False
        domains, unreadable = [], []
        for z in zones:
            f = os.path.join(z, "energy_uj")
            if read_number(f) is None:
                unreadable.append(f)
                continue
            name = read_text(os.path.join(z, "name")) or os.path.basename(z)
            domains.append((name, f))
            self._unwrap[name] = Unwrapper(read_number(os.path.join(z, "max_energy_range_uj")))
        if not domains:
            self.why_not = "RAPL energy_uj is not readable (root only since Linux 5.10): %s" % ", ".join(unreadable)
            return False
        self.domains = domains
        return True

    def read(self) -> Dict[str, float]:
        out = {}
        for name, f in self.domains:
            uj = read_number(f)
            if uj is not None:
                out[name] = self._unwrap[name](uj) / 1e6
        return out
