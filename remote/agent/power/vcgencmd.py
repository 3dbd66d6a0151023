"""Raspberry Pi 5 PMIC rails through ``vcgencmd pmic_read_adc``.

Lines look like ``  VDD_CORE_A current(7)=10.87674000A`` and ``  3V3_SYS_V volt(9)=3.30632200V``;
``_A`` and ``_V`` lines are paired by rail name (the bracketed channel numbers do not
correspond). Rails with a voltage only (``EXT5V_V``, ``BATT_V``) carry no power. The sum misses
the 5 V loads (USB, HATs). Runs on the board: Python 3.8.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from typing import Dict, Optional

from ....errors import PowerError
from .base import PowerSource

__all__ = ["VcgencmdSource", "parse_pmic_read_adc"]

_LINE = re.compile(r"^\s*(\S+)_([AV])\s+\w+\(\d+\)=\s*([-+0-9.eE]+)\s*[AV]\s*$")


def parse_pmic_read_adc(text: str) -> Dict[str, float]:
    """``{rail: W}`` from ``vcgencmd pmic_read_adc`` output: current x voltage per rail name."""
    amps: Dict[str, float] = {}
    volts: Dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            (amps if m.group(2) == "A" else volts)[m.group(1)] = float(m.group(3))
    return {rail: amps[rail] * volts[rail] for rail in sorted(amps) if rail in volts}


class VcgencmdSource(PowerSource):
    name = "vcgencmd"
    measures = "Raspberry Pi 5 PMIC rails (SoC, memory, 3V3/1V8 rails): misses 5 V loads (USB, HATs)"

    def __init__(self) -> None:
        super().__init__()
        self.exe: Optional[str] = None

    def probe(self, root: str = "/") -> bool:
        self.root = root
        self.exe = shutil.which("vcgencmd")
        if self.exe is None:
            self.why_not = "vcgencmd is not on PATH"
            return False
        try:
            ok = bool(self.read())
        except PowerError as exc:
            self.why_not = exc.message
            return False
        if not ok:
            self.why_not = "vcgencmd pmic_read_adc printed no current/voltage pairs (not a Raspberry Pi 5?)"
        return ok

    def read(self) -> Dict[str, float]:
        try:
            out = subprocess.run([self.exe or "vcgencmd", "pmic_read_adc"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PowerError("vcgencmd pmic_read_adc failed: %s" % exc) from exc
        if out.returncode != 0:
            raise PowerError("vcgencmd pmic_read_adc exited %d: %s" % (out.returncode, out.stderr.strip()))
        return parse_pmic_read_adc(out.stdout)
