"""Exact float rewrites of an ONNX graph that ONNX Runtime does not make itself, each one pass fewer
over an activation:

- **hard-swish written out** (paddle2onnx's ``x * clip(x + 3, 0, 6) / 6``: Add, Clip, Mul, Div) becomes
  ``x * HardSigmoid(x)`` (alpha 1/6, beta 0.5): two ops instead of four. layout-cdla's 94 such chains
  cost half its FP32 time on ONNX Runtime's CPU provider (74 ms -> 37 ms once rewritten).
- **a scalar affine after a Conv or BatchNormalization** (PP-LCNetV3's "learnable affine block":
  ``y * s + a`` as Mul and Add of one-element constants) is folded into the layer's weights and bias.
- **a scalar affine before a Conv without padding** (the same block after an activation, read by a
  pointwise conv): ``conv(x * s + a) = conv'(x)`` with weights ``s W`` and bias ``B + a sum(W)``,
  summed over each output channel's inputs and kernel. Padding would pad ``x * s + a`` with zeros where
  ``conv'`` pads ``x``, so a padded Conv is left alone. ppocr-v4-rec: 12 such pairs, FP32 13.4 ->
  12.1 ms at 1 thread (1.11x) on ONNX Runtime's CPU provider.
- **per-channel affine ops after a ConvTranspose** (a bias Add, a BatchNormalization, a Mul by one value
  per channel) are folded into its weights (scaled on their output-channel axis 1) and bias.

All keep the names of the tensors after the rewritten part (the last op's output), so outputs and the
tensors other nodes read are unchanged; the results equal the original up to float rounding.
``simplify(proto)`` returns a rewritten copy and what it did; ``simplify(proto, hardswish_op=True)``
writes each hard-swish as one ONNX ``HardSwish`` instead, for a target that has the kernel (TFLite's
HARD_SWISH).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from .onnx import drop_unused_initializers

__all__ = ["simplify", "fuse_hardswish", "fold_scalar_affine", "fold_affine_into_next_conv", "fold_into_conv_transpose",
           "hardswish_chains", "count_hardswish"]

#: how far a constant may be from 3, 6 or 1/6 and still be one (paddle2onnx writes 6.0 and 3.0 exactly)
_TOL = 1e-6


class _Index:
    """Consumers, constants and outputs of a list of nodes (no shape inference: cheap)."""

    def __init__(self, nodes: Sequence[Any], consts: Mapping[str, Any], outputs: Sequence[str],
                 names: Sequence[str] = ()):
        self.consts: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in consts.items()}
        self.consumers: Dict[str, List[Any]] = defaultdict(list)
        for n in nodes:
            for i in n.input:
                if i:
                    self.consumers[i].append(n)
        self.outputs = set(outputs)
        self.names: Set[str] = set(self.consts) | {o for n in nodes for o in n.output} | \
            {n.name for n in nodes} | set(names)

    @classmethod
    def of_graph(cls, graph: Any) -> "_Index":
        from onnx import numpy_helper

        consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for n in graph.node:
            if n.op_type == "Constant" and n.output and len(n.attribute) == 1 and n.attribute[0].name == "value":
                consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        return cls(graph.node, consts, [o.name for o in graph.output], [i.name for i in graph.input])

    def only_consumer(self, name: str) -> Optional[Any]:
        cons = self.consumers.get(name, [])
        return cons[0] if len(cons) == 1 and name not in self.outputs else None

    def scalar(self, name: str) -> Optional[float]:
        v = self.consts.get(name)
        if v is None or v.size != 1 or v.dtype.kind != "f":
            return None
        return float(v.reshape(-1)[0])

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name


def _near(value: Optional[float], want: float) -> bool:
    return value is not None and abs(value - want) <= _TOL * max(1.0, abs(want))


def _clip_bounds(idx: _Index, clip: Any) -> Tuple[Optional[float], Optional[float]]:
    """A Clip's min and max: inputs 1 and 2 (opset 11+) or attributes (before); None when not constant."""
    import onnx

    if len(clip.input) > 1:
        lo = idx.scalar(clip.input[1]) if clip.input[1] else None
        hi = idx.scalar(clip.input[2]) if len(clip.input) > 2 and clip.input[2] else None
        return lo, hi
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in clip.attribute}
    return attrs.get("min"), attrs.get("max")


def _other_input(node: Any, name: str) -> Optional[str]:
    others = [i for i in node.input if i != name]
    return others[0] if len(node.input) == 2 and len(others) == 1 else None


