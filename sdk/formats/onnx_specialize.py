"""Specialize an ONNX model for given input values and static input shapes.

``specialize(proto, values={"sr": 16000}, shapes={"input": [1, 576]})`` fixes the input shapes,
turns the inputs with a given value into initializers, and then, until nothing changes:

1. infers shapes (ONNX shape inference with data propagation) and evaluates, with NumPy (ONNX's
   reference implementation for the rarer ops), every small tensor (at most ``max_elements``
   elements) that constants, the given values and the ``Shape``/``Size`` of tensors whose shapes
   are now static decide;
2. replaces every top-level ``If`` whose condition is so decided by the branch it takes: the
   branch's nodes and initializers move into the enclosing graph (names that would collide are
   renamed), and ``Identity`` nodes hand the branch outputs to the If's output names.

At the end, the decided small tensors that the remaining nodes read become initializers and nodes
nothing reads any more are dropped. The result passes ``onnx.checker`` and computes what the
original computes for these values and shapes (and only for them: it no longer takes the
valued inputs, and its inputs have the given shapes). :class:`Specialization` records which If
took which branch and why (which values, which shapes), and why the others could not be decided.

The evaluator (:func:`eval_node`) is also what :mod:`sdk.formats.onnx_macs` uses to decide Loop
trip counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from .onnx_control import outer_reads, subgraphs

__all__ = ["Specialization", "IfResolution", "IfUnresolved", "specialize", "eval_node", "NUMPY_OPS",
           "DEFAULT_MAX_ELEMENTS", "unique_subgraph_names"]

DEFAULT_MAX_ELEMENTS = 64   # the largest tensor the pass evaluates (shape arithmetic, flags, indices)
_MAX_DEPTH = 400            # the longest producer chain followed from one tensor
_NON_DETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                      "Bernoulli", "Dropout"}
_SUBGRAPH_OPS = {"If", "Loop", "Scan", "SequenceMap"}


@dataclass
class IfResolution:
    """An ``If`` replaced by the branch it takes: ``by`` lists what decided the condition
    (``"sr=16000"``, ``"the shape of 'state' [2, 1, 128]"``; empty: constants alone)."""

    node: str
    branch: str            # "then" / "else"
    condition: str         # the condition tensor's name
    by: List[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``"value"`` (a given input value took part), ``"shape"`` (static shapes, no value) or
        ``"constant"``."""
        if any(not b.startswith("the shape of") for b in self.by):
            return "value"
        return "shape" if self.by else "constant"

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "branch": self.branch, "condition": self.condition, "by": list(self.by),
                "kind": self.kind}

    def note(self) -> str:
        values = [b for b in self.by if not b.startswith("the shape of")]
        shapes = [b for b in self.by if b.startswith("the shape of")]
        if values:
            why = f"the one {', '.join(values)} chooses" + (f" (with {'; '.join(shapes)})" if shapes else "")
        elif shapes:
            why = f"which {'; '.join(shapes)} decides"
        else:
            why = "its condition is a constant"
        return f"{self.node}: the {self.branch} branch, {why}, is counted"


@dataclass
class IfUnresolved:
    """An ``If`` left in the graph, and why its condition could not be decided."""

    node: str
    why: str
    nested: int = 0        # Ifs inside its branches (not specialized either)

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "why": self.why, "nested_ifs": self.nested}


