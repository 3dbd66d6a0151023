"""Activation-weight balancing (SmoothQuant-style scale migration) for MatMul/Gemm fed by a LayerNorm.

A LayerNorm's output ``X`` (features on the last axis) often holds a few channels far larger than
the rest: one per-tensor int8 scale then crushes the others. For each input channel ``j`` of the
MatMul/Gemm layers reading ``X``::

    s_j = max|X_j| ** a / max|W_j| ** (1 - a)        (a = ALPHA = 0.5 by default)

the LayerNorm's affine ``gamma`` and ``beta`` are divided by ``s`` (so it writes ``X / s``) and the
weights' input rows multiplied by ``s``: ``(X / s) (diag(s) W) = X W``, the FP32 function unchanged,
while the activation's outliers move into the weights (quantized per output channel).

A site is balanced only when every consumer of ``X`` is a MatMul/Gemm with a constant 2-D weight of
its own (or a ``Shape``, which reads no values): all of them share one ``s``, the maximum of their
weights per input channel. Any other reader (a residual Add, a second op) would see ``X / s``: such
a site is left alone. Both forms of LayerNorm are recognised: the ``LayerNormalization`` op (axis -1)
and the written-out form paddle2onnx and torch exports emit
(``ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul(gamma), Add(beta)``).

``max|X_j|`` comes from the calibration pass (:class:`~sdk.quantize.stats.TensorStats` keeps
per-channel minima and maxima along the last axis for the tensors :func:`balance_sites` names), so
the rescaled tensors' ranges follow exactly: ``min_j(min X_j / s_j)``, ``max_j(max X_j / s_j)``.

This module reads and writes ONNX graphs: it is the ONNX adapter's half of balancing; the scale
rule (:func:`smoothing_scales`) is plain arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .graph import GraphIndex
from .stats import CalibrationStats

__all__ = ["ALPHA", "Site", "balance_sites", "smoothing_scales", "balance", "Balanced"]

#: migration strength: 0 leaves the activation as it is, 1 moves all of its range into the weights
ALPHA = 0.5
#: ops that read a tensor without reading its values
_SHAPE_ONLY = ("Shape",)


@dataclass(frozen=True)
class Site:
    """One balanceable LayerNorm: its output ``tensor``, the activations whose values ``/ s``
    changes (``scaled``: the output, and the written-out form's ``x_hat * gamma``), the affine
    initializers ``gamma`` and ``beta`` (None: no shift), the nodes that hold them, the
    MatMul/Gemm ``consumers`` and, per consumer, its weight and the axis of its input channels."""

    tensor: str
    scaled: Tuple[str, ...]
    gamma: str
    beta: Optional[str]
    form: str
    consumers: Tuple[str, ...]
    weights: Tuple[Tuple[str, int], ...]


def _const_vector(idx: GraphIndex, name: str, channels: Optional[int] = None) -> bool:
    t = idx.inits.get(name)
    if t is None or t.data_type != 1:
        return False
    dims = [int(d) for d in t.dims]
    if not dims or any(d != 1 for d in dims[:-1]):
        return False
    return channels is None or dims[-1] == channels


def _only_reader(idx: GraphIndex, name: str) -> bool:
    """``name`` (an initializer) is read by one node input only (its rescaling touches nothing else)."""
    return len(idx.consumers.get(name, [])) == 1


def _written_out(idx: GraphIndex, add: Any) -> Optional[Tuple[str, str, str]]:
    """``(x_hat * gamma tensor, gamma, beta)`` when ``add`` is the last Add of a written-out LayerNorm."""
    if add.op_type != "Add" or len(add.input) != 2:
        return None
    for k in (0, 1):
        mm_name, beta = add.input[k], add.input[1 - k]
        mul = idx.producer.get(mm_name)
        if mul is None or mul.op_type != "Mul" or not _const_vector(idx, beta):
            continue
        for j in (0, 1):
            d_name, gamma = mul.input[j], mul.input[1 - j]
            div = idx.producer.get(d_name)
            if div is None or div.op_type != "Div" or not _const_vector(idx, gamma):
                continue
            sub, root = idx.producer.get(div.input[0]), idx.producer.get(div.input[1])
            if sub is None or sub.op_type != "Sub" or root is None or root.op_type != "Sqrt":
                continue
            if len(idx.consumers.get(mm_name, [])) != 1 or mm_name in idx.graph_outputs:
                continue
            if int(idx.inits[gamma].dims[-1]) != int(idx.inits[beta].dims[-1]):
                continue
            return mm_name, gamma, beta
    return None


def _consumer_weight(idx: GraphIndex, node: Any, slot: int, channels: int) -> Optional[Tuple[str, int]]:
    """``(weight, input-channel axis)`` of a MatMul/Gemm reading the LayerNorm at input ``slot``."""
    if node.op_type not in ("MatMul", "Gemm") or slot != 0 or len(node.input) < 2:
        return None
    w = idx.inits.get(node.input[1])
    if w is None or w.data_type != 1 or len(w.dims) != 2 or not _only_reader(idx, node.input[1]):
        return None
    axis = 0
    if node.op_type == "Gemm":
        if int(idx.attr(node, "transA", 0)):
            return None
        axis = 1 if int(idx.attr(node, "transB", 0)) else 0
    return (node.input[1], axis) if int(w.dims[axis]) == channels else None


def balance_sites(proto: Any, idx: Optional[GraphIndex] = None) -> List[Site]:
    """The LayerNorm -> MatMul/Gemm sites of ``proto`` that can be balanced (see the module)."""
    idx = idx if idx is not None else GraphIndex(proto)
    sites = []
    for node in idx.graph.node:
        if not node.output or not node.output[0]:
            continue
        if node.op_type == "LayerNormalization":
            axis = int(idx.attr(node, "axis", -1))
            shape = idx.shape.get(node.input[0])
            if axis != -1 and not (shape and axis == len(shape) - 1):
                continue
            if any(o for o in node.output[1:]):  # Mean / InvStdDev read elsewhere
                continue
            gamma, beta = node.input[1], (node.input[2] if len(node.input) > 2 and node.input[2] else None)
            if not _const_vector(idx, gamma) or (beta is not None and not _const_vector(idx, beta)):
                continue
            scaled: Tuple[str, ...] = (node.output[0],)
            form = "LayerNormalization"
        else:
            found = _written_out(idx, node)
            if found is None:
                continue
            scaled, gamma, beta = (node.output[0], found[0]), found[1], found[2]
            form = "written out"
        if not _only_reader(idx, gamma) or (beta is not None and not _only_reader(idx, beta)):
            continue
        x = node.output[0]
        channels = int(idx.inits[gamma].dims[-1])
        readers = idx.consumers.get(x, [])
        if x in idx.graph_outputs or not readers:
            continue
        consumers: List[str] = []
        weights: List[Tuple[str, int]] = []
        for reader, slot in readers:
            if reader.op_type in _SHAPE_ONLY:
                continue
            w = _consumer_weight(idx, reader, slot, channels)
            if w is None:
                consumers = []
                break
            consumers.append(reader.name)
            weights.append(w)
        if consumers:
            sites.append(Site(x, scaled, gamma, beta, form, tuple(consumers), tuple(weights)))
    return sites


def smoothing_scales(x_absmax: np.ndarray, w_absmax: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """``s_j = max|X_j|^a / max|W_j|^(1-a)`` per input channel (1 where either is 0 or not finite)."""
    x = np.asarray(x_absmax, np.float64)
    w = np.asarray(w_absmax, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.power(x, alpha) / np.power(w, 1.0 - alpha)
    ok = (x > 0) & (w > 0) & np.isfinite(s) & (s > 0)
    return np.where(ok, s, 1.0)


@dataclass
class Balanced:
    """The balanced model, the ranges of the rescaled activations (exact min/max of ``X / s``),
    the sites balanced with their scales, the statistics with the rescaled tensors' channel
    means divided by ``s`` (bias correction reads them), and the sites skipped with why."""

    proto: Any
    ranges: Dict[str, Tuple[float, float]]
    scales: Dict[str, np.ndarray]
    sites: List[Site]
    stats: CalibrationStats
    skipped: Dict[str, str]


def balance(proto: Any, sites: Sequence[Site], stats: CalibrationStats, alpha: float = ALPHA) -> Balanced:
    """A copy of ``proto`` with ``sites`` balanced (see the module); a site whose tensors have no
    per-channel extremes in ``stats`` is skipped (statistics from before balancing was known)."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    inits = {t.name: t for t in out.graph.initializer}
    ranges: Dict[str, Tuple[float, float]] = {}
    scales: Dict[str, np.ndarray] = {}
    done: List[Site] = []
    skipped: Dict[str, str] = {}
    tensors: Dict[str, Any] = dict(stats.tensors)
    for site in sites:
        ext = [stats.tensors.get(t) for t in site.scaled]
        if any(e is None or e.channel_min is None or e.channel_max is None for e in ext):
            skipped[site.tensor] = "no per-channel statistics of the LayerNorm output (calibrate again)"
            continue
        x = stats.tensors[site.tensor]
        assert x.channel_min is not None and x.channel_max is not None
        x_absmax = np.maximum(np.abs(x.channel_min), np.abs(x.channel_max))
        w_absmax = np.zeros_like(x_absmax)
        if len(x_absmax) != int(inits[site.gamma].dims[-1]):
            skipped[site.tensor] = "its statistics do not have one value per feature"
            continue
        for w_name, axis in site.weights:
            w = numpy_helper.to_array(inits[w_name])
            w_absmax = np.maximum(w_absmax, np.abs(w).max(axis=1 - axis))
        s = smoothing_scales(x_absmax, w_absmax, alpha)
        for name in (site.gamma, site.beta):
            if name is not None:
                v = numpy_helper.to_array(inits[name]).astype(np.float64)
                inits[name].CopyFrom(numpy_helper.from_array((v / s).astype(np.float32).reshape(v.shape), name))
        for w_name, axis in site.weights:
            w = numpy_helper.to_array(inits[w_name]).astype(np.float64)
            ws = w * (s[:, None] if axis == 0 else s[None, :])
            inits[w_name].CopyFrom(numpy_helper.from_array(ws.astype(np.float32), w_name))
        for t in site.scaled:
            e = stats.tensors[t]
            assert e.channel_min is not None and e.channel_max is not None
            lo, hi = e.channel_min / s, e.channel_max / s
            ranges[t] = (float(lo.min()), float(hi.max()))
            mean = e.channel_mean()
            view = replace(e, channel_min=lo, channel_max=hi)
            if mean is not None and e.channel_sum is not None and len(e.channel_sum) == len(s):
                view = replace(view, channel_sum=e.channel_sum / s)
            tensors[t] = view
        scales[site.tensor] = s
        done.append(site)
    view_stats = CalibrationStats(stats.model_sha256, tensors, stats.samples, stats.meta)
    return Balanced(out, ranges, scales, done, view_stats, skipped)


def describe(site: Site, alpha: float = ALPHA) -> str:
    """How the report names a balanced layer's precision."""
    return f"int8 (balanced, a={alpha:g})"


def ranges_with(base: Mapping[str, Tuple[float, float]], balanced: Balanced) -> Dict[str, Tuple[float, float]]:
    """``base`` with the rescaled activations' ranges replaced."""
    out = dict(base)
    out.update(balanced.ranges)
    return out
