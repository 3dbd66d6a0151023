"""16x8 (int16 activations, int8 weights): every op of ``INT16_OPS`` written by the int8 pass and run by
LiteRT's builtin kernels, against float with the same int8 weights; the spec on the written file; and
the TFLite adapter's fallback trying 16x8 before float."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")


@pytest.fixture(scope="module")
def net16(tmp_path_factory):
    from sdk.targets.convert import convert
    from tests.targets.int16net import net

    d = tmp_path_factory.mktemp("int16")
    net(d / "n16.onnx")
    convert(d / "n16.onnx", d / "n16.tflite")
    np.save(d / "calib.npy", np.random.default_rng(0).standard_normal((40, 3, 12, 12)).astype(np.float32))
    return d


def _same_weights_adapter(path):
    """The float model with its weights replaced by their int8 values: only activations differ."""
    from sdk.quantize.tflite_model import TFLiteAdapter
    from sdk.targets.tflite.int8 import _WEIGHT_SLOTS, _weight
    from sdk.targets.tflite.tflgraph import write_flatbuffer

    g = TFLiteAdapter(path.read_bytes()).graph
    for op in g.ops:
        for slot, t in enumerate(op.inputs):
            if (op.code, slot) in _WEIGHT_SLOTS and t >= 0 and g.tensors[t].data is not None:
                axis = _WEIGHT_SLOTS[(op.code, slot)]
                q, s = _weight(g.tensors[t].data.astype(np.float64), axis)
                shape = [1] * q.ndim
                if axis is not None:
                    shape[axis] = -1
                g.tensors[t].data = (q * s.reshape(shape)).astype(np.float32)
    return TFLiteAdapter(write_flatbuffer(g))


def _tensor_errors(ad, data, x):
    """Per op: (code, dtype, max abs error / max abs float value) of its output vs the float model."""
    from sdk.formats.tflite import load_runtime
    from sdk.targets.tflite.reader import read_tflite

    rt = load_runtime()
    it = rt.Interpreter(model_content=data, experimental_preserve_all_tensors=True, **rt.resolver_kwargs(False))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    ref = ad.run({"x": x})
    index = {t["name"]: t["index"] for t in it.get_tensor_details()}
    g, _ = read_tflite(data)
    rows = []
    for op in g.ops:
        t = g.tensors[op.outputs[0]]
        if t.name not in ref or t.name not in index:
            continue
        got = it.get_tensor(index[t.name]).astype(np.float64)
        if t.dtype in ("int8", "int16"):
            got = (got - t.quant.zero_point[0]) * t.quant.scale[0]
        want = ref[t.name].astype(np.float64)
        rows.append((op.code, t.dtype, float(np.abs(got - want).max() / (np.abs(want).max() + 1e-12))))
    return rows, g


def test_every_int16_op_runs_and_matches_float_with_the_same_weights(net16):
    from sdk.quantize.methods import compute_range
    from sdk.quantize.stats import CalibrationStats
    from sdk.targets.tflite.int8 import INT16_OPS, _from_range

    ad = _same_weights_adapter(net16 / "n16.tflite")
    assert INT16_OPS <= {op.code for op in ad.graph.ops}       # the graph covers every op of the list
    names = ad.activations()
    stats = CalibrationStats.empty("n16", names)
    xs = np.load(net16 / "calib.npy")
    for x in xs[:8]:
        stats.update(ad.run({"x": x[None]}), 1)
    qp = {n: _from_range(*compute_range(stats.tensors[n], "minmax", False)) for n in names if stats.tensors[n].seen}
    layers = [ad.graph.tensors[op.outputs[0]].name for op in ad.graph.ops]
    d16, info = ad.write(qp, "float", int16=layers)
    assert info["ops_int8"] == 0 and info["ops_float"] == 0 and info["ops_int16"] == len(ad.graph.ops)
    rows16, g = _tensor_errors(ad, d16, xs[0][None])
    rows8, _ = _tensor_errors(ad, ad.write(qp, "float")[0], xs[0][None])
    assert all(dt == "int16" for code, dt, _ in rows16 if code != "DEQUANTIZE")
    assert max(e for _, _, e in rows16) < 5e-3, rows16               # seen: 1.0e-3 to 2.2e-3
    assert max(e for _, _, e in rows8) > 10 * max(e for _, _, e in rows16)
    # the 16x8 spec on the written file
    for op in g.ops:
        outs = [g.tensors[o] for o in op.outputs]
        if op.code in ("LOGISTIC", "TANH", "SOFTMAX"):
            assert float(outs[0].quant.scale[0]) == pytest.approx(1 / 32768) and int(outs[0].quant.zero_point[0]) == 0
        if op.code in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"):
            kinds = [g.tensors[i].dtype for i in op.inputs if i >= 0 and g.tensors[i].data is not None]
            assert "int8" in kinds and "int64" in kinds            # int8 weights, int64 bias
        if op.code in ("ADD", "SUB"):
            assert op.options.get("potScaleInt16") is False
        for t in outs:
            if t.dtype == "int16":
                assert int(np.abs(t.quant.zero_point).max()) == 0     # symmetric


def test_maximum_and_minimum_read_every_input_at_the_output_scale(net16):
    """The int8 pass once left MAXIMUM/MINIMUM inputs at their own scales; the kernel compares raw
    values, so the outputs were wrong by 93 % of their range."""
    from sdk.quantize import quantize
    from sdk.targets.tflite.reader import read_tflite

    res = quantize(net16 / "n16.tflite", net16 / "calib.npy", budget=False, speed_check=False,
                   output=net16 / "q8.tflite")
    assert res.report["layers"]["quantized"] > 0
    g, _ = read_tflite((net16 / "q8.tflite").read_bytes())
    for op in g.ops:
        if op.code in ("MAXIMUM", "MINIMUM", "CONCATENATION"):
            out = g.tensors[op.outputs[0]].quant
            for i in op.inputs:
                q = g.tensors[i].quant
                assert float(q.scale[0]) == float(out.scale[0]) and int(q.zero_point[0]) == int(out.zero_point[0])


def test_concat_then_relu_loads_on_the_builtin_kernels(net16):
    """The converter once fused a Relu after a Concat into CONCATENATION, which LiteRT's builtin
    kernel refuses at prepare ("params->activation != kTfLiteActNone"; only XNNPACK took it)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(net16 / "n16.tflite"),
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()


