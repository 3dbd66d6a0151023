"""The preprocessing spec: one object that says how an image becomes a model input.

The same :class:`PreprocessSpec` drives calibration (``sdk.quantize``), ``sdk bench`` with real
images, validation, and the CUDA kernel in ``sdk.kernels`` (which must match :func:`preprocess`).
Runs on the board too: Python 3.8, NumPy (OpenCV used when present).
"""
from __future__ import annotations

import functools
import threading
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import ConfigError, InputError

__all__ = ["PreprocessSpec", "preprocess", "preprocess_reference"]

_RESIZE = ("resize", "letterbox")
_LAYOUTS = ("NCHW", "NHWC")
_DTYPES = ("float32", "float16", "uint8", "int8")
_ORDERS = ("RGB", "BGR")


@dataclass(frozen=True)
class PreprocessSpec:
    """How an HWC uint8 image becomes a model input.

    ``size``: output (height, width). ``resize``: "resize" (stretch) or "letterbox" (keep aspect,
    pad with ``pad_value``, image centred). ``input_order``: colour order of the source images
    (OpenCV decodes BGR); ``color``: order the model wants. ``mean``/``std`` in 0-255 pixel units,
    per channel in the model's colour order: ``(x - mean) / std``. ``layout``: NCHW or NHWC, batch
    dim of 1 included. ``dtype``: the output dtype.
    """

    size: Tuple[int, int]
    resize: str = "resize"
    input_order: str = "BGR"
    color: str = "RGB"
    mean: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: Tuple[float, float, float] = (255.0, 255.0, 255.0)
    layout: str = "NCHW"
    dtype: str = "float32"
    pad_value: int = 114

    def __post_init__(self) -> None:
        def fail(key: str, value: Any, allowed: Sequence[str]) -> None:
            raise ConfigError(f"preprocess {key} '{value}' is not valid", f"use one of: {', '.join(allowed)}")

        if len(self.size) != 2 or any(int(s) <= 0 for s in self.size):
            raise ConfigError(f"preprocess size {self.size} is not valid", "give (height, width), both > 0")
        object.__setattr__(self, "size", (int(self.size[0]), int(self.size[1])))
        if self.resize not in _RESIZE:
            fail("resize", self.resize, _RESIZE)
        if self.layout.upper() not in _LAYOUTS:
            fail("layout", self.layout, _LAYOUTS)
        object.__setattr__(self, "layout", self.layout.upper())
        for key in ("input_order", "color"):
            v = getattr(self, key).upper()
            if v not in _ORDERS:
                fail(key, v, _ORDERS)
            object.__setattr__(self, key, v)
        if self.dtype not in _DTYPES:
            fail("dtype", self.dtype, _DTYPES)
        for key in ("mean", "std"):
            v = tuple(float(x) for x in getattr(self, key))
            if len(v) == 1:
                v = v * 3
            if len(v) != 3:
                raise ConfigError(f"preprocess {key} needs 3 values (one per channel), got {len(v)}")
            object.__setattr__(self, key, v)
        if any(s == 0 for s in self.std):
            raise ConfigError("preprocess std must not be 0")

    @property
    def swap_rb(self) -> bool:
        return self.input_order != self.color

    def output_shape(self) -> Tuple[int, int, int, int]:
        h, w = self.size
        return (1, 3, h, w) if self.layout == "NCHW" else (1, h, w, 3)

    def letterbox_geometry(self, src_h: int, src_w: int) -> Tuple[float, int, int, int, int]:
        """For letterbox: (scale, new_h, new_w, top, left) of the resized image inside the output."""
        h, w = self.size
        scale = min(h / src_h, w / src_w)
        nh, nw = max(1, int(round(src_h * scale))), max(1, int(round(src_w * scale)))
        return scale, nh, nw, (h - nh) // 2, (w - nw) // 2

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["size"] = list(self.size)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "PreprocessSpec":
        from .config import check_keys

        check_keys(data, cls.__dataclass_fields__, "unknown preprocess key(s): {keys}")
        if "size" not in data:
            raise ConfigError("preprocess needs 'size' (height, width)")
        return cls(**data)


