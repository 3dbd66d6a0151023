"""``tensorrt``: explicit quantization for TensorRT >= 8.5 (and the only INT8 path of 10.x+).

Symmetric int8 everywhere (zero point 0), float weights followed by a Q/DQ pair, per-channel on
the output-channel axis (Conv axis 0, ConvTranspose axis 1), biases left in float, outputs of
quantized ops not quantized (Q/DQ goes on the inputs of the consumers). A residual Add gets Q/DQ on
its shortcut input only, so TensorRT fuses the Add into the convolution of the other branch; the
inputs of a Concat that feeds int8 layers share one scale. BatchNormalization is left to TensorRT
(not folded). :mod:`sdk.quantize.trtcache` writes the implicit-quantization calibration cache.
"""
from __future__ import annotations

from typing import Any, FrozenSet, Iterable, Optional

from ..graph import GraphIndex
from .base import QuantPlan, Scheme

_FLOAT32 = 1
_CONV = ("Conv", "ConvTranspose")


class TensorRTScheme(Scheme):
    name = "tensorrt"
    description = "TensorRT explicit quantization: symmetric int8 Q/DQ, per-channel weights, float bias"
    default_method = "entropy"
    activation_symmetric = True
    activation_dtypes = ("int8",)
    weight_qdq_pair = True
    quantize_bias = False
    fold_batchnorm = False
    writes_calibration_cache = True
    WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
    POOL_OPS = ("AveragePool", "GlobalAveragePool", "MaxPool")

    def _act(self, idx: GraphIndex, name: str) -> bool:
        return bool(name) and idx.is_activation(name) and idx.elem_type.get(name) == _FLOAT32

    def _conv_branch(self, idx: GraphIndex, tensor: str) -> bool:
        """True when ``tensor`` is the output of a Conv (optionally through BatchNormalization) used
        only here: the branch TensorRT fuses the Add into."""
        node = idx.producer.get(tensor)
        if node is None or idx.single_consumer(tensor) is None:
            return False
        if node.op_type == "BatchNormalization" and node.input:
            node = idx.producer.get(node.input[0])
            if node is None:
                return False
        return node.op_type in _CONV

    def plan(self, idx: GraphIndex, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None) -> QuantPlan:
        exclude = frozenset(exclude)
        only_set: Optional[FrozenSet[str]] = frozenset(only) if only is not None else None
        plan = QuantPlan()
        for node in idx.graph.node:
            if not self._selected(node, exclude, only_set):
                continue
            op = node.op_type
            if op in self.WEIGHTED_OPS and self._act(idx, node.input[0]):
                self._plan_weighted(idx, plan, node)
            elif op in self.POOL_OPS and self._act(idx, node.input[0]):
                plan.add_activation(node.input[0], (node.name, 0))
                plan.layers.append(node.name)
            elif op == "Add" and len(node.input) == 2 and all(self._act(idx, t) for t in node.input):
                self._plan_residual_add(idx, plan, node)
        # Concat feeding int8 layers: Q/DQ on every input, one scale for all
        for node in idx.graph.node:
            if node.op_type == "Concat" and self._selected(node, exclude, only_set):
                self._plan_concat(idx, plan, node)
        return plan

    def _plan_weighted(self, idx: GraphIndex, plan: QuantPlan, node: Any) -> None:
        """Conv/Gemm/MatMul: Q/DQ on the data input (and a second activation operand of a matmul)."""
        has_w = self._compute_weights(idx, plan, node, act_quantized=True)
        b_act = node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 and self._act(idx, node.input[1])
        if not has_w and not b_act:
            return
        plan.add_activation(node.input[0], (node.name, 0))
        if b_act:
            plan.add_activation(node.input[1], (node.name, 1))
        plan.layers.append(node.name)

    def _plan_residual_add(self, idx: GraphIndex, plan: QuantPlan, node: Any) -> None:
        """A residual Add: Q/DQ on the shortcut, so TensorRT fuses the Add into the conv of the other input."""
        a, b = node.input
        conv_a, conv_b = self._conv_branch(idx, a), self._conv_branch(idx, b)
        if not (conv_a or conv_b):
            return  # not a residual: left in float
        shortcut = 1 if conv_a else 0  # both conv outputs: fuse into input 0's conv
        plan.add_activation(node.input[shortcut], (node.name, shortcut))
        plan.layers.append(node.name)

    def _plan_concat(self, idx: GraphIndex, plan: QuantPlan, node: Any) -> None:
        out = node.output[0]
        if out not in plan.activations or not all(self._act(idx, t) for t in node.input):
            return
        for i, t in enumerate(node.input):
            plan.add_activation(t, (node.name, i))
        plan.shared.append(list(node.input) + [out])
        plan.layers.append(node.name)
