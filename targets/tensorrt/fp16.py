"""fp16 by conversion, for TensorRT builds without an fp16 builder flag (TensorRT 11: strongly typed
networks only; the precision comes from the model's tensor types).

:func:`convert_to_fp16` turns a float32 ONNX model into float16 with onnxruntime's converter
(``onnxruntime.transformers.float16``), keeping the model's inputs and outputs float32 (the engine's
bindings do not change) and keeping numerically sensitive ops in float32 (:data:`FP32_OPS`:
reductions and normalisations that overflow or lose precision in fp16, exp/log/pow, resize
coordinate maths), with Casts at their borders.
Runs on the board too: Python 3.8, onnx and onnxruntime (the SDK's own dependencies).
"""
from __future__ import annotations

from typing import Iterable, Optional

from ...errors import MissingDependencyError, UnsupportedModelError

__all__ = ["FP32_OPS", "convert_to_fp16"]

#: Ops left in float32 (inputs and outputs cast around them).
FP32_OPS = (
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Erf", "Resize", "Range", "CumSum", "TopK",
    "NonMaxSuppression", "RoiAlign",
)


def convert_to_fp16(onnx_bytes: bytes, keep_fp32_ops: Optional[Iterable[str]] = None) -> bytes:
    """The model as float16 ONNX bytes (inputs/outputs stay float32; ``keep_fp32_ops`` default
    :data:`FP32_OPS` plus the converter's own block list stay float32)."""
    try:
        import onnx
        from onnxruntime.transformers import float16
    except ImportError as exc:
        raise MissingDependencyError("fp16 engines on TensorRT without an fp16 builder flag (TensorRT 11)",
                                     "onnx and onnxruntime", "pip install onnx onnxruntime") from exc
    keep = list(dict.fromkeys(list(float16.DEFAULT_OP_BLOCK_LIST) + list(keep_fp32_ops or FP32_OPS)))
    try:
        model = onnx.load_model_from_string(onnx_bytes)
        converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=keep)
    except Exception as exc:  # onnx and the converter raise plain errors on what they cannot read or type
        raise UnsupportedModelError(f"the model cannot be converted to fp16 for a strongly typed TensorRT build: {exc}",
                                    "build it in fp32, or export an fp16 ONNX model and build that") from exc
    return converted.SerializeToString()
