"""What each corpus model does: its preprocessing, output decoding and task metric.

A :class:`Task` turns photos into input feeds (:meth:`Task.sample_inputs`), decodes raw outputs
(:meth:`Task.decode`) and scores a candidate's outputs against the FP32 reference
(:meth:`Task.agreement`, 1.0 = the same result). Tasks register by name in :data:`TASKS`.

Metrics: detectors — mAP at IoU 0.5 with the reference's detections as ground truth (the candidate's
boxes ranked by score down to a tenth of the task's threshold, so a score that moves across the
threshold costs little, and the reference's own boxes in that band ignored, neither true nor false;
the classes' APs weighted by the reference's boxes, so one box moves it by one box's share;
:func:`box_f1` is the hard-threshold count);
classifier — top-1 agreement; recognizer — 1 - character error rate of the decoded string;
segmentation — mask IoU at 0.5; landmarks — share of points within 2% of the input size.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..metrics import edit_distance, one_minus_error_rate
from . import CorpusError, CorpusModel
from . import images as im

__all__ = ["Task", "TASKS", "register_task", "task_of", "nms", "decode_dfl_heads", "box_f1", "box_map", "class_mean",
           "edit_distance"]

Feed = Dict[str, np.ndarray]
Outputs = Sequence[np.ndarray]

TASKS: Dict[str, "Task"] = {}


def register_task(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        TASKS[name] = cls()
        return cls
    return deco


def task_of(model: CorpusModel) -> "Task":
    try:
        return TASKS[model.task]
    except KeyError:
        raise CorpusError(f"corpus model {model.name!r} has unknown task {model.task!r}") from None


class Task:
    """Base class: preprocessing, decoding and the agreement metric of one kind of model."""

    metric_name = "agreement"

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        raise NotImplementedError

    def decode(self, outputs: Outputs) -> Any:
        return outputs

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        raise NotImplementedError


def _cv2() -> Any:
    return im._cv2()


# --------------------------------------------------------------------------- detection helpers

def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> List[int]:
    """Greedy NMS on xyxy boxes; indices kept, highest score first."""
    order = np.argsort(-scores, kind="stable")
    keep: List[int] = []
    while order.size:
        i = int(order[0])
        keep.append(i)
        if order.size == 1:
            break
        rest = order[1:]
        order = rest[_iou(boxes[i], boxes[rest]) <= iou]
    return keep


def _classwise_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> np.ndarray:
    """Detections ``[x1, y1, x2, y2, score, class]`` after class-wise NMS."""
    if not len(boxes):
        return np.zeros((0, 6), np.float32)
    offset = classes[:, None].astype(np.float64) * (float(np.abs(boxes).max()) + 1.0)
    keep = nms(boxes + offset, scores, iou)
    return np.concatenate([boxes[keep], scores[keep, None], classes[keep, None]], 1).astype(np.float32)


def decode_dfl_heads(scores: Sequence[np.ndarray], distances: Sequence[np.ndarray],
                     levels: Sequence[Sequence[int]], conf: float, iou: float) -> np.ndarray:
    """Detections ``[x1, y1, x2, y2, score, class]`` in input pixels of an anchor-free detector's raw
    heads (:func:`sdk.kernels.reference.dfl_decode`, the pipelines' decoder too): each anchor keeps
    its best class where its score > ``conf``; class-wise NMS at ``iou``."""
    # a strict ``>`` as PaddleDetection's PicoDetPostProcess (``probs > score_threshold``) and
    # RapidLayout's post-processing; the corpus figures used this
    from ..kernels.reference import dfl_decode

    boxes, per_class = dfl_decode(scores, distances, levels)
    cls = per_class.argmax(1)
    best = per_class[np.arange(len(cls)), cls]
    m = best > conf
    return _classwise_nms(boxes[m], best[m], cls[m], iou)


def _match(ref: np.ndarray, cand: np.ndarray, iou: float, ignore: Optional[np.ndarray] = None
           ) -> Tuple[np.ndarray, np.ndarray]:
    """One sample's candidate detections, highest score first, and whether each matches a reference
    box (same class, IoU >= ``iou``, best IoU among those not matched yet): ``(sorted cand, hits)``.
    ``ignore``: the reference's detections below its threshold (:func:`below_threshold`); a candidate
    that matches none of the reference's boxes but one of these is left out, neither hit nor false
    (COCO's ignore regions): the reference saw it too, only under its threshold."""
    cand = cand[np.argsort(-cand[:, 4], kind="stable")] if len(cand) else cand
    hits = np.zeros(len(cand), bool)
    used = np.zeros(len(ref), bool)
    for n, det in enumerate(cand):
        same = (ref[:, 5] == det[5]) & ~used if len(ref) else np.zeros(0, bool)
        if not same.any():
            continue
        ious = np.where(same, _iou(det[:4], ref[:, :4]), -1.0)
        j = int(np.argmax(ious))
        if ious[j] >= iou:
            used[j] = hits[n] = True
    if ignore is None or not len(ignore) or not len(cand):
        return cand, hits
    keep = hits.copy()
    taken = np.zeros(len(ignore), bool)
    for k in np.nonzero(~hits)[0]:
        same = (ignore[:, 5] == cand[k, 5]) & ~taken
        near = np.where(same, _iou(cand[k, :4], ignore[:, :4]), -1.0) if same.any() else np.zeros(0)
        if len(near) and near.max() >= iou:
            taken[int(np.argmax(near))] = True
        else:
            keep[k] = True
    return cand[keep], hits[keep]


def below_threshold(low: np.ndarray, conf: float) -> np.ndarray:
    """The detections of ``low`` (decoded down to a lower threshold) that ``conf`` does not keep
    (scores <= ``conf``: the detectors keep a score > their threshold)."""
    return low[low[:, 4] <= conf] if len(low) else low


def box_f1(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], iou: float = 0.5) -> float:
    """Matched-box F1 at ``iou`` (same class), pooled over samples; 1.0 when both find nothing."""
    tp = n_ref = n_cand = 0
    for ref, cand in zip(reference, candidate):
        n_ref, n_cand = n_ref + len(ref), n_cand + len(cand)
        tp += int(_match(ref, cand, iou)[1].sum())
    if n_ref + n_cand == 0:
        return 1.0
    return 2.0 * tp / (n_ref + n_cand)


def _average_precision(scores: np.ndarray, hits: np.ndarray, n_truth: int) -> float:
    """All-point interpolated AP of detections ``scores`` (matched or not: ``hits``) against ``n_truth`` boxes."""
    order = np.argsort(-scores, kind="stable")
    tp = np.cumsum(hits[order])
    recall = np.concatenate([[0.0], tp / n_truth])
    precision = np.concatenate([[1.0], tp / np.arange(1, len(order) + 1)])
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # the precision envelope
    return round(float(np.sum(np.diff(recall) * precision[1:])), 12)  # 1.0 stays 1.0 despite float sums


def box_map(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], iou: float = 0.5,
            ignore: Optional[Sequence[np.ndarray]] = None) -> float:
    """mAP at ``iou``: the reference's detections ``[x1, y1, x2, y2, score, class]`` are the ground
    truth, the candidate's are ranked by score; the mean over the classes the reference finds, each
    class weighted by its reference boxes (:func:`class_mean`). 1.0 when neither finds anything, 0.0
    when only the candidate does. ``ignore``: per sample, the
    reference's detections under its threshold (see :func:`_match`)."""
    ign = list(ignore) if ignore is not None else [None] * len(reference)
    return map_of_matches(reference, [_match(ref, cand, iou, i) for ref, cand, i in zip(reference, candidate, ign)])


