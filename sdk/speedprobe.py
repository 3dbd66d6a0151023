"""The machine-speed probe: a short fixed workload timed before and after a measured window.

Two runs of the same model can differ because the model changed or because the machine did (a VM
moved to a busier host, a Jetson throttled, a governor changed the clocks). The probe tells the two
apart: the same work on every machine and in every run (:data:`WORKLOAD`), independent of the model
and its options, so a model that got slower leaves the probe alone while a machine that got slower
slows the probe too. :func:`sdk.compare.compare_results` reads it. Each reading repeats the workload
:data:`REPEATS` times (about 1 ms each on a desktop core) and keeps every time; the clocks and the
temperature the OS reports are read beside it.

Runs on the board too: Python 3.8, NumPy (a pure-Python loop where NumPy is missing).
"""
from __future__ import annotations

import glob
import time
from typing import Callable, List, Optional, Tuple

__all__ = ["WORKLOAD", "REPEATS", "probe_workload", "time_probe", "cpu_khz", "temp_c", "clocks_and_temp"]

#: What the probe computes (stored with each reading, so results of other probes are not compared).
WORKLOAD = "numpy-exp-add-64k-x24/1"
REPEATS = 7


def probe_workload() -> Callable[[], object]:
    """One repeat of the workload: exp and add over 64 K float32 values, 24 times (single-threaded
    NumPy ufuncs: compute and memory traffic, no BLAS thread pool to vary)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - the agent's boards have NumPy
        def pure() -> object:
            acc = 0.0
            for i in range(20000):
                acc += (i * 0.5) % 7.0
            return acc
        return pure
    x = np.linspace(-4.0, 4.0, 65536, dtype=np.float32)
    y = np.empty_like(x)

    def work() -> object:
        for _ in range(24):
            np.exp(x, out=y)
            np.add(y, x, out=y)
        return y
    return work


def time_probe(work: Optional[Callable[[], object]] = None, repeats: int = REPEATS) -> List[float]:
    """``repeats`` timings (ms) of the workload, after one untimed call."""
    fn = work or probe_workload()
    fn()
    out = []
    perf = time.perf_counter
    for _ in range(repeats):
        t0 = perf()
        fn()
        out.append((perf() - t0) * 1e3)
    return out


def _read_number(path: str) -> Optional[float]:
    try:
        with open(path) as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        return None


def cpu_khz() -> Optional[float]:
    """The current clock of CPU 0 in kHz (cpufreq), None where the kernel does not expose it."""
    return _read_number("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")


def temp_c() -> Optional[float]:
    """The hottest thermal zone in degrees C (sysfs millidegrees), None where there is none."""
    temps = [t for t in (_read_number(p) for p in glob.glob("/sys/class/thermal/thermal_zone*/temp")) if t is not None]
    return max(temps) / 1000.0 if temps else None


def clocks_and_temp() -> Tuple[Optional[float], Optional[float]]:
    return cpu_khz(), temp_c()
