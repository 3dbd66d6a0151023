"""Accuracy of an INT8 model against its FP32 original on held-out data: per-output cosine, SNR,
max abs error and top-1 agreement (the formulas of :mod:`sdk.metrics`, accumulated batch by batch),
the task metric (top-1 accuracy) when labels are given, per-layer sensitivity, and the fallback
that keeps the most sensitive layers in float until a budget holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import QuantizationError, first_line

__all__ = ["ort_session", "OutputAccumulator", "evaluate", "Evaluation", "add_intervals", "not_established",
           "layer_sensitivity", "Budget"]


def ort_session(proto_or_bytes: Any, threads: Optional[int] = None, unfused: bool = False, spinning: bool = True):
    """An onnxruntime CPU session on a ModelProto, serialized bytes or a model file's path; a model
    ORT refuses raises :class:`QuantizationError` (it must never be written out). ``unfused``: basic
    graph optimizations only, so each DequantizeLinear -> op -> QuantizeLinear runs as written, the
    exact int8 arithmetic (32-bit sums) of a target that is not this host, instead of this host's
    fused int8 kernels (which, on x86 without VNNI, saturate 8-bit weights' int16 pair sums).
    ``spinning=False``: the worker threads sleep between runs instead of spinning, for sessions that
    take turns with others (a spinning pool takes the cores the next session's run needs)."""
    import os

    import onnxruntime as ort

    src = proto_or_bytes
    data = src if isinstance(src, (bytes, bytearray, str, os.PathLike)) else src.SerializeToString()
    data = os.fspath(data) if isinstance(data, os.PathLike) else data
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if unfused:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        return ort.InferenceSession(data, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        first = first_line(exc)
        raise QuantizationError(f"onnxruntime refuses the quantized model: {first}") from exc


class OutputAccumulator:
    """Streaming cosine / SNR / max abs error / top-1 agreement of one output."""

    def __init__(self):
        self.dot = self.ref2 = self.out2 = self.noise = 0.0
        self.max_abs = 0.0
        self.top1_same = 0
        self.rows = 0
        self.classifier = True
        self.integer = False
        self.equal = self.elements = 0

    def update(self, ref: np.ndarray, out: np.ndarray) -> None:
        if np.asarray(ref).dtype.kind in "iub":  # indices / labels (argmax outputs): exact agreement
            self.integer = True
            same = np.asarray(ref) == np.asarray(out) if np.shape(ref) == np.shape(out) else np.zeros(1, bool)
            self.equal += int(np.sum(same))
            self.elements += max(int(np.size(ref)), int(np.size(out)))
        r, o = np.asarray(ref, np.float64), np.asarray(out, np.float64)
        if r.shape != o.shape:  # dynamic output length (sequence models): compare the common part
            n = min(r.size, o.size)
            r, o = r.reshape(-1)[:n], o.reshape(-1)[:n]
        self.dot += float(np.sum(r * o))
        self.ref2 += float(np.sum(r * r))
        self.out2 += float(np.sum(o * o))
        self.noise += float(np.sum((r - o) ** 2))
        if r.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(r - o))))
        if r.shape[-1:] != (1,) and (r.ndim == 2 or (r.ndim == 3 and _distributions(r))):
            # a classifier's [N, classes], or a sequence of class distributions [N, T, classes] (a CTC
            # recognizer's softmax: agreement per position, where 1-CER moves and the cosine barely does)
            self.top1_same += int(np.sum(np.argmax(r, -1) == np.argmax(o, -1)))
            self.rows += int(np.prod(r.shape[:-1]))
        else:
            self.classifier = False

    def result(self) -> Dict[str, float]:
        na, nb = math.sqrt(self.ref2), math.sqrt(self.out2)
        cos = 1.0 if na == nb == 0 else (0.0 if na == 0 or nb == 0 else self.dot / (na * nb))
        if not math.isfinite(cos):   # inf/NaN in an output (INT8 log(0)): no agreement, never a NaN that passes
            cos = 0.0
        ratio = self.ref2 / self.noise if self.noise else math.inf   # an INT8 log(0) makes noise inf
        snr = math.inf if self.noise == 0 else (10 * math.log10(ratio) if ratio > 0 else
                                                (-math.inf if ratio == 0 else math.nan))
        row = {"cosine": cos, "snr_db": snr, "max_abs_error": self.max_abs}
        if self.classifier and self.rows and not self.integer:
            row["top1_agreement"] = self.top1_same / self.rows
        if self.integer:
            row["element_agreement"] = self.equal / self.elements if self.elements else 1.0
        return row


