"""Int8 islands: the planning shared by schemes that quantize every float input of an int8-capable op
and let shape/pool ops join the islands with a shared scale (the TFLite spec builds on it).

It was the first ``onnxruntime`` scheme: QDQ for ONNX Runtime's CPU (and mobile) int8 kernels.

Symmetric per-channel int8 weights, asymmetric activations (uint8 by default, the U8S8 path of
x86 VNNI and ARM; int8 optional), int32 biases with scale ``s_in * s_w``, optional ``reduce_range``
(7-bit weights, for x86 without VNNI). Q/DQ goes only around ops ONNX Runtime fuses into int8
kernels (QLinearConv, QGemm/QLinearMatMul, QLinearAdd/Mul, QLinearConcat, QLinearAveragePool,
QLinearGlobalAveragePool) and around shape/pool ops it runs directly on int8 when input and output
share a scale, so the int8 islands are not broken by float round trips. A Relu/Clip after a
quantized op gets no Q/DQ of its own: the Q after it makes it redundant and ONNX Runtime removes it.
"""
from __future__ import annotations

from typing import Any, ClassVar, FrozenSet, Iterable, List, Optional, Set, Tuple

from ..graph import GraphIndex
from .base import QuantPlan, Scheme

_FLOAT32 = 1


class IslandScheme(Scheme):
    name = "islands"
    description = "ONNX Runtime CPU/mobile: QDQ U8S8 (or S8S8), per-channel weights, int32 bias"
    default_method = "percentile"
    activation_symmetric = False
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("uint8", "int8")
    weight_qdq_pair = False
    quantize_bias = True

    #: ops with an int8 kernel: all float data inputs get Q/DQ
    COMPUTE_OPS: ClassVar[Tuple[str, ...]] = (
        "Conv", "Gemm", "MatMul", "Add", "Mul", "Concat", "GlobalAveragePool", "AveragePool")
    #: ops that run on int8 directly when input and output share the scale
    PASSTHROUGH_OPS: ClassVar[Tuple[str, ...]] = (
        "MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Resize")
    #: activations that fold into the following Q (asymmetric range starting at 0)
    FOLDED: ClassVar[Tuple[str, ...]] = ("Relu", "Clip")
    #: fixed output quantization (scale, zero point) by op type
    FIXED_OUTPUTS: ClassVar[dict] = {}
    #: a pass-through op reading a graph input joins the island it feeds: the input is quantized
    #: at the boundary and the op runs on int8 (a YOLOX Focus's slices, an input Transpose)
    INPUT_PASSTHROUGH: ClassVar[bool] = False

    def _data_inputs(self, idx: GraphIndex, node: Any) -> Optional[List[int]]:
        """Input slots that carry activations to quantize, or None when the node can't be quantized."""
        op = node.op_type
        act = lambda i: len(node.input) > i and idx.is_activation(node.input[i]) \
            and idx.elem_type.get(node.input[i]) == _FLOAT32  # noqa: E731
        if op in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            return self._weighted_inputs(idx, node, act)
        if op in ("Add", "Mul"):
            return [0, 1] if act(0) and act(1) else None
        if op == "Concat":
            return list(range(len(node.input))) if all(act(i) for i in range(len(node.input))) else None
        return [0] if act(0) else None

    @staticmethod
    def _weighted_inputs(idx: GraphIndex, node: Any, act: Any) -> Optional[List[int]]:
        if not act(0) or len(node.input) < 2:
            return None
        if node.input[1] in idx.inits:
            return [0]
        return [0, 1] if node.op_type in ("Gemm", "MatMul") and act(1) else None

    def _quantized_source(self, idx: GraphIndex, tensor: str, quantized: Set[str]) -> bool:
        """True when ``tensor`` comes out of a quantized node, directly or through a folded Relu/Clip."""
        node = idx.producer.get(tensor)
        if node is None:
            return False
        if node.name in quantized:
            return True
        if node.op_type in self.FOLDED and node.input:
            src = idx.producer.get(node.input[0])
            return src is not None and src.name in quantized
        return False

    def _passthrough(self, idx: GraphIndex, compute: Set[str], exclude: FrozenSet[str],
                     only_set: Optional[FrozenSet[str]]) -> Set[str]:
        """Pass-through ops that join an int8 island: fed by one and feeding one."""
        passthrough: Set[str] = set()
        for node in idx.graph.node:
            if node.op_type in self.PASSTHROUGH_OPS and self._selected(node, exclude, only_set) \
                    and self._data_inputs(idx, node) \
                    and (self._quantized_source(idx, node.input[0], compute | passthrough)
                         or (self.INPUT_PASSTHROUGH and node.input[0] in idx.graph_inputs)):
                passthrough.add(node.name)
        changed = True
        while changed:
            changed = False
            for node in idx.graph.node:
                if node.name in passthrough:
                    feeds_int8 = any(c.name in compute or c.name in passthrough
                                     for c, _ in idx.consumers.get(node.output[0], []))
                    if not feeds_int8:
                        passthrough.discard(node.name)
                        changed = True
        return passthrough

    def plan(self, idx: GraphIndex, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None) -> QuantPlan:
        exclude = frozenset(exclude)
        only_set: Optional[FrozenSet[str]] = frozenset(only) if only is not None else None
        plan = QuantPlan()
        compute: Set[str] = set()
        inputs_of = {}
        for node in idx.graph.node:
            if node.op_type in self.COMPUTE_OPS and self._selected(node, exclude, only_set):
                slots = self._data_inputs(idx, node)
                if slots:
                    compute.add(node.name)
                    inputs_of[node.name] = slots
        passthrough = self._passthrough(idx, compute, exclude, only_set)
        for node in idx.graph.node:
            if node.name in compute:
                for i in inputs_of[node.name]:
                    plan.add_activation(node.input[i])
                self._compute_weights(idx, plan, node, act_quantized=True)
                plan.layers.append(node.name)
            elif node.name in passthrough:
                plan.add_activation(node.input[0])
                plan.shared.append([node.input[0], node.output[0]])
            fixed = self.FIXED_OUTPUTS.get(node.op_type)
            if fixed is not None and node.output and node.output[0] in plan.activations:
                plan.fixed[node.output[0]] = fixed
        self._finish(idx, plan, compute)
        return plan

    def _finish(self, idx: GraphIndex, plan: QuantPlan, compute: Set[str]) -> None:
        """Hook for subclasses (shared scales, fixed outputs)."""
