"""Model format conversion: ``convert(source, output)`` picks the converter from the output's suffix.

One converter per destination format, in the :data:`CONVERTERS` registry (keys are suffixes such as
``".ort"`` or ``".tflite"``; entries are ``"module:function"`` strings loaded on first use, so listing
them imports nothing heavy). A converter is ``fn(source: Path, output: Path, options: ConvertOptions)
-> ConvertResult`` and writes ``output`` (plus any companion files it lists in ``extras``) atomically;
a model it cannot convert raises one :class:`~sdk.errors.ConversionError` naming the node, op and why,
before anything is written. Plugins register through the entry-point group ``edgesdk.converters``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ConversionError, InputError
from ..registry import Registry

__all__ = ["CONVERTERS", "ConvertOptions", "ConvertResult", "convert", "converter_suffixes"]

SCHEMA = "edgesdk.convert/1"


@dataclass
class ConvertOptions:
    """What a conversion may take: fixed input shapes (name -> dims), INT8 with calibration data,
    and converter-specific ``extra`` items (``--option KEY=VALUE`` on the command line);
    ``input_values`` (``["sr=16000"]`` or ``{name: array}``): inputs the output is specialized for
    (the ``.onnx`` converter)."""

    input_shapes: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    input_values: Any = None
    int8: bool = False
    calib: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def check(self, suffix: str, known: Sequence[str], no_int8: Optional[Tuple[str, str]] = None) -> None:
        """A converter's own checks: every ``--option`` key is one of ``known``; with ``no_int8``
        (why, the fix) ``--int8`` is refused. :class:`InputError` naming ``suffix`` (``.ort``)."""
        unknown = sorted(set(self.extra) - set(known))
        if unknown:
            raise InputError(f"unknown --option {unknown[0]} for {suffix}", f"known: {', '.join(known)}")
        if no_int8 is not None and self.int8:
            raise InputError(f"--int8 does not apply to {suffix}: {no_int8[0]}", no_int8[1])

    def choice(self, key: str, default: str, allowed: Sequence[str]) -> str:
        """The ``--option`` ``key`` (lower case), one of ``allowed``; :class:`InputError` otherwise."""
        value = str(self.extra.get(key, default)).strip().lower()
        if value not in allowed:
            raise InputError(f"bad --option {key}={value}", f"{key} is one of: {', '.join(allowed)}")
        return value

    def flag(self, key: str) -> bool:
        """A true/false ``--option`` (``true``, ``false``, ``1``, ``0``; default false)."""
        return self.choice(key, "false", ("true", "false", "1", "0")) in ("true", "1")


@dataclass
class ConvertResult:
    """One conversion: source and output paths, the destination format, wall time in s,
    companion files written beside the output (role -> path) and notes for the user."""

    source: str
    output: str
    format: str
    seconds: float = 0.0
    extras: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}


ConverterFn = Callable[[Path, Path, ConvertOptions], ConvertResult]

#: Output suffix -> converter function.
CONVERTERS: "Registry[ConverterFn]" = Registry("converter", builtin={
    ".ort": "sdk.targets.onnxrt.ortformat:convert_to_ort",
    ".tflite": "sdk.targets.tflite.convert:convert_to_tflite",
    ".onnx": "sdk.targets.onnx_flat:convert_to_onnx",
}, entry_points="edgesdk.converters",
                                              known_label="known output formats")


def converter_suffixes() -> Sequence[str]:
    """The output suffixes some converter writes (``.ort``, ``.tflite``, ...)."""
    return list(CONVERTERS)


def convert(source: Union[str, Path], output: Union[str, Path], options: Optional[ConvertOptions] = None) -> ConvertResult:
    """Convert the model at ``source`` into the format that ``output``'s suffix names.

    Raises :class:`~sdk.errors.InputError` for a missing source or an output that would overwrite
    it, :class:`~sdk.errors.UnknownNameError` for a suffix no converter writes (listing the known
    ones) and :class:`~sdk.errors.ConversionError` for a model the format cannot hold."""
    src, dst = Path(source), Path(output)
    if not src.is_file():
        raise InputError(f"model '{src}' not found")
    if dst.resolve() == src.resolve():
        raise InputError(f"-o '{dst}' is the source model itself: choose another output path")
    suffix = dst.suffix.lower()
    if not suffix:
        raise InputError(f"-o '{dst}' has no suffix: the suffix names the format ({', '.join(CONVERTERS) or 'none'})")
    fn = CONVERTERS.load(suffix)
    if options is not None and options.input_values and not getattr(fn, "takes_input_values", False):
        raise InputError(f"--input-value does not apply to {suffix}",
                         f"write the model specialized for the values first (-o flat.onnx), then convert that to {suffix}")
    if options is not None and options.int8 and options.calib is None and not getattr(fn, "int8_from_qdq", False):
        raise InputError("--int8 needs --calib: the data the INT8 ranges are calibrated on")
    t0 = time.perf_counter()
    result = fn(src, dst, options or ConvertOptions())
    if not isinstance(result, ConvertResult):
        raise ConversionError(f"converter for {suffix} returned {type(result).__name__}, not a ConvertResult")
    if not result.seconds:
        result.seconds = time.perf_counter() - t0
    return result
