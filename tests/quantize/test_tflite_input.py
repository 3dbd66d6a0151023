"""``quantize()`` / ``sdk quantize`` on a float ``.tflite``: the TFLite format adapter (calibration
through LiteRT with every intermediate readable, the core's statistics and methods, the int8 writer),
float16 weights behind DEQUANTIZE, the default budget and the float fallback."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.quantize import quantize
from tests.clirun import run_cli

pytest.importorskip("ai_edge_litert")


def _float_tflite(tmp_path, fp16: bool = False):
    """A small CNN converted from ONNX (our converter), optionally with float16 weights behind
    DEQUANTIZE ops as TensorFlow's fp16 export writes them."""
    from sdk.targets.tflite.convert import onnx_to_tflite_bytes
    from sdk.targets.tflite.reader import read_tflite
    from sdk.targets.tflite.tflgraph import TFLOp, write_flatbuffer

    r = np.random.default_rng(3)      # the same net whichever tests ran before
    w = lambda *s: (r.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "dw": w(8, 1, 3, 3), "w2": w(6, 8, 1, 1), "b2": w(6),
             "wf": w(4, 6), "bf": w(4)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "dw"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dw"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w2", "b2"], ["c3"], name="conv3"),
             helper.make_node("GlobalAveragePool", ["c3"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    data = onnx_to_tflite_bytes(m, io_layout="nhwc")["data"]
    if fp16:
        graph, _ = read_tflite(data)
        ops = []
        for op in graph.ops:
            if op.code in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                t = graph.tensors[op.inputs[1]]
                half = graph.add_tensor(t.name + "/fp16", t.shape, "float16", t.data.astype(np.float16))
                deq = graph.add_tensor(t.name + "/deq", t.shape)
                ops.append(TFLOp("DEQUANTIZE", [half], [deq]))
                op.inputs[1] = deq
            ops.append(op)
        graph.ops = ops
        data = write_flatbuffer(graph)
    p = tmp_path / ("fp16.tflite" if fp16 else "float.tflite")
    p.write_bytes(data)
    return p


def _feeds(n: int, seed: int) -> List[Dict[str, np.ndarray]]:
    r = np.random.default_rng(seed)
    return [{"x": r.random((1, 12, 12, 3)).astype(np.float32)} for _ in range(n)]


def _interp(path):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def _run(path, feed):
    it = _interp(path)
    it.set_tensor(it.get_input_details()[0]["index"], feed["x"])
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("fp16", [False, True])
def test_tflite_model_quantizes_to_full_integer(tmp_path, fp16):
    src = _float_tflite(tmp_path, fp16)
    out = tmp_path / "int8.tflite"
    res = quantize(src, _feeds(16, 0), output=out, eval_data=_feeds(8, 1), speed_check=False)
    assert res.ok, res.failures
    rep = res.report
    assert rep["target"] == "tflite" and rep["calibration"]["samples"] == 16
    assert rep["model"]["weights_dequantized"] == (3 if fp16 else 0)
    assert rep["accuracy"]["outputs"]["logits"]["cosine"] >= 0.99 and rep["fallback_layers"] == []
    it = _interp(out)
    ops = it._get_ops_details()
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    compute = [op for op in ops if op["op_name"] in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "MEAN")]
    assert len(compute) == 5
    for op in compute:
        assert tensors[op["outputs"][0]]["dtype"] == np.int8
    assert not any(op["op_name"] == "DEQUANTIZE" and tensors[op["inputs"][0]]["dtype"] == np.float16 for op in ops)
    # the statistics are the core's: the ranges are minmax of the calibrated activations
    st = res.stats.tensors
    assert set(res.ranges) <= set(st) and all(res.ranges[n] == (min(st[n].min, 0.0), max(st[n].max, 0.0))
                                              for n in res.ranges if st[n].min <= 0 <= st[n].max)
    for feed in _feeds(4, 5):
        ref, got = _run(src, feed), _run(out, feed)
        c = float(ref.ravel() @ got.ravel() / (np.linalg.norm(ref) * np.linalg.norm(got)))
        assert c >= 0.98


def test_a_budget_that_breaks_keeps_layers_in_float(tmp_path):
    src = _float_tflite(tmp_path)
    out = tmp_path / "int8.tflite"
    res = quantize(src, _feeds(8, 0), output=out, eval_data=_feeds(8, 1), min_cosine=0.999999)
    kept = res.report["fallback_layers"]
    assert kept, res.report["accuracy"]
    assert res.report["tflite"]["ops_float"] >= len(kept)
    strict = quantize(src, _feeds(8, 0), eval_data=_feeds(8, 1), min_cosine=0.999999, max_fallback=0)
    assert strict.failures and "cosine" in strict.failures[0]


def test_exclude_keeps_the_named_ops_float_and_a_wrong_name_is_one_error(tmp_path, capsys):
    """``--exclude`` on a ``.tflite`` names a layer by its output tensor (as ``report.layer_precision``
    does); every model written keeps it float, the guard's and the fallback's included. It was
    ignored on this path before."""
    src = _float_tflite(tmp_path)
    full = quantize(src, _feeds(8, 0), guard=False, speed_check=False)
    conv = next(n for n, p in full.report["layer_precision"].items() if p["precision"] == "int8" and n != "x")
    res = quantize(src, _feeds(8, 0), output=tmp_path / "q.tflite", eval_data=_feeds(8, 1), speed_check=False,
                   exclude=[conv])
    assert res.report["layer_precision"][conv] == {"precision": "float", "why": "--exclude"}
    assert res.report["tflite"]["ops_int8"] < full.report["tflite"]["ops_int8"]
    it = _interp(tmp_path / "q.tflite")
    dtypes = {t["name"]: t["dtype"] for t in it.get_tensor_details()}
    assert dtypes[conv] == np.float32
    np.savez(tmp_path / "calib.npz", x=np.concatenate([f["x"] for f in _feeds(8, 0)]))
    code, _, stderr = run_cli(["quantize", src, "--calib", tmp_path / "calib.npz", "-o", tmp_path / "r.tflite",
                               "--exclude", "no_such_layer"], capsys)
    assert code == 2 and "--exclude 'no_such_layer' names no op output of this .tflite" in stderr
    assert "Traceback" not in stderr and not (tmp_path / "r.tflite").exists()


def test_layers_kept_float_keep_the_float16_weights_of_the_source(tmp_path):
    """A float16 source (weights behind DEQUANTIZE): a layer kept in float reads its weight as the
    source stored it, float16 behind one DEQUANTIZE, not as the reader's float32 copy; the int8
    layers' weights are int8 from the same values."""
    src = _float_tflite(tmp_path, fp16=True)
    full = quantize(src, _feeds(8, 0), guard=False, speed_check=False)
    conv = next(n for n, p in full.report["layer_precision"].items() if p["precision"] == "int8" and n != "x")
    out = tmp_path / "q.tflite"
    res = quantize(src, _feeds(8, 0), output=out, guard=False, speed_check=False, exclude=[conv])
    assert res.report["tflite"]["float16_weights"] >= 1
    it = _interp(out)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    by_out = {tensors[op["outputs"][0]]["name"]: op for op in it._get_ops_details()}
    producer = {o: op for op in it._get_ops_details() for o in op["outputs"]}
    w = by_out[conv]["inputs"][1]
    assert producer[w]["op_name"] == "DEQUANTIZE" and tensors[producer[w]["inputs"][0]]["dtype"] == np.float16
    ref, got = _run(src, _feeds(1, 3)[0]), _run(out, _feeds(1, 3)[0])
    assert float(ref.ravel() @ got.ravel() / (np.linalg.norm(ref) * np.linalg.norm(got))) > 0.98


def test_cli_quantize_tflite_and_int8_io(tmp_path, capsys):
    src = _float_tflite(tmp_path)
    np.savez(tmp_path / "calib.npz", x=np.concatenate([f["x"] for f in _feeds(8, 0)]))
    out = tmp_path / "q.tflite"
    code, stdout, stderr = run_cli(["quantize", src, "--calib", tmp_path / "calib.npz", "-o", out, "--io", "int8",
                                    "--allow-slower"], capsys)   # a 7-op model: its Q/DQ cost more than int8 saves
    assert code == 0, stderr
    assert "target tflite" in stdout and "latency on this host (ai_edge_litert" in stdout, stdout
    it = _interp(out)
    assert it.get_input_details()[0]["dtype"] == np.int8 and it.get_output_details()[0]["dtype"] == np.int8
    code, _, stderr = run_cli(["quantize", src, "--calib", tmp_path / "calib.npz", "-o", tmp_path / "q.onnx"], capsys)
    assert code == 2 and "a TFLite model quantizes to a .tflite file" in stderr
    code, _, stderr = run_cli(["quantize", src, "--calib", tmp_path / "calib.npz", "-o", out, "--target", "tensorrt"],
                              capsys)
    assert code == 2 and "takes an ONNX model" in stderr


def test_speed_check_times_both_files_as_bench_does_and_gives_the_verdict(tmp_path):
    """The float file and the INT8 one, interleaved rounds through the tflite target (XNNPACK): the
    speedup is the median of the rounds' ratios inside its own interval, and INT8 slower beyond the
    tolerance is a failure unless allow_slower."""
    from sdk.quantize.speed import SLOWER_TOLERANCE

    src = _float_tflite(tmp_path)
    res = quantize(src, _feeds(8, 0), output=tmp_path / "q.tflite", guard=False)
    lat = res.report["latency"]
    assert lat["rounds"] == 9 and lat["fp32_ms"] > 0 and lat["int8_ms"] > 0
    assert lat["speedup_ci95"][0] <= lat["speedup"] <= lat["speedup_ci95"][1], lat
    assert lat["bench_command"].startswith("sdk bench MODEL.tflite --target tflite")
    slower = lat["speedup"] * (1 + SLOWER_TOLERANCE) < 1
    assert any("slower than the float model" in f for f in res.failures) == slower, (lat, res.failures)
    ok = quantize(src, _feeds(8, 0), guard=False, allow_slower=True)
    assert not any("slower" in f for f in ok.failures) and "latency" in ok.report


def test_bias_correction_takes_the_int8_weights_mean_shift_off_the_bias(tmp_path):
    """The weights' int8 error times the input's channel means (from the calibration pass, channels
    last) is taken off each CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED bias: in the written file
    the first CONV_2D's dequantized bias is ``b - (Wq s_w - W) E[x]`` within one bias step; off, it is
    ``b``; and the INT8 logits' mean error against the float model does not grow."""
    from sdk.targets.tflite.reader import read_tflite

    src = _float_tflite(tmp_path)
    calib = [{"x": (f["x"] * 0.2 + 0.8).astype(np.float32)} for f in _feeds(16, 0)]   # inputs far from 0: E[x] matters
    mean_x = np.mean([f["x"].reshape(-1, 3) for f in calib], axis=(0, 1)).astype(np.float64)
    fg, _ = read_tflite(src.read_bytes())
    conv = next(op for op in fg.ops if op.code == "CONV_2D")
    w, b = fg.tensors[conv.inputs[1]].data.astype(np.float64), fg.tensors[conv.inputs[2]].data.astype(np.float64)
    shift = {}
    for bc in (False, True):
        out = tmp_path / f"bc{int(bc)}.tflite"
        res = quantize(src, calib, output=out, guard=False, speed_check=False, bias_correction=bc)
        assert res.report["bias_correction"]["corrected_layers"] == (4 if bc else 0), res.report["bias_correction"]
        it = _interp(out)
        t = {d["index"]: d for d in it.get_tensor_details()}
        op = next(o for o in it._get_ops_details() if o["op_name"] == "CONV_2D")
        wq, bq = t[op["inputs"][1]], t[op["inputs"][2]]
        s_w = wq["quantization_parameters"]["scales"].astype(np.float64)
        w_int8 = it.get_tensor(wq["index"]).astype(np.float64) * s_w.reshape(-1, 1, 1, 1)
        s_b = bq["quantization_parameters"]["scales"].astype(np.float64)
        got = it.get_tensor(bq["index"]).astype(np.float64) * s_b
        want = b - ((w_int8 - w).reshape(len(b), -1, 3).sum(axis=1) @ mean_x if bc else 0.0)
        assert np.all(np.abs(got - want) <= s_b * 0.5 + 1e-9), (bc, got - want)
        errs = [_run(out, f) - _run(src, f) for f in calib]
        shift[bc] = float(np.abs(np.mean(errs, axis=0)).mean())
    assert shift[True] <= shift[False] * 1.05, shift
