"""Accuracy fallback without one evaluation per layer.

1. Rank by each layer's estimated share of the output error, ``own noise x downstream gain``:
   - own noise: one run over a few samples of the FP32 model with, beside each quantized layer, a
     copy of its int8 form (its Q/DQ and quantized weights) fed FP32's own inputs;
   - gain: the layers cut in topological order into a few groups, each group alone in int8 against
     FP32 at the model's outputs (one evaluation per group), divided by the group's own noise.
   (The error of a layer's output in the full INT8 model mixes in what earlier layers did, and a
   layer that only amplifies it gains nothing from float: on layout-cdla that ranking kept 97 of 102
   convs in float, where the first 25 alone in float give mAP 0.998.)
2. Search: keep the top ``k`` layers in float for ``k`` = 1, 2, 4, ... until the budget holds, then
   bisect between the last two ``k``: about ``2 log2(layers)`` evaluations instead of one per layer.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .calibrate import _FOLDED
from .graph import GraphIndex

__all__ = ["int8_only", "rank_layers", "search_fallback", "widen_to_margin"]


#: the topological groups whose output error calibrates the layers' gains (one evaluation each)
GAIN_GROUPS = 8
#: held-out samples each group evaluation runs on
GAIN_SAMPLES = 8


def rank_layers(ref_proto: Any, q_proto: Any, layers: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]],
                session: Callable[[Any], Any],
                only_int8: Optional[Callable[[Sequence[str]], Any]] = None) -> List[Dict[str, Any]]:
    """Layers sorted by their estimated share of the output error (largest first): ``[{"layer",
    "score", "added_error", "gain", "cost"}]``.

    ``added_error``: the layer's int8 form (``q_proto``'s Q/DQ and weights) run on FP32's inputs,
    against FP32's output (relative squared error, mean over channels); ``gain``: the output error of the layer's group
    alone in int8 over the group's summed ``added_error`` (1.0 without ``only_int8``); ``score``:
    their product; ``cost``: the layer's multiply-accumulates (output elements for ops without
    weights) at the data's shapes, what keeping it in float gives up. ``session(proto)`` makes an
    inference session; ``only_int8(layers)`` builds the INT8 model with only ``layers`` in int8."""
    idx = GraphIndex(ref_proto)
    by_name = {n.name: n for n in ref_proto.graph.node}
    layer_nodes = [by_name[name] for name in layers if name in by_name and by_name[name].output]
    position = {n.name: i for i, n in enumerate(ref_proto.graph.node)}
    layer_nodes.sort(key=lambda n: position[n.name])
    ins = sorted({i for n in layer_nodes for i in n.input if i and idx.is_activation(i) and i in idx.producer})
    outputs = [o.name for o in ref_proto.graph.output if o.type.tensor_type.elem_type == 1]  # FLOAT
    side, pairs = _side_by_side(ref_proto, q_proto, [n.name for n in layer_nodes], ins)
    gain_feeds = feeds[:GAIN_SAMPLES] if only_int8 is not None else []
    added, seen, refs = _pair_errors(side, pairs, ins, feeds, session, outputs, len(gain_feeds))
    gains = (_group_gains([n.name for n in layer_nodes], added, gain_feeds, outputs, refs, session, only_int8)
             if only_int8 is not None else {})
    shapes: Dict[str, List[Any]] = {name: list(t.dims) for name, t in idx.inits.items()}
    shapes.update({k: list(np.shape(v)) for k, v in (feeds[0].items() if feeds else ())})
    shapes.update(seen)
    rows = []
    for node in layer_nodes:
        own, gain = added.get(node.name, 0.0), gains.get(node.name, 1.0)
        rows.append({"layer": node.name, "score": own * gain, "added_error": own, "gain": gain,
                     "cost": _cost(node, shapes)})
    rows.sort(key=lambda r: -r["score"])
    return rows


def _group_gains(ordered: Sequence[str], added: Mapping[str, float], feeds: Sequence[Mapping[str, np.ndarray]],
                 outputs: Sequence[str], refs: Sequence[Sequence[np.ndarray]], session: Callable[[Any], Any],
                 only_int8: Callable[[Sequence[str]], Any]) -> Dict[str, float]:
    """Each layer's gain: the relative output error of its topological group alone in int8 (summed
    over the float ``outputs``, FP32's being ``refs`` per feed) over the group's summed own noise."""
    n_groups = min(GAIN_GROUPS, len(ordered))
    if n_groups < 2 or not feeds:
        return {}
    gains: Dict[str, float] = {}
    bounds = np.linspace(0, len(ordered), n_groups + 1).round().astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        group = list(ordered[a:b])
        q_s = session(only_int8(group))
        err = 0.0
        for feed, ref in zip(feeds, refs):
            for want, got in zip(ref, q_s.run(list(outputs), dict(feed))):
                want64 = np.asarray(want, np.float64)
                power = float(np.sum(want64 * want64))
                if power > 0:
                    err += float(np.sum((want64 - np.asarray(got, np.float64)) ** 2)) / power
        own = sum(added.get(name, 0.0) for name in group)
        for name in group:
            gains[name] = err / len(feeds) / own if own > 0 else 0.0
    return gains


def _side_by_side(ref_proto: Any, q_proto: Any, layers: Sequence[str],
                  expose: Sequence[str] = (), fused: bool = False) -> Tuple[Any, Dict[str, Tuple[str, str]]]:
    """``ref_proto`` plus, for each of ``layers``, a copy of its node in ``q_proto`` whose activation
    inputs are ``q_proto``'s Q/DQ applied to FP32's tensors (weights as ``q_proto`` holds them), with
    both outputs (and ``expose``) as graph outputs. Returns the model and ``{layer: (FP32 output,
    int8 copy's output)}``. ``fused``: a layer read only by a Relu/Clip whose output ``q_proto``
    quantizes (the activation folded into the layer) is paired at that activation's output."""
    import onnx

    from .qdq import fp32_named

    q_proto = fp32_named(q_proto)      # its quantized graph outputs under FP32's names
    side = onnx.ModelProto()
    side.CopyFrom(ref_proto)
    g = side.graph
    q_nodes = {n.name: n for n in q_proto.graph.node}
    have_domains = {o.domain for o in side.opset_import}
    side.opset_import.extend(o for o in q_proto.opset_import if o.domain not in have_domains)  # com.microsoft
    producer = {o: n for n in q_proto.graph.node for o in n.output}
    q_inits = {t.name: t for t in q_proto.graph.initializer}
    have_inits = {t.name for t in g.initializer}
    copied: Dict[str, str] = {}  # q_proto node name (or activation Q/DQ key) -> output name in ``side``

    def need(names: Sequence[str]) -> None:
        for name in names:
            if name and name not in have_inits and name in q_inits:
                g.initializer.append(q_inits[name])
                have_inits.add(name)

    def clone(node: Any, inputs: Sequence[str], suffix: str) -> str:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = node.name + suffix
        del new.input[:]
        new.input.extend(inputs)
        del new.output[:]
        new.output.extend(o + suffix if o else o for o in node.output)
        g.node.append(new)
        need(node.input[1:] if node.op_type in ("QuantizeLinear", "DequantizeLinear") else ())
        return new.output[0]

    def source(name: str) -> str:
        """The tensor of ``side`` standing for ``q_proto``'s input ``name`` on FP32's data."""
        dq = producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear":
            return name
        if dq.name in copied:
            return copied[dq.name]
        q = producer.get(dq.input[0])
        if q is None:  # stored int8 (weights, biases): that DequantizeLinear as it is
            need(dq.input)
            g.node.append(dq)
            copied[dq.name] = dq.output[0]
        elif q.op_type == "QuantizeLinear":  # float tensor -> Q -> DQ, the float tensor taken from FP32
            need(q.input[:1])
            q_out = clone(q, list(q.input), "__side")
            copied[dq.name] = clone(dq, [q_out] + list(dq.input[1:]), "__side")
        else:
            return name
        return copied[dq.name]

    quantizer_of = {n.input[0]: n for n in q_proto.graph.node if n.op_type == "QuantizeLinear" and n.input}
    dequantizer_of = {n.input[0]: n for n in q_proto.graph.node if n.op_type == "DequantizeLinear" and n.input}
    readers: Dict[str, List[Any]] = {}
    for n in q_proto.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    pairs: Dict[str, Tuple[str, str]] = {}
    for layer in layers:
        node = q_nodes.get(layer)
        if node is None or not node.output or not node.output[0]:
            continue
        inputs = [source(i) if i else i for i in node.input]
        need([i for i in node.input if i])   # stored int8 weights read directly (DynamicQuantizeLSTM's)
        out = clone(node, inputs, "__int8")
        q = quantizer_of.get(node.output[0])
        dq = dequantizer_of.get(q.output[0]) if q is not None else None
        fp32_out = node.output[0]
        act = readers.get(fp32_out, [])
        if fused and q is None and len(act) == 1 and act[0].op_type in _FOLDED and act[0].output:
            out = clone(act[0], [out] + list(act[0].input[1:]), "__int8")
            fp32_out = act[0].output[0]
            q = quantizer_of.get(fp32_out)
            dq = dequantizer_of.get(q.output[0]) if q is not None else None
        if q is not None and dq is not None:  # its output's own Q/DQ: what float consumers read (the stem
            # conv of layout-cdla: 7e-6 before it, mAP 0.88 with that conv alone in int8)
            out = clone(dq, [clone(q, [out] + list(q.input[1:]), "__int8")] + list(dq.input[1:]), "__int8")
        pairs[layer] = (fp32_out, out)
    have = {o.name for o in g.output}
    for name in [n for pair in pairs.values() for n in pair] + list(expose):
        if name not in have:
            g.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
            have.add(name)
    return side, pairs


def int8_only(ref_proto: Any, q_proto: Any, layers: Sequence[str]) -> Any:
    """``ref_proto`` with only ``layers`` in the int8 form ``q_proto`` gives them (their Q/DQ and
    quantized weights), every other layer in float: for a Q/DQ model at hand without the builder
    that made it (``sdk debug diff``'s candidate), what ``rank_layers``' ``only_int8`` builds."""
    side, pairs = _side_by_side(ref_proto, q_proto, layers, fused=True)
    del side.graph.output[:]
    side.graph.output.extend(ref_proto.graph.output)
    producer = {o: n for n in side.graph.node for o in n.output if o}
    for fp32_name, int8_name in pairs.values():   # each layer's int8 copy takes over its FP32 output's name
        if fp32_name not in producer:              # a tensor FP32's graph does not make: that layer stays float
            continue
        fp32_node, int8_node = producer[fp32_name], producer[int8_name]
        fp32_node.output[list(fp32_node.output).index(fp32_name)] = fp32_name + "__fp32"
        int8_node.output[list(int8_node.output).index(int8_name)] = fp32_name
    return side


def _pair_errors(side: Any, pairs: Mapping[str, Tuple[str, str]], expose: Sequence[str],
                 feeds: Sequence[Mapping[str, np.ndarray]], session: Callable[[Any], Any],
                 outputs: Sequence[str] = (), keep: int = 0
                 ) -> Tuple[Dict[str, float], Dict[str, List[Any]], List[List[np.ndarray]]]:
    """``||a - b||^2 / ||a||^2`` of each ``(a, b)`` output pair of ``side`` over ``feeds``; the
    shapes (on the first feed) of the pairs' first tensors and of ``expose``; and FP32's ``outputs``
    (model outputs ``side`` keeps) on the first ``keep`` feeds."""
    sess = session(side)
    avail = {o.name for o in sess.get_outputs()}
    pairs = {k: v for k, v in pairs.items() if v[0] in avail and v[1] in avail}
    names = sorted({n for pair in pairs.values() for n in pair} | (set(expose) & avail) | set(outputs))
    noise: Dict[str, Any] = dict.fromkeys(pairs, 0.0)
    power: Dict[str, Any] = dict.fromkeys(pairs, 0.0)
    shapes: Dict[str, List[Any]] = {}
    kept: List[List[np.ndarray]] = []
    for i, feed in enumerate(feeds):
        got = dict(zip(names, sess.run(names, dict(feed))))
        if i < keep:
            kept.append([got[o] for o in outputs])
        for name, value in got.items():
            shapes.setdefault(name, list(np.shape(value)))
        for layer, (a_name, b_name) in pairs.items():
            a, b = np.asarray(got[a_name], np.float32), np.asarray(got[b_name], np.float32)
            if a.shape == b.shape:
                noise[layer] = noise[layer] + _channel_sums(a - b)
                power[layer] = power[layer] + _channel_sums(a)
    return {k: _channel_mean(noise[k], power[k]) for k in pairs}, shapes, kept


def _channel_sums(x: np.ndarray) -> Any:
    """Sum of squares per channel (axis 1) where there are channels, else the total; float64 sums."""
    if x.ndim < 2:
        flat = x.reshape(-1)
        return float(np.dot(flat.astype(np.float64), flat))
    x3 = x.reshape(x.shape[0], x.shape[1], -1)
    return np.einsum("ncx,ncx->c", x3, x3, dtype=np.float64)


def _channel_mean(noise: Any, power: Any) -> float:
    """Mean over channels of noise / power: a channel crushed by a range set by larger channels
    (the next layer may scale it back up) counts as much as a large one."""
    noise, power = np.atleast_1d(noise), np.atleast_1d(power)
    live = power > 0
    return float(np.mean(noise[live] / power[live])) if live.any() else 0.0


def _cost(node: Any, shapes: Dict[str, List[Any]]) -> int:
    """What keeping a layer in float gives up: its multiply-accumulates at the data's shapes
    (:func:`sdk.formats.onnx.node_macs`), or its output elements for ops without weights."""
    from ..formats.onnx import node_macs

    macs = node_macs(node, shapes)
    if macs is not None:
        return macs
    out = shapes.get(node.output[0])
    return int(np.prod(out)) if out is not None else 1


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


def widen_to_margin(order: Sequence[str], prefix: Sequence[str], last: Any, established_now: bool,
                    holds_with_margin: Callable[[Sequence[str]], Tuple[bool, Any]],
                    limit: Optional[int] = None) -> Tuple[List[str], Any, bool, int]:
    """After ``prefix``, the fewest layers whose score holds (``last``: its evaluation): on to the
    fewest whose samples also establish the budget (``holds_with_margin``), searched from there.
    Returns ``(prefix, its evaluation, established, evaluations)``; where no prefix within ``limit``
    establishes it, the score-holding ``prefix`` and ``last`` stay."""
    if established_now:
        return list(prefix), last, True, 0
    wide, res, held, evals = search_fallback(order, holds_with_margin, limit, start=len(prefix))
    return (list(wide), res, True, evals) if held else (list(prefix), last, False, evals)
