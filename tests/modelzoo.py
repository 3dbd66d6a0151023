"""Small real ONNX models built with onnx.helper for the tests (no mocks)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def save_checked(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_net(path: Path, batch="N", size: int = 16, channels: int = 8, opset: int = OPSET, seed: int = 0) -> Path:
    """x[batch,3,size,size] -> Conv3x3(8)+Relu -> Conv3x3 stride2 -> GlobalAveragePool -> Flatten -> Gemm(10)."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.2, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32) * 0.1, "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, channels, 3, 3)).astype(np.float32) * 0.2, "w2")
    b2 = numpy_helper.from_array(np.zeros(16, np.float32), "b2")
    wf = numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32) * 0.3, "wf")
    bf = numpy_helper.from_array(np.zeros(10, np.float32), "bf")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"]),
    ]
    g = helper.make_graph(
        nodes, "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        [w1, b1, w2, b2, wf, bf],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="edgesdk-tests")
    m.ir_version = 8
    return save_checked(m, path)


def two_inputs(path: Path) -> Path:
    """a[2,3] float32, b[2,3] int64 -> out = a * Cast(b)."""
    nodes = [helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["a", "bf"], ["out"])]
    g = helper.make_graph(
        nodes, "two_inputs",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return save_checked(m, path)


def fp16_matmul(path: Path) -> Path:
    """x[B,8] float16 @ W[8,4] float16 -> y[B,4] float16."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float16).reshape(8, 4), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["B", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["B", 4])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return save_checked(m, path)


def tiny_add(path: Path) -> Path:
    """x[1,16] + 1: a model whose run time is almost all overhead (for the overhead benchmark)."""
    one = numpy_helper.from_array(np.ones((1, 16), np.float32), "one")
    g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return save_checked(m, path)


def fails_at_run(path: Path) -> Path:
    """x[N,4] -> Reshape to [3,-1]: a valid graph whose run fails in the runtime for N=1 (4 values
    cannot be reshaped to 3 rows); session creation succeeds, so the failure is in the timed path."""
    shape = numpy_helper.from_array(np.array([3, -1], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "fails_at_run",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, None])], [shape],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return save_checked(m, path)
