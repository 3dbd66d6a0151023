"""Python wrapper of ``postprocess.cu``: YOLO-style detection post-processing on the GPU, with the
semantics of :func:`sdk.kernels.reference.yolo_postprocess`; and :func:`emulate`, the kernels'
algorithm (block-wise compaction, stable 4-pass radix sort, 64-bit IoU masks and their greedy walk)
step for step in NumPy, so its equality with the reference is tested without a GPU.
Runs on the board too: Python 3.8.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from ..errors import InputError
from .reference import Detections, PostprocessSpec

__all__ = ["GpuYoloPostprocessor", "emulate", "THREADS", "RADIX_PASSES"]

THREADS = 256        #: EDGESDK_THREADS in postprocess.cu: blockDim.x of the row and sort kernels
SCAN_THREADS = 1024  #: EDGESDK_SCAN_THREADS: blockDim.x of edgesdk_scan
MASK_THREADS = 64    #: one thread per row of a 64x64 IoU tile
RADIX_BITS = 8
RADIX_PASSES = 4     #: 32-bit keys, 8 bits a pass


def mask_words(max_candidates: int) -> int:
    """64-bit words per row of the IoU mask."""
    return (int(max_candidates) + 63) // 64


class GpuYoloPostprocessor:
    """Post-process predictions of ``num_rows`` rows x ``num_fields`` fields (as laid out by
    ``spec.transposed``) on the GPU. Call with a host array or a device buffer (e.g. a TensorRT
    output binding); returns :class:`Detections` on the host.

    Device memory: about ``num_rows * 45`` bytes plus the IoU mask, ``c * ceil(c / 64) * 8`` bytes
    for ``c = min(max_candidates, num_rows)`` (2 MiB for the default 4096 candidates).
    """

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
        names = ["edgesdk_yolo_decode", "edgesdk_scan", "edgesdk_compact", "edgesdk_radix_hist",
                 "edgesdk_radix_scatter", "edgesdk_nms_mask", "edgesdk_nms_gather"]
        self._k = load_kernels(b, "postprocess.cu", names)
        # never more candidates than rows: the IoU mask is max_candidates^2 / 8 bytes
        n, mc, md = self.num_rows, min(spec.max_candidates, self.num_rows), spec.max_detections
        self._max_candidates = mc
        self._blocks = (n + THREADS - 1) // THREADS
        self._words = mask_words(mc)
        self._pred = b.alloc(n * self.num_fields * 4)
        self._flags, self._keys_row = b.alloc(n), b.alloc(n * 4)
        self._scores, self._boxes, self._classes = b.alloc(n * 4), b.alloc(n * 16), b.alloc(n * 4)
        self._block_counts, self._count = b.alloc(self._blocks * 4), b.alloc(4)
        self._hist = b.alloc((1 << RADIX_BITS) * self._blocks * 4)
        self._keys = (b.alloc(n * 4), b.alloc(n * 4))
        self._rows = (b.alloc(n * 4), b.alloc(n * 4))
        self._mask, self._removed = b.alloc(mc * self._words * 8), b.alloc(self._words * 8)
        # the outputs in one block (count, boxes, scores, classes, rows), fetched with one copy
        self._out = b.alloc(4 * (1 + 7 * md))
        self._h_out = b.pinned((1 + 7 * md,), np.int32)
        base, h = int(self._out.ptr), self._h_out
        self._out_count, self._out_boxes = np.uint64(base), np.uint64(base + 4)
        self._out_scores, self._out_classes = np.uint64(base + 4 + 16 * md), np.uint64(base + 4 + 20 * md)
        self._out_rows = np.uint64(base + 4 + 24 * md)
        self._h_count = h[:1]
        self._h_boxes = h[1:1 + 4 * md].view(np.float32).reshape(md, 4)
        self._h_scores = h[1 + 4 * md:1 + 5 * md].view(np.float32)
        self._h_classes, self._h_rows = h[1 + 5 * md:1 + 6 * md], h[1 + 6 * md:1 + 7 * md]
        self._launches = self._bind()
        self._decode: Any = None
        self._decode_ptr: Optional[int] = None

    def close(self) -> None:
        if self._own and self.backend is not None:
            self.backend.close()
        self.backend = None

    def __enter__(self) -> "GpuYoloPostprocessor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _bind(self) -> List[Any]:
        """Every launch after the decode, with its arguments packed once (they never change)."""
        sp, n, k, b = self.spec, self.num_rows, self._k, self.backend
        i32, f32, null = np.int32, np.float32, np.uint64(0)
        grid, block, one = (self._blocks, 1, 1), (THREADS, 1, 1), (1, 1, 1)
        hist_len = i32((1 << RADIX_BITS) * self._blocks)
        out = [b.bind_launch(k["edgesdk_scan"], one, (SCAN_THREADS, 1, 1), [self._block_counts, i32(self._blocks),
                                                                           self._count]),
               b.bind_launch(k["edgesdk_compact"], grid, block, [self._flags, self._keys_row, i32(n), self._block_counts,
                                                                 self._keys[0], self._rows[0]])]
        for p in range(RADIX_PASSES):
            src, dst = p % 2, (p + 1) % 2
            shift = i32(p * RADIX_BITS)
            out.append(b.bind_launch(k["edgesdk_radix_hist"], grid, block, [self._keys[src], self._count, shift,
                                                                            self._hist]))
            out.append(b.bind_launch(k["edgesdk_scan"], one, (SCAN_THREADS, 1, 1), [self._hist, hist_len, null]))
            out.append(b.bind_launch(k["edgesdk_radix_scatter"], grid, block,
                                     [self._keys[src], self._rows[src], self._count, shift, self._hist,
                                      self._keys[dst], self._rows[dst]]))
        sorted_rows, words = self._rows[RADIX_PASSES % 2], self._words
        out.append(b.bind_launch(k["edgesdk_nms_mask"], (words, words, 1), (MASK_THREADS, 1, 1),
                                 [self._boxes, self._classes, sorted_rows, self._count, i32(self._max_candidates),
                                  f32(sp.iou_threshold), self._mask, i32(words)]))
        out.append(b.bind_launch(k["edgesdk_nms_gather"], one, block,
                                 [self._mask, i32(words), self._boxes, self._classes, self._scores, sorted_rows,
                                  self._count, i32(self._max_candidates), i32(sp.max_detections), self._removed,
                                  self._out_boxes, self._out_scores, self._out_classes, self._out_rows,
                                  self._out_count]))
        return out

    def _bind_decode(self, pred: Any) -> Any:
        sp, n = self.spec, self.num_rows
        i32 = np.int32
        row_stride, col_stride = (1, n) if sp.transposed else (self.num_fields, 1)
        return self.backend.bind_launch(
            self._k["edgesdk_yolo_decode"], (self._blocks, 1, 1), (THREADS, 1, 1),
            [pred, i32(n), i32(self.num_classes), i32(int(sp.has_objectness)), i32(row_stride), i32(col_stride),
             np.float32(sp.score_threshold), self._flags, self._keys_row, self._scores, self._boxes, self._classes,
             self._block_counts])

    def launch(self, pred: Any, stream: Any = None) -> None:
        """Enqueue the kernels on a device buffer ``pred`` (float32; a :class:`DeviceBuffer` or a
        pointer). Asynchronous. The launches are packed once; a new ``pred`` pointer repacks the
        first."""
        s = stream or self.stream
        ptr = int(pred)
        if self._decode_ptr != ptr:
            self._decode = self._bind_decode(np.uint64(ptr) if isinstance(pred, int) else pred)
            self._decode_ptr = ptr
        self._decode(s)
        for launch in self._launches:
            launch(s)

    def fetch(self, stream: Any = None) -> Detections:
        """Copy the last launch's detections to the host (synchronises the stream)."""
        s = stream or self.stream
        b = self.backend
        b.dtoh(self._h_out, self._out, s)
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


