"""Output comparison metrics shared by the quantizer's accuracy report and validation.

All functions take two arrays of the same shape (reference first) and return plain floats.
Runs on the board too: Python 3.8, NumPy only.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import InputError

__all__ = ["cosine_similarity", "snr_db", "max_abs_error", "top1_agreement", "compare_outputs", "edit_distance",
           "one_minus_error_rate", "error_counts"]


def _pair(ref: Any, out: Any) -> Tuple[np.ndarray, np.ndarray]:
    ref = np.asarray(ref, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64)
    if ref.shape != out.shape:
        raise InputError(f"cannot compare outputs of shapes {ref.shape} and {out.shape}")
    return ref, out


def cosine_similarity(ref: Any, out: Any) -> float:
    """Cosine of the flattened arrays; 1.0 when both are all zeros."""
    ref, out = _pair(ref, out)
    a, b = ref.ravel(), out.ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def snr_db(ref: Any, out: Any) -> float:
    """Signal-to-noise ratio in dB: 10*log10(sum(ref^2) / sum((ref-out)^2)); inf when identical."""
    ref, out = _pair(ref, out)
    noise = float(np.sum((ref - out) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def max_abs_error(ref: Any, out: Any) -> float:
    ref, out = _pair(ref, out)
    return float(np.max(np.abs(ref - out))) if ref.size else 0.0


def top1_agreement(ref: Any, out: Any, axis: int = -1) -> float:
    """Fraction of rows whose argmax along ``axis`` agrees (for classifier logits/probabilities)."""
    ref, out = _pair(ref, out)
    return float(np.mean(np.argmax(ref, axis=axis) == np.argmax(out, axis=axis)))


def compare_outputs(ref: Mapping[str, np.ndarray], out: Mapping[str, np.ndarray],
                    classifier: Optional[bool] = None) -> Dict[str, Dict[str, float]]:
    """Per output name: cosine, snr_db, max_abs_error, and top1_agreement when the output looks
    like class scores (2-D, or ``classifier=True``)."""
    result: Dict[str, Dict[str, float]] = {}
    for name, r in ref.items():
        if name not in out:
            raise InputError(f"output '{name}' is missing from the compared results")
        o = out[name]
        row = {"cosine": cosine_similarity(r, o), "snr_db": snr_db(r, o), "max_abs_error": max_abs_error(r, o)}
        if classifier or (classifier is None and np.ndim(r) == 2 and np.shape(r)[-1] > 1):
            row["top1_agreement"] = top1_agreement(r, o)
        result[name] = row
    return result


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (characters, tokens)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def error_counts(pairs: Iterable[Tuple[Sequence[Any], Sequence[Any]]]) -> Tuple[int, int]:
    """``(summed edit distance, summed reference length)`` over ``(reference, candidate)`` pairs."""
    errors = total = 0
    for ref, cand in pairs:
        errors += edit_distance(ref, cand)
        total += len(ref)
    return errors, total


def one_minus_error_rate(pairs: Iterable[Tuple[Sequence[Any], Sequence[Any]]]) -> float:
    """1 - (summed edit distance / summed reference length) over ``(reference, candidate)``
    sequence pairs (1 - CER for texts), at least 0; 1.0 when the references are all empty."""
    errors, total = error_counts(pairs)
    return max(0.0, 1.0 - errors / total) if total else 1.0