def _resize_bilinear(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Bilinear resize with half-pixel centres (OpenCV's INTER_LINEAR convention), float32 out."""
    in_h, in_w = img.shape[:2]
    ys = (np.arange(out_h, dtype=np.float32) + 0.5) * (in_h / out_h) - 0.5
    xs = (np.arange(out_w, dtype=np.float32) + 0.5) * (in_w / out_w) - 0.5
    ys = np.clip(ys, 0, in_h - 1)
    xs = np.clip(xs, 0, in_w - 1)
    y0 = np.floor(ys).astype(np.int64)
    x0 = np.floor(xs).astype(np.int64)
    y1 = np.minimum(y0 + 1, in_h - 1)
    x1 = np.minimum(x0 + 1, in_w - 1)
    wy = (ys - y0)[:, None, None]
    wx = (xs - x0)[None, :, None]
    f = img.astype(np.float32)
    top = f[y0][:, x0] * (1 - wx) + f[y0][:, x1] * wx
    bot = f[y1][:, x0] * (1 - wx) + f[y1][:, x1] * wx
    out: np.ndarray = top * (1 - wy) + bot * wy
    return out


def preprocess_reference(image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """Plain NumPy implementation of ``spec`` (the oracle for the fast paths and the GPU kernel)."""
    image = _check_image(image)
    h, w = spec.size
    if spec.resize == "resize":
        canvas = _resize_bilinear(image, h, w)
    else:
        _, nh, nw, top, left = spec.letterbox_geometry(*image.shape[:2])
        canvas = np.full((h, w, 3), float(spec.pad_value), dtype=np.float32)
        canvas[top:top + nh, left:left + nw] = _resize_bilinear(image, nh, nw)
    if spec.swap_rb:
        canvas = canvas[..., ::-1]
    out = (canvas - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)
    if spec.layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return _cast(out[None], spec.dtype)


def preprocess(image: np.ndarray, spec: PreprocessSpec, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Apply ``spec`` to one HWC uint8 image; returns the batch-of-one model input
    (``spec.output_shape()``, ``spec.dtype``), written into ``out`` when given.

    The fast path (OpenCV installed): ``cv2.resize`` straight into a reused uint8 buffer (for
    letterbox, into the padded canvas's region), then one pass per output channel that reads the
    (swapped) source channel, normalises and writes the output plane: no intermediate float image,
    no separate colour conversion or transpose. Results equal :func:`preprocess_reference` up to
    the uint8 rounding of the resized pixels (within 1 pixel level / std). Without OpenCV it is
    :func:`preprocess_reference`.
    """
    image = _check_image(image)
    if out is not None:
        _check_out(out, spec)
    try:
        import cv2
    except ImportError:
        ref = preprocess_reference(image, spec)
        if out is None:
            return ref
        out[...] = ref
        return out
    resized = _resize_u8(cv2, image, spec)
    if out is None:
        out = np.empty(spec.output_shape(), dtype=spec.dtype)
    src_ch = (2, 1, 0) if spec.swap_rb else (0, 1, 2)
    if spec.dtype == "float32":
        scale, shift = _affine(spec)
        for c in range(3):
            dst = out[0, c] if spec.layout == "NCHW" else out[0, :, :, c]
            np.multiply(resized[:, :, src_ch[c]], scale[c], out=dst, dtype=np.float32, casting="unsafe")
            np.subtract(dst, shift[c], out=dst, dtype=np.float32)
    else:
        luts = _luts(spec)
        for c in range(3):
            dst = out[0, c] if spec.layout == "NCHW" else out[0, :, :, c]
            np.take(luts[c], resized[:, :, src_ch[c]], out=dst)
    return out


_local = threading.local()


def _scratch_u8(h: int, w: int) -> np.ndarray:
    """A reused per-thread uint8 (h, w, 3) buffer."""
    buf = getattr(_local, "u8", None)
    if buf is None or buf.shape[:2] != (h, w):
        buf = np.empty((h, w, 3), dtype=np.uint8)
        _local.u8 = buf
    return buf


def _resize_u8(cv2: Any, image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """The resized (or letterboxed) uint8 image, in a reused buffer."""
    h, w = spec.size
    buf = _scratch_u8(h, w)
    if spec.resize == "resize":
        if image.shape[:2] == (h, w):
            return image
        cv2.resize(image, (w, h), dst=buf, interpolation=cv2.INTER_LINEAR)
        return buf
    _, nh, nw, top, left = spec.letterbox_geometry(*image.shape[:2])
    pad = spec.pad_value
    buf[:top] = pad
    buf[top + nh:] = pad
    buf[top:top + nh, :left] = pad
    buf[top:top + nh, left + nw:] = pad
    region = buf[top:top + nh, left:left + nw]
    if image.shape[:2] == (nh, nw):
        region[...] = image
    else:
        got = cv2.resize(image, (nw, nh), dst=region, interpolation=cv2.INTER_LINEAR)
        if got is not region and not np.shares_memory(got, region):  # an OpenCV that reallocated
            region[...] = got
    return buf


@functools.lru_cache(maxsize=32)
def _affine(spec: PreprocessSpec) -> Tuple[List[np.float32], List[np.float32]]:
    """Per output channel (scale, shift) with (x - mean) / std == x * scale - shift, float32."""
    std = np.asarray(spec.std, np.float64)
    mean = np.asarray(spec.mean, np.float64)
    return [np.float32(1.0 / s) for s in std], [np.float32(m / s) for m, s in zip(mean, std)]


@functools.lru_cache(maxsize=32)
def _luts(spec: PreprocessSpec) -> List[np.ndarray]:
    """Per output channel 256-entry tables: pixel value -> normalised value in ``spec.dtype``."""
    v = np.arange(256, dtype=np.float32)
    return [_cast((v - np.float32(m)) / np.float32(s), spec.dtype) for m, s in zip(spec.mean, spec.std)]


def _check_out(out: np.ndarray, spec: PreprocessSpec) -> None:
    if not isinstance(out, np.ndarray) or out.shape != spec.output_shape() or out.dtype != np.dtype(spec.dtype):
        raise InputError(
            f"preprocess out= must be a {spec.dtype} array of shape {spec.output_shape()}, "
            f"got {getattr(out, 'dtype', None)} {getattr(out, 'shape', None)}")


def _check_image(image: np.ndarray) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3:
        raise InputError(f"expected an HxWx3 image, got shape {getattr(image, 'shape', None)}")
    if image.dtype != np.uint8:
        raise InputError(f"expected a uint8 image, got {image.dtype}")
    return image


def _cast(arr: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in ("uint8", "int8"):
        info = np.iinfo(dtype)
        clipped: np.ndarray = np.clip(np.rint(arr), info.min, info.max).astype(dtype)
        return clipped
    return np.ascontiguousarray(arr.astype(dtype, copy=False))
