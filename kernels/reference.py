"""CPU references of the CUDA kernels, with the same semantics (the oracle for GPU tests and the
fallback on boards without CUDA).

- Preprocessing: :func:`preprocess_reference` (plain NumPy) and :func:`preprocess_opencv` (the fast
  OpenCV path of :func:`sdk.preprocess.preprocess`); both follow a :class:`~sdk.preprocess.PreprocessSpec`.
- Anchor-free heads (PicoDet/GFL): :func:`dfl_decode`, the boxes and class scores of the raw heads.
- Detection post-processing: :func:`yolo_postprocess` for YOLO-style outputs ``[N, 4+1+C]`` (with
  objectness) or ``[N, 4+C]``, optionally transposed (``[4+C, N]``, YOLOv8's layout): score
  threshold, box decode, class-aware greedy NMS, top-k cap. Float32 throughout, the same operation
  order as ``postprocess.cu``, so keep/remove decisions are identical.

Runs on the board too: Python 3.8, NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError
from ..preprocess import PreprocessSpec
from ..preprocess import preprocess as preprocess_opencv
from ..preprocess import preprocess_reference

__all__ = [
    "synthetic_yolo_output",
    "PostprocessSpec",
    "Detections",
    "preprocess_reference",
    "preprocess_opencv",
    "yolo_postprocess",
    "decode_candidates",
    "box_iou",
    "scale_boxes",
]


@dataclass(frozen=True)
class PostprocessSpec:
    """YOLO-style detection post-processing.

    ``has_objectness``: rows are ``[cx, cy, w, h, obj, cls...]`` (score = obj * max cls) instead
    of ``[cx, cy, w, h, cls...]``. ``transposed``: the prediction is ``[4(+1)+C, N]``.
    A row is a candidate when its score > ``score_threshold``; at most ``max_candidates`` of the
    best-scoring candidates enter NMS; a box is removed when its IoU with a kept box of the same
    class is > ``iou_threshold``; at most ``max_detections`` boxes are returned.
    """

    score_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 300
    max_candidates: int = 4096
    has_objectness: bool = True
    transposed: bool = False

    def __post_init__(self):
        if not 0.0 <= self.iou_threshold <= 1.0:
            raise InputError(f"iou_threshold {self.iou_threshold} must be in [0, 1]")
        if self.max_detections < 1 or self.max_candidates < 1:
            raise InputError("max_detections and max_candidates must be >= 1")

    def rows(self, pred: np.ndarray) -> Tuple[np.ndarray, int]:
        """``pred`` as a float32 ``[N, fields]`` view and its class count. Accepts a leading
        batch dim of 1."""
        pred = np.asarray(pred)
        if pred.ndim == 3 and pred.shape[0] == 1:
            pred = pred[0]
        if pred.ndim != 2:
            raise InputError(f"expected a prediction [N, fields] (or [1, N, fields]), got shape {pred.shape}")
        rows = pred.T if self.transposed else pred
        first = 5 if self.has_objectness else 4
        num_classes = rows.shape[1] - first
        if num_classes < 1:
            raise InputError(
                f"a prediction row has {rows.shape[1]} fields: too few for "
                f"{'cx,cy,w,h,obj' if self.has_objectness else 'cx,cy,w,h'} plus classes",
                "set has_objectness / transposed to match the model's output layout")
        return rows.astype(np.float32, copy=False), num_classes


@dataclass
class Detections:
    """Kept boxes in score order: ``boxes`` [K,4] float32 (x1, y1, x2, y2, in the model input's
    pixels), ``scores`` [K] float32, ``classes`` [K] int32, ``rows`` [K] int32 (source row)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def decode_candidates(pred: np.ndarray, spec: PostprocessSpec):
    """Threshold and decode: (rows, scores, classes, boxes) of the candidates in ranked order
    (score descending, row ascending), capped at ``spec.max_candidates``."""
    rows, num_classes = spec.rows(pred)
    first = 5 if spec.has_objectness else 4
    cls = rows[:, first:first + num_classes]
    best_c = np.argmax(cls, axis=1).astype(np.int32)
    best = cls[np.arange(rows.shape[0]), best_c]
    if spec.has_objectness:
        best = (rows[:, 4] * best).astype(np.float32)
    keep = np.nonzero(best > np.float32(spec.score_threshold))[0]
    scores = best[keep]
    order = np.lexsort((keep, -scores))[: spec.max_candidates]
    idx = keep[order].astype(np.int32)
    r = rows[idx]
    half = np.float32(0.5)
    hw, hh = r[:, 2] * half, r[:, 3] * half
    boxes = np.stack([r[:, 0] - hw, r[:, 1] - hh, r[:, 0] + hw, r[:, 1] + hh], axis=1).astype(np.float32)
    return idx, scores[order].astype(np.float32), best_c[idx], boxes


