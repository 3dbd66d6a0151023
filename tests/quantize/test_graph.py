"""quantize/graph.py: GraphIndex infers on the model without its weights' data
(``sdk.formats.onnx.weightless``) and gets the types and shapes full inference gives (the corpus
models, and a Reshape whose target is an initializer)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from sdk import corpus
from sdk.formats.onnx import weightless
from sdk.quantize.graph import GraphIndex


def _typed(proto):
    return {vi.name: (vi.type.tensor_type.elem_type, str(vi.type.tensor_type.shape))
            for vi in list(proto.graph.value_info) + list(proto.graph.output)}


def test_small_initializers_keep_their_values_large_ones_their_shape():
    w = numpy_helper.from_array(np.ones((64, 3, 3, 3), np.float32), "w")          # 6.9 KB: data dropped
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")          # read by Reshape: kept
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("s", TensorProto.INT64, None)], [w, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    light = shape_inference.infer_shapes(weightless(m))
    assert _typed(light) == _typed(shape_inference.infer_shapes(m))
    assert "dim_value: 4096" in _typed(light)["r"][1]        # the Reshape's target was read
    assert not any(t.name == "w" for t in light.graph.initializer)
    idx = GraphIndex(m)
    assert idx.shape["r"] == [1, 4096] and idx.elem_type["s"] == TensorProto.INT64 and "w" not in idx.elem_type


@pytest.mark.parametrize("name", ["ddddocr-ocr", "nudenet-320n", "layout-cdla"])   # layout: weights as Constants
def test_graph_index_types_and_shapes_equal_full_inference(name):
    proto = onnx.load(str(corpus.fetch([name], with_photos=False)[name]))
    full = shape_inference.infer_shapes(proto)
    infos = list(full.graph.input) + list(full.graph.value_info) + list(full.graph.output)
    want = {vi.name: vi.type.tensor_type.elem_type for vi in infos}
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in infos if vi.type.tensor_type.HasField("shape")}
    idx = GraphIndex(proto)
    assert idx.elem_type == want and idx.shape == shapes and len(want) > 100
