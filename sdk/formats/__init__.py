"""Model formats: one handler per format, chosen by name through a registry.

A handler parses, validates, inspects and transforms one kind of model file. Add a format by
writing a :class:`ModelFormat` subclass and registering it in :data:`FORMATS` (or through the
entry-point group ``edgesdk.formats``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ModelFormatError, UnknownNameError, UnsupportedModelError
from ..registry import Registry

if TYPE_CHECKING:
    from ..model import Model
    from ..tensors import TensorSpec


class UnknownFormatError(ModelFormatError, UnknownNameError):
    """An unknown model format name."""


#: Format name -> :class:`ModelFormat` subclass (``"module:Class"`` until first use).
FORMATS: "Registry[type]" = Registry(
    "model format",
    {"onnx": "sdk.formats.onnx:OnnxFormat", "tflite": "sdk.formats.tflite:TFLiteFormat",
     "ort": "sdk.formats.ort:OrtFormat"},
    entry_points="edgesdk.formats", error=UnknownFormatError, load_error=ModelFormatError, known_label="known formats",
)
_SUFFIXES = {".onnx": "onnx", ".tflite": "tflite", ".lite": "tflite", ".ort": "ort"}
_loaded: Dict[str, "ModelFormat"] = {}


class ModelFormat:
    """Base class of a model format handler. Every method takes the :class:`~sdk.Model`."""

    name = ""
    #: The target that runs this format when none is given (``sdk bench``, ``push``, ``validate``,
    #: the host reference). A name only: core code imports no target.
    default_target = "onnxruntime"

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

    def control_inputs(self, model: "Model") -> List[Dict[str, Any]]:
        return []

    def mac_count(self, model: "Model", values: Mapping[str, Any]) -> Dict[str, Any]:
        """The ``macs*`` fields of :meth:`inspect` for the given input values (none: no change)."""
        return {}

    def simplify(self, model: "Model") -> "Model":
        raise UnsupportedModelError(f"simplify() works on ONNX models, not {self.name}")

    def with_input_shapes(self, model: "Model", shapes: Mapping[str, Sequence[int]]) -> "Model":
        raise UnsupportedModelError(f"with_input_shapes() works on ONNX models, not {self.name}")

    def with_opset(self, model: "Model", opset: int) -> "Model":
        raise UnsupportedModelError(f"with_opset() works on ONNX models, not {self.name}")

    def fold_constants(self, model: "Model") -> "Model":
        raise UnsupportedModelError(f"fold_constants() works on ONNX models, not {self.name}")

    def external_files(self, path: Path) -> List[Tuple[str, Path]]:
        """The files the model file ``path`` loads besides itself, as ``(location relative to
        its folder, path)`` (ONNX external data); a reference outside the folder is a
        :class:`~sdk.errors.ModelFormatError`. Most formats are one file: ``[]``."""
        return []


def get_format(name: str) -> ModelFormat:
    """The handler of format ``name`` (one instance per format)."""
    if name not in _loaded:
        handler: ModelFormat = FORMATS.load(name)()
        _loaded[name] = handler
    return _loaded[name]


def detect_format(path: Optional[Path], data: Optional[bytes] = None) -> str:
    """Format from the file suffix, else from the content (the flatbuffer identifiers: TFLite's
    ``TFL3``, ORT format's ``ORTM``; else ONNX)."""
    if path is not None and path.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[path.suffix.lower()]
    head = data[:8] if data is not None else None
    if head is None and path is not None:
        with open(path, "rb") as f:
            head = f.read(8)
    if head is not None and head[4:8] == b"TFL3":
        return "tflite"
    if head is not None and head[4:8] == b"ORTM":
        return "ort"
    return "onnx"


def default_target(model: Any) -> str:
    """The target that runs ``model`` (a :class:`~sdk.Model`, a path, or a format name) when none is
    given: ONNX and ORT format -> ``onnxruntime``, TFLite -> ``tflite``."""
    if isinstance(model, str) and model in FORMATS:
        fmt = model
    elif hasattr(model, "format") and isinstance(model.format, str):
        fmt = model.format
    else:
        fmt = detect_format(Path(model)) if Path(model).is_file() else detect_format(Path(model), b"")
    return get_format(fmt).default_target
