"""Latency statistics you can sign: percentiles, their 95% confidence intervals, noise checks.

Pure Python (standard library only): it runs in the board agent (Python 3.8, no SciPy) and in
:mod:`sdk.result`, which must stay light.

Confidence intervals of a percentile are distribution-free order-statistic intervals. With ``n``
samples and ``K`` = the number of samples below the true ``q``-quantile, ``K ~ Binomial(n, q)``,
so ``[x_(l), x_(u)]`` (1-based order statistics) covers the quantile with probability
``P(l <= K <= u - 1)``. ``l`` is the largest rank with ``P(K <= l - 1) <= 2.5%`` and ``u`` the
smallest with ``P(K <= u - 1) >= 97.5%``; when no such ranks exist among ``1..n`` the interval
does not exist yet (``None``): too few runs for that percentile. :func:`min_runs_for` gives how many
are needed (p50: 6, p90: 36, p99: 368), which is what MLPerf-style early stopping waits for.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["percentile", "quantile_ci", "min_runs_for", "noise_report", "CI_PERCENTILES", "CONFIDENCE",
           "NOISE_LIMITS", "PAIRED_ROUNDS"]

#: The percentiles whose intervals every result carries (``latency_ms.ci95``).
CI_PERCENTILES = (50.0, 90.0, 99.0)
CONFIDENCE = 0.95
#: A run is called unstable past any of these: coefficient of variation (std / mean), drift of the
#: median between the first and second half of the run (% of the median), and the width of the
#: p50's 95% interval (% of the p50).
#: ``cpu_wait_pct``: of the time the process's threads were runnable, the share they waited for a
#: CPU that other processes held (Linux schedstat); past it the run measured the machine's load.
NOISE_LIMITS = {"cv": 0.25, "drift_pct": 5.0, "p50_ci_width_pct": 5.0, "cpu_wait_pct": 10.0}
#: Interleaved A/B rounds per model by default (``sdk compare A.onnx B.onnx``). On this project's
#: 2-core VM a planted 5 % slowdown was called in 18 of 20 runs with 21 rounds and in 19 of 20 with
#: 31, no same-model run called in either (benchmarks/compare_false_alarms.py).
PAIRED_ROUNDS = 31


def percentile(sorted_ms: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile of sorted samples, linear interpolation (NumPy's default)."""
    n = len(sorted_ms)
    if n == 0:
        raise ValueError("no samples")
    h = (n - 1) * pct / 100.0
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    return float(sorted_ms[lo] + (h - lo) * (sorted_ms[hi] - sorted_ms[lo]))


def _log_pmf(n: int, k: int, q: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(q) + (n - k) * math.log1p(-q))


def _ranks(n: int, q: float, confidence: float) -> Tuple[Optional[int], Optional[int]]:
    """``(l, u)``: 1-based ranks of the interval's ends, each None when it does not exist."""
    alpha = (1.0 - confidence) / 2.0
    sd = math.sqrt(n * q * (1.0 - q))
    start = max(0, int(n * q - 12 * sd) - 1)   # the mass below is < 1e-30: treated as 0
    stop = min(n, int(n * q + 12 * sd) + 2)
    lo_rank: Optional[int] = None
    hi_rank: Optional[int] = None
    cdf = 0.0   # P(K <= j)
    for j in range(start, stop + 1):
        cdf += math.exp(_log_pmf(n, j, q))
        rank = j + 1  # P(K <= rank - 1) = cdf
        if cdf <= alpha and rank <= n:
            lo_rank = rank
        if cdf >= 1.0 - alpha:
            hi_rank = rank if rank <= n else None
            break
    return lo_rank, hi_rank


