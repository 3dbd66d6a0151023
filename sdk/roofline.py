"""Roofline: per-layer work (FLOPs) and traffic (bytes) from an ONNX graph, against a chip's peak
compute and memory bandwidth.

For an ONNX node, MACs come from the inferred shapes (Conv, ConvTranspose, Gemm, MatMul:
``FLOPs = 2 x MACs``; every other op counts one FLOP per output element), and bytes moved are its
weights (initializers and Constant outputs) plus the activations it reads and writes. A runtime
layer that fuses several nodes counts their FLOPs, their weights, and only the activations that
cross the group's boundary. Intensity = FLOPs / bytes (FLOP/byte); the attainable throughput is
``min(peak_gflops[precision], intensity x bandwidth_GBps)``; a layer is ``"memory"`` bound when
the bandwidth line is the lower one, else ``"compute"``.

Core module: imports ``onnx`` lazily (host side; the board never needs it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from .errors import InputError

__all__ = ["Hardware", "NodeCost", "GraphCosts", "graph_costs", "roofline_layers", "precision_key",
           "estimate_host_hardware", "estimate_layers"]

# the ops whose cost is their multiply-accumulates, control flow and recurrent layers included
_MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN", "If", "Loop", "Scan")
_ITEMSIZE = {"float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "double": 8, "float64": 8,
             "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
             "bool": 1}


@dataclass
class Hardware:
    """A chip's roofs: ``peak_gops`` per precision (``fp32``, ``fp16``, ``int8``: GOP/s, dense),
    ``memory_bandwidth_gbs`` (GB/s), and ``source``: where the figures come from (a data sheet, or
    "estimated on this host")."""

    peak_gops: Dict[str, float]
    memory_bandwidth_gbs: Optional[float]
    source: str = ""
    estimated: bool = False

    def peak_for(self, precision: Optional[str]) -> Tuple[Optional[float], str]:
        key = precision_key(precision)
        if key in self.peak_gops:
            return float(self.peak_gops[key]), key
        if "fp32" in self.peak_gops:
            return float(self.peak_gops["fp32"]), "fp32"
        return None, key

    def to_dict(self) -> Dict[str, Any]:
        return {"peak_gops": dict(self.peak_gops), "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
                "source": self.source, "estimated": self.estimated}


def precision_key(dtype: Optional[str]) -> str:
    """``float``/``float32`` -> ``fp32``, ``float16`` -> ``fp16``, ``int8``/``uint8`` -> ``int8``."""
    d = (dtype or "float").lower()
    if d in ("fp16", "float16", "half", "bfloat16"):
        return "fp16"
    if d in ("int8", "uint8", "i8", "u8"):
        return "int8"
    return "fp32"


@dataclass
class NodeCost:
    """One ONNX node: ``flops``, ``weight_bytes``, its activation ``inputs`` / ``outputs``
    (tensor name -> bytes), and whether the FLOPs were ``exact`` (shapes known)."""

    name: str
    op_type: str
    flops: float
    weight_bytes: float
    inputs: Dict[str, float] = field(default_factory=dict)
    outputs: Dict[str, float] = field(default_factory=dict)
    exact: bool = True
    macs: float = 0.0


@dataclass
class GraphCosts:
    nodes: Dict[str, NodeCost]
    unknown_shapes: int
    input_shapes: Dict[str, List[int]]


def _numel(shape: Optional[Sequence[Any]]) -> Optional[int]:
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _tensor_bytes(onnx: Any, dims: Sequence[int], data_type: int) -> float:
    if data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return 0.0
    return float((_numel(list(dims)) or 0) * onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize)


def _inferred(model: Any, shapes_given: Mapping[str, Sequence[int]]) -> Any:
    """The model's graph with shapes inferred for ``shapes_given`` (strict; lenient on failure)."""
    import onnx

    from .formats.onnx_macs import symbolic_shapes

    try:
        fixed = model.with_input_shapes(shapes_given).proto
        symbolic = symbolic_shapes(fixed)   # the same shapes `sdk inspect` counts MACs with
        return (symbolic if symbolic is not None else fixed).graph
    except Exception:  # noqa: BLE001 - strict inference failed: fall back to the lenient pass
        return onnx.shape_inference.infer_shapes(model.proto, data_prop=True).graph


