"""Full-integer TFLite from our calibration (``sdk quantize --target tflite -o m.tflite``, ``sdk convert
--int8``): TFLite's quantization spec checked on the written file, and its outputs against the QDQ
ONNX model the same calibration made."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.errors import InputError
from sdk.quantize import quantize
from tests.clirun import run_cli
from tests.modelzoo import save_checked

pytest.importorskip("ai_edge_litert")

RNG = np.random.default_rng(1)


def _w(*shape: int, scale: float = 0.3, rng: Optional[np.random.Generator] = None) -> np.ndarray:
    return ((rng or RNG).standard_normal(shape) * scale).astype(np.float32)


def _net(path) -> Any:
    """Conv+Relu -> depthwise Conv -> SiLU -> Concat(with a 1x1 branch) -> MaxPool -> Conv -> Sigmoid
    -> Reshape -> Gemm -> Softmax: every constrained case of the spec on a small graph."""
    r = np.random.default_rng(1)     # the same net whichever tests ran before
    inits = {"w1": _w(8, 3, 3, 3, rng=r), "b1": _w(8, rng=r), "dw": _w(8, 1, 3, 3, rng=r), "db": _w(8, rng=r),
             "w3": _w(4, 8, 1, 1, rng=r), "w4": _w(6, 12, 3, 3, rng=r), "b4": _w(6, rng=r),
             "wf": _w(10, 6 * 4 * 4, rng=r), "bf": _w(10, rng=r),
             "shape": np.array([1, 6 * 4 * 4], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "dw", "db"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dw"),
        helper.make_node("Sigmoid", ["c2"], ["s2"], name="sig2"),
        helper.make_node("Mul", ["c2", "s2"], ["m2"], name="silu2"),
        helper.make_node("Conv", ["r1", "w3"], ["c3"], name="conv3"),
        helper.make_node("Concat", ["m2", "c3"], ["cat"], axis=1, name="cat"),
        helper.make_node("MaxPool", ["cat"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Conv", ["p", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1], name="conv4"),
        helper.make_node("Sigmoid", ["c4"], ["s4"], name="sig4"),
        helper.make_node("Reshape", ["s4", "shape"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1, name="softmax"),
    ]
    g = helper.make_graph(nodes, "spec", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return save_checked(m, path)


def _feeds(n: int, seed: int) -> List[Dict[str, np.ndarray]]:
    r = np.random.default_rng(seed)
    return [{"x": r.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def _interp(path) -> Any:
    """The file's own graph: builtin kernels only, so no DELEGATE node replaces its ops."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(path), num_threads=1,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def _q(t: Dict[str, Any]):
    qp = t["quantization_parameters"]
    return np.asarray(qp["scales"]), np.asarray(qp["zero_points"]), int(qp["quantized_dimension"])


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    d = tmp_path_factory.mktemp("int8")
    src = _net(d / "m.onnx")
    res = quantize(src, _feeds(16, 0), scheme="tflite", output=d / "m.tflite", budget=False, speed_check=False,
                   use_cache=False, workers=1)
    qdq = quantize(src, _feeds(16, 0), scheme="tflite", output=d / "m.qdq.onnx", budget=False, speed_check=False,
                   use_cache=False, workers=1)
    return src, d / "m.tflite", d / "m.qdq.onnx", res, qdq


