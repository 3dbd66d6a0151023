"""The timing loop both GPU benchmarks share (``gpu_postprocess.py``, ``gpu_preprocess.py``)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List


def median_interleaved(fns: Dict[str, Callable[[], Any]], runs: int, warmup: int = 3) -> Dict[str, float]:
    """Median wall ms of each callable: ``warmup`` calls each (kernel compile, allocator), then
    ``runs`` interleaved rounds (every callable once per round)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}
