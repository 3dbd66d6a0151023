"""Python wrapper of ``preprocess.cu``: the fused GPU preprocessing.

:func:`launch_params` computes the kernel's arguments from a :class:`~sdk.preprocess.PreprocessSpec`
on the host (pure Python, tested without a GPU); :func:`emulate` runs the kernel's per-pixel
arithmetic in NumPy with those parameters (what the GPU tests compare against, next to
:func:`sdk.preprocess.preprocess_reference`). Runs on the board too: Python 3.8.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import InputError
from ..preprocess import PreprocessSpec, _check_image

__all__ = ["GpuPreprocessor", "launch_params", "emulate", "band_plan", "BLOCK"]

BLOCK = (32, 8, 1)


def launch_params(spec: PreprocessSpec, src_h: int, src_w: int) -> Dict[str, Any]:
    """The kernel's scalar arguments for a ``src_h`` x ``src_w`` source image."""
    if spec.dtype not in ("float32", "float16"):
        raise InputError(f"the CUDA preprocessing kernel writes float32 or float16, not {spec.dtype}",
                         "use sdk.preprocess.preprocess() for integer outputs")
    h, w = spec.size
    if spec.resize == "letterbox":
        _, nh, nw, top, left = spec.letterbox_geometry(src_h, src_w)
    else:
        nh, nw, top, left = h, w, 0, 0
    return {
        "dst_h": h, "dst_w": w, "top": top, "left": left, "region_h": nh, "region_w": nw,
        "scale_y": np.float32(src_h / nh), "scale_x": np.float32(src_w / nw),
        "pad_value": np.float32(spec.pad_value),
        "mean": [np.float32(m) for m in spec.mean],
        "inv_std": [np.float32(1.0 / s) for s in spec.std],
        "swap_rb": int(spec.swap_rb), "out_nchw": int(spec.layout == "NCHW"),
        "out_half": int(spec.dtype == "float16"),
    }


def emulate(image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """NumPy model of the kernel: the same parameters and per-pixel float32 arithmetic."""
    image = _check_image(image)
    src_h, src_w = image.shape[:2]
    p = launch_params(spec, src_h, src_w)
    h, w = p["dst_h"], p["dst_w"]
    f32 = np.float32
    ys = np.arange(h) - p["top"]
    xs = np.arange(w) - p["left"]
    fy = np.clip((ys.astype(f32) + f32(0.5)) * p["scale_y"] - f32(0.5), f32(0), f32(src_h - 1))
    fx = np.clip((xs.astype(f32) + f32(0.5)) * p["scale_x"] - f32(0.5), f32(0), f32(src_w - 1))
    y0, x0 = np.floor(fy).astype(np.int64), np.floor(fx).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, src_h - 1), np.minimum(x0 + 1, src_w - 1)
    wy, wx = (fy - y0.astype(f32))[:, None, None], (fx - x0.astype(f32))[None, :, None]
    img = image.astype(f32)
    top_v = img[y0][:, x0] * (f32(1) - wx) + img[y0][:, x1] * wx
    bot_v = img[y1][:, x0] * (f32(1) - wx) + img[y1][:, x1] * wx
    v = top_v * (f32(1) - wy) + bot_v * wy
    inside = ((ys >= 0) & (ys < p["region_h"]))[:, None] & ((xs >= 0) & (xs < p["region_w"]))[None, :]
    v = np.where(inside[..., None], v, p["pad_value"]).astype(f32)
    if p["swap_rb"]:
        v = v[..., ::-1]
    out = (v - np.asarray(p["mean"], f32)) * np.asarray(p["inv_std"], f32)
    if p["out_nchw"]:
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out[None]).astype(spec.dtype)


