"""Model formats: one handler per format, chosen by name through a registry.

A handler parses, validates, inspects and transforms one kind of model file. Add a format by
writing a :class:`ModelFormat` subclass and an entry in ``_BUILTIN``.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from ..errors import ModelFormatError, UnsupportedModelError

if TYPE_CHECKING:
    from ..model import Model
    from ..tensors import TensorSpec

_BUILTIN = {
    "onnx": "sdk.formats.onnx:OnnxFormat",
    "tflite": "sdk.formats.tflite:TFLiteFormat",
}
_SUFFIXES = {".onnx": "onnx", ".tflite": "tflite", ".lite": "tflite"}
_loaded: Dict[str, "ModelFormat"] = {}


class ModelFormat:
    """Base class of a model format handler. Every method takes the :class:`~sdk.Model`."""

    name = ""

    def parse(self, model: "Model") -> Any:
        raise UnsupportedModelError(f"{self.name} models cannot be parsed")

    def serialize(self, model: "Model") -> bytes:
        raise UnsupportedModelError(f"{self.name} models cannot be serialized")

    def validate(self, model: "Model") -> None:
        model.proto  # noqa: B018 - parsing is the minimum check

    def inputs(self, model: "Model") -> List["TensorSpec"]:
        raise UnsupportedModelError(f"listing inputs of {self.name} models is not supported")

    def outputs(self, model: "Model") -> List["TensorSpec"]:
        raise UnsupportedModelError(f"listing outputs of {self.name} models is not supported")

    def opset(self, model: "Model") -> Optional[int]:
        return None

    def inspect(self, model: "Model") -> Dict[str, Any]:
        raise UnsupportedModelError(f"inspecting {self.name} models is not supported")

    def simplify(self, model: "Model") -> "Model":
        raise UnsupportedModelError(f"simplify() works on ONNX models, not {self.name}")

    def with_input_shapes(self, model: "Model", shapes: Mapping[str, Sequence[int]]) -> "Model":
        raise UnsupportedModelError(f"with_input_shapes() works on ONNX models, not {self.name}")

    def with_opset(self, model: "Model", opset: int) -> "Model":
        raise UnsupportedModelError(f"with_opset() works on ONNX models, not {self.name}")


def get_format(name: str) -> ModelFormat:
    if name not in _loaded:
        if name not in _BUILTIN:
            raise ModelFormatError(f"unknown model format '{name}'", f"known formats: {', '.join(sorted(_BUILTIN))}")
        module, _, cls = _BUILTIN[name].partition(":")
        _loaded[name] = getattr(importlib.import_module(module), cls)()
    return _loaded[name]


def detect_format(path: Optional[Path], data: Optional[bytes] = None) -> str:
    """Format from the file suffix, else from the content (TFLite's ``TFL3`` identifier, else ONNX)."""
    if path is not None and path.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[path.suffix.lower()]
    head = data[:8] if data is not None else None
    if head is None and path is not None:
        with open(path, "rb") as f:
            head = f.read(8)
    if head is not None and head[4:8] == b"TFL3":
        return "tflite"
    return "onnx"


def known_formats() -> List[str]:
    return sorted(_BUILTIN)
