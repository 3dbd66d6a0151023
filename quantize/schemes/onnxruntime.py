"""``onnxruntime``: QDQ placed where ONNX Runtime's CPU graph optimizer fuses it into int8 kernels.

ONNX Runtime turns a "node unit" into an int8 kernel only when the whole unit is there
(``qdq_selector_action_transformer.cc``): ``DQ(x), DQ(w)[, DQ(b)] -> Conv -> Q`` becomes QLinearConv
(the output Q is required), ``DQ, DQ -> MatMul [-> Q]`` QLinearMatMul or MatMulIntegerToFloat,
``DQ, DQ[, DQ] -> Gemm [-> Q]`` QGemm, ``DQ -> Sigmoid/LeakyRelu/Softmax/AveragePool/
GlobalAveragePool -> Q`` the com.microsoft QLinear forms, ``DQ, DQ -> Add/Mul -> Q`` QLinearAdd/Mul,
``DQ... -> Concat -> Q`` QLinearConcat; Q/DQ around Reshape/Transpose/Squeeze/Unsqueeze/MaxPool/
Resize/Split with one scale on both sides is dropped (they run on int8). A Relu/Clip between an op and
its Q is removed when the Q's range starts at its bound (asymmetric activations).

So: every quantized Conv/Gemm/MatMul gets Q/DQ on its data inputs and on its output (after a folded
Relu/Clip); the other int8 ops join only when all their float inputs are already int8, and stay
int8 only while their output feeds another int8 op (a dead end would add a Q/DQ round trip for
nothing). Conv/MatMul/Gemm whose output is a graph output stay float (the Q could not fuse).
``int8_ops`` restricts the op types and ``float_layers`` keeps nodes in float (the speed-aware plan
measures which variant pays).

Weights symmetric int8 per channel, activations asymmetric uint8 (U8S8, the x86 VNNI and ARM path;
int8 optional), bias int32 with scale ``s_in * s_w``; Sigmoid/Softmax outputs get the fixed range
[0, 1].
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from ..graph import GraphIndex
from .base import QuantPlan, Scheme

_FLOAT32 = 1


class OnnxRuntimeScheme(Scheme):
    name = "onnxruntime"
    description = "ONNX Runtime CPU: QDQ where ORT fuses int8 kernels (U8S8), per-channel weights, int32 bias"
    default_method = "auto"
    activation_symmetric = False
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("uint8", "int8")
    weight_qdq_pair = False
    quantize_bias = True
    host_runtime = True

    WEIGHTED: ClassVar[Tuple[str, ...]] = ("Conv", "Gemm", "MatMul")
    #: output Q optional for these (MatMulIntegerToFloat, QGemm with float output)
    OUTPUT_Q_OPTIONAL: ClassVar[Tuple[str, ...]] = ("Gemm", "MatMul")
    UNARY: ClassVar[Tuple[str, ...]] = ("Sigmoid", "LeakyRelu", "Softmax", "AveragePool", "GlobalAveragePool")
    BINARY: ClassVar[Tuple[str, ...]] = ("Add", "Mul")
    VARIADIC: ClassVar[Tuple[str, ...]] = ("Concat",)
    PASSTHROUGH: ClassVar[Tuple[str, ...]] = ("MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                                             "Resize", "Split")
    FOLDED: ClassVar[Tuple[str, ...]] = ("Relu", "Clip")
    #: outputs in [0, 1]: fixed range instead of a calibrated one
    UNIT_RANGE: ClassVar[Tuple[str, ...]] = ("Sigmoid", "Softmax")
    #: recurrent ops run as onnxruntime's com.microsoft DynamicQuantizeLSTM: int8 weights, the
    #: activations quantized at run time per step (no calibrated range inside the recurrence)
    DYNAMIC: ClassVar[Tuple[str, ...]] = ("LSTM",)

    def __init__(self, per_channel: bool = True, reduce_range: bool = False,
                 activation_dtype: Optional[str] = None, int8_ops: Optional[Iterable[str]] = None,
                 float_layers: Iterable[str] = ()):
        super().__init__(per_channel, reduce_range, activation_dtype)
        self.int8_ops: FrozenSet[str] = frozenset(int8_ops) if int8_ops is not None else frozenset(self.all_int8_ops())
        #: nodes the speed-aware plan keeps in float (on top of the caller's ``exclude``)
        self.float_layers: FrozenSet[str] = frozenset(float_layers)

    @classmethod
    def all_int8_ops(cls) -> List[str]:
        return list(cls.WEIGHTED + cls.UNARY + cls.BINARY + cls.VARIADIC + cls.PASSTHROUGH + cls.DYNAMIC)

    #: op-type groups the speed-aware plan may keep in float, each timed on its own
    SPEED_GROUPS: ClassVar[Dict[str, Tuple[str, ...]]] = {
        "elementwise": ("Sigmoid", "LeakyRelu", "Softmax", "Add", "Mul"),
        "concat": ("Concat",),
        "pools": ("AveragePool", "GlobalAveragePool", "MaxPool"),
        "shape": ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Resize", "Split"),
        "recurrent": ("LSTM",),
    }

    #: a Conv doing fewer multiply-accumulates per output value (C_in/group * kh * kw) than these
    #: may cost more in its Q/DQ than int8 saves (depthwise and narrow convs between float
    #: activations such as hardswish): variants keep those in float
    LOW_INTENSITY_MACS: ClassVar[Tuple[int, ...]] = (32, 128)

    def speed_variants(self, plan: QuantPlan, idx: GraphIndex) -> List[Tuple[str, Scheme]]:
        by_name = {n.name: n for n in idx.graph.node}
        present = {by_name[layer].op_type for layer in plan.layers if layer in by_name}
        out: List[Tuple[str, Scheme]] = []
        dropped_all: Set[str] = set()
        for label, ops in self.SPEED_GROUPS.items():
            if present & set(ops) & self.int8_ops:
                dropped_all |= set(ops)
                out.append((f"float {label}", self._variant(self.int8_ops - set(ops))))
        if len(out) > 1:
            out.append(("weighted ops only", self._variant(self.int8_ops - dropped_all)))
        convs = {layer: self._macs_per_output(idx, by_name[layer]) for layer in plan.layers
                 if layer in by_name and by_name[layer].op_type == "Conv"}
        seen: Set[FrozenSet[str]] = set()
        for limit in self.LOW_INTENSITY_MACS:
            low = frozenset(name for name, macs in convs.items() if macs < limit)
            if low and len(low) < len(convs) and low not in seen:
                seen.add(low)
                out.append((f"float convs under {limit} MACs/output", self._variant(self.int8_ops, low)))
        return out

    @staticmethod
    def _macs_per_output(idx: GraphIndex, node: Any) -> int:
        w = idx.inits.get(node.input[1]) if len(node.input) > 1 else None
        dims = list(w.dims) if w is not None else []
        return math.prod(dims[1:]) if len(dims) >= 3 else 1 << 30  # unknown weight: never low intensity

    def _variant(self, ops: Iterable[str], float_layers: Iterable[str] = ()) -> "OnnxRuntimeScheme":
        return type(self)(self.per_channel, self.reduce_range, self.activation_dtype, int8_ops=ops,
                          float_layers=self.float_layers | frozenset(float_layers))

    #: x86 flags with which MLAS's U8S8 kernels multiply-accumulate in 32 bits (``vpdpbusd``)
    VNNI_FLAGS: ClassVar[FrozenSet[str]] = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
    X86: ClassVar[FrozenSet[str]] = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})

    @classmethod
    def reduced_range_reason(cls, machine: str, flags: FrozenSet[str]) -> Optional[str]:
        """On x86 without VNNI, MLAS's U8S8 kernels (AVX2/AVX512BW ``vpmaddubsw``) add each pair
        of u8 x s8 products in int16, which saturates beyond 32767 (255 x 127 x 2 = 64770): an INT8
        conv of nudenet-320n then gives box mAP 0.77 vs FP32 where VNNI gives 1.0. 7-bit weights
        (onnxruntime's ``reduce_range``) keep the pair sums below 32767 (255 x 63 x 2)."""
        if machine.lower() not in cls.X86 or flags & cls.VNNI_FLAGS:
            return None
        return ("x86 CPU without VNNI: onnxruntime's U8S8 kernels add pairs of u8 x s8 products in int16 "
                "there and saturate with 8-bit weights; 7-bit weights keep the sums in range")

    def options(self) -> Dict[str, Any]:
        return {**super().options(), "int8_ops": sorted(self.int8_ops), "float_layers": sorted(self.float_layers)}

    # -- roles ---------------------------------------------------------------------------------------------
    def _float_act(self, idx: GraphIndex, name: str) -> bool:
        return bool(name) and idx.is_activation(name) and idx.elem_type.get(name) == _FLOAT32

    def _weighted_slots(self, idx: GraphIndex, node: Any) -> Optional[List[int]]:
        """Data inputs of a Conv/Gemm/MatMul that can run in int8, or None."""
        if not self._float_act(idx, node.input[0]) or len(node.input) < 2:
            return None
        w = node.input[1]
        if w in idx.inits and idx.inits[w].data_type == _FLOAT32:
            return [0]
        if node.op_type in ("Gemm", "MatMul") and self._float_act(idx, w):
            return [0, 1]
        return None

    def _int8_output(self, idx: GraphIndex, node: Any) -> Optional[str]:
        """The tensor that carries the node's int8 output: after a Relu/Clip that is its only consumer."""
        out = node.output[0]
        nxt = idx.single_consumer(out)
        if nxt is not None and nxt.op_type in self.FOLDED and out not in idx.graph_outputs:
            out = nxt.output[0]
        return None if out in idx.graph_outputs or idx.elem_type.get(out) != _FLOAT32 else out

    def _joins(self, idx: GraphIndex, node: Any, int8: Set[str]) -> bool:
        """A non-weighted int8 op joins when every float data input is already int8."""
        op = node.op_type
        if op in self.UNARY or op in self.PASSTHROUGH:
            return bool(node.input) and node.input[0] in int8
        if op in self.BINARY:
            return len(node.input) == 2 and all(i in int8 for i in node.input)
        if op in self.VARIADIC:
            return bool(node.input) and all(i in int8 for i in node.input)
        return False

    # -- planning -------------------------------------------------------------------------------------------
    def plan(self, idx: GraphIndex, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None) -> QuantPlan:
        exclude = frozenset(exclude) | self.float_layers
        only_set: Optional[FrozenSet[str]] = frozenset(only) if only is not None else None
        weighted: Dict[str, Tuple[List[int], Optional[str]]] = {}
        joined: Dict[str, List[str]] = {}  # node -> int8 outputs
        int8: Set[str] = set()
        for node in idx.graph.node:
            if node.op_type not in self.int8_ops or not self._selected(node, exclude, only_set):
                continue
            if node.op_type in self.WEIGHTED:
                slots = self._weighted_slots(idx, node)
                out = self._int8_output(idx, node) if slots else None
                if slots and (out is not None or node.op_type in self.OUTPUT_Q_OPTIONAL):
                    weighted[node.name] = (slots, out)
                    int8.update(node.input[i] for i in slots)
                    if out is not None:
                        int8.add(out)
            elif self._joins(idx, node, int8):
                outs = [o for o in node.output if o and self._float_act(idx, o)] if node.op_type == "Split" \
                    else [o for o in (self._int8_output(idx, node),) if o is not None]
                if outs:
                    joined[node.name] = outs
                    int8.update(outs)
        self._prune(idx, weighted, joined)
        plan = self._emit_plan(idx, weighted, joined)
        for node in idx.graph.node:
            if node.op_type in self.DYNAMIC and node.op_type in self.int8_ops and \
                    self._selected(node, exclude, only_set) and self._dynamic_lstm_ok(idx, node):
                plan.dynamic.append(node.name)
                plan.layers.append(node.name)
        return plan

    def _dynamic_lstm_ok(self, idx: GraphIndex, node: Any) -> bool:
        """An LSTM DynamicQuantizeLSTM can run: float W and R initializers, a float input, the
        default batch-second layout (the contrib op has no ``layout``), no peepholes."""
        ins = list(node.input) + [""] * (8 - len(node.input))
        weights = all(ins[i] in idx.inits and idx.inits[ins[i]].data_type == 1 for i in (1, 2))
        return weights and self._float_act(idx, ins[0]) and not ins[7] and \
            not any(a.name == "layout" and a.i != 0 for a in node.attribute)

    def _prune(self, idx: GraphIndex, weighted: Dict[str, Any], joined: Dict[str, List[str]]) -> None:
        """Drop joined ops whose outputs feed no int8 op (repeat until stable)."""
        changed = True
        while changed:
            changed = False
            for name in list(joined):
                feeds = any(c.name in weighted or c.name in joined or self._through_folded(idx, c, weighted, joined)
                            for o in joined[name] for c, _ in idx.consumers.get(o, []))
                if not feeds:
                    del joined[name]
                    changed = True

    def _through_folded(self, idx: GraphIndex, node: Any, weighted: Dict[str, Any], joined: Dict[str, Any]) -> bool:
        return node.op_type in self.FOLDED and any(c.name in weighted or c.name in joined
                                                   for c, _ in idx.consumers.get(node.output[0], []))

    def _emit_plan(self, idx: GraphIndex, weighted: Dict[str, Tuple[List[int], Optional[str]]],
                   joined: Dict[str, List[str]]) -> QuantPlan:
        plan = QuantPlan()
        unit = (1.0 / 255.0, 0) if self.activation_dtype == "uint8" else (1.0 / 256.0, -128)
        for node in idx.graph.node:
            if node.name in weighted:
                slots, out = weighted[node.name]
                for i in slots:
                    plan.add_activation(node.input[i])
                if out is not None:
                    plan.add_activation(out)
                self._compute_weights(idx, plan, node, act_quantized=True)
            elif node.name in joined:
                for i in node.input:
                    if i and self._float_act(idx, i) and (node.op_type not in self.PASSTHROUGH or i == node.input[0]):
                        plan.add_activation(i)
                for o in joined[node.name]:
                    plan.add_activation(o)
                    if node.op_type in self.UNIT_RANGE:
                        plan.fixed[o] = unit
                if node.op_type in self.PASSTHROUGH:
                    plan.shared.append([node.input[0]] + joined[node.name])
            else:
                continue
            plan.layers.append(node.name)
        return plan
