"""``tflite``: the TFLite int8 quantization spec.

Activations int8 asymmetric per-tensor; weights int8 symmetric per-channel (Conv2D output channels;
DepthwiseConv2D is per-channel on TFLite's dim 3, which is the ONNX weight's axis 0); FullyConnected
per-tensor; bias int32 with scale ``s_in * s_w``. Concat, pools, Reshape, Resize, Pad, Transpose,
Gather, Slice... keep the input's scale; Logistic/Softmax outputs are fixed to (1/256, -128), Tanh to
(1/128, 0), LogSoftmax to (16/256, 127). The QDQ ONNX model follows the same spec, and
:func:`sdk.quantize.qdq.export_ranges` writes the per-tensor ranges as JSON for a converter.
"""
from __future__ import annotations

from typing import Any, ClassVar, Set, Tuple

from ..graph import GraphIndex
from .base import QuantPlan
from .islands import IslandScheme


class TFLiteScheme(IslandScheme):
    name = "tflite"
    exports_ranges = True
    description = "TFLite int8 spec: int8 asymmetric activations, per-channel weights, shared/fixed scales"
    default_method = "minmax"
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("int8",)
    COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Sub", "Concat",
                   "GlobalAveragePool", "AveragePool", "Sigmoid", "Softmax", "Tanh", "LogSoftmax",
                   "LeakyRelu", "HardSigmoid", "HardSwish", "Relu", "Clip")
    PASSTHROUGH_OPS = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Resize", "Pad",
                       "Gather", "Slice", "Split", "DepthToSpace", "SpaceToDepth")
    FOLDED = ("Relu", "Clip")
    FIXED_OUTPUTS = {"Sigmoid": (1.0 / 256, -128), "Softmax": (1.0 / 256, -128),
                     "Tanh": (1.0 / 128, 0), "LogSoftmax": (16.0 / 256, 127)}

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
            fixed = self.FIXED_OUTPUTS.get(node.op_type)
            if fixed is not None:
                plan.fixed[out] = fixed
            if node.op_type in ("Concat", "AveragePool", "GlobalAveragePool"):
                plan.shared.append([node.input[i] for i in range(len(node.input))] + [out]
                                   if node.op_type == "Concat" else [node.input[0], out])
