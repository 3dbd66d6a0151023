"""TensorRT target: ``build.py`` (ONNX -> engine, build config), ``cache.py`` (engine cache),
``calib.py`` (int8 calibration cache files), ``session.py`` (runner and trtexec-style latency).
Nothing here imports tensorrt until a build or a session needs it."""
from __future__ import annotations

from .target import TensorRTTarget

__all__ = ["TensorRTTarget"]