def test_spec_constraints_on_the_written_file(quantized):
    _, tfl, _, res, _ = quantized
    it = _interp(tfl)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    ops = it._get_ops_details()
    seen = set()
    softmax_out = None
    for op in ops:
        name, ins, outs = op["op_name"], list(op["inputs"]), list(op["outputs"])
        seen.add(name)
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            x, w, b = tensors[ins[0]], tensors[ins[1]], tensors[ins[2]]
            assert x["dtype"] == np.int8 and w["dtype"] == np.int8 and b["dtype"] == np.int32
            ws, wz, wdim = _q(w)
            assert np.all(wz == 0)
            data = it.get_tensor(ins[1])
            assert data.min() >= -127  # symmetric: -128 unused
            if name == "CONV_2D":
                assert wdim == 0 and ws.size == w["shape"][0]
            elif name == "DEPTHWISE_CONV_2D":
                assert wdim == 3 and ws.size == w["shape"][3]
            else:  # per tensor in the file (the interpreter reports it once per output row)
                assert np.unique(ws).size == 1
            bs, bz, _ = _q(b)
            np.testing.assert_allclose(bs, _q(x)[0][0] * (ws[:1] if bs.size == 1 else ws), rtol=1e-6)
            assert np.all(bz == 0)
        if name == "LOGISTIC" or (name == "QUANTIZE" and softmax_out == ins[0]):
            s, z, _ = _q(tensors[outs[0]])
            assert (float(s[0]), int(z[0])) == (1.0 / 256, -128)
        if name == "SOFTMAX":
            # float I/O: XNNPACK has no int8 SOFTMAX, so it runs float between a DEQUANTIZE and a
            # QUANTIZE at the fixed scale its int8 form would write
            assert tensors[ins[0]]["dtype"] == np.float32 and tensors[outs[0]]["dtype"] == np.float32
            softmax_out = outs[0]
            continue
        if name in ("MAX_POOL_2D", "RESHAPE", "CONCATENATION", "TRANSPOSE"):
            s_out = _q(tensors[outs[0]])
            for i in ins if name == "CONCATENATION" else ins[:1]:
                assert tensors[i]["dtype"] == np.int8
                s_in = _q(tensors[i])
                assert (s_in[0][0], s_in[1][0]) == (s_out[0][0], s_out[1][0]), name
        for o in outs:
            if name not in ("DEQUANTIZE",):
                assert tensors[o]["dtype"] == np.int8, (name, tensors[o]["name"])
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "LOGISTIC", "SOFTMAX", "MAX_POOL_2D",
            "CONCATENATION", "RESHAPE", "MUL"} <= seen
    # float I/O by default: QUANTIZE at the input, DEQUANTIZE at the output, nothing else float but
    # the SOFTMAX (with its DEQUANTIZE before and QUANTIZE after)
    assert it.get_input_details()[0]["dtype"] == np.float32 and it.get_output_details()[0]["dtype"] == np.float32
    assert sum(op["op_name"] == "QUANTIZE" for op in ops) == 2 and softmax_out is not None
    assert sum(op["op_name"] == "DEQUANTIZE" for op in ops) == 2
    assert res.report["tflite"]["ops_float"] == 1


def test_outputs_follow_the_qdq_model_of_the_same_calibration(quantized):
    src, tfl, qdq_path, res, qdq = quantized
    assert res.ranges == qdq.ranges  # one calibration, one set of ranges
    it = _interp(tfl)
    # the QDQ model as written (DQ -> float op -> Q), not onnxruntime's fused int8 kernels: on x86
    # without VNNI those add u8 x s8 pairs in int16 and saturate, so they are no reference there
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(qdq_path), so, providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for feed in _feeds(6, 7):
        it.set_tensor(it.get_input_details()[0]["index"], feed["x"])
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        want = sess.run(None, feed)[0]
        fp32 = ref.run(None, feed)[0]
        assert np.abs(got - want).max() <= 2.0 / 256  # at most two output steps off the QDQ model
        assert np.abs(got - fp32).max() < 0.1