# -- the same algorithm in NumPy ------------------------------------------------------------------


def score_keys(scores: np.ndarray) -> np.ndarray:
    """``edgesdk_score_key``: uint32 keys whose ascending order is descending score (-0.0 == 0.0)."""
    u = (np.asarray(scores, np.float32) + np.float32(0.0)).view(np.uint32)
    asc = np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000)).astype(np.uint32)
    return (~asc).astype(np.uint32)


def _exclusive_scan(counts: np.ndarray) -> Tuple[np.ndarray, int]:
    c = np.asarray(counts, np.int64)
    return (np.cumsum(c) - c), int(c.sum())


def _decode(pred: np.ndarray, spec: PostprocessSpec):
    """``edgesdk_yolo_decode``: per-row flags, scores, classes, boxes."""
    rows, num_classes = spec.rows(pred)
    first = 5 if spec.has_objectness else 4
    cls = rows[:, first:first + num_classes]
    best_c = np.argmax(cls, axis=1).astype(np.int32)  # first maximum, as the kernel's strict '>'
    best = cls[np.arange(rows.shape[0]), best_c]
    if spec.has_objectness:
        best = (rows[:, 4] * best).astype(np.float32)
    flags = best > np.float32(spec.score_threshold)
    half = np.float32(0.5)
    hw, hh = rows[:, 2] * half, rows[:, 3] * half
    boxes = np.stack([rows[:, 0] - hw, rows[:, 1] - hh, rows[:, 0] + hw, rows[:, 1] + hh], axis=1).astype(np.float32)
    return flags, best.astype(np.float32), best_c, boxes


