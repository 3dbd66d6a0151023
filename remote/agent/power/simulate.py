"""SIMULATION ONLY: fake power sensors for tests and demos on machines without them.

Nothing here measures anything. It writes files laid out like a board's sysfs, whose values follow
known functions of ``time.monotonic()``, so the real sources and sampler can be run against them
and their integrated energy checked against the exact integral:

- :class:`SimulatedBoard` writes a tree under a folder (use it as the profile's ``sysfs_root``):
  layout ``"jetson-jp5"`` (INA3221 hwmon, JetPack 5/6), ``"jetson-jp4"`` (INA3221 IIO,
  JetPack 4), ``"rapl"`` (an Intel RAPL package counter that wraps at a small range) or
  ``"hwmon"`` (a generic ``power1_input`` meter), plus the static facts a Jetson shows
  (``/etc/nv_tegra_release``, nvpmodel status, clocks, thermal zones, CUDA version).
  A writer thread rewrites the changing files atomically at ``update_hz``.
- :func:`write_fake_tegrastats` writes an executable ``tegrastats`` that prints real-format
  lines (JetPack 4, 5/6 or 7 dialect) at ``--interval`` ms with the same known signal.

Each rail's power is ``base_w + amp_w * sin(2 pi (t - t0) / period_s)`` (W), t on the monotonic
clock; :meth:`SimulatedBoard.energy_j` gives the exact integral. Runs on Python 3.8.
"""
from __future__ import annotations

import json
import math
import os
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from ....atomic import atomic_write

__all__ = ["SineRail", "SimulatedBoard", "write_fake_tegrastats", "LAYOUTS", "DEFAULT_RAILS"]

LABEL = "SIMULATION (edgesdk fake power sensor; not a measurement)"


@dataclass(frozen=True)
class SineRail:
    """A simulated rail: ``base_w + amp_w * sin(2 pi (t - t0) / period_s)`` watts."""

    name: str
    base_w: float
    amp_w: float = 0.0
    period_s: float = 2.0

    def watts(self, t: float, t0: float) -> float:
        return self.base_w + self.amp_w * math.sin(2 * math.pi * (t - t0) / self.period_s)

    def energy_j(self, t1: float, t2: float, t0: float) -> float:
        """Exact integral of :meth:`watts` over ``[t1, t2]`` (J)."""
        w = 2 * math.pi / self.period_s
        return self.base_w * (t2 - t1) - self.amp_w / w * (math.cos(w * (t2 - t0)) - math.cos(w * (t1 - t0)))


#: Jetson Orin Nano / Xavier NX-like rails: VDD_IN is the module input, the others are inside it.
DEFAULT_RAILS = (
    SineRail("VDD_IN", 5.0, 1.0, 2.0),
    SineRail("VDD_CPU_GPU_CV", 1.5, 0.5, 2.0),
    SineRail("VDD_SOC", 1.2, 0.0, 2.0),
)
#: layout -> the suffix of its ``_static_*`` (files that do not change) and ``_dynamic_*`` writers
_LAYOUT_METHODS = {"jetson-jp5": "jp5", "jetson-jp4": "jp4", "rapl": "rapl", "hwmon": "hwmon"}
LAYOUTS = tuple(_LAYOUT_METHODS)


def _write(path: Path, text: str) -> None:
    """Write atomically (temp file + rename), so a reader never sees half a value."""
    atomic_write(path, text)