def map_of_matches(reference: Sequence[np.ndarray], matched: Sequence[Tuple[np.ndarray, np.ndarray]]) -> float:
    """:func:`box_map` from each sample's ``_match`` result (a bootstrap resamples these, matching once)."""
    classes = sorted({int(c) for r in reference for c in r[:, 5]})
    if not classes:
        return 1.0 if all(len(c) == 0 for c, _ in matched) else 0.0
    aps, boxes = [], []
    for k in classes:
        n_truth = sum(int(np.sum(ref[:, 5] == k)) for ref in reference if len(ref))
        scores = np.concatenate([c[c[:, 5] == k, 4] for c, _ in matched if len(c)] or [np.zeros(0)])
        hits = np.concatenate([h[c[:, 5] == k] for c, h in matched if len(c)] or [np.zeros(0, bool)])
        aps.append(_average_precision(scores, hits.astype(float), n_truth) if len(scores) else 0.0)
        boxes.append(n_truth)
    return class_mean(aps, boxes)


def class_mean(aps: Sequence[float], boxes: Sequence[int]) -> float:
    """The classes' APs averaged with each class weighted by its reference boxes: every reference box
    weighs the same. A plain class mean swings on a class the reference finds once or twice: on 24
    layout pages (147 FP32 boxes, seven classes) an INT8 file that found 146 of them, the one missed
    being a class's only box, read 0.856 as a plain mean and 0.992 weighted."""
    return float(np.average(np.asarray(aps, np.float64), weights=np.asarray(boxes, np.float64)))


