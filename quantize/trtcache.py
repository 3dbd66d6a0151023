"""TensorRT calibration cache (implicit quantization, TensorRT 8.x / JetPack 5).

Text file: line 1 ``TRT-<version>-<Algorithm>`` (e.g. ``TRT-8510-EntropyCalibration2``), then one
line per tensor ``name: <8 hex digits>``, the big-endian IEEE float32 of the scale ``amax / 127``.
Caches depend on the TensorRT version (the number in the header): build with the same one.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Dict, Mapping, Tuple, Union

from ..errors import InputError

__all__ = ["write_cache", "read_cache", "format_cache", "parse_cache", "DEFAULT_TRT_VERSION"]

DEFAULT_TRT_VERSION = "8510"  # TensorRT 8.5.1 (JetPack 5.1)
ALGORITHM = "EntropyCalibration2"


def _hex(scale: float) -> str:
    return struct.pack(">f", float(scale)).hex()


def format_cache(scales: Mapping[str, float], version: str = DEFAULT_TRT_VERSION, algorithm: str = ALGORITHM) -> str:
    """The cache text for ``scales`` (tensor name -> scale, ``amax / 127``)."""
    lines = [f"TRT-{version}-{algorithm}"]
    for name, s in scales.items():
        if ":" in name and name.rsplit(":", 1)[1].strip() == "":
            raise InputError(f"tensor name '{name}' cannot be written to a TensorRT cache")
        lines.append(f"{name}: {_hex(s)}")
    return "\n".join(lines) + "\n"


def parse_cache(text: str) -> Tuple[str, str, Dict[str, float]]:
    """``(version, algorithm, {name: scale})`` from cache text; :class:`InputError` when malformed."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("TRT-") or lines[0].count("-") < 2:
        raise InputError("not a TensorRT calibration cache (the first line must be TRT-<version>-<algorithm>)")
    _, version, algorithm = lines[0].split("-", 2)
    scales: Dict[str, float] = {}
    for n, ln in enumerate(lines[1:], start=2):
        name, sep, hexval = ln.rpartition(":")
        hexval = hexval.strip()
        if not sep or len(hexval) != 8:
            raise InputError(f"TensorRT cache line {n} is malformed: {ln!r}")
        try:
            scales[name] = struct.unpack(">f", bytes.fromhex(hexval))[0]
        except ValueError as exc:
            raise InputError(f"TensorRT cache line {n} has a bad hex value: {ln!r}") from exc
    return version, algorithm, scales


def write_cache(path: Union[str, os.PathLike], scales: Mapping[str, float], version: str = DEFAULT_TRT_VERSION,
                algorithm: str = ALGORITHM) -> Path:
    """Write the cache atomically; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(format_cache(scales, version, algorithm), encoding="utf-8")
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()
    return p


def read_cache(path: Union[str, os.PathLike]) -> Tuple[str, str, Dict[str, float]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read TensorRT cache '{path}': {exc}") from exc
    return parse_cache(text)