def _is_sixth(idx: _Index, node: Any, name: str) -> bool:
    """``node`` divides ``name`` by 6 or multiplies it by 1/6."""
    if node.op_type == "Div":
        return len(node.input) == 2 and node.input[0] == name and _near(idx.scalar(node.input[1]), 6.0)
    return node.op_type == "Mul" and _near(idx.scalar(_other_input(node, name) or ""), 1.0 / 6.0)


def _hardswish_at(idx: _Index, add: Any) -> Optional[Tuple[str, List[Any]]]:
    """``(x, nodes)`` when ``add`` starts ``x * clip(x + 3, 0, 6) / 6`` (the Mul and the scaling by
    1/6 in either order); else None."""
    if add.op_type != "Add" or len(add.input) != 2:
        return None
    three = [i for i in add.input if _near(idx.scalar(i), 3.0)]
    x = _other_input(add, three[0]) if len(three) == 1 else None
    if x is None or x in idx.consts:
        return None
    clip = idx.only_consumer(add.output[0])
    if clip is None or clip.op_type != "Clip" or clip.input[0] != add.output[0]:
        return None
    lo, hi = _clip_bounds(idx, clip)
    if not (_near(lo, 0.0) and _near(hi, 6.0)):
        return None
    first = idx.only_consumer(clip.output[0])
    if first is None:
        return None
    if first.op_type == "Mul" and _other_input(first, clip.output[0]) == x:
        last = idx.only_consumer(first.output[0])
        ok = last is not None and _is_sixth(idx, last, first.output[0])
    else:
        last = idx.only_consumer(first.output[0]) if _is_sixth(idx, first, clip.output[0]) else None
        ok = last is not None and last.op_type == "Mul" and _other_input(last, first.output[0]) == x
    return (x, [add, clip, first, last]) if ok and last is not None else None


def _hardsigmoid_times_x(idx: _Index, hs: Any) -> Optional[Tuple[str, List[Any]]]:
    """``(x, [hs, mul])`` when ``hs`` is HardSigmoid(alpha 1/6, beta 0.5) of ``x`` and its only
    reader multiplies it by ``x``: a hard-swish (PyTorch's export before opset 14; this module's form)."""
    import onnx

    if hs.op_type != "HardSigmoid":
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in hs.attribute}
    if not (_near(attrs.get("alpha", 0.2), 1.0 / 6.0) and _near(attrs.get("beta", 0.5), 0.5)):
        return None
    x = hs.input[0]
    mul = idx.only_consumer(hs.output[0])
    if mul is None or mul.op_type != "Mul" or _other_input(mul, hs.output[0]) != x:
        return None
    return x, [hs, mul]


def hardswish_chains(nodes: Sequence[Any], consts: Mapping[str, Any], outputs: Sequence[str],
                     written_only: bool = False) -> List[Tuple[str, List[Any]]]:
    """Every hard-swish among ``nodes``, written out or as ``x * HardSigmoid(x)`` (not with
    ``written_only``): ``(x, its nodes)``, the last node's output being the hard-swish's."""
    idx = _Index(nodes, consts, outputs)
    found: List[Tuple[str, List[Any]]] = []
    taken: Set[int] = set()
    for n in nodes:
        hit = _hardswish_at(idx, n) or (None if written_only else _hardsigmoid_times_x(idx, n))
        if hit is not None and not any(id(m) in taken for m in hit[1]):
            found.append(hit)
            taken.update(id(m) for m in hit[1])
    return found


def count_hardswish(graph: Any) -> int:
    """How many hard-swishes ``graph`` holds in ONNX ops (written out or as ``x * HardSigmoid(x)``)."""
    idx = _Index.of_graph(graph)
    return len(hardswish_chains(graph.node, idx.consts, list(idx.outputs)))


def _copy(proto: Any) -> Any:
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out


def fuse_hardswish(proto: Any, as_op: bool = False) -> Tuple[Any, int]:
    """A copy of ``proto`` with each written-out hard-swish as ``x * HardSigmoid(x)``, or with
    ``as_op`` each hard-swish in either form as one ``HardSwish`` (opset 14: for a target with a
    hard-swish kernel); and how many."""
    out = _copy(proto)
    return out, _fuse_hardswish(out.graph, as_op)