def _distributions(x: np.ndarray) -> bool:
    """Every row along the last axis is a probability distribution (softmax output)."""
    return bool(x.size) and float(x.min()) >= 0.0 and float(x.max()) <= 1.0 + 1e-6 \
        and bool(np.allclose(x.sum(-1), 1.0, atol=1e-3))


class Evaluation(dict):
    """:func:`evaluate`'s result (a plain dict in reports), keeping each judged output's per-sample
    FP32 and INT8 arrays in ``pairs`` for :func:`add_intervals` (never serialized)."""

    pairs: Dict[str, Tuple[List[np.ndarray], List[np.ndarray]]]


def add_intervals(result: Mapping[str, Any], roles: Mapping[str, Any], keep_pairs: bool = False) -> None:
    """Each role-judged output of ``result`` (an :class:`Evaluation`) gets ``role_interval``, the
    range its score would likely fall in on other samples like these (:meth:`Role.interval`), and
    ``role_interval_keeps``: whether even its low end keeps the role's bound (few held-out samples
    often cannot: 16 of 16 rows agreeing cannot establish a top-1 agreement of 0.99), and
    ``role_established``: that, on at least the role's ``min_samples`` (else ``role_min_samples``
    says how many). The arrays are dropped after, unless ``keep_pairs``."""
    from .roles import INTERVAL_LEVEL

    pairs = getattr(result, "pairs", {})
    for k, role in roles.items():
        row = result["outputs"].get(k)
        if row is None or "role_score" not in row or k not in pairs or "role_interval" in row:
            continue      # not judged by its role, or its interval found already (the margin search asks again)
        lo, hi = role.interval(*pairs[k])
        keeps = bool(lo >= row["role_min"])
        few = result.get("samples", 0) < role.min_samples
        row.update({"role_interval": [lo, hi], "role_interval_level": INTERVAL_LEVEL,
                    "role_interval_keeps": keeps, "role_established": keeps and not few})
        if few:
            row["role_min_samples"] = role.min_samples
        counted = role.units(*pairs[k])
        if counted is not None:      # a share of units: how many would establish it (:func:`units_to_establish`)
            row["role_units"] = [int(counted[0]), int(counted[1])]
    if isinstance(result, Evaluation) and not keep_pairs:
        result.pairs = {}     # the arrays are not needed past this point


def establishable(result: Mapping[str, Any], roles: Mapping[str, Any]) -> bool:
    """Whether samples like these could establish every role's bound at all: FP32 judged against
    itself keeps it at its interval's low end. A bootstrap interval of a perfect score is [1, 1];
    a share of few units is not (160 of 160 characters: Wilson's 90% low end is 0.983, under 0.99)."""
    pairs = getattr(result, "pairs", {})
    judged = [k for k in roles if k in pairs]
    return bool(judged) and all(roles[k].interval(pairs[k][0], pairs[k][0])[0] >= roles[k].min_score
                                for k in judged)


def aims_at_margin(margin: bool, budget: Any, result: Mapping[str, Any], roles: Mapping[str, Any]) -> bool:
    """Whether the fallback aims past the score at a budget its samples establish
    (``QuantizeConfig.margin``): asked, a role-judged budget, and samples that could establish it."""
    return bool(margin and budget.active and budget.by_role and establishable(result, roles))


def established(result: Mapping[str, Any], roles: Mapping[str, Any]) -> bool:
    """Whether the low end of every role-judged output's interval keeps its bound (intervals
    added to ``result``'s rows, its arrays kept): a budget that holds with a margin for the
    samples it was checked on, not only on them."""
    add_intervals(result, roles, keep_pairs=True)
    return all(o.get("role_interval_keeps", True) for o in result["outputs"].values())


