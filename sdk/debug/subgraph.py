"""Cut a contiguous range of an ONNX graph's nodes out as a model of its own, and compute the
values of its boundary inputs on the host (for :mod:`sdk.debug.reducer`)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Set

import numpy as np

from ..errors import EdgeSDKError

__all__ = ["Subgraph"]


class Subgraph:
    """The graph of ``proto`` as a list of its compute nodes in graph order (Constant nodes travel
    with the nodes that read them); :meth:`extract` makes the model of nodes ``a..b``."""

    def __init__(self, proto: Any):
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
        self.graph_inputs = [i for i in g.input if i.name not in self.inits]
        self.graph_outputs = {o.name for o in g.output}
        self._producer = {o: n for n in self.nodes for o in n.output}
        self.consumers: Dict[str, List[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in n.input:
                self.consumers.setdefault(t, []).append(i)

    def __len__(self) -> int:
        return len(self.nodes)

    def boundary(self, a: int, b: int) -> List[str]:
        """The tensors nodes ``a..b`` read that none of them makes (and that are not weights)."""
        made: Set[str] = {o for n in self.nodes[a:b + 1] for o in n.output}
        out: List[str] = []
        for n in self.nodes[a:b + 1]:
            for t in n.input:
                if t and t not in made and t not in self.inits and t not in self.const_nodes and t not in out:
                    out.append(t)
        return out

    def outputs(self, a: int, b: int) -> List[str]:
        """What nodes ``a..b`` make that a later node or the model's outputs read (else the last
        node's outputs)."""
        out = [o for n in self.nodes[a:b + 1] for o in n.output
               if o and (o in self.graph_outputs or any(c > b for c in self.consumers.get(o, [])))]
        return out or [o for o in self.nodes[b].output if o]

    def extract(self, a: int, b: int) -> Any:
        """The model of nodes ``a..b`` (with the Constant nodes and weights they read)."""
        from onnx import helper

        nodes = self.nodes[a:b + 1]
        reads = {t for n in nodes for t in n.input}
        consts = [self.const_nodes[t] for t in self.const_nodes if t in reads]
        inits = [self.inits[t] for t in self.inits if t in reads]
        ins = [self._vi(t) for t in self.boundary(a, b)]
        outs = [self._vi(t) for t in self.outputs(a, b)]
        graph = helper.make_graph(consts + list(nodes), f"{self.proto.graph.name}_{a}_{b}", ins, outs, inits)
        model = helper.make_model(graph, opset_imports=list(self.proto.opset_import))
        model.ir_version = self.proto.ir_version
        return model

    def _vi(self, name: str) -> Any:
        from onnx import TensorProto, helper

        vi = self._typed(name, 0)
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
                   session: Optional[Any] = None, random_ok: bool = False) -> Dict[str, np.ndarray]:
        """Values of the boundary of nodes ``a..b`` on ``feed`` (the model's inputs), computed by
        running nodes ``0..a-1`` on ONNX Runtime on this host; when those do not run here (the
        failing op sits before ``a``) and ``random_ok``: seeded random values of the right shapes."""
        from ..quantize.accuracy import ort_session

        need = self.boundary(a, b)
        have = {k: np.asarray(v) for k, v in feed.items() if k in need}
        rest = [t for t in need if t not in have]
        if not rest:
            return have
        prefix = self.extract(0, a - 1)
        from ..quantize.calibrate import augment
        from ..quantize.graph import GraphIndex

        aug = augment(prefix, rest, GraphIndex(prefix))
        try:
            sess = session if session is not None else ort_session(aug)
            names = [i.name for i in sess.get_inputs()]
            got = sess.run(rest, {k: np.asarray(feed[k]) for k in names})
        except EdgeSDKError:
            if not random_ok:
                raise
            have.update(self.random_values(rest))
            return have
        except Exception as exc:  # ONNX Runtime's own errors when running
            if not random_ok:
                raise EdgeSDKError(f"nodes 0..{a - 1} do not run on this host: {exc}") from exc
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
