"""Multiply-accumulates of an ONNX graph, control flow and recurrent layers included.

Counted: Conv, ConvTranspose, Gemm, MatMul (from their shapes), LSTM / GRU / RNN (per direction:
``seq x batch x gates x hidden x (input + hidden)``, gates 4 / 3 / 1, from the X, W and R shapes),
``If`` (the larger branch, labelled; both are counted, the runtime runs one), ``Loop`` (the body
times the trip count when the trip count is static: a constant ``M`` and a condition that the
constants and the loop counter alone decide, evaluated here; otherwise the body is not counted and
the count is partial, with the reason), ``Scan`` (not counted: partial). Anything not counted makes
the count partial: :attr:`MacCount.partial` says so and :attr:`MacCount.notes` says why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

__all__ = ["MacCount", "count_macs", "graph_macs", "node_macs", "MAC_OPS", "RNN_GATES", "loop_trip_count"]

MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN", "If", "Loop", "Scan")
RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_MAX_TRIPS = 100_000


@dataclass
class MacCount:
    """``macs``: the total (None when nothing could be counted); ``unknown_nodes``: MAC nodes whose
    shapes are not concrete; ``notes``: what else was not counted, or how control flow was counted."""

    macs: Optional[int] = None
    unknown_nodes: int = 0
    uncounted: List[str] = field(default_factory=list)   # control flow not counted, with the reason
    notes: List[str] = field(default_factory=list)       # how control flow was counted

    @property
    def partial(self) -> bool:
        return bool(self.unknown_nodes or self.uncounted)

    def add(self, other: "MacCount") -> None:
        if other.macs is not None:
            self.macs = (self.macs or 0) + other.macs
        self.unknown_nodes += other.unknown_nodes
        self.uncounted += other.uncounted
        self.notes += other.notes


def _prod(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _static(shapes: Dict[str, List[Any]], name: str, rank: Optional[int] = None, min_rank: int = 1) -> Optional[List[int]]:
    s = shapes.get(name)
    if s is None or any(not isinstance(d, int) or d < 0 for d in s):
        return None
    if (rank is not None and len(s) != rank) or len(s) < min_rank:
        return None
    return list(s)


def _attrs(node: Any) -> Dict[str, Any]:
    return {a.name: a for a in node.attribute}


def _rnn_macs(node: Any, shapes: Dict[str, List[Any]]) -> Optional[int]:
    """LSTM/GRU/RNN: per direction, per step, per batch row: ``gates x H x (I + H)``."""
    if len(node.input) < 3:
        return None
    x = _static(shapes, node.input[0], rank=3)
    w = _static(shapes, node.input[1], rank=3)
    r = _static(shapes, node.input[2], rank=3)
    if x is None or w is None or r is None:
        return None
    attrs = _attrs(node)
    layout = attrs["layout"].i if "layout" in attrs else 0
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    dirs, gh, inp = w
    hidden = r[2]
    return int(dirs * seq * batch * gh * (inp + hidden))


def node_macs(node: Any, shapes: Dict[str, List[Any]], constants: Optional[Dict[str, Any]] = None) -> Optional[int]:
    """MACs of one node from ``shapes`` (tensor name -> dims, weights included); None for other ops
    or when a shape it needs is not concrete. ``If``/``Loop`` count their bodies (see
    :func:`graph_macs`); None when the body or the trip count is not fully known."""
    if node.op_type in ("If", "Loop", "Scan"):
        c = _control_macs(node, shapes, constants or {})
        return c.macs if not c.partial else None
    if node.op_type in RNN_GATES:
        return _rnn_macs(node, shapes)
    if len(node.input) < 2 or not node.output:
        return None
    attrs = _attrs(node)
    if node.op_type == "Conv":
        w, y = _static(shapes, node.input[1], min_rank=3), _static(shapes, node.output[0], min_rank=3)
        if w is None or y is None:
            return None
        return _prod(y) * _prod(w[1:])  # each output element: C/group * k...
    if node.op_type == "ConvTranspose":
        x, w = _static(shapes, node.input[0], min_rank=3), _static(shapes, node.input[1], min_rank=3)
        if x is None or w is None:
            return None
        return _prod(x) * _prod(w[1:])  # each input element scatters into M/group * k...
    if node.op_type == "Gemm":
        a, y = _static(shapes, node.input[0], rank=2), _static(shapes, node.output[0], rank=2)
        if a is None or y is None:
            return None
        trans_a = attrs["transA"].i if "transA" in attrs else 0
        return _prod(y) * (a[0] if trans_a else a[1])
    if node.op_type == "MatMul":
        a, y = _static(shapes, node.input[0]), _static(shapes, node.output[0], min_rank=0)
        if a is None or y is None:
            return None
        return _prod(y) * a[-1]
    return None


def graph_shapes(g: Any, outer: Optional[Dict[str, List[Any]]] = None) -> Dict[str, List[Any]]:
    """Tensor name -> dims of a (sub)graph: the enclosing scope's, then its own value infos,
    initializers and Constant outputs."""
    from .onnx import _value_info_spec

    shapes: Dict[str, List[Any]] = dict(outer or {})
    for vi in list(g.input) + list(g.output) + list(g.value_info):   # inferred infos refine declared outputs
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = list(_value_info_spec(vi).shape)
    for init in g.initializer:
        shapes[init.name] = list(init.dims)
    for node in g.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    shapes[node.output[0]] = list(attr.t.dims)
    return shapes


def _constants(g: Any, outer: Dict[str, Any]) -> Dict[str, Any]:
    """Producer lookup for the evaluator: name -> ("node", node) / ("init", array), scoped."""
    from onnx import numpy_helper

    out: Dict[str, Any] = dict(outer)
    for init in g.initializer:
        out[init.name] = ("init", init)
    for node in g.node:
        for o in node.output:
            out[o] = ("node", node)
    for i in g.input:
        out.pop(i.name, None)
    _ = numpy_helper
    return out


def graph_macs(g: Any, shapes: Dict[str, List[Any]], scope: Optional[Dict[str, Any]] = None, where: str = "") -> MacCount:
    """The :class:`MacCount` of graph ``g`` with ``shapes`` (see :func:`graph_shapes`)."""
    total = MacCount()
    scope = _constants(g, scope or {})
    for node in g.node:
        if node.op_type not in MAC_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in ("If", "Loop", "Scan"):
            total.add(_control_macs(node, shapes, scope, where))
            continue
        try:
            macs = node_macs(node, shapes)
        except (IndexError, ValueError, TypeError, KeyError):  # malformed attributes or shapes
            macs = None
        if macs is None:
            total.unknown_nodes += 1
        else:
            total.macs = (total.macs or 0) + macs
    return total


def _label(node: Any) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def _control_macs(node: Any, shapes: Dict[str, List[Any]], scope: Dict[str, Any], where: str = "") -> MacCount:
    attrs = _attrs(node)
    name = f"{where}{_label(node)}"
    if node.op_type == "If":
        branches = [(k, attrs[k].g) for k in ("then_branch", "else_branch") if k in attrs]
        counts = [(k, graph_macs(g, graph_shapes(g, shapes), scope, f"{name}/")) for k, g in branches]
        out = MacCount()
        best = max(counts, key=lambda kc: kc[1].macs or 0)[1] if counts else MacCount()
        out.macs = best.macs
        for _, c in counts:  # a branch not fully counted leaves the maximum open
            out.unknown_nodes = max(out.unknown_nodes, c.unknown_nodes)
            out.uncounted += c.uncounted
            out.notes += c.notes
        if any(c.macs for _, c in counts):
            out.notes.append(f"{name}: the larger If branch is counted (" +
                             ", ".join(f"{k.split('_')[0]} {c.macs or 0:,}" for k, c in counts) + ")")
        return out
    if node.op_type == "Scan":
        return MacCount(uncounted=[f"{name}: Scan body not counted"])
    body = attrs["body"].g if "body" in attrs else None
    if body is None:
        return MacCount(uncounted=[f"{name}: Loop without a body"])
    per = graph_macs(body, graph_shapes(body, shapes), scope, f"{name}/")
    trips, why = loop_trip_count(node, scope)
    out = MacCount(unknown_nodes=per.unknown_nodes, uncounted=list(per.uncounted), notes=list(per.notes))
    if trips is None:
        out.uncounted.append(f"{name}: Loop body not counted ({why})")
        return out
    out.macs = (per.macs or 0) * trips if per.macs is not None else None
    out.notes.append(f"{name}: Loop body {per.macs or 0:,} MACs x {trips} iterations ({why})")
    return out


# -- a small evaluator for trip counts ------------------------------------------------------------------
class _NotStatic(Exception):
    pass


def _evaluate(name: str, env: Dict[str, Any], scope: Dict[str, Any], cache: Dict[str, Any], depth: int = 0) -> Any:
    """The value of tensor ``name``: from ``env`` (loop variables), else by evaluating its producer
    (Constant, an initializer, or a supported op of constants); :class:`_NotStatic` otherwise."""
    import numpy as np
    from onnx import numpy_helper

    from .onnx_specialize import NUMPY_OPS, eval_node

    if name in env:
        return env[name]
    if name in cache:
        return cache[name]
    if depth > 200 or name not in scope:
        raise _NotStatic(f"'{name}' is not a constant")
    kind, obj = scope[name]
    if kind == "init":
        val = numpy_helper.to_array(obj)
    else:
        node = obj
        if node.op_type == "Constant":
            t = [a for a in node.attribute if a.name == "value" and a.HasField("t")]
            if not t:
                raise _NotStatic(f"Constant '{name}' has no tensor value")
            val = numpy_helper.to_array(t[0].t)
        elif node.op_type in NUMPY_OPS and node.domain in ("", "ai.onnx"):
            args = [_evaluate(i, env, scope, cache, depth + 1) if i else None for i in node.input]
            try:
                val = eval_node(node, args)[0]
            except ValueError as exc:
                raise _NotStatic(str(exc)) from exc
        else:
            raise _NotStatic(f"'{name}' comes from {node.op_type}")
    val = np.asarray(val)
    if val.size > 64:
        raise _NotStatic(f"'{name}' is a tensor of {val.size} elements")
    depends_on_env = any(k in env for k in _inputs_closure(name, scope, set()))
    if not depends_on_env:
        cache[name] = val
    return val


def _inputs_closure(name: str, scope: Dict[str, Any], seen: Set[str]) -> Set[str]:
    if name in seen or name not in scope:
        return {name}
    seen.add(name)
    kind, obj = scope[name]
    out = {name}
    if kind == "node":
        for i in obj.input:
            if i:
                out |= _inputs_closure(i, scope, seen)
    return out


def loop_trip_count(node: Any, scope: Dict[str, Any]) -> Tuple[Optional[int], str]:
    """``(trips, how)`` of a ``Loop`` node: its static trip count when the constant ``M`` and a
    condition decided by constants and the loop counter fix it, else ``(None, why not)``."""
    import numpy as np

    attrs = _attrs(node)
    body = attrs["body"].g
    cache: Dict[str, Any] = {}
    try:
        m = int(np.asarray(_evaluate(node.input[0], {}, scope, cache)).ravel()[0]) if node.input[0] else None
    except _NotStatic as exc:
        m = None
        m_why = f"trip count M is decided at run time: {exc}"
    else:
        m_why = ""
    try:
        cond = bool(np.asarray(_evaluate(node.input[1], {}, scope, cache)).ravel()[0]) \
            if len(node.input) > 1 and node.input[1] else True
    except _NotStatic as exc:
        return None, f"the loop condition is decided at run time: {exc}"
    if not cond:
        return 0, "its initial condition is false"
    if m is None and _cond_passthrough(body):
        return None, m_why
    body_scope = _constants(body, scope)
    carried_in = [i.name for i in body.input[2:]]
    carried_out = [o.name for o in body.output[1:1 + len(carried_in)]]
    cond_out = body.output[0].name
    state: Dict[str, Any] = {}
    for k, v in zip(carried_in, node.input[2:]):
        try:
            if v:
                state[k] = np.asarray(_evaluate(v, {}, scope, cache))
        except _NotStatic:
            pass  # not needed unless the condition reads it (then the evaluation says so)
    limit = m if m is not None else _MAX_TRIPS
    trips = 0
    try:
        while trips < limit:
            env = {body.input[0].name: np.asarray(trips, np.int64), body.input[1].name: np.asarray(True)}
            env.update(state)
            step_cache: Dict[str, Any] = {}
            c = bool(np.asarray(_evaluate(cond_out, env, body_scope, step_cache)).ravel()[0])
            needed = _inputs_closure(cond_out, body_scope, set())
            nxt = {}
            for i, o in zip(carried_in, carried_out):
                if i in needed or i in state:
                    try:
                        nxt[i] = np.asarray(_evaluate(o, env, body_scope, step_cache))
                    except _NotStatic:
                        if i in needed:
                            raise
            state.update(nxt)
            trips += 1
            if not c:
                break
    except _NotStatic as exc:
        if m is not None and _cond_passthrough(body):
            return m, "a constant trip count"
        return None, m_why or f"the loop ends on a condition computed at run time ({exc})"
    if trips >= _MAX_TRIPS:
        return None, "the condition did not end the loop within %d iterations" % _MAX_TRIPS
    if m is not None and trips == m:
        return trips, "the constant trip count M"
    return trips, "the condition, evaluated from constants and the loop counter"


def _cond_passthrough(body: Any) -> bool:
    """The body hands its condition input straight back (or a constant true): only ``M`` ends it."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_in == cond_out:
        return True
    for n in body.node:
        if cond_out in n.output and n.op_type == "Identity" and n.input[0] == cond_in:
            return True
    return False


