"""Operator-code versions and the ``min_runtime_version`` metadata of a written ``.tflite``, as
TensorFlow Lite's own converter sets them.

The version rules are TFLite's ``GetBuiltinOperatorVersion`` (with the ``ext_options`` its
``GetOpSignature`` derives: per-channel filters, grouped convolution, MUL's rescale, quantized
ADD/MUL/ABS inputs), read from tensorflow/tensorflow
``tensorflow/lite/tools/versioning/op_version.cc`` at commit 02087409073e69754277a2d2cf20af23a44334de
and ``op_signature.cc`` at 05abf38d0a8506d355b5012536193ab233180ad2. The runtime versions are the
``op_version_map`` of ``tensorflow/compiler/mlir/lite/tools/versioning/runtime_version.cc`` at
03f49db5a23ec2b22a59f3f3d72e5744469ea30b (the map moved there from ``tensorflow/lite/tools``), for
the builtin operators this package writes.

:data:`VERSION_RULES`: builtin code -> ``(version, test)`` pairs in op_version.cc's order, the first
test that holds gives the version; a code without rules, or none that holds, is version 1 (op_version.cc's
``default``). As ``UpdateOpVersion`` does, an operator code gets the highest version of the operators
that use it; ``min_runtime_version`` is the highest runtime version over the operator codes (versions
the map lacks are skipped, as ``UpdateMinimumRuntimeVersionForModel`` does), written as TFLite writes
it: a 16-byte buffer, the text padded with NUL bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["VERSION_RULES", "RUNTIME_VERSIONS", "op_version", "code_versions", "min_runtime_version",
           "runtime_version_bytes", "MIN_RUNTIME_VERSION_KEY"]

MIN_RUNTIME_VERSION_KEY = "min_runtime_version"


@dataclass(frozen=True)
class Sig:
    """What op_version.cc looks at of one operator: its tensors' types, shapes and quantization,
    its input count and its builtin options (the schema's defaults where not set)."""

    op: Any
    tensors: Sequence[Any]

    def _t(self, idx: Sequence[int], i: int) -> Optional[Any]:
        return self.tensors[idx[i]] if i < len(idx) and idx[i] >= 0 else None

    def i(self, k: int) -> str:
        """Type of input ``k`` ("none" for an absent optional input)."""
        t = self._t(self.op.inputs, k)
        return t.dtype if t is not None else "none"

    def o(self, k: int) -> str:
        t = self._t(self.op.outputs, k)
        return t.dtype if t is not None else "none"

    def rank(self, k: int) -> int:
        t = self._t(self.op.inputs, k)
        return len(t.shape) if t is not None else 0

    def shape(self, k: int) -> Tuple[int, ...]:
        t = self._t(self.op.inputs, k)
        return tuple(t.shape) if t is not None else ()

    def quant(self, k: int, output: bool = False) -> Optional[Any]:
        t = self._t(self.op.outputs if output else self.op.inputs, k)
        return t.quant if t is not None else None

    def opt(self, name: str) -> Any:
        """A builtin option: as set, else the schema's default; zero when the operator has no options
        table (TFLite parses absent options into zero-initialised parameters)."""
        if name in self.op.options:
            return self.op.options[name]
        if not self.op.options_type:
            return 0
        from .tflgraph import schema

        return getattr(getattr(schema(), self.op.options_type + "T")(), name, 0)

    def types(self, i0: str, i1: Optional[str] = None, o0: Optional[str] = None) -> bool:
        return self.i(0) == i0 and (i1 is None or self.i(1) == i1) and (o0 is None or self.o(0) == o0)

    # -- the ext_options of op_signature.cc ----------------------------------------------------------
    def per_channel(self, k: int, dim: int) -> bool:
        """Input ``k`` has one scale per entry of its dimension ``dim`` (CONV_2D: filter dim 0,
        DEPTHWISE_CONV_2D: dim 3; FULLY_CONNECTED also wants more than one scale)."""
        q, shape = self.quant(k), self.shape(k)
        return q is not None and len(q.scale) > 0 and len(shape) > dim and len(q.scale) == shape[dim]

    def fc_per_channel(self) -> bool:
        q, shape = self.quant(1), self.shape(1)
        return q is not None and len(q.scale) > 1 and bool(shape) and len(q.scale) == shape[0]

    def axis_per_channel(self, k: int, output: bool = False) -> bool:
        """DEQUANTIZE's input / QUANTIZE's output: more than one scale, one per entry of its
        quantized dimension."""
        t = self._t(self.op.outputs if output else self.op.inputs, k)
        if t is None or t.quant is None:
            return False
        q = t.quant
        return (len(q.scale) > 1 and len(t.shape) > int(q.axis)
                and len(q.scale) == t.shape[int(q.axis)])

    def grouped(self) -> bool:
        a, w = self.shape(0), self.shape(1)
        return len(a) == 4 and len(w) == 4 and a[3] != w[3]

    def input_quantized(self, *ks: int) -> bool:
        return any(self.quant(k) is not None for k in ks)

    def mul_rescale_ge_1(self) -> bool:
        qs = [self.quant(0), self.quant(1), self.quant(0, output=True)]
        if not all(q is not None and len(q.scale) for q in qs):
            return False
        s1, s2, so = (float(q.scale[0]) for q in qs if q is not None)
        return s1 != 0 and s2 != 0 and so != 0 and s1 * s2 / so >= 1.0

    def broadcast_over_4d(self) -> bool:
        """NeedBroadcastForBinaryInputs && GetInputMaxDims > 4."""
        n = len(self.op.inputs)
        return n >= 2 and self.shape(0) != self.shape(1) and max(self.rank(k) for k in range(n)) > 4


Rule = Tuple[int, Callable[[Sig], bool]]

_I8_OR_I16_3_2: Tuple[Rule, ...] = ((3, lambda s: s.i(0) == "int16"), (2, lambda s: s.i(0) == "int8"))
_INT8_2: Tuple[Rule, ...] = ((2, lambda s: s.i(0) == "int8"),)
_POOL: Tuple[Rule, ...] = ((3, lambda s: s.i(0) == "int16" and s.o(0) == "int16"), (2, lambda s: s.i(0) == "int8"))
_MINMAX: Tuple[Rule, ...] = ((4, lambda s: s.i(0) == "int16" and s.o(0) == "int16"),
                             (3, lambda s: s.broadcast_over_4d()), (2, lambda s: s.i(0) == "int8"))
_PAD: Tuple[Rule, ...] = ((4, lambda s: s.rank(0) > 4), (3, lambda s: s.i(0) == "int16"), (2, lambda s: s.i(0) == "int8"))
_EXP_LOG: Tuple[Rule, ...] = ((2, lambda s: s.i(0) in ("int8", "int16")),)

#: builtin code -> (version, test) in op_version.cc's order (first that holds); default 1.
VERSION_RULES: Dict[str, Tuple[Rule, ...]] = {
    "CONV_2D": (
        (8, lambda s: s.types("int16", "int8", "int16") and bool(s.opt("quantizedBiasType"))),
        (6, lambda s: s.grouped()),
        (4, lambda s: s.types("int16", "int16") and s.o(1) == "int16"),  # op_version.cc reads outputs.at(1)
        (3, lambda s: s.types("int8", "int8", "int8")),
        (7, lambda s: s.types("int8", "int4", "int8")),
        (5, lambda s: s.types("float32", "int8", "float32") and s.per_channel(1, 0)),
        (2, lambda s: s.types("float32", "int8", "float32")),
    ),
    "DEPTHWISE_CONV_2D": (
        (5, lambda s: s.types("int16", "int16") and s.o(1) == "int16"),
        (6, lambda s: s.types("float32", "int8", "float32") and s.per_channel(1, 3)),
        (4, lambda s: s.types("float32", "int8", "float32")),
        (3, lambda s: s.types("int8", "int8", "int8")),
        (7, lambda s: s.types("int8", "int4", "int8")),
        (2, lambda s: s.opt("dilationWFactor") != 1 or s.opt("dilationHFactor") != 1),
    ),
    "FULLY_CONNECTED": (
        (12, lambda s: s.types("float32", "int8", "float32") and s.fc_per_channel()),
        (11, lambda s: s.types("int16", "int8", "int16") and bool(s.opt("quantizedBiasType"))),
        (7, lambda s: s.types("int16", "int16", "int16")),
        (6, lambda s: len(s.op.inputs) == 2),
        (5, lambda s: bool(s.opt("keepNumDims"))),
        (4, lambda s: s.types("int8", "int8", "int8")),
        (10, lambda s: s.types("int8", "int4", "int8")),
        (9, lambda s: s.types("float32", "int8", "float32") and bool(s.opt("asymmetricQuantizeInputs"))),
        (3, lambda s: s.types("float32", "int8", "float32")),
        (2, lambda s: s.opt("weightsFormat") == 1),  # SHUFFLED4x16INT8
    ),
    "GATHER": (
        (7, lambda s: s.i(0) == "int4"), (6, lambda s: s.i(1) == "int16"), (5, lambda s: s.opt("batchDims") != 0),
        (4, lambda s: s.i(0) == "int16"), (3, lambda s: s.i(0) == "bool"), (2, lambda s: s.i(0) == "int8"),
    ),
    "MUL": (
        (7, lambda s: (s.i(0) == "int16" and not s.input_quantized(0, 1)) or s.i(0) == "uint32"),
        (6, lambda s: s.i(0) == "complex64"), (5, lambda s: s.i(0) == "int64"), (4, lambda s: s.i(0) == "int16"),
        (3, lambda s: s.mul_rescale_ge_1()), (2, lambda s: s.i(0) == "int8"),
    ),
    "MAX_POOL_2D": _POOL,
    "AVERAGE_POOL_2D": _POOL,
    "TRANSPOSE": (
        (6, lambda s: s.rank(0) > 5), (5, lambda s: s.i(0) == "int16"), (4, lambda s: s.rank(0) > 4),
        (3, lambda s: s.i(0) == "bool"), (2, lambda s: s.i(0) == "int8"),
    ),
    "TRANSPOSE_CONV": (  # inputs: output_shape, weights, input, [bias]
        (5, lambda s: s.types("int16", "int8", "int16") and bool(s.opt("quantizedBiasType"))),
        (4, lambda s: s.opt("fusedActivationFunction") != 0),
        (3, lambda s: len(s.op.inputs) == 4 and s.i(3) != "none"),
        (2, lambda s: s.i(1) == "int8"),
    ),
    "LSTM": (  # kernelType 0: FULL, 1: BASIC
        (5, lambda s: s.opt("kernelType") == 0 and s.i(0) == "int16" and s.i(2) == "int8" and s.o(0) == "int16"),
        (4, lambda s: s.opt("kernelType") == 0 and s.i(0) == "float32" and s.i(2) == "int8" and s.o(0) == "float32"
         and bool(s.opt("asymmetricQuantizeInputs"))),
        (3, lambda s: s.opt("kernelType") == 0 and s.i(0) == "float32" and s.i(2) == "int8" and s.o(0) == "float32"),
        (2, lambda s: s.opt("kernelType") == 1),
    ),
    "SPLIT": ((4, lambda s: s.i(1) == "int16"), (3, lambda s: s.i(1) == "int32"), (2, lambda s: s.i(1) == "int8")),
    "UNPACK": ((2, lambda s: s.i(0) in ("int8", "uint8")), (3, lambda s: s.i(0) == "bool"),
               (4, lambda s: s.i(0) == "int16" and s.o(0) == "int16")),
    "DEQUANTIZE": ((6, lambda s: s.i(0) == "int4"), (3, lambda s: s.i(0) in ("int16", "float16")),
                   (5, lambda s: s.i(0) == "int8" and s.axis_per_channel(0)), (2, lambda s: s.i(0) == "int8")),
    "QUANTIZE": ((4, lambda s: "int4" in (s.i(0), s.o(0))), (3, lambda s: s.axis_per_channel(0, output=True)),
                 (2, lambda s: s.o(0) == "int16")),
    "ABS": ((5, lambda s: s.i(0) == "int32"), (3, lambda s: s.i(0) == "int16" and s.input_quantized(0)),
            (4, lambda s: s.i(0) == "int16"), (2, lambda s: s.i(0) in ("int8", "uint8"))),
    "RELU": ((3, lambda s: s.i(0) == "int16"), (2, lambda s: s.i(0) in ("int8", "uint8"))),
    "STRIDED_SLICE": (
        (8, lambda s: bool(s.opt("offset"))), (7, lambda s: s.i(0) == "uint32"),
        (6, lambda s: s.opt("ellipsisMask") != 0 or s.opt("newAxisMask") != 0), (5, lambda s: s.i(0) == "string"),
        (4, lambda s: s.rank(0) > 4), (3, lambda s: s.i(0) == "bool"), (2, lambda s: s.i(0) == "int8"),
    ),
    "RESIZE_BILINEAR": ((4, lambda s: s.i(0) == "int16"), (3, lambda s: bool(s.opt("halfPixelCenters"))),
                        (2, lambda s: s.i(0) == "int8")),
    "RESIZE_NEAREST_NEIGHBOR": ((4, lambda s: s.i(0) == "int16"),
                                (3, lambda s: bool(s.opt("halfPixelCenters")) or bool(s.opt("alignCorners"))),
                                (2, lambda s: s.i(0) == "int8")),
    "MAXIMUM": _MINMAX,
    "MINIMUM": _MINMAX,
    "PACK": ((2, lambda s: s.i(0) == "int8"), (3, lambda s: s.i(0) == "int16" and s.o(0) == "int16"),
             (4, lambda s: s.i(0) == "uint32")),
    "TILE": ((3, lambda s: s.i(0) == "int8"), (2, lambda s: s.i(0) == "string")),
    "ADD": ((5, lambda s: s.i(0) == "int16" and not s.input_quantized(0)), (4, lambda s: s.i(0) == "int64"),
            (3, lambda s: s.i(0) == "int16" and s.o(0) == "int16" and not s.opt("potScaleInt16")),
            (2, lambda s: s.i(0) == "int8")),
    "SUB": ((5, lambda s: s.i(0) == "int16" and s.o(0) == "int16" and not s.opt("potScaleInt16")),
            (4, lambda s: s.i(0) == "int64"), (3, lambda s: s.broadcast_over_4d()), (2, lambda s: s.i(0) == "int8")),
    "DIV": ((2, lambda s: s.broadcast_over_4d()),),
    "TANH": _POOL,
    "LOGISTIC": _POOL,
    "LEAKY_RELU": ((2, lambda s: s.i(0) == "int16"),),
    "BATCH_MATMUL": ((3, lambda s: s.i(0) == "int16"), (2, lambda s: s.i(0) == "int8"),
                     (4, lambda s: s.types("float32", "int8", "float32") and bool(s.opt("asymmetricQuantizeInputs")))),
    "PAD": _PAD,
    "PADV2": _PAD,
    "CONCATENATION": ((4, lambda s: s.i(0) == "uint32"),) + _I8_OR_I16_3_2,
    "SOFTMAX": _I8_OR_I16_3_2,
    "MEAN": _I8_OR_I16_3_2,
    "MIRROR_PAD": _I8_OR_I16_3_2,
    "REDUCE_MAX": _I8_OR_I16_3_2,
    "REDUCE_MIN": _I8_OR_I16_3_2,
    "RELU6": _I8_OR_I16_3_2,
    "RSQRT": _I8_OR_I16_3_2,
    "GELU": ((2, lambda s: s.i(0) in ("int8", "uint8")),),
    "SPACE_TO_DEPTH": _INT8_2,
    "SPLIT_V": _INT8_2,
    "SUM": _INT8_2,
    "LOG_SOFTMAX": _INT8_2,
    "DEPTH_TO_SPACE": _INT8_2,
    "EXP": _EXP_LOG,
    "LOG": _EXP_LOG,
    "REDUCE_PROD": _EXP_LOG,
    # version 1 was rolled back (op_version.cc): BROADCAST_TO starts at 2
    "BROADCAST_TO": ((3, lambda s: s.i(0) in ("int8", "int16")), (2, lambda s: True)),
    "CAST": ((7, lambda s: "bfloat16" in (s.i(0), s.o(0))), (6, lambda s: s.i(0) == "int4" and s.o(0) == "float32"),
             (5, lambda s: bool({"float64", "float16"} & {s.i(0), s.o(0)})), (4, lambda s: "uint16" in (s.i(0), s.o(0))),
             (3, lambda s: "int8" in (s.i(0), s.o(0))), (2, lambda s: "uint32" in (s.i(0), s.o(0)))),
}

#: (builtin code, version) -> the first TFLite runtime that runs it (runtime_version.cc), for the
#: codes this package writes.
RUNTIME_VERSIONS: Dict[Tuple[str, int], str] = {
    ("ABS", 1): "1.13.0", ("ABS", 2): "2.4.0", ("ABS", 3): "2.5.0", ("ABS", 4): "2.6.0", ("ABS", 5): "2.12.0",
    ("ADD", 1): "1.5.0", ("ADD", 2): "1.14.0", ("ADD", 3): "2.4.0", ("ADD", 4): "2.6.0", ("ADD", 5): "2.13.0",
    ("ADD", 6): "2.23.0",
    ("AVERAGE_POOL_2D", 1): "1.5.0", ("AVERAGE_POOL_2D", 2): "1.14.0", ("AVERAGE_POOL_2D", 3): "2.3.0",
    ("BATCH_MATMUL", 1): "2.3.0", ("BATCH_MATMUL", 2): "2.3.0", ("BATCH_MATMUL", 3): "2.4.0",
    ("BATCH_MATMUL", 4): "2.5.0",
    ("BROADCAST_TO", 2): "2.5.0", ("BROADCAST_TO", 3): "2.5.0",
    ("CAST", 1): "1.5.0", ("CAST", 2): "2.7.0", ("CAST", 3): "2.8.0", ("CAST", 4): "2.9.0",
    ("CAST", 5): "2.12.0", ("CAST", 6): "2.15.0", ("CAST", 7): "2.17.0", ("CAST", 8): "2.21.0",
    ("CONCATENATION", 1): "1.5.0", ("CONCATENATION", 2): "1.14.0", ("CONCATENATION", 3): "2.3.0",
    ("CONCATENATION", 4): "2.14.0", ("CONCATENATION", 5): "2.21.0",
    ("CONV_2D", 1): "1.5.0", ("CONV_2D", 2): "1.14.0", ("CONV_2D", 3): "1.14.0", ("CONV_2D", 4): "2.3.0",
    ("CONV_2D", 5): "2.4.0", ("CONV_2D", 6): "2.9.0", ("CONV_2D", 7): "2.11.0", ("CONV_2D", 8): "2.15.0",
    ("COS", 1): "1.14.0",
    ("DEPTHWISE_CONV_2D", 1): "1.5.0", ("DEPTHWISE_CONV_2D", 2): "1.12.0", ("DEPTHWISE_CONV_2D", 3): "1.14.0",
    ("DEPTHWISE_CONV_2D", 4): "2.2.0", ("DEPTHWISE_CONV_2D", 5): "2.3.0", ("DEPTHWISE_CONV_2D", 6): "2.3.0",
    ("DEPTHWISE_CONV_2D", 7): "2.11.0",
    ("DEPTH_TO_SPACE", 1): "2.1.0", ("DEPTH_TO_SPACE", 2): "2.5.0",
    ("DEQUANTIZE", 1): "1.13.1", ("DEQUANTIZE", 2): "1.14.0", ("DEQUANTIZE", 3): "1.15.0",
    ("DEQUANTIZE", 4): "2.2.0", ("DEQUANTIZE", 5): "2.7.0", ("DEQUANTIZE", 6): "2.18.0",
    ("DEQUANTIZE", 7): "2.21.0", ("DEQUANTIZE", 8): "2.22.0",
    ("DIV", 1): "1.6.0", ("DIV", 2): "2.3.0",
    ("ELU", 1): "1.14.0",
    ("EXP", 1): "1.7.0", ("EXP", 2): "2.12.0",
    ("FLOOR", 1): "1.9.0",
    ("FULLY_CONNECTED", 1): "1.5.0", ("FULLY_CONNECTED", 2): "1.10.0", ("FULLY_CONNECTED", 3): "1.14.0",
    ("FULLY_CONNECTED", 4): "1.14.0", ("FULLY_CONNECTED", 5): "2.0.0", ("FULLY_CONNECTED", 6): "2.1.0",
    ("FULLY_CONNECTED", 7): "2.3.0", ("FULLY_CONNECTED", 8): "2.3.0", ("FULLY_CONNECTED", 9): "2.3.0",
    ("FULLY_CONNECTED", 10): "2.11.0", ("FULLY_CONNECTED", 11): "2.15.0", ("FULLY_CONNECTED", 12): "2.17.0",
    ("FULLY_CONNECTED", 13): "2.18.0", ("FULLY_CONNECTED", 14): "2.21.0",
    ("GATHER", 1): "1.6.0", ("GATHER", 2): "1.14.0", ("GATHER", 3): "1.15.0", ("GATHER", 4): "2.4.0",
    ("GATHER", 5): "2.5.0", ("GATHER", 6): "2.13.0", ("GATHER", 7): "2.15.0",
    ("GELU", 1): "2.9.0", ("GELU", 2): "2.9.0",
    ("HARD_SWISH", 1): "1.15.0",
    ("LEAKY_RELU", 1): "1.13.1", ("LEAKY_RELU", 2): "2.3.0",
    ("LOG", 1): "1.14.0", ("LOG", 2): "2.15.0",
    ("LOGISTIC", 1): "1.14.0", ("LOGISTIC", 2): "1.14.0", ("LOGISTIC", 3): "2.3.0",
    ("LOG_SOFTMAX", 1): "1.14.0", ("LOG_SOFTMAX", 2): "1.14.0",
    ("LSTM", 1): "1.7.0", ("LSTM", 2): "1.10.0", ("LSTM", 3): "1.14.0", ("LSTM", 4): "2.3.0",
    ("MAXIMUM", 1): "1.14.0", ("MAXIMUM", 2): "1.14.0", ("MAXIMUM", 3): "2.3.0", ("MAXIMUM", 4): "2.3.0",
    ("MAX_POOL_2D", 1): "1.5.0", ("MAX_POOL_2D", 2): "1.14.0", ("MAX_POOL_2D", 3): "2.3.0",
    ("MEAN", 1): "1.6.0", ("MEAN", 2): "1.14.0", ("MEAN", 3): "2.4.0",
    ("MINIMUM", 1): "1.14.0", ("MINIMUM", 2): "1.14.0", ("MINIMUM", 3): "2.3.0", ("MINIMUM", 4): "2.3.0",
    ("MIRROR_PAD", 1): "1.13.1", ("MIRROR_PAD", 2): "2.3.0", ("MIRROR_PAD", 3): "2.12.0",
    ("MUL", 1): "1.5.0", ("MUL", 2): "1.14.0", ("MUL", 3): "1.15.0", ("MUL", 4): "2.3.0", ("MUL", 5): "2.6.0",
    ("MUL", 6): "2.11.0", ("MUL", 7): "2.13.0", ("MUL", 8): "2.23.0",
    ("NEG", 1): "1.9.0",
    ("PACK", 1): "1.11.0", ("PACK", 2): "1.14.0", ("PACK", 3): "2.3.0", ("PACK", 4): "2.13.0",
    ("PAD", 1): "1.5.0", ("PAD", 2): "1.14.0", ("PAD", 3): "2.4.0", ("PAD", 4): "2.6.0", ("PAD", 5): "2.20.0",
    ("PADV2", 1): "1.9.0", ("PADV2", 2): "1.14.0", ("PADV2", 3): "2.4.0", ("PADV2", 4): "2.6.0",
    ("PADV2", 5): "2.20.0",
    ("POW", 1): "1.10.0",
    ("PRELU", 1): "1.8.0",
    ("QUANTIZE", 1): "1.14.0", ("QUANTIZE", 2): "1.15.0", ("QUANTIZE", 3): "2.7.0", ("QUANTIZE", 4): "2.21.0",
    ("QUANTIZE", 5): "2.21.0", ("QUANTIZE", 6): "2.21.0",
    ("REDUCE_MAX", 1): "1.11.0", ("REDUCE_MAX", 2): "1.14.0", ("REDUCE_MAX", 3): "2.5.0",
    ("REDUCE_MIN", 1): "1.11.0", ("REDUCE_MIN", 2): "1.14.0", ("REDUCE_MIN", 3): "2.5.0",
    ("REDUCE_PROD", 1): "1.11.0", ("REDUCE_PROD", 2): "2.6.0",
    ("RELU", 1): "1.5.0", ("RELU", 2): "2.1.0", ("RELU", 3): "2.5.0",
    ("RELU6", 1): "1.5.0", ("RELU6", 2): "1.14.0", ("RELU6", 3): "2.5.0",
    ("RELU_0_TO_1", 1): "2.10.0",
    ("RELU_N1_TO_1", 1): "1.5.0",
    ("RESHAPE", 1): "1.5.0",
    ("RESIZE_BILINEAR", 1): "1.7.0", ("RESIZE_BILINEAR", 2): "1.14.0", ("RESIZE_BILINEAR", 3): "2.2.0",
    ("RESIZE_BILINEAR", 4): "2.5.0",
    ("RESIZE_NEAREST_NEIGHBOR", 1): "1.13.1", ("RESIZE_NEAREST_NEIGHBOR", 2): "1.14.0",
    ("RESIZE_NEAREST_NEIGHBOR", 3): "2.3.0", ("RESIZE_NEAREST_NEIGHBOR", 4): "2.4.0",
    ("RSQRT", 1): "1.10.0", ("RSQRT", 2): "2.5.0", ("RSQRT", 3): "2.15.0",
    ("SIN", 1): "1.9.0",
    ("SOFTMAX", 1): "1.5.0", ("SOFTMAX", 2): "1.14.0", ("SOFTMAX", 3): "2.3.0",
    ("SPACE_TO_DEPTH", 1): "1.5.0", ("SPACE_TO_DEPTH", 2): "1.14.0",
    ("SPLIT", 1): "1.5.0", ("SPLIT", 2): "1.14.0", ("SPLIT", 3): "1.14.0", ("SPLIT", 4): "2.3.0",
    ("SPLIT_V", 1): "1.13.1", ("SPLIT_V", 2): "2.3.0",
    ("SQRT", 1): "1.10.0", ("SQRT", 2): "2.21.0",
    ("STRIDED_SLICE", 1): "1.6.0", ("STRIDED_SLICE", 2): "1.14.0", ("STRIDED_SLICE", 3): "2.1.0",
    ("STRIDED_SLICE", 4): "2.2.0", ("STRIDED_SLICE", 5): "2.5.0", ("STRIDED_SLICE", 6): "2.6.0",
    ("STRIDED_SLICE", 7): "2.14.0", ("STRIDED_SLICE", 8): "2.14.0",
    ("SUB", 1): "1.6.0", ("SUB", 2): "1.14.0", ("SUB", 3): "2.3.0", ("SUB", 4): "2.4.0", ("SUB", 5): "2.4.0",
    ("SUM", 1): "1.10.0", ("SUM", 2): "1.15.0",
    ("TANH", 1): "1.14.0", ("TANH", 2): "1.14.0", ("TANH", 3): "2.3.0",
    ("TILE", 1): "1.10.1", ("TILE", 2): "2.2.0", ("TILE", 3): "2.8.0",
    ("TRANSPOSE", 1): "1.6.0", ("TRANSPOSE", 2): "1.14.0", ("TRANSPOSE", 3): "1.15.0",
    ("TRANSPOSE", 4): "2.3.0", ("TRANSPOSE", 5): "2.4.0", ("TRANSPOSE", 6): "2.12.0",
    ("TRANSPOSE", 7): "2.14.4", ("TRANSPOSE", 8): "2.22.0",
    ("TRANSPOSE_CONV", 1): "1.9.0", ("TRANSPOSE_CONV", 2): "2.2.0", ("TRANSPOSE_CONV", 3): "2.3.0",
    ("TRANSPOSE_CONV", 4): "2.13.0", ("TRANSPOSE_CONV", 5): "2.15.0",
    ("UNPACK", 1): "1.11.0", ("UNPACK", 2): "1.14.0", ("UNPACK", 3): "2.2.0", ("UNPACK", 4): "2.3.0",
    ("UNPACK", 5): "2.22.0",
}



def op_version(op: Any, tensors: Sequence[Any]) -> int:
    """The version TFLite's converter gives operator ``op`` (a :class:`.tflgraph.TFLOp`) over
    ``tensors`` (the graph's :class:`.tflgraph.TFLTensor` list); 1 for a custom operator."""
    if op.custom_code is not None:
        return 1
    sig = Sig(op, tensors)
    return next((v for v, test in VERSION_RULES.get(op.code, ()) if test(sig)), 1)


def code_versions(g: Any) -> Dict[str, int]:
    """Builtin code -> the version of its operator code: the highest over the operators of ``g``
    that use it (UpdateOpVersion)."""
    out: Dict[str, int] = {}
    for op in g.ops:
        if op.custom_code is None:
            out[op.code] = max(out.get(op.code, 1), op_version(op, g.tensors))
    return out


def _key(version: str) -> List[int]:
    return [int(p) for p in version.split(".")]


def min_runtime_version(versions: Dict[str, int]) -> str:
    """The first TFLite runtime that runs every (code, version) of ``versions`` ("" when the map
    knows none of them)."""
    known = [RUNTIME_VERSIONS[(c, v)] for c, v in versions.items() if (c, v) in RUNTIME_VERSIONS]
    return max(known, key=_key) if known else ""


def runtime_version_bytes(version: str) -> bytes:
    """The ``min_runtime_version`` buffer as TFLite writes it: 16 bytes, NUL-padded."""
    raw = version.encode()
    if len(raw) >= 16:
        raise ValueError(f"runtime version {version!r} is 16 bytes or longer")
    return raw + b"\0" * (16 - len(raw))
