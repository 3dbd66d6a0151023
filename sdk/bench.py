"""Latency measurement shared by every target, ``sdk bench`` and the board agent.

The loop follows MLPerf SingleStream: after warm-up, issue one query after the previous one
completes, and stop only when BOTH a minimum count and a minimum duration are met.
Runs on the board too: Python 3.8, NumPy only.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from .errors import InputError
from .result import LatencyStats, SpeedProbe
from .speedprobe import WORKLOAD, clocks_and_temp, probe_workload, time_probe
from .stats import min_runs_for, quantile_ci

__all__ = ["LatencyStats", "LatencyRun", "measure_latency", "EarlyStop", "cpu_schedstat", "cpu_wait_pct", "MAX_RUNS"]

#: The most runs (and warm-up runs) one measurement takes, and the most samples it keeps: a run
#: stops here even before ``min_seconds`` (about 32 MB of samples); ``--runs`` above it is refused.
MAX_RUNS = 1_000_000


@dataclass(frozen=True)
class EarlyStop:
    """MLPerf-style early stopping for a tail percentile: keep measuring until the order-statistic
    95% interval of ``percentile`` exists (:func:`sdk.stats.min_runs_for`: p99 needs 368 runs) and,
    with ``max_ci_width_pct``, until that interval is at most this wide (% of the percentile).
    ``max_runs``/``max_seconds`` of :func:`measure_latency` still bound the run."""

    percentile: float = 99.0
    max_ci_width_pct: Optional[float] = None

    @property
    def min_runs(self) -> int:
        return min_runs_for(self.percentile)

    def satisfied(self, samples_ms: List[float]) -> bool:
        """True when the samples give the percentile an interval narrow enough."""
        if len(samples_ms) < self.min_runs:
            return False
        if self.max_ci_width_pct is None:
            return True
        ordered = sorted(samples_ms)
        ci = quantile_ci(ordered, self.percentile)
        if ci is None:
            return False
        centre = ordered[min(len(ordered) - 1, int(len(ordered) * self.percentile / 100.0))]
        return centre > 0 and (ci[1] - ci[0]) / centre * 100.0 <= self.max_ci_width_pct


def cpu_schedstat() -> Optional[Tuple[int, int]]:
    """``(ns on a CPU, ns runnable but waiting for one)`` summed over this process's threads
    (Linux ``/proc/self/task/*/schedstat``); None where the kernel does not say."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    run = wait = 0
    for tid in tasks:
        try:
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                fields = f.read().split()
            run += int(fields[0])
            wait += int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return (run, wait) if run else None


def cpu_wait_pct(before: Optional[Tuple[int, int]], after: Optional[Tuple[int, int]]) -> Optional[float]:
    """Of the time this process's threads were runnable between two :func:`cpu_schedstat`
    readings, the % they waited for a CPU: other load on the machine took it (about 0 when quiet)."""
    if before is None or after is None:
        return None
    run, wait = after[0] - before[0], after[1] - before[1]
    if run <= 0 or wait < 0:
        return None
    return 100.0 * wait / (run + wait)


@dataclass
class LatencyRun:
    """What :func:`measure_latency` saw: the statistics, every sample (ms, in order) and the
    measured window's begin and end on ``time.monotonic`` (s), the clock power samplers use."""

    stats: LatencyStats
    samples_ms: List[float]
    begin_s: float
    end_s: float
    warmup: int


def measure_latency(
    run_once: Callable[[], object],
    *,
    warmup: int = 10,
    min_runs: int = 100,
    min_seconds: float = 1.0,
    max_runs: Optional[int] = None,
    max_seconds: Optional[float] = None,
    on_sample: Optional[Callable[[float], None]] = None,
    early_stop: Optional[EarlyStop] = None,
    speed_probe: bool = True,
) -> LatencyRun:
    """Call ``run_once`` ``warmup`` times, then until at least ``min_runs`` calls AND
    ``min_seconds`` of measuring have passed (MLPerf SingleStream), and with ``early_stop`` until
    its tail percentile is measured well enough (:class:`EarlyStop`). ``max_runs`` or
    ``max_seconds`` stop it earlier when given. Each sample is one call timed with
    ``perf_counter``. With ``speed_probe`` the machine-speed probe (:mod:`sdk.speedprobe`, about
    10 ms) is timed right before and right after the measured window and stored in the noise block.
    """
    if warmup < 0 or min_runs < 1 or min_seconds < 0:
        raise InputError("warmup must be >= 0, runs >= 1 and min seconds >= 0")
    if min(min_runs, max_runs or min_runs) > MAX_RUNS or warmup > MAX_RUNS:   # what would run, not what was asked
        raise InputError(f"runs and warmup must be <= {MAX_RUNS:,} (a run keeps every sample)",
                         "measure longer with --min-seconds instead; a run stops at that many samples")
    if early_stop is not None:
        min_runs = max(min_runs, early_stop.min_runs)
    next_check = min_runs
    for _ in range(warmup):
        run_once()
    perf = time.perf_counter
    probe_work = probe_workload() if speed_probe else None
    probe_before = time_probe(probe_work) if probe_work is not None else None
    samples: List[float] = []
    append = samples.append
    sched0 = cpu_schedstat()
    begin_mono = time.monotonic()
    begin = perf()
    deadline = begin + min_seconds
    hard_stop = begin + max_seconds if max_seconds else math.inf
    n = 0
    while True:
        t0 = perf()
        run_once()
        t1 = perf()
        append((t1 - t0) * 1e3)
        n += 1
        if on_sample is not None:
            on_sample(samples[-1])
        if n >= min_runs and t1 >= deadline:
            if early_stop is None or early_stop.max_ci_width_pct is None:
                break
            if n >= next_check:  # sorting costs O(n log n): look again after 10% more runs
                if early_stop.satisfied(samples):
                    break
                next_check = n + max(10, n // 10)
        if (max_runs is not None and n >= max_runs) or t1 >= hard_stop or n >= MAX_RUNS:
            break     # MAX_RUNS: sample retention is bounded
    end = perf()
    end_mono = begin_mono + (end - begin)
    wait = cpu_wait_pct(sched0, cpu_schedstat())
    probe = None
    if probe_work is not None and probe_before is not None:
        khz, temp = clocks_and_temp()
        probe = SpeedProbe(tuple(probe_before), tuple(time_probe(probe_work)), WORKLOAD, khz, temp)
    stats = LatencyStats.from_samples(samples, wall_s=end - begin, cpu_wait_pct=wait, probe=probe)
    return LatencyRun(stats=stats, samples_ms=samples, begin_s=begin_mono, end_s=end_mono, warmup=warmup)
