"""Per-layer profile of the ONNX Runtime target: ``SessionOptions.enable_profiling`` on a second
session, its chrome-trace JSON parsed by :func:`sdk.targets.profiling.parse_ort_trace`."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Callable, List, Mapping, Sequence

import numpy as np

from ..profiling import LayerProfile, load_trace, mean, parse_ort_trace

__all__ = ["profile_ort"]


def _timed(fn: Callable[[], Any], count: int) -> List[float]:
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def profile_ort(make_session: Callable[[str], Any], names: Sequence[str], run: Callable[..., Any],
                feeds: Mapping[str, np.ndarray], runs: int, warmup: int) -> LayerProfile:
    """``make_session(prefix)`` opens a profiling session writing its trace under ``prefix``; it
    runs ``warmup + runs`` times, the trace is parsed (node events per ``model_run``, warm-up runs
    dropped) and deleted. End to end: the mean wall time of the profiled runs; ``run`` (the
    unprofiled session) is timed over as many runs beside it. Coverage: the median over runs of
    kernel time / ``model_run`` time."""
    tmp = tempfile.mkdtemp(prefix="edgesdk-ortprof-")
    try:
        sess = make_session(os.path.join(tmp, "ort"))
        srun, out_names, feed = sess.run, list(names), dict(feeds)
        _timed(lambda: srun(out_names, feed), warmup)
        wall = _timed(lambda: srun(out_names, feed), runs)
        events = load_trace(sess.end_profiling())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    trace = parse_ort_trace(events, skip_runs=warmup)
    plain = _timed(lambda: run(feeds), runs)
    notes = ["onnxruntime profiler (SessionOptions.enable_profiling): kernel times of node events inside each "
             "model_run; end_to_end_ms is the wall time of the same profiled runs; coverage is the median over runs "
             "of kernel time / model_run time"]
    if trace.runs != runs:
        notes.append("the trace held %d runs after warm-up, %d were asked" % (trace.runs, runs))
    if trace.run_ms:
        notes.append("model_run events: mean %.3f ms" % (sum(trace.run_ms) / len(trace.run_ms)))
    coverage = [k / r for k, r in zip(trace.kernel_ms, trace.run_ms) if r > 0]
    return LayerProfile(target="onnxruntime", profiler="onnxruntime", layers=trace.layers, runs=trace.runs,
                        end_to_end_ms=mean(wall), end_to_end_unprofiled_ms=mean(plain), notes=notes,
                        run_coverage=coverage).finish()