def dfl_decode(score_heads: Sequence[np.ndarray], distance_heads: Sequence[np.ndarray],
               levels: Sequence[Sequence[int]]) -> Tuple[np.ndarray, np.ndarray]:
    """Boxes ``[A, 4]`` (x1, y1, x2, y2 in input pixels) and class scores ``[A, C]`` of an anchor-free
    detector's raw heads (GFL, PicoDet), first image of the batch: per level a score head ``[N, A, C]``
    and a DFL distance head ``[N, A, 4R]`` (R bins per side); ``levels`` per level ``(grid height,
    grid width, stride px)``, anchor centres at ``(i + 0.5) * stride``, each side the bins' softmax
    expectation x stride. Scores and expectations in float32, as the model computes them."""
    all_boxes, all_scores = [], []
    for (fh, fw, stride), score, dist in zip(levels, score_heads, distance_heads):
        score, dist = np.asarray(score, np.float32)[0], np.asarray(dist, np.float32)[0]
        ww, hh = np.meshgrid(np.arange(fw), np.arange(fh))
        cy, cx = (hh.ravel() + 0.5) * stride, (ww.ravel() + 0.5) * stride
        reg = dist.shape[-1] // 4
        d = dist.reshape(-1, reg)
        d = np.exp(d - d.max(1, keepdims=True))
        d = ((d / d.sum(1, keepdims=True)) @ np.arange(reg, dtype=np.float32)).reshape(-1, 4) * stride
        all_boxes.append(np.stack([cx - d[:, 0], cy - d[:, 1], cx + d[:, 2], cy + d[:, 3]], 1))
        all_scores.append(score)
    return np.concatenate(all_boxes), np.concatenate(all_scores)


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box [4] with boxes [M,4], float32, in the kernel's operation order (0 when the
    union is empty)."""
    zero = np.float32(0)
    iw = np.maximum(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), zero)
    ih = np.maximum(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), zero)
    inter = iw * ih
    area_a = np.maximum(box[2] - box[0], zero) * np.maximum(box[3] - box[1], zero)
    area_b = np.maximum(boxes[:, 2] - boxes[:, 0], zero) * np.maximum(boxes[:, 3] - boxes[:, 1], zero)
    union = (area_a + area_b) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where(union > zero, inter / np.where(union > zero, union, np.float32(1)), zero)
    return iou.astype(np.float32)


def yolo_postprocess(pred: np.ndarray, spec: Optional[PostprocessSpec] = None) -> Detections:
    """CPU reference of the post-processing kernels: threshold, decode, class-aware greedy NMS,
    top-k. ``pred``: ``[N, fields]`` (or ``[1, N, fields]``; ``[fields, N]`` with
    ``spec.transposed``)."""
    spec = spec or PostprocessSpec()
    idx, scores, classes, boxes = decode_candidates(pred, spec)
    k = idx.shape[0]
    removed = np.zeros(k, dtype=bool)
    kept = []
    thr = np.float32(spec.iou_threshold)
    for i in range(k):
        if removed[i]:
            continue
        kept.append(i)
        if len(kept) >= spec.max_detections:
            break
        rest = np.arange(i + 1, k)
        rest = rest[(~removed[rest]) & (classes[rest] == classes[i])]
        if rest.size:
            removed[rest[box_iou(boxes[i], boxes[rest]) > thr]] = True
    sel = np.asarray(kept, dtype=np.int64)
    return Detections(boxes[sel].reshape(-1, 4), scores[sel], classes[sel].astype(np.int32), idx[sel].astype(np.int32))


def scale_boxes(boxes: np.ndarray, spec: PreprocessSpec, src_hw: Tuple[int, int]) -> np.ndarray:
    """Map boxes from model-input pixels back to the source image (undo resize or letterbox),
    clipped to the image. ``src_hw``: the source image's (height, width)."""
    src_h, src_w = int(src_hw[0]), int(src_hw[1])
    out = np.asarray(boxes, dtype=np.float32).copy()
    if spec.resize == "letterbox":
        _, nh, nw, top, left = spec.letterbox_geometry(src_h, src_w)
        out[:, [0, 2]] = (out[:, [0, 2]] - left) * (src_w / nw)
        out[:, [1, 3]] = (out[:, [1, 3]] - top) * (src_h / nh)
    else:
        h, w = spec.size
        out[:, [0, 2]] *= src_w / w
        out[:, [1, 3]] *= src_h / h
    out[:, [0, 2]] = np.clip(out[:, [0, 2]], 0, src_w)
    out[:, [1, 3]] = np.clip(out[:, [1, 3]], 0, src_h)
    return out


def synthetic_yolo_output(n: int, classes: int, objectness: bool, seed: int) -> np.ndarray:
    """A seeded YOLO-style output ``[n, 4 + objectness + classes]`` float32 for checking the
    post-processing kernel: boxes clustered around n/10 centres (so NMS has work), skewed low
    scores, and four rows with exactly equal scores (ties pin down the sort order)."""
    rng = np.random.default_rng(seed)
    fields = 4 + int(objectness) + classes
    pred = np.empty((n, fields), np.float32)
    centres = rng.uniform(0, 640, size=(max(1, n // 10), 2))
    pred[:, :2] = centres[rng.integers(0, len(centres), n)] + rng.normal(0, 8, size=(n, 2))
    pred[:, 2:4] = rng.uniform(8, 160, size=(n, 2))
    pred[:, 4:] = rng.uniform(0, 1, size=(n, fields - 4)) ** 3
    pred[n // 2: n // 2 + 4, 4:] = 0.95
    return pred