def units_to_establish(share: float, bound: float, level: float) -> Optional[int]:
    """The fewest units (rows, characters) at which a share ``share`` of them agreeing puts Wilson's
    interval's low end at ``bound`` or above; None when no number does (``share <= bound``)."""
    from .roles import wilson_interval

    if share <= bound:
        return None
    hi = 1
    while wilson_interval(share * hi, hi, level)[0] < bound:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if wilson_interval(share * mid, mid, level)[0] >= bound else (mid, hi)
    return hi


def _samples_to_establish(row: Mapping[str, Any], samples: int) -> Optional[int]:
    """About how many samples like these would establish ``row``'s bound: the units it needs
    (:func:`units_to_establish`) at the units per sample these gave; for a pooled score, the role's
    ``min_samples`` where these were fewer, else None."""
    units = row.get("role_units")
    if not units or not units[1] or not samples:
        return row.get("role_min_samples")
    need = units_to_establish(units[0] / units[1], row["role_min"], row["role_interval_level"])
    return None if need is None else math.ceil(need * samples / units[1])


def not_established(result: Mapping[str, Any], eval_given: bool) -> Optional[str]:
    """One line when the budget holds on these samples but they are too few to establish it (the
    low end of an output's interval from :func:`add_intervals` is below its bound), ending with the
    fix (more --eval samples, or, for the guard's held-out part, more calibration data, and, where
    the score is a share of units, about how many would do: PP-OCRv4's 8 held-out lines held 51
    characters, and 1-CER 0.99 takes 268 agreeing, so about 43 lines held out of 215); else None."""
    from .guard import HELD_OUT_FRACTION

    weak = [(k, o) for k, o in result["outputs"].items() if o.get("role_established") is False]
    if not weak:
        return None
    what = "; ".join(f"{k}: {o['role_metric'].split(' (')[0]} {o['role_score']:.4f}, "
                     + (f"{100 * o['role_interval_level']:.0f}% interval {o['role_interval'][0]:.4f}-"
                        f"{o['role_interval'][1]:.4f} below its bound {o['role_min']:g}" if not o.get("role_interval_keeps", False)
                        else f"an interval over fewer than the {o['role_min_samples']} samples it needs")
                     for k, o in weak)
    n = result["samples"]
    sized = [_samples_to_establish(o, n) for _, o in weak]
    need = max(x for x in sized if x is not None) if sized and None not in sized else None
    if eval_given:
        fix = "give --eval more samples" + (f" (about {need} samples like these)" if need else "")
    else:
        fix = "give more calibration data" + (
            f" (about {math.ceil(need / HELD_OUT_FRACTION)} samples like these: {need} held out)" if need else "") + \
            ", or --eval with more samples"
    return f"the budget holds on {n} samples, but so few cannot establish it ({what}): {fix}"