def _fuse_hardswish(g: Any, as_op: bool = False) -> int:
    """:func:`fuse_hardswish` on graph ``g`` in place."""
    import onnx

    idx = _Index.of_graph(g)
    found = hardswish_chains(g.node, idx.consts, list(idx.outputs), written_only=not as_op)
    replaced: Dict[int, List[Any]] = {}
    for x, chain in found:
        last = chain[-1]
        base = last.name or last.output[0]
        if as_op:
            replaced[id(chain[0])] = [onnx.helper.make_node("HardSwish", [x], [last.output[0]],
                                                            name=idx.fresh(f"{base}/hardswish"))]
            continue
        hs = idx.fresh(f"{last.output[0]}_hardsigmoid")
        replaced[id(chain[0])] = [
            onnx.helper.make_node("HardSigmoid", [x], [hs], name=idx.fresh(f"{base}/hardsigmoid"),
                                  alpha=1.0 / 6.0, beta=0.5),
            onnx.helper.make_node("Mul", [x, hs], [last.output[0]], name=idx.fresh(f"{base}/hardswish")),
        ]
    if not replaced:
        return 0
    drop = {id(n) for _, chain in found for n in chain}
    nodes = []
    for n in g.node:
        if id(n) in replaced:
            nodes.extend(replaced[id(n)])
        elif id(n) not in drop:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    drop_unused_initializers(g)
    return len(replaced)


def _drop_nodes(g: Any, drop: Set[int], new_inits: Sequence[Any]) -> None:
    """Graph ``g`` without the nodes whose ids are in ``drop``, with ``new_inits`` added and the
    initializers nothing reads any more removed."""
    keep = [n for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new_inits)
    drop_unused_initializers(g)


def _absorb(idx: _Index, node: Any, chain: Sequence[Any], w: np.ndarray, b: np.ndarray, what: str,
            drop: Set[int]) -> List[Any]:
    """``node`` (a Conv, ConvTranspose or BatchNormalization) with weights ``w`` on input 1 and bias
    ``b`` on input 2 in place of the ``chain`` after it, whose output name it takes (the chain's nodes
    go into ``drop``); returns the two new initializers, named after it and ``what``."""
    from onnx import numpy_helper

    base = node.name or node.output[0]
    wn, bn = idx.fresh(f"{base}_{what}_w"), idx.fresh(f"{base}_{what}_b")
    inputs = list(node.input)
    inputs[1] = wn
    inputs[2:3] = [bn]
    del node.input[:]
    node.input.extend(inputs)
    node.output[0] = chain[-1].output[0]
    drop.update(id(n) for n in chain)
    return [numpy_helper.from_array(w.astype(np.float32), wn), numpy_helper.from_array(b.astype(np.float32), bn)]


def _scalar_affine_step(idx: _Index, node: Any) -> Optional[str]:
    """The data input of ``node`` when it is one step of :func:`_affine_chain` (a Mul/Add by a
    one-element constant, a Sub/Div of one), else None."""
    if node.op_type not in ("Mul", "Add", "Sub", "Div") or len(node.input) != 2:
        return None
    for k in ((0, 1) if node.op_type in ("Mul", "Add") else (0,)):
        if idx.scalar(node.input[1 - k]) is not None and idx.scalar(node.input[k]) is None:
            return node.input[k]
    return None


def _affine_chain(idx: _Index, start: str) -> Tuple[float, float, List[Any]]:
    """``(s, a, nodes)``: the Mul/Add/Sub/Div by one-element constants after tensor ``start``, each
    the only reader of the one before, as ``y * s + a``."""
    s, a, chain, cur = 1.0, 0.0, [], start
    while True:
        n = idx.only_consumer(cur)
        if n is None or _scalar_affine_step(idx, n) != cur:
            break
        c = idx.scalar(n.input[1] if n.input[0] == cur else n.input[0])
        if c is None:
            break
        if n.op_type == "Mul":
            s, a = s * c, a * c
        elif n.op_type == "Div":
            if c == 0.0:
                break
            s, a = s / c, a / c
        else:
            a = a + c if n.op_type == "Add" else a - c
        chain.append(n)
        cur = n.output[0]
    return s, a, chain


def fold_scalar_affine(proto: Any) -> Tuple[Any, int]:
    """A copy of ``proto`` with each scalar affine (Mul/Add/Sub/Div by one-element constants) that
    follows a Conv or a BatchNormalization folded into its weights and bias; and how many."""
    out = _copy(proto)
    return out, _fold_scalar_affine(out.graph)


