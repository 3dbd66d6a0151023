"""Accuracy fallback without one evaluation per layer.

1. Rank: one run of the FP32 and the INT8 model over a few samples, every quantized layer's output
   exposed in both; a layer's score is how much relative error it adds (its output's error minus the
   largest error already on its inputs): the layers where the INT8 model departs from FP32.
2. Search: keep the top ``k`` layers in float for ``k`` = 1, 2, 4, ... until the budget holds, then
   bisect between the last two ``k``: about ``2 log2(layers)`` evaluations instead of one per layer.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .graph import GraphIndex

__all__ = ["rank_layers", "search_fallback"]


def _expose(proto: Any, names: Sequence[str]) -> Any:
    import onnx
    from onnx import TensorProto, helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    have = {o.name for o in out.graph.output}
    for n in names:
        if n not in have:
            out.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    return out


def rank_layers(ref_proto: Any, q_proto: Any, layers: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]],
                session: Callable[[Any], Any]) -> List[Dict[str, Any]]:
    """Layers sorted by the relative squared error they add (largest first): ``[{"layer", "error",
    "added_error", "cost"}]``; ``cost`` is the layer's multiply-accumulates (its output elements for
    ops without weights) at the data's shapes, what keeping it in float gives up.
    ``session(proto)`` makes an inference session. (Ranking by error per cost was tried on the
    held-back PP-OCRv4 recognizer: the search kept as many layers in float, at the same latency.)"""
    idx = GraphIndex(ref_proto)
    by_name = {n.name: n for n in ref_proto.graph.node}
    layer_nodes = [by_name[name] for name in layers if name in by_name and by_name[name].output]
    outs = {n.output[0] for n in layer_nodes}
    ins = {i for n in layer_nodes for i in n.input if i and idx.is_activation(i) and i in idx.producer}
    rel, seen = _relative_errors(ref_proto, q_proto, sorted(outs | ins), feeds, session)
    shapes: Dict[str, List[Any]] = {name: list(t.dims) for name, t in idx.inits.items()}
    shapes.update({k: list(np.shape(v)) for k, v in (feeds[0].items() if feeds else ())})
    shapes.update(seen)
    rows = []
    for node in layer_nodes:
        err = rel.get(node.output[0], 0.0)
        before = max([rel.get(i, 0.0) for i in node.input if i in rel] or [0.0])
        rows.append({"layer": node.name, "error": err, "added_error": err - before,
                     "cost": _cost(node, shapes)})
    rows.sort(key=lambda r: -r["added_error"])
    return rows


def _cost(node: Any, shapes: Dict[str, List[Any]]) -> int:
    """What keeping a layer in float gives up: its multiply-accumulates at the data's shapes
    (:func:`sdk.formats.onnx.node_macs`), or its output elements for ops without weights."""
    from ..formats.onnx import node_macs

    macs = node_macs(node, shapes)
    if macs is not None:
        return macs
    out = shapes.get(node.output[0])
    return int(np.prod(out)) if out is not None else 1


def _relative_errors(ref_proto: Any, q_proto: Any, names: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]],
                     session: Callable[[Any], Any]) -> Tuple[Dict[str, float], Dict[str, List[Any]]]:
    """``||fp32 - int8||^2 / ||fp32||^2`` of each tensor in ``names`` over ``feeds``, and each tensor's
    shape on the first feed."""
    ref_s, q_s = session(_expose(ref_proto, names)), session(_expose(q_proto, names))
    avail = {o.name for o in q_s.get_outputs()} & {o.name for o in ref_s.get_outputs()}
    names = [n for n in names if n in avail]
    noise = dict.fromkeys(names, 0.0)
    power = dict.fromkeys(names, 0.0)
    shapes: Dict[str, List[Any]] = {}
    for feed in feeds:
        r = ref_s.run(names, dict(feed))
        q = q_s.run(names, dict(feed))
        for n, a, b in zip(names, r, q):
            a64 = np.asarray(a, np.float64)
            shapes.setdefault(n, list(a64.shape))
            noise[n] += float(np.sum((a64 - np.asarray(b, np.float64)) ** 2))
            power[n] += float(np.sum(a64 * a64))
    return {n: noise[n] / power[n] if power[n] > 0 else 0.0 for n in names}, shapes


def search_fallback(order: Sequence[str], holds: Callable[[Sequence[str]], Tuple[bool, Any]],
                    limit: Optional[int] = None, start: int = 0) -> Tuple[List[str], Any, bool, int]:
    """The shortest prefix of ``order`` (at most ``limit`` layers) whose float fallback makes
    ``holds(prefix)`` true, found by doubling then bisecting; ``start``: a prefix length known to
    fail. Returns ``(prefix, result of the last holding or last tried evaluation, holds, evaluations)``."""
    n = len(order) if limit is None else min(limit, len(order))
    results: Dict[int, Any] = {}

    def probe(k: int) -> bool:
        ok, results[k] = holds(order[:k])
        return ok

    lo, hi = min(start, n), None  # lo: largest k known to fail; hi: smallest k known to hold
    k = min(n, 2 * lo) if lo else 1
    while k <= n and hi is None:
        if probe(k):
            hi = k
        else:
            lo = k
            k = n if k < n and 2 * k > n else 2 * k
    if hi is None:
        last = max(results) if results else 0
        return list(order[:last]), results.get(last), False, len(results)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid
    return list(order[:hi]), results[hi], True, len(results)
