"""Target quantization schemes: one module per target, chosen through a registry.

A scheme decides *where* Q/DQ pairs go and *how* tensors are quantized (symmetric or not, which
dtype, per-channel axes, bias handling, shared and fixed scales). To add one, subclass
:class:`~sdk.quantize.schemes.base.Scheme` in a new module and list it in ``_BUILTIN``.
"""
from __future__ import annotations

import importlib
from typing import Dict, List

from ...errors import InputError
from .base import QuantPlan, Scheme

__all__ = ["Scheme", "QuantPlan", "get_scheme", "scheme_names", "register_scheme"]

_BUILTIN: Dict[str, str] = {
    "onnxruntime": "sdk.quantize.schemes.onnxruntime:OnnxRuntimeScheme",
    "tensorrt": "sdk.quantize.schemes.tensorrt:TensorRTScheme",
    "tflite": "sdk.quantize.schemes.tflite:TFLiteScheme",
}
_ALIASES = {"ort": "onnxruntime", "onnxrt": "onnxruntime", "trt": "tensorrt", "litert": "tflite"}
_registry: Dict[str, object] = dict(_BUILTIN)


def register_scheme(name: str, scheme: object) -> None:
    """Register a Scheme subclass (or ``"module:Class"``) under ``name``."""
    _registry[name] = scheme


def scheme_names() -> List[str]:
    return list(_registry)


def get_scheme(name: str, **options) -> Scheme:
    """An instance of the scheme registered under ``name`` (aliases: ort, trt, litert)."""
    key = _ALIASES.get(name, name)
    if key not in _registry:
        raise InputError(f"unknown quantization target '{name}'", f"known: {', '.join(_registry)}")
    cls = _registry[key]
    if isinstance(cls, str):
        mod, _, attr = cls.partition(":")
        cls = getattr(importlib.import_module(mod), attr)
        _registry[key] = cls
    return cls(**options)  # type: ignore[operator]