def _shapes_and_weights(g: Any, shapes_given: Mapping[str, Sequence[int]]
                        ) -> Tuple[Dict[str, List[Any]], Dict[str, str], Dict[str, float]]:
    """Tensor shapes and dtypes of the graph, and the bytes of its weights (initializers and
    Constant outputs)."""
    import onnx

    from .formats.onnx import _value_info_spec

    shapes: Dict[str, List[Any]] = {}
    dtypes: Dict[str, str] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        spec = _value_info_spec(vi)
        shapes[vi.name], dtypes[vi.name] = list(spec.shape), spec.dtype
    shapes.update({k: list(v) for k, v in shapes_given.items()})
    weights: Dict[str, float] = {}
    for init in g.initializer:
        weights[init.name] = _tensor_bytes(onnx, init.dims, init.data_type)
        shapes[init.name] = list(init.dims)
    for node in g.node:
        tensors = [a.t for a in node.attribute if a.name == "value" and a.HasField("t")]
        if node.op_type == "Constant" and tensors:
            weights[node.output[0]] = _tensor_bytes(onnx, tensors[0].dims, tensors[0].data_type)
            shapes[node.output[0]] = list(tensors[0].dims)
    return shapes, dtypes, weights


def _node_flops(node: Any, shapes: Dict[str, List[Any]],
                scope: Optional[Dict[str, Any]] = None) -> Tuple[Optional[float], Optional[float]]:
    """``(flops, macs)``: 2 x MACs for Conv/Gemm/MatMul/LSTM/GRU/RNN and for If/Loop (their bodies,
    counted as ``sdk inspect`` counts them: the larger branch, the body x a static trip count), one
    per output element otherwise; None when the shapes (or a Loop's trip count) are not known."""
    from .formats.onnx import node_macs

    if node.op_type in _MAC_OPS:
        macs = node_macs(node, shapes, scope)
        return (2.0 * macs, float(macs)) if macs is not None else (None, None)
    out_count = _numel(shapes.get(node.output[0])) if node.output else None
    return (float(out_count) if out_count is not None else None), None


