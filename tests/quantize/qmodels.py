"""Small real ONNX models for the quantizer tests, built with onnx.helper (no mocks)."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class G:
    """A tiny graph builder: conv/relu/add/concat... with seeded weights."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: List = []
        self.inits: List = []
        self.n = 0

    def _name(self, kind):
        self.n += 1
        return f"{kind}{self.n}"

    def init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def conv(self, x, cin, cout, k=3, stride=1, group=1, bias=True):
        nm = self._name("conv")
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))).astype(np.float32)
        ins = [x, self.init(nm + "_w", w)]
        if bias:
            ins.append(self.init(nm + "_b", (self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        self.nodes.append(helper.make_node("Conv", ins, [nm], name=nm, pads=[k // 2] * 4, strides=[stride] * 2, group=group))
        return nm

    def convt(self, x, cin, cout):
        nm = self._name("convt")
        w = (self.rng.standard_normal((cin, cout, 2, 2)) * 0.3).astype(np.float32)
        b = np.zeros(cout, np.float32)
        self.nodes.append(helper.make_node("ConvTranspose", [x, self.init(nm + "_w", w), self.init(nm + "_b", b)], [nm],
                                           name=nm, strides=[2, 2]))
        return nm

    def op(self, op_type, inputs, **attrs):
        nm = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [nm], name=nm, **attrs))
        return nm

    def bn(self, x, c):
        nm = self._name("bn")
        s = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        b = (self.rng.standard_normal(c) * 0.1).astype(np.float32)
        m = (self.rng.standard_normal(c) * 0.1).astype(np.float32)
        v = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        ins = [x] + [self.init(f"{nm}_{k}", a) for k, a in (("s", s), ("b", b), ("m", m), ("v", v))]
        self.nodes.append(helper.make_node("BatchNormalization", ins, [nm], name=nm))
        return nm

    def gemm_head(self, x, c, classes=10):
        g = self.op("GlobalAveragePool", [x])
        f = self.op("Flatten", [g])
        w = (self.rng.standard_normal((classes, c)) * 0.5).astype(np.float32)
        nm = "logits"
        self.nodes.append(helper.make_node("Gemm", [f, self.init("fc_w", w), self.init("fc_b", np.zeros(classes, np.float32))],
                                           [nm], name="fc", transB=1))
        return nm

    def save(self, path: Path, x_shape, out: str, out_shape, opset: int = 13) -> Path:
        graph = helper.make_graph(self.nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        onnx.checker.check_model(m)
        onnx.save(m, str(path))
        return path


def residual_net(path: Path, opset: int = 13) -> Path:
    """conv-relu stem, a residual block (conv-relu-conv + shortcut Add), a depthwise conv, a Concat of
    two branches, GAP, Gemm. Input x[N,3,12,12] -> logits[N,10]."""
    g = G(0)
    s = g.op("Relu", [g.conv("x", 3, 8)])
    r = g.op("Relu", [g.conv(s, 8, 8)])
    r = g.conv(r, 8, 8)
    a = g.op("Add", [s, r])                      # residual: s is the shortcut, r the conv branch
    a = g.op("Relu", [a])
    d = g.op("Relu", [g.conv(a, 8, 8, group=8)])  # depthwise
    b1 = g.op("Relu", [g.conv(d, 8, 4, k=1)])
    b2 = g.op("Relu", [g.conv(d, 8, 4, k=3)])
    c = g.op("Concat", [b1, b2], axis=1)
    m = g.op("MaxPool", [c], kernel_shape=[2, 2], strides=[2, 2])
    out = g.gemm_head(m, 8)
    return g.save(path, ["N", 3, 12, 12], out, ["N", 10], opset)


def bn_convt_net(path: Path) -> Path:
    """conv -> BatchNormalization -> relu -> ConvTranspose -> sigmoid: x[1,3,8,8] -> y[1,4,16,16]."""
    g = G(1)
    h = g.op("Relu", [g.bn(g.conv("x", 3, 6), 6)])
    t = g.convt(h, 6, 4)
    y = g.op("Sigmoid", [t])
    return g.save(path, [1, 3, 8, 8], y, [1, 4, 16, 16])


def no_quantizable(path: Path) -> Path:
    g = G(2)
    y = g.op("Relu", [g.op("Add", ["x", g.init("one", np.ones((1, 4), np.float32))])])
    return g.save(path, ["N", 4], y, ["N", 4])


def make_data(n: int, shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n,) + tuple(shape)) * scale).astype(np.float32)


def lstm_net(path: Path, steps: int = 6, width: int = 8, hidden: int = 16) -> Path:
    """x[1,T,W] -> Transpose -> MatMul -> bidirectional LSTM -> Y [T,2,1,H] (a CRNN's recurrent head)."""
    r = np.random.default_rng(4)
    inits = {"wm": (r.standard_normal((width, width)) * 0.4).astype(np.float32),
             "W": (r.standard_normal((2, 4 * hidden, width)) * 0.3).astype(np.float32),
             "R": (r.standard_normal((2, 4 * hidden, hidden)) * 0.3).astype(np.float32),
             "B": (r.standard_normal((2, 8 * hidden)) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="time_major"),
             helper.make_node("MatMul", ["xt", "wm"], ["m"], name="proj"),
             helper.make_node("LSTM", ["m", "W", "R", "B"], ["y"], hidden_size=hidden, direction="bidirectional",
                              name="lstm")]
    g = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, steps, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 2, 1, hidden])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path
