"""``tflite``: the TFLite int8 quantization spec.

Activations int8 asymmetric per-tensor; weights int8 symmetric per-channel (Conv2D output channels;
DepthwiseConv2D is per-channel on TFLite's dim 3, which is the ONNX weight's axis 0); FullyConnected
per-tensor; bias int32 with scale ``s_in * s_w``. Concat, pools, Reshape, Resize, Pad, Transpose,
Gather, Slice... keep the input's scale; Logistic/Softmax outputs are fixed to (1/256, -128), Tanh to
(1/128, 0), LogSoftmax to (16/256, 127). The QDQ ONNX model follows the same spec, and
:func:`sdk.quantize.qdq.export_ranges` writes the per-tensor ranges as JSON for a converter.
"""
from __future__ import annotations

import copy
from typing import Any, ClassVar, FrozenSet, Iterable, Optional, Set, Tuple

from ..graph import GraphIndex
from .base import QuantPlan
from .islands import IslandScheme


class TFLiteScheme(IslandScheme):
    name = "tflite"
    exports_ranges = True
    description = "TFLite int8 spec: int8 asymmetric activations, per-channel weights, shared/fixed scales"
    default_method = "minmax"
    hardswish_op = True       # TFLite's HARD_SWISH: float between int8 grids for XNNPACK, or its int8 form
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("int8",)
    COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Sub", "Concat",
                   "GlobalAveragePool", "AveragePool", "Sigmoid", "Softmax", "Tanh", "LogSoftmax",
                   "LeakyRelu", "HardSigmoid", "HardSwish", "Relu", "Clip")
    PASSTHROUGH_OPS = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Resize", "Pad",
                       "Gather", "Slice", "Split", "DepthToSpace", "SpaceToDepth")
    FOLDED = ("Relu", "Clip")
    #: ddddocr-det's Focus (8 slices of the input image, then a Concat) ran float before its QUANTIZE ops
    INPUT_PASSTHROUGH = True
    FIXED_OUTPUTS = {"Sigmoid": (1.0 / 256, -128), "Softmax": (1.0 / 256, -128),
                     "Tanh": (1.0 / 128, 0), "LogSoftmax": (16.0 / 256, 127)}
    #: ops whose TFLite form has no 16x8 kernel (HARD_SWISH; HardSigmoid's RELU_0_TO_1; LOG_SOFTMAX:
    #: see sdk.targets.tflite.int8.INT16_OPS): a 16x8 request for one of them keeps it in float
    NO_INT16 = ("HardSwish", "HardSigmoid", "LogSoftmax")
    #: weightless ops that carry a 16x8 layer's int16 output on when all their quantized operands are
    #: int16 (TFLite: MAX_POOL_2D, RESHAPE, TRANSPOSE, RESIZE_*, PAD(V2), GATHER, STRIDED_SLICE, SPLIT_V,
    #: MAXIMUM/MINIMUM, MEAN, REDUCE_MAX, all in sdk.targets.tflite.int8.INT16_OPS)
    CARRY_INT16 = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Resize", "Pad", "Gather",
                   "Slice", "Split", "Max", "Min", "ReduceMean", "ReduceMax")
    #: the layers that run 16x8 (int16 activations, int8 weights): the fallback's step before float
    int16_layers: FrozenSet[str] = frozenset()
    _float: FrozenSet[str] = frozenset()       # the layers the current plan keeps in float
    #: the file's inputs and outputs: ``float`` (QUANTIZE/DEQUANTIZE at the boundary) or ``int8``
    io: str = "float"

    def for_io(self, io: str) -> "TFLiteScheme":
        """This scheme for a file with ``io`` inputs and outputs: with ``int8``, a 16x8 layer's graph
        output is handed over requantized to int8, as the converter writes it."""
        s = copy.copy(self)
        s.io = io
        return s

    def with_int16(self, layers: Iterable[str]) -> "TFLiteScheme":
        """This scheme with ``layers`` run 16x8: their outputs are int16 Q/DQ (symmetric, ONNX Runtime's
        com.microsoft QuantizeLinear), and an int8 layer reading one reads it requantized to int8,
        as the converter writes it (:mod:`sdk.targets.tflite.int8`)."""
        s = copy.copy(self)
        s.int16_layers = frozenset(layers)
        return s

    def plan(self, idx: GraphIndex, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None) -> QuantPlan:
        if self.int16_layers:
            ops = {n.name: n.op_type for n in idx.graph.node}
            exclude = set(exclude) | {x for x in self.int16_layers if ops.get(x) in self.NO_INT16}
        self._float = frozenset(exclude)
        return super().plan(idx, exclude, only)

    def _data_inputs(self, idx: GraphIndex, node: Any):
        if node.op_type in ("Relu", "Clip"):
            # a Relu/Clip right after a quantized op folds into it; alone it is an int8 op
            src = idx.producer.get(node.input[0]) if node.input else None
            if src is not None and src.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add"):
                return None
        return super()._data_inputs(idx, node)

    def _finish(self, idx: GraphIndex, plan: QuantPlan, compute: Set[str]) -> None:
        # every output of a quantized op is an int8 tensor in TFLite: quantize the ones that leave the
        # int8 islands too (graph outputs, float consumers), after the folded activation
        for node in idx.graph.node:
            if node.name not in compute or not node.output:
                continue
            out = node.output[0]
            nxt = idx.single_consumer(out)
            if nxt is not None and nxt.op_type in self.FOLDED and nxt.name not in compute:
                out = nxt.output[0]
            if out not in plan.activations and idx.elem_type.get(out) == 1:
                plan.add_activation(out)
            if out in plan.activations and out in idx.graph_outputs:
                plan.outputs.add(out)       # the file's output is this int8 tensor, not the float value
            fixed = self.FIXED_OUTPUTS.get(node.op_type)
            if fixed is not None:
                plan.fixed[out] = fixed
            if node.op_type in ("Concat", "AveragePool", "GlobalAveragePool"):
                plan.shared.append([node.input[i] for i in range(len(node.input))] + [out]
                                   if node.op_type == "Concat" else [node.input[0], out])
        if self.int16_layers:
            self._int16(idx, plan, compute)

    def _int16(self, idx: GraphIndex, plan: QuantPlan, compute: Set[str]) -> None:
        """The 16x8 layers' outputs as int16, carried on through the weightless ops after them whose
        operands are all int16 and that TFLite runs 16x8 (pools, Reshape, Pad, Resize, Max...: their
        kernels keep the input's int16 scale); every other consumer but the float-kept layers is in
        ``int8_readers``, as the converter writes an int8 op wherever its operands are quantized and
        that op reads an int8 copy (QUANTIZE). Float layers read the int16 values (DEQUANTIZE)."""
        sixteen = compute & self.int16_layers
        carried: Set[str] = set()
        for node in idx.graph.node:          # topological: a chain of carried ops is followed in one pass
            if not node.output:
                continue
            if node.name in sixteen:
                out = node.output[0]
                nxt = idx.single_consumer(out)
                if nxt is not None and nxt.op_type in self.FOLDED and nxt.name not in compute:
                    out = nxt.output[0]
            elif node.name not in compute and node.name not in self._float and node.op_type in self.CARRY_INT16:
                acts = [i for i in node.input if i and i not in idx.inits and i in plan.activations]
                if not acts or not all(i in plan.int16 for i in acts):
                    continue
                out = node.output[0]
                carried.add(node.name)
            else:
                continue
            if out in plan.activations:
                plan.int16.add(out)
                if out in idx.graph_outputs:
                    plan.outputs.add(out)
                    if self.io == "int8":       # int8 I/O: QUANTIZE int16 -> int8 at the output
                        plan.int8_outputs.add(out)
        for out in plan.int16:
            readers = plan.activations[out]
            for c, i in idx.consumers.get(out, []):
                if (readers is None or (c.name, i) in readers) and c.name not in sixteen | carried \
                        and c.name not in self._float:
                    plan.int8_readers.setdefault(out, set()).add((c.name, i))
