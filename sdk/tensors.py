"""Tensor descriptions shared by models, targets and data sources.

Runs on the board too: Python 3.8, NumPy only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import InputError

Dim = Union[int, str, None]
"""One dimension: an int, a symbolic name (``"batch"``), or ``None`` when unknown."""

__all__ = ["Dim", "TensorSpec", "parse_shape", "parse_input_shapes", "format_shape", "num_elements"]


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and NumPy dtype of one model input or output.

    ``quantization`` holds ``(scale, zero_point)`` for quantized integer tensors (TFLite), else None.
    """

    name: str
    shape: Tuple[Dim, ...]
    dtype: str
    quantization: Optional[Tuple[float, int]] = field(default=None, compare=False)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) and d >= 0 for d in self.shape)

    @property
    def dynamic_dims(self) -> List[int]:
        """Indices of dims that are symbolic or unknown."""
        return [i for i, d in enumerate(self.shape) if not (isinstance(d, int) and d >= 0)]

    def resolve(self, shape: Optional[Sequence[int]] = None, default_dim: Optional[int] = None) -> Tuple[int, ...]:
        """A concrete shape: ``shape`` if given (checked against the static dims), else the
        spec's own, with ``default_dim`` for dynamic dims. Raises :class:`InputError` when a
        dynamic dim has no value."""
        if shape is not None:
            shape = tuple(int(d) for d in shape)
            if len(shape) != len(self.shape):
                raise InputError(
                    f"input '{self.name}' has rank {len(self.shape)} {format_shape(self.shape)}, "
                    f"but the shape given has rank {len(shape)} {format_shape(shape)}"
                )
            for i, (want, got) in enumerate(zip(self.shape, shape)):
                if isinstance(want, int) and want >= 0 and want != got:
                    raise InputError(
                        f"input '{self.name}' dim {i} is fixed to {want} in the model, "
                        f"but {got} was given ({format_shape(shape)})"
                    )
            return shape
        out = []
        for d in self.shape:
            if isinstance(d, int) and d >= 0:
                out.append(d)
            elif default_dim is not None:
                out.append(default_dim)
            else:
                raise InputError(
                    f"input '{self.name}' has a dynamic shape {format_shape(self.shape)} and no value was given",
                    f"pass --input-shape {self.name}=" + "x".join(
                        str(d) if isinstance(d, int) and d >= 0 else "N" for d in self.shape),
                )
        return tuple(out)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.quantization is not None:
            out["quantization"] = {"scale": self.quantization[0], "zero_point": self.quantization[1]}
        return out


def num_elements(shape: Iterable[Any]) -> int:
    """The number of elements of a concrete ``shape`` (1 for a scalar's ``()``)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def format_shape(shape: Iterable[Dim]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


_DIM_RE = re.compile(r"^\d+$")


def parse_shape(text: str) -> Tuple[int, ...]:
    """``"1x3x640x640"`` (or ``"1,3,640,640"``) -> ``(1, 3, 640, 640)``."""
    parts = re.split(r"[x,]", text.strip().lower())
    if not text.strip() or not all(_DIM_RE.match(p) for p in parts):
        raise InputError(f"bad shape '{text}'", "write dims as positive integers joined by 'x', e.g. 1x3x640x640")
    dims = tuple(int(p) for p in parts)
    if any(d <= 0 for d in dims):
        raise InputError(f"bad shape '{text}': dims must be positive")
    return dims


def parse_input_shapes(items: Iterable[str]) -> Dict[str, Tuple[int, ...]]:
    """``["x=1x3x64x64", "y=1x10"]`` -> ``{"x": (1,3,64,64), "y": (1,10)}``.

    Profiles for dynamic engines (``name=MIN:OPT:MAX``) are parsed by :func:`parse_shape_profiles`.
    """
    out: Dict[str, Tuple[int, ...]] = {}
    for item in items:
        name, shape = _split_item(item)
        if ":" in shape:
            raise InputError(f"bad --input-shape '{item}': a min:opt:max profile is only for engine builds")
        out[name] = parse_shape(shape)
    return out


def parse_shape_profiles(items: Iterable[str]) -> Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]:
    """``["x=1x3x320x320:1x3x640x640:1x3x960x960"]`` -> ``{"x": (min, opt, max)}``.

    A single shape means min = opt = max.
    """
    out = {}
    for item in items:
        name, text = _split_item(item)
        parts = text.split(":")
        if len(parts) not in (1, 3):
            raise InputError(f"bad --input-shape '{item}'", "give one shape or three: NAME=MIN:OPT:MAX")
        shapes = [parse_shape(p) for p in parts]
        if len(shapes) == 1:
            shapes = shapes * 3
        mn, opt, mx = shapes
        if not (len(mn) == len(opt) == len(mx)):
            raise InputError(f"bad --input-shape '{item}': min, opt and max must have the same rank")
        if any(not (a <= b <= c) for a, b, c in zip(mn, opt, mx)):
            raise InputError(f"bad --input-shape '{item}': each dim needs min <= opt <= max")
        out[name] = (mn, opt, mx)
    return out


def _split_item(item: str) -> Tuple[str, str]:
    if "=" not in item:
        raise InputError(f"bad --input-shape '{item}'", "write NAME=1x3x640x640")
    name, _, shape = item.partition("=")
    name = name.strip()
    if not name:
        raise InputError(f"bad --input-shape '{item}': the input name is empty", "write NAME=1x3x640x640")
    return name, shape


def check_input_names(shapes: Mapping[str, object], specs: Sequence[TensorSpec]) -> None:
    known = [s.name for s in specs]
    for name in shapes:
        if name not in known:
            raise InputError(f"the model has no input named '{name}'", f"its inputs are: {', '.join(known)}")