def evaluate(ref_sess, q_sess, batches: Iterable[Tuple[Dict[str, np.ndarray], List[Any], int]],
             label_output: Optional[str] = None, ref_cache: Optional[List[Dict[str, np.ndarray]]] = None,
             task_metric: Optional[Callable[[Any, Any], float]] = None,
             roles: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Run both sessions on every batch; returns ``{"samples", "outputs": {name: metrics},
    "task": {"metric": "top1_accuracy", "fp32", "int8", "drop_points"} (when labels)}``.
    ``ref_cache``: a list the FP32 outputs are kept in (batch by batch) on the first call and read
    from on the next ones (the same batches again: the fallback search evaluates many candidates)."""
    names = [o.name for o in ref_sess.get_outputs()]
    acc = {n: OutputAccumulator() for n in names}
    samples = 0
    counts = [0, 0, 0]  # correct FP32, correct INT8, labelled
    label_output = label_output or names[0]
    filled = ref_cache is not None and len(ref_cache) > 0
    refs: List[List[np.ndarray]] = []
    cands: List[List[np.ndarray]] = []
    sizes: List[int] = []
    for b, (feed, labels, n) in enumerate(batches):
        if filled:
            ref = ref_cache[b]  # type: ignore[index]
        else:
            ref = dict(zip(names, ref_sess.run(names, feed)))
            if ref_cache is not None:
                ref_cache.append(ref)
        out = dict(zip(names, q_sess.run(names, feed)))
        if task_metric is not None or roles:
            refs.append([ref[k] for k in names])
            cands.append([out[k] for k in names])
        for k in names:
            acc[k].update(ref[k], out[k])
        samples += n
        sizes.append(n)
        _count_labels(labels, ref[label_output], out[label_output], counts)
    correct_ref, correct_q, labelled = counts
    result = Evaluation(samples=samples, outputs={k: a.result() for k, a in acc.items()})
    per_output = {k: (_per_sample([r[i] for r in refs], sizes), _per_sample([c[i] for c in cands], sizes))
                  for i, k in enumerate(names) if k in (roles or {})}
    result.pairs = judge_by_role(roles or {}, per_output, result["outputs"])
    if task_metric is not None:
        result["task_metric"] = float(task_metric(refs, cands))
    if labelled:
        fp32, int8 = 100.0 * correct_ref / labelled, 100.0 * correct_q / labelled
        result["task"] = {"metric": "top1_accuracy", "output": label_output, "labelled": labelled,
                          "fp32": fp32, "int8": int8, "drop_points": fp32 - int8}
    return result


def judge_by_role(roles: Mapping[str, Any], per_output: Mapping[str, Tuple[List[Any], List[Any]]],
                  rows: Dict[str, Dict[str, Any]]) -> Dict[str, Tuple[List[Any], List[Any]]]:
    """Each output's role score (:mod:`sdk.quantize.roles`: what the task reads from it) into its row
    of ``rows``; ``per_output``: output -> (FP32, candidate) arrays per sample. A role over several
    outputs is scored once, on its first one; the others say whose score judges them
    (``judged_with``). Returns the pairs each score was taken on (for :func:`add_intervals`)."""
    pairs: Dict[str, Tuple[List[Any], List[Any]]] = {}
    for k, role in roles.items():
        if k not in per_output or k not in rows:
            continue
        if role.outputs:
            if k != role.outputs[0]:
                rows[k].update({"role": role.name, "judged_with": role.outputs[0]})
                continue
            if any(o not in per_output for o in role.outputs):
                continue
            pairs[k] = tuple([list(x) for x in zip(*(per_output[o][j] for o in role.outputs))]  # type: ignore[assignment]
                             for j in (0, 1))
        else:
            pairs[k] = per_output[k]
        rows[k].update({"role": role.name, "role_metric": role.metric, "role_score": role.score(*pairs[k]),
                        "role_min": role.min_score})
    return pairs


def _per_sample(arrays: List[np.ndarray], sizes: Sequence[int]) -> List[np.ndarray]:
    """Batched outputs split into one array per sample where their first axis is the batch (the
    bootstrap resamples samples, not batches; every role's score is the same either way)."""
    if all(n == 1 for n in sizes):
        return arrays
    out: List[np.ndarray] = []
    for a, n in zip(arrays, sizes):
        a = np.asarray(a)
        out.extend([a[j:j + 1] for j in range(n)] if n > 1 and a.ndim and a.shape[0] == n else [a])
    return out


def _count_labels(labels: List[Any], r: np.ndarray, o: np.ndarray, counts: List[int]) -> None:
    """Top-1 hits of FP32 and INT8 against the labels of a batch (when it has them)."""
    if not labels or any(lab is None for lab in labels):
        return
    y = np.asarray([np.asarray(lab).reshape(-1)[0] for lab in labels]).astype(np.int64)
    if r.ndim == 2 and r.shape[0] == len(y):
        counts[0] += int(np.sum(np.argmax(r, -1) == y))
        counts[1] += int(np.sum(np.argmax(o, -1) == y))
        counts[2] += len(y)


@dataclass
class Budget:
    """What the INT8 model must keep: ``max_drop`` points of the task metric (needs labels), and/or a
    minimum cosine of every float output against FP32 (for integer outputs such as argmax indices:
    the fraction of equal elements)."""

    max_drop: Optional[float] = None
    min_cosine: Optional[float] = None
    min_task_metric: Optional[float] = None
    #: the first output's top-1 agreement with FP32, when it is a classifier's ``[N, classes]`` or a
    #: sequence of class distributions ``[N, T, classes]`` (per position)
    min_top1_agreement: Optional[float] = None
    #: every output judged by its role (:mod:`sdk.quantize.roles`: detections by box mAP, masks by IoU,
    #: ...) against the role's bound; ``min_cosine`` then bounds only the outputs of the ``cosine`` role
    by_role: bool = False

    def describe(self) -> str:
        parts = ([f"max drop {self.max_drop:g} points"] if self.max_drop is not None else []) + \
            ([f"min cosine {self.min_cosine:g}"] if self.min_cosine is not None else []) + \
            ([f"task metric >= {self.min_task_metric:g}"] if self.min_task_metric is not None else []) + \
            ([f"classifier top-1 agreement >= {self.min_top1_agreement:g}"]
             if self.min_top1_agreement is not None else []) + \
            (["each output by its role"] if self.by_role else [])
        return ", ".join(parts) or "none"

    @property
    def active(self) -> bool:
        return self.max_drop is not None or self.min_cosine is not None or self.min_task_metric is not None \
            or self.min_top1_agreement is not None

    def holds(self, result: Mapping[str, Any]) -> bool:
        if self.max_drop is not None and "task" in result and result["task"]["drop_points"] > self.max_drop:
            return False
        if self.max_drop is not None and "task" not in result:
            # no labels: the drop is measured on top-1 agreement with FP32, in points
            agree = [o.get("top1_agreement") for o in result["outputs"].values() if "top1_agreement" in o]
            if agree and 100.0 * (1.0 - min(agree)) > self.max_drop:
                return False
        for o in result["outputs"].values():
            if self.by_role and o.get("judged_with"):
                continue                     # one role over several outputs: scored on the first
            if self.by_role and "role_score" in o:
                if o["role_score"] < o["role_min"]:
                    return False
                if o["role"] != "cosine":
                    continue                 # judged by what the task reads, not by its cosine
            if self.min_cosine is not None and _similarity(o) < self.min_cosine:
                return False
        if self.min_task_metric is not None and result.get("task_metric", 1.0) < self.min_task_metric:
            return False
        first: Mapping[str, Any] = next(iter(result["outputs"].values()), {})
        if self.min_top1_agreement is not None and first.get("top1_agreement", 1.0) < self.min_top1_agreement:
            return False
        return True


def _similarity(row: Mapping[str, Any]) -> float:
    """What ``min_cosine`` bounds: the cosine of a float output, the fraction of equal elements of an
    integer one (argmax indices: a cosine of class ids means nothing)."""
    return float(row["element_agreement"]) if "element_agreement" in row else float(row["cosine"])


def layer_sensitivity(build: Callable[[Sequence[str]], Any], layers: Sequence[str], feeds: Sequence[Dict[str, np.ndarray]],
                      ref_outputs: Sequence[Dict[str, np.ndarray]], progress: Optional[Callable[[int, int], None]] = None,
                      session: Callable[[Any], Any] = ort_session) -> List[Dict[str, Any]]:
    """Quantize each layer alone (``build([layer])`` returns the model) and measure the final
    outputs against FP32 on ``feeds``: the layer's own noise and how much of it reaches the outputs,
    in one measurement. ``session(model)`` opens it (``get_outputs()``, ``run(names, feed)``: ONNX
    Runtime's interface; a format adapter passes its own). Sorted most sensitive first (lowest
    cosine, then SNR)."""
    rows = []
    for i, layer in enumerate(layers):
        sess = session(build([layer]))
        names = [o.name for o in sess.get_outputs()]
        accs = {n: OutputAccumulator() for n in names}
        for feed, ref in zip(feeds, ref_outputs):
            for n, v in zip(names, sess.run(names, feed)):
                accs[n].update(ref[n], v)
        res = {n: a.result() for n, a in accs.items()}
        rows.append({"layer": layer, "cosine": min(r["cosine"] for r in res.values()),
                     "snr_db": min(r["snr_db"] for r in res.values())})
        if progress:
            progress(i + 1, len(layers))
    rows.sort(key=lambda r: (r["cosine"], r["snr_db"]))
    return rows