def graph_costs(model: Any, input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> GraphCosts:
    """Costs of every top-level node of an ONNX :class:`~sdk.Model` with its inputs fixed to
    ``input_shapes`` (dynamic dims not given there: 1)."""
    shapes_given = {s.name: s.resolve((input_shapes or {}).get(s.name), default_dim=1) for s in model.inputs}
    g = _inferred(model, shapes_given)
    shapes, dtypes, weights = _shapes_and_weights(g, shapes_given)

    def nbytes(name: str) -> float:
        n = _numel(shapes.get(name))
        return float(n * _ITEMSIZE.get(dtypes.get(name, "float32"), 4)) if n is not None else 0.0

    from .formats.onnx_macs import _constants

    scope = _constants(g, {})
    nodes: Dict[str, NodeCost] = {}
    unknown = 0
    for i, node in enumerate(g.node):
        if node.op_type == "Constant":
            continue
        name = node.name or "%s_%d" % (node.op_type, i)
        flops, macs = _node_flops(node, shapes, scope)
        unknown += flops is None
        nodes[name] = NodeCost(name, node.op_type, float(flops or 0.0),
                               sum(weights[x] for x in node.input if x in weights),
                               {x: nbytes(x) for x in node.input if x and x not in weights},
                               {x: nbytes(x) for x in node.output if x}, flops is not None, float(macs or 0))
    return GraphCosts(nodes, unknown, {k: list(v) for k, v in shapes_given.items()})


def group_cost(costs: GraphCosts, names: Sequence[str]) -> Tuple[float, float, bool]:
    """``(flops, bytes, exact)`` of a group of nodes run as one layer: activations that stay
    inside the group are not counted."""
    members = [costs.nodes[n] for n in names if n in costs.nodes]
    produced: Set[str] = {o for m in members for o in m.outputs}
    consumed: Set[str] = {i for m in members for i in m.inputs}
    flops = sum(m.flops for m in members)
    weights = sum(m.weight_bytes for m in members)
    reads = sum(b for m in members for i, b in m.inputs.items() if i not in produced)
    writes = sum(b for m in members for o, b in m.outputs.items() if o not in consumed or len(members) == 1)
    return float(flops), float(weights + reads + writes), all(m.exact for m in members) and bool(members)


def _layer_bytes_from_shapes(layer: Mapping[str, Any]) -> Optional[float]:
    total = 0.0
    for shapes_key, dtypes_key in (("input_shapes", "input_dtypes"), ("output_shapes", "output_dtypes")):
        shapes, dts = layer.get(shapes_key) or [], layer.get(dtypes_key) or []
        for i, s in enumerate(shapes):
            n = _numel(s)
            if n is None:
                return None
            total += n * _ITEMSIZE.get(dts[i] if i < len(dts) else "float", 4)
    return total or None


def roofline_point(flops: float, nbytes: float, time_ms: Optional[float], precision: Optional[str],
                   hw: Hardware) -> Dict[str, Any]:
    """The roofline fields of one layer (see the module docstring)."""
    intensity = flops / nbytes if nbytes > 0 else None
    peak, key = hw.peak_for(precision)
    bw = hw.memory_bandwidth_gbs
    mem_roof = intensity * bw if (intensity is not None and bw) else None
    roofs = [r for r in (peak, mem_roof) if r is not None]
    attainable = min(roofs) if roofs else None
    bound = None
    if peak is not None and mem_roof is not None:
        bound = "memory" if mem_roof < peak else "compute"
    achieved = flops / (time_ms * 1e6) if time_ms else None  # FLOP / ms -> GFLOP/s
    return {"flops": flops, "bytes": nbytes, "intensity_flop_per_byte": intensity, "attainable_gflops": attainable,
            "achieved_gflops": achieved, "bound": bound, "roof_precision": key,
            "efficiency": (achieved / attainable) if (achieved is not None and attainable) else None}


def roofline_layers(layers: List[Dict[str, Any]], costs: GraphCosts, hw: Hardware) -> Dict[str, Any]:
    """Add the roofline fields to profiled layers (dicts with ``onnx_nodes``, ``time_ms``,
    ``precision``; in place) and return the summary block: the hardware, counts per bound."""
    for layer in layers:
        flops, nbytes, exact = group_cost(costs, layer.get("onnx_nodes") or [])
        if not layer.get("onnx_nodes"):  # a runtime-inserted layer (layout reorder): bytes from its shapes
            nbytes = _layer_bytes_from_shapes(layer) or 0.0
            flops = 0.0
        layer.update(roofline_point(flops, nbytes, layer.get("time_ms"), layer.get("precision"), hw))
        layer["macs"] = float(sum(costs.nodes[n].macs for n in layer.get("onnx_nodes") or [] if n in costs.nodes))
        layer["flops_exact"] = exact
    return _summary(layers, costs, hw)


def _summary(layers: List[Dict[str, Any]], costs: GraphCosts, hw: Hardware) -> Dict[str, Any]:
    counts = {"memory": 0, "compute": 0, None: 0}
    time_by = {"memory": 0.0, "compute": 0.0}
    for l in layers:
        counts[l.get("bound")] = counts.get(l.get("bound"), 0) + 1
        if l.get("bound") in time_by:
            time_by[l["bound"]] += float(l.get("time_ms") or l.get("estimated_ms") or 0.0)
    bw = hw.memory_bandwidth_gbs
    ridge = {k: v / bw for k, v in hw.peak_gops.items()} if bw else {}
    above = [l["name"] for l in layers if l.get("achieved_gflops") and l.get("attainable_gflops")
             and l["achieved_gflops"] > 1.05 * l["attainable_gflops"]]
    notes = []
    if above:
        notes.append("%d layer(s) ran above their roof: the roofs are too low for this run (%s)" % (
            len(above), "the estimate was taken on a busy machine, or the layer's bytes are over-counted"
            if hw.estimated else "check the board profile's [hardware] figures and the layer's precision"))
    return {"notes": notes, "layers_above_roof": len(above),"hardware": hw.to_dict(), "ridge_flop_per_byte": ridge, "layers_memory_bound": counts["memory"],
            "layers_compute_bound": counts["compute"], "time_ms_memory_bound": time_by["memory"],
            "time_ms_compute_bound": time_by["compute"], "nodes_with_unknown_shapes": costs.unknown_shapes,
            "input_shapes": costs.input_shapes,
            "total_flops": float(sum(l.get("flops") or 0.0 for l in layers))}


def estimate_layers(costs: GraphCosts, hw: Hardware, precision: str = "fp32") -> List[Dict[str, Any]]:
    """Layers of an estimate-only roofline (no profile): one per ONNX node, ``time_ms`` None and
    ``estimated_ms`` = the time at the attainable throughput (the roofline's lower bound). The
    graph's float32 bytes are scaled to ``precision`` (fp16: half, int8: a quarter), as an engine
    built at that precision would move them."""
    scale = {"fp32": 1.0, "fp16": 0.5, "int8": 0.25}.get(precision_key(precision), 1.0)
    out = []
    for n in costs.nodes.values():
        nbytes = (n.weight_bytes + sum(n.inputs.values()) + sum(n.outputs.values())) * scale
        point = roofline_point(n.flops, nbytes, None, precision, hw)
        att = point["attainable_gflops"]
        est = n.flops / (att * 1e6) if att else None
        out.append(dict(name=n.name, onnx_nodes=[n.name], op_type=n.op_type, time_ms=None, estimated_ms=est,
                        percent=None, precision=precision, provider=None, flops_exact=n.exact, macs=n.macs, **point))
    total = sum(l["estimated_ms"] or 0.0 for l in out)
    for l in out:
        l["percent"] = 100.0 * (l["estimated_ms"] or 0.0) / total if total else None
    out.sort(key=lambda l: -(l["estimated_ms"] or 0.0))
    return out


def _best_rate(fn: Callable[[], object], work: float, seconds: float) -> float:
    """The best ``work`` per second of ``fn`` over ``seconds`` (after one untimed call)."""
    fn()
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if dt > 0:
            best = max(best, work / dt)
    return best


def estimate_host_hardware(seconds: float = 1.0) -> Hardware:
    """Roofs of this machine ESTIMATED with NumPy: fp32 from a 512x512 float32 matrix product
    (BLAS, every core), bandwidth from copying a 64 MiB array (bytes read + written / s). These
    are attained figures, below the theoretical peaks; labelled as such."""
    import numpy as np

    a = np.random.default_rng(0).random((512, 512), dtype=np.float32)
    b = a.copy()
    best_gflops = _best_rate(lambda: np.matmul(a, b), 2 * 512 ** 3 / 1e9, seconds / 2)
    src = np.ones(16 * 1024 * 1024, dtype=np.float32)
    dst = np.empty_like(src)
    best_gbs = _best_rate(lambda: np.copyto(dst, src), 2 * src.nbytes / 1e9, seconds / 2)
    if best_gflops <= 0 or best_gbs <= 0:
        raise InputError("could not estimate this host's compute and bandwidth (timer resolution)")
    return Hardware({"fp32": best_gflops}, best_gbs, estimated=True,
                    source="ESTIMATED on this host with NumPy: fp32 = best 512x512 sgemm, bandwidth = best 64 MiB "
                           "copy (read + write); attained figures, not vendor peaks")
