"""CUDA pre/post-processing kernels with CPU references of the same semantics.

- ``preprocess.cu`` (:class:`GpuPreprocessor`): uint8 HWC BGR/RGB -> bilinear resize or letterbox ->
  colour swap -> (x - mean) / std -> NCHW/NHWC float32/float16, one kernel, one pass. CPU reference:
  :func:`sdk.preprocess.preprocess_reference` (NumPy) and :func:`sdk.preprocess.preprocess` (OpenCV).
- ``postprocess.cu`` (:class:`GpuYoloPostprocessor`): YOLO-style score threshold, box decode,
  class-aware NMS, top-k. CPU reference: :func:`reference.yolo_postprocess`.

Kernels are compiled at run time (pycuda ``SourceModule`` or NVRTC through cuda-python), so the
same ``.cu`` files serve JetPack 4's CUDA 10.2 and current CUDA. Nothing heavy is imported here.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PostprocessSpec", "Detections", "yolo_postprocess", "scale_boxes",
    "GpuPreprocessor", "GpuYoloPostprocessor", "kernel_sources", "kernel_source", "COMPILE_OPTIONS",
]

_LAZY = {
    "PostprocessSpec": "sdk.kernels.reference",
    "Detections": "sdk.kernels.reference",
    "yolo_postprocess": "sdk.kernels.reference",
    "scale_boxes": "sdk.kernels.reference",
    "GpuPreprocessor": "sdk.kernels.preprocess",
    "GpuYoloPostprocessor": "sdk.kernels.postprocess",
    "kernel_sources": "sdk.kernels.loader",
    "kernel_source": "sdk.kernels.loader",
    "COMPILE_OPTIONS": "sdk.kernels.loader",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sdk.kernels' has no attribute '{name}'")
    return getattr(importlib.import_module(_LAZY[name]), name)