@dataclass
class Specialization:
    """The specialized ``proto`` and the record of what was resolved."""

    proto: Any
    resolved: List[IfResolution] = field(default_factory=list)
    unresolved: List[IfUnresolved] = field(default_factory=list)
    values: Dict[str, Any] = field(default_factory=dict)        # inputs now constants
    shapes: Dict[str, List[int]] = field(default_factory=dict)  # input shapes fixed
    folded: int = 0                                             # tensors made initializers
    passes: int = 0
    #: the exact float rewrites made after (``sdk convert -o m.onnx --option float_rewrites=true``)
    rewrites: Dict[str, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """No ``If`` is left in the top-level graph."""
        return not self.unresolved

    def to_dict(self) -> Dict[str, Any]:
        return {"resolved": [r.to_dict() for r in self.resolved],
                "unresolved": [u.to_dict() for u in self.unresolved],
                "values": {k: np.asarray(v).tolist() for k, v in self.values.items()},
                "shapes": {k: list(v) for k, v in self.shapes.items()}, "folded": self.folded,
                "float_rewrites": dict(self.rewrites)}

    def notes(self) -> List[str]:
        return [r.note() for r in self.resolved]


# -- the evaluator -----------------------------------------------------------------------------------
def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _ints(x: Any) -> List[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _axes_of(node: Any, args: Sequence[Any]) -> Optional[List[int]]:
    if len(args) > 1 and args[1] is not None:
        return _ints(args[1])
    a = _attr(node, "axes")
    return None if a is None else [int(v) for v in a]


def _squeeze(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    axes = _axes_of(node, a)
    return np.squeeze(x) if axes is None else np.squeeze(x, tuple(v % max(x.ndim, 1) for v in axes))


def _unsqueeze(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    axes = _axes_of(node, a) or []
    rank = x.ndim + len(axes)
    return np.reshape(x, _unsqueezed_shape(list(x.shape), [v % rank for v in axes]))


def _unsqueezed_shape(shape: List[int], axes: List[int]) -> List[int]:
    out, it = [], iter(shape)
    for k in range(len(shape) + len(axes)):
        out.append(1 if k in axes else next(it))
    return out


def _reshape(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    target = _ints(a[1])
    if not int(_attr(node, "allowzero", 0)):
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    return x.reshape(target)


def _slice(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    if len(a) == 1:   # opset < 10: starts/ends/axes are attributes
        starts, ends = list(_attr(node, "starts", [])), list(_attr(node, "ends", []))
        axes = list(_attr(node, "axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(a[1]), _ints(a[2])
        axes = _ints(a[3]) if len(a) > 3 and a[3] is not None else list(range(len(starts)))
        steps = _ints(a[4]) if len(a) > 4 and a[4] is not None else [1] * len(starts)
    idx = [slice(None)] * x.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        dim = x.shape[int(ax) % x.ndim]
        stop: Optional[int] = int(en)
        if sp > 0:
            stop = min(int(en), dim) if en >= 0 else int(en)
        elif en < -dim:   # ONNX: "before the first element" when stepping backwards
            stop = None
        idx[int(ax) % x.ndim] = slice(int(st), stop, int(sp))
    return x[tuple(idx)]


def _div(node: Any, a: Sequence[Any]) -> Any:
    x, y = np.asarray(a[0]), np.asarray(a[1])
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":   # integer Div truncates toward zero
        q = np.abs(x) // np.abs(y)
        return (np.sign(x) * np.sign(y) * q).astype(np.result_type(x, y))
    return x / y


def _cast(node: Any, a: Sequence[Any]) -> Any:
    from onnx import helper

    dt = helper.tensor_dtype_to_np_dtype(int(_attr(node, "to")))
    if dt == np.dtype(object):
        raise ValueError("string cast")
    return np.asarray(a[0]).astype(dt)


def _constant_of_shape(node: Any, a: Sequence[Any]) -> Any:
    from onnx import numpy_helper

    t = _attr(node, "value")
    fill = numpy_helper.to_array(t).reshape(-1) if t is not None else np.zeros(1, np.float32)
    return np.full(_ints(a[0]), fill[0], dtype=fill.dtype)


def _gather(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    axis = int(_attr(node, "axis", 0))
    return np.take(x, np.asarray(a[1]).astype(np.int64), axis=axis)


def _concat(node: Any, a: Sequence[Any]) -> Any:
    return np.concatenate([np.asarray(x) for x in a], axis=int(_attr(node, "axis")))


def _range(node: Any, a: Sequence[Any]) -> Any:
    start, limit, delta = (np.asarray(x) for x in a[:3])
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


def _transpose(node: Any, a: Sequence[Any]) -> Any:
    perm = _attr(node, "perm")
    return np.transpose(np.asarray(a[0]), None if perm is None else [int(p) for p in perm])


def _flatten(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    axis = int(_attr(node, "axis", 1)) % max(x.ndim, 1) if x.ndim else 0
    return x.reshape(int(np.prod(x.shape[:axis])) if axis else 1, -1)


def _expand(node: Any, a: Sequence[Any]) -> Any:
    x = np.asarray(a[0])
    return x * np.ones(_ints(a[1]), dtype=x.dtype)


def _bin(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Sequence[Any]], Any]:
    return lambda n, a: fn(np.asarray(a[0]), np.asarray(a[1]))


NUMPY_OPS: Dict[str, Callable[[Any, Sequence[Any]], Any]] = {
    "Identity": lambda n, a: np.asarray(a[0]),
    "Cast": _cast, "Reshape": _reshape, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Flatten": _flatten,
    "Transpose": _transpose, "Concat": _concat, "Gather": _gather, "Slice": _slice, "Expand": _expand,
    "Add": _bin(np.add), "Sub": _bin(np.subtract), "Mul": _bin(np.multiply), "Div": _div,
    "Equal": _bin(np.equal), "Less": _bin(np.less), "Greater": _bin(np.greater),
    "LessOrEqual": _bin(np.less_equal), "GreaterOrEqual": _bin(np.greater_equal),
    "And": _bin(np.logical_and), "Or": _bin(np.logical_or), "Xor": _bin(np.logical_xor),
    "Not": lambda n, a: np.logical_not(np.asarray(a[0])), "Neg": lambda n, a: -np.asarray(a[0]),
    "Abs": lambda n, a: np.abs(np.asarray(a[0])),
    "Min": lambda n, a: np.minimum.reduce([np.asarray(x) for x in a]),
    "Max": lambda n, a: np.maximum.reduce([np.asarray(x) for x in a]),
    "Where": lambda n, a: np.where(np.asarray(a[0]), np.asarray(a[1]), np.asarray(a[2])),
    "Range": _range, "ConstantOfShape": _constant_of_shape,
}


def _output_size_ok(node: Any, args: Sequence[Any], cap: int) -> bool:
    """Ops whose output can be far larger than their inputs: check the size before computing."""
    if node.op_type in ("ConstantOfShape", "Expand"):
        dims = _ints(args[0] if node.op_type == "ConstantOfShape" else args[1])
        return int(np.prod(dims)) <= cap if dims else True
    if node.op_type == "Range":
        start, limit, delta = (float(np.asarray(x).item()) for x in args[:3])
        return delta != 0 and max(0.0, np.ceil((limit - start) / delta)) <= cap
    return True


def eval_node(node: Any, args: Sequence[Any], opset: int = 0, cap: int = DEFAULT_MAX_ELEMENTS) -> List[Any]:
    """The outputs of ``node`` (default domain, no subgraph) for input arrays ``args`` (None for an
    omitted optional input): NumPy for the shape-arithmetic ops of :data:`NUMPY_OPS`, ONNX's reference
    implementation for the others. Raises ``ValueError`` when it cannot (or the result would
    exceed ``cap`` elements)."""
    if node.op_type in _NON_DETERMINISTIC or node.op_type in _SUBGRAPH_OPS or node.domain not in ("", "ai.onnx"):
        raise ValueError(f"{node.op_type} is not evaluated here")
    if node.op_type in NUMPY_OPS:
        if not _output_size_ok(node, args, cap):
            raise ValueError(f"{node.op_type} '{node.name}' would make more than {cap} elements")
        try:
            return [np.asarray(NUMPY_OPS[node.op_type](node, args))]
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError) as exc:
            raise ValueError(f"{node.op_type} '{node.name}': {exc}") from exc
    return _reference(node, args, opset)


def _reference(node: Any, args: Sequence[Any], opset: int) -> List[Any]:
    import onnx
    from onnx import helper

    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError as exc:  # pragma: no cover - onnx >= 1.13 has it
        raise ValueError("onnx.reference is not available") from exc
    names = [f"in{k}" if a is not None else "" for k, a in enumerate(args)]
    feeds = {nm: np.asarray(a) for nm, a in zip(names, args) if nm}
    n = helper.make_node(node.op_type, names, [f"out{k}" for k in range(len(node.output))])
    n.attribute.extend(node.attribute)
    ins = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(feeds[nm].dtype), feeds[nm].shape)
           for nm in names if nm]
    outs = [helper.make_empty_tensor_value_info(o) for o in n.output]
    model = helper.make_model(helper.make_graph([n], "eval", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())])
    try:
        res = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - any failure: this tensor is not decided here
        raise ValueError(f"{node.op_type} '{node.name}' could not be evaluated: {str(exc).splitlines()[0][:120]}") \
            from exc
    return [np.asarray(r) for r in res]


_Value = Tuple[Optional[np.ndarray], FrozenSet[str], str]   # (value or None, what decided it, why not)


class _Evaluator:
    """Values of the small tensors of one graph that constants, ``values`` and static ``shapes`` decide."""

    def __init__(self, graph: Any, values: Mapping[str, np.ndarray], shapes: Mapping[str, List[int]],
                 opset: int, cap: int) -> None:
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.inits = {t.name: t for t in graph.initializer}
        self.inputs = {vi.name for vi in graph.input}
        self.values, self.shapes, self.opset, self.cap = values, shapes, opset, cap
        self.partial_shapes: Dict[str, List[Any]] = {}
        self.cache: Dict[str, _Value] = {}

    def value(self, name: str, depth: int = 0) -> _Value:
        if name in self.cache:
            return self.cache[name]
        if depth > _MAX_DEPTH:
            return None, frozenset(), f"'{name}' is computed by a chain longer than {_MAX_DEPTH} nodes"
        res = self._compute(name, depth)
        if res[0] is not None and res[0].size > self.cap:
            res = (None, res[1], f"'{name}' has {res[0].size} elements (more than {self.cap})")
        self.cache[name] = res
        return res

    def _compute(self, name: str, depth: int) -> _Value:
        from onnx import numpy_helper

        if name in self.values:
            v = np.asarray(self.values[name])
            return v, frozenset({f"{name}={v.tolist()}"}), ""
        if name in self.inits and name not in self.inputs:
            t = self.inits[name]
            size = int(np.prod(list(t.dims))) if t.dims else 1
            if size > self.cap:
                return None, frozenset(), f"'{name}' has {size} elements (more than {self.cap})"
            arr = numpy_helper.to_array(t)
            if arr.dtype == np.dtype(object):
                return None, frozenset(), f"'{name}' holds strings"
            return arr, frozenset(), ""
        node = self.producer.get(name)
        if node is None:
            return None, frozenset(), f"input '{name}' is fed at run time (give --input-value {name}=VALUE)"
        if name in self.shapes and int(np.prod(self.shapes[name])) > self.cap:
            return None, frozenset(), f"'{name}' has {int(np.prod(self.shapes[name]))} elements (more than {self.cap})"
        if node.op_type == "Constant":
            from .onnx_fold import _constant_value

            const = _constant_value(node)
            if const is None:
                return None, frozenset(), f"Constant '{name}' is not numeric"
            return const, frozenset(), ""
        if node.op_type in ("Shape", "Size"):
            return self._shape_of(node, name)
        if node.op_type in _SUBGRAPH_OPS:
            return None, frozenset(), f"'{name}' comes out of {node.op_type} '{node.name or name}'"
        if node.op_type in _NON_DETERMINISTIC or node.domain not in ("", "ai.onnx"):
            return None, frozenset(), f"'{name}' comes from {node.op_type} (not evaluated)"
        args: List[Any] = []
        sources: Set[str] = set()
        for i in node.input:
            if not i:
                args.append(None)
                continue
            arg, src, why = self.value(i, depth + 1)
            if arg is None:
                return None, frozenset(src), why
            args.append(arg)
            sources |= src
        try:
            outs = eval_node(node, args, self.opset, self.cap)
        except ValueError as exc:
            return None, frozenset(sources), str(exc)
        for o, v in zip(node.output, outs):
            if o and o != name:
                self.cache[o] = (v, frozenset(sources), "") if v.size <= self.cap else \
                    (None, frozenset(sources), f"'{o}' has {v.size} elements (more than {self.cap})")
        k = list(node.output).index(name)
        return (outs[k], frozenset(sources), "") if k < len(outs) else (None, frozenset(), f"'{name}' missing")

    def _shape_of(self, node: Any, name: str) -> _Value:
        x = node.input[0]
        dims = self.shapes.get(x)
        if dims is None:
            known = self.partial_shapes.get(x)
            got = "unknown" if known is None else "[" + ", ".join(str(d) if isinstance(d, int) and d >= 0 else "?"
                                                                   for d in known) + "]"
            return None, frozenset(), f"the shape of '{x}' is not static ({got})"
        if node.op_type == "Size":
            return np.asarray(int(np.prod(dims)), np.int64), frozenset({f"the shape of '{x}' {dims}"}), ""
        start, end = int(_attr(node, "start", 0)), _attr(node, "end")
        sl = dims[start:] if end is None else dims[start:int(end)]
        return np.asarray(sl, np.int64), frozenset({f"the shape of '{x}' {dims}"}), ""


# -- the pass ---------------------------------------------------------------------------------------
def _opset(proto: Any) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def _all_names(graph: Any, into: Set[str]) -> Set[str]:
    """Every value name defined or read in ``graph`` and its subgraphs."""
    into.update(vi.name for vi in list(graph.input) + list(graph.output))
    into.update(t.name for t in graph.initializer)
    for n in graph.node:
        into.update(x for x in list(n.input) + list(n.output) if x)
        for sg in subgraphs(n):
            _all_names(sg, into)
    return into


def _taken_outside(graph: Any, index: int) -> Set[str]:
    """The names used anywhere in the model's top-level ``graph`` except inside node ``index``'s
    subgraphs (its own inputs and outputs count): what an inlined branch must not redefine."""
    into: Set[str] = {vi.name for vi in list(graph.input) + list(graph.output)}
    into.update(t.name for t in graph.initializer)
    for k, n in enumerate(graph.node):
        into.update(x for x in list(n.input) + list(n.output) if x)
        if k != index:
            for sg in subgraphs(n):
                _all_names(sg, into)
    return into


def _rename_reads(graph: Any, mapping: Mapping[str, str]) -> None:
    """Rename outer-scope reads in a nested subgraph (names it defines itself shadow the mapping)."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer} | \
        {o for n in graph.node for o in n.output if o}
    m = {k: v for k, v in mapping.items() if k not in local}
    if not m:
        return
    for n in graph.node:
        for k, i in enumerate(n.input):
            if i in m:
                n.input[k] = m[i]
        for sg in subgraphs(n):
            _rename_reads(sg, m)
    for o in graph.output:
        if o.name in m:
            o.name = m[o.name]


def _fresh(base: str, taken: Set[str]) -> str:
    k = 1
    while f"{base}__{k}" in taken:
        k += 1
    name = f"{base}__{k}"
    taken.add(name)
    return name


def _defined(graph: Any) -> List[str]:
    """Names a (sub)graph defines itself: its inputs, initializers and node outputs."""
    return ([vi.name for vi in graph.input] + [t.name for t in graph.initializer] +
            [o for n in graph.node for o in n.output if o])


def unique_subgraph_names(proto: Any) -> Tuple[Any, int]:
    """A copy of ``proto`` in which every value a subgraph defines has a name no other scope of the
    model defines (sibling If branches may both define ``t``; a tool that keys shapes by name,
    as ONNX Runtime's symbolic shape inference does, then mixes their shapes up); returns it and
    how many names were changed. Reads follow (nested subgraphs too, shadowing respected)."""
    import collections

    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    counts: "collections.Counter[str]" = collections.Counter()

    def count(graph: Any) -> None:
        counts.update(_defined(graph))
        for n in graph.node:
            for sg in subgraphs(n):
                count(sg)

    count(m.graph)
    taken = _all_names(m.graph, set())
    changed = 0

    def fix(graph: Any) -> None:
        nonlocal changed
        for n in graph.node:
            for sg in subgraphs(n):
                mapping = {}
                for d in _defined(sg):
                    if counts[d] > 1 and d not in mapping:
                        counts[d] -= 1
                        mapping[d] = _fresh(d, taken)
                if mapping:
                    changed += len(mapping)
                    for vi in list(sg.input) + list(sg.output) + list(sg.value_info):
                        vi.name = mapping.get(vi.name, vi.name)
                    for t in sg.initializer:
                        t.name = mapping.get(t.name, t.name)
                    for node in sg.node:
                        for k, x in enumerate(node.input):
                            node.input[k] = mapping.get(x, x)
                        for k, x in enumerate(node.output):
                            node.output[k] = mapping.get(x, x)
                        for nested in subgraphs(node):
                            _rename_reads(nested, mapping)
                fix(sg)

    fix(m.graph)
    return m, changed


def _inline(graph: Any, index: int, node: Any, branch: Any, taken: Set[str], node_names: Set[str]) -> None:
    """Replace ``graph.node[index]`` (the If ``node``) by a copy of ``branch``."""
    import onnx
    from onnx import helper

    b = onnx.GraphProto()
    b.CopyFrom(branch)
    defined = [t.name for t in b.initializer] + [o for n in b.node for o in n.output if o]
    mapping = {d: _fresh(d, taken) for d in defined if d in taken}
    taken.update(d for d in defined if d not in mapping)
    for t in b.initializer:
        t.name = mapping.get(t.name, t.name)
    for n in b.node:
        for k, i in enumerate(n.input):
            if i in mapping:
                n.input[k] = mapping[i]
        for k, o in enumerate(n.output):
            if o in mapping:
                n.output[k] = mapping[o]
        for sg in subgraphs(n):
            _rename_reads(sg, mapping)
        if n.name:
            if n.name in node_names:
                n.name = _fresh(n.name, node_names)
            else:
                node_names.add(n.name)
    label = node.name or node.output[0]
    new_nodes = list(b.node)
    for b_out, if_out in zip(b.output, node.output):
        if if_out:
            nm = _fresh(f"{label}/out", node_names)
            new_nodes.append(helper.make_node("Identity", [mapping.get(b_out.name, b_out.name)], [if_out], name=nm))
    del graph.node[index]
    for k, n in enumerate(new_nodes):
        graph.node.insert(index + k, n)
    graph.initializer.extend(b.initializer)
    if len(b.sparse_initializer):
        graph.sparse_initializer.extend(b.sparse_initializer)


def _static_shapes(proto: Any) -> Tuple[Dict[str, List[int]], Dict[str, List[Any]]]:
    """(fully static shapes, all known shapes) of the top-level graph's tensors."""
    import onnx

    inferred = None
    for kwargs in ({"data_prop": True}, {}):
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, **kwargs)
            break
        except Exception:  # noqa: BLE001 - inference failing leaves the inputs' shapes to go on
            continue
    g = (inferred or proto).graph
    static: Dict[str, List[int]] = {}
    known: Dict[str, List[Any]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is None or not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        known[vi.name] = dims
        if all(d >= 0 for d in dims):
            static[vi.name] = dims
    for t in g.initializer:
        static[t.name] = list(t.dims)
    return static, known


def _condition(ev: _Evaluator, node: Any) -> Tuple[Optional[bool], FrozenSet[str], str]:
    v, src, why = ev.value(node.input[0])
    if v is None:
        return None, src, why
    if v.size != 1:
        return None, src, f"the condition has {v.size} elements"
    return bool(v.reshape(-1)[0]), src, ""


def _count_ifs(graphs: Iterable[Any]) -> int:
    n = 0
    for g in graphs:
        for node in g.node:
            n += node.op_type == "If"
            n += _count_ifs(subgraphs(node))
    return n


def _prune(graph: Any) -> None:
    """Drop nodes nothing reads (every ONNX op is free of side effects) and unused initializers."""
    keep = {o.name for o in graph.output}
    nodes = list(graph.node)
    alive: List[Any] = []
    for n in reversed(nodes):
        if any(o and o in keep for o in n.output):
            alive.append(n)
            keep.update(i for i in n.input if i)
            for sg in subgraphs(n):
                keep.update(outer_reads(sg))
    alive.reverse()
    if len(alive) != len(nodes):
        del graph.node[:]
        graph.node.extend(alive)
    inputs = {vi.name for vi in graph.input}
    inits = [t for t in graph.initializer if t.name in keep or t.name in inputs]
    if len(inits) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(inits)


def _fold(graph: Any, ev: _Evaluator) -> int:
    """Nodes whose outputs are all decided become initializers (graph outputs stay computed)."""
    from onnx import numpy_helper

    outputs = {o.name for o in graph.output}
    kept: List[Any] = []
    made = 0
    for n in graph.node:
        if n.op_type not in ("Constant",) and n.output and not any(o in outputs for o in n.output) \
                and not subgraphs(n):
            vals = [ev.value(o) if o else (None, frozenset(), "") for o in n.output]
            if all(o == "" or v[0] is not None for o, v in zip(n.output, vals)):
                for o, v in zip(n.output, vals):
                    if o:
                        graph.initializer.append(numpy_helper.from_array(np.asarray(v[0]), o))
                        made += 1
                continue
        kept.append(n)
    if made:
        del graph.node[:]
        graph.node.extend(kept)
    return made


def _apply_inputs(proto: Any, values: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]]) -> None:
    from onnx import helper, numpy_helper

    from ..errors import InputError

    g = proto.graph
    inits = {t.name for t in g.initializer}
    names = [vi.name for vi in g.input if vi.name not in inits]
    for k in list(values) + list(shapes):
        if k not in names:
            raise InputError(f"'{k}' is not an input of this model (its inputs: {', '.join(names)})")
    for vi in g.input:
        if vi.name not in shapes:
            continue
        dims = vi.type.tensor_type.shape.dim
        want = [int(v) for v in shapes[vi.name]]
        if len(dims) != len(want):
            raise InputError(f"input '{vi.name}' has rank {len(dims)}, not {len(want)} as {want} says")
        for d, want_dim in zip(dims, want):
            if d.HasField("dim_value") and d.dim_value != want_dim:
                raise InputError(f"input '{vi.name}' has {d.dim_value} where {want} says {want_dim}")
            d.Clear()
            d.dim_value = want_dim
    for name, v in values.items():
        for i, vi in enumerate(g.input):
            if vi.name == name:
                del g.input[i]
                break
        g.initializer.append(numpy_helper.from_array(np.asarray(v), name))
        if proto.ir_version < 4:
            t = g.initializer[-1]
            g.input.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
    del g.value_info[:]


def _typed_values(proto: Any, values: Mapping[str, Any]) -> Dict[str, np.ndarray]:
    """``values`` as arrays of each input's dtype (a Python ``16000`` for an int64 input)."""
    from onnx import helper

    types = {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.input if vi.type.HasField("tensor_type")}
    out = {}
    for k, v in values.items():
        arr = np.asarray(v)
        if k in types and types[k]:
            dt = helper.tensor_dtype_to_np_dtype(types[k])
            if dt != np.dtype(object):
                arr = arr.astype(dt)
        out[k] = arr
    return out


def specialize(proto: Any, values: Optional[Mapping[str, Any]] = None,
               shapes: Optional[Mapping[str, Sequence[int]]] = None, *,
               max_elements: int = DEFAULT_MAX_ELEMENTS, max_passes: int = 64) -> Specialization:
    """The model ``proto`` specialized for input ``values`` and static input ``shapes`` (see the
    module's docstring); ``proto`` itself is not changed. Raises :class:`sdk.errors.InputError` for
    a name that is not an input or a shape that contradicts the model."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    vals = _typed_values(out, values or {})
    _apply_inputs(out, vals, shapes or {})
    g = out.graph
    opset = _opset(out)
    node_names = {n.name for n in g.node if n.name}
    spec = Specialization(proto=out, values=dict(vals), shapes={k: [int(d) for d in v] for k, v in (shapes or {}).items()})
    why_not: Dict[str, str] = {}
    for _ in range(max_passes):
        spec.passes += 1
        static, known = _static_shapes(out)
        for name, v in vals.items():
            static[name] = list(np.asarray(v).shape)
        ev = _Evaluator(g, vals, static, opset, max_elements)
        ev.partial_shapes = known
        folded = _fold(g, ev)   # decided tensors become initializers: the next inference sees them
        spec.folded += folded
        decided: List[Tuple[Any, bool, FrozenSet[str]]] = []
        why_not = {}
        for node in g.node:
            if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
                continue
            cond, src, why = _condition(ev, node)
            if cond is None:
                why_not[node.name or node.output[0]] = why
            else:
                decided.append((node, cond, src))
        for node, cond, src in decided:
            spec.resolved.append(IfResolution(node.name or node.output[0], "then" if cond else "else",
                                              node.input[0], sorted(src)))
            branch = [a.g for a in node.attribute if a.name == ("then_branch" if cond else "else_branch")][0]
            idx = list(g.node).index(node)
            _inline(g, idx, node, branch, _taken_outside(g, idx), node_names)
        _prune(g)
        if not folded and not decided:
            break
    for n in g.node:
        if n.op_type == "If":
            label = n.name or n.output[0]
            spec.unresolved.append(IfUnresolved(label, why_not.get(label, "its condition is computed at run time"),
                                                _count_ifs(subgraphs(n))))
    del g.value_info[:]
    _reconcile_outputs(out)
    return spec


def _reconcile_outputs(proto: Any) -> None:
    """A graph output declared with a shape the specialized graph contradicts (an exporter's
    ``[1, seqlen]`` for what is computed as rank 3 here) takes the inferred shape instead, so the
    checker's strict inference agrees; compatible declarations stay."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    for o in probe.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:  # noqa: BLE001 - nothing better known: keep the declarations
        return
    got = {o.name: o for o in inferred.graph.output}
    for o in proto.graph.output:
        new = got.get(o.name)
        if new is None or not o.type.HasField("tensor_type") or not new.type.tensor_type.HasField("shape"):
            continue
        if not _compatible(o.type.tensor_type, new.type.tensor_type):
            o.type.tensor_type.shape.CopyFrom(new.type.tensor_type.shape)


def _compatible(declared: Any, inferred: Any) -> bool:
    if not declared.HasField("shape"):
        return True
    a, b = list(declared.shape.dim), list(inferred.shape.dim)
    if len(a) != len(b):
        return False
    return all(not (x.HasField("dim_value") and y.HasField("dim_value")) or x.dim_value == y.dim_value
               for x, y in zip(a, b))