class SimulatedBoard:
    """SIMULATION: a fake sysfs tree under ``root`` for one ``layout`` (see :data:`LAYOUTS`).

    Use as a context manager: the tree is written on entry and a writer thread keeps the
    changing files up to date at ``update_hz`` until exit. ``t0`` is the signal's origin on
    ``time.monotonic``. For ``"rapl"`` the counter wraps at ``rapl_range_uj``.
    """

    def __init__(self, root: Union[str, os.PathLike], layout: str = "jetson-jp5",
                 rails: Sequence[SineRail] = DEFAULT_RAILS, update_hz: float = 200.0,
                 rapl_range_uj: int = 2_000_000, volts_mv: int = 5000, locked: bool = True) -> None:
        if layout not in LAYOUTS:
            raise ValueError("unknown layout %r; known: %s" % (layout, ", ".join(LAYOUTS)))
        self.root = Path(root)
        self.layout = layout
        self.rails = list(rails)
        self.update_hz = update_hz
        self.rapl_range_uj = int(rapl_range_uj)
        self.volts_mv = int(volts_mv)
        self.locked = bool(locked)
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._dynamic: Dict[str, Path] = {}

    # -- the known input ---------------------------------------------------------------------------
    def watts(self, rail: str, t: float) -> float:
        return self._rail(rail).watts(t, self.t0)

    def energy_j(self, rail: str, t1: float, t2: float) -> float:
        """Exact energy of ``rail`` over ``[t1, t2]`` (monotonic s), in J."""
        return self._rail(rail).energy_j(t1, t2, self.t0)

    def _rail(self, name: str) -> SineRail:
        for r in self.rails:
            if r.name == name:
                return r
        raise KeyError(name)

    # -- the tree ------------------------------------------------------------------------------------
    def p(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def write_static(self) -> None:
        """The files that do not change: chip names, labels, facts files."""
        _write(self.p("/SIMULATION.txt"), LABEL + "\nlayout: %s\n" % self.layout)
        getattr(self, "_static_" + _LAYOUT_METHODS[self.layout])()

    def _static_jp5(self) -> None:
        dev = "/sys/bus/i2c/devices/1-0040"
        _write(self.p(dev + "/name"), "ina3221\n")
        hw = dev + "/hwmon/hwmon3"
        _write(self.p(hw + "/name"), "ina3221\n")
        for k, rail in enumerate(self.rails[:3], start=1):
            _write(self.p("%s/in%d_label" % (hw, k)), rail.name + "\n")
        for k in range(len(self.rails[:3]) + 1, 4):  # unused channels are labelled NC
            _write(self.p("%s/in%d_label" % (hw, k)), "NC\n")
            _write(self.p("%s/in%d_input" % (hw, k)), "0\n")
            _write(self.p("%s/curr%d_input" % (hw, k)), "0\n")
        _write(self.p(hw + "/in7_input"), "12345\n")  # shunt-voltage sum (uV): not a rail
        _write(self.p("/sys/bus/i2c/devices/0-0050/name"), "eeprom\n")
        self._jetson_facts("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
                           "DATE: Tue Aug  1 19:57:35 UTC 2023", "ga10b")

    def _static_jp4(self) -> None:
        dev = "/sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
        for n, rail in enumerate(self.rails[:3]):
            _write(self.p("%s/rail_name_%d" % (dev, n)), rail.name + "\n")
            _write(self.p("%s/warn_current_limit_%d" % (dev, n)), "32760\n")
            _write(self.p("%s/crit_current_limit_%d" % (dev, n)), "32760\n")
        self._jetson_facts("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64, "
                           "DATE: Sat Feb 19 17:05:08 UTC 2022", "gpu")

    def _static_rapl(self) -> None:
        z = "/sys/class/powercap/intel-rapl:0"
        _write(self.p(z + "/name"), "package-0\n")
        _write(self.p(z + "/max_energy_range_uj"), "%d\n" % self.rapl_range_uj)
        _write(self.p(z + ":0/name"), "core\n")  # a sub-zone: inside the package, not added
        _write(self.p(z + ":0/energy_uj"), "0\n")

    def _static_hwmon(self) -> None:
        hw = "/sys/class/hwmon/hwmon0"
        _write(self.p(hw + "/name"), "simpower\n")
        _write(self.p(hw + "/power1_label"), self.rails[0].name + "\n")

    def _jetson_facts(self, release: str, gpu_node: str) -> None:
        _write(self.p("/etc/nv_tegra_release"), release + "\n")
        _write(self.p("/var/lib/nvpmodel/status"), "pmode:0002\n")
        _write(self.p("/etc/nvpmodel.conf"),
               "< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=5W >\n"
               "< POWER_MODEL ID=2 NAME=10W >\n< PM_CONFIG DEFAULT=2 >\n")
        _write(self.p("/sys/devices/system/cpu/online"), "0-3\n")
        for c in range(4):  # locked (what jetson_clocks leaves): min == max; unlocked: min is the floor
            base = "/sys/devices/system/cpu/cpu%d/cpufreq/" % c
            _write(self.p(base + "scaling_min_freq"), "1479000\n" if self.locked else "102000\n")
            _write(self.p(base + "scaling_max_freq"), "1479000\n")
            _write(self.p(base + "cpuinfo_max_freq"), "1479000\n")
            _write(self.p(base + "scaling_cur_freq"), "1479000\n" if self.locked else "729600\n")
        df = "/sys/class/devfreq/57000000.%s" % gpu_node
        _write(self.p(df + "/min_freq"), "921600000\n" if self.locked else "76800000\n")
        _write(self.p(df + "/max_freq"), "921600000\n")
        _write(self.p(df + "/cur_freq"), "921600000\n" if self.locked else "306000000\n")
        _write(self.p(df + "/device/load"), "0\n")  # per mille; rewritten by the writer thread
        _write(self.p("/sys/kernel/debug/bpmp/debug/clk/emc/rate"), "1600000000\n" if self.locked else "665600000\n")
        _write(self.p("/sys/kernel/debug/bpmp/debug/clk/emc/max_rate"), "1600000000\n")
        _write(self.p(df + "/device/of_node/name"), gpu_node + "\x00")
        for i, (kind, milli_c) in enumerate((("CPU-therm", 41500), ("GPU-therm", 39000))):
            _write(self.p("/sys/class/thermal/thermal_zone%d/type" % i), kind + "\n")
            _write(self.p("/sys/class/thermal/thermal_zone%d/temp" % i), "%d\n" % milli_c)
        _write(self.p("/usr/local/cuda/version.json"), json.dumps({"cuda": {"name": "CUDA SDK", "version": "11.4.315"}}))

    def write_dynamic(self, t: Optional[float] = None) -> None:
        """Write the changing files for time ``t`` (default: now)."""
        t = time.monotonic() if t is None else t
        getattr(self, "_dynamic_" + _LAYOUT_METHODS[self.layout])(t)

    def _gpu_load(self, t: float, gpu_node: str) -> None:
        """GPU load (per mille) following the second rail's signal, so telemetry has a known shape."""
        rail = self.rails[min(1, len(self.rails) - 1)]
        span = max(1e-9, 2 * abs(rail.amp_w)) if rail.amp_w else 1.0
        frac = 0.5 + (rail.watts(t, self.t0) - rail.base_w) / span if rail.amp_w else 0.5
        _write(self.p("/sys/class/devfreq/57000000.%s/device/load" % gpu_node), "%d\n" % int(round(1000 * frac)))

    def _dynamic_jp5(self, t: float) -> None:
        self._gpu_load(t, "ga10b")
        hw = "/sys/bus/i2c/devices/1-0040/hwmon/hwmon3"
        for k, rail in enumerate(self.rails[:3], start=1):
            ma = rail.watts(t, self.t0) * 1e6 / self.volts_mv
            _write(self.p("%s/in%d_input" % (hw, k)), "%d\n" % self.volts_mv)
            _write(self.p("%s/curr%d_input" % (hw, k)), "%d\n" % int(round(ma)))

    def _dynamic_jp4(self, t: float) -> None:
        self._gpu_load(t, "gpu")
        dev = "/sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
        for n, rail in enumerate(self.rails[:3]):
            mw = rail.watts(t, self.t0) * 1e3
            _write(self.p("%s/in_power%d_input" % (dev, n)), "%d\n" % int(round(mw)))
            _write(self.p("%s/in_voltage%d_input" % (dev, n)), "%d\n" % self.volts_mv)
            _write(self.p("%s/in_current%d_input" % (dev, n)), "%d\n" % int(round(mw * 1e3 / self.volts_mv)))

    def _dynamic_rapl(self, t: float) -> None:
        uj = self.rails[0].energy_j(self.t0, t, self.t0) * 1e6
        _write(self.p("/sys/class/powercap/intel-rapl:0/energy_uj"), "%d\n" % (int(uj) % self.rapl_range_uj))

    def _dynamic_hwmon(self, t: float) -> None:
        _write(self.p("/sys/class/hwmon/hwmon0/power1_input"), "%d\n" % int(round(self.rails[0].watts(t, self.t0) * 1e6)))

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> "SimulatedBoard":
        self.write_static()
        self.write_dynamic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="simulated-sysfs", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        period = 1.0 / self.update_hz
        while not self._stop.wait(period):
            self.write_dynamic()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "SimulatedBoard":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_TEGRASTATS = '''#!{python}
# {label}
# A fake `tegrastats`: prints real-format lines ({dialect} dialect) every --interval ms.
import math, sys, time
RAILS = {rails}
T0 = {t0!r}
DIALECT = {dialect!r}
interval_ms = 1000
args = sys.argv[1:]
if "--interval" in args:
    interval_ms = int(args[args.index("--interval") + 1])
avg = {{}}
n = 0
while True:
    t = time.monotonic()
    n += 1
    parts = []
    for name, base, amp, period in RAILS:
        mw = int(round((base + amp * math.sin(2 * math.pi * (t - T0) / period)) * 1e3))
        avg[name] = avg.get(name, 0) + (mw - avg.get(name, 0)) / n
        a = int(round(avg[name]))
        if DIALECT == "jp4":
            parts.append("%s %d/%d" % (name, mw, a))
        elif DIALECT == "jp7":
            parts.append("%s %dmW/%dmW/%dmW" % (name, mw, a, max(mw, a)))
        else:
            parts.append("%s %dmW/%dmW" % (name, mw, a))
    if DIALECT == "jp4":
        head = "RAM 1608/3956MB (lfb 76x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lru 0kB) CPU [8%@1479,3%@1479,4%@1479,2%@1479] EMC_FREQ 0%@1600 GR3D_FREQ 0%@921 APE 25 PLL@34C CPU@36.5C PMIC@100C GPU@35C AO@43C thermal@35.75C"
    else:
        head = time.strftime("%m-%d-%Y %H:%M:%S") + " RAM 3645/7620MB (lfb 4x4MB) SWAP 0/3810MB (cached 0MB) CPU [2%@729,1%@729,0%@729,0%@729,off,off] GR3D_FREQ 0%@[305] cpu@47.5C soc2@46.4C soc0@46.2C gpu@46.5C tj@47.5C soc1@46.2C"
    sys.stdout.write(head + " " + " ".join(parts) + "\\n")
    sys.stdout.flush()
    time.sleep(interval_ms / 1000.0)
'''


def write_fake_tegrastats(bin_dir: Union[str, os.PathLike], rails: Sequence[SineRail] = DEFAULT_RAILS,
                          t0: Optional[float] = None, dialect: str = "jp5") -> Path:
    """SIMULATION: write an executable ``tegrastats`` into ``bin_dir`` (put it first on PATH).
    It prints lines in the ``dialect`` (``jp4``, ``jp5`` (also 6) or ``jp7``) whose rails follow
    ``rails`` with origin ``t0`` (monotonic s; default now). Returns its path."""
    if dialect not in ("jp4", "jp5", "jp7"):
        raise ValueError("dialect must be jp4, jp5 or jp7")
    t0 = time.monotonic() if t0 is None else t0
    path = Path(bin_dir) / "tegrastats"
    path.parent.mkdir(parents=True, exist_ok=True)
    spec: List[tuple] = [(r.name, r.base_w, r.amp_w, r.period_s) for r in rails]
    path.write_text(_TEGRASTATS.format(python=sys.executable, label=LABEL, rails=repr(spec), t0=t0, dialect=dialect))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path

