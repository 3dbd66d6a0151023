"""What each model output is for, and how the default budget judges it: the result a task reads
from the output, not the output's cosine.

A role is recognised from the output's shape and FP32 values (and, where the caller has one, a hint
from the graph such as "this output is a Log"); it judges a candidate (INT8) against the FP32
reference sample by sample and returns one agreement score (1.0 = the same result) bounded below by
its ``default_min``. Nothing here reads a model file: the roles judge output arrays, so every
quantizer (ONNX, TFLite) shares them.

========== ============================================= =============================================
role       recognised                                     judged by
========== ============================================= =============================================
detections ``[N, 4+C, A]`` / ``[N, A, 4+C]`` (A >> 4+C,   box mAP@0.5 vs FP32 (:func:`sdk.corpus.tasks.
           scores in [0, 1]): YOLO heads                  box_map`: FP32's detections are the truth, the
                                                          candidate's ranked by score down to a tenth
                                                          of the threshold, FP32's own boxes in that
                                                          band ignored), at the score thresholds
                                                          0.25, 0.4 and 0.5, the lowest counting;
                                                          anchors as boxes where the box columns
                                                          are not pixel boxes
heads      per level a score head ``[N, A, C]`` in       box mAP@0.5 vs FP32 over the decoded boxes
           [0, 1] and a DFL distance head ``[N, A, 4R]``  (DFL expectation x stride around each
           (GFL / PicoDet), each level's A a stride's     anchor centre, class-wise NMS): one role over
           grid of the input image                        all the heads, named on the first score head;
                                                          the same thresholds
scores     asked for (``--output-role``): a detector's    the same mAP with each anchor its own box
           score head ``[N, A, C]`` beside its box head   (a lone head: anchor by anchor is too strict)
mask       ``[N, 1, H, W]`` / ``[N, H, W, 1]`` in [0, 1]   mask IoU at 0.5; a map of separate objects (text
                                                          lines): the lower of that and its regions' F1
                                                          (connected components, box IoU 0.5)
classes    softmax rows ``[N, C]`` (C > 1), ``[N,T,C]``     top-1 agreement (per row / position; CTC-like
                                                          sequences: 1 - error rate of the greedy reading)
values     other ``[N, C]`` (C > 1): landmarks, logits    share of values within 2% of the output's
                                                          FP32 range, at least 0.95
log        a graph hint: the output is a Log (times a     mean absolute error in the output's units,
           constant: dB)                                  at most 0.5 dB
embedding  ``[N, D]`` rows of unit L2 norm                mean per-sample cosine
state      a graph hint: the output has the shape and     cosine of the whole output (a recurrent
           type of an input (``stateN`` -> ``state``)     state is fed back, not read as classes)
cosine     anything else                                  cosine of the whole output
========== ============================================= =============================================
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import numpy as np

from ..errors import InputError

__all__ = ["Role", "ROLES", "register_role", "infer_roles", "get_role", "parse_output_roles", "wilson_interval",
           "image_size",
           "INTERVAL_LEVEL"]

#: the confidence of the interval a report gives around each role's score (:meth:`Role.interval`)
INTERVAL_LEVEL = 0.9
#: resamplings of the samples for a bootstrap interval (seeded: a report is reproducible)
BOOTSTRAP_RESAMPLES = 200


class Role:
    """One output's role: ``score(reference, candidate)`` over per-sample arrays, 1.0 = same result,
    held when ``>= min_score``."""

    name = ""
    metric = ""
    default_min = 0.99
    #: a role over several outputs (:class:`DetectionHeads`): the output names it reads, in order; its
    #: score then takes per sample the list of their arrays, and the first name carries the score
    outputs: Tuple[str, ...] = ()
    #: the fewest samples on which a bootstrap interval of the score establishes its bound (0: any)
    min_samples = 0

    def __init__(self, min_score: Optional[float] = None, **params: Any):
        self.min_score = self.default_min if min_score is None else min_score
        self.params = params

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        raise NotImplementedError

    def units(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Optional[Tuple[int, int]]:
        """``(agreeing, total)`` where the score is a share of countable units (rows, positions,
        characters); None where it is pooled over the samples (an IoU, a mAP, a cosine)."""
        return None

    def interval(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
                 level: float = INTERVAL_LEVEL) -> Tuple[float, float]:
        """The range the score on other samples like these would likely fall in: Wilson's score
        interval over the units where the score is a share of them (it stays honest at 16 of 16: a
        bootstrap would say [1, 1]); otherwise the percentile bootstrap over the samples."""
        counted = self.units(reference, candidate)
        if counted is not None:
            return wilson_interval(counted[0], counted[1], level)
        n, score_of = self.resampler(reference, candidate)
        score = score_of(np.arange(n))       # the score itself (a resampling of every unit, in order)
        if n < 2:
            return score, score
        rng = np.random.default_rng(0)
        boot = [score_of(pick) for pick in rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))]
        lo, hi = np.percentile(boot, [50 * (1 - level), 50 * (1 + level)])
        return min(float(lo), score), max(float(hi), score)

    def resampled_score(self, reference: Sequence[Any], candidate: Sequence[Any]) -> float:
        """The score through :meth:`resampler` (every unit, in order): :meth:`score` of a role whose
        per-sample work lives in its resampler."""
        n, score_of = self.resampler(reference, candidate)
        return score_of(np.arange(n))

    def resampler(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
                  ) -> Tuple[int, Callable[[np.ndarray], float]]:
        """The bootstrap's units and the score of a resampling of them (indices): the samples and
        :meth:`score` here; a role with costly per-sample work does it once."""
        return (min(len(reference), len(candidate)),
                lambda pick: self.score([reference[i] for i in pick], [candidate[i] for i in pick]))

    def describe(self) -> Dict[str, Any]:
        return {"role": self.name, "metric": self.metric, "min": self.min_score,
                **({"outputs": list(self.outputs)} if self.outputs else {}),
                **{k: v for k, v in self.params.items() if isinstance(v, (str, int, float, bool))}}


def wilson_interval(agreeing: float, total: int, level: float = INTERVAL_LEVEL) -> Tuple[float, float]:
    """Wilson's score interval of the share ``agreeing / total`` at confidence ``level``."""
    from statistics import NormalDist

    if total <= 0:
        return 1.0, 1.0
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p, z2 = agreeing / total, z * z
    centre, half = p + z2 / (2 * total), z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return max(0.0, (centre - half) / (1 + z2 / total)), min(1.0, (centre + half) / (1 + z2 / total))