def test_int8_io_and_cli(quantized, tmp_path, capsys):
    src = quantized[0]
    np.savez(tmp_path / "calib.npz", x=np.concatenate([f["x"] for f in _feeds(8, 0)]))
    out = tmp_path / "io8.tflite"
    code, stdout, stderr = run_cli(["quantize", src, "--target", "tflite", "--calib", tmp_path / "calib.npz",
                                    "-o", out, "--io", "int8", "--no-speed-check", "--no-cache"], capsys)
    assert code == 0, stderr
    it = _interp(out)
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    assert i["dtype"] == np.int8 and o["dtype"] == np.int8
    assert o["quantization"] == (1.0 / 256, -128)
    assert not any(op["op_name"] in ("QUANTIZE", "DEQUANTIZE") for op in it._get_ops_details())
    # the converter's --int8 writes the same kind of file from the same calibration
    out2 = tmp_path / "conv8.tflite"
    code, stdout, stderr = run_cli(["convert", src, "-o", out2, "--int8", "--calib", tmp_path / "calib.npz"], capsys)
    assert code == 0, stderr
    assert "tflite-int8" in stdout
    assert _interp(out2).get_input_details()[0]["dtype"] == np.float32


def test_tflite_output_needs_the_tflite_target(quantized, tmp_path):
    with pytest.raises(InputError, match=r"--target is onnxruntime.*add --target tflite"):
        quantize(quantized[0], _feeds(2, 0), scheme="onnxruntime", output=tmp_path / "m.tflite")
    assert not (tmp_path / "m.tflite").exists()


