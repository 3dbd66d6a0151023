"""Device telemetry sampled alongside power during a run: CPU load and clocks, GPU load and clock,
EMC (memory) clock, temperatures, memory in use.

Sources, by what the device has:

- Linux everywhere: ``/proc/stat`` (CPU load, from the busy/total jiffies between samples),
  ``/proc/meminfo``, ``cpufreq/scaling_cur_freq`` (kHz), ``/sys/class/thermal`` (milli-C) and
  hwmon ``temp*_input`` (milli-C).
- Jetson sysfs: the GPU devfreq node (``cur_freq`` Hz; ``device/load`` or ``/sys/devices/gpu.0/load``
  in per mille), the EMC clock under debugfs (``bpmp/debug/clk/emc/rate``, root only).
- ``tegrastats`` lines, when tegrastats is the power source (no second process):
  ``CPU [8%@1479,...]``, ``GR3D_FREQ 0%@921`` (or ``@[305]``, ``@[1300,1300]``), ``EMC_FREQ 0%@1600``
  and ``name@41.5C`` temperatures.
- An NVML source (:mod:`.nvml`) adds GPU utilisation, clocks and temperature.

Sysfs paths are read under ``root`` (a simulated tree in tests); ``/proc`` is always the running
kernel's. Runs on the board: Python 3.8, standard library.
"""
from __future__ import annotations

import glob
import os
import re
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .base import BackgroundSampler, read_number, read_text, under

__all__ = ["TelemetrySampler", "parse_tegrastats_telemetry", "read_proc_stat", "UNITS"]

UNITS = {"cpu_load_pct": "%", "cpu_freq_mhz": "MHz", "gpu_load_pct": "%", "gpu_freq_mhz": "MHz",
         "emc_freq_mhz": "MHz", "emc_load_pct": "%", "mem_used_mb": "MB", "power_w": "W"}
_GPU_NODES = ("gv11b", "gp10b", "ga10b", "gb10b", "gpu")


def read_proc_stat(path: str = "/proc/stat") -> Optional[Tuple[float, float]]:
    """``(busy, total)`` jiffies of the aggregate ``cpu`` line (idle and iowait are not busy)."""
    text = read_text(path)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("cpu "):
            vals = [float(v) for v in line.split()[1:]]
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0.0)
            total = sum(vals[:8])
            return total - idle, total
    return None


_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_FREQ = re.compile(r"\b(GR3D_FREQ|EMC_FREQ)\s+(\d+)%(?:@\[?([\d,]+)\]?)?")
_TEMP = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_]*)@(-?\d+(?:\.\d+)?)C\b")


def parse_tegrastats_telemetry(line: str) -> Dict[str, float]:
    """Load, clocks and temperatures of one tegrastats line (any JetPack dialect):
    ``cpu_load_pct`` (mean of the online cores), ``cpu_freq_mhz``, ``gpu_load_pct``,
    ``gpu_freq_mhz``, ``emc_load_pct``, ``emc_freq_mhz``, ``temp_<name>_c``."""
    out: Dict[str, float] = {}
    m = _CPU.search(line)
    if m:
        loads, freqs = [], []
        for core in m.group(1).split(","):
            cm = re.match(r"\s*(\d+)%@(\d+)", core)
            if cm:
                loads.append(float(cm.group(1)))
                freqs.append(float(cm.group(2)))
        if loads:
            out["cpu_load_pct"] = sum(loads) / len(loads)
            out["cpu_freq_mhz"] = sum(freqs) / len(freqs)
    for name, pct, mhz in _FREQ.findall(line):
        key = "gpu" if name == "GR3D_FREQ" else "emc"
        out[key + "_load_pct"] = float(pct)
        if mhz:
            out[key + "_freq_mhz"] = float(mhz.split(",")[0])
    for name, c in _TEMP.findall(line):
        out["temp_%s_c" % name.lower()] = float(c)
    return out


