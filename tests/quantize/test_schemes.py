"""Each target scheme's Q/DQ rules, checked on the emitted graphs (which must pass the ONNX checker
and load in ONNX Runtime)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from sdk.errors import InputError
from sdk.quantize import quantize
from sdk.quantize.schemes import get_scheme, scheme_names


def _q(model, calib, target, tmp_path, **kw):
    out = tmp_path / f"{target}.onnx"
    res = quantize(model, calib, scheme=target, output=out, workers=1, speed_check=False, **kw)
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    return res, proto


class View:
    def __init__(self, proto):
        self.g = proto.graph
        self.inits = {t.name: numpy_helper.to_array(t) for t in self.g.initializer}
        self.producer = {o: n for n in self.g.node for o in n.output}
        self.nodes = {n.name: n for n in self.g.node}

    def of(self, op):
        return [n for n in self.g.node if n.op_type == op]

    def src(self, tensor):
        return self.producer.get(tensor)

    def dq_input(self, node, i):
        """The DequantizeLinear feeding input i of node (or None)."""
        p = self.src(node.input[i])
        return p if p is not None and p.op_type == "DequantizeLinear" else None

    def axis(self, node):
        return next((a.i for a in node.attribute if a.name == "axis"), None)


def test_registry():
    assert scheme_names()[:3] == ["onnxruntime", "tensorrt", "tflite"]
    assert get_scheme("trt").name == "tensorrt"
    with pytest.raises(InputError, match="known: onnxruntime"):
        get_scheme("coreml")
    with pytest.raises(InputError, match="uint8"):
        get_scheme("tensorrt", activation_dtype="uint8")


def test_onnxruntime_rules(residual_model, residual_calib, tmp_path):
    res, proto = _q(residual_model, residual_calib, "onnxruntime", tmp_path)
    v = View(proto)
    convs = v.of("Conv")
    assert len(convs) == 6
    for c in convs:
        wdq = v.dq_input(c, 1)
        assert wdq is not None and v.inits[wdq.input[0]].dtype == np.int8      # int8 initializer -> DQ
        assert v.axis(wdq) == 0 and v.inits[wdq.input[1]].shape == (v.inits[wdq.input[0]].shape[0],)
        assert np.abs(v.inits[wdq.input[0]]).max() <= 127
        assert np.all(v.inits[wdq.input[2]] == 0)                              # symmetric weights
        xdq = v.dq_input(c, 0)
        assert xdq is not None and v.inits[xdq.input[2]].dtype == np.uint8    # asymmetric uint8 activations
        bdq = v.dq_input(c, 2)
        assert bdq is not None and v.inits[bdq.input[0]].dtype == np.int32    # int32 bias, scale s_in * s_w
        np.testing.assert_allclose(v.inits[bdq.input[1]], v.inits[xdq.input[1]] * v.inits[wdq.input[1]], rtol=1e-6)
    # Relu after a conv: no Q/DQ between them (ORT folds the Relu into the Q that follows it)
    assert len(v.of("Relu")) == 6                                             # none lost: the loop checks each
    for r in v.of("Relu"):
        p = v.src(r.input[0])
        assert p is not None and p.op_type in ("Conv", "Add")
    # residual Add (both branches int8) and Concat join the int8 islands: all inputs come through DQ,
    # and every quantized Conv's output goes through a Q (QLinearConv needs it)
    for op in ("Add", "Concat", "Gemm"):
        assert len(v.of(op)) == 1, op
        for n in v.of(op):
            assert all(v.dq_input(n, i) is not None for i in range(min(2, len(n.input)))), op
    consumers = {}
    for n in v.g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    for c in convs:
        out = c.output[0]
        nxt = consumers[out]
        if len(nxt) == 1 and nxt[0].op_type == "Relu":
            nxt = consumers[nxt[0].output[0]]
        assert [n.op_type for n in nxt] == ["QuantizeLinear"], c.name
    # Concat -> MaxPool -> GAP -> Flatten: Flatten has no int8 form in ORT, so that chain is a dead end
    # and stays float (its inputs are still the dequantized conv outputs)
    assert v.dq_input(v.of("MaxPool")[0], 0) is None
    assert not any(n.input[0] == v.of("Concat")[0].output[0] for n in v.of("QuantizeLinear"))
    # the graph output stays float; Gemm runs as QGemm with a float output
    assert v.src("logits").op_type == "Gemm"
    assert res.report["layers"]["quantized"] == 8 == res.report["layers"]["quantizable"]  # 6 Conv, Add, Gemm
    assert res.report["layers"]["weights"] == res.report["layers"]["weights_total"] == 7


def test_onnxruntime_fuses_every_quantized_layer(residual_model, residual_calib, tmp_path):
    """What ONNX Runtime runs: every quantized Conv/Gemm is an int8 kernel, no float Conv/Gemm is fed
    by a DequantizeLinear, and no Q/DQ pair sits around an op without an int8 kernel."""
    from sdk.quantize.fusion import fusion_report

    _, proto = _q(residual_model, residual_calib, "onnxruntime", tmp_path)
    f = fusion_report(proto)
    assert f["int8_kernels"] == 7 and f["float_weighted"] == 0, f["ops"]
    assert f["float_with_dq_input"] == 0 and f["stray_qdq_ops"] == []


def test_onnxruntime_reduce_range_and_int8(residual_model, residual_calib, tmp_path):
    _, proto = _q(residual_model, residual_calib, "onnxruntime", tmp_path, reduce_range=True,
                  activation_dtype="int8")
    v = View(proto)
    assert len(v.of("Conv")) == 6                                             # the loop checks all six
    for c in v.of("Conv"):
        assert np.abs(v.inits[v.dq_input(c, 1).input[0]]).max() <= 63
        assert v.inits[v.dq_input(c, 0).input[2]].dtype == np.int8


def test_tensorrt_rules(residual_model, residual_calib, tmp_path):
    res, proto = _q(residual_model, residual_calib, "tensorrt", tmp_path)
    v = View(proto)
    assert v.of("QuantizeLinear") and v.of("DequantizeLinear") and len(v.of("Conv")) == 6
    for q in v.of("QuantizeLinear") + v.of("DequantizeLinear"):
        zp = v.inits[q.input[2]]
        assert zp.dtype == np.int8 and np.all(zp == 0)                        # symmetric, zero point 0
        assert np.all(v.inits[q.input[1]] > 0)
    for c in v.of("Conv"):
        wdq = v.dq_input(c, 1)
        wq = v.src(wdq.input[0])
        assert wq.op_type == "QuantizeLinear" and v.inits[wq.input[0]].dtype == np.float32  # float W -> Q -> DQ
        assert v.axis(wq) == 0 and v.axis(wdq) == 0
        assert len(c.input) < 3 or c.input[2] in v.inits and v.inits[c.input[2]].dtype == np.float32  # float bias
        assert v.dq_input(c, 0) is not None
    add = v.of("Add")[0]
    # shortcut (input 0, the stem Relu) quantized, conv branch (input 1) left alone
    assert v.dq_input(add, 0) is not None and v.dq_input(add, 1) is None
    assert v.src(add.input[1]).op_type == "Conv"
    cat = v.of("Concat")[0]
    scales = {float(v.inits[v.dq_input(cat, i).input[1]]) for i in range(2)}
    assert len(scales) == 1                                                    # Concat inputs share one scale
    assert not v.of("Relu") or all(v.dq_input(r, 0) is None for r in v.of("Relu"))  # outputs not quantized
    assert res.report["layers"]["int32_biases"] == 0


def test_tensorrt_convtranspose_axis_and_bn_kept(bn_model, bn_calib, tmp_path):
    _, proto = _q(bn_model, bn_calib, "tensorrt", tmp_path)
    v = View(proto)
    ct = v.of("ConvTranspose")[0]
    wq = v.src(v.dq_input(ct, 1).input[0])
    assert v.axis(wq) == 1 and v.inits[wq.input[1]].shape == (4,)
    assert v.of("BatchNormalization")                                          # not folded for TensorRT


def test_onnxruntime_folds_batchnorm(bn_model, bn_calib, tmp_path):
    res, proto = _q(bn_model, bn_calib, "onnxruntime", tmp_path, eval_data=bn_calib)
    assert not View(proto).of("BatchNormalization")
    assert res.report["model"]["batchnorm_folded"] == 1
    assert res.report["accuracy"]["outputs"][proto.graph.output[0].name]["cosine"] > 0.999  # folding is exact


def test_tflite_rules(residual_model, residual_calib, bn_model, bn_calib, tmp_path):
    res, proto = _q(residual_model, residual_calib, "tflite", tmp_path)
    v = View(proto)
    assert len(v.of("DequantizeLinear")) >= 6                                 # at least each Conv's weights
    for dq in v.of("DequantizeLinear"):
        assert v.inits[dq.input[0]].dtype in (np.int8, np.int32) if dq.input[0] in v.inits \
            else v.inits[dq.input[2]].dtype == np.int8                           # int8 activations
    ranges = json.loads((tmp_path / "tflite.ranges.json").read_text())
    assert ranges["scheme"] == "tflite"
    cat = v.of("Concat")[0]
    originals = [v.src(v.dq_input(cat, i).input[0]).input[0] for i in range(len(cat.input))]
    groups = {ranges["activations"][t]["shared_group"] for t in originals}
    assert len(groups) == 1 and None not in groups                             # Concat shares one scale
    dw = [w for w in ranges["weights"].values() if w["op"] == "DepthwiseConv"]
    assert dw and dw[0]["tflite_axis"] == 3 and dw[0]["axis"] == 0
    assert all(w["tflite_axis"] == 0 for w in ranges["weights"].values() if w["op"] == "Conv")
    fc = [w for w in ranges["weights"].values() if w["op"] == "Gemm"][0]
    assert fc["axis"] is None and len(fc["scale"]) == 1                       # FullyConnected per-tensor
    # Sigmoid output fixed to (1/256, -128)
    res2, proto2 = _q(bn_model, bn_calib, "tflite", tmp_path)
    v2 = View(proto2)
    sig = v2.of("Sigmoid")[0]
    q = [n for n in v2.g.node if n.op_type == "QuantizeLinear" and n.input[0] == sig.output[0]][0]
    assert float(v2.inits[q.input[1]]) == pytest.approx(1 / 256) and int(v2.inits[q.input[2]]) == -128


def test_speed_variants_keep_low_intensity_convs_in_float(residual_model):
    """The speed-aware plan may keep in float the convs with few MACs per output value (the stem,
    the depthwise and the narrow 1x1 here), whose Q/DQ can cost more than int8 saves."""
    from sdk.quantize.graph import GraphIndex

    idx = GraphIndex(onnx.load(str(residual_model)))
    scheme = get_scheme("onnxruntime")
    plan = scheme.plan(idx)
    variants = dict(scheme.speed_variants(plan, idx))
    low = variants["float convs under 32 MACs/output"]
    assert low.float_layers == {"conv1", "conv8", "conv10"}  # 3*3*3, 1*3*3 (depthwise), 8*1*1
    assert "float convs under 128 MACs/output" not in variants  # that would be every conv: not a variant
    kept = low.plan(idx).layers
    assert not set(kept) & low.float_layers and {"conv3", "conv5", "conv12"} <= set(kept)
    assert low.options()["float_layers"] == ["conv1", "conv10", "conv8"]


@pytest.mark.parametrize("reduce_range", [False, True])
def test_onnxruntime_runs_an_lstm_as_dynamic_quantize_lstm(tmp_path, reduce_range):
    """An LSTM on the onnxruntime target becomes com.microsoft DynamicQuantizeLSTM (same name, inputs,
    outputs): int8 W [D, I, 4H] and R [D, H, 4H], one scale per gate row, zero points 0, 7-bit under
    reduce_range; its output stays close to FP32, it is a layer the fallback ranks and can keep in
    float, and the mobile EP schemes leave it float (no EP takes a com.microsoft op)."""
    from tests.quantize import qmodels

    src = qmodels.lstm_net(tmp_path / "lstm.onnx")
    r = np.random.default_rng(5)
    calib = [{"x": r.standard_normal((1, 6, 8)).astype(np.float32)} for _ in range(16)]
    res, proto = _q(src, calib, "onnxruntime", tmp_path, reduce_range=reduce_range, budget=False, use_cache=False)
    assert res.plan.dynamic == ["lstm"] and "lstm" in res.plan.layers
    (node,) = [n for n in proto.graph.node if n.name == "lstm"]
    assert node.op_type == "DynamicQuantizeLSTM" and node.domain == "com.microsoft"
    v = View(proto)
    w, rw = v.inits[node.input[1]], v.inits[node.input[2]]
    assert w.dtype == np.int8 and w.shape == (2, 8, 64) and rw.shape == (2, 16, 64)
    assert v.inits[node.input[8]].shape == (2, 64) and not v.inits[node.input[9]].any()
    assert np.abs(w).max() == (63 if reduce_range else 127)
    src_w = numpy_helper.to_array(next(t for t in onnx.load(str(src)).graph.initializer if t.name == "W"))
    np.testing.assert_allclose(w * v.inits[node.input[8]][:, None, :], src_w.transpose(0, 2, 1),
                               atol=float(v.inits[node.input[8]].max()) / 2 + 1e-7)
    fp = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in calib[:4]:
        want, got = fp.run(None, feed)[0], q.run(None, feed)[0]
        assert float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got)) > 0.999
    kept = quantize(src, calib, scheme="onnxruntime", workers=1, speed_check=False, budget=False, use_cache=False,
                    exclude=["lstm"])
    assert kept.plan.dynamic == [] and [n.op_type for n in kept.model.proto.graph.node if n.name == "lstm"] == ["LSTM"]
    guarded = quantize(src, calib, scheme="onnxruntime", workers=1, speed_check=False, use_cache=False,
                       eval_data=calib[:8], sensitivity=True)
    assert "lstm" in [row["layer"] for row in guarded.report["sensitivity"]]
    for ep in ("onnxruntime-nnapi", "onnxruntime-qnn"):      # (XNNPACK's EP quantizes Conv only)
        mobile = quantize(src, calib, scheme=ep, workers=1, speed_check=False, budget=False, use_cache=False)
        assert mobile.plan.dynamic == [] and "DynamicQuantizeLSTM" not in {n.op_type for n in mobile.model.proto.graph.node}