def _hswish_net(path, form: str = "op") -> Any:
    """Conv -> HardSwish -> depthwise Conv -> HardSwish -> Conv: MobileNetV3's pattern. ``form``
    ``written``: each hard-swish as paddle2onnx writes it, x * clip(x + 3, 0, 6) / 6, at opset 13."""
    inits = {"w1": _w(8, 3, 3, 3), "b1": _w(8), "dw": _w(8, 1, 3, 3), "db": _w(8), "w3": _w(4, 8, 1, 1)}

    def hswish(x, y, k):
        if form == "op":
            return [helper.make_node("HardSwish", [x], [y], name=f"hs{k}")]
        return [helper.make_node("Add", [x, "three"], [f"p{k}"], name=f"add{k}"),
                helper.make_node("Clip", [f"p{k}", "zero", "six"], [f"r{k}"], name=f"clip{k}"),
                helper.make_node("Mul", [x, f"r{k}"], [f"m{k}"], name=f"mul{k}"),
                helper.make_node("Div", [f"m{k}", "six"], [y], name=f"div{k}")]

    if form != "op":
        inits.update(three=np.array(3.0, np.float32), zero=np.array(0.0, np.float32), six=np.array(6.0, np.float32))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"), *hswish("c1", "h1", 1),
             helper.make_node("Conv", ["h1", "dw", "db"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dw"), *hswish("c2", "h2", 2),
             helper.make_node("Conv", ["h2", "w3"], ["y"], name="conv3")]
    g = helper.make_graph(nodes, "hswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14 if form == "op" else 13)])
    m.ir_version = 8
    return save_checked(m, path)


@pytest.mark.parametrize("form", ["op", "written"])
@pytest.mark.parametrize("io", ["float", "int8"])
def test_hard_swish_float_between_int8_grids_for_a_cpu_expanded_for_integer_only(tmp_path, io, form):
    """Float I/O (XNNPACK, which has no int8 HARD_SWISH): DEQUANTIZE -> float HARD_SWISH -> QUANTIZE
    at the QDQ model's own output scale; int8 I/O: the 3-op int8 expansion, no float op. Both follow
    the QDQ model of the same calibration. A hard-swish written out in ONNX ops (paddle2onnx) gets the
    same: the tflite scheme prepares it as one HardSwish (before, its x * HardSigmoid(x) form went
    int8 op by op: MUL, ADD, MUL per hard-swish, with float I/O too)."""
    src = _hswish_net(tmp_path / "hs.onnx", form)
    out = tmp_path / f"hs_{io}.tflite"
    res = quantize(src, _feeds(16, 0), scheme="tflite", output=out, budget=False, speed_check=False,
                   use_cache=False, workers=1, tflite_io=io)
    qdq_path = tmp_path / "hs.qdq.onnx"
    quantize(src, _feeds(16, 0), scheme="tflite", output=qdq_path, budget=False, speed_check=False,
             use_cache=False, workers=1, tflite_io=io)
    it = _interp(out)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    ops = it._get_ops_details()
    codes = [op["op_name"] for op in ops]
    info = res.report["tflite"]
    if form == "written":
        assert res.report["model"]["float_rewrites"] == {"hardswish_op": 2}
        assert res.report["model"]["opset_upgraded_to"] == 14
        assert "opset upgraded from 13 to 14 (HardSwish needs it)" in res.report["warnings"]
    if io == "float":
        assert codes.count("HARD_SWISH") == 2 and info["float_for_xnnpack"] == {"HARD_SWISH": 2}
        assert info["hard_swish_expanded"] == 0
        import onnx

        scales = {n.input[0]: numpy_helper.to_array(next(i for i in onnx.load(str(qdq_path)).graph.initializer
                                                         if i.name == n.input[1])).item()
                  for n in onnx.load(str(qdq_path)).graph.node if n.op_type == "QuantizeLinear"}
        for op in ops:
            if op["op_name"] != "HARD_SWISH":
                continue
            x, y = tensors[op["inputs"][0]], tensors[op["outputs"][0]]
            assert x["dtype"] == np.float32 and y["dtype"] == np.float32
            assert codes[op["index"] - 1] == "DEQUANTIZE"
            q = next(o for o in ops if o["op_name"] == "QUANTIZE" and o["inputs"][0] == op["outputs"][0])
            s, _, _ = _q(tensors[q["outputs"][0]])
            onnx_name = "h1" if "h1" in tensors[q["outputs"][0]]["name"] else "h2"
            assert float(s[0]) == pytest.approx(scales[onnx_name], rel=1e-6)   # the source's own scale
        assert any("HARD_SWISH run float" in n for n in info["notes"])
    else:
        assert "HARD_SWISH" not in codes and info["hard_swish_expanded"] == 2 and info["ops_float"] == 0
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(qdq_path), so, providers=["CPUExecutionProvider"])
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    for feed in _feeds(4, 7):
        x = feed["x"].transpose(0, 2, 3, 1) if list(i["shape"]) == [1, 8, 8, 3] else feed["x"]
        if i["dtype"] == np.int8:
            s, z = i["quantization"]
            x = np.clip(np.round(x / s + z), -128, 127).astype(np.int8)
        it.set_tensor(i["index"], x)
        it.invoke()
        got = it.get_tensor(o["index"]).astype(np.float32)
        if o["dtype"] == np.int8:
            s, z = o["quantization"]
            got = (got - z) * s
        if got.shape != (1, 4, 8, 8):
            got = got.transpose(0, 3, 1, 2)
        want = sess.run(None, feed)[0]
        step = float(np.abs(np.diff(np.unique(want))).min())
        assert np.abs(got - want).max() <= 3 * step + 1e-6


def test_the_guard_judges_the_written_file_not_its_qdq_model(tmp_path):
    """``-o m.tflite`` from an ONNX model: the accuracy the report gives (and the budget and the fallback
    read) is the written file's through LiteRT, not the Q/DQ model's through onnxruntime (layout-cdla's
    Q/DQ model read 1.0 on its 8 held-out pages and its file 0.83)."""
    from ai_edge_litert.interpreter import Interpreter

    from sdk.quantize.accuracy import OutputAccumulator

    src, ev = _net(tmp_path / "m.onnx"), _feeds(12, 3)
    kw = dict(scheme="tflite", eval_data=ev, speed_check=False, use_cache=False, workers=1)
    res = quantize(src, _feeds(16, 0), output=tmp_path / "m.tflite", **kw)
    qdq = quantize(src, _feeds(16, 0), output=tmp_path / "m.qdq.onnx", **kw)
    assert res.report["cpu"]["judged_as"].startswith("the written .tflite")
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    it = Interpreter(model_path=str(tmp_path / "m.tflite"))     # its default delegate, as a user runs it
    it.allocate_tensors()
    file_acc, qdq_acc = OutputAccumulator(), OutputAccumulator()
    sess = ort.InferenceSession(str(tmp_path / "m.qdq.onnx"), providers=["CPUExecutionProvider"])
    for feed in ev:
        it.set_tensor(it.get_input_details()[0]["index"], feed["x"])
        it.invoke()
        want = ref.run(None, feed)[0]
        file_acc.update(want, it.get_tensor(it.get_output_details()[0]["index"]))
        qdq_acc.update(want, sess.run(None, feed)[0])
    reported = res.report["accuracy"]["outputs"]["prob"]
    assert reported["cosine"] == pytest.approx(file_acc.result()["cosine"], abs=1e-7)
    # the file and its Q/DQ model differ here (requantization rounding), so the check above tells them apart
    assert abs(file_acc.result()["cosine"] - qdq.report["accuracy"]["outputs"]["prob"]["cosine"]) > 1e-6


def _count_conversions(monkeypatch) -> List[str]:
    """The sha256 of every ``.tflite`` the converter makes from here on (``onnx_to_tflite_bytes``)."""
    import hashlib

    import sdk.targets.tflite.convert as conv

    made: List[str] = []
    real = conv.onnx_to_tflite_bytes

    def counting(*a, **k):
        res = real(*a, **k)
        made.append(hashlib.sha256(res["data"]).hexdigest())
        return res

    monkeypatch.setattr(conv, "onnx_to_tflite_bytes", counting)
    return made


def test_the_file_written_is_the_bytes_the_guard_ran(tmp_path, monkeypatch):
    """The final candidate's conversion, judged by the guard, is the file ``-o`` writes: each Q/DQ
    model the run judges is converted once, the written file is byte for byte one of those, and no
    conversion is made to write it."""
    import hashlib

    import sdk.targets.tflite.convert as conv

    made = _count_conversions(monkeypatch)
    src = _net(tmp_path / "m.onnx")
    res = quantize(src, _feeds(16, 0), output=tmp_path / "m.tflite", scheme="tflite", eval_data=_feeds(12, 3),
                   speed_check=False, use_cache=False, workers=1)
    written = hashlib.sha256((tmp_path / "m.tflite").read_bytes()).hexdigest()
    assert res.report["tflite"]["judged"] is True and written in made
    assert len(made) == len(set(made))            # no Q/DQ model converted twice, the final one included
    meta = conv.onnx_names((tmp_path / "m.tflite").read_bytes())
    assert meta["source_sha256"] == res.report["model"]["sha256"]


@pytest.mark.parametrize("io", ["float", "int8"])
def test_an_lstm_reads_int8_per_channel_weights_on_float_activations(tmp_path, io):
    """The LSTM's FULLY_CONNECTED (input projection and the recurrent one, one weight per direction
    read at every step) take int8 weights, one scale per output row, on float activations (TFLite's
    dynamic-range kernel) where the file has float I/O; the output stays close to FP32. Integer-only
    files (int8 I/O) keep them float."""
    from tests.quantize import qmodels

    src = qmodels.lstm_net(tmp_path / "lstm.onnx")
    r = np.random.default_rng(5)
    feeds = [{"x": r.standard_normal((1, 6, 8)).astype(np.float32)} for _ in range(16)]
    out = tmp_path / f"lstm_{io}.tflite"
    res = quantize(src, feeds, scheme="tflite", output=out, budget=False, speed_check=False, use_cache=False,
                   workers=1, tflite_io=io)
    it = _interp(out)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    fcs = [op for op in it._get_ops_details() if op["op_name"] == "FULLY_CONNECTED"]
    lstm_fcs = [op for op in fcs if "lstm" in tensors[op["outputs"][0]]["name"]]
    assert len(lstm_fcs) == 2 * 6 - 2 + 2       # per direction: the projection, then steps 2..6 recurrent
    weights = {op["inputs"][1] for op in lstm_fcs}
    assert len(weights) == 4                      # W and R of each direction, R shared by the steps
    info = res.report["tflite"]
    if io == "float":
        assert info["hybrid_fully_connected"] == len(lstm_fcs)
        for op in lstm_fcs:
            x, w, y = (tensors[op["inputs"][0]], tensors[op["inputs"][1]], tensors[op["outputs"][0]])
            assert x["dtype"] == np.float32 and y["dtype"] == np.float32 and w["dtype"] == np.int8
            scales = w["quantization_parameters"]["scales"]
            assert len(scales) == w["shape"][0] > 1      # one scale per output row
        assert any("dynamic-range" in n for n in info["notes"])
        # FULLY_CONNECTED v12: the file asks for the runtime that added it (runtime_version.cc)
        from sdk.targets.tflite.tflgraph import read_metadata

        assert read_metadata(out.read_bytes())["min_runtime_version"].rstrip(b"\0") == b"2.17.0"
    else:
        assert info["hybrid_fully_connected"] == 0
        assert all(tensors[op["inputs"][1]]["dtype"] == np.float32 for op in lstm_fcs)
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for feed in feeds[:4]:
        want = sess.run(None, feed)[0]
        d = it.get_input_details()[0]
        x = feed["x"]
        if d["dtype"] == np.int8:
            s, z = d["quantization"]
            x = np.clip(np.round(x / s) + z, -128, 127).astype(np.int8)
        it.set_tensor(d["index"], x)
        it.invoke()
        o = it.get_output_details()[0]
        got = it.get_tensor(o["index"]).astype(np.float32)
        if o["dtype"] == np.int8:
            s, z = o["quantization"]
            got = (got - z) * s
        cos = float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got))
        assert cos > 0.99


