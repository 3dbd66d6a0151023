"""Glue steps between a pipeline's stages: a registry family (:data:`GLUE`), like targets.

A step is built once per stage from its options (``GLUE.load(name)(**options)``), then called
once per frame with the frame's :class:`Frame`; it reads and writes the frame's fields:

=================  ===================================================================================
``preprocess``     ``image`` -> ``feed`` (one ``[1, ...]`` array) through a :class:`~sdk.preprocess.PreprocessSpec`
                   (the CUDA kernel :class:`sdk.kernels.GpuPreprocessor` where a GPU is, else
                   :func:`sdk.preprocess.preprocess`); records the geometry that maps boxes back
``db_boxes``       DB-style text boxes from a probability map (``outputs[0]`` ``[1, 1, H, W]``): threshold,
                   minimum-area rectangles, box score, unclip by ``area * ratio / perimeter`` -> ``quads``
``yolo_boxes``     YOLO-style rows after score threshold and class-aware NMS (:func:`reference.yolo_postprocess`,
                   or the CUDA kernel) -> ``boxes``, ``scores``, ``classes``
``picodet_boxes``  PicoDet's per-stride score and DFL heads, decoded, then the same NMS -> ``boxes``, ...
``crop_boxes``     axis-aligned crops of ``boxes`` (optionally expanded) -> ``crops``
``crop_quads``     perspective (rotated) crops of ``quads`` -> ``crops`` (tall crops turned 90 degrees)
``resize_pad``     each crop resized to the next stage's input (keep aspect, pad) and normalised -> ``crops``
``crop_resize``    ``crop_quads`` + ``resize_pad`` in one step: one CUDA launch for every crop of the frame
                   where a GPU is (``sdk.kernels`` ``crops.cu``), else the two CPU steps
``batch``          the crops stacked into batches of at most ``max_batch`` -> ``feed`` (a list of arrays)
``ctc_greedy``     CTC greedy decoding of ``outputs[0]`` ``[N, T, classes]`` with a character list -> texts
``topk``           the top-k classes of ``outputs[0]`` ``[N, classes]`` with their labels -> labels
=================  ===================================================================================

A user step is ``FILE.py:FUNCTION``: ``function(frame, **options)`` that updates the frame (or
returns a new one). Steps are NumPy code that also runs on the board (Python 3.8 + NumPy);
OpenCV is used when present (``db_boxes``' contours and minimum-area rectangles have a NumPy
twin in :mod:`.contours`, used without it).
Each built-in step is tested against a reference (tests/kernels/test_glue.py).
"""
from __future__ import annotations

import importlib.util
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...errors import ConfigError, InputError, UnknownNameError
from ...preprocess import PreprocessSpec
from ...registry import Registry

__all__ = ["Frame", "GlueStep", "GLUE", "register_glue", "build_step", "order_quad", "quad_to_source",
           "unclip_rect", "perspective_crop_reference", "resize_bilinear"]


class UnknownGlueError(UnknownNameError):
    """A glue step name that is not registered."""


class Frame:
    """One input's state while it flows through the pipeline (all coordinates in source pixels).

    ``name``: the input's file name; ``image``: HxWx3 uint8 BGR; ``feed``: the next stage's input
    (one array, or a list of batches); ``outputs``: the last stage's outputs in the model's order
    (batches concatenated on axis 0); ``boxes`` [K,4] x1,y1,x2,y2, ``quads`` [K,4,2] (or None),
    ``scores`` [K], ``classes`` [K]; ``crops``: per item, an image or a ``[1, ...]`` array;
    ``items``: one dict per item, the pipeline's answer (box, quad, score, class, label, text);
    ``geometry``: how the first stage's input maps to the source (``spec``, ``src_hw``);
    ``counts``: items that entered each stage."""

    __slots__ = ("name", "image", "feed", "outputs", "boxes", "quads", "scores", "classes", "crops", "items",
                 "geometry", "counts")

    def __init__(self, name: str, image: np.ndarray) -> None:
        self.name = name
        self.image = image
        self.feed: Any = None
        self.outputs: List[np.ndarray] = []
        self.boxes = np.zeros((0, 4), np.float32)
        self.quads: Optional[np.ndarray] = None
        self.scores = np.zeros((0,), np.float32)
        self.classes = np.zeros((0,), np.int32)
        self.crops: List[np.ndarray] = []
        self.items: List[Dict[str, Any]] = []
        self.geometry: Dict[str, Any] = {}
        self.counts: Dict[str, int] = {}

    def set_items_from_boxes(self, labels: Optional[Sequence[str]] = None) -> None:
        """One item per box (box, quad, score, class, class label)."""
        self.items = []
        for i in range(len(self.boxes)):
            item: Dict[str, Any] = {"box": [round(float(v), 2) for v in self.boxes[i]],
                                    "score": round(float(self.scores[i]), 4) if len(self.scores) > i else None}
            if self.quads is not None:
                item["quad"] = [[round(float(x), 2), round(float(y), 2)] for x, y in self.quads[i]]
            if len(self.classes) > i:
                c = int(self.classes[i])
                item["class"] = c
                if labels:
                    item["class_label"] = labels[c] if 0 <= c < len(labels) else str(c)
            self.items.append(item)