def _fold_scalar_affine(g: Any) -> int:
    """:func:`fold_scalar_affine` on graph ``g`` in place."""

    idx = _Index.of_graph(g)
    drop: Set[int] = set()
    new_inits = []
    folded = 0
    for node in g.node:
        if node.op_type == "Conv" and len(node.input) >= 2 and node.input[1] in idx.consts:
            bias_at = 2
        elif node.op_type == "BatchNormalization" and len(node.input) == 5 and \
                all(i in idx.consts for i in node.input[1:3]) and (len(node.output) == 1 or not any(node.output[1:])):
            bias_at = 2
        else:
            continue
        if len(node.output) < 1 or idx.consts.get(node.input[1]) is None or idx.consts[node.input[1]].dtype != np.float32:
            continue
        s, a, chain = _affine_chain(idx, node.output[0])
        if not chain:
            continue
        w = idx.consts[node.input[1]].astype(np.float64)
        if node.op_type == "Conv":
            has_bias = len(node.input) > 2 and node.input[2] in idx.consts
            if len(node.input) > 2 and node.input[2] and not has_bias:
                continue
            b = idx.consts[node.input[2]].astype(np.float64) if has_bias else np.zeros(w.shape[0])
        else:
            b = idx.consts[node.input[bias_at]].astype(np.float64)
        new_inits += _absorb(idx, node, chain, w * s, b * s + a, "affine", drop)
        folded += 1
    if folded:
        _drop_nodes(g, drop, new_inits)
    return folded


def _unpadded(conv: Any) -> bool:
    """``conv`` pads nothing (``pads`` all zero, ``auto_pad`` NOTSET or VALID)."""
    for a in conv.attribute:
        if a.name == "pads" and any(a.ints):
            return False
        if a.name == "auto_pad" and a.s not in (b"NOTSET", b"VALID"):
            return False
    return True


def fold_affine_into_next_conv(proto: Any) -> Tuple[Any, int]:
    """A copy of ``proto`` with each scalar affine read only by a Conv without padding folded into
    that Conv's weights and bias; and how many."""
    out = _copy(proto)
    return out, _fold_affine_into_next_conv(out.graph)


def _fold_affine_into_next_conv(g: Any) -> int:
    """:func:`fold_affine_into_next_conv` on graph ``g`` in place."""
    from onnx import numpy_helper

    idx = _Index.of_graph(g)
    producer = {o: n for n in g.node for o in n.output if o}
    drop: Set[int] = set()
    new_inits = []
    folded = 0
    for conv in g.node:
        if conv.op_type != "Conv" or len(conv.input) < 2 or not _unpadded(conv):
            continue
        w = idx.consts.get(conv.input[1])
        if w is None or w.dtype != np.float32 or w.ndim < 3:
            continue
        if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in idx.consts:
            continue
        # back from the conv's input to the first step of the chain that ends there
        start, cur = None, conv.input[0]
        while cur in producer and idx.only_consumer(cur) is not None and id(producer[cur]) not in drop:
            prev = _scalar_affine_step(idx, producer[cur])
            if prev is None:
                break
            start, cur = prev, prev
        if start is None:
            continue
        s, a, chain = _affine_chain(idx, start)
        if not chain or chain[-1].output[0] != conv.input[0] or id(idx.only_consumer(conv.input[0])) != id(conv):
            continue
        w64 = w.astype(np.float64)
        b = idx.consts[conv.input[2]].astype(np.float64) if len(conv.input) > 2 and conv.input[2] \
            else np.zeros(w.shape[0])
        base = conv.name or conv.output[0]
        wn, bn = idx.fresh(f"{base}_affine_in_w"), idx.fresh(f"{base}_affine_in_b")
        new_inits += [numpy_helper.from_array((w64 * s).astype(np.float32), wn),
                      numpy_helper.from_array((b + a * w64.reshape(w.shape[0], -1).sum(axis=1)).astype(np.float32), bn)]
        inputs = [start, wn, bn]
        del conv.input[:]
        conv.input.extend(inputs)
        drop.update(id(n) for n in chain)
        folded += 1
    if folded:
        _drop_nodes(g, drop, new_inits)
    return folded


def _per_channel(idx: _Index, name: str, channels: int) -> Optional[np.ndarray]:
    """The constant ``name`` as ``channels`` values when it broadcasts against ``[N, C, H, W]`` as one
    value per channel (shape ``(C, 1, 1)``, ``(1, C, 1, 1)``) or one for all, else None."""
    v = idx.consts.get(name)
    if v is None or v.dtype.kind != "f" or v.ndim > 4:
        return None
    shape = (1,) * (4 - v.ndim) + tuple(v.shape)
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float64), (channels,))