ROLES: Dict[str, Type[Role]] = {}


def register_role(cls: Type[Role]) -> Type[Role]:
    ROLES[cls.name] = cls
    return cls


def get_role(name: str, **params: Any) -> Role:
    try:
        return ROLES[name](**params)
    except KeyError:
        raise InputError(f"unknown output role {name!r}", f"use one of: {', '.join(ROLES)}") from None


def parse_output_roles(items: Sequence[str]) -> Dict[str, str]:
    """``NAME=ROLE`` items (``--output-role``) -> ``{output name: role}``; InputError when malformed."""
    out: Dict[str, str] = {}
    for item in items:
        name, sep, role = item.partition("=")
        if not sep or not name or not role:
            raise InputError(f"--output-role {item!r} is not NAME=ROLE", f"roles: {', '.join(ROLES)}")
        if role not in ROLES:
            raise InputError(f"unknown output role {role!r} in --output-role {item}", f"use one of: {', '.join(ROLES)}")
        out[name] = role
    return out


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x, np.float64)


@register_role
class Cosine(Role):
    name = "cosine"
    metric = "cosine vs FP32"

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        if reference and np.asarray(reference[0]).dtype.kind in "iub":   # indices: the share of equal elements
            eq = [np.asarray(r) == np.asarray(c) if np.shape(r) == np.shape(c) else np.zeros(1, bool)
                  for r, c in zip(reference, candidate)]
            total = sum(max(np.size(r), np.size(c)) for r, c in zip(reference, candidate))
            return float(sum(int(e.sum()) for e in eq)) / total if total else 1.0
        dot = ra = ca = 0.0
        for r, c in zip(reference, candidate):
            r64, c64 = _f64(r).ravel(), _f64(c).ravel()
            n = min(r64.size, c64.size)
            r64, c64 = r64[:n], c64[:n]
            dot, ra, ca = dot + float(r64 @ c64), ra + float(r64 @ r64), ca + float(c64 @ c64)
        if ra == ca == 0:
            return 1.0
        return dot / math.sqrt(ra * ca) if ra > 0 and ca > 0 else 0.0


@register_role
class State(Cosine):
    """A recurrent state the model hands back as an input (``stateN`` of ``state``): its values
    matter, not an argmax over them, so it is judged by cosine whatever its shape looks like."""

    name = "state"
    metric = "cosine vs FP32 (a recurrent state)"


@register_role
class Embedding(Role):
    name = "embedding"
    metric = "mean per-sample cosine vs FP32"

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        cos: List[float] = []
        for r, c in zip(reference, candidate):
            r2, c2 = _f64(r).reshape(len(r), -1), _f64(c).reshape(len(c), -1)
            num = np.sum(r2 * c2, 1)
            den = np.linalg.norm(r2, axis=1) * np.linalg.norm(c2, axis=1)
            cos.extend(np.where(den > 0, num / np.maximum(den, 1e-30), 1.0).tolist())
        return float(np.mean(cos)) if cos else 1.0


