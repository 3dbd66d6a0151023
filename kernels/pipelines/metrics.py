"""End-to-end metrics of a pipeline's outputs against a reference run of the same pipeline (FP32 on
the host): items are matched by box IoU >= 0.5 (greedy, best IoU first, per input).

- ``ocr``: ``metric`` = 1 - CER of the texts (edit distance over the reference's characters; a
  reference box with no match costs its whole text), ``box_recall``, ``box_precision``;
- ``detect-classify``: ``metric`` = label agreement: the share of reference items whose matched
  candidate (same detector class) has the same classifier label (no match: a disagreement),
  ``box_recall``, ``box_precision``.

Runs on the board too (plain Python + NumPy).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from ...metrics import edit_distance

__all__ = ["end_to_end_metric", "match_items", "edit_distance"]


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_items(ref: Sequence[Mapping[str, Any]], cand: Sequence[Mapping[str, Any]], iou: float = 0.5,
                same_class: bool = False) -> List[Tuple[int, int]]:
    """``[(ref index, cand index)]`` matched greedily by IoU (highest first), each used once."""
    pairs = []
    for i, r in enumerate(ref):
        for j, c in enumerate(cand):
            if same_class and r.get("class") != c.get("class"):
                continue
            v = _iou(r["box"], c["box"])
            if v >= iou:
                pairs.append((v, i, j))
    pairs.sort(key=lambda p: -p[0])
    used_r, used_c, out = set(), set(), []
    for _v, i, j in pairs:
        if i not in used_r and j not in used_c:
            used_r.add(i)
            used_c.add(j)
            out.append((i, j))
    return out


def end_to_end_metric(task: str, reference: Mapping[str, Sequence[Mapping[str, Any]]],
                      candidate: Mapping[str, Sequence[Mapping[str, Any]]]) -> Dict[str, Any]:
    """The task's metrics over every input of ``reference`` (input name -> items); ``metric`` is
    the one budgets use (1.0 = the same answer as the reference)."""
    n_ref = n_cand = n_match = 0
    errors = chars = agree = 0
    for name, ref_items in reference.items():
        cand_items = list(candidate.get(name, []))
        pairs = match_items(ref_items, cand_items, same_class=(task == "detect-classify"))
        n_ref, n_cand, n_match = n_ref + len(ref_items), n_cand + len(cand_items), n_match + len(pairs)
        by_ref = dict(pairs)
        for i, r in enumerate(ref_items):
            c = cand_items[by_ref[i]] if i in by_ref else None
            if task == "ocr":
                text = str(r.get("text", ""))
                chars += len(text)
                errors += edit_distance(text, str(c.get("text", ""))) if c is not None else len(text)
            elif task == "detect-classify":
                agree += int(c is not None and c.get("label") == r.get("label"))
    out: Dict[str, Any] = {"task": task, "inputs": len(reference), "reference_items": n_ref,
                           "candidate_items": n_cand, "matched": n_match,
                           "box_recall": n_match / n_ref if n_ref else 1.0,
                           "box_precision": n_match / n_cand if n_cand else (1.0 if not n_ref else 0.0)}
    if task == "ocr":
        out["one_minus_cer"] = max(0.0, 1.0 - errors / chars) if chars else 1.0
        out["metric"], out["metric_name"] = out["one_minus_cer"], "1-CER of the texts vs the reference"
    elif task == "detect-classify":
        out["label_agreement"] = agree / n_ref if n_ref else 1.0
        out["metric"], out["metric_name"] = out["label_agreement"], "label agreement on matched boxes vs the reference"
    else:
        out["metric"], out["metric_name"] = out["box_recall"], "box recall vs the reference"
    out["metric"] = float(np.float64(out["metric"]))
    return out