def band_plan(spec: PreprocessSpec, src_h: int, src_w: int, bands: int) -> List[Tuple[int, int, int]]:
    """Split the output rows into ``bands`` bands (multiples of the block height) and give each the
    source rows to upload before it: ``(y_begin, y_end, src_rows_end)``, ``src_rows_end``
    cumulative (band j needs source rows ``[0, src_rows_end)``, the rows before already uploaded).
    The row maths is the kernel's (float32), with one row of margin for fused multiply-add."""
    p = launch_params(spec, src_h, src_w)
    h = p["dst_h"]
    step = -(-h // max(1, int(bands)) // BLOCK[1]) * BLOCK[1] or BLOCK[1]
    f32 = np.float32
    out: List[Tuple[int, int, int]] = []
    need = 0
    for y0 in range(0, h, step):
        y1 = min(h, y0 + step)
        r0, r1 = max(y0 - p["top"], 0), min(y1 - p["top"], p["region_h"])
        if r1 > r0:
            fy = (f32(r1 - 1) + f32(0.5)) * p["scale_y"] - f32(0.5)
            fy = min(max(float(fy), 0.0), float(src_h - 1))
            need = max(need, min(int(np.floor(fy)) + 3, src_h))  # rows floor(fy) and +1, and a margin row
        out.append((y0, y1, need))
    return out


def _ptr(buf: Any) -> Any:
    """A kernel pointer argument: a DeviceBuffer as is, a raw address (int) as np.uint64."""
    return np.uint64(buf) if isinstance(buf, int) else buf


class GpuPreprocessor:
    """Runs ``preprocess.cu`` for one :class:`PreprocessSpec`.

    ``bands`` > 1 splits the output rows into that many bands and overlaps the upload of each
    band's source rows (on a second stream) with the previous band's kernel, so a frame costs
    about one host-to-device copy plus a fraction of the kernel. ``backend``: an open :class:`~sdk.targets.cuda.CudaBackend` (default: ``get_backend()``, closed
    with this object). :meth:`to_device` leaves the result on the GPU (a buffer to bind straight to
    a TensorRT input); :meth:`__call__` returns it as a host array.

    Zero-copy input: a frame already in pinned or registered host memory (:meth:`input_buffer`, or
    the caller's array after ``backend.register_host(arr)``) is copied to the GPU as it is, so
    preprocessing costs one host-to-device copy and one kernel; any other array is first copied
    into the pinned staging buffer.
    """

    def __init__(self, spec: PreprocessSpec, backend: Any = None, stream: Any = None, bands: int = 1):
        from ..targets.cuda import get_backend
        from .loader import load_kernels

        launch_params(spec, 1, 1)  # fail early on an unsupported dtype
        self.spec = spec
        self._own = backend is None
        self.backend = backend or get_backend()
        self.stream = stream or self.backend.stream()
        self._kernel = load_kernels(self.backend, "preprocess.cu", ["edgesdk_preprocess"])["edgesdk_preprocess"]
        self._out = self.backend.alloc(int(np.prod(spec.output_shape())) * np.dtype(spec.dtype).itemsize)
        self._src: Optional[Any] = None
        self._src_host: Optional[np.ndarray] = None
        self._bound: Dict[Any, Any] = {}
        self._host_out = self.backend.pinned(spec.output_shape(), spec.dtype)
        self._uploaded = self.backend.event()  # recorded after each frame's upload
        self._uploading = False
        self.bands = max(1, int(bands))
        if self.bands > 1:  # uploads on their own stream, each band's kernel waits for its rows
            self._copy_stream = self.backend.stream()
            self._band_events = [self.backend.event() for _ in range(self.bands + 1)]
            self._done = self.backend.event()
            self._started = False

    def close(self) -> None:
        if self._own and self.backend is not None:
            self.backend.close()
        self.backend = None

    def __enter__(self) -> "GpuPreprocessor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def input_buffer(self, height: int, width: int) -> np.ndarray:
        """The pinned staging array (``height`` x ``width`` x 3 uint8) for a frame of that size:
        decode or write a frame straight into it (``cap.read(buf)``, ``np.copyto(buf, ...)``, a
        camera driver's DMA), then :meth:`to_device` copies it to the GPU with no host copy. It is
        reused for every frame of that size: do not rewrite it before the stream has consumed it
        (:meth:`to_device` is asynchronous; :meth:`__call__` waits)."""
        shape = (int(height), int(width), 3)
        host = self._src_host
        if host is None or host.shape != shape:
            host = self._src_host = self.backend.pinned(shape, np.uint8)
        return host

    def _device_src(self, nbytes: int) -> Any:
        if self._src is None or self._src.nbytes < nbytes:
            if self._src is not None:
                self._src.free()
            self._src = self.backend.alloc(nbytes)
        return self._src

    def _host_frame(self, image: np.ndarray) -> np.ndarray:
        """``image`` itself when it is pinned or registered memory (:meth:`input_buffer`,
        ``backend.register_host``), else its copy in the pinned staging buffer."""
        image = _check_image(image)
        if image.flags.c_contiguous and self.backend.is_pinned(image):
            return image
        staging = self.input_buffer(image.shape[0], image.shape[1])
        if self._uploading:  # the previous upload from the staging buffer may still be running
            self._uploaded.synchronize()
        np.copyto(staging, image)
        return staging

    def launch(self, src: Any, src_h: int, src_w: int, src_pitch: int, dst: Any, stream: Any = None,
               rows: Optional[Tuple[int, int]] = None) -> None:
        """Launch on device buffers: ``src`` uint8 HWC (row pitch ``src_pitch`` bytes) -> ``dst``,
        output rows ``rows`` = (begin, end) (default: all). The launch is packed once per
        (buffers, size, rows) and reused."""
        y0, y1 = rows if rows is not None else (0, self.spec.size[0])
        key = (int(src), int(src_h), int(src_w), int(src_pitch), int(dst), y0, y1)
        bound = self._bound.get(key)
        if bound is None:
            p = launch_params(self.spec, src_h, src_w)
            i32 = np.int32
            args = [_ptr(src), i32(src_h), i32(src_w), i32(src_pitch), _ptr(dst), i32(p["dst_h"]), i32(p["dst_w"]),
                    i32(p["top"]), i32(p["left"]), i32(p["region_h"]), i32(p["region_w"]),
                    p["scale_y"], p["scale_x"], p["pad_value"], *p["mean"], *p["inv_std"],
                    i32(p["swap_rb"]), i32(p["out_nchw"]), i32(p["out_half"]), i32(y0), i32(y1)]
            grid = ((p["dst_w"] + BLOCK[0] - 1) // BLOCK[0], (y1 - y0 + BLOCK[1] - 1) // BLOCK[1], 1)
            if len(self._bound) > 8 * self.bands:  # sizes come and go: keep the cache small
                self._bound.clear()
            bound = self._bound[key] = self.backend.bind_launch(self._kernel, grid, BLOCK, args)
        bound(stream or self.stream)

    def to_device(self, image: np.ndarray, dst: Any = None) -> Any:
        """Upload ``image``, run the kernel; returns the device buffer holding the model input
        (``dst`` when given). Asynchronous on :attr:`stream`: a pinned ``image`` must not be
        rewritten before the stream is done with it."""
        frame = self._host_frame(image)
        out = dst if dst is not None else self._out
        src = self._device_src(frame.nbytes)
        h, w = frame.shape[0], frame.shape[1]
        if self.bands == 1:
            self.backend.htod(src, frame, self.stream)
            self._uploaded.record(self.stream)
            self._uploading = True
            self.launch(src, h, w, w * 3, out)
            return out
        if self._started:  # the previous frame's kernels still read the device source rows
            self._copy_stream.wait(self._done)
        self._started = True
        sent, pitch = 0, w * 3
        for (y0, y1, need), event in zip(band_plan(self.spec, h, w, self.bands), self._band_events):
            if need > sent:
                self.backend.htod(int(src.ptr) + sent * pitch, frame[sent:need], self._copy_stream)
                sent = need
            event.record(self._copy_stream)
            self.stream.wait(event)
            self.launch(src, h, w, pitch, out, rows=(y0, y1))
        self._uploaded.record(self._copy_stream)
        self._uploading = True
        self._done.record(self.stream)
        return out

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """Preprocess ``image`` on the GPU; returns a new host array (``spec.output_shape()``)."""
        out = self.to_device(image)
        self.backend.dtoh(self._host_out, out, self.stream)
        self.stream.synchronize()
        return self._host_out.copy()
