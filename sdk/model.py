"""``sdk.Model``: one model file (ONNX or TFLite), validated, inspectable, transformable.

The format-specific work lives in ``sdk/formats/`` (one handler per format, chosen by a registry);
this class holds what every format shares: the path, the bytes, the content hash.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .errors import ModelFormatError, ModelNotFoundError
from .tensors import TensorSpec

__all__ = ["Model", "ModelInfo"]

PathLike = Union[str, "os.PathLike[str]"]


class ModelInfo(Dict[str, Any]):
    """What ``Model.inspect()`` found, as a plain dict (JSON-ready). Keys: ``path``, ``format``,
    ``sha256``, ``size_bytes``, ``inputs``, ``outputs``, ``ops`` (op type -> count), ``params``,
    ``param_bytes``, ``macs``; ONNX adds ``opset``, ``ir_version``, ``producer``; formats may add more."""


class Model:
    """A model file. Construct with :meth:`Model.load` (validates) or ``Model(path)``.

    Transformations (``simplify``, ``with_input_shapes``, ``with_opset``) return a new, in-memory
    ``Model`` whose ``path`` is None until :meth:`save`.
    """

    def __init__(self, path: Optional[PathLike] = None, *, format: Optional[str] = None,
                 data: Optional[bytes] = None, proto: Any = None, origin: Optional[PathLike] = None):
        from .formats import detect_format, get_format

        if path is None and data is None and proto is None:
            raise ModelNotFoundError("a Model needs a path, bytes or a proto")
        self.path: Optional[Path] = Path(path) if path is not None else None
        if self.path is not None:
            if not self.path.exists():
                raise ModelNotFoundError(f"model file '{self.path}' does not exist")
            if self.path.is_dir():
                raise ModelFormatError(f"'{self.path}' is a folder, not a model file")
        self.origin: Optional[Path] = Path(origin) if origin is not None else self.path
        self._data = data
        self._proto = proto
        self._proto_from_file = False      # parsed from ``path`` by :attr:`proto` (not handed in)
        self._sha256: Optional[str] = None
        self.format = format or detect_format(self.path, data)
        self._handler = get_format(self.format)
        self._cache: Dict[str, Any] = {}

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def load(cls, path: PathLike) -> "Model":
        """Open and validate ``path``: a missing file, a truncated or foreign file, or an invalid
        graph raise a :class:`~sdk.errors.ModelError` subclass with one clear line."""
        model = cls(path)
        model.validate()
        return model

    # -- identity ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.origin.name if self.origin is not None else f"<in-memory {self.format} model>"

    def to_bytes(self) -> bytes:
        """The serialized model (the file's bytes when unchanged)."""
        if self._data is None:
            if self.path is not None and self._proto is None:
                self._data = self.path.read_bytes()
            else:
                self._data = self._handler.serialize(self)
        return self._data

    @property
    def sha256(self) -> str:
        """Hex sha256 of the serialized model: the cache key for artifacts and uploads."""
        if self._sha256 is None:
            if self.path is not None and self._proto is None and self._data is None:
                from .digest import file_sha256

                self._sha256 = file_sha256(self.path)
            else:
                self._sha256 = hashlib.sha256(self.to_bytes()).hexdigest()
        return self._sha256

    @property
    def size_bytes(self) -> int:
        if self.path is not None and self._proto is None:
            return self.path.stat().st_size
        return len(self.to_bytes())

    @property
    def proto(self) -> Any:
        """The parsed model (``onnx.ModelProto`` for ONNX)."""
        if self._proto is None:
            self._proto = self._handler.parse(self)
            self._proto_from_file = self._data is None and self.path is not None
        return self._proto

    # -- format-specific work, delegated ------------------------------------------------------------
    def validate(self) -> "Model":
        self._handler.validate(self)
        return self

    @property
    def inputs(self) -> List[TensorSpec]:
        if "inputs" not in self._cache:
            self._cache["inputs"] = self._handler.inputs(self)
        return self._cache["inputs"]

    @property
    def outputs(self) -> List[TensorSpec]:
        if "outputs" not in self._cache:
            self._cache["outputs"] = self._handler.outputs(self)
        return self._cache["outputs"]

    @property
    def opset(self) -> Optional[int]:
        return self._handler.opset(self)

    def inspect(self, input_values: Any = None) -> ModelInfo:
        """Inputs, outputs, op histogram, parameter count/bytes, MAC estimate and format facts.
        ``input_values`` (``{"sr": 16000}``): count the ``If`` branches those values choose instead
        of the larger one (``macs_notes`` says which)."""
        info = ModelInfo(
            path=str(self.origin) if self.origin else None,
            format=self.format,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
        )
        info.update(self._handler.inspect(self))
        if input_values:
            from .targets.measure import as_values

            info.update(self._handler.mac_count(self, as_values(input_values, self.inputs)))
        return info

    def control_inputs(self) -> List[Dict[str, Any]]:
        """The inputs whose values choose an ``If`` branch or bound/end a ``Loop``:
        ``[{"input", "role", "node", "kind"}]`` (``kind`` ``"value"``: a small integer input a random
        value must not stand for; ``"data"``: data whose content steers a loop). Empty for formats
        without control flow analysis."""
        if "control" not in self._cache:
            self._cache["control"] = self._handler.control_inputs(self)
        return list(self._cache["control"])

    def simplify(self) -> "Model":
        return self._handler.simplify(self)

    def with_input_shapes(self, shapes: Mapping[str, Sequence[int]]) -> "Model":
        """A copy with the named inputs fixed to concrete shapes (dynamic dims resolved)."""
        return self._handler.with_input_shapes(self, shapes)

    def with_opset(self, opset: int) -> "Model":
        """A copy converted to ``opset`` (default domain)."""
        return self._handler.with_opset(self, opset)

    def fold_constants(self) -> "Model":
        """A copy with ``Constant`` nodes, and constant Identity/Cast/Reshape/Transpose/Squeeze/
        Unsqueeze/Flatten chains over initializers, folded into initializers (ONNX; checker-valid).
        Returns ``self`` when nothing folds."""
        return self._handler.fold_constants(self)

    def save(self, path: PathLike) -> "Model":
        """Write the model to ``path`` atomically and return a Model backed by that file."""
        from .atomic import atomic_write

        return Model(atomic_write(path, self.to_bytes()), format=self.format)

    def derive(self, proto: Any) -> "Model":
        """A new in-memory model of the same format from a transformed proto."""
        return Model(proto=proto, format=self.format, origin=self.origin)

    def __repr__(self) -> str:
        return f"Model({str(self.origin) if self.origin else '<memory>'!r}, format={self.format!r})"
