"""TensorRT INT8 calibration cache files (implicit quantization, TensorRT 8.x-10.x; TensorRT 11
has none). The one codec of the SDK: ``sdk quantize`` writes caches with it
(:mod:`sdk.quantize.trtcache` is its quantizer-facing shim), the TensorRT build reads them.

Format: line 1 ``TRT-<version>-<Algorithm>`` (e.g. ``TRT-8510-EntropyCalibration2``), then one line
per tensor ``name: <8 hex digits>``, the big-endian float32 scale (amax / 127).
Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

from ...errors import InputError

__all__ = ["CalibrationCache", "read_calibration_cache", "write_calibration_cache", "trt_version_code",
           "version_from_code", "check_cache_version", "DEFAULT_VERSION_CODE", "DEFAULT_ALGORITHM"]

#: What a cache is written for when no TensorRT version is given: TensorRT 8.5.1 (JetPack 5.1).
DEFAULT_VERSION_CODE = 8510
DEFAULT_ALGORITHM = "EntropyCalibration2"

_HEADER = re.compile(r"^TRT-(\d+)-(\w+)$")


@dataclass
class CalibrationCache:
    """``version``: TensorRT's integer version code from the header; ``algorithm`` (e.g.
    ``EntropyCalibration2``); ``scales``: tensor name -> float32 scale."""

    version: int
    algorithm: str
    scales: Dict[str, float] = field(default_factory=dict)

    @property
    def trt_version(self) -> Tuple[int, int]:
        """(major, minor) of the TensorRT that wrote the cache."""
        return version_from_code(self.version)

    def to_text(self) -> str:
        lines = [f"TRT-{self.version}-{self.algorithm}"]
        for name, scale in self.scales.items():
            if not name.strip() or "\n" in name or name != name.strip():
                raise InputError(f"tensor name {name!r} cannot be written to a TensorRT calibration cache")
            lines.append(f"{name}: {struct.pack('>f', float(scale)).hex()}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str, source: str = "calibration cache") -> "CalibrationCache":
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        if not lines:
            raise InputError(f"{source} is empty")
        m = _HEADER.match(lines[0])
        if not m:
            raise InputError(f"{source}: the first line '{lines[0][:60]}' is not a TensorRT header like "
                             "'TRT-8510-EntropyCalibration2'")
        scales: Dict[str, float] = {}
        for i, line in enumerate(lines[1:], start=2):
            name, sep, value = line.rpartition(":")
            value = value.strip()
            if not sep or not name.strip() or not re.match(r"^[0-9a-fA-F]{8}$", value):
                raise InputError(f"{source} line {i}: '{line[:60]}' is not 'tensor_name: 8 hex digits'")
            scales[name.strip()] = struct.unpack(">f", bytes.fromhex(value))[0]
        return cls(int(m.group(1)), m.group(2), scales)

    def to_bytes(self) -> bytes:
        return self.to_text().encode()


def trt_version_code(version: str) -> int:
    """TensorRT's integer version code for a version string: 8.x: major*1000 + minor*100 + patch
    (``"8.5.2.2"`` -> 8502); 10.x and later: major*10000 + minor*100 + patch."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]] + [0, 0, 0]
    major, minor, patch = parts[:3]
    if major >= 10:
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def version_from_code(code: int) -> Tuple[int, int]:
    """(major, minor) from a version code (either scheme of :func:`trt_version_code`)."""
    if code >= 100000:
        return code // 10000, (code // 100) % 100
    return code // 1000, (code // 100) % 10


def read_calibration_cache(path: Union[str, "os.PathLike[str]"]) -> CalibrationCache:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"calibration cache '{path}' does not exist")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read the calibration cache '{path}': {exc}") from exc
    return CalibrationCache.from_text(text, source=str(path))


def write_calibration_cache(path: Union[str, "os.PathLike[str]"], cache: CalibrationCache) -> Path:
    """Write ``cache`` atomically (a temporary file renamed over ``path``); returns the path."""
    from ...atomic import atomic_write

    text = cache.to_text()  # a bad name fails before anything is written
    return atomic_write(path, text)


def check_cache_version(cache: CalibrationCache, trt_version: str, source: Optional[str] = None) -> None:
    """Raise :class:`InputError` when the cache was written by another TensorRT major.minor."""
    have = version_from_code(trt_version_code(trt_version))
    if cache.trt_version != have:
        raise InputError(
            f"{source or 'the calibration cache'} was written by TensorRT {cache.trt_version[0]}.{cache.trt_version[1]}, "
            f"this is TensorRT {trt_version}",
            "recalibrate on this TensorRT (sdk quantize), or use an explicitly quantized (Q/DQ) model")
