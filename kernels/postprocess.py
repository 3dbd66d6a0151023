"""Python wrapper of ``postprocess.cu``: YOLO-style detection post-processing on the GPU, with the
semantics of :func:`sdk.kernels.reference.yolo_postprocess`. Runs on the board too: Python 3.8.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from .reference import Detections, PostprocessSpec

__all__ = ["GpuYoloPostprocessor"]

_THREADS = 256  # must equal EDGESDK_RANK_TILE in postprocess.cu (edgesdk_rank tiles by block)


class GpuYoloPostprocessor:
    """Post-process predictions of ``num_rows`` rows x ``num_fields`` fields (as laid out by
    ``spec.transposed``) on the GPU. Call with a host array or a device buffer (e.g. a TensorRT
    output binding); returns :class:`Detections` on the host."""

    def __init__(self, spec: PostprocessSpec, num_rows: int, num_fields: int, backend: Any = None, stream: Any = None):
        from ..targets.cuda import get_backend
        from .loader import load_kernels

        first = 5 if spec.has_objectness else 4
        if num_fields <= first:
            raise InputError(f"{num_fields} fields per row is too few for {first} box/objectness fields plus classes")
        self.spec, self.num_rows, self.num_fields = spec, int(num_rows), int(num_fields)
        self.num_classes = self.num_fields - first
        self._own = backend is None
        b = self.backend = backend or get_backend()
        self.stream = stream or b.stream()
        k = load_kernels(b, "postprocess.cu", ["edgesdk_yolo_decode", "edgesdk_rank", "edgesdk_nms"])
        self._decode, self._rank, self._nms = k["edgesdk_yolo_decode"], k["edgesdk_rank"], k["edgesdk_nms"]
        n, mc, md = self.num_rows, spec.max_candidates, spec.max_detections
        self._pred = b.alloc(n * self.num_fields * 4)
        self._count = b.alloc(4)
        self._cand_score, self._cand_row = b.alloc(n * 4), b.alloc(n * 4)
        self._boxes, self._classes = b.alloc(n * 16), b.alloc(n * 4)
        self._sorted_score, self._sorted_row, self._removed = b.alloc(mc * 4), b.alloc(mc * 4), b.alloc(mc)
        self._out_boxes, self._out_scores = b.alloc(md * 16), b.alloc(md * 4)
        self._out_classes, self._out_rows, self._out_count = b.alloc(md * 4), b.alloc(md * 4), b.alloc(4)
        self._h_count = b.pinned((1,), np.int32)
        self._h_boxes = b.pinned((md, 4), np.float32)
        self._h_scores = b.pinned((md,), np.float32)
        self._h_classes = b.pinned((md,), np.int32)
        self._h_rows = b.pinned((md,), np.int32)

    def close(self) -> None:
        if self._own and self.backend is not None:
            self.backend.close()
        self.backend = None

    def __enter__(self) -> "GpuYoloPostprocessor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def launch(self, pred: Any, stream: Any = None) -> None:
        """Enqueue the three kernels on a device buffer ``pred`` (float32)."""
        s = stream or self.stream
        sp, n = self.spec, self.num_rows
        i32, f32 = np.int32, np.float32
        row_stride, col_stride = (1, n) if sp.transposed else (self.num_fields, 1)
        b = self.backend
        b.memset_d32(self._count, 0, 1, s)
        grid = ((n + _THREADS - 1) // _THREADS, 1, 1)
        self._decode(grid, (_THREADS, 1, 1), [pred, i32(n), i32(self.num_classes), i32(int(sp.has_objectness)),
                                              i32(row_stride), i32(col_stride), f32(sp.score_threshold),
                                              self._count, self._cand_score, self._cand_row, self._boxes,
                                              self._classes], stream=s)
        self._rank(grid, (_THREADS, 1, 1), [self._cand_score, self._cand_row, self._count, i32(sp.max_candidates),
                                            self._sorted_score, self._sorted_row], stream=s)
        self._nms((1, 1, 1), (_THREADS, 1, 1), [self._boxes, self._classes, self._sorted_score, self._sorted_row,
                                                self._count, i32(sp.max_candidates), f32(sp.iou_threshold),
                                                i32(sp.max_detections), self._removed, self._out_boxes,
                                                self._out_scores, self._out_classes, self._out_rows,
                                                self._out_count], stream=s)

    def fetch(self, stream: Any = None) -> Detections:
        """Copy the last launch's detections to the host (synchronises the stream)."""
        s = stream or self.stream
        b = self.backend
        for host, dev in ((self._h_count, self._out_count), (self._h_boxes, self._out_boxes),
                          (self._h_scores, self._out_scores), (self._h_classes, self._out_classes),
                          (self._h_rows, self._out_rows)):
            b.dtoh(host, dev, s)
        s.synchronize()
        k = int(self._h_count[0])
        return Detections(self._h_boxes[:k].copy(), self._h_scores[:k].copy(), self._h_classes[:k].copy(),
                          self._h_rows[:k].copy())

    def __call__(self, pred: Any) -> Detections:
        if isinstance(pred, np.ndarray):
            arr = np.asarray(pred, dtype=np.float32)
            if arr.ndim == 3 and arr.shape[0] == 1:
                arr = arr[0]
            want = (self.num_fields, self.num_rows) if self.spec.transposed else (self.num_rows, self.num_fields)
            if arr.shape != want:
                raise InputError(f"prediction has shape {arr.shape}, this post-processor was made for {want}")
            self.backend.htod(self._pred, np.ascontiguousarray(arr), self.stream)
            pred = self._pred
        self.launch(pred)
        return self.fetch()