class TelemetrySampler(BackgroundSampler):
    """Samples telemetry on a daemon thread at ``rate_hz`` (time stamps on ``time.monotonic``,
    the clock of the run's window and of the power samples). ``extra``: callables returning more
    fields (e.g. an NVML source's ``telemetry``). Call :meth:`feed_line` with tegrastats lines to
    add their fields."""

    def __init__(self, root: str = "/", rate_hz: float = 5.0,
                 extra: Optional[List[Callable[[], Dict[str, float]]]] = None) -> None:
        if rate_hz <= 0:
            raise ValueError("rate_hz must be > 0")
        self.root = root or "/"
        self.rate_hz = float(rate_hz)
        self.extra = list(extra or [])
        self.samples: List[Tuple[float, Dict[str, float]]] = []
        self.sources: Dict[str, str] = {}
        self._last_stat: Optional[Tuple[float, float]] = None
        self._last_line: Dict[str, float] = {}
        super().__init__()
        self._gpu_node = self._find_gpu_node()

    # -- sources ---------------------------------------------------------------------------------------
    def _find_gpu_node(self) -> Optional[str]:
        for node in sorted(glob.glob(under(self.root, "/sys/class/devfreq/*"))):
            if read_text(os.path.join(node, "device", "of_node", "name")) in _GPU_NODES:
                return node
        return None

    def feed_line(self, t: float, line: str) -> None:
        """A tegrastats line arrived at ``t``: keep its fields for the next sample."""
        fields = parse_tegrastats_telemetry(line)
        if fields:
            with self._lock:
                self._last_line = fields
            self.sources.setdefault("tegrastats", "tegrastats lines (CPU, GR3D_FREQ, EMC_FREQ, temperatures)")

    def _cpu(self, out: Dict[str, float]) -> None:
        stat = read_proc_stat("/proc/stat")
        if stat is not None:
            if self._last_stat is not None and stat[1] > self._last_stat[1]:
                out["cpu_load_pct"] = 100.0 * (stat[0] - self._last_stat[0]) / (stat[1] - self._last_stat[1])
                self.sources["cpu_load_pct"] = "/proc/stat"
            self._last_stat = stat
        read = [read_number(p) for p in glob.glob(under(self.root, "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))]
        freqs = [f for f in read if f is not None]
        if freqs:
            out["cpu_freq_mhz"] = sum(freqs) / len(freqs) / 1e3
        mem = read_text("/proc/meminfo")
        if mem:
            kv = {l.split(":")[0]: l.split(":")[1] for l in mem.splitlines() if ":" in l}
            try:
                out["mem_used_mb"] = (float(kv["MemTotal"].split()[0]) - float(kv["MemAvailable"].split()[0])) / 1024
            except (KeyError, ValueError, IndexError):
                pass

    def _gpu_emc(self, out: Dict[str, float]) -> None:
        if self._gpu_node:
            f = read_number(os.path.join(self._gpu_node, "cur_freq"))
            if f is not None:
                out["gpu_freq_mhz"] = f / 1e6
            load = read_number(os.path.join(self._gpu_node, "device", "load"))
            if load is None:
                load = read_number(under(self.root, "/sys/devices/gpu.0/load"))
            if load is not None:
                out["gpu_load_pct"] = load / 10.0  # per mille
        for path in ("/sys/kernel/debug/bpmp/debug/clk/emc/rate", "/sys/kernel/debug/clk/emc/clk_rate"):
            rate = read_number(under(self.root, path))
            if rate is not None:
                out["emc_freq_mhz"] = rate / 1e6
                break

    def _temps(self, out: Dict[str, float]) -> None:
        for zone in glob.glob(under(self.root, "/sys/class/thermal/thermal_zone*")):
            milli = read_number(os.path.join(zone, "temp"))
            if milli is not None:
                name = (read_text(os.path.join(zone, "type")) or os.path.basename(zone)).lower()
                out["temp_%s_c" % re.sub(r"[^a-z0-9_]+", "_", name)] = milli / 1e3
        for path in glob.glob(under(self.root, "/sys/class/hwmon/hwmon*/temp*_input")):
            milli = read_number(path)
            if milli is not None:
                chip = read_text(os.path.join(os.path.dirname(path), "name")) or "hwmon"
                key = os.path.basename(path)[: -len("_input")]
                out["temp_%s_%s_c" % (re.sub(r"[^a-z0-9_]+", "_", chip.lower()), key)] = milli / 1e3

    def sample(self) -> Dict[str, float]:
        """One reading of every source (tegrastats fields override the sysfs ones they share)."""
        out: Dict[str, float] = {}
        self._cpu(out)
        self._gpu_emc(out)
        self._temps(out)
        for fn in self.extra:
            try:
                out.update(fn())
            except Exception:  # noqa: BLE001 - one failing extra loses its fields, not the sample
                pass
        with self._lock:
            out.update(self._last_line)
        return out

    # -- lifecycle ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        period = 1.0 / self.rate_hz
        while not self._stop.is_set():
            fields = self.sample()
            t = time.monotonic()
            with self._lock:
                self.samples.append((t, fields))
            self._stop.wait(period)

    thread_name = "telemetry"

    def _before_start(self) -> None:
        self._last_stat = read_proc_stat("/proc/stat")

    def report(self, origin_s: float, window: Optional[Tuple[float, float]] = None,
               power_trace: Optional[List[List[float]]] = None) -> Dict[str, Any]:
        """The ``telemetry`` block: ``t_s`` (relative to ``origin_s``), ``series`` {field: values,
        None where a sample lacks it}, ``units``, ``window`` (relative), ``means_in_window``, ``sources``.
        ``power_trace`` (``[[t, W]]`` on the same clock) is resampled onto the telemetry times."""
        with self._lock:
            samples = list(self.samples)
        keys = sorted({k for _, f in samples for k in f})
        t_s = [t - origin_s for t, _ in samples]
        series: Dict[str, List[Optional[float]]] = {k: [f.get(k) for _, f in samples] for k in keys}
        if power_trace:
            series["power_w"] = [_nearest(power_trace, t) for t, _ in samples]
        units = {k: UNITS.get(k, "C" if k.startswith("temp_") else "") for k in series}
        out: Dict[str, Any] = {"t_s": t_s, "series": series, "units": units, "rate_hz": self.rate_hz,
                               "samples": len(samples), "sources": dict(self.sources), "clock": "time.monotonic"}
        if window is not None:
            b, e = window
            out["window"] = [b - origin_s, e - origin_s]
            inside = [f for t, f in samples if b < t < e]
            out["means_in_window"] = {k: (sum(f[k] for f in inside if k in f) / max(1, sum(1 for f in inside if k in f)))
                                      for k in keys if any(k in f for f in inside)}
        return out


def _nearest(trace: List[List[float]], t: float) -> Optional[float]:
    best, best_dt = None, None
    for tt, w in trace:
        dt = abs(tt - t)
        if best_dt is None or dt < best_dt:
            best, best_dt = w, dt
    return best
