"""Target quantization schemes: one module per target, chosen through a registry.

A scheme decides *where* Q/DQ pairs go and *how* tensors are quantized (symmetric or not, which
dtype, per-channel axes, bias handling, shared and fixed scales). To add one, subclass
:class:`~sdk.quantize.schemes.base.Scheme` in a new module and register it in :data:`SCHEMES`
(or through the entry-point group ``edgesdk.quantize_schemes``). Names and aliases are the
target names (:data:`sdk.registry.TARGET_ALIASES`: ``ort``, ``trt``, ``litert``).
"""
from __future__ import annotations

from typing import Any, List, Type, Union

from ...errors import QuantizationError
from ...registry import TARGET_ALIASES, Registry
from .base import QuantPlan, Scheme

__all__ = ["Scheme", "QuantPlan", "get_scheme", "scheme_names", "register_scheme", "SCHEMES"]

#: Quantization target name -> Scheme subclass (``"module:Class"`` until first use).
SCHEMES: "Registry[Type[Scheme]]" = Registry(
    "quantization target",
    {
        "onnxruntime": "sdk.quantize.schemes.onnxruntime:OnnxRuntimeScheme",
        "tensorrt": "sdk.quantize.schemes.tensorrt:TensorRTScheme",
        "tflite": "sdk.quantize.schemes.tflite:TFLiteScheme",
        # ONNX Runtime's mobile EPs (sdk quantize --target onnxruntime --ep xnnpack|nnapi|qnn)
        "onnxruntime-xnnpack": "sdk.quantize.schemes.mobile:XnnpackScheme",
        "onnxruntime-nnapi": "sdk.quantize.schemes.mobile:NnapiScheme",
        "onnxruntime-qnn": "sdk.quantize.schemes.mobile:QnnScheme",
    },
    aliases=TARGET_ALIASES, entry_points="edgesdk.quantize_schemes", load_error=QuantizationError, known_label="known",
)


def register_scheme(name: str, scheme: Union[str, Type[Scheme]]) -> None:
    """Register a Scheme subclass (or ``"module:Class"``) under ``name``."""
    SCHEMES.register(name, scheme)


def scheme_names() -> List[str]:
    return SCHEMES.names()


def get_scheme(name: str, **options: Any) -> Scheme:
    """An instance of the scheme registered under ``name`` (aliases: ort, trt, litert)."""
    return SCHEMES.load(name)(**options)
