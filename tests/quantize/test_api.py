"""quantize(): the example model's accuracy, statistics reuse, opset upgrade, bad input, fallback."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from sdk.errors import InputError, QuantizationError
from sdk.quantize import quantize
from sdk.quantize.stats import CalibrationStats

from tests.quantize import qmodels


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt", "tflite"])
def test_example_model_top1_within_one_point(example_model, example_eval, target, tmp_path):
    calib = example_model.parent / "calib.npz"
    res = quantize(example_model, calib, scheme=target, eval_data=example_eval, output=tmp_path / "d.onnx",
                   report_path=tmp_path / "r.json", workers=1)
    task = res.report["accuracy"]["task"]
    assert task["labelled"] == 450
    assert task["drop_points"] <= 1.0, task
    assert res.report["accuracy"]["outputs"]["logits"]["cosine"] > 0.99
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["calibration"]["samples"] == 256 and rep["method"]["name"]
    assert rep["outputs"]["model"] == str(tmp_path / "d.onnx")


def test_method_change_reuses_statistics(residual_model, residual_calib, tmp_path):
    stats = tmp_path / "stats.npz"
    first = quantize(residual_model, residual_calib, method="entropy", stats_path=stats, workers=1)
    assert first.report["calibration"]["reused_statistics"] is None and stats.exists()
    st = CalibrationStats.load(stats)
    # without --eval the guard holds out the last 20% (10 of 48): the ranges read the other 38
    assert st.samples == 38 and "x" in st.names
    assert first.report["budget"]["checked"] is True and first.report["accuracy"]["samples"] == 10
    for method, target in (("minmax", "onnxruntime"), ("mse", "tensorrt"), ("percentile", "tflite")):
        again = quantize(residual_model, residual_calib, method=method, scheme=target, stats_path=stats, workers=1)
        assert again.report["calibration"]["reused_statistics"] == str(stats)
    # the cache (keyed by model sha256, tensor names and the data) works without a stats path too
    quantize(residual_model, residual_calib, workers=1)
    cached = quantize(residual_model, residual_calib, method="minmax", workers=1)
    assert cached.report["calibration"]["reused_statistics"]
    fresh = quantize(residual_model, residual_calib, method="minmax", workers=1, use_cache=False)
    assert fresh.report["calibration"]["reused_statistics"] is None


def test_opset_upgraded(tmp_path):
    model = qmodels.residual_net(tmp_path / "op11.onnx", opset=11)
    np.savez(tmp_path / "c.npz", x=qmodels.make_data(8, (3, 12, 12)))
    res = quantize(model, tmp_path / "c.npz", output=tmp_path / "q.onnx", workers=1)
    assert res.report["model"]["opset_upgraded_to"] == 13
    proto = onnx.load(str(tmp_path / "q.onnx"))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert "opset upgraded from 11 to 13 (per-channel DequantizeLinear needs it)" in res.report["warnings"]


def test_already_quantized_and_nothing_written(residual_model, residual_calib, tmp_path):
    quantize(residual_model, residual_calib, output=tmp_path / "q.onnx", workers=1)
    out = tmp_path / "again.onnx"
    with pytest.raises(QuantizationError, match="already quantized"):
        quantize(tmp_path / "q.onnx", residual_calib, output=out, report_path=tmp_path / "r.json", workers=1)
    assert not out.exists() and not (tmp_path / "r.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_no_quantizable_op(tmp_path):
    model = qmodels.no_quantizable(tmp_path / "nq.onnx")
    np.savez(tmp_path / "c.npz", x=qmodels.make_data(4, (4,)))
    with pytest.raises(QuantizationError, match="no op that the onnxruntime scheme quantizes"):
        quantize(model, tmp_path / "c.npz", output=tmp_path / "q.onnx", workers=1)
    assert not (tmp_path / "q.onnx").exists()


def test_bad_data_errors(residual_model, tmp_path):
    np.savez(tmp_path / "f64.npz", x=np.ones((2, 3, 12, 12)))
    with pytest.raises(InputError, match="dtype float64"):
        quantize(residual_model, tmp_path / "f64.npz", workers=1)
    np.savez(tmp_path / "shape.npz", x=np.ones((2, 3, 10, 12), np.float32))
    with pytest.raises(InputError, match="shape"):
        quantize(residual_model, tmp_path / "shape.npz", workers=1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty"):
        quantize(residual_model, tmp_path / "empty", workers=1)
    with pytest.raises(InputError, match="unknown calibration method"):
        quantize(residual_model, tmp_path / "shape.npz", method="kl")
    with pytest.raises(InputError, match="need held-out data"):
        np.savez(tmp_path / "ok.npz", x=qmodels.make_data(4, (3, 12, 12)))
        quantize(residual_model, tmp_path / "ok.npz", max_drop=1.0, workers=1)


def test_sensitivity_and_fallback(residual_model, residual_calib, residual_eval, tmp_path):
    # the speed search off in both runs: under load it may keep Add in float in one run and not the other
    base = quantize(residual_model, residual_calib, eval_data=residual_eval, sensitivity=True, workers=1,
                    method="minmax", budget=False, speed_check=False)
    sens = base.report["sensitivity"]
    assert len(sens) == base.report["layers"]["quantized"]
    score = [r["score"] for r in sens]
    assert score == sorted(score, reverse=True) and score[0] > 0  # the largest share of the output error first
    assert all(r["score"] == pytest.approx(r["added_error"] * r["gain"]) for r in sens)
    assert all(r["cost"] > 0 for r in sens) and max(r["cost"] for r in sens) > 1000  # MACs at the data's shapes
    cos = base.report["accuracy"]["outputs"]["logits"]["cosine"]
    # a budget just above what full INT8 reaches: the most sensitive layers go back to float
    target = 1 - (1 - cos) / 3
    res = quantize(residual_model, residual_calib, eval_data=residual_eval, min_cosine=target, workers=1,
                   method="minmax", output=tmp_path / "fb.onnx", speed_check=False)
    fb = res.report["fallback_layers"]
    assert fb and fb[0] == sens[0]["layer"]
    assert res.report["budget"]["holds"] is True and not any("budget" in f for f in res.failures), res.failures
    assert res.report["accuracy"]["outputs"]["logits"]["cosine"] >= target
    assert res.report["layers"]["quantized"] <= base.report["layers"]["quantized"] - len(fb)
    # doubling then bisecting: a handful of evaluations, not one per layer
    assert res.report["fallback_evaluations"] <= 2 * len(sens).bit_length() + 1
    # an impossible budget: the allowed fallback is tried, then a failure (the model is still built)
    res = quantize(residual_model, residual_calib, eval_data=residual_eval, min_cosine=1.0, max_fallback=2,
                   workers=1, method="minmax")
    assert len(res.report["fallback_layers"]) == 2 and res.report["budget"]["holds"] is False
    assert not res.ok and any("budget" in f and "does not hold" in f for f in res.failures)


def test_top1_agreement_per_position_of_a_recognizer():
    """A CTC recognizer's softmax [N, T, classes]: agreement per position (PP-OCRv4's recognizer at
    cosine >= 0.99 had 1.8 % of its positions flipped and 1-CER 0.982); a [N, rows, values] output
    that is not a distribution (boxes and scores) has none."""
    from sdk.quantize.accuracy import OutputAccumulator

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 25, 7))
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    flipped = probs.copy()
    flipped[0, :5] = flipped[0, :5, ::-1]  # 5 of 50 positions take another class (the reversed order)
    acc = OutputAccumulator()
    acc.update(probs.astype(np.float32), flipped.astype(np.float32))
    row = acc.result()
    changed = int(np.sum(probs.argmax(-1) != flipped.argmax(-1)))
    assert row["top1_agreement"] == pytest.approx(1 - changed / 50) and changed >= 4
    acc = OutputAccumulator()
    acc.update(logits * 10, logits * 10)  # raw values, not distributions: no per-position agreement
    assert "top1_agreement" not in acc.result()


def test_an_int8_output_with_inf_fails_the_budget_and_does_not_crash():
    """An INT8 log-mel front end can take log(0) = -inf where FP32 had a small positive energy: the
    accumulator once raised ``math domain error`` (log10 of 0) and stopped a no-flags quantize; the
    output now scores no agreement (cosine 0, SNR -inf) and the budget fails."""
    from sdk.quantize.accuracy import Budget, OutputAccumulator

    acc = OutputAccumulator()
    acc.update(np.full((1, 4), -3.0, np.float32), np.array([[-3.0, -np.inf, -3.0, -3.0]], np.float32))
    row = acc.result()
    assert row["cosine"] == 0.0 and row["snr_db"] == -np.inf and row["max_abs_error"] == np.inf
    assert not Budget(min_cosine=0.99).holds({"outputs": {"mel": row}})


def test_default_budget_and_nothing_quantized(residual_model, residual_calib, residual_eval):
    res = quantize(residual_model, residual_calib, eval_data=residual_eval, workers=1)
    assert res.report["budget"]["min_cosine"] == 0.99 and res.report["budget"]["default"] is True
    assert res.report["budget"]["min_top1_agreement"] == 0.99
    # the default also keeps a classifier's argmax: a cosine of 0.999 with 2% of the top-1s flipped fails
    from sdk.quantize.accuracy import Budget

    default = Budget(min_cosine=0.99, min_top1_agreement=0.99)
    assert not default.holds({"outputs": {"logits": {"cosine": 0.999, "top1_agreement": 0.98}}})
    assert default.holds({"outputs": {"boxes": {"cosine": 0.999}}})  # not a classifier: the cosine alone
    # a budget only FP32 meets: every layer falls back, and that is a failure, not a success
    res = quantize(residual_model, residual_calib, eval_data=residual_eval, min_cosine=0.9999999, workers=1,
                   method="minmax")
    assert res.report["layers"]["quantized"] == 0
    assert any("nothing is quantized" in f for f in res.failures)


def test_bias_correction_reduces_mean_error(residual_model, residual_calib, residual_eval):
    # the speed search off: under load it may keep low-intensity convs in float in one run only
    on = quantize(residual_model, residual_calib, eval_data=residual_eval, workers=1, method="minmax",
                  speed_check=False)
    off = quantize(residual_model, residual_calib, eval_data=residual_eval, workers=1, method="minmax",
                   bias_correction=False, speed_check=False)
    assert on.report["bias_correction"]["corrected_layers"] >= 6
    assert off.report["bias_correction"]["corrected_layers"] == 0
    snr_on = on.report["accuracy"]["outputs"]["logits"]["snr_db"]
    snr_off = off.report["accuracy"]["outputs"]["logits"]["snr_db"]
    assert snr_on > snr_off - 1.0  # never much worse; usually better


def test_iterable_and_labels_file(residual_model, tmp_path):
    rng = np.random.default_rng(0)
    data = [{"x": rng.standard_normal((4, 3, 12, 12)).astype(np.float32)} for _ in range(4)]
    np.savez(tmp_path / "ev.npz", x=qmodels.make_data(8, (3, 12, 12), seed=5))
    np.save(tmp_path / "y.npy", np.arange(8) % 10)
    res = quantize(residual_model, data, eval_data=tmp_path / "ev.npz", labels=tmp_path / "y.npy", workers=1)
    assert res.report["calibration"]["samples"] == 16
    assert res.report["accuracy"]["task"]["labelled"] == 8


def test_image_folder_with_undecodable_file(residual_model, tmp_path):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is not installed")
    from sdk.sources import parse_preprocess

    rng = np.random.default_rng(0)
    for i in range(10):
        cv2.imwrite(str(tmp_path / f"{i}.png"), rng.integers(0, 255, (20, 16, 3), dtype=np.uint8))
    (tmp_path / "bad.jpg").write_bytes(b"\xff\xd8\xff broken")
    spec = parse_preprocess(["size=12x12", "mean=127,127,127", "std=64"])
    with pytest.warns(UserWarning, match="bad.jpg"):
        res = quantize(residual_model, tmp_path, preprocess=spec, workers=1)
    assert res.report["calibration"]["samples"] == 10 and res.report["calibration"]["skipped"] == 1


def test_task_metric_budget(residual_model, residual_calib, residual_eval):
    """A task metric (here: top-1 agreement of the logits) as the budget: it replaces the default
    cosine budget, drives the fallback, and is reported."""
    def top1(ref, cand):
        r = np.concatenate([x[0].argmax(-1) for x in ref])
        c = np.concatenate([x[0].argmax(-1) for x in cand])
        return float((r == c).mean())

    res = quantize(residual_model, residual_calib, eval_data=residual_eval, workers=1, method="minmax",
                   speed_check=False, task_metric=top1, min_task_metric=1.0)
    b = res.report["budget"]
    assert b["min_task_metric"] == 1.0 and b["min_cosine"] is None and b["holds"] is True
    assert res.report["accuracy"]["task_metric"] == 1.0


def test_search_fallback_doubles_bisects_and_resumes():
    from sdk.quantize.fallback import search_fallback

    order = [f"l{i}" for i in range(20)]
    tried = []

    def holds(prefix):
        tried.append(len(prefix))
        return len(prefix) >= 7, len(prefix)

    prefix, res, ok, evals = search_fallback(order, holds)
    assert ok and len(prefix) == 7 == res and evals == len(tried) and tried[:4] == [1, 2, 4, 8]
    tried.clear()  # resuming above a length known to fail: nothing at or below it is tried again
    prefix, _, ok, _ = search_fallback(order, holds, start=5)
    assert ok and len(prefix) == 7 and min(tried) > 5
    tried.clear()
    prefix, _, ok, _ = search_fallback(order, lambda p: (False, None), limit=6)
    assert not ok and len(prefix) == 6
