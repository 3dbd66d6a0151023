"""Runtime targets behind one contract (:class:`Target`, :class:`Session`) and a registry.

Where things go: one subpackage per backend (``onnxrt/``, ``tflite/``, ``tensorrt/``), each with
a build step separate from its session; the CUDA layer in ``cuda/``; the registry in
``registry.py``; :func:`benchmark` (model + target + latency loop) in ``measure.py``.
"""
from __future__ import annotations

from .base import Artifact, Availability, Session, Target
from .registry import get_target, register_target, target_class, target_names

__all__ = [
    "Artifact",
    "Availability",
    "Session",
    "Target",
    "get_target",
    "register_target",
    "target_class",
    "target_names",
    "benchmark",
    "BenchResult",
]


def __getattr__(name):
    if name in ("benchmark", "BenchResult"):
        from . import measure as _b

        return getattr(_b, name)
    raise AttributeError(name)
