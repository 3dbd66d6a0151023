"""sdk/formats/onnx_diagnose.py: the constraint an ONNX graph puts on its input shapes, read from a
runtime's failure (ONNX Runtime's and TensorRT's message formats), and the TensorRT session's use of it."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from sdk.errors import InferenceError, InputError
from sdk.formats.onnx_diagnose import explain_failure, flow_stride, node_named, stride_sentence

#: TensorRT 9's run-time shape check, as it logs it (NVIDIA/Stable-Diffusion-WebUI-TensorRT#190)
TRT_CONCAT = ("[shapeMachine.cpp::executeContinuation::887] Error Code 7: Internal Error (/neck/Concat: axis 2 "
              "dimensions must be equal for concatenation on axis 1. Condition '==' violated: 32 != 31. "
              "Instruction: CHECK_EQUAL 32 31.)")


def pyramid_model(path):
    """x -> Conv stride 2 (pad 1) and AveragePool 2x2 stride 2 -> Concat on channels: an odd H or W
    gives maps of ceil and floor size. Written to ``path``, which is returned."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3, 3, 3], np.zeros(81, np.float32).tolist())
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="/stem/Conv", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["b"], name="/stem/Pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["a", "b"], ["y"], name="/neck/Concat", axis=1)]
    g = helper.make_graph(nodes, "pyramid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, None, None])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory):
    return pyramid_model(tmp_path_factory.mktemp("onnx") / "pyramid.onnx")


def test_onnxruntime_names_the_input_and_the_stride(pyramid):
    from sdk.targets import get_target

    with get_target("onnxruntime").open(pyramid) as s:
        with pytest.raises(InputError, match=r"input 'x' has H x W 63 x 63.*multiples of 2, e\.g\. 64 x 64"):
            s.run({"x": np.zeros((1, 3, 63, 63), np.float32)})


def test_node_named_reads_onnxruntime_and_tensorrt():
    assert node_named("Non-zero status code returned while running Concat node. Name:'/neck/Concat' Status") == \
        "/neck/Concat"
    assert node_named(TRT_CONCAT) == "/neck/Concat"
    assert node_named("Error Code 4: Internal Error (Concat_151: dimensions not compatible for concatenation)") == \
        "Concat_151"
    assert node_named("something else") is None


def test_tensorrt_message_on_odd_input_gives_the_stride_rule(pyramid):
    why = explain_failure(pyramid, {"x": np.zeros((1, 3, 63, 64), np.float32)}, TRT_CONCAT)
    assert why is not None and "input 'x' has H x W 63 x 64" in why and "multiples of 2, e.g. 64 x 64" in why, why
    assert "'/neck/Concat'" in why
    # not about shapes, or no model: no explanation (the runtime's own line stays)
    assert explain_failure(pyramid, {"x": np.zeros((1, 3, 63, 64), np.float32)}, "out of memory") is None
    assert explain_failure(None, {"x": np.zeros((1, 3, 63, 64), np.float32)}, TRT_CONCAT) is None


def test_flow_stride_takes_the_finest_map_at_a_join():
    # x -s2-> a -s2-> b; upsample(b) -> c; join(a, c) -> d: stride of d is 2, the deepest 4
    steps = [(["x"], ["a"], 2, False), (["a"], ["b"], 2, False), (["b"], ["c"], 1, True), (["a", "c"], ["d"], 1, False)]
    assert flow_stride(steps, ["x"], lambda t: True) == 4
    assert stride_sentence("x", (64, 32), 4) is None
    assert stride_sentence("x", (66, 32), 4).endswith("multiples of 4, e.g. 68 x 32")


def _fake_trt_session(errors, model):
    from sdk.targets.tensorrt.session import TensorRTSession

    fake = SimpleNamespace(_logger=SimpleNamespace(errors=lambda: list(errors)), _model_source=model)
    return lambda shapes, what, error=InputError: TensorRTSession._shape_failure(fake, shapes, what, error)


def test_tensorrt_session_turns_its_shape_failure_into_the_rule(pyramid):
    failure = _fake_trt_session([TRT_CONCAT], pyramid)
    err = failure({"x": (1, 3, 63, 63)}, "TensorRT execute_async_v3 failed", InferenceError)
    assert isinstance(err, InputError) and "tensorrt cannot run these inputs: input 'x'" in str(err), err
    assert "multiples of 2" in str(err) and "Error Code 7" in (err.hint or "")
    # without the ONNX model (an engine file alone): TensorRT's line, naming the layer, stays
    err = _fake_trt_session([TRT_CONCAT], None)({"x": (1, 3, 63, 63)}, "TensorRT execute_async_v3 failed",
                                                 InferenceError)
    assert isinstance(err, InferenceError) and "/neck/Concat" in str(err)
