"""Quantization schemes for ONNX Runtime's mobile execution providers: XNNPACK, NNAPI and QNN.

Each places Q/DQ with the planner of :class:`~.onnxruntime.OnnxRuntimeScheme` (a weighted op is
int8 only as a whole QDQ node unit: ``DQ(x), DQ(w) -> op -> Q``; other ops join only when their
inputs are already int8 and their output feeds an int8 op), restricted to the node units the EP
itself turns into int8 kernels, with the activation dtype, weight granularity and fixed output
ranges the EP requires. Sources (microsoft/onnxruntime):

XNNPACK (``onnxruntime/core/providers/xnnpack``)
  ``detail/utils.cc`` ``GetQuantizedOpType``: QDQ node units of Conv, ConvTranspose, MaxPool,
  AveragePool, Softmax, Resize (Gemm/MatMul/Add/Mul: float only). ``GetTensorQuantType``: uint8
  per-tensor, int8 per-tensor or int8 per-channel weights with zero point 0 ("we do not handle
  u8s8": activations and weights of one signedness). ``math/softmax.cc`` ``IsQuantSoftmaxSupported``:
  QDQ Softmax only as uint8 with output scale 1/256, zero point 0. So: int8 activations (QS8),
  symmetric int8 per-channel Conv weights (QC8); Softmax stays float (it is uint8-only);
  MaxPool/Resize pass int8 through.
NNAPI (``onnxruntime/core/providers/nnapi/nnapi_builtin/builders``)
  ``helper.cc`` ``GetQuantizedOpType``: QDQ node units of Conv, Resize, AveragePool, Add, Mul,
  Transpose, Reshape, Softmax, Concat, Gemm, MatMul; ``IsInternalQuantizedNodeUnit``: Transpose,
  Resize, Concat, MaxPool run on uint8 inside a partition. ``HasValidBinaryOpQuantizedInputTypes``:
  activations must be uint8 (u8u8 or u8s8 for Conv/Gemm/MatMul). ``impl/softmax_op_builder.cc``:
  a QDQ Softmax's output must have scale 1/256 and zero point 0. NNAPI's FULLY_CONNECTED takes no
  per-channel weights, so Gemm/MatMul weights are per-tensor; Conv weights per-channel int8
  symmetric (TENSOR_QUANT8_SYMM_PER_CHANNEL). Sigmoid/LeakyRelu/GlobalAveragePool have no QDQ
  form there: they stay float.
QNN (``onnxruntime/quantization/execution_providers/qnn/quant_config.py``, ``get_qnn_qdq_config``,
  shipped in the onnxruntime wheel)
  activations uint8 asymmetric by default; every op type quantized except Cast; signed weights are
  symmetric; ``_process_matmul``: "QNN does not support per-channel MatMul", so per-channel only
  for Conv/ConvTranspose weights. The HTP backend runs QDQ node units of the unary, binary and
  pooling ops too, so they join when their inputs are int8.
"""
from __future__ import annotations

from typing import ClassVar, Dict, FrozenSet, Optional, Tuple

from .onnxruntime import OnnxRuntimeScheme

__all__ = ["XnnpackScheme", "NnapiScheme", "QnnScheme", "EP_SCHEMES", "scheme_for_ep"]


class _MobileEpScheme(OnnxRuntimeScheme):
    """The onnxruntime planner with an EP's op sets. Not a host runtime: the QDQ model's latency on
    this machine's CPU provider says nothing about the EP (no speed-aware plan)."""

    host_runtime = False
    ep: ClassVar[str] = ""
    #: a com.microsoft op is no EP's: recurrent layers stay float
    DYNAMIC: ClassVar[Tuple[str, ...]] = ()
    #: output tensor of these ops -> fixed (scale, zero point) the EP requires
    FIXED_OUTPUT: ClassVar[Dict[str, Tuple[float, int]]] = {}

    def _emit_plan(self, idx, weighted, joined):
        plan = super()._emit_plan(idx, weighted, joined)
        by_name = {n.name: n for n in idx.graph.node}
        for name in plan.layers:
            node = by_name.get(name)
            if node is not None and node.op_type in self.FIXED_OUTPUT:
                for out in joined.get(name, []):
                    plan.fixed[out] = self.FIXED_OUTPUT[node.op_type]
        return plan

    def speed_variants(self, plan, idx):
        return []

    @classmethod
    def reduced_range_reason(cls, machine: str, flags: FrozenSet[str]) -> Optional[str]:
        """None: the EP's int8 kernels (XNNPACK, NNAPI drivers, QNN's HTP) run on the phone's SoC,
        not on MLAS's x86 U8S8 path that saturates without VNNI, whatever this host is."""
        return None