@register_role
class Classes(Role):
    """Top-1 agreement; for a sequence ``[T, N, C]`` / ``[N, T, C]``, at the positions where either
    side reads more than the commonest class, or, when that class also stands between other classes
    (a CTC blank: ``_ a _ _ b``), 1 - the error rate of the greedy readings (repeats merged, blanks
    dropped): a flip that leaves the text alone (``a a _`` vs ``a _ _``) is no error, as for the
    task (ddddocr's recognizer: top-1 0.990 on 96 positions where its 1-CER was 1.0)."""

    name = "classes"
    metric = "top-1 agreement vs FP32 (a CTC-like sequence: 1 - error rate of its greedy reading)"

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        same, total = self.units(reference, candidate)
        return same / total if total else 1.0

    def units(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Tuple[int, int]:
        """Rows (positions) agreeing and their number; for a CTC-like sequence, the characters of the
        FP32 readings less the candidate's edits, and the characters."""
        pairs = [(np.asarray(r).argmax(-1), np.asarray(c).argmax(-1)) for r, c in zip(reference, candidate)
                 if np.shape(r) == np.shape(c) and np.ndim(r) >= 2]
        if not pairs:
            return 0, 0
        if np.ndim(reference[0]) >= 3:   # a sequence: positions where either side reads more than the
            # commonest class (a CTC blank, a background), where a flip changes the decoded text
            mode = int(np.bincount(np.concatenate([a.ravel() for a, _ in pairs])).argmax())
            rows = [(ra, rb) for a, b in pairs for ra, rb in zip(_sequences(a), _sequences(b))]
            if any(_blank_inside(ra, mode) for ra, _ in rows):
                from ..metrics import error_counts

                edits, chars = error_counts((_greedy(ra, mode), _greedy(rb, mode)) for ra, rb in rows)
                return max(0, chars - edits), chars
            live = [(a != mode) | (b != mode) for a, b in pairs]
            return (sum(int(((a == b) & m).sum()) for (a, b), m in zip(pairs, live)),
                    sum(int(m.sum()) for m in live))
        return sum(int((a == b).sum()) for a, b in pairs), sum(a.size for a, _ in pairs)


def _sequences(a: np.ndarray) -> np.ndarray:
    """A sequence's per-position classes ``[T, 1]`` / ``[1, T]`` / ``[N, T]`` as rows ``[K, T]``."""
    if a.ndim >= 2 and a.shape[-1] == 1:
        a = a[..., 0]
    return a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)


def _blank_inside(row: np.ndarray, blank: int) -> bool:
    """Whether ``blank`` stands between two other classes in ``row`` (CTC), not only around them."""
    where = np.flatnonzero(row != blank)
    return len(where) >= 2 and bool((row[where[0]:where[-1]] == blank).any())


def _greedy(row: np.ndarray, blank: int) -> List[int]:
    """CTC's greedy reading: repeats merged, then ``blank`` dropped."""
    keep = np.ones(len(row), bool)
    keep[1:] = row[1:] != row[:-1]
    return [int(v) for v in row[keep] if v != blank]


@register_role
class Values(Role):
    """Numbers that are the answer themselves (landmark coordinates, a regression, raw logits of a
    2-D head): the share of elements whose INT8 value lies within ``tolerance`` (2%) of the FP32
    output's range (over all the reference samples) of the FP32 value. A hand-landmark head's
    ``[1, 63]`` pixel coordinates: 2% of their ~224 px spread, as its task reads them."""

    name = "values"
    metric = "share of values within 2% of the output's range vs FP32"
    default_min = 0.95

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        near, total = self.units(reference, candidate)
        return near / total if total else 1.0

    def units(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Tuple[int, int]:
        """Values within the tolerance, and all values (a sample's values are counted as if
        independent: the interval is then narrower than the samples alone would allow)."""
        pairs = [(_f64(r), _f64(c)) for r, c in zip(reference, candidate) if np.shape(r) == np.shape(c)]
        if not any(r.size for r, _ in pairs):
            return 0, 0
        lo = min(float(r.min()) for r, _ in pairs if r.size)
        hi = max(float(r.max()) for r, _ in pairs if r.size)
        tol = float(self.params.get("tolerance", 0.02)) * (hi - lo)
        return sum(int((np.abs(r - c) <= tol).sum()) for r, c in pairs), sum(r.size for r, _ in pairs)


@register_role
class Mask(Role):
    """A probability map or mask: the pooled IoU of the maps above the threshold; for a map of
    separate objects (``params["regions"]``: text lines, as a DB detector's) also the F1 of its
    regions (8-connected components at least :data:`MIN_REGION_SIDE` px across, matched by box
    IoU >= 0.5, as the detector's post-processing reads them), the score being the lower of the
    two. Pooled IoU alone follows the images with large masks: on ppocr-v4-det it stayed at 0.97
    while a photo's text boxes merged (text-box F1 0.38)."""

    name = "mask"
    metric = "mask IoU and region F1 vs FP32"
    default_min = 0.97

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        return self.resampled_score(reference, candidate)

    def resampler(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
                  ) -> Tuple[int, Callable[[np.ndarray], float]]:
        """Each sample's counts once (pixels in both / either map, regions matched / in each), a
        resampling's score from their sums: the bootstrap finds no region twice."""
        counts = np.array([self._counts(r, c) for r, c in zip(reference, candidate)], np.float64).reshape(-1, 5)

        def score_of(pick: np.ndarray) -> float:
            inter, union, matched, n_ref, n_cand = counts[pick].sum(0)
            iou = inter / union if union else 1.0
            if not self.params.get("regions"):
                return float(iou)
            return float(min(iou, 2.0 * matched / (n_ref + n_cand) if n_ref + n_cand else 1.0))
        return len(counts), score_of

    def _counts(self, reference: np.ndarray, candidate: np.ndarray) -> Tuple[int, int, int, int, int]:
        """``(intersection, union, regions matched, reference's regions, candidate's regions)`` of
        one sample at the threshold (the region F1 is :func:`~sdk.corpus.tasks.box_f1`'s, pooled)."""
        from ..corpus.tasks import _match

        thr = float(self.params.get("threshold", 0.5))
        a, b = np.asarray(reference) > thr, np.asarray(candidate) > thr
        if a.shape != b.shape:
            return 0, 0, 0, 0, 0
        matched = n_ref = n_cand = 0
        if self.params.get("regions"):
            for ra, rb in zip(self._regions(reference, a), _regions(b)):
                matched += int(_match(ra, rb, 0.5)[1].sum())
                n_ref, n_cand = n_ref + len(ra), n_cand + len(rb)
        return int((a & b).sum()), int((a | b).sum()), matched, n_ref, n_cand

    def _regions(self, reference: np.ndarray, above: np.ndarray) -> List[np.ndarray]:
        """The reference's regions, computed once per array (the fallback judges many candidates)."""
        memo = self.__dict__.setdefault("_memo", {})
        hit = memo.get(id(reference))
        if hit is None or hit[0] is not reference:
            hit = memo[id(reference)] = (reference, _regions(above))
        return hit[1]


#: regions narrower than this (px) are noise to a map's reader (PP-OCR's DB post-processing drops
#: boxes with a side under 3)
MIN_REGION_SIDE = 3


def _regions(above: np.ndarray) -> List[np.ndarray]:
    """Per 2-D map of ``above`` (leading size-1 axes dropped, a batch split): its regions' boxes
    ``[x1, y1, x2, y2, 1, 0]`` (the score and class :func:`box_f1` reads)."""
    m = np.squeeze(above)
    maps = [m] if m.ndim == 2 else list(m) if m.ndim == 3 else []
    out = []
    for one in maps:
        boxes = region_boxes(one)
        boxes = boxes[np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) >= MIN_REGION_SIDE]
        out.append(np.concatenate([boxes, np.ones((len(boxes), 1)), np.zeros((len(boxes), 1))], 1)
                   .astype(np.float32))
    return out


