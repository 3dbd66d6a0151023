"""Constant folding for ONNX graphs: ``Constant`` nodes become initializers, and chains of
Identity/Cast/Reshape/Transpose/Squeeze/Unsqueeze/Flatten over initializers are evaluated once, so a
weight written as a ``Constant`` (paddle2onnx) or behind a Cast/Transpose (exporters' fp16 or layout
shims) sits in an initializer where tools that look for weights find it.

Only the main graph is folded (subgraphs still see the new initializers as outer-scope values); graph
outputs are never folded away. The result passes ``onnx.checker``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np

__all__ = ["fold_constants", "subgraph_inputs"]

_Fold = Callable[[Any, List[Optional[np.ndarray]]], Optional[np.ndarray]]


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _cast(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
    from onnx import helper

    to = int(_attr(node, "to", 0))
    try:
        dt = helper.tensor_dtype_to_np_dtype(to)
    except (KeyError, ValueError):
        return None
    if xs[0] is None or dt == np.dtype(object):
        return None
    return xs[0].astype(dt)


def _reshape(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
    if len(xs) < 2 or xs[0] is None or xs[1] is None:
        return None
    x, shape = xs[0], [int(v) for v in xs[1].reshape(-1)]
    if not int(_attr(node, "allowzero", 0)):
        shape = [x.shape[i] if v == 0 and i < x.ndim else v for i, v in enumerate(shape)]
    return x.reshape(shape)


def _axes(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[List[int]]:
    if len(xs) > 1 and xs[1] is not None:
        return [int(v) for v in xs[1].reshape(-1)]
    a = _attr(node, "axes")
    return None if a is None else [int(v) for v in a]


def _unsqueeze(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
    axes = _axes(node, xs)
    if xs[0] is None or axes is None:
        return None
    out_rank = xs[0].ndim + len(axes)
    return np.expand_dims(xs[0], tuple(sorted(a % out_rank for a in axes)))


def _squeeze(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
    if xs[0] is None:
        return None
    axes = _axes(node, xs)
    return np.squeeze(xs[0]) if axes is None else np.squeeze(xs[0], tuple(a % xs[0].ndim for a in axes))


def _flatten(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
    if xs[0] is None:
        return None
    x = xs[0]
    axis = int(_attr(node, "axis", 1)) % max(x.ndim, 1) if x.ndim else 0
    lead = int(np.prod(x.shape[:axis])) if axis else 1
    return x.reshape(lead, -1)


def _transpose(node: Any, xs: List[Optional[np.ndarray]]) -> Optional[np.ndarray]:
    if xs[0] is None:
        return None
    perm = _attr(node, "perm")
    return np.transpose(xs[0], None if perm is None else [int(p) for p in perm])


_FOLDS: Dict[str, _Fold] = {
    "Identity": lambda node, xs: xs[0],
    "Cast": _cast,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Flatten": _flatten,
}


def _constant_value(node: Any) -> Optional[np.ndarray]:
    """The value of a ``Constant`` node (any of its value attributes), or None (sparse, strings)."""
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value":
            arr = numpy_helper.to_array(a.t)
            return None if arr.dtype == np.dtype(object) else arr
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), np.int64)
    return None


def _fold_pass(nodes: List[Any], values: Dict[str, np.ndarray], keep: Set[str]) -> Tuple[List[Any], int]:
    """One topological sweep: nodes whose inputs are all known become values. Returns the nodes
    that stay and how many were folded."""
    out: List[Any] = []
    folded = 0
    for node in nodes:
        result: Optional[np.ndarray] = None
        foldable = node.domain in ("", "ai.onnx") and len(node.output) == 1 and node.output[0] not in keep
        if foldable and node.op_type == "Constant":
            result = _constant_value(node)
        elif foldable and node.op_type in _FOLDS and node.input and all(i in values for i in node.input if i):
            xs = [values[i] if i else None for i in node.input]
            try:
                result = _FOLDS[node.op_type](node, xs)
            except (ValueError, IndexError, TypeError):
                result = None
        if result is None:
            out.append(node)
            continue
        values[node.output[0]] = np.asarray(result)
        folded += 1
    return out, folded


def fold_constants(proto: Any) -> Tuple[Any, int]:
    """A copy of ``proto`` with Constant nodes and constant Identity/Cast/Reshape/Transpose/
    Squeeze/Unsqueeze/Flatten chains folded into initializers, unused initializers dropped.
    Returns ``(proto, folded_node_count)``."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    g = out.graph
    # an initializer that is also a graph input can be overridden at run time (IR >= 4): not a constant
    inputs = {vi.name for vi in g.input} if out.ir_version >= 4 else set()
    values: Dict[str, np.ndarray] = {}
    for t in g.initializer:
        if t.name not in inputs and t.data_type != onnx.TensorProto.STRING:  # overridable ones stay
            values[t.name] = numpy_helper.to_array(t)
    known = set(values)
    keep = {o.name for o in g.output}
    nodes, folded = _fold_pass(list(g.node), values, keep)
    if folded:
        _rewrite(out, nodes, values, known, inputs, keep)
    return out, folded


def _rewrite(out: Any, nodes: List[Any], values: Dict[str, np.ndarray], known: Set[str], inputs: Set[str], keep: Set[str]) -> None:
    """Replace the graph's nodes with ``nodes`` and its initializers with the used ones plus the
    folded values (graph inputs too before IR 4; stale value_info dropped)."""
    from onnx import helper, numpy_helper

    g = out.graph
    used = {i for n in nodes for i in n.input} | keep | subgraph_inputs(nodes)
    new_inits = [numpy_helper.from_array(values[name], name) for name in values if name not in known and name in used]
    kept = [t for t in g.initializer if t.name in used or t.name in inputs]
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    if out.ir_version < 4:  # before IR 4 every initializer is also a graph input
        for t in new_inits:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    folded_names = {n for n in values if n not in known}
    vis = [vi for vi in g.value_info if vi.name not in folded_names]
    del g.value_info[:]
    g.value_info.extend(vis)


def subgraph_inputs(nodes: List[Any]) -> Set[str]:
    """Names read inside the subgraphs of ``nodes`` (If/Loop/Scan bodies): outer-scope values."""
    from onnx import AttributeProto

    names: Set[str] = set()
    stack = [a.g for n in nodes for a in n.attribute if a.type == AttributeProto.GRAPH]
    stack += [g for n in nodes for a in n.attribute if a.type == AttributeProto.GRAPHS for g in a.graphs]
    while stack:
        g = stack.pop()
        for n in g.node:
            names.update(i for i in n.input if i)
            stack += [a.g for a in n.attribute if a.type == AttributeProto.GRAPH]
            stack += [sg for a in n.attribute if a.type == AttributeProto.GRAPHS for sg in a.graphs]
    return names