def count_macs(proto: Any) -> MacCount:
    """The :class:`MacCount` of a model (never raises). Shapes come from ONNX's shape inference;
    only where that leaves something uncounted does ONNX Runtime's symbolic inference run too (it
    follows shapes computed at run time and control-flow bodies, but costs seconds on a large graph:
    ``sdk inspect`` of nudenet-320n took 11.5 s with it and 2.2 s without, here), and the fuller
    count is kept. Its shapes only fill the gaps: the count is always of the model's own graph
    (that inference rewrites an If whose condition it knows, its else branch replaced by the then
    branch), with every subgraph value renamed apart first (it keys shapes by name across scopes)."""
    import onnx

    from .onnx_specialize import unique_subgraph_names

    proto = unique_subgraph_names(proto)[0]
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference failing is not fatal for an estimate
        inferred = proto
    count = graph_macs(inferred.graph, graph_shapes(inferred.graph))
    if not count.partial or not _inputs_static(proto):
        return count   # symbolic dims in the inputs stay symbolic there too: nothing more to count
    symbolic = symbolic_shapes(proto)
    if symbolic is None:
        return count
    merged = _with_shapes_of(inferred, symbolic)
    fuller = graph_macs(merged.graph, graph_shapes(merged.graph))
    if (fuller.unknown_nodes, len(fuller.uncounted)) < (count.unknown_nodes, len(count.uncounted)):
        return fuller
    return count


