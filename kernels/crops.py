"""Python wrapper of ``crops.cu``: every text-line crop of a frame (perspective crop, turn, resize,
normalise, pad) in one launch.

The per-crop arguments (:class:`CropPlan`) are computed on the host by the pipeline's
``crop_resize`` glue step from the same functions its CPU steps use; :func:`emulate` runs the
kernel's arithmetic in NumPy on those arguments (what the tests compare with the CPU glue steps
without a GPU, and with the kernel on one). Runs on the board too: Python 3.8 + NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["CropPlan", "GpuCropResizer", "emulate", "BLOCK", "CROP_INTS"]

BLOCK = (32, 8, 1)
#: int32 fields per crop: turned_h, turned_w, crop_w, turned, resized_w, out_w, left, unused
CROP_INTS = 8


@dataclass
class CropPlan:
    """The kernel's arguments for K crops: ``hinv [K, 9]`` float64 (crop pixel -> source point),
    ``ints [K, 8]`` int32 (:data:`CROP_INTS`), ``scales [K, 2]`` float32 (resize scale y, x), the
    output height and row stride (the widest crop), and the normalisation (0-255 units, per output
    channel), ``swap_rb``, ``nchw``."""

    hinv: np.ndarray
    ints: np.ndarray
    scales: np.ndarray
    out_h: int
    out_stride: int
    pad_value: float
    mean: Sequence[float]
    std: Sequence[float]
    swap_rb: bool
    nchw: bool

    @property
    def count(self) -> int:
        return int(self.ints.shape[0])

    def split(self, out: np.ndarray) -> list:
        """The kernel's ``[K, ...]`` output -> one ``[1, 3, H, W_k]`` (or ``[1, H, W_k, 3]``) array per crop."""
        widths = self.ints[:, 5]
        if self.nchw:
            return [np.ascontiguousarray(out[k:k + 1, :, :, :w]) for k, w in enumerate(widths)]
        return [np.ascontiguousarray(out[k:k + 1, :, :w, :]) for k, w in enumerate(widths)]


def _sample_crop(image: np.ndarray, hinv: np.ndarray, crop_w: int, turned: bool, gy: np.ndarray,
                 gx: np.ndarray) -> np.ndarray:
    """Crop pixels at turned-crop grid points (gy, gx): the kernel's ``edgesdk_crop_pixel``."""
    cy, cx = (gx, crop_w - 1 - gy) if turned else (gy, gx)
    px, py = cx.astype(np.float64), cy.astype(np.float64)
    h = hinv
    sz = h[6] * px + h[7] * py + h[8]
    sx = (h[0] * px + h[1] * py + h[2]) / sz
    sy = (h[3] * px + h[4] * py + h[5]) / sz
    ih, iw = image.shape[:2]
    sx, sy = np.clip(sx, 0.0, iw - 1.0), np.clip(sy, 0.0, ih - 1.0)
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    x1, y1 = np.minimum(x0 + 1, iw - 1), np.minimum(y0 + 1, ih - 1)
    fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]
    f = image.astype(np.float64)
    v = (f[y0, x0] * (1.0 - fx) * (1.0 - fy) + f[y0, x1] * fx * (1.0 - fy) + f[y1, x0] * (1.0 - fx) * fy
         + f[y1, x1] * fx * fy)
    return np.clip(np.rint(v), 0.0, 255.0)


