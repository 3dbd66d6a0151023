"""Calibration methods: a histogram in, a clipping range ``(lo, hi)`` out.

Every method works from the same :class:`~sdk.quantize.stats.TensorStats`, so changing the method
never re-runs inference. To add one, write ``def my_method(stats, symmetric, **params) -> (lo, hi)``
and decorate it with ``@register_method("name", defaults)``.

Symmetric schemes get ``(-t, t)``; asymmetric schemes get a range that holds zero. All methods
return the exact min/max when the data is constant or too small to histogram.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ..errors import InputError, QuantizationError
from ..registry import Registry
from .stats import TensorStats

__all__ = ["register_method", "method_names", "get_method", "compute_range"]

Range = Tuple[float, float]
MethodFn = Callable[..., Range]

#: Method name -> ``(fn, default params)``; a plugin's entry point (group
#: ``edgesdk.calibration_methods``) may name a bare function (no default params).
METHODS: "Registry[Union[MethodFn, Tuple[MethodFn, Dict[str, Any]]]]" = Registry(
    "calibration method", entry_points="edgesdk.calibration_methods", load_error=QuantizationError, known_label="known")


def register_method(name: str, defaults: Optional[Dict[str, Any]] = None) -> Callable[[MethodFn], MethodFn]:
    """Decorator: register a calibration method under ``name`` with default ``params``."""

    def deco(fn: MethodFn) -> MethodFn:
        METHODS.register(name, (fn, dict(defaults or {})))
        return fn

    return deco


def method_names() -> List[str]:
    return METHODS.names()


def get_method(name: str) -> Tuple[MethodFn, Dict[str, Any]]:
    """``(fn, default params)`` of the method ``name``; unknown: :class:`UnknownNameError`."""
    entry = METHODS.load(name)
    return entry if isinstance(entry, tuple) else (entry, {})


def compute_range(stats: TensorStats, method: str, symmetric: bool, **params: Any) -> Range:
    """The clipping range of one tensor by ``method`` (params override the method's defaults)."""
    fn, defaults = get_method(method)
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise InputError(f"calibration method '{method}' has no parameter {', '.join(unknown)}",
                         f"parameters: {', '.join(defaults) or 'none'}")
    if not stats.seen:
        return (0.0, 0.0)
    if stats.width == 0.0:  # only zeros
        return (0.0, 0.0)
    lo, hi = fn(stats, symmetric, **{**defaults, **params})
    return _finish(stats, lo, hi, symmetric)


def _finish(stats: TensorStats, lo: float, hi: float, symmetric: bool) -> Range:
    if symmetric:
        t = max(abs(lo), abs(hi))
        return (-t, t)
    # never wider than the data, always holding zero
    lo = max(lo, stats.min)
    hi = min(hi, stats.max)
    return (min(lo, 0.0), max(hi, 0.0))


def _from_threshold(stats: TensorStats, t: float, symmetric: bool) -> Range:
    if symmetric:
        return (-t, t)
    return (max(stats.min, -t), min(stats.max, t))


@register_method("minmax")
def minmax(stats: TensorStats, symmetric: bool) -> Range:
    """The exact min and max seen."""
    return (stats.min, stats.max)


@register_method("percentile", {"percentile": 99.99})
def percentile(stats: TensorStats, symmetric: bool, percentile: float) -> Range:
    """Clip at the ``percentile`` of ``|x|`` (symmetric) or of each tail (asymmetric: the same
    mass, ``(100 - percentile) / 2`` percent, cut from each side)."""
    if not 0 < percentile <= 100:
        raise InputError(f"percentile {percentile} is not in (0, 100]")
    if symmetric:
        h, w = stats.abs_hist()
        c = np.cumsum(h)
        j = int(np.searchsorted(c, c[-1] * percentile / 100.0))
        return _from_threshold(stats, min((j + 1) * w, stats.absmax), True)
    c = np.cumsum(stats.hist)
    tail = c[-1] * (100.0 - percentile) / 200.0
    edges = stats.edges()
    j_lo = int(np.searchsorted(c, tail, side="right"))
    j_hi = int(np.searchsorted(c, c[-1] - tail))
    return (max(edges[j_lo], stats.min), min(edges[j_hi + 1], stats.max))


@register_method("entropy", {"num_quantized_bins": 128, "saturation": 1e-3})
def entropy(stats: TensorStats, symmetric: bool, num_quantized_bins: int, saturation: float) -> Range:
    """The threshold of ``|x|`` minimising KL(P || Q), where P is the histogram clipped at the
    threshold (outliers folded into the last bin) and Q its quantization to ``num_quantized_bins``
    levels (TensorRT's EntropyCalibrator2 idea, candidates from ``num_quantized_bins`` bins up, levels
    spread evenly). Exact zeros are left out of the histogram (as ncnn does): after a ReLU they can
    be half the values and would pull the threshold far down. A side whose extreme value holds at
    least ``saturation`` of the non-zero values (ReLU6 / Clip outputs) keeps its bound. Every
    candidate is evaluated at once, in closed form, from prefix sums of the histogram."""
    h, w = stats.abs_hist(exclude_zeros=True)
    t = min(_kl_threshold(h.astype(np.float64), int(num_quantized_bins)) * w, stats.absmax)
    lo, hi = _from_threshold(stats, t, symmetric)
    # a point mass at an extreme is a saturating activation (ReLU6, Clip): its bound is signal, and
    # clipping below it would move every saturated value, so that side keeps the bound
    nonzero = max(1, stats.count - stats.zeros)
    if stats.max > 0 and stats.at_max >= saturation * nonzero:
        hi = max(hi, stats.max)
    if stats.min < 0 and stats.at_min >= saturation * nonzero:
        lo = min(lo, stats.min)
    if symmetric:
        t = max(-lo, hi)
        return (-t, t)
    return (lo, hi)


def _kl_threshold(h: np.ndarray, nq: int) -> int:
    """Number of bins ``i`` (a threshold at ``i`` bin widths) that minimises the KL divergence."""
    nz = np.nonzero(h)[0]
    if len(nz) == 0:
        return 1
    n = int(nz[-1]) + 1  # last non-empty bin
    if n <= nq:
        return n
    h = h[:n]
    total = h.sum()
    plogp = np.where(h > 0, h * np.log(np.where(h > 0, h, 1.0)), 0.0)
    C = np.concatenate([[0.0], np.cumsum(h)])
    NZ = np.concatenate([[0], np.cumsum(h > 0)])
    L = np.concatenate([[0.0], np.cumsum(plogp)])

    cand = np.arange(nq, n + 1)                        # thresholds (in bins) to evaluate, shape K
    g = np.arange(nq + 1)
    edges = (g[None, :] * cand[:, None] + nq - 1) // nq  # level k holds bins [ceil(k*i/nq), ceil((k+1)*i/nq))
    start, end = edges[:, :-1], edges[:, 1:]           # K x nq
    S = C[end] - C[start]                              # Q is built from the bins as they are...
    Z = NZ[end] - NZ[start]
    Lg = L[end] - L[start]
    last = cand - 1                                    # ...P folds the outliers into its last bin
    p_last = h[last]
    outl = total - C[cand]
    p_new = p_last + outl
    Lg[:, -1] += np.where(p_new > 0, p_new * np.log(np.where(p_new > 0, p_new, 1.0)), 0.0) \
        - np.where(p_last > 0, p_last * np.log(np.where(p_last > 0, p_last, 1.0)), 0.0)
    S_p = S.copy()
    S_p[:, -1] += outl
    # KL(P||Q) with P = p'/total and Q_b = (S_g / Z_g) / C[i] on the non-empty bins of group g:
    #   sum_b p'_b log p'_b / total - sum_g S'_g log(S_g / Z_g) / total + log(C[i] / total)
    with np.errstate(divide="ignore", invalid="ignore"):
        logq = np.where(S > 0, np.log(np.where(S > 0, S, 1.0) / np.maximum(Z, 1)), 0.0)
        kl = (Lg.sum(axis=1) - (S_p * logq).sum(axis=1)) / total + np.log(C[cand] / total)
    kl = np.where((p_last == 0) & (outl > 0), np.inf, kl)  # P has mass where Q has none
    best = int(np.argmin(kl))
    return int(cand[best])


@register_method("mse", {"bits": 8})
def mse(stats: TensorStats, symmetric: bool, bits: int) -> Range:
    """The clipping threshold minimising the expected squared error of quantize-dequantize:
    rounding noise ``step^2 / 12`` inside the range, ``(|x| - t)^2`` outside."""
    one_sided = stats.min >= 0 and not symmetric
    levels = (2 ** bits - 1) if one_sided else (2 ** (bits - 1) - 1)
    h, w = stats.abs_hist()
    h = h.astype(np.float64)
    n = int(np.nonzero(h)[0][-1]) + 1 if h.any() else 1
    h = h[:n]
    x = (np.arange(n) + 0.5) * w                       # bin centres
    cand = np.arange(1, n + 1)
    t = cand * w
    # suffix sums for the clipped part: sum_{b >= i} h_b (x_b - t)^2
    H = np.concatenate([np.cumsum(h[::-1])[::-1], [0.0]])
    HX = np.concatenate([np.cumsum((h * x)[::-1])[::-1], [0.0]])
    HXX = np.concatenate([np.cumsum((h * x * x)[::-1])[::-1], [0.0]])
    clip = HXX[cand] - 2 * t * HX[cand] + t * t * H[cand]
    inside = H[0] - H[cand]
    step = t / levels
    err = clip + inside * step * step / 12.0
    best = int(np.argmin(err))
    return _from_threshold(stats, min(float(t[best]), stats.absmax), symmetric)


def expected_error(stats: TensorStats, r: Range, symmetric: bool, bits: int = 8) -> float:
    """Expected squared error per value of quantize-dequantize with range ``r``, from the signed
    histogram: rounding noise ``step^2 / 12`` inside the range, the distance to the bound outside."""
    lo, hi = float(r[0]), float(r[1])
    levels = (2 ** bits - 2) if symmetric else (2 ** bits - 1)
    if hi <= lo or not stats.seen:
        return 0.0
    h = stats.hist.astype(np.float64)
    e = stats.edges()
    x = np.clip((e[:-1] + e[1:]) / 2.0, stats.min, stats.max)  # bin centres, inside the data
    step = (hi - lo) / levels
    inside = (x >= lo) & (x <= hi)
    err = np.where(inside, step * step / 12.0, np.square(np.where(x < lo, lo - x, x - hi)))
    total = h.sum()
    return float((h * err).sum() / total) if total else 0.0


AUTO_CANDIDATES: Tuple[Tuple[str, Dict[str, Any]], ...] = (
    ("minmax", {}), ("percentile", {"percentile": 99.99}), ("percentile", {"percentile": 99.999}), ("mse", {}))


@register_method("auto")
def auto(stats: TensorStats, symmetric: bool) -> Range:
    """Per tensor, the candidate range (minmax, percentile 99.99/99.999, mse) with the least expected
    quantization error on this tensor's signed histogram (:func:`expected_error`): clipping outliers
    pays only where they are rare, and a saturating or bounded activation keeps its bound. (Entropy
    is left out: it minimises a divergence, not the error, and costs 20x the others per tensor.)"""
    best: Optional[Tuple[float, Range]] = None
    for name, params in AUTO_CANDIDATES:
        fn, defaults = get_method(name)
        r = _finish(stats, *fn(stats, symmetric, **{**defaults, **params}), symmetric)
        err = expected_error(stats, r, symmetric)
        if best is None or err < best[0]:
            best = (err, r)
    return best[1] if best is not None else (stats.min, stats.max)