def region_boxes(mask: np.ndarray) -> np.ndarray:
    """Bounding boxes ``[K, 4]`` (x1, y1, x2, y2; x2/y2 exclusive, as OpenCV's stats) of the
    8-connected regions of a 2-D boolean mask: row runs joined by union-find where runs of
    neighbouring rows touch (diagonals included), in NumPy (no OpenCV or SciPy needed)."""
    m = np.asarray(mask, bool)
    h, w = m.shape
    padded = np.zeros((h, w + 2), np.int8)
    padded[:, 1:-1] = m
    d = np.diff(padded, axis=1)
    rows, starts = np.nonzero(d == 1)
    ends = np.nonzero(d == -1)[1]                 # exclusive; runs in row-major order, as the starts
    if not len(rows):
        return np.zeros((0, 4), np.int64)
    parent = np.arange(len(rows))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    first = np.searchsorted(rows, np.arange(h + 1))
    for r in range(h - 1):
        a0, a1, b1 = first[r], first[r + 1], first[r + 2]
        if a0 == a1 or a1 == b1:
            continue
        # runs [sa, ea) of row r and [sb, eb) of row r + 1 touch when sa <= eb and sb <= ea
        lo = np.searchsorted(ends[a0:a1], starts[a1:b1], side="left")
        hi = np.searchsorted(starts[a0:a1], ends[a1:b1], side="right")
        for j in np.nonzero(hi > lo)[0]:
            rb = find(int(a1 + j))
            for i in range(int(lo[j]), int(hi[j])):
                ra = find(int(a0 + i))
                if ra != rb:
                    parent[ra] = rb
    comp = np.unique([find(i) for i in range(len(rows))], return_inverse=True)[1]
    k = int(comp.max()) + 1
    x1, y1 = np.full(k, w), np.full(k, h)
    x2, y2 = np.zeros(k, np.int64), np.zeros(k, np.int64)
    np.minimum.at(x1, comp, starts)
    np.maximum.at(x2, comp, ends)
    np.minimum.at(y1, comp, rows)
    np.maximum.at(y2, comp, rows + 1)
    return np.stack([x1, y1, x2, y2], 1)