def test_slices_of_the_input_run_int8_after_one_quantize(tmp_path):
    """A YOLOX Focus (the input image sliced into four pixel phases, concatenated, then a Conv):
    the slices join the Conv's int8 island, so the file quantizes its input once and slices int8
    (ddddocr-det: 8 float STRIDED_SLICE before, 3.90x -> 3.97x float on XNNPACK at 1 thread)."""
    r = np.random.default_rng(6)
    nodes, phases = [], []
    for k in range(4):
        nodes.append(helper.make_node("Slice", ["x", f"st{k}", "en", "ax", "stp"], [f"s{k}"], name=f"focus{k}"))
        phases.append(f"s{k}")
    nodes += [helper.make_node("Concat", phases, ["cat"], axis=1, name="cat"),
              helper.make_node("Conv", ["cat", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    inits = [numpy_helper.from_array(np.array([h0, w0], np.int64), f"st{k}")
             for k, (h0, w0) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1)))]
    inits += [numpy_helper.from_array(np.array([16, 16], np.int64), "en"),
              numpy_helper.from_array(np.array([2, 3], np.int64), "ax"),
              numpy_helper.from_array(np.array([2, 2], np.int64), "stp"),
              numpy_helper.from_array((r.standard_normal((8, 12, 3, 3)) * 0.2).astype(np.float32), "w"),
              numpy_helper.from_array((r.standard_normal(8) * 0.1).astype(np.float32), "b")]
    g = helper.make_graph(nodes, "focus", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    src = save_checked(m, tmp_path / "focus.onnx")
    feeds = [{"x": r.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(16)]
    out = tmp_path / "focus.tflite"
    res = quantize(src, feeds, scheme="tflite", output=out, budget=False, speed_check=False, use_cache=False, workers=1)
    assert "x" in res.plan.activations and any({"x", "s0"} <= set(group) for group in res.plan.shared)
    it = _interp(out)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    ops = it._get_ops_details()
    slices = [op for op in ops if op["op_name"] == "STRIDED_SLICE"]
    assert len(slices) == 4 and all(tensors[op["outputs"][0]]["dtype"] == np.int8 for op in slices)
    assert [op["op_name"] for op in ops].count("QUANTIZE") == 1 and ops[0]["op_name"] == "QUANTIZE"
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for feed in feeds[:4]:
        it.set_tensor(it.get_input_details()[0]["index"], feed["x"])
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        want = sess.run(None, feed)[0]
        assert float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got)) > 0.999


