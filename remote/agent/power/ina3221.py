"""TI INA3221 three-channel power monitors on Jetson modules, through the kernel's two drivers.

- JetPack 5/6, upstream hwmon driver ``ina3221``: the chip is found by scanning
  ``/sys/bus/i2c/devices/*/name`` (never a hard-coded ``hwmonN``); per channel K = 1..3
  ``inK_label``, ``inK_input`` (bus voltage, mV) and ``currK_input`` (mA); no power file, so
  P = V x I. ``NC`` channels are skipped, and so is ``in7`` (a shunt-voltage sum, not a rail).
- JetPack 4, NVIDIA IIO driver ``ina3221x``: ``rail_name_N`` and ``in_powerN_input`` (mW).

These rails measure the Jetson module, not the carrier board. Runs on the board: Python 3.8.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Tuple

from .base import PowerSource, glob_sorted, read_number, read_text, total_of

__all__ = ["Ina3221Hwmon", "Ina3221Iio"]

_MEASURES = "Jetson module rails (INA3221 on the module): the module input, not the carrier board"


class _JetsonRails(PowerSource):
    measures = _MEASURES

    def total(self, rails: Dict[str, float]) -> Tuple[float, str]:
        return total_of(rails)


class Ina3221Hwmon(_JetsonRails):
    """INA3221 through the upstream hwmon driver (JetPack 5 and 6): P = V (mV) x I (mA)."""

    name = "ina3221-hwmon"

    def __init__(self) -> None:
        super().__init__()
        #: (rail, voltage file, current file) per connected channel.
        self.channels: List[Tuple[str, str, str]] = []

    def probe(self, root: str = "/") -> bool:
        self.root = root
        chips = []
        for name_file in self._glob(root, "/sys/bus/i2c/devices/*/name"):
            if read_text(name_file) == "ina3221":
                chips.append(os.path.dirname(name_file))
        if not chips:
            self.why_not = "no i2c device named ina3221 under /sys/bus/i2c/devices"
            return False
        channels: List[Tuple[str, str, str]] = []
        seen = set()
        for chip in chips:
            hwmon_dirs = glob_sorted(os.path.join(chip, "hwmon", "hwmon*"))
            if not hwmon_dirs and os.path.exists(os.path.join(chip, "curr1_input")):
                hwmon_dirs = [chip]
            for hw in hwmon_dirs:
                for curr in glob_sorted(os.path.join(hw, "curr*_input")):
                    k = re.match(r"curr(\d+)_input$", os.path.basename(curr))
                    if not k:
                        continue
                    k_s = k.group(1)
                    volt = os.path.join(hw, "in%s_input" % k_s)
                    label = read_text(os.path.join(hw, "in%s_label" % k_s)) or "%s:in%s" % (os.path.basename(chip), k_s)
                    if label.upper() == "NC" or not os.path.exists(volt):
                        continue
                    if label in seen:
                        label = "%s:%s" % (os.path.basename(chip), label)
                    seen.add(label)
                    channels.append((label, volt, curr))
        if not channels:
            self.why_not = "ina3221 chip found, but no connected channel (inK_input + currK_input)"
            return False
        self.channels = channels
        return True

    def read(self) -> Dict[str, float]:
        out = {}
        for label, volt, curr in self.channels:
            mv, ma = read_number(volt), read_number(curr)
            if mv is not None and ma is not None:
                out[label] = mv * ma / 1e6
        return out


class Ina3221Iio(_JetsonRails):
    """INA3221 through NVIDIA's IIO driver ``ina3221x`` (JetPack 4): ``in_powerN_input`` in mW."""

    name = "ina3221-iio"
    _PATTERNS = (
        "/sys/bus/i2c/drivers/ina3221x/*/iio:device*",
        "/sys/bus/i2c/devices/*/iio:device*",
        "/sys/bus/iio/devices/iio:device*",
    )

    def __init__(self) -> None:
        super().__init__()
        self.channels: List[Tuple[str, str]] = []

    def probe(self, root: str = "/") -> bool:
        self.root = root
        devices = []
        for pattern in self._PATTERNS:
            for d in self._glob(root, pattern):
                real = os.path.realpath(d)
                if real not in devices and glob_sorted(os.path.join(d, "rail_name_*")):
                    devices.append(real)
        channels: List[Tuple[str, str]] = []
        seen = set()
        for dev in devices:
            for rail_file in glob_sorted(os.path.join(dev, "rail_name_*")):
                n = rail_file.rsplit("_", 1)[-1]
                rail = read_text(rail_file)
                power = os.path.join(dev, "in_power%s_input" % n)
                if not rail or rail.upper() == "NC" or not os.path.exists(power) or rail in seen:
                    continue
                seen.add(rail)
                channels.append((rail, power))
        if not channels:
            self.why_not = "no ina3221x IIO device with rail_name_N / in_powerN_input"
            return False
        self.channels = channels
        return True

    def read(self) -> Dict[str, float]:
        out = {}
        for rail, power in self.channels:
            mw = read_number(power)
            if mw is not None:
                out[rail] = mw / 1e3
        return out