@register_role
class LogFeature(Role):
    """A log-scale output (log-mel, dB): the mean absolute error in the output's own units against
    ``0.5 dB`` expressed in them (``params["db_per_unit"]``: 1.0 for a 10 log10 output, 4.343 for ln).
    The score is ``1 - mean_error / allowed`` clipped to [0, 1], held when >= 0 (within the allowance)."""

    name = "log"
    metric = "mean abs error within 0.5 dB"
    default_min = 0.0
    MAX_DB = 0.5

    def allowed(self) -> float:
        return self.MAX_DB / float(self.params.get("db_per_unit", 10.0 / math.log(10.0)))

    def mean_error(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        err = n = 0.0
        for r, c in zip(reference, candidate):
            r64, c64 = _f64(r), _f64(c)
            if r64.shape != c64.shape:
                continue
            err += float(np.sum(np.abs(r64 - c64)))
            n += r64.size
        return err / n if n else 0.0

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        e = self.mean_error(reference, candidate)
        return float(np.clip(1.0 - e / self.allowed(), -1.0, 1.0))

    def describe(self) -> Dict[str, Any]:
        return {**super().describe(), "max_mean_error": self.allowed()}


@register_role
class Detections(Role):
    """A YOLO-style head: per anchor 4 box values then class scores (``layout``: ``"channels"`` for
    ``[N, 4+C, A]``, ``"anchors"`` for ``[N, A, 4+C]``). Boxes ``cx, cy, w, h`` where they are
    pixel boxes (``boxes="xywh"``); a YOLOX head before its decode (grid offsets, log sizes,
    objectness, classes) placed on the input image's grids (``boxes="grid"``, ``levels``
    ``[[rows, cols, stride], ...]``) decoded as YOLOX does; else each anchor is its own box
    (``boxes="anchor"``)."""

    name = "detections"
    metric = "box mAP@0.5 vs FP32 (classes weighted by FP32's boxes), the lowest at score thresholds 0.25, 0.4 and 0.5"
    default_min = 0.97
    #: a bootstrap over fewer images cannot see the kinds of image it lacks: layout-cdla's INT8 .tflite
    #: read 0.989 on 8 held-out pages, its 90% interval above 0.97, and 0.922-0.947 on three unseen
    #: sets of 24-48 pages; checked on 16, it read 0.978-0.992 on the same sets
    min_samples = 16
    #: the score thresholds a reader keeps boxes at (YOLO's 0.25; PicoDet's 0.4; SSD's 0.5): the arrays
    #: do not say which, so the role judges at each and the lowest counts (layout-cdla's INT8 .tflite:
    #: 0.991 at 0.25 where its own 0.4 reads 0.916)
    THRESHOLDS = (0.25, 0.4, 0.5)
    CONF = min(THRESHOLDS)
    IOU = 0.45

    def _dets(self, out: np.ndarray, conf: float) -> np.ndarray:
        from ..corpus.tasks import _classwise_nms, yolox_boxes

        pred = _f64(out)[0]
        if self.params.get("layout", "channels") == "channels":
            pred = pred.T
        grid = self.params.get("boxes") == "grid"  # a YOLOX head before its decode, placed on its grids
        if grid:
            decoded, scores = yolox_boxes(pred, self.params["levels"])
        else:
            scores = pred[:, self.params.get("first_score", 4):]
        cls = scores.argmax(1)
        best = scores[np.arange(len(cls)), cls]
        m = best > conf   # strict, as ultralytics' and PicoDet's post-processing
        if grid:
            return _classwise_nms(decoded[m].astype(np.float32), best[m].astype(np.float32), cls[m], self.IOU)
        if self.params.get("boxes", "xywh") == "xywh":
            cx, cy, w, h = pred[m, 0], pred[m, 1], pred[m, 2], pred[m, 3]
            boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
            return _classwise_nms(boxes.astype(np.float32), best[m].astype(np.float32), cls[m], self.IOU)
        idx = np.nonzero(m)[0].astype(np.float32)   # anchor i = the box [i, 0, i + 1, 1]: IoU 1 with itself only
        boxes = np.stack([idx, np.zeros_like(idx), idx + 1, np.ones_like(idx)], 1)
        return np.concatenate([boxes, best[m, None], cls[m, None]], 1).astype(np.float32)

    def detections(self, outputs: Sequence[np.ndarray], conf: float) -> List[np.ndarray]:
        """Per image (each batch split), its detections ``[x1, y1, x2, y2, score, class]``."""
        return [self._dets(o[j:j + 1], conf) for o in outputs for j in range(np.shape(o)[0])]

    def _anchor_map(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], conf: float
                    ) -> Optional[float]:
        """:func:`box_map` at ``conf`` where each anchor is its own box, vectorised: a candidate anchor
        is a hit when FP32 detects that same anchor with the same class. None when FP32 finds nothing
        at ``conf`` above the lowest threshold (a higher one then judges nothing)."""
        from ..corpus.tasks import _average_precision, class_mean

        def best(o: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
            pred = _f64(o).reshape(-1, *np.shape(o)[-2:])
            if self.params.get("layout", "channels") == "channels":
                pred = np.swapaxes(pred, 1, 2)
            scores = pred[:, :, self.params.get("first_score", 4):].reshape(-1, pred.shape[2] - self.params.get("first_score", 4))
            cls = scores.argmax(1)
            return scores[np.arange(len(cls)), cls], cls

        rs, rc = zip(*(best(r) for r in reference))
        cs, cc = zip(*(best(c) for c in candidate))
        r_s, r_c, c_s, c_c = (np.concatenate(x) for x in (rs, rc, cs, cc))
        truth = r_s > conf
        if not truth.any():
            return (1.0 if not (c_s > conf).any() else 0.0) if conf <= self.CONF else None
        # FP32's own detections under the threshold (same anchor, same class) are ignored, as box_map's ignore
        ranked = (c_s > conf / 10) & ~((r_s > conf / 10) & ~truth & (r_c == c_c))
        aps, boxes = [], []
        for k in np.unique(r_c[truth]):
            mine, truth_k = ranked & (c_c == k), truth & (r_c == k)
            boxes.append(int(np.sum(truth_k)))
            aps.append(_average_precision(c_s[mine], truth_k[mine].astype(float), boxes[-1]) if mine.any() else 0.0)
        return class_mean(aps, boxes)

    def _anchor_arrays(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> bool:
        """Each anchor its own box, compared array to array (:meth:`_anchor_map`)."""
        return self.params.get("boxes", "xywh") == "anchor" and all(np.shape(r) == np.shape(c)
                                                                   for r, c in zip(reference, candidate))

    def score(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
        if self._anchor_arrays(reference, candidate):
            at = [self._anchor_map(reference, candidate, t) for t in self.THRESHOLDS]
            return min(x for x in at if x is not None)
        return self.resampled_score(reference, candidate)

    def resampler(self, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]
                  ) -> Tuple[int, Callable[[np.ndarray], float]]:
        """Per image (batches split), detected once down to the lowest threshold's tenth and matched
        once per threshold (:func:`_map_at_thresholds`); a resampling only re-ranks."""
        if self._anchor_arrays(reference, candidate):
            return super().resampler(reference, candidate)
        low = self.CONF / 10
        return _map_at_thresholds(self.detections(reference, low), self.detections(candidate, low), self.THRESHOLDS)


def _map_at_thresholds(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], thresholds: Sequence[float]
                       ) -> Tuple[int, Callable[[np.ndarray], float]]:
    """``(samples, score of a resampling)`` of detections per sample ``[x1, y1, x2, y2, score, class]``
    decoded down to a tenth of the lowest threshold: at each threshold ``t``, :func:`box_map`'s rules
    (FP32's detections > t the truth, the candidate's > t/10 ranked, FP32's between them ignored)
    and the lowest score counting. Greedy NMS suppresses a box by higher-scoring boxes only, so the
    boxes > t of one low decode are those a decode at t keeps. A threshold above the lowest at which
    FP32 finds nothing in the samples picked judges nothing; at the lowest, finding nothing, the
    candidate must find nothing either."""
    from ..corpus.tasks import _match, below_threshold, map_of_matches

    def above(d: np.ndarray, t: float) -> np.ndarray:
        return d[d[:, 4] > t] if len(d) else d

    lowest = min(thresholds)
    per: List[Tuple[float, List[np.ndarray], List[Any]]] = []
    for t in thresholds:
        ref = [above(r, t) for r in reference]
        ignored = [below_threshold(above(r, t / 10), t) for r in reference]
        per.append((t, ref, [_match(r, above(c, t / 10), 0.5, i) for r, c, i in zip(ref, candidate, ignored)]))

    def score_of(pick: np.ndarray) -> float:
        scores = []
        for t, ref, matched in per:
            truth = [ref[i] for i in pick]
            if not any(len(r) for r in truth):
                if t == lowest:
                    scores.append(0.0 if any(len(above(candidate[i], t)) for i in pick) else 1.0)
                continue
            scores.append(map_of_matches(truth, [matched[i] for i in pick]))
        return min(scores)
    return len(reference), score_of


@register_role
class Scores(Detections):
    """A detector's score head ``[N, A, C]`` in [0, 1] beside its box head: each anchor its own box."""

    name = "scores"
    metric = "anchor mAP vs FP32"

    def __init__(self, min_score: Optional[float] = None, **params: Any):
        super().__init__(min_score, **{"layout": "anchors", "boxes": "anchor", "first_score": 0, **params})


@register_role
class DetectionHeads(Role):
    """An anchor-free detector's raw heads (GFL, PicoDet): per level a score head ``[N, A, C]`` and a
    distance head ``[N, A, 4R]`` (R bins per side), the level's anchors a ``ceil(H/s) x ceil(W/s)``
    grid of the input image at stride s. Decoded as the detector's post-processing does
    (:func:`sdk.corpus.tasks.decode_dfl_heads`, the corpus task's decoder): the bins' softmax
    expectation x stride around each anchor centre, the best class, class-wise NMS.
    ``params``: ``levels`` (per level ``[grid height, grid width, stride]``, score heads first in
    :attr:`outputs`, then the distance heads)."""

    name = "heads"
    metric = "box mAP@0.5 vs FP32 (decoded heads, classes weighted by FP32's boxes), the lowest at score thresholds 0.25, 0.4 and 0.5"
    default_min = 0.97
    min_samples = Detections.min_samples
    THRESHOLDS = Detections.THRESHOLDS
    CONF = Detections.CONF
    IOU = Detections.IOU

    def __init__(self, min_score: Optional[float] = None, outputs: Sequence[str] = (), **params: Any):
        super().__init__(min_score, **params)
        self.outputs = tuple(outputs)
        if not self.outputs or len(self.outputs) != 2 * len(params.get("levels", ())):
            raise InputError("the heads role needs a score and a distance head per level",
                             "let the quantizer recognise the heads, or judge the outputs one by one")

    def _dets(self, heads: Sequence[np.ndarray], conf: float) -> np.ndarray:
        from ..corpus.tasks import decode_dfl_heads

        levels = self.params["levels"]
        return decode_dfl_heads(heads[:len(levels)], heads[len(levels):], levels, conf, self.IOU)

    def score(self, reference: Sequence[Any], candidate: Sequence[Any]) -> float:
        return self.resampled_score(reference, candidate)

    def resampler(self, reference: Sequence[Any], candidate: Sequence[Any]
                  ) -> Tuple[int, Callable[[np.ndarray], float]]:
        """Per sample (the list of its heads' arrays), decoded once and matched once per threshold
        (:func:`_map_at_thresholds`); a resampling only re-ranks."""
        low = self.CONF / 10
        return _map_at_thresholds([self._dets(r, low) for r in reference], [self._dets(c, low) for c in candidate],
                                  self.THRESHOLDS)


#: strides a detector head's grid is tried at (:func:`_detection_heads`)
HEAD_STRIDES = (4, 8, 16, 32, 64, 128)


def image_size(feed: Mapping[str, Any]) -> Optional[Tuple[int, int]]:
    """``(height, width)`` of the first image-like input of a feed (4-D, 1-4 channels, NCHW or NHWC)."""
    for v in feed.values():
        shape = np.shape(v)
        if len(shape) == 4 and np.asarray(v).dtype.kind == "f":
            if 1 <= shape[1] <= 4 < min(shape[2], shape[3]):
                return int(shape[2]), int(shape[3])
            if 1 <= shape[3] <= 4 < min(shape[1], shape[2]):
                return int(shape[1]), int(shape[2])
    return None


def _detection_heads(names: Sequence[str], reference: Sequence[Mapping[str, np.ndarray]],
                     size: Optional[Tuple[int, int]]) -> Optional[Tuple[List[str], List[List[int]]]]:
    """``(score heads then distance heads, levels)`` where every 3-D output is one of a level's pair:
    a score head ``[N, A, C]`` in [0, 1] beside a distance head ``[N, A, 4R]`` (R >= 2, not in
    [0, 1]) with the same A, A a stride's grid of the input image ``size``; else None."""
    if size is None or not reference:
        return None
    first = reference[0]
    three = [n for n in names if n in first and np.ndim(first[n]) == 3]
    if len(three) < 2:
        return None
    scores: Dict[int, List[str]] = {}
    dists: Dict[int, List[str]] = {}
    for n in three:
        x = np.concatenate([np.asarray(r[n], np.float64).ravel() for r in reference if n in r])
        a, c = np.shape(first[n])[1:]
        if _unit(x) and c < a and not _distributions(np.asarray(first[n])):
            scores.setdefault(a, []).append(n)
        elif not _unit(x) and c % 4 == 0 and c >= 8:
            dists.setdefault(a, []).append(n)
    single = all(len(v) == 1 for v in list(scores.values()) + list(dists.values()))
    if sorted(scores) != sorted(dists) or not single or 2 * len(scores) != len(three):
        return None
    h, w = size
    levels = []
    for a in sorted(scores, reverse=True):
        fit = [s for s in HEAD_STRIDES if math.ceil(h / s) * math.ceil(w / s) == a]
        if not fit:
            return None
        s = fit[0]
        levels.append([math.ceil(h / s), math.ceil(w / s), s])
    order = sorted(scores, reverse=True)
    return [scores[a][0] for a in order] + [dists[a][0] for a in order], levels


# ----------------------------------------------------------------------------------- recognition

def _separate_objects(samples: Sequence[np.ndarray], threshold: float) -> bool:
    """Whether FP32's maps hold separate objects, read as regions (text lines: typically 3 or more
    regions per map, none over 5% of it), not one segment (a person: most of the mask in one region,
    with specks whose count no reader uses)."""
    counts, largest = [], []
    for s in samples:
        x = np.asarray(s)
        h, w = np.squeeze(x).shape[-2:]
        area = h * w
        for boxes in _regions(x > threshold):
            counts.append(len(boxes))
            sizes = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
            largest.append(float(sizes.max()) / area if len(boxes) else 0.0)
    return bool(counts) and float(np.median(counts)) >= 3 and float(np.median(largest)) <= 0.05


def _unit(x: np.ndarray) -> bool:
    return bool(x.size) and float(x.min()) >= -1e-6 and float(x.max()) <= 1.0 + 1e-6


def _distributions(x: np.ndarray) -> bool:
    return _unit(x) and bool(np.allclose(x.sum(-1), 1.0, atol=1e-3))


def _infer_one(samples: Sequence[np.ndarray], hint: Optional[Mapping[str, Any]],
               size: Optional[Tuple[int, int]] = None) -> Tuple[str, Dict[str, Any]]:
    if hint and hint.get("role"):
        return str(hint["role"]), {k: v for k, v in hint.items() if k != "role"}
    x = np.asarray(samples[0])
    if x.dtype.kind in "iub" or x.ndim == 0:
        return "cosine", {}
    allv = np.concatenate([np.asarray(s, np.float64).ravel() for s in samples])
    if x.ndim == 3 and x.shape[-1] > 1 and _distributions(x):
        return "classes", {}                          # softmax rows per position (before the anchor test:
        # a recognizer's [1, 40, 6625] has many more columns than rows, as a YOLO head has)
    if x.ndim == 3:
        a, b = x.shape[1], x.shape[2]
        small, large = min(a, b), max(a, b)
        if 5 <= small <= 260 and large >= 8 * small:
            pred = np.concatenate([np.asarray(s, np.float64)[0] for s in samples], 1 if a < b else 0)
            pred = pred.T if a < b else pred           # anchors x (4 + C)
            if b < a and _unit(pred) and not _distributions(pred):
                # every column a score: a score head beside its box head. Judged by cosine unless asked
                # (--output-role NAME=scores): anchor-by-anchor mAP kept 99 of layout-cdla's 102 layers
                # in float where its task mAP needs about 42
                return "cosine", {}
            if _unit(pred[:, 4:]):
                return "detections", _detection_params(samples, size)
        if x.shape[-1] > 1 and (_distributions(x) or (x.shape[1] == 1 and x.shape[-1] >= 10)):
            return "classes", {}                      # softmax rows per position, or [T, 1, C] CTC logits
    if x.ndim == 4 and (x.shape[1] == 1 or x.shape[-1] == 1) and x.shape[2] > 1 and _unit(allv):
        return "mask", {"threshold": 0.5, "regions": _separate_objects(samples, 0.5)}
    if x.ndim == 2 and x.shape[-1] > 1:
        norms = np.linalg.norm(np.concatenate([np.asarray(s, np.float64) for s in samples]), axis=1)
        if x.shape[-1] >= 16 and np.allclose(norms, 1.0, atol=1e-2):
            return "embedding", {}
        if _distributions(x):
            return "classes", {}
        # not a distribution: the values may be the answer (landmarks, a regression) or logits; the
        # values' closeness bounds both (a top-1 over pixel coordinates means nothing)
        return "values", {}
    return "cosine", {}


def infer_roles(names: Sequence[str], reference: Sequence[Mapping[str, np.ndarray]],
                hints: Optional[Mapping[str, Mapping[str, Any]]] = None,
                overrides: Optional[Mapping[str, str]] = None,
                size: Optional[Tuple[int, int]] = None) -> Dict[str, Role]:
    """Each output's role from FP32's outputs on a few samples (``reference``: per sample, output
    name -> array), the caller's graph ``hints`` (output -> ``{"role": ..., params}``), the user's
    ``overrides`` (output -> role name; an unknown output name is an InputError) and the input
    image's ``size`` (height, width: :func:`image_size`), which places a detector's heads on their
    grids (:class:`DetectionHeads`, one role object for every head)."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise InputError(f"--output-role names no output of the model: {', '.join(unknown)}",
                         f"outputs: {', '.join(names)}")
    roles: Dict[str, Role] = {}
    heads = _detection_heads(names, reference, size)
    if heads is not None and not set(heads[0]) & set(overrides) and not any((hints or {}).get(n) for n in heads[0]):
        group = DetectionHeads(outputs=heads[0], levels=heads[1])
        roles.update({n: group for n in heads[0]})
    for name in names:
        if name in roles:
            continue
        samples = [r[name] for r in reference if name in r]
        role, params = _infer_one(samples, (hints or {}).get(name), size) if samples else ("cosine", {})
        if name in overrides and overrides[name] != role:
            role = overrides[name]
            params = _detection_params(samples, size) if role == "detections" and samples else {}
        roles[name] = get_role(role, **params)
    return roles


def _detection_params(samples: Sequence[np.ndarray], size: Optional[Tuple[int, int]] = None) -> Dict[str, Any]:
    """Layout and box kind of a detector's output (``size``: the input image's, which places a
    YOLOX head's anchors on their grids)."""
    x = np.asarray(samples[0])
    if x.ndim != 3:
        raise InputError(f"an output of shape {list(x.shape)} cannot be read as detections",
                         "detections are [N, 4+C, A] or [N, A, 4+C]")
    channels = x.shape[1] < x.shape[2]
    pred = np.concatenate([np.asarray(s, np.float64)[0] for s in samples], 1 if channels else 0)
    pred = pred.T if channels else pred
    layout = "channels" if channels else "anchors"
    # pixel boxes: sizes >= 0 and centres spread over the image. A YOLOX head before its decode holds
    # grid offsets and log sizes (ddddocr-det: centres within -1.1..2.2, 99.7% of the log sizes >= 0),
    # and read as pixel boxes most are no box at all: FP32 against itself scored mAP 0.84
    wh_ok = float(np.mean(pred[:, 2:4] >= 0)) >= 0.99 and float(np.max(pred[:, :4])) > 1.5 \
        and min(float(np.ptp(pred[:, 0])), float(np.ptp(pred[:, 1]))) > _MIN_CENTRE_SPREAD_PX
    if wh_ok and Detections(layout=layout, boxes="xywh").score(samples, samples) < 1.0:
        wh_ok = False  # boxes that do not even match themselves are not boxes
    if wh_ok:
        return {"layout": layout, "boxes": "xywh"}
    levels = _yolox_levels(pred, x.shape[2] if channels else x.shape[1], size)
    if levels is not None:
        return {"layout": layout, "boxes": "grid", "levels": levels}
    return {"layout": layout, "boxes": "anchor"}


#: the stride sets of YOLOX heads (P3-P5, and P3-P6), one anchor per grid cell
YOLOX_STRIDES = ((8, 16, 32), (8, 16, 32, 64))


def _yolox_levels(pred: np.ndarray, anchors: int, size: Optional[Tuple[int, int]]) -> Optional[List[List[int]]]:
    """``[[rows, cols, stride], ...]`` where ``pred`` (samples' anchors x (4 + 1 + C), raw) is a YOLOX
    head of ``anchors`` per image of ``size``: one anchor per cell of the stride-8, 16, 32 (64) grids, objectness
    and class scores in [0, 1]; else None (YOLOv5/7 raw heads hold 3 anchors per cell)."""
    if size is None or pred.shape[1] < 6 or not _unit(pred[:, 4:]):
        return None
    h, w = size
    for strides in YOLOX_STRIDES:
        levels = [[math.ceil(h / s), math.ceil(w / s), s] for s in strides]
        if sum(r * c for r, c, _ in levels) == anchors:
            return levels
    return None


#: the least spread (px) of a detector's box centres over its anchors for them to be read as pixel boxes
_MIN_CENTRE_SPREAD_PX = 16.0