def _radix_pass(keys: np.ndarray, vals: np.ndarray, shift: int, blocks: int) -> Tuple[np.ndarray, np.ndarray]:
    """One ``edgesdk_radix_hist`` + ``edgesdk_scan`` + ``edgesdk_radix_scatter`` pass."""
    n = keys.shape[0]
    digits = ((keys >> np.uint32(shift)) & np.uint32((1 << RADIX_BITS) - 1)).astype(np.int64)
    block_of = np.arange(n) // THREADS
    hist = np.zeros((1 << RADIX_BITS, blocks), np.int64)  # digit-major, as the kernel
    np.add.at(hist, (digits, block_of), 1)
    offsets, _ = _exclusive_scan(hist.reshape(-1))
    offsets = offsets.reshape(hist.shape)
    out_k, out_v = np.empty_like(keys), np.empty_like(vals)
    for b in range(min(blocks, (n + THREADS - 1) // THREADS)):
        d = digits[b * THREADS:(b + 1) * THREADS]
        # stable rank inside the block: earlier items with the same digit
        m = d.shape[0]
        before = ((d[None, :] == d[:, None]) & (np.arange(m)[None, :] < np.arange(m)[:, None])).sum(axis=1)
        slot = offsets[d, b] + before
        out_k[slot], out_v[slot] = keys[b * THREADS:(b + 1) * THREADS], vals[b * THREADS:(b + 1) * THREADS]
    return out_k, out_v


def _iou_tile(rows_boxes: np.ndarray, col_boxes: np.ndarray) -> np.ndarray:
    """``edgesdk_iou`` of every (row, col) pair, float32 in the kernel's operation order."""
    a, b = rows_boxes[:, None, :], col_boxes[None, :, :]
    zero = np.float32(0)
    iw = np.maximum(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), zero)
    ih = np.maximum(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), zero)
    inter = iw * ih
    area_a = np.maximum(a[..., 2] - a[..., 0], zero) * np.maximum(a[..., 3] - a[..., 1], zero)
    area_b = np.maximum(b[..., 2] - b[..., 0], zero) * np.maximum(b[..., 3] - b[..., 1], zero)
    union = (area_a + area_b) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > zero, inter / np.where(union > zero, union, np.float32(1)), zero).astype(np.float32)


def _nms_mask(boxes: np.ndarray, classes: np.ndarray, ranked_rows: np.ndarray, iou_threshold: float) -> np.ndarray:
    """``edgesdk_nms_mask``: uint64 [k, words]; only tiles with col >= row are written (0 elsewhere)."""
    k = ranked_rows.shape[0]
    words = mask_words(k)
    mask = np.zeros((k, words), np.uint64)
    rb, rc = boxes[ranked_rows], classes[ranked_rows]
    thr = np.float32(iou_threshold)
    for row in range(words):
        r0, r1 = row * 64, min(k, row * 64 + 64)
        for col in range(row, words):
            c0, c1 = col * 64, min(k, col * 64 + 64)
            hit = (_iou_tile(rb[r0:r1], rb[c0:c1]) > thr) & (rc[r0:r1, None] == rc[None, c0:c1])
            if col == row:
                hit &= np.arange(c1 - c0)[None, :] > np.arange(r1 - r0)[:, None]  # only later candidates
            weights = np.left_shift(np.uint64(1), np.arange(c1 - c0, dtype=np.uint64))
            mask[r0:r1, col] = (hit.astype(np.uint64) * weights[None, :]).sum(axis=1, dtype=np.uint64)
    return mask


def _nms_gather(mask: np.ndarray, max_detections: int) -> List[int]:
    """``edgesdk_nms_gather``: ranks of the kept candidates, 64 at a time."""
    k, words = mask.shape
    removed = np.zeros(words, np.uint64)
    kept: List[int] = []
    for b in range(words):
        if len(kept) >= max_detections:
            break
        w = int(removed[b])
        now: List[int] = []
        for q in range(min(k - b * 64, 64)):
            if len(kept) + len(now) >= max_detections:
                break
            if not (w >> q) & 1:
                now.append(b * 64 + q)
                w |= int(mask[b * 64 + q, b])
        if now and b + 1 < words:
            removed[b + 1:] |= np.bitwise_or.reduce(mask[now, b + 1:], axis=0)
        kept.extend(now)
    return kept


def emulate(pred: np.ndarray, spec: Optional[PostprocessSpec] = None) -> Detections:
    """The kernels' algorithm in NumPy, stage by stage (what ``GpuYoloPostprocessor`` computes)."""
    spec = spec or PostprocessSpec()
    flags, scores, classes, boxes = _decode(pred, spec)
    n = flags.shape[0]
    blocks = (n + THREADS - 1) // THREADS
    counts = np.add.reduceat(flags.astype(np.int64), np.arange(0, n, THREADS)) if n else np.zeros(0, np.int64)
    offsets, count = _exclusive_scan(counts)
    keys = np.zeros(count, np.uint32)
    rows = np.zeros(count, np.int32)
    for b in range(blocks):  # edgesdk_compact: block offset + rank among the block's candidates
        idx = np.nonzero(flags[b * THREADS:(b + 1) * THREADS])[0] + b * THREADS
        slots = offsets[b] + np.arange(idx.shape[0])
        keys[slots], rows[slots] = score_keys(scores[idx]), idx
    for p in range(RADIX_PASSES):
        keys, rows = _radix_pass(keys, rows, p * RADIX_BITS, blocks)
    ranked = rows[: min(count, spec.max_candidates)]
    kept = _nms_gather(_nms_mask(boxes, classes, ranked, spec.iou_threshold), spec.max_detections)
    sel = ranked[np.asarray(kept, np.int64)].astype(np.int64)
    return Detections(boxes[sel].reshape(-1, 4), scores[sel], classes[sel].astype(np.int32), sel.astype(np.int32))