def quantile_ci(sorted_ms: Sequence[float], pct: float, confidence: float = CONFIDENCE) -> Optional[Tuple[float, float]]:
    """The ``confidence`` interval ``(lo, hi)`` of the ``pct`` percentile from sorted samples, or
    None when there are too few samples for it (see :func:`min_runs_for`)."""
    n = len(sorted_ms)
    q = pct / 100.0
    if n == 0 or not 0.0 < q < 1.0:
        return None
    lo, hi = _ranks(n, q, confidence)
    if lo is None or hi is None:
        return None
    return float(sorted_ms[lo - 1]), float(sorted_ms[hi - 1])


def min_runs_for(pct: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples for which the order-statistic interval of the ``pct`` percentile exists
    (both ends inside the sample): p50 6, p90 36, p99 368, p99.9 3688 at 95%."""
    q = pct / 100.0
    if not 0.0 < q < 1.0:
        raise ValueError("percentile must be in (0, 100)")
    alpha = (1.0 - confidence) / 2.0
    # both tails: P(K = 0) = (1-q)^n <= alpha and P(K = n) = q^n <= alpha
    need = max(math.log(alpha) / math.log1p(-q), math.log(alpha) / math.log(q))
    n = max(1, int(math.ceil(need - 1e-9)))
    while _ranks(n, q, confidence)[1] is None or _ranks(n, q, confidence)[0] is None:
        n += 1
    return n


def _median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50.0)


def noise_report(samples_ms: Sequence[float], mean_ms: float, std_ms: float, p50_ms: float,
                 p50_ci: Optional[Tuple[float, float]], cpu_wait_pct: Optional[float] = None) -> Dict[str, object]:
    """``{cv, drift_pct, p50_ci_width_pct, cpu_wait_pct, contended, unstable, warnings}`` for
    samples in run order; each figure past :data:`NOISE_LIMITS` adds a warning that says what to
    do. ``contended``: the CPU wait share says other load disturbed the run."""
    warnings: List[str] = []
    contended = cpu_wait_pct is not None and cpu_wait_pct > NOISE_LIMITS["cpu_wait_pct"]
    if cpu_wait_pct is not None and contended:
        warnings.append("the benchmark's threads waited for a CPU %.0f%% of the time they were runnable (limit %.0f%%): "
                        "other processes (or more threads than CPUs) held the CPUs, so the figures measure the load, not the model"
                        % (cpu_wait_pct, NOISE_LIMITS["cpu_wait_pct"]))
    cv = std_ms / mean_ms if mean_ms > 0 else 0.0
    n = len(samples_ms)
    drift = None
    if n >= 20 and p50_ms > 0:
        half = n // 2
        drift = abs(_median(samples_ms[half:]) - _median(samples_ms[:half])) / p50_ms * 100.0
    width = (p50_ci[1] - p50_ci[0]) / p50_ms * 100.0 if (p50_ci is not None and p50_ms > 0) else None
    if cv > NOISE_LIMITS["cv"]:
        warnings.append("std is %.0f%% of the mean (limit %.0f%%): other load or throttling" % (cv * 100, NOISE_LIMITS["cv"] * 100))
    if drift is not None and drift > NOISE_LIMITS["drift_pct"]:
        warnings.append("the median moved %.1f%% between the first and second half of the run (limit %.0f%%): "
                        "warm up longer, lock clocks or check the temperature" % (drift, NOISE_LIMITS["drift_pct"]))
    if width is not None and width > NOISE_LIMITS["p50_ci_width_pct"]:
        warnings.append("the p50's 95%% interval is %.1f%% of the p50 wide (limit %.0f%%): measure more runs"
                        % (width, NOISE_LIMITS["p50_ci_width_pct"]))
    if p50_ci is None:
        warnings.append("too few runs for a p50 interval (need %d)" % min_runs_for(50.0))
    return {"cv": round(cv, 6), "drift_pct": None if drift is None else round(drift, 4),
            "p50_ci_width_pct": None if width is None else round(width, 4),
            "cpu_wait_pct": None if cpu_wait_pct is None else round(cpu_wait_pct, 3), "contended": contended,
            "unstable": bool(warnings), "warnings": warnings}