class GlueStep:
    """Base class of a built-in step: options are checked in ``__init__``; ``__call__(frame)``
    updates the frame. ``device`` says where it runs (``cpu (...)`` or ``cuda (...)``)."""

    name = "glue"
    device = "cpu (NumPy)"

    def __call__(self, frame: Frame) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the step holds (a CUDA context); a no-op on the CPU."""


GLUE: Registry[Callable[..., Any]] = Registry("glue step", entry_points="edgesdk.glue", error=UnknownGlueError,
                                              load_error=ConfigError)


def register_glue(name: str) -> Callable[[Any], Any]:
    """``@register_glue("name")`` on a :class:`GlueStep` subclass."""
    def deco(cls: Any) -> Any:
        cls.name = name
        GLUE.register(name, cls)
        return cls
    return deco


def _cv2() -> Any:
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def _floats(value: Any, n: int, what: str) -> Tuple[float, ...]:
    v = tuple(float(x) for x in (value if isinstance(value, (list, tuple)) else [value]))
    if len(v) == 1:
        v = v * n
    if len(v) != n:
        raise ConfigError("%s needs %d values, got %d" % (what, n, len(v)))
    return v


def _options(step: str, given: Mapping[str, Any], allowed: Mapping[str, Any]) -> Dict[str, Any]:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ConfigError("unknown option(s) of the %s glue step: %s" % (step, ", ".join(unknown)),
                          "its options: %s" % ", ".join(sorted(allowed)))
    out = dict(allowed)
    out.update(given)
    return out


# -- geometry helpers (public: the tests' references use them) ----------------------------------------
def quad_to_source(points: np.ndarray, geometry: Mapping[str, Any]) -> np.ndarray:
    """Map points ``[..., 2]`` (x, y) from the first stage's input pixels to the source image,
    undoing its resize or letterbox, clipped to the image."""
    spec: PreprocessSpec = geometry["spec"]
    src_h, src_w = geometry["src_hw"]
    out = np.asarray(points, np.float32).copy()
    if spec.resize == "letterbox":
        _, nh, nw, top, left = spec.letterbox_geometry(src_h, src_w)
        out[..., 0] = (out[..., 0] - left) * (src_w / nw)
        out[..., 1] = (out[..., 1] - top) * (src_h / nh)
    else:
        h, w = spec.size
        out[..., 0] *= src_w / w
        out[..., 1] *= src_h / h
    out[..., 0] = np.clip(out[..., 0], 0, src_w)
    out[..., 1] = np.clip(out[..., 1], 0, src_h)
    return out


def order_quad(pts: np.ndarray) -> np.ndarray:
    """Four points ordered top-left, top-right, bottom-right, bottom-left (PaddleOCR's
    ``get_mini_boxes`` order: by x, then by y within each side)."""
    p = np.asarray(pts, np.float32).reshape(4, 2)
    p = p[np.argsort(p[:, 0], kind="stable")]
    left, right = p[:2], p[2:]
    tl, bl = (left[0], left[1]) if left[0, 1] <= left[1, 1] else (left[1], left[0])
    tr, br = (right[0], right[1]) if right[0, 1] <= right[1, 1] else (right[1], right[0])
    return np.stack([tl, tr, br, bl]).astype(np.float32)


def unclip_rect(rect: Tuple[Tuple[float, float], Tuple[float, float], float], ratio: float
                ) -> Tuple[Tuple[float, float], Tuple[float, float], float]:
    """DB's unclip of a rotated rectangle ``((cx, cy), (w, h), angle)``: offset outward by
    ``d = area * ratio / perimeter``. For a rectangle the offset polygon's minimum-area rectangle
    is the rectangle grown by ``d`` on each side (what pyclipper's offset + ``minAreaRect`` give)."""
    (cx, cy), (w, h), angle = rect
    perimeter = 2.0 * (w + h)
    d = (w * h * ratio / perimeter) if perimeter > 0 else 0.0
    return (cx, cy), (w + 2 * d, h + 2 * d), angle


def resize_bilinear(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Bilinear resize with half-pixel centres (OpenCV's INTER_LINEAR convention), HxWxC float32."""
    in_h, in_w = img.shape[:2]
    ys = np.clip((np.arange(out_h, dtype=np.float32) + 0.5) * (in_h / out_h) - 0.5, 0, in_h - 1)
    xs = np.clip((np.arange(out_w, dtype=np.float32) + 0.5) * (in_w / out_w) - 0.5, 0, in_w - 1)
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, in_h - 1), np.minimum(x0 + 1, in_w - 1)
    wy, wx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    f = img.astype(np.float32).reshape(in_h, in_w, -1)
    top = f[y0][:, x0] * (1 - wx) + f[y0][:, x1] * wx
    bot = f[y1][:, x0] * (1 - wx) + f[y1][:, x1] * wx
    return top * (1 - wy) + bot * wy


def _homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 3x3 homography taking 4 ``src`` points to 4 ``dst`` points."""
    a, b = [], []
    for (x, y), (u, v) in zip(src.astype(np.float64), dst.astype(np.float64)):
        a.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        b.append(u)
        a.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        b.append(v)
    h = np.linalg.solve(np.asarray(a), np.asarray(b))
    return np.append(h, 1.0).reshape(3, 3)


def _crop_size(quad: np.ndarray) -> Tuple[int, int]:
    w = int(max(np.linalg.norm(quad[0] - quad[1]), np.linalg.norm(quad[2] - quad[3])))
    h = int(max(np.linalg.norm(quad[0] - quad[3]), np.linalg.norm(quad[1] - quad[2])))
    return max(1, h), max(1, w)


def _upright(quad: np.ndarray) -> Tuple[int, int, np.ndarray]:
    """The crop of ``quad``: its size ``h, w`` and the upright rectangle's corners (tl, tr, br, bl)."""
    h, w = _crop_size(quad)
    return h, w, np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32)


def crop_homography(quad: np.ndarray) -> Tuple[int, int, np.ndarray]:
    """``h, w`` of the crop of ``quad`` and the 3x3 homography from a crop pixel to its source point."""
    h, w, dst = _upright(quad)
    return h, w, _homography(dst, np.asarray(quad, np.float32))


def perspective_crop_reference(image: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """NumPy reference of the perspective crop: the quad (tl, tr, br, bl) warped to an upright
    ``h x w`` rectangle (bilinear, edge pixels replicated); the OpenCV path must agree with it."""
    h, w, inv = crop_homography(quad)    # output pixel -> source point
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    pts = np.stack([xs.ravel(), ys.ravel(), np.ones(h * w)])
    sx, sy, sz = inv @ pts
    sx, sy = sx / sz, sy / sz
    ih, iw = image.shape[:2]
    sx, sy = np.clip(sx, 0, iw - 1), np.clip(sy, 0, ih - 1)
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    x1, y1 = np.minimum(x0 + 1, iw - 1), np.minimum(y0 + 1, ih - 1)
    fx, fy = (sx - x0)[:, None], (sy - y0)[:, None]
    f = image.reshape(ih, iw, -1).astype(np.float64)
    out = (f[y0, x0] * (1 - fx) * (1 - fy) + f[y0, x1] * fx * (1 - fy) + f[y1, x0] * (1 - fx) * fy
           + f[y1, x1] * fx * fy)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(h, w, -1)


# -- device choice for the steps with CUDA kernels ----------------------------------------------------------
def _cuda_wanted(device: str, step: str) -> Optional[str]:
    """None to run on the CPU, else the reason the CUDA kernel runs ("cuda")."""
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError("%s: device '%s' is not valid" % (step, device), "use auto, cpu or cuda")
    if device == "cpu":
        return None
    from ..pipeline import cuda_reason

    why = cuda_reason()
    if why is None:
        return "cuda"
    if device == "cuda":
        raise InputError("the %s glue step cannot run on CUDA here: %s" % (step, why), "set device = \"cpu\"")
    return None


# -- the built-in steps -----------------------------------------------------------------------------------
@register_glue("preprocess")
class Preprocess(GlueStep):
    """The image -> the stage's input through a :class:`~sdk.preprocess.PreprocessSpec` (options:
    its fields, plus ``device`` = auto | cpu | cuda)."""

    def __init__(self, device: str = "auto", **spec: Any) -> None:
        self.spec = PreprocessSpec.from_dict(dict(spec))
        self._gpu: Any = None
        self.device = "cpu (sdk.preprocess.preprocess)"
        if _cuda_wanted(device, "preprocess"):
            from ..preprocess import GpuPreprocessor

            self._gpu = GpuPreprocessor(self.spec)
            self.device = "cuda (sdk.kernels preprocess.cu)"
        from ...preprocess import preprocess

        self._cpu = preprocess

    def __call__(self, frame: Frame) -> None:
        frame.geometry = {"spec": self.spec, "src_hw": tuple(frame.image.shape[:2])}
        frame.feed = self._gpu(frame.image) if self._gpu is not None else self._cpu(frame.image, self.spec)

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None


class _ContourOps:
    """The primitives of :class:`DbBoxes` (dilation, contours, minimum-area rectangle, its corners,
    the box's pixels) in NumPy (:mod:`.contours`), what a board without OpenCV runs;
    :class:`_OpenCvContourOps` is the same through OpenCV."""

    device = "cpu (NumPy)"

    def __init__(self) -> None:
        from . import contours

        self._c = contours

    def dilate(self, bitmap: np.ndarray) -> np.ndarray:
        return self._c.dilate2x2(bitmap)

    def contours(self, bitmap: np.ndarray) -> Sequence[np.ndarray]:
        return self._c.region_points(bitmap)

    def min_area_rect(self, points: np.ndarray) -> Tuple[Tuple[float, float], Tuple[float, float], float]:
        return self._c.min_area_rect(points)

    def box_points(self, rect: Tuple[Tuple[float, float], Tuple[float, float], float]) -> np.ndarray:
        return self._c.box_points(rect)

    def fill_mask(self, shape: Tuple[int, int], points: np.ndarray) -> np.ndarray:
        return self._c.fill_quad_mask(shape, points)


class _OpenCvContourOps(_ContourOps):
    """:class:`_ContourOps` through OpenCV (where it is installed)."""

    device = "cpu (OpenCV contours + NumPy)"

    def __init__(self, cv2: Any) -> None:
        self.cv2 = cv2

    def dilate(self, bitmap: np.ndarray) -> np.ndarray:
        return self.cv2.dilate(bitmap, np.ones((2, 2), np.uint8))

    def contours(self, bitmap: np.ndarray) -> Sequence[np.ndarray]:
        cv2 = self.cv2
        found = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        return found[0] if len(found) == 2 else found[1]

    def min_area_rect(self, points: np.ndarray) -> Tuple[Tuple[float, float], Tuple[float, float], float]:
        return self.cv2.minAreaRect(points)

    def box_points(self, rect: Tuple[Tuple[float, float], Tuple[float, float], float]) -> np.ndarray:
        return self.cv2.boxPoints(rect)

    def fill_mask(self, shape: Tuple[int, int], points: np.ndarray) -> np.ndarray:
        mask = np.zeros(shape, np.uint8)
        self.cv2.fillPoly(mask, [points], 1)
        return mask


def _contour_ops() -> _ContourOps:
    """OpenCV's primitives where ``import cv2`` works (the module's ``_cv2`` hook), else NumPy's."""
    cv2 = _cv2()
    return _OpenCvContourOps(cv2) if cv2 is not None else _ContourOps()


@register_glue("db_boxes")
class DbBoxes(GlueStep):
    """DB post-processing (PaddleOCR's ``DBPostProcess``, ``score_mode="fast"``): ``thresh`` on the
    probability map, optional 2x2 dilation, each contour's minimum-area rectangle (shorter
    side >= ``min_size``), its mean probability inside the rectangle >= ``box_thresh``, unclipped
    by ``unclip_ratio`` (:func:`unclip_rect`), shorter side >= ``min_size + 2``; at most
    ``max_candidates`` contours. Quads in source pixels, sorted top to bottom, then left to right.
    OpenCV's contours where it is installed, else the same steps in NumPy (:mod:`.contours`;
    ``device`` says which)."""

    device = _OpenCvContourOps.device

    def __init__(self, **options: Any) -> None:
        o = _options("db_boxes", options, {"thresh": 0.3, "box_thresh": 0.5, "unclip_ratio": 1.6,
                                            "max_candidates": 1000, "min_size": 3, "use_dilation": True})
        self.thresh, self.box_thresh = float(o["thresh"]), float(o["box_thresh"])
        self.unclip_ratio, self.max_candidates = float(o["unclip_ratio"]), int(o["max_candidates"])
        self.min_size, self.use_dilation = float(o["min_size"]), bool(o["use_dilation"])
        self._ops = _contour_ops()
        self.device = self._ops.device

    def boxes_in_input(self, prob: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """``(quads [K,4,2], scores [K])`` in the probability map's pixels."""
        ops = self._ops
        arr = np.asarray(prob, np.float32)
        h, w = int(arr.shape[-2]), int(arr.shape[-1])
        prob = arr.reshape(h, w)
        bitmap = (prob > self.thresh).astype(np.uint8)
        if self.use_dilation:
            bitmap = ops.dilate(bitmap)
        quads, scores = [], []
        for contour in ops.contours(bitmap)[: self.max_candidates]:
            rect = ops.min_area_rect(contour)
            if min(rect[1]) < self.min_size:
                continue
            # the corners to 1/1000 px first: which pixels the box holds must not hinge on float32
            # noise (136.99998 vs 137.00002), which differs between OpenCV and NumPy
            quad = np.round(order_quad(ops.box_points(rect)).astype(np.float64), 3)
            x0 = int(np.clip(np.floor(quad[:, 0].min()), 0, w - 1))
            x1 = int(np.clip(np.ceil(quad[:, 0].max()), 0, w - 1))
            y0 = int(np.clip(np.floor(quad[:, 1].min()), 0, h - 1))
            y1 = int(np.clip(np.ceil(quad[:, 1].max()), 0, h - 1))
            mask = ops.fill_mask((y1 - y0 + 1, x1 - x0 + 1), np.trunc(quad - [x0, y0]).astype(np.int32))
            inside = prob[y0:y1 + 1, x0:x1 + 1][mask != 0]
            score = float(inside.mean(dtype=np.float64)) if inside.size else 0.0   # cv2.mean's answer
            if score < self.box_thresh:
                continue
            grown = unclip_rect(rect, self.unclip_ratio)
            if min(grown[1]) < self.min_size + 2:
                continue
            quads.append(order_quad(ops.box_points(grown)))
            scores.append(score)
        if not quads:
            return np.zeros((0, 4, 2), np.float32), np.zeros((0,), np.float32)
        return np.stack(quads).astype(np.float32), np.asarray(scores, np.float32)

    def __call__(self, frame: Frame) -> None:
        quads, scores = self.boxes_in_input(frame.outputs[0])
        if frame.geometry:
            quads = quad_to_source(quads, frame.geometry)
        order = sorted(range(len(quads)), key=lambda i: (round(float(quads[i][0][1]) / 10), float(quads[i][0][0])))
        frame.quads = quads[order].reshape(-1, 4, 2)
        frame.scores = scores[order]
        frame.boxes = (np.concatenate([frame.quads.min(1), frame.quads.max(1)], 1) if len(order)
                       else np.zeros((0, 4), np.float32)).astype(np.float32)
        frame.classes = np.zeros((len(order),), np.int32)
        frame.set_items_from_boxes()


class _BoxesStep(GlueStep):
    """Shared by the detectors' steps: NMS on the CPU reference or the CUDA kernel, boxes mapped
    back to the source, one item per box."""

    _post: Any = None

    def _init_nms(self, o: Mapping[str, Any], has_objectness: bool, transposed: bool, rows_fields: Optional[Tuple[int, int]]) -> None:
        from ..reference import PostprocessSpec

        self.labels = list(o.get("labels") or [])
        self.post_spec = PostprocessSpec(score_threshold=float(o["score_threshold"]),
                                         iou_threshold=float(o["iou_threshold"]),
                                         max_detections=int(o["max_detections"]), has_objectness=has_objectness,
                                         transposed=transposed)
        self._device_opt = str(o.get("device", "auto"))

    def _nms(self, pred: np.ndarray) -> Any:
        from ..reference import yolo_postprocess

        if self._post is None and _cuda_wanted(self._device_opt, self.name):
            from ..postprocess import GpuYoloPostprocessor

            rows, fields = (pred.shape[-1], pred.shape[-2]) if self.post_spec.transposed else pred.shape[-2:]
            self._post = GpuYoloPostprocessor(self.post_spec, int(rows), int(fields))
            self.device = "cuda (sdk.kernels postprocess.cu)"
        if self._post is not None:
            return self._post(pred)
        return yolo_postprocess(pred, self.post_spec)

    def _finish(self, frame: Frame, det: Any) -> None:
        boxes = det.boxes
        if frame.geometry:
            from ..reference import scale_boxes

            boxes = scale_boxes(boxes, frame.geometry["spec"], frame.geometry["src_hw"])
        frame.boxes, frame.scores, frame.classes = boxes.astype(np.float32), det.scores, det.classes
        frame.quads = None
        frame.set_items_from_boxes(self.labels)

    def close(self) -> None:
        if self._post is not None:
            self._post.close()
            self._post = None


_NMS_OPTIONS = {"score_threshold": 0.25, "iou_threshold": 0.45, "max_detections": 300, "labels": None,
                "device": "auto"}


@register_glue("yolo_boxes")
class YoloBoxes(_BoxesStep):
    """YOLO-style output rows (``outputs[0]``): ``[N, 4+1+C]`` with objectness or ``[4+C, N]``
    (YOLOv8, ``transposed``; None: guessed from the shape, as ``sdk bench --pipeline detect``)."""

    device = "cpu (sdk.kernels.reference.yolo_postprocess)"

    def __init__(self, **options: Any) -> None:
        o = _options("yolo_boxes", options, dict(_NMS_OPTIONS, objectness=None, transposed=None))
        self._o = o
        self._ready = False

    def __call__(self, frame: Frame) -> None:
        pred = np.asarray(frame.outputs[0])
        if not self._ready:
            rows3 = pred.shape[1:] if pred.ndim == 3 else pred.shape
            transposed = bool(rows3[0] < rows3[1]) if self._o["transposed"] is None else bool(self._o["transposed"])
            obj = (not transposed) if self._o["objectness"] is None else bool(self._o["objectness"])
            self._init_nms(self._o, obj, transposed, None)
            self._ready = True
        self._finish(frame, self._nms(pred))


@register_glue("picodet_boxes")
class PicoDetBoxes(_BoxesStep):
    """PaddleDetection PicoDet heads: ``outputs`` = per stride a score head ``[1, N, C]``, then per
    stride a DFL distance head ``[1, N, 4*(R+1)]``; decoded (softmax-expectation over the bins,
    anchor centres at ``(i + 0.5) * stride``) into ``cx, cy, w, h, scores`` rows, then class-aware NMS."""

    device = "cpu (NumPy decode + sdk.kernels.reference.yolo_postprocess)"

    def __init__(self, **options: Any) -> None:
        o = _options("picodet_boxes", options, dict(_NMS_OPTIONS, strides=[8, 16, 32, 64], score_threshold=0.4,
                                                     iou_threshold=0.5))
        self.strides = [int(s) for s in o["strides"]]
        self._init_nms(o, False, False, None)

    def rows(self, outputs: Sequence[np.ndarray], input_hw: Tuple[int, int]) -> np.ndarray:
        """The decoded ``[N, 4 + C]`` rows (cx, cy, w, h, class scores) in input pixels."""
        k = len(outputs) // 2
        if k != len(self.strides):
            raise InputError("picodet_boxes: %d outputs for %d strides" % (len(outputs), len(self.strides)),
                             "set strides to the model's heads")
        from ..reference import dfl_decode

        height, width = input_hw
        levels = [(int(math.ceil(height / s)), int(math.ceil(width / s)), s) for s in self.strides]
        boxes, scores = dfl_decode(outputs[:k], outputs[k:], levels)
        x1, y1, x2, y2 = boxes.T
        return np.concatenate([np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], 1), scores], 1) \
            .astype(np.float32)

    def __call__(self, frame: Frame) -> None:
        spec = frame.geometry.get("spec") if frame.geometry else None
        if spec is None:
            raise InputError("picodet_boxes needs the stage's input size: give the stage a preprocess spec")
        self._finish(frame, self._nms(self.rows(frame.outputs, spec.size)))


@register_glue("crop_boxes")
class CropBoxes(GlueStep):
    """Axis-aligned crops of ``boxes`` from the source image, each side grown by ``expand`` (a
    fraction of the box's size); boxes smaller than ``min_size`` pixels are dropped (with their items)."""

    def __init__(self, **options: Any) -> None:
        o = _options("crop_boxes", options, {"expand": 0.0, "min_size": 2})
        self.expand, self.min_size = float(o["expand"]), int(o["min_size"])

    def __call__(self, frame: Frame) -> None:
        ih, iw = frame.image.shape[:2]
        crops, keep = [], []
        for i, (x1, y1, x2, y2) in enumerate(np.asarray(frame.boxes, np.float32)):
            ex, ey = (x2 - x1) * self.expand, (y2 - y1) * self.expand
            a, b = int(max(0, math.floor(x1 - ex))), int(max(0, math.floor(y1 - ey)))
            c, d = int(min(iw, math.ceil(x2 + ex))), int(min(ih, math.ceil(y2 + ey)))
            if c - a >= self.min_size and d - b >= self.min_size:
                crops.append(np.ascontiguousarray(frame.image[b:d, a:c]))
                keep.append(i)
        _keep_items(frame, keep)
        frame.crops = crops


def _keep_items(frame: Frame, keep: List[int]) -> None:
    if len(keep) != len(frame.items):
        frame.items = [frame.items[i] for i in keep]
        frame.boxes, frame.scores = frame.boxes[keep], frame.scores[keep]
        frame.classes = frame.classes[keep] if len(frame.classes) else frame.classes
        if frame.quads is not None:
            frame.quads = frame.quads[keep]


@register_glue("crop_quads")
class CropQuads(GlueStep):
    """Perspective crops of ``quads`` (PaddleOCR's ``get_rotate_crop_image``): each quad warped to
    an upright rectangle of its own size (bilinear, edges replicated); a crop at least
    ``rotate_ratio`` times taller than wide is turned 90 degrees (vertical text). OpenCV's
    ``warpPerspective`` when present, else :func:`perspective_crop_reference`."""

    def __init__(self, **options: Any) -> None:
        o = _options("crop_quads", options, {"rotate_ratio": 1.5})
        self.rotate_ratio = float(o["rotate_ratio"])
        self._cv2 = _cv2()
        self.device = "cpu (OpenCV warpPerspective)" if self._cv2 is not None else "cpu (NumPy)"

    def crop(self, image: np.ndarray, quad: np.ndarray) -> np.ndarray:
        cv2 = self._cv2
        if cv2 is None:
            out = perspective_crop_reference(image, quad)
        else:
            h, w, dst = _upright(quad)
            m = cv2.getPerspectiveTransform(np.asarray(quad, np.float32), dst)
            out = cv2.warpPerspective(image, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        if self.turns(out.shape[0], out.shape[1]):
            out = np.ascontiguousarray(np.rot90(out))
        return out

    def turns(self, h: int, w: int) -> bool:
        """A crop ``h`` x ``w`` is turned 90 degrees (vertical text)."""
        return h >= w * self.rotate_ratio

    def __call__(self, frame: Frame) -> None:
        if frame.quads is None:
            raise InputError("crop_quads needs quads: put it after db_boxes (or use crop_boxes)")
        frame.crops = [self.crop(frame.image, q) for q in frame.quads]


@register_glue("resize_pad")
class ResizePad(GlueStep):
    """Each crop (HxWx3 uint8 BGR) -> a ``[1, 3, height, width]`` (NCHW) or ``[1, height, width, 3]``
    array: resized to ``height`` keeping its aspect (width at most ``width``; ``keep_aspect=false``
    stretches), colour order ``color``, ``(x - mean) / std`` (0-255 units), the rest filled with
    ``pad_value`` (in output units) on the right (``align = "left"``) or both sides (``"center"``).
    ``grow = true``: a crop wider than ``width`` at that height keeps its aspect and makes its
    array wider (PaddleOCR's batch width, ``height * max aspect``); ``batch`` pads the batch to its widest."""

    DEFAULTS: Dict[str, Any] = {"height": None, "width": None, "keep_aspect": True, "color": "RGB",
                                "input_order": "BGR", "mean": 0.0, "std": 255.0, "pad_value": 0.0,
                                "align": "left", "layout": "NCHW", "dtype": "float32",
                                "grow": False, "max_width": 4096}

    def __init__(self, **options: Any) -> None:
        o = _options("resize_pad", options, self.DEFAULTS)
        if not o["height"] or not o["width"]:
            raise ConfigError("resize_pad needs height and width (the next stage's input size)")
        self.height, self.width = int(o["height"]), int(o["width"])
        self.keep_aspect, self.align = bool(o["keep_aspect"]), str(o["align"])
        if self.align not in ("left", "center"):
            raise ConfigError("resize_pad align '%s' is not valid" % self.align, "use left or center")
        self.swap = str(o["color"]).upper() != str(o["input_order"]).upper()
        self.mean = np.asarray(_floats(o["mean"], 3, "resize_pad mean"), np.float32)
        self.std = np.asarray(_floats(o["std"], 3, "resize_pad std"), np.float32)
        self.pad_value, self.layout, self.dtype = float(o["pad_value"]), str(o["layout"]).upper(), str(o["dtype"])
        self.grow, self.max_width = bool(o["grow"]), int(o["max_width"])
        self._cv2 = _cv2()
        self.device = "cpu (OpenCV resize)" if self._cv2 is not None else "cpu (NumPy)"

    def target_width(self, h: int, w: int) -> int:
        if not self.keep_aspect:
            return self.width
        cap = self.max_width if self.grow else self.width
        return max(1, min(cap, int(math.ceil(self.height * w / max(1, h)))))

    def one(self, crop: np.ndarray) -> np.ndarray:
        crop = crop if crop.ndim == 3 else np.repeat(crop[:, :, None], 3, axis=2)
        tw = self.target_width(*crop.shape[:2])
        if self._cv2 is not None:
            resized = self._cv2.resize(crop, (tw, self.height), interpolation=self._cv2.INTER_LINEAR).astype(np.float32)
        else:
            resized = resize_bilinear(crop, self.height, tw)
        if self.swap:
            resized = resized[..., ::-1]
        width, left = self.placement(tw)
        out = np.full((self.height, width, 3), self.pad_value, np.float32)
        out[:, left:left + tw] = (resized - self.mean) / self.std
        if self.layout == "NCHW":
            out = out.transpose(2, 0, 1)
        return np.ascontiguousarray(out[None], dtype=self.dtype)

    def placement(self, resized_w: int) -> Tuple[int, int]:
        """The array's width for a crop resized to ``resized_w`` and the column the crop starts at."""
        width = max(self.width, resized_w)
        return width, (width - resized_w) // 2 if self.align == "center" else 0

    def __call__(self, frame: Frame) -> None:
        frame.crops = [self.one(c) for c in frame.crops]


@register_glue("crop_resize")
class CropResize(GlueStep):
    """``crop_quads`` then ``resize_pad`` as one step (the options of both, plus ``device`` = auto |
    cpu | cuda). With CUDA (``auto`` on a board that has it) one launch of ``sdk.kernels``'
    ``crops.cu`` computes every crop of the frame, to the arithmetic of the two CPU steps without
    OpenCV (:func:`sdk.kernels.crops.emulate`); on the CPU the two steps run as they are."""

    def __init__(self, device: str = "auto", **options: Any) -> None:
        o = _options("crop_resize", options, {"rotate_ratio": 1.5, **ResizePad.DEFAULTS})
        self._crop = CropQuads(rotate_ratio=o.pop("rotate_ratio"))
        self._resize = ResizePad(**o)
        self._gpu: Any = None
        self.device = f"{self._crop.device}; {self._resize.device}"
        if _cuda_wanted(device, "crop_resize"):
            if self._resize.dtype != "float32" or self._resize.layout not in ("NCHW", "NHWC"):
                if device == "cuda":
                    raise ConfigError(f"crop_resize on CUDA writes float32 NCHW or NHWC, not {self._resize.dtype} "
                                      f"{self._resize.layout}", "set device = \"cpu\"")
                return
            from ..crops import GpuCropResizer

            self._gpu = GpuCropResizer()
            self.device = "cuda (sdk.kernels crops.cu)"

    def plan(self, quads: Any) -> Any:
        """The kernel's arguments for these quads (:class:`sdk.kernels.crops.CropPlan`), from the
        CPU steps' own rules: crop size, homography, turn of tall crops, resized width, padding."""
        from ..crops import CROP_INTS, CropPlan

        rp, n = self._resize, len(quads)
        hinv = np.zeros((n, 9), np.float64)
        ints = np.zeros((n, CROP_INTS), np.int32)
        scales = np.zeros((n, 2), np.float32)
        for k, quad in enumerate(quads):
            h, w, inv = crop_homography(np.asarray(quad, np.float32))
            hinv[k] = inv.ravel()
            turned = self._crop.turns(h, w)
            th, tw = (w, h) if turned else (h, w)
            resized = rp.target_width(th, tw)
            out_w, left = rp.placement(resized)
            ints[k] = [th, tw, w, int(turned), resized, out_w, left, 0]
            scales[k] = [np.float32(th / rp.height), np.float32(tw / resized)]
        stride = int(ints[:, 5].max()) if n else rp.width
        return CropPlan(hinv, ints, scales, rp.height, stride, rp.pad_value, [float(m) for m in rp.mean],
                        [float(x) for x in rp.std], bool(rp.swap), rp.layout == "NCHW")

    def __call__(self, frame: Frame) -> None:
        if frame.quads is None:
            raise InputError("crop_resize needs quads: put it after db_boxes (or use crop_boxes)")
        if self._gpu is None:
            self._crop(frame)
            self._resize(frame)
            return
        plan = self.plan(frame.quads)
        frame.crops = plan.split(self._gpu(frame.image, plan)) if plan.count else []

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None


@register_glue("batch")
class Batch(GlueStep):
    """The crops (``[1, ...]`` arrays) stacked into batches of at most ``max_batch`` rows, in
    item order -> ``feed`` (a list; empty when there are no items: the next stage is skipped).
    Arrays of different widths (``resize_pad`` with ``grow``) are padded on the right of their
    last axis (``layout = "NCHW"``) or their third (``"NHWC"``) with ``pad_value``."""

    def __init__(self, **options: Any) -> None:
        o = _options("batch", options, {"max_batch": 8, "pad_value": 0.0, "layout": "NCHW"})
        self.max_batch, self.pad_value = int(o["max_batch"]), float(o["pad_value"])
        self.axis = 3 if str(o["layout"]).upper() == "NCHW" else 2
        if self.max_batch < 1:
            raise ConfigError("batch max_batch must be >= 1")

    def _stack(self, arrays: List[np.ndarray]) -> np.ndarray:
        width = max(a.shape[self.axis] for a in arrays)
        padded = []
        for a in arrays:
            if a.shape[self.axis] < width:
                pad = [(0, 0)] * a.ndim
                pad[self.axis] = (0, width - a.shape[self.axis])
                a = np.pad(a, pad, constant_values=self.pad_value)
            padded.append(a)
        return np.concatenate(padded, axis=0)

    def __call__(self, frame: Frame) -> None:
        c = frame.crops
        frame.feed = [self._stack(c[i:i + self.max_batch]) for i in range(0, len(c), self.max_batch)]


@register_glue("ctc_greedy")
class CtcGreedy(GlueStep):
    """Greedy CTC decoding of ``outputs[0]`` ``[N, T, classes]`` (probabilities or logits):
    the best class per step, repeats merged, ``blank`` dropped; class ``i`` is ``characters[i - 1]``
    for ``blank = 0`` (PaddleOCR's order: blank, the list, then a space when ``space_char``). The
    text's score is the mean probability of its kept steps (``softmax = true`` turns logits into
    probabilities first); texts scoring under ``min_score`` are dropped with their items.
    ``characters``: a list, or resolved by the spec from ``"file:PATH"`` (one per line) or
    ``"metadata:KEY"`` (the stage model's ONNX metadata, lines)."""

    def __init__(self, **options: Any) -> None:
        o = _options("ctc_greedy", options, {"characters": None, "blank": 0, "space_char": True, "min_score": 0.0,
                                              "softmax": False})
        chars = o["characters"]
        if isinstance(chars, str):
            raise ConfigError("ctc_greedy characters '%s' were not resolved" % chars[:40],
                              "load the spec with Pipeline.load / Pipeline.from_dict (it reads file: and metadata:)")
        if not chars:
            raise ConfigError("ctc_greedy needs characters (a list, \"file:PATH\" or \"metadata:KEY\")")
        self.blank = int(o["blank"])
        table = list(chars) + ([" "] if o["space_char"] else [])
        self.table = table[: self.blank] + [""] + table[self.blank:]
        self.min_score, self.softmax = float(o["min_score"]), bool(o["softmax"])

    def decode(self, probs: Any) -> List[Tuple[str, float]]:
        """``(text, score)`` per row of ``probs`` ``[N, T, classes]`` (or a list of such batches)."""
        if isinstance(probs, list):
            return [t for part in probs for t in self.decode(part)]
        p = np.asarray(probs, np.float32)
        if self.softmax:
            p = np.exp(p - p.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
        idx, best = p.argmax(-1), p.max(-1)
        out = []
        for row, score in zip(idx, best):
            keep = np.ones(len(row), bool)
            keep[1:] = row[1:] != row[:-1]
            keep &= row != self.blank
            chars = [self.table[i] if i < len(self.table) else "" for i in row[keep].tolist()]
            out.append(("".join(chars), float(score[keep].mean()) if keep.any() else 0.0))
        return out

    def __call__(self, frame: Frame) -> None:
        decoded = self.decode(frame.outputs[0]) if frame.outputs else []
        keep = [i for i, (_t, s) in enumerate(decoded) if s >= self.min_score]
        for i, (text, score) in enumerate(decoded):
            if i < len(frame.items):
                frame.items[i]["text"], frame.items[i]["text_score"] = text, round(score, 4)
        _keep_items(frame, keep)


@register_glue("topk")
class TopK(GlueStep):
    """The ``k`` best classes of ``outputs[0]`` ``[N, classes]`` per item, with ``labels`` (class
    names) -> ``label`` / ``label_index`` / ``label_score`` (and ``topk`` when k > 1);
    ``softmax = true`` turns logits into probabilities first."""

    def __init__(self, **options: Any) -> None:
        o = _options("topk", options, {"k": 1, "labels": None, "softmax": False})
        self.k, self.labels, self.softmax = int(o["k"]), list(o["labels"] or []), bool(o["softmax"])

    def top(self, scores: Any) -> List[List[Tuple[int, float]]]:
        if isinstance(scores, list):
            return [t for part in scores for t in self.top(part)]
        s = np.asarray(scores, np.float32).reshape(np.asarray(scores).shape[0], -1)
        if self.softmax:
            s = np.exp(s - s.max(1, keepdims=True))
            s = s / s.sum(1, keepdims=True)
        order = np.argsort(-s, axis=1, kind="stable")[:, : self.k]
        return [[(int(c), float(s[i, c])) for c in row] for i, row in enumerate(order)]

    def _label(self, c: int) -> str:
        return self.labels[c] if 0 <= c < len(self.labels) else str(c)

    def __call__(self, frame: Frame) -> None:
        tops = self.top(frame.outputs[0]) if frame.outputs else []
        for i, top in enumerate(tops):
            if i >= len(frame.items):
                frame.items.append({})
            c, s = top[0]
            frame.items[i].update(label=self._label(c), label_index=c, label_score=round(s, 4))
            if self.k > 1:
                frame.items[i]["topk"] = [[self._label(c2), round(s2, 4)] for c2, s2 in top]


# -- user steps -------------------------------------------------------------------------------------------
class UserStep(GlueStep):
    """``FILE.py:FUNCTION`` called as ``function(frame, **options)``; it updates the frame or
    returns a new :class:`Frame`."""

    device = "cpu (user code)"

    def __init__(self, ref: str, **options: Any) -> None:
        path, _, func = ref.rpartition(":")
        if not path.endswith(".py") or not func:
            raise ConfigError("user glue '%s' is not FILE.py:FUNCTION" % ref)
        path = os.path.expanduser(path)
        if not os.path.isfile(path):
            raise InputError("user glue file '%s' does not exist" % path)
        spec = importlib.util.spec_from_file_location("edgesdk_user_glue_%d" % abs(hash(path)), path)
        if spec is None or spec.loader is None:
            raise InputError("user glue file '%s' cannot be imported" % path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's module: one clear error
            raise InputError("user glue file '%s' failed to import: %s: %s" % (path, type(exc).__name__, exc)) from exc
        fn = getattr(module, func, None)
        if not callable(fn):
            raise InputError("user glue file '%s' has no function '%s'" % (path, func))
        self.name, self.fn, self.options = ref, fn, dict(options)

    def __call__(self, frame: Frame) -> None:
        got = self.fn(frame, **self.options)
        if isinstance(got, Frame) and got is not frame:
            for slot in Frame.__slots__:
                setattr(frame, slot, getattr(got, slot))


def build_step(name: str, options: Optional[Mapping[str, Any]] = None) -> GlueStep:
    """The step ``name`` (registered, or ``FILE.py:FUNCTION``) built from ``options``; an unknown
    name lists the registered ones."""
    opts = dict(options or {})
    if name.endswith(".py") or ".py:" in name:
        return UserStep(name, **opts)
    cls = GLUE[name]
    try:
        step = cls(**opts)
    except TypeError as exc:
        raise ConfigError("bad options for the %s glue step: %s" % (name, exc)) from exc
    return step