class _Detector(Task):
    metric_name = "box mAP@0.5 vs FP32 (classes weighted by FP32's boxes)"
    conf: float  # the detection threshold, set by each detector

    def decode(self, outputs: Outputs, conf: Optional[float] = None) -> np.ndarray:
        raise NotImplementedError

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        # the candidate read down to a tenth of the threshold (a true box whose score slips under it
        # costs rank, not the box); the reference's own boxes in that band are ignored, not false: on
        # layout-cdla's INT8 .tflite they were 35 of 37 "false" boxes, most at FP32's own score
        low = self.conf / 10
        return box_map([self.decode(r) for r in reference], [self.decode(c, low) for c in candidate],
                       ignore=[below_threshold(self.decode(r, low), self.conf) for r in reference])


def _letterbox(img: np.ndarray, size: int, pad: int, center: bool = False) -> np.ndarray:
    cv2 = _cv2()
    h, w = img.shape[:2]
    r = min(size / h, size / w)
    nh, nw = max(1, int(h * r)), max(1, int(w * r))
    out = np.full((size, size, 3), pad, np.uint8)
    y0, x0 = ((size - nh) // 2, (size - nw) // 2) if center else (0, 0)
    out[y0:y0 + nh, x0:x0 + nw] = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
    return out


@register_task("yolov8-detect")
class YoloV8Detect(_Detector):
    """Ultralytics YOLOv8 head: output ``[1, 4 + classes, anchors]`` (cx, cy, w, h, class scores)."""

    conf = 0.25
    iou = 0.45
    #: the corpus photos with people in them: 3 x 3 mosaics of their augmentations give FP32 about 3.5
    #: body-part boxes per input (the photos alone: 8 boxes on 24), so one box moves mAP by a few percent
    people = ("astronaut.png", "camera.png")

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        name, shape = next(iter(model.input_shapes.items()))
        size = shape[-1]
        feeds = []
        for img in im.photo_mosaics(n, seed, self.people, size, grid=3):
            x = _letterbox(img[:, :, ::-1], size, 0).astype(np.float32) / 255.0
            feeds.append({name: np.ascontiguousarray(x.transpose(2, 0, 1)[None])})
        return feeds

    def decode(self, outputs: Outputs, conf: Optional[float] = None) -> np.ndarray:
        pred = np.asarray(outputs[0], np.float32)[0].T          # anchors x (4 + C)
        scores = pred[:, 4:]
        cls = scores.argmax(1)
        best = scores[np.arange(len(cls)), cls]
        m = best > (self.conf if conf is None else conf)   # ultralytics' ``amax(1) > conf_thres``
        cx, cy, w, h = pred[m, 0], pred[m, 1], pred[m, 2], pred[m, 3]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
        return _classwise_nms(boxes, best[m], cls[m], self.iou)


@register_task("yolox-detect")
class YoloXDetect(_Detector):
    """YOLOX head as ddddocr exports it: ``[1, anchors, 4 + 1 + classes]`` in grid units."""

    size = 416
    conf = 0.1
    iou = 0.45

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        feeds = []
        for i in range(n):
            img = _letterbox(im.render_char_scene(seed * 1000 + i, self.size), self.size, 114)
            feeds.append({"images": np.ascontiguousarray(img.transpose(2, 0, 1)[None], dtype=np.float32)})
        return feeds

    def decode(self, outputs: Outputs, conf: Optional[float] = None) -> np.ndarray:
        levels = [(self.size // s, self.size // s, s) for s in (8, 16, 32)]
        boxes, scores = yolox_boxes(np.array(outputs[0], np.float32)[0], levels)
        cls = scores.argmax(1)
        best = scores[np.arange(len(cls)), cls]
        m = best > (self.conf if conf is None else conf)
        return _classwise_nms(boxes[m], best[m], np.zeros(int(m.sum())), self.iou)


def yolox_boxes(pred: np.ndarray, levels: Sequence[Sequence[int]]) -> Tuple[np.ndarray, np.ndarray]:
    """A YOLOX head before its decode, ``[A, 4 + 1 + C]`` (grid offsets, log sizes, objectness,
    class scores; A the cells of ``levels`` ``(rows, cols, stride)`` in order, row-major): each
    anchor's box ``[x1, y1, x2, y2]`` in input pixels and its class scores (objectness x class)."""
    grids, strides = [], []
    for rows, cols, s in levels:
        xv, yv = np.meshgrid(np.arange(cols), np.arange(rows))
        grids.append(np.stack([xv, yv], 2).reshape(-1, 2))
        strides.append(np.full((rows * cols, 1), s))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    xy = (pred[:, :2] + grid) * stride
    wh = np.exp(np.clip(pred[:, 2:4], -20, 20)) * stride
    return np.concatenate([xy - wh / 2, xy + wh / 2], 1), pred[:, 4:5] * pred[:, 5:]


@register_task("picodet-detect")
class PicoDetDetect(_Detector):
    """PaddleDetection PicoDet: per stride a score head ``[1, N, C]`` then a DFL box head ``[1, N, 4*(R+1)]``."""

    height, width = 800, 608
    strides = (8, 16, 32, 64)
    conf = 0.4
    iou = 0.5

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        cv2 = _cv2()
        pages = im.text_photos(seed)
        mean = np.array([0.485, 0.456, 0.406], np.float32)
        std = np.array([0.229, 0.224, 0.225], np.float32)
        feeds = []
        for i in range(n):
            img = pages[i] if i < len(pages) else im.render_document(seed * 1000 + i, (self.height, self.width))
            x = cv2.resize(img, (self.width, self.height)).astype(np.float32) / 255.0
            x = (x - mean) / std
            feeds.append({"image": np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)})
        return feeds

    def decode(self, outputs: Outputs, conf: Optional[float] = None) -> np.ndarray:
        k = len(outputs) // 2
        levels = [(math.ceil(self.height / s), math.ceil(self.width / s), s) for s in self.strides]
        return decode_dfl_heads(outputs[:k], outputs[k:], levels, self.conf if conf is None else conf, self.iou)


@register_task("orientation-classify")
class OrientationClassify(Task):
    """4-way document orientation (0, 90, 180, 270 degrees): pages turned by each angle, top-1 agreement."""

    metric_name = "top-1 agreement vs FP32"
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        cv2 = _cv2()
        name = next(iter(model.input_shapes))
        feeds = []
        pages = [im.render_document(seed * 1000 + j) for j in range(max(1, (n + 3) // 4))]
        for i in range(n):
            img = np.rot90(pages[i // 4], k=i % 4)
            h, w = img.shape[:2]
            s = 256 / min(h, w)
            img = cv2.resize(np.ascontiguousarray(img), (round(w * s), round(h * s)), interpolation=cv2.INTER_LANCZOS4)
            h, w = img.shape[:2]
            y, x = (h - 224) // 2, (w - 224) // 2
            crop = img[y:y + 224, x:x + 224].astype(np.float32) / 255.0
            crop = (crop - self.mean) / self.std
            feeds.append({name: np.ascontiguousarray(crop.transpose(2, 0, 1)[None], dtype=np.float32)})
        return feeds

    def decode(self, outputs: Outputs) -> np.ndarray:
        return np.asarray(outputs[0]).reshape(np.asarray(outputs[0]).shape[0], -1).argmax(1)

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        ref = np.concatenate([self.decode(r) for r in reference])
        cand = np.concatenate([self.decode(c) for c in candidate])
        return float((ref == cand).mean()) if len(ref) else 1.0


@register_task("ctc-recognize")
class CtcRecognize(Task):
    """CRNN + CTC: output ``[T, 1, classes]`` logits or ``[1, T]`` indices (0 = blank); 1 - CER."""

    metric_name = "1-CER vs FP32"

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        name, shape = next(iter(model.input_shapes.items()))
        rng = np.random.default_rng(seed)
        feeds = []
        for i in range(n):
            line = im.render_text_line(im.random_text(rng), shape[2], shape[3], seed=seed * 1000 + i)
            feeds.append({name: (line.astype(np.float32) / 255.0)[None, None]})
        return feeds

    def decode(self, outputs: Outputs) -> List[int]:
        out0 = np.asarray(outputs[0])
        if out0.ndim == 3:                      # [T, 1, classes] logits (what ddddocr's model returns)
            idx = out0.reshape(out0.shape[0], -1).argmax(-1) if out0.shape[1] == 1 else out0[0].argmax(-1)
        else:                                   # [1, T] indices
            idx = np.rint(out0.astype(np.float64)).astype(np.int64).ravel()
        out: List[int] = []
        prev = -1
        for t in idx.tolist():
            if t != prev and t != 0:
                out.append(t)
            prev = t
        return out

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        return one_minus_error_rate((self.decode(r), self.decode(c)) for r, c in zip(reference, candidate))


def _nhwc_photos(n: int, seed: int, size: int) -> List[np.ndarray]:
    cv2 = _cv2()
    out = []
    for img in im.photo_stream(n, seed):
        h, w = img.shape[:2]
        s = min(h, w)
        crop = img[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s, ::-1]
        x = cv2.resize(np.ascontiguousarray(crop), (size, size), interpolation=cv2.INTER_AREA)
        out.append((x.astype(np.float32) / 255.0)[None])
    return out


@register_task("segment")
class Segment(Task):
    """A single-channel probability mask; mask IoU at 0.5, pooled over samples."""

    metric_name = "mask IoU vs FP32"
    size = 256

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        return [{"input_1": x} for x in _nhwc_photos(n, seed, self.size)]

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        inter = union = 0
        for r, c in zip(reference, candidate):
            a, b = np.asarray(r[0]) > 0.5, np.asarray(c[0]) > 0.5
            inter += int((a & b).sum())
            union += int((a | b).sum())
        return inter / union if union else 1.0


@register_task("landmarks")
class Landmarks(Task):
    """Landmark regression ``[1, 3 * K]`` in input pixels; share within 2% of the input size."""

    metric_name = "landmarks within 2% vs FP32"
    size = 224

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        return [{"input_1": x} for x in _nhwc_photos(n, seed, self.size)]

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        near = total = 0
        for r, c in zip(reference, candidate):
            a = np.asarray(r[0], np.float64).reshape(-1, 3)[:, :2]
            b = np.asarray(c[0], np.float64).reshape(-1, 3)[:, :2]
            near += int((np.linalg.norm(a - b, axis=1) <= 0.02 * self.size).sum())
            total += len(a)
        return near / total if total else 1.0


def run_reference(model_path: str, feeds: Sequence[Feed], unfused: bool = False) -> List[List[np.ndarray]]:
    """Outputs of an ONNX model on ``feeds`` with ONNX Runtime's CPU provider (for tests/benchmarks);
    ``unfused``: a QDQ model's exact int8 arithmetic, what a target other than this host computes,
    opened as the quantizer's guard opens it (:func:`sdk.quantize.accuracy.ort_session`)."""
    from ..quantize.accuracy import ort_session

    sess = ort_session(model_path, unfused=unfused)
    return [sess.run(None, f) for f in feeds]


# -- issue 25 (pipelines): the PP-OCRv4 pair ------------------------------------------------------------
def _text_pages(n: int, seed: int, size: Tuple[int, int]) -> List[np.ndarray]:
    """The corpus's two text photos (:func:`images.text_photos`: other seeds' crops of them), then
    rendered document pages (BGR)."""
    pages = im.text_photos(seed)
    return [pages[i] if i < len(pages) else im.render_document(seed * 1000 + i, size) for i in range(n)]


@register_task("db-text-detect")
class DbTextDetect(_Detector):
    """DB text detector (PP-OCR): a text probability map ``[1, 1, H, W]``; the boxes are those of
    rapidocr's post-processing (its ``config.yaml``: threshold 0.3, 2x2 dilation, minimum-area
    rectangles whose shorter side is >= 3 px, mean probability inside >= ``conf`` 0.5, unclip 1.6;
    the pipeline's ``db_boxes`` step) as axis-aligned bounds, each scored by its mean probability;
    box mAP at IoU 0.5 as the other detectors. Specks of 1-3 px that the post-processing drops are no
    boxes: counted, with the score as a hard threshold, they made one page's text-box F1 0.44 where
    the INT8 model had merged one line."""

    thresh, conf = 0.3, 0.5
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        cv2 = _cv2()
        name, shape = next(iter(model.input_shapes.items()))
        h, w = int(shape[2]), int(shape[3])
        feeds = []
        for img in _text_pages(n, seed, (h, w)):
            x = cv2.resize(img[:, :, ::-1], (w, h), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0
            x = (x - self.mean) / self.std
            feeds.append({name: np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)})
        return feeds

    def decode(self, outputs: Outputs, conf: Optional[float] = None) -> np.ndarray:
        from ..kernels.pipelines.glue import DbBoxes

        step = DbBoxes(thresh=self.thresh, box_thresh=self.conf if conf is None else conf)
        quads, scores = step.boxes_in_input(np.asarray(outputs[0]))
        boxes = np.concatenate([quads.min(1), quads.max(1), scores[:, None], np.zeros((len(scores), 1), np.float32)], 1)
        return boxes.astype(np.float32).reshape(-1, 6)   # x1, y1, x2, y2, score, class


@register_task("ppocr-recognize")
class PpocrRecognize(CtcRecognize):
    """PP-OCR recognizer: 3-channel text lines ``[1, 3, 48, W]`` normalised to [-1, 1]; softmax
    ``[1, T, classes]`` (0 = blank); 1 - CER of the greedy CTC decoding."""

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        name, shape = next(iter(model.input_shapes.items()))
        rng = np.random.default_rng(seed)
        feeds = []
        for i in range(n):
            line = im.render_text_line(im.random_text(rng), int(shape[2]), int(shape[3]), seed=seed * 1000 + i)
            x = (line.astype(np.float32) / 255.0 - 0.5) / 0.5
            feeds.append({name: np.ascontiguousarray(np.repeat(x[None, None], 3, axis=1))})
        return feeds


from . import sequence_tasks as _sequence_tasks  # noqa: E402,F401 - registers the audio and table tasks