def _with_shapes_of(model: Any, donor: Any) -> Any:
    """A copy of ``model`` whose value infos gain, in every scope, the shapes ``donor`` knows for
    the values that scope defines and ``model`` does not (names are unique across scopes)."""
    import onnx

    from .onnx_control import subgraphs

    known: Dict[str, Any] = {}

    def collect(g: Any) -> None:
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
                known.setdefault(vi.name, vi)
        for n in g.node:
            for sg in subgraphs(n):
                collect(sg)

    collect(donor.graph)
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def fill(g: Any) -> None:
        have = {vi.name for vi in list(g.value_info) + list(g.output) + list(g.input)
                if vi.type.tensor_type.HasField("shape")
                and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
        for name in [vi.name for vi in g.input] + [o for n in g.node for o in n.output]:
            if name and name not in have and name in known:   # a body's inputs too (loop-carried values)
                g.value_info.append(known[name])
                have.add(name)
        for n in g.node:
            for sg in subgraphs(n):
                fill(sg)

    fill(out.graph)
    return out


def _inputs_static(proto: Any) -> bool:
    """Every graph input (that is not an initializer) has concrete dims."""
    inits = {i.name for i in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            return False
    return True


def symbolic_shapes(proto: Any) -> Any:
    """``proto`` with shapes from ONNX Runtime's symbolic shape inference (it follows Reshape
    targets computed from shapes, and If/Loop bodies, where ONNX's own inference stops), or None
    when it is not installed or fails on this graph."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except Exception:  # noqa: BLE001 - optional: ONNX's own inference is the fallback
        return None
    import contextlib
    import io
    import logging

    level = logging.getLogger().level
    try:
        logging.getLogger().setLevel(logging.ERROR)  # it logs a warning per node it cannot infer
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return SymbolicShapeInference.infer_shapes(proto, auto_merge=True, guess_output_rank=True)
    except Exception:  # noqa: BLE001 - any failure: fall back to ONNX's inference
        return None
    finally:
        logging.getLogger().setLevel(level)


def count_macs_for(proto: Any, values: Optional[Dict[str, Any]] = None) -> MacCount:
    """:func:`count_macs` of the graph the given input ``values`` and the model's static input
    shapes select (:func:`sdk.formats.onnx_specialize.specialize` resolves the Ifs they decide)."""
    return specialized_macs(proto, values)[0]


def specialized_macs(proto: Any, values: Optional[Dict[str, Any]] = None) -> Tuple[MacCount, Any]:
    """``(count, specialization)``: the count of the model specialized for ``values`` (and the
    input shapes it declares), with one note per If resolved (which branch, decided by what) and
    one per If left (why); the :class:`~sdk.formats.onnx_specialize.Specialization` says the same
    as data."""
    from .onnx_specialize import specialize

    try:
        spec = specialize(proto, values or {})
    except Exception as exc:  # noqa: BLE001 - an estimate: count the model as given, and say why
        c = count_macs(proto)
        c.notes.append(f"the graph was not specialized: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return c, None
    c = count_macs(spec.proto)
    left = [f"{u.node}: not resolved ({u.why})" for u in spec.unresolved]
    c.notes = spec.notes() + left + c.notes
    return c, spec
