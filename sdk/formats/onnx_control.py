"""Which graph inputs steer an ONNX model's control flow: the ``If`` conditions and the ``Loop``
trip counts / conditions whose *values* depend on an input.

Dependencies are followed forward through every node (subgraphs included: a node with a body
depends on what its body reads from the enclosing scope); ``Shape`` and ``Size`` depend on a
tensor's shape, not its values, so they cut the chain. Each finding is a dict::

    {"input": "sr", "role": "chooses an If branch", "node": "If_12", "kind": "value"}

``kind`` is ``"value"`` for a small integer/bool input (a rate, a flag, a length: a random value
picks an arbitrary branch, so commands refuse to draw one) and ``"data"`` for a tensor of data
(an image whose content decides when a decoder's Loop stops: random data runs a different number
of iterations than real data, which commands note).
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Mapping, Set

__all__ = ["control_inputs", "subgraphs", "outer_reads"]

_SHAPE_ONLY = ("Shape", "Size")


def subgraphs(node: Any) -> List[Any]:
    """The graphs a node holds (If branches, Loop/Scan bodies)."""
    out = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


def outer_reads(graph: Any) -> Set[str]:
    """Names a (sub)graph reads that it does not define: its outer-scope values (a graph output
    that names one directly included)."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    reads: Set[str] = set()
    for n in graph.node:
        reads.update(i for i in n.input if i and i not in defined)
        for sg in subgraphs(n):
            reads.update(r for r in outer_reads(sg) if r not in defined)
        defined.update(o for o in n.output if o)
    reads.update(o.name for o in graph.output if o.name not in defined)
    return reads


def _walk(graph: Any, deps: Dict[str, FrozenSet[str]], found: List[Dict[str, Any]], seen: Set[Any]) -> None:
    none: FrozenSet[str] = frozenset()
    for n in graph.node:
        ins = [deps.get(i, none) for i in n.input if i]
        if n.op_type in _SHAPE_ONLY and n.domain in ("", "ai.onnx"):
            here = none
        else:
            here = frozenset().union(*ins) if ins else none
            for g in subgraphs(n):
                here = here | frozenset().union(*[deps.get(r, none) for r in outer_reads(g)] or [none])
        if n.op_type == "If" and n.input:
            for name in sorted(deps.get(n.input[0], none)):
                key = (name, "If", n.name or n.output[0])
                if key not in seen:
                    seen.add(key)
                    found.append({"input": name, "role": "chooses an If branch", "node": n.name or n.output[0]})
        if n.op_type == "Loop":
            for pos, role in ((0, "bounds a Loop (trip count)"), (1, "ends a Loop (condition)")):
                if len(n.input) > pos and n.input[pos]:
                    for name in sorted(deps.get(n.input[pos], none)):
                        key = (name, "Loop", n.name or n.output[0])
                        if key not in seen:
                            seen.add(key)
                            found.append({"input": name, "role": role, "node": n.name or n.output[0]})
        for g in subgraphs(n):
            inner = dict(deps)
            if n.op_type == "Loop":  # body inputs: iteration number, condition, carried values
                carried = list(n.input[1:])
                for k, gi in enumerate(g.input):
                    inner[gi.name] = deps.get(carried[k - 1], none) if 1 <= k <= len(carried) and carried[k - 1] else none
                # what the body computes for the next condition decides when the loop ends
                _walk(g, inner, found, seen)
                if len(g.output) and g.output[0].name in inner:
                    for name in sorted(inner[g.output[0].name]):
                        key = (name, "Loop", n.name or n.output[0])
                        if key not in seen:
                            seen.add(key)
                            found.append({"input": name, "role": "ends a Loop (condition)",
                                          "node": n.name or n.output[0]})
            else:
                _walk(g, inner, found, seen)
        for o in n.output:
            if o:
                deps[o] = here


def control_inputs(proto: Any, specs: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The inputs of ``proto`` that choose an ``If`` branch or bound/end a ``Loop`` (see the module
    docstring). ``specs``: input name -> :class:`~sdk.tensors.TensorSpec` (for ``kind``)."""
    import numpy as np

    g = proto.graph
    inits = {i.name for i in g.initializer}
    deps: Dict[str, FrozenSet[str]] = {i.name: frozenset([i.name]) for i in g.input if i.name not in inits}
    found: List[Dict[str, Any]] = []
    _walk(g, deps, found, set())
    for f in found:
        spec = specs.get(f["input"])
        small = spec is not None and len(spec.shape) <= 1 and all(isinstance(d, int) and 0 <= d <= 16
                                                                  for d in spec.shape)
        integral = spec is not None and np.dtype(spec.dtype).kind in "iub"
        f["kind"] = "value" if small and integral else "data"
    return found