def _upsampler(path) -> Any:
    """Conv+Relu -> ConvTranspose 2x2 stride 2 -> Relu (a DB head's upsampling, kernel = stride)."""
    r = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ConvTranspose", ["r", "tw", "tb"], ["t"], strides=[2, 2], name="up"),
             helper.make_node("Relu", ["t"], ["y"], name="relu2")]
    inits = {"w": _w(6, 3, 3, 3, rng=r), "b": _w(6, rng=r), "tw": _w(6, 3, 2, 2, rng=r), "tb": _w(3, rng=r)}
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return save_checked(m, path)


def _outputs(path, feeds) -> List[np.ndarray]:
    it = _interp(path)
    outs = []
    for feed in feeds:
        it.set_tensor(it.get_input_details()[0]["index"], feed["x"])
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    return outs


def test_a_conv_transpose_with_kernel_equal_to_stride_runs_int8_as_conv_and_depth_to_space(tmp_path):
    """The int8 file writes it as CONV_2D 1x1 + DEPTH_TO_SPACE (XNNPACK's int8 TRANSPOSE_CONV took
    77 ms against 4-6 ms for ppocr-v4-det's last upsampling), its weights at the per-channel scales of
    the QDQ model's ConvTranspose (tiled over the k*k blocks), so the file computes the QDQ model
    (up to an output step where the requantization rounds a tie the other way); a .tflite source with a TRANSPOSE_CONV of that form gets the same."""
    from sdk.targets.tflite.onnx_lower import lower
    from sdk.targets.tflite.onnx_prep import prepare
    from sdk.targets.tflite.tflgraph import write_flatbuffer

    src = _upsampler(tmp_path / "up.onnx")
    feeds = _feeds(16, 0)
    quantize(src, feeds, scheme="tflite", output=tmp_path / "up.tflite", budget=False, speed_check=False,
             use_cache=False, workers=1)
    quantize(src, feeds, scheme="tflite", output=tmp_path / "up.qdq.onnx", budget=False, speed_check=False,
             use_cache=False, workers=1)
    it = _interp(tmp_path / "up.tflite")
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    ops = {op["op_name"]: op for op in it._get_ops_details()}
    assert "TRANSPOSE_CONV" not in ops and "DEPTH_TO_SPACE" in ops and "RELU" not in ops
    conv = next(op for op in it._get_ops_details() if op["op_name"] == "CONV_2D" and
                tensors[op["inputs"][1]]["shape"][0] == 12)
    scales = _q(tensors[conv["inputs"][1]])[0]
    np.testing.assert_allclose(scales, np.tile(scales[:3], 4))                # one scale per ONNX channel
    assert tensors[conv["outputs"][0]]["dtype"] == np.int8
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(tmp_path / "up.qdq.onnx"), so, providers=["CPUExecutionProvider"])
    step = _q(tensors[ops["DEQUANTIZE"]["inputs"][0]])[0][0]
    test = _feeds(4, 9)
    for got, feed in zip(_outputs(tmp_path / "up.tflite", test), test):
        diff = np.abs(got - sess.run(None, feed)[0])
        assert diff.max() <= 1.01 * step and (diff < 1e-6).mean() > 0.98     # seen: 4 of 768 one step off
    # a float .tflite holding the TRANSPOSE_CONV itself (the converter, before its own rewrite)
    import onnx

    lw = lower(prepare(onnx.load(str(src)), None))
    up = [lw.g.tensors[op.outputs[0]].name for op in lw.g.ops if op.code == "TRANSPOSE_CONV"]
    assert len(up) == 1
    (tmp_path / "tc.tflite").write_bytes(write_flatbuffer(lw.g))
    res = quantize(tmp_path / "tc.tflite", feeds, output=tmp_path / "tc_int8.tflite", budget=False, use_cache=False)
    assert res.report["tflite"]["transpose_conv_as_depth_to_space"] == 1
    # kept in float by the plan: the float form, both ops float
    res_f = quantize(tmp_path / "tc.tflite", feeds, output=tmp_path / "tc_f.tflite", budget=False, use_cache=False,
                     exclude=up)
    assert res_f.report["tflite"]["transpose_conv_as_depth_to_space"] == 1
    it_f = _interp(tmp_path / "tc_f.tflite")
    kinds = {t["index"]: t["dtype"] for t in it_f.get_tensor_details()}
    blocks = [op for op in it_f._get_ops_details() if op["op_name"] in ("DEPTH_TO_SPACE", "CONV_2D")
              and kinds[op["outputs"][0]] == np.float32]
    assert sorted(op["op_name"] for op in blocks) == ["CONV_2D", "DEPTH_TO_SPACE"]
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for path in ("tc_int8.tflite", "tc_f.tflite"):
        for got, feed in zip(_outputs(tmp_path / path, test), test):
            want = ref.run(None, feed)[0]
            assert float(np.sum(want * got) / np.linalg.norm(want) / np.linalg.norm(got)) > 0.999


