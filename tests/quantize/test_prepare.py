"""Preparing a model for quantization: weights in Constant nodes or behind Identity/Cast/Transpose
chains folded into initializers (and quantized), shared weights, opset 12 with fixed input shapes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.model import Model
from sdk.quantize import quantize


def _hidden_weights_model(path, opset=13, ir=7):
    """Conv weight in a Constant node; a second Conv sharing that weight; a MatMul whose weight is an
    fp16 initializer behind Cast -> Transpose -> Identity; a Reshape of a Constant shape."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    m = (rng.standard_normal((16, 8 * 6 * 6)) * 0.05).astype(np.float16)  # stored [out, in]
    nodes = [
        helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
        helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["x", "w"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r1", "r2"], ["a"], name="add"),
        helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([-1, 8 * 6 * 6], np.int64))),
        helper.make_node("Reshape", ["p", "shape"], ["f"], name="flat"),
        helper.make_node("Cast", ["m16"], ["m32"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["m32"], ["mt"], name="tr", perm=[1, 0]),
        helper.make_node("Identity", ["mt"], ["mi"], name="ident"),
        helper.make_node("MatMul", ["f", "mi"], ["y"], name="mm"),
    ]
    g = helper.make_graph(nodes, "hidden", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
                          [numpy_helper.from_array(m, "m16")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_fold_constants(tmp_path):
    src = Model.load(_hidden_weights_model(tmp_path / "h.onnx"))
    folded = src.fold_constants()
    onnx.checker.check_model(folded.proto)
    ops = [n.op_type for n in folded.proto.graph.node]
    assert "Constant" not in ops and "Cast" not in ops and "Transpose" not in ops and "Identity" not in ops
    inits = {t.name: numpy_helper.to_array(t) for t in folded.proto.graph.initializer}
    assert inits["mi"].dtype == np.float32 and inits["mi"].shape == (8 * 6 * 6, 16)
    assert "m16" not in inits  # the fp16 original is no longer used
    # same outputs
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype(np.float32)
    a = ort.InferenceSession(src.to_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    b = ort.InferenceSession(folded.to_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert folded.fold_constants() is folded  # nothing left to fold


@pytest.mark.parametrize("opset", [12, 13])
def test_every_weight_quantized_where_it_sits(tmp_path, opset):
    path = _hidden_weights_model(tmp_path / "h.onnx", opset=opset)
    calib = [{"x": np.random.default_rng(i).standard_normal((1, 3, 12, 12)).astype(np.float32)} for i in range(8)]
    res = quantize(path, calib, output=tmp_path / "q.onnx", workers=1, speed_check=False, use_cache=False,
                   input_shapes={"x": [1, 3, 12, 12]})
    lay = res.report["layers"]
    assert lay["weights"] == lay["weights_total"] == 3  # two Convs sharing a weight, and the MatMul
    assert res.report["model"]["constants_folded"] >= 5
    q = onnx.load(str(tmp_path / "q.onnx"))
    onnx.checker.check_model(q)
    int8 = [t for t in q.graph.initializer if t.data_type == TensorProto.INT8 and len(t.dims) >= 2]
    assert len(int8) == 2  # the shared Conv weight stored once, plus the MatMul weight
    assert res.report["model"]["opset_upgraded_to"] == (13 if opset == 12 else None)


def test_opset12_with_fixed_shapes_upgrades(tmp_path):
    """An opset-12 model whose output has a dynamic dim: fixing the input shape must not leave a
    shape-less output behind (the converter's 'Field shape of type is required')."""
    path = _hidden_weights_model(tmp_path / "h.onnx", opset=12, ir=6)
    m = Model.load(path).with_input_shapes({"x": [1, 3, 12, 12]})
    onnx.checker.check_model(m.proto)
    assert m.with_opset(13).opset == 13


def test_dynamic_dims_kept(tmp_path):
    path = _hidden_weights_model(tmp_path / "h.onnx")
    calib = [{"x": np.random.default_rng(i).standard_normal((1, 3, 12, 12)).astype(np.float32)} for i in range(4)]
    res = quantize(path, calib, output=tmp_path / "q.onnx", workers=1, speed_check=False, use_cache=False)
    dims = onnx.load(str(tmp_path / "q.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "N"
    assert res.report["calibration"]["samples"] == 4


def test_weights_inside_if_branches_quantize_for_the_values_that_decide_them(tmp_path):
    """tests/controlflow.py's If model: its only MatMuls sit in the branches of an If on ``sr``.
    Given ``sr=16000`` (and shapes), quantize replaces the If by its then branch and quantizes
    ``mm_then`` (x [1,4] @ W1 [4,8]); the written model no longer takes ``sr`` and gives FP32's
    output within INT8 error. Without the value, one QuantizationError names the ops and the flag."""
    import onnxruntime as ort

    from sdk.errors import QuantizationError
    from tests.controlflow import if_rate_model

    path = if_rate_model(tmp_path / "if.onnx")
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 4)).astype(np.float32),
              "state": rng.standard_normal((2, 1, 3)).astype(np.float32)} for _ in range(40)]
    shapes = {"x": [1, 4], "state": [2, 1, 3]}
    with pytest.raises(QuantizationError, match=r"MatMul sit inside If/Loop bodies.*--input-value"):
        quantize(path, [dict(f, sr=np.array(16000, np.int64)) for f in feeds], output=tmp_path / "no.onnx",
                 workers=1, speed_check=False, use_cache=False, input_shapes=shapes, sample_axes={"state": 1})
    assert not (tmp_path / "no.onnx").exists()
    # budget=False: the ranges read all 40 samples. (With the guard, 8 of 40 random rows held out spread
    # over them hold a row outside the other 32's range: its clipped output put the model in float.)
    res = quantize(path, feeds, output=tmp_path / "q.onnx", workers=1, speed_check=False, use_cache=False,
                   input_shapes=shapes, input_values={"sr": 16000}, sample_axes={"state": 1}, budget=False)
    special = res.report["model"]["specialized"]
    assert special["values"] == {"sr": 16000} and [r["branch"] for r in special["resolved"]] == ["then"]
    assert special["weighted_ops_in_bodies_before"] == {"MatMul": 2} and special["weighted_ops_in_bodies_after"] == {}
    assert any("replaced by the branch they take" in w and "sr=16000" in w for w in res.report["warnings"])
    q = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in q.get_inputs()] == ["x", "state"]
    assert any(n.op_type == "DequantizeLinear" for n in onnx.load(str(tmp_path / "q.onnx")).graph.node)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = [ref.run(["y"], dict(f, sr=np.array(16000, np.int64)))[0] for f in feeds]
    span = float(np.ptp(np.concatenate(want)))      # y's int8 step is span / 255 (7-bit weights add to it)
    for f, w in zip(feeds[:5], want):
        got = q.run(["y"], f)[0]
        assert w.shape == (1, 8) and np.abs(got - w).max() <= 0.02 * span, (np.abs(got - w).max(), span)


def test_weights_inside_a_loop_body_stay_float_and_the_report_says_where(tmp_path):
    """tests/controlflow.py's Loop model: ``first_mm`` outside the Loop is quantized; ``body_mm``
    inside its body stays float, and the warning and ``report.model.float_in_control_flow`` name it
    (it used to be left float without a word)."""
    from tests.controlflow import loop_model

    path = loop_model(tmp_path / "loop.onnx", trips=3)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(24)]
    res = quantize(path, feeds, output=tmp_path / "q.onnx", workers=1, speed_check=False, use_cache=False)
    assert res.report["model"]["float_in_control_flow"] == {"Loop 'the_loop'": {"MatMul": 1}}
    said = [w for w in res.report["warnings"] if "control-flow bodies stay in float" in w]
    assert said and "1 MatMul in Loop 'the_loop'" in said[0], res.report["warnings"]
    q = onnx.load(str(tmp_path / "q.onnx"))
    mm = next(n for n in q.graph.node if n.name == "first_mm")
    assert any(n.op_type == "DequantizeLinear" and n.output[0] in mm.input for n in q.graph.node)
