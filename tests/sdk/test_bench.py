from __future__ import annotations

import time

import numpy as np
import pytest

from sdk.bench import LatencyStats, measure_latency
from sdk.errors import InputError


def test_stats_from_samples():
    samples = list(range(1, 101))  # 1..100 ms
    s = LatencyStats.from_samples(samples, wall_s=5.0)
    assert s.count == 100 and s.min_ms == 1 and s.max_ms == 100
    assert s.mean_ms == pytest.approx(50.5)
    assert s.p50_ms == pytest.approx(np.percentile(samples, 50))
    assert s.p99_ms == pytest.approx(np.percentile(samples, 99))
    assert s.throughput_ips == pytest.approx(20.0)
    d = s.to_dict()
    assert set(d["latency_ms"]) == {"count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max", "ci95", "noise"}
    assert LatencyStats.from_dict(d) == s


def test_stats_empty():
    with pytest.raises(InputError):
        LatencyStats.from_samples([])


def test_min_count_and_min_duration_both_hold():
    calls = []
    run = measure_latency(lambda: calls.append(1), warmup=3, min_runs=50, min_seconds=0.0)
    assert run.stats.count == 50 and len(calls) == 53  # warm-up not measured
    t0 = time.perf_counter()
    run = measure_latency(lambda: None, warmup=0, min_runs=5, min_seconds=0.15)
    assert time.perf_counter() - t0 >= 0.15 and run.stats.count > 5
    run = measure_latency(lambda: time.sleep(0.002), warmup=0, min_runs=20, min_seconds=0.001)
    assert run.stats.count == 20  # the count, not the duration, was the binding rule
    assert run.end_s > run.begin_s


def test_max_limits():
    run = measure_latency(lambda: None, warmup=0, min_runs=10**9, min_seconds=10, max_runs=30)
    assert run.stats.count == 30


def test_bad_arguments():
    with pytest.raises(InputError):
        measure_latency(lambda: None, min_runs=0)