def test_the_written_file_is_timed_against_the_float_tflite(tmp_path, monkeypatch):
    """``-o m.tflite`` with the speed check: the file written and the float ``.tflite`` of the same
    graph, timed side by side on this host's LiteRT (as ``sdk bench --target tflite``); INT8 slower
    is a failure unless ``allow_slower``, as on the ONNX path. Timings are made up here, so the
    verdict is fixed; without a guard the file timed is the file written, converted once; integer
    I/O files are not timed."""
    from sdk.quantize import speed

    src = _net(tmp_path / "m.onnx")
    timed: List[int] = []

    def rounds(models, feed, **kw):
        timed.append(len(models))
        assert all(hasattr(m, "run") for m in models) and set(feed) == {"x"}   # the files' own sessions
        for m in models:
            m.run(None, feed)
        return [[1.0] * 9, [2.0] * 9]          # float 1 ms, INT8 2 ms: INT8 slower

    monkeypatch.setattr(speed, "latency_rounds", rounds)
    kw = dict(scheme="tflite", budget=False, use_cache=False, workers=1)
    res = quantize(src, _feeds(16, 0), output=tmp_path / "m.tflite", **kw)
    lat = res.report["latency"]
    assert timed == [2] and lat["fp32_ms"] == 1.0 and lat["int8_ms"] == 2.0 and lat["speedup"] == 0.5
    assert "--target tflite" in lat["bench_command"] and "XNNPACK" in lat["runtime"]
    assert any("slower than the float model" in f for f in res.failures)
    assert res.report["tflite"]["judged"] is False           # no guard ran (budget=False)
    import hashlib

    made = _count_conversions(monkeypatch)
    res = quantize(src, _feeds(16, 0), output=tmp_path / "m2.tflite", allow_slower=True, **kw)
    assert res.report["latency"]["speedup"] == 0.5 and not res.failures
    # the INT8 file timed is the file written, converted once (and the float one beside it)
    assert len(made) == 2 and hashlib.sha256((tmp_path / "m2.tflite").read_bytes()).hexdigest() in made
    res = quantize(src, _feeds(16, 0), output=tmp_path / "m3.tflite", tflite_io="int8", **kw)
    assert res.report["latency"] is None and timed == [2, 2]
