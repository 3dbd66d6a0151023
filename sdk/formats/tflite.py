"""TFLite model handler (filled in by the TFLite target work)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ModelFormatError
from . import ModelFormat

if TYPE_CHECKING:
    from ..model import Model


class TFLiteFormat(ModelFormat):
    name = "tflite"

    def parse(self, model: "Model") -> Any:
        data = model.to_bytes()
        if len(data) < 8 or data[4:8] != b"TFL3":
            raise ModelFormatError(f"'{model.name}' is not a TFLite flatbuffer (no TFL3 identifier)")
        return data

    def serialize(self, model: "Model") -> bytes:
        return model.proto
