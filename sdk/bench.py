"""Latency measurement shared by every target, ``sdk bench`` and the board agent.

The loop follows MLPerf SingleStream: after warm-up, issue one query after the previous one
completes, and stop only when BOTH a minimum count and a minimum duration are met.
Runs on the board too: Python 3.8, NumPy only.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .errors import InputError

__all__ = ["LatencyStats", "LatencyRun", "measure_latency"]


@dataclass(frozen=True)
class LatencyStats:
    """Summary of latency samples, all in milliseconds; ``throughput_ips`` in inferences/s
    (count divided by the wall time of the measured window)."""

    count: int
    mean_ms: float
    std_ms: float
    min_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    throughput_ips: float

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float], wall_s: Optional[float] = None) -> "LatencyStats":
        """Statistics of ``samples_ms``. ``wall_s`` is the measured window's duration; without
        it throughput is ``count / sum(samples)``. Percentiles interpolate linearly."""
        arr = np.asarray(samples_ms, dtype=np.float64)
        if arr.size == 0:
            raise InputError("no latency samples to summarise")
        p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
        total_s = float(wall_s) if wall_s else float(arr.sum()) / 1e3
        return cls(
            count=int(arr.size),
            mean_ms=float(arr.mean()),
            std_ms=float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
            min_ms=float(arr.min()),
            p50_ms=float(p50),
            p90_ms=float(p90),
            p95_ms=float(p95),
            p99_ms=float(p99),
            max_ms=float(arr.max()),
            throughput_ips=float(arr.size / total_s) if total_s > 0 else math.inf,
        )

    def latency_dict(self) -> Dict[str, float]:
        """The ``latency_ms`` block of result JSON: count, mean, std, min, p50, p90, p95, p99, max."""
        d = asdict(self)
        d.pop("throughput_ips")
        return {k[:-3] if k.endswith("_ms") else k: v for k, v in d.items()}

    def to_dict(self) -> dict:
        return {"latency_ms": self.latency_dict(), "throughput_ips": self.throughput_ips}

    @classmethod
    def from_dict(cls, data: dict) -> "LatencyStats":
        lat = data["latency_ms"]
        return cls(throughput_ips=float(data["throughput_ips"]),
                   **{(k if k == "count" else k + "_ms"): lat[k] for k in
                      ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max")})


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
) -> LatencyRun:
    """Call ``run_once`` ``warmup`` times, then until at least ``min_runs`` calls AND
    ``min_seconds`` of measuring have passed (MLPerf SingleStream). ``max_runs`` or
    ``max_seconds`` stop it earlier when given. Each sample is one call timed with
    ``perf_counter``.
    """
    if warmup < 0 or min_runs < 1 or min_seconds < 0:
        raise InputError("warmup must be >= 0, runs >= 1 and min seconds >= 0")
    for _ in range(warmup):
        run_once()
    perf = time.perf_counter
    samples: List[float] = []
    append = samples.append
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
            break
        if (max_runs is not None and n >= max_runs) or t1 >= hard_stop:
            break
    end = perf()
    end_mono = begin_mono + (end - begin)
    stats = LatencyStats.from_samples(samples, wall_s=end - begin)
    return LatencyRun(stats=stats, samples_ms=samples, begin_s=begin_mono, end_s=end_mono, warmup=warmup)