@pytest.mark.parametrize("io,want", [("int8", ("int16", "float")), ("float", ("float",))])
def test_auto_fallback_precision_by_io(io, want):
    from types import SimpleNamespace

    from sdk.quantize.tflite_model import fallback_steps

    assert fallback_steps(SimpleNamespace(fallback_precision="auto", tflite_io=io))[0] == want


def test_bad_fallback_precision_is_one_line(net16, capsys):
    from tests.clirun import run_cli

    code, out, err = run_cli(["quantize", str(net16 / "n16.tflite"), "--calib", str(net16 / "calib.npy"),
                 "--fallback-precision", "int4", "-o", str(net16 / "x.tflite")], capsys)
    assert code == 2 and "--fallback-precision 'int4'" in out + err and "Traceback" not in out + err
    assert not (net16 / "x.tflite").exists()


def test_fallback_tries_16x8_before_float(net16):
    """A budget 16x8 can hold: the sensitive layers go to 16x8 (each op's precision in the report);
    one only float holds: 16x8 is tried, then float, and the report says so."""
    from sdk.quantize import quantize

    kw = dict(scheme="tflite", tflite_io="float", fallback_precision="int16", speed_check=False,
              output_roles={"all": "cosine", "prob": "cosine"})
    res = quantize(net16 / "n16.tflite", net16 / "calib.npy", min_cosine=0.99999, **kw)
    rep = res.report
    assert not res.failures and rep["fallback"]["precision"] == "int16" and rep["layers"]["int16"] > 0
    assert {v["precision"] for v in rep["layer_precision"].values()} >= {"int8", "16x8"}
    res = quantize(net16 / "n16.tflite", net16 / "calib.npy", min_cosine=0.9999999, **kw)
    assert res.report["fallback"]["precision"] == "float" and "16x8 did not hold" in res.report["fallback"]["why"]