def _channel_step(idx: _Index, node: Any, cur: str, channels: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(scale, shift)`` per channel when ``node`` computes ``cur * scale + shift`` (an Add, Sub or Mul
    of a per-channel constant, or a BatchNormalization with constant statistics), else None."""
    if node.op_type == "BatchNormalization":
        if len(node.input) != 5 or node.input[0] != cur or (len(node.output) > 1 and any(node.output[1:])):
            return None
        stats = [idx.consts.get(i) for i in node.input[1:5]]
        if any(x is None or x.dtype.kind != "f" or x.shape != (channels,) for x in stats):
            return None
        gamma, beta, mean, var = (np.asarray(x, np.float64) for x in stats)
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        k = gamma / np.sqrt(var + eps)
        return k, beta - mean * k
    if node.op_type not in ("Add", "Sub", "Mul") or len(node.input) != 2 or cur not in node.input:
        return None
    other = _other_input(node, cur)
    c = _per_channel(idx, other, channels) if other is not None else None
    if c is None or (node.op_type == "Sub" and node.input[0] != cur):
        return None
    one, zero = np.ones(channels), np.zeros(channels)
    return (c, zero) if node.op_type == "Mul" else (one, c if node.op_type == "Add" else -c)


def fold_into_conv_transpose(proto: Any) -> Tuple[Any, int]:
    """A copy of ``proto`` with the per-channel affine ops after each ConvTranspose (a bias Add, a
    BatchNormalization, a Mul by a per-channel constant) folded into its weights and bias; and how
    many ConvTransposes took some."""
    out = _copy(proto)
    return out, _fold_into_conv_transpose(out.graph)


def _fold_into_conv_transpose(g: Any) -> int:
    """:func:`fold_into_conv_transpose` on graph ``g`` in place. paddle2onnx writes a ConvTranspose's
    bias as an Add after it, and DB text detectors follow it with a BatchNormalization: two passes
    over the upsampled map (ppocr-v4-det: 24 x 368 x 368) that are one set of weights."""

    idx = _Index.of_graph(g)
    drop: Set[int] = set()
    new_inits = []
    folded = 0
    for node in g.node:
        if node.op_type != "ConvTranspose" or len(node.input) < 2 or \
                any(a.name == "group" and a.i != 1 for a in node.attribute):
            continue
        w = idx.consts.get(node.input[1])
        if w is None or w.dtype != np.float32 or w.ndim != 4:
            continue
        has_bias = len(node.input) > 2 and bool(node.input[2])
        if has_bias and node.input[2] not in idx.consts:
            continue
        channels = w.shape[1]
        w64 = w.astype(np.float64)
        b = idx.consts[node.input[2]].astype(np.float64).reshape(-1) if has_bias else np.zeros(channels)
        chain, cur = [], node.output[0]
        while True:
            nxt = idx.only_consumer(cur)
            step = _channel_step(idx, nxt, cur, channels) if nxt is not None else None
            if nxt is None or step is None:
                break
            k, shift = step
            w64, b = w64 * k.reshape(1, -1, 1, 1), b * k + shift
            chain.append(nxt)
            cur = nxt.output[0]
        if not chain:
            continue
        new_inits += _absorb(idx, node, chain, w64, b, "folded", drop)
        folded += 1
    if folded:
        _drop_nodes(g, drop, new_inits)
    return folded


def simplify(proto: Any, hardswish_op: bool = False) -> Tuple[Any, Dict[str, int]]:
    """``proto`` with the rewrites above (a copy when any applies) and how many of each were made:
    ``{"affine_folded": n, "conv_transpose_folded": t, "hardswish_fused": m, "affine_folded_forward": k}``
    (zero counts left out).
    ``hardswish_op``: every hard-swish as one ``HardSwish`` node (``"hardswish_op": m``; the graph's
    opset must be 14 or later). The fold into the next conv runs last, so a hard-swish's ``/ 6`` stays
    in the hard-swish."""
    out = _copy(proto)
    done = {k: n for k, n in (("affine_folded", _fold_scalar_affine(out.graph)),
                               ("conv_transpose_folded", _fold_into_conv_transpose(out.graph)),
                               ("hardswish_op" if hardswish_op else "hardswish_fused",
                                _fuse_hardswish(out.graph, hardswish_op)),
                               ("affine_folded_forward", _fold_affine_into_next_conv(out.graph))) if n}
    return (out if done else proto), done