def emulate(image: np.ndarray, plan: CropPlan) -> np.ndarray:
    """NumPy model of ``edgesdk_crop_resize``: the same arguments and per-pixel arithmetic;
    ``[K, 3, out_h, out_stride]`` (NCHW) or ``[K, out_h, out_stride, 3]`` float32 (past each
    crop's own width: zeros, as the kernel leaves them)."""
    image = np.ascontiguousarray(image, np.uint8)
    k_n, h_out, stride = plan.count, plan.out_h, plan.out_stride
    out = np.zeros((k_n, h_out, stride, 3), np.float32)
    f32 = np.float32
    mean = np.asarray(plan.mean, np.float32).astype(np.float64)
    std = np.asarray(plan.std, np.float32).astype(np.float64)
    for k in range(k_n):
        turned_h, turned_w, crop_w, turned, resized_w, out_w, left, _ = (int(v) for v in plan.ints[k])
        sy, sx = f32(plan.scales[k, 0]), f32(plan.scales[k, 1])
        fy = np.clip((np.arange(h_out, dtype=f32) + f32(0.5)) * sy - f32(0.5), f32(0), f32(turned_h - 1))
        fx = np.clip((np.arange(resized_w, dtype=f32) + f32(0.5)) * sx - f32(0.5), f32(0), f32(turned_w - 1))
        y0, x0 = np.floor(fy).astype(np.int64), np.floor(fx).astype(np.int64)
        y1, x1 = np.minimum(y0 + 1, turned_h - 1), np.minimum(x0 + 1, turned_w - 1)
        wy = (fy.astype(np.float64) - y0)[:, None, None]
        wx = (fx.astype(np.float64) - x0)[None, :, None]

        def px(gy: np.ndarray, gx: np.ndarray, h: np.ndarray = plan.hinv[k], cw: int = crop_w,
               t: bool = bool(turned)) -> np.ndarray:
            yy, xx = np.meshgrid(gy, gx, indexing="ij")
            return _sample_crop(image, h, cw, t, yy, xx)

        top = px(y0, x0) * (1.0 - wx) + px(y0, x1) * wx
        bot = px(y1, x0) * (1.0 - wx) + px(y1, x1) * wx
        v = top * (1.0 - wy) + bot * wy
        if plan.swap_rb:
            v = v[..., ::-1]
        row = np.full((h_out, out_w, 3), plan.pad_value, np.float32)
        row[:, left:left + resized_w] = ((v - mean) / std).astype(np.float32)
        out[k, :, :out_w] = row
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)) if plan.nchw else out


class GpuCropResizer:
    """Runs ``crops.cu`` on a frame: ``resizer(image, plan)`` -> the ``[K, ...]`` float32 host
    array (:meth:`CropPlan.split` gives the per-crop arrays). ``backend``: an open
    :class:`~sdk.targets.cuda.CudaBackend` (default: ``get_backend()``, closed with this object).
    Device buffers grow to the largest frame and crop count seen and are reused."""

    def __init__(self, backend: Any = None, stream: Any = None):
        from ..targets.cuda import get_backend
        from .loader import load_kernels

        self._own = backend is None
        self.backend = backend or get_backend()
        self.stream = stream or self.backend.stream()
        self._kernel = load_kernels(self.backend, "crops.cu", ["edgesdk_crop_resize"])["edgesdk_crop_resize"]
        self._bufs: dict = {}

    def _buf(self, key: str, nbytes: int) -> Any:
        buf = self._bufs.get(key)
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                buf.free()
            buf = self._bufs[key] = self.backend.alloc(nbytes)
        return buf

    def close(self) -> None:
        if self.backend is not None:
            for buf in self._bufs.values():
                buf.free()
            self._bufs = {}
            if self._own:
                self.backend.close()
        self.backend = None

    def __enter__(self) -> "GpuCropResizer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __call__(self, image: np.ndarray, plan: CropPlan, out: Optional[np.ndarray] = None) -> np.ndarray:
        be, st = self.backend, self.stream
        image = np.ascontiguousarray(image, np.uint8)
        hinv = np.ascontiguousarray(plan.hinv, np.float64)
        ints = np.ascontiguousarray(plan.ints, np.int32)
        scales = np.ascontiguousarray(plan.scales, np.float32)
        k_n, h_out, stride = plan.count, plan.out_h, plan.out_stride
        shape = (k_n, 3, h_out, stride) if plan.nchw else (k_n, h_out, stride, 3)
        host = out if out is not None else np.empty(shape, np.float32)
        src, d_h, d_i, d_s = (self._buf("src", image.nbytes), self._buf("hinv", hinv.nbytes),
                              self._buf("ints", ints.nbytes), self._buf("scales", scales.nbytes))
        dst = self._buf("dst", host.nbytes)
        be.htod(src, image, st)
        be.htod(d_h, hinv, st)
        be.htod(d_i, ints, st)
        be.htod(d_s, scales, st)
        i32, f32 = np.int32, np.float32
        ih, iw = image.shape[:2]
        args = [src, i32(ih), i32(iw), i32(iw * 3), d_h, d_i, d_s, dst, i32(h_out), i32(stride), f32(plan.pad_value),
                *[f32(m) for m in plan.mean], *[f32(s) for s in plan.std], i32(int(plan.swap_rb)), i32(int(plan.nchw))]
        grid = ((stride + BLOCK[0] - 1) // BLOCK[0], (h_out + BLOCK[1] - 1) // BLOCK[1], k_n)
        be.launch(self._kernel, grid, BLOCK, args, st)
        be.dtoh(host, dst, st)
        st.synchronize()
        return host
