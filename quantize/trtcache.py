"""TensorRT calibration cache for the quantizer: the names ``sdk quantize`` has always used, over
the SDK's one codec, :mod:`sdk.targets.tensorrt.calib` (format described there). The version is
TensorRT's integer code as a string (``"8510"``: 8.5.1).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Mapping, Tuple, Union

from ..errors import InputError
from ..targets.tensorrt.calib import (DEFAULT_ALGORITHM, DEFAULT_VERSION_CODE, CalibrationCache,
                                      read_calibration_cache, write_calibration_cache)

__all__ = ["write_cache", "read_cache", "format_cache", "parse_cache", "DEFAULT_TRT_VERSION"]

DEFAULT_TRT_VERSION = str(DEFAULT_VERSION_CODE)
ALGORITHM = DEFAULT_ALGORITHM


def _cache(scales: Mapping[str, float], version: str, algorithm: str) -> CalibrationCache:
    if not str(version).isdigit():
        raise InputError(f"TensorRT cache version '{version}' is not TensorRT's integer version code",
                         "e.g. 8510 for TensorRT 8.5.1, 100300 for 10.3.0")
    return CalibrationCache(int(version), algorithm, {k: float(v) for k, v in scales.items()})


def format_cache(scales: Mapping[str, float], version: str = DEFAULT_TRT_VERSION, algorithm: str = ALGORITHM) -> str:
    """The cache text for ``scales`` (tensor name -> scale, ``amax / 127``)."""
    return _cache(scales, version, algorithm).to_text()


def parse_cache(text: str) -> Tuple[str, str, Dict[str, float]]:
    """``(version, algorithm, {name: scale})`` from cache text; :class:`InputError` when malformed."""
    cache = CalibrationCache.from_text(text, source="TensorRT calibration cache")
    return str(cache.version), cache.algorithm, cache.scales


def write_cache(path: Union[str, os.PathLike], scales: Mapping[str, float], version: str = DEFAULT_TRT_VERSION,
                algorithm: str = ALGORITHM) -> Path:
    """Write the cache atomically; returns the path."""
    return write_calibration_cache(path, _cache(scales, version, algorithm))


def read_cache(path: Union[str, os.PathLike]) -> Tuple[str, str, Dict[str, float]]:
    cache = read_calibration_cache(path)
    return str(cache.version), cache.algorithm, cache.scales
