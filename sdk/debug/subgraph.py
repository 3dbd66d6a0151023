"""Cut a set of an ONNX graph's nodes out as a model of its own, and compute the values of its
boundary inputs on the host (for :mod:`sdk.debug.reducer`).

With ``layers=True`` the nodes are grouped into layers (:attr:`Subgraph.units`): a Q/DQ model's
QuantizeLinear/DequantizeLinear pair on a tensor belongs to the node that makes the tensor, the
DequantizeLinear of a weight to the node that reads it; the nodes are put in an order where each
layer's nodes are contiguous (a topological order still), so a range of layers is a range of nodes."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set

import numpy as np

from ..errors import EdgeSDKError

__all__ = ["Subgraph"]

_QDQ = ("QuantizeLinear", "DequantizeLinear")


class Subgraph:
    """The graph of ``proto`` as a list of its compute nodes in graph order (Constant nodes travel
    with the nodes that read them); :meth:`extract` makes the model of nodes ``a..b``,
    :meth:`extract_of` that of any set of them. :attr:`units`: the node indices of each unit the
    reducer bisects over (one node each; layers with their Q/DQ nodes when ``layers``)."""

    def __init__(self, proto: Any, layers: bool = False):
        import onnx

        self.proto = proto
        try:
            inferred = onnx.shape_inference.infer_shapes(proto)
        except Exception:
            inferred = proto
        g = proto.graph
        self.value_info = {vi.name: vi for vi in list(inferred.graph.value_info) + list(g.input) + list(g.output)}
        self.inits = {t.name: t for t in g.initializer}
        self.const_nodes = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}
        self.nodes = [n for n in g.node if n.op_type != "Constant"]
        self.units: List[List[int]] = [[i] for i in range(len(self.nodes))]
        if layers:
            grouped = _layers(self.nodes, set(self.inits) | set(self.const_nodes))
            if grouped is not None:
                order = [i for unit in grouped for i in unit]
                self.nodes = [self.nodes[i] for i in order]
                at = 0
                self.units = []
                for unit in grouped:
                    self.units.append(list(range(at, at + len(unit))))
                    at += len(unit)
        self.graph_inputs = [i for i in g.input if i.name not in self.inits]
        self.graph_outputs = {o.name for o in g.output}
        self._producer = {o: n for n in self.nodes for o in n.output}
        self._producer_index = {o: i for i, n in enumerate(self.nodes) for o in n.output}
        self.consumers: Dict[str, List[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in n.input:
                self.consumers.setdefault(t, []).append(i)

    def learn_shapes(self, values: Mapping[str, np.ndarray]) -> None:
        """Take the shapes (and types) of tensors shape inference could not follow from ``values``
        (tensors computed for real, e.g. by a reference model)."""
        from onnx import helper

        for name, v in values.items():
            vi = self.value_info.get(name)
            if vi is None or not vi.type.tensor_type.HasField("shape"):
                arr = np.asarray(v)
                et = (vi.type.tensor_type.elem_type if vi is not None and vi.type.tensor_type.elem_type
                      else helper.np_dtype_to_tensor_dtype(arr.dtype))
                self.value_info[name] = helper.make_tensor_value_info(name, et, list(arr.shape))

    def nodes_of(self, units: Iterable[int]) -> List[int]:
        """The node indices of ``units`` (indices into :attr:`units`), in graph order."""
        return sorted(i for u in units for i in self.units[u])

    def __len__(self) -> int:
        return len(self.nodes)

    def boundary(self, a: int, b: int) -> List[str]:
        """The tensors nodes ``a..b`` read that none of them makes (and that are not weights)."""
        return self.boundary_of(range(a, b + 1))

    def boundary_of(self, idx: Iterable[int]) -> List[str]:
        """The tensors the nodes ``idx`` read that none of them makes (and that are not weights)."""
        nodes = [self.nodes[i] for i in sorted(idx)]
        made: Set[str] = {o for n in nodes for o in n.output}
        out: List[str] = []
        for n in nodes:
            for t in n.input:
                if t and t not in made and t not in self.inits and t not in self.const_nodes and t not in out:
                    out.append(t)
        return out

    def outputs(self, a: int, b: int) -> List[str]:
        """What nodes ``a..b`` make that a later node or the model's outputs read (else the last
        node's outputs)."""
        return self.outputs_of(range(a, b + 1))

    def outputs_of(self, idx: Iterable[int]) -> List[str]:
        """What the nodes ``idx`` make that a node outside them or the model's outputs read (else
        the last node's outputs)."""
        keep = sorted(idx)
        inside = set(keep)
        out = [o for i in keep for o in self.nodes[i].output
               if o and (o in self.graph_outputs or any(c not in inside for c in self.consumers.get(o, [])))]
        return out or [o for o in self.nodes[keep[-1]].output if o]

    def extract(self, a: int, b: int) -> Any:
        """The model of nodes ``a..b`` (with the Constant nodes and weights they read)."""
        return self.extract_of(range(a, b + 1))

    def extract_of(self, idx: Iterable[int], outputs: Optional[Sequence[str]] = None) -> Any:
        """The model of the nodes ``idx`` (with the Constant nodes and weights they read); its
        outputs: :meth:`outputs_of`, or ``outputs`` (tensors they make; declared with their shape
        only where shape inference knew it)."""
        from onnx import helper

        keep = sorted(idx)
        nodes = [self.nodes[i] for i in keep]
        reads = {t for n in nodes for t in n.input}
        consts = [self.const_nodes[t] for t in self.const_nodes if t in reads]
        inits = [self.inits[t] for t in self.inits if t in reads]
        ins = [self._vi(t) for t in self.boundary_of(keep)]
        if outputs is None:
            outs = [self._vi(t) for t in self.outputs_of(keep)]
        else:
            outs = [self._vi(t, guess=False) for t in outputs]
        graph = helper.make_graph(consts + nodes, f"{self.proto.graph.name}_{keep[0]}_{keep[-1]}", ins, outs, inits)
        model = helper.make_model(graph, opset_imports=list(self.proto.opset_import))
        model.ir_version = self.proto.ir_version
        return model

    def _vi(self, name: str, guess: bool = True) -> Any:
        from onnx import TensorProto, helper

        vi = self._typed(name, 0) if guess else self.value_info.get(name)
        if vi is not None and vi.type.tensor_type.elem_type and not vi.type.tensor_type.HasField("shape"):
            return helper.make_tensor_value_info(name, vi.type.tensor_type.elem_type, None)
        if vi is not None and vi.type.tensor_type.elem_type:
            out = helper.make_tensor_value_info(name, vi.type.tensor_type.elem_type, None)
            out.type.CopyFrom(vi.type)
            return out
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)

    def _typed(self, name: str, depth: int) -> Any:
        """The value info of ``name`` with a shape; behind an op shape inference cannot follow (a
        custom op), the nearest shaped input upstream stands in (a pass-through guess)."""
        vi = self.value_info.get(name)
        if (vi is not None and vi.type.tensor_type.HasField("shape")) or depth > 32:
            return vi
        producer = self._producer.get(name)
        for i in (producer.input if producer is not None else []):
            if i in self.inits:
                continue
            up = self._typed(i, depth + 1)
            if up is not None and up.type.tensor_type.HasField("shape"):
                return up
        return vi

    def inputs_for(self, a: int, b: int, feed: Mapping[str, np.ndarray],
                   random_ok: bool = False, known: Optional[Mapping[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
        """Values of the boundary of nodes ``a..b``; see :meth:`inputs_of`."""
        return self.inputs_of(range(a, b + 1), feed, random_ok=random_ok, known=known)

    def cone(self, names: Sequence[str], stop: Iterable[str]) -> List[int]:
        """The nodes (indices, graph order) that compute ``names`` from the model's inputs, weights
        and the tensors ``stop`` (whose values are given)."""
        given = set(stop)
        seen: Set[int] = set()
        todo = [t for t in names if t not in given]
        while todo:
            t = todo.pop()
            i = self._producer_index.get(t)
            if i is None or i in seen:
                continue
            seen.add(i)
            todo.extend(x for x in self.nodes[i].input if x and x not in given)
        return sorted(seen)

    def inputs_of(self, idx: Iterable[int], feed: Mapping[str, np.ndarray], random_ok: bool = False,
                  known: Optional[Mapping[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
        """Values of the boundary of the nodes ``idx``: the model's inputs from ``feed``, tensors
        in ``known`` (``{tensor: value}``, e.g. an FP32 reference's values) from there, the rest
        computed on ONNX Runtime on this host by the nodes that make them (from ``feed`` and
        ``known``). When those do not run here (the failing op sits among them) and ``random_ok``:
        seeded random values of the right shapes."""
        from ..quantize.accuracy import ort_session

        need = self.boundary_of(idx)
        given: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in feed.items()}
        if known:
            given.update({k: np.asarray(v) for k, v in known.items() if k not in given})
        have = {t: given[t] for t in need if t in given}
        rest = [t for t in need if t not in have]
        if not rest:
            return have
        cone = self.cone(rest, given)
        try:
            if not cone:
                raise EdgeSDKError(f"nothing on this host makes {', '.join(rest[:3])}")
            upstream = self.extract_of(cone, outputs=rest)
            sess = ort_session(upstream)
            names = [i.name for i in sess.get_inputs()]
            missing = [k for k in names if k not in given]
            if missing:
                raise EdgeSDKError(f"no value for {', '.join(missing[:3])}")
            got = sess.run(rest, {k: given[k] for k in names})
        except EdgeSDKError:
            if not random_ok:
                raise
            have.update(self.random_values(rest))
            return have
        except Exception as exc:  # ONNX Runtime's own errors when running
            if not random_ok:
                raise EdgeSDKError(f"the {len(cone)} nodes before do not run on this host: {exc}") from exc
            have.update(self.random_values(rest))
            return have
        have.update(dict(zip(rest, got)))
        return have

    def random_values(self, names: List[str]) -> Dict[str, np.ndarray]:
        """Seeded random values of the tensors' inferred shapes and types (dynamic dims: 1)."""
        from onnx import helper

        rng = np.random.default_rng(0)
        out: Dict[str, np.ndarray] = {}
        for name in names:
            vi = self.value_info.get(name)
            tt = vi.type.tensor_type if vi is not None else None
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim] if tt is not None else [1]
            dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt is not None and tt.elem_type else np.float32
            out[name] = (rng.standard_normal(shape) if np.dtype(dtype).kind == "f" else np.zeros(shape)).astype(dtype)
        return out


def _layers(nodes: Sequence[Any], weights: Set[str]) -> Optional[List[List[int]]]:
    """``nodes`` grouped into layers (lists of indices; see the module's doc), in an order that is
    still topological; None when the grouping would break the order."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    consumers: Dict[str, List[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            consumers.setdefault(t, []).append(i)
    attached = _attached(nodes, weights, consumers)
    owner: Dict[int, int] = {}         # node -> the node heading its layer

    def head(i: int) -> int:
        if i not in owner:
            n = nodes[i]
            if i in attached:
                j = attached[i]
                owner[i] = i if j == i else head(j)
            elif n.op_type in _QDQ and n.input and n.input[0] in producer and producer[n.input[0]] not in attached:
                owner[i] = head(producer[n.input[0]])
            else:
                owner[i] = i
        return owner[i]

    for i in range(len(nodes)):
        head(i)
    groups: Dict[int, List[int]] = {}
    for i in range(len(nodes)):
        groups.setdefault(owner[i], []).append(i)
    ordered = []
    for h in sorted(groups):
        members = groups[h]
        ordered.append([i for i in members if i in attached and i != h] + [i for i in members if i not in attached or i == h])
    made: Set[str] = set(weights)
    made.update(t for n in nodes for t in n.input if t and t not in producer)  # the model's inputs
    for unit in ordered:
        for i in unit:
            if any(t and t not in made for t in nodes[i].input):
                return None
            made.update(o for o in nodes[i].output if o)
    return ordered


def _attached(nodes: Sequence[Any], weights: Set[str], consumers: Mapping[str, List[int]]) -> Dict[int, int]:
    """The nodes that compute from weights alone (a weight's DequantizeLinear, its Q -> DQ, a
    Transpose of it), each -> the first node that reads what they make and is not one of them
    (itself when none)."""
    static: Set[str] = set(weights)
    out: Dict[int, int] = {}
    for i, n in enumerate(nodes):
        if all((not t) or t in static for t in n.input):
            static.update(o for o in n.output if o)
            out[i] = i
    for i in out:
        todo, seen, first = list(nodes[i].output), set(), None
        while todo:
            t = todo.pop()
            for c in consumers.get(t, []):
                if c in seen:
                    continue
                seen.add(c)
                if c in out:
                    todo.extend(nodes[c].output)
                elif first is None or c < first:
                    first = c
        out[i] = first if first is not None else i
    return out