class XnnpackScheme(_MobileEpScheme):
    name = "onnxruntime-xnnpack"
    ep = "xnnpack"
    description = ("ONNX Runtime XNNPACK EP: QDQ Conv (int8 activations, int8 per-channel weights, QS8/QC8), "
                   "MaxPool/AveragePool/Resize on int8; Gemm/MatMul/Softmax float")
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("int8",)
    WEIGHTED: ClassVar[Tuple[str, ...]] = ("Conv",)
    OUTPUT_Q_OPTIONAL: ClassVar[Tuple[str, ...]] = ()
    UNARY: ClassVar[Tuple[str, ...]] = ("AveragePool",)
    BINARY: ClassVar[Tuple[str, ...]] = ()
    VARIADIC: ClassVar[Tuple[str, ...]] = ()
    PASSTHROUGH: ClassVar[Tuple[str, ...]] = ("MaxPool", "Resize")
    UNIT_RANGE: ClassVar[Tuple[str, ...]] = ()


class NnapiScheme(_MobileEpScheme):
    name = "onnxruntime-nnapi"
    ep = "nnapi"
    description = ("ONNX Runtime NNAPI EP: uint8 activations, int8 per-channel Conv weights, per-tensor "
                   "Gemm/MatMul weights; QDQ Conv/Gemm/MatMul/Add/Mul/AveragePool/Softmax/Concat, "
                   "uint8 through Transpose/Reshape/Resize/MaxPool; Softmax output 1/256, 0")
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("uint8",)
    WEIGHTED: ClassVar[Tuple[str, ...]] = ("Conv", "Gemm", "MatMul")
    OUTPUT_Q_OPTIONAL: ClassVar[Tuple[str, ...]] = ()   # NNAPI's QDQ Gemm/MatMul are whole units
    UNARY: ClassVar[Tuple[str, ...]] = ("AveragePool", "Softmax")
    BINARY: ClassVar[Tuple[str, ...]] = ("Add", "Mul")
    VARIADIC: ClassVar[Tuple[str, ...]] = ("Concat",)
    PASSTHROUGH: ClassVar[Tuple[str, ...]] = ("Transpose", "Reshape", "Resize", "MaxPool")
    UNIT_RANGE: ClassVar[Tuple[str, ...]] = ()
    FIXED_OUTPUT: ClassVar[Dict[str, Tuple[float, int]]] = {"Softmax": (1.0 / 256.0, 0)}


class QnnScheme(_MobileEpScheme):
    name = "onnxruntime-qnn"
    ep = "qnn"
    description = ("ONNX Runtime QNN EP (HTP): uint8 activations, int8 symmetric weights (per-channel for Conv "
                   "only), QDQ on every op type it runs")
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("uint8",)
    WEIGHTED: ClassVar[Tuple[str, ...]] = ("Conv", "Gemm", "MatMul")
    UNARY: ClassVar[Tuple[str, ...]] = ("Sigmoid", "LeakyRelu", "Softmax", "AveragePool", "GlobalAveragePool",
                                        "HardSigmoid", "HardSwish", "Tanh")
    BINARY: ClassVar[Tuple[str, ...]] = ("Add", "Mul", "Sub", "Div")
    VARIADIC: ClassVar[Tuple[str, ...]] = ("Concat",)
    PASSTHROUGH: ClassVar[Tuple[str, ...]] = ("MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                                             "Resize", "Split", "Flatten")


#: EP short name -> scheme name in :data:`~sdk.quantize.schemes.SCHEMES`.
EP_SCHEMES: Dict[str, str] = {"xnnpack": XnnpackScheme.name, "nnapi": NnapiScheme.name, "qnn": QnnScheme.name}


def scheme_for_ep(target: str, ep: Optional[str]) -> str:
    """The scheme name of ``--target T --ep E``: the target's own without an EP; an unknown EP (or
    one for another target) is an :class:`~sdk.errors.InputError` naming the known ones."""
    from ...errors import InputError
    from ...registry import TARGET_ALIASES

    if not ep:
        return target
    canonical = TARGET_ALIASES.get(target, target)
    key = ep.strip().lower()
    if canonical != "onnxruntime" or key not in EP_SCHEMES:
        known = ", ".join(EP_SCHEMES)
        if canonical != "onnxruntime":
            raise InputError(f"--ep applies to --target onnxruntime, not {target}", f"EPs with a scheme: {known}")
        raise InputError(f"no quantization scheme for EP '{ep}'", f"known: {known}")
    return EP_SCHEMES[key]
