"""Per-layer profiles: where an inference's time goes, layer by layer, mapped to ONNX nodes.

Each target exposes its runtime's profiler through :meth:`sdk.targets.Session.profile` (the base
raises :class:`~sdk.errors.ProfilingUnavailableError` with the reason); this module holds what they
share: the result types, the ONNX Runtime chrome-trace parser and the mapping of runtime layer
names (fused, NCHWc, TensorRT ``A + B``) back to source ONNX node names.

``LayerProfile.to_dict()`` is the ``sdk profile`` JSON::

    {"layers": [{name, onnx_nodes, op_type, time_ms, percent, precision, provider, calls, ...}],
     "total_ms", "end_to_end_ms", "coverage", "flagged", "flag_reason", "runs", "profiler", ...}

``time_ms`` is a layer's mean time per inference; ``total_ms`` their sum; ``end_to_end_ms`` the
mean wall time of the profiled runs. A profile whose ``total_ms`` differs from ``end_to_end_ms``
by more than :data:`FLAG_TOLERANCE` (20%) is ``flagged``: the layer times do not account for the
run. Runs on the board too: Python 3.8, NumPy, standard library.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["LayerTime", "LayerProfile", "FLAG_TOLERANCE", "GraphNode", "OrtTrace", "parse_ort_trace", "map_to_onnx",
           "graph_nodes_of", "layers_from_times", "trt_layer_onnx_nodes"]

#: Relative difference between summed layer time and end-to-end time above which a profile is flagged.
FLAG_TOLERANCE = 0.20


@dataclass
class LayerTime:
    """One runtime layer: mean ``time_ms`` per inference, its share ``percent`` of the summed
    layer time, the ONNX nodes it runs (``onnx_nodes``; empty for a layer the runtime inserted,
    e.g. a layout reorder), ``op_type``, ``precision`` (dtype of its first input), ``provider``
    (execution provider / engine), ``calls`` per inference, and the tensor shapes it saw."""

    name: str
    op_type: str
    time_ms: float
    onnx_nodes: List[str] = field(default_factory=list)
    percent: float = 0.0
    precision: Optional[str] = None
    provider: Optional[str] = None
    calls: float = 1.0
    input_shapes: List[List[int]] = field(default_factory=list)
    output_shapes: List[List[int]] = field(default_factory=list)
    input_dtypes: List[str] = field(default_factory=list)
    output_dtypes: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        out = {"name": self.name, "onnx_nodes": list(self.onnx_nodes), "op_type": self.op_type,
               "time_ms": self.time_ms, "percent": self.percent, "precision": self.precision,
               "provider": self.provider, "calls": self.calls,
               "input_shapes": self.input_shapes, "output_shapes": self.output_shapes,
               "input_dtypes": self.input_dtypes, "output_dtypes": self.output_dtypes}
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LayerTime":
        known = ("name", "op_type", "time_ms", "onnx_nodes", "percent", "precision", "provider", "calls",
                 "input_shapes", "output_shapes", "input_dtypes", "output_dtypes")
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(**{k: d[k] for k in known if k in d}, extra=extra)


@dataclass
class LayerProfile:
    """A per-layer profile of ``runs`` inferences on one target (see the module docstring)."""

    target: str
    profiler: str
    layers: List[LayerTime]
    runs: int
    end_to_end_ms: Optional[float]
    end_to_end_unprofiled_ms: Optional[float] = None
    notes: List[str] = field(default_factory=list)
    #: Per run: summed layer time / that run's end-to-end time (when the profiler gives both).
    run_coverage: List[float] = field(default_factory=list)

    @property
    def total_ms(self) -> float:
        return float(sum(l.time_ms for l in self.layers))

    @property
    def coverage(self) -> Optional[float]:
        """Summed layer time over end-to-end time (1.0: the layers account for the whole run): the
        median over runs of the per-run ratio when the profiler timed each run (robust to one run
        preempted on a busy machine), else ``total_ms / end_to_end_ms``."""
        if self.run_coverage:
            ordered = sorted(self.run_coverage)
            mid = len(ordered) // 2
            return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
        if not self.end_to_end_ms:
            return None
        return self.total_ms / self.end_to_end_ms

    @property
    def flag_reason(self) -> Optional[str]:
        cov = self.coverage
        if cov is None:
            return "no end-to-end time to compare the layer sum with"
        if abs(cov - 1.0) > FLAG_TOLERANCE:
            return ("summed layer time is %.0f%% of the end-to-end time (%.3f of %.3f ms; more than %d%% apart): "
                    "the layer times do not account for the run" % (cov * 100, self.total_ms, self.end_to_end_ms or 0,
                                                                     FLAG_TOLERANCE * 100))
        return None

    def finish(self) -> "LayerProfile":
        """Fill ``percent`` and sort slowest first."""
        total = self.total_ms
        for l in self.layers:
            l.percent = 100.0 * l.time_ms / total if total > 0 else 0.0
        self.layers.sort(key=lambda l: -l.time_ms)
        return self

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": "edgesdk.profile/1", "target": self.target, "profiler": self.profiler, "runs": self.runs,
                "layers": [l.to_dict() for l in self.layers], "total_ms": self.total_ms,
                "end_to_end_ms": self.end_to_end_ms, "end_to_end_unprofiled_ms": self.end_to_end_unprofiled_ms,
                "coverage": self.coverage, "run_coverage": list(self.run_coverage),
                "flagged": self.flag_reason is not None, "flag_reason": self.flag_reason,
                "flag_tolerance": FLAG_TOLERANCE, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LayerProfile":
        return cls(target=str(d.get("target")), profiler=str(d.get("profiler")),
                   layers=[LayerTime.from_dict(l) for l in d.get("layers", [])], runs=int(d.get("runs") or 0),
                   end_to_end_ms=d.get("end_to_end_ms"), end_to_end_unprofiled_ms=d.get("end_to_end_unprofiled_ms"),
                   notes=list(d.get("notes") or []), run_coverage=list(d.get("run_coverage") or []))


# -- ONNX Runtime's profiler ---------------------------------------------------------------------------
def _shapes(items: Any) -> Tuple[List[List[int]], List[str]]:
    shapes, dtypes = [], []
    for item in items or []:
        if isinstance(item, Mapping) and item:
            dtype, shape = next(iter(item.items()))
            dtypes.append(str(dtype))
            shapes.append([int(d) for d in shape])
    return shapes, dtypes


#: ONNX Runtime's type names -> the precision names of the rest of the SDK (and TensorRT's inspector).
_PRECISION = {"float": "fp32", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "double": "fp64",
              "int8": "int8", "uint8": "int8", "int32": "int32", "int64": "int64", "bool": "bool"}


def precision_name(dtype: Optional[str]) -> Optional[str]:
    """``float`` -> ``fp32``, ``float16`` -> ``fp16``, ``uint8``/``int8`` -> ``int8``; others as given."""
    if dtype is None:
        return None
    return _PRECISION.get(dtype.lower(), dtype.lower())


@dataclass
class OrtTrace:
    """What :func:`parse_ort_trace` found: ``layers`` (mean ms per run), the ``runs`` kept, each
    kept run's ``model_run`` duration (``run_ms``) and summed kernel time (``kernel_ms``)."""

    layers: List[LayerTime]
    runs: int
    run_ms: List[float]
    kernel_ms: List[float]


def parse_ort_trace(events: Sequence[Mapping[str, Any]], skip_runs: int = 0) -> OrtTrace:
    """Parse ONNX Runtime's chrome-trace profile (``SessionOptions.enable_profiling``).

    Node events (``cat == "Node"``, names ``<node>_kernel_time``) are assigned to the
    ``model_run`` event that contains them; the first ``skip_runs`` runs (warm-up) are dropped.
    ``onnx_nodes``
    is left empty: :func:`map_to_onnx` fills it from the graph."""
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    kept = runs[skip_runs:]
    if not kept:
        return OrtTrace([], 0, [], [])
    begin = kept[0][0]
    per_run = [0.0] * len(kept)
    acc: Dict[str, LayerTime] = {}
    order: List[str] = []
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    body_us = _body_time_us(nodes)
    for e in nodes:
        ts = float(e.get("ts", 0))
        run_index = next((k for k, (a, b) in enumerate(kept) if a <= ts <= b), None)
        if ts < begin or run_index is None:
            continue
        name = str(e["name"])[: -len("_kernel_time")]
        args = e.get("args") or {}
        layer = acc.get(name)
        if layer is None:
            ins, in_dt = _shapes(args.get("input_type_shape"))
            outs, out_dt = _shapes(args.get("output_type_shape"))
            layer = acc[name] = LayerTime(name=name, op_type=str(args.get("op_name") or "?"), time_ms=0.0,
                                          precision=precision_name(in_dt[0] if in_dt else (out_dt[0] if out_dt else None)),
                                          provider=args.get("provider"), calls=0.0, input_shapes=ins,
                                          output_shapes=outs, input_dtypes=in_dt, output_dtypes=out_dt)
            order.append(name)
        inner = body_us.get(id(e), 0.0)
        own = max(0.0, float(e.get("dur", 0)) - inner)   # a Loop/If event spans its body's events
        if id(e) in body_us:
            layer.extra["body_ms"] = float(layer.extra.get("body_ms", 0.0)) + inner / 1e3
            layer.extra["time"] = "own time only: the body's nodes are listed as their own layers"
        layer.time_ms += own / 1e3
        layer.calls += 1
        per_run[run_index] += own / 1e3
    n = len(kept)
    for layer in acc.values():
        layer.time_ms /= n
        layer.calls /= n
        if "body_ms" in layer.extra:
            layer.extra["body_ms"] = float(layer.extra["body_ms"]) / n
    return OrtTrace([acc[k] for k in order], n, [(b - a) / 1e3 for a, b in kept], per_run)


_CONTROL_OPS = ("If", "Loop", "Scan")


def _body_time_us(nodes: Sequence[Mapping[str, Any]]) -> Dict[int, float]:
    """For each control-flow node event (If/Loop/Scan), the summed duration (us) of the node
    events directly inside its time span (its body's nodes, which the trace lists too): id -> us."""
    spans = sorted(((float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0)), e) for e in nodes),
                   key=lambda t: (t[0], -t[1]))
    out: Dict[int, float] = {}
    stack: List[Tuple[float, float, Any]] = []
    for a, b, e in spans:
        while stack and not (stack[-1][0] <= a and b <= stack[-1][1]):
            stack.pop()
        if stack:  # directly inside the innermost enclosing control-flow event
            parent = stack[-1][2]
            out[id(parent)] = out.get(id(parent), 0.0) + (b - a)
        op = str((e.get("args") or {}).get("op_name") or "")
        if op in _CONTROL_OPS:
            out.setdefault(id(e), 0.0)
            stack.append((a, b, e))
    return out


def load_trace(path: str) -> List[Dict[str, Any]]:
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return list(events)


# -- mapping runtime layers to ONNX nodes --------------------------------------------------------------
@dataclass(frozen=True)
class GraphNode:
    """What the mapping needs of an ONNX node (no ``onnx`` import on the board)."""

    name: str
    op_type: str
    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]


def graph_nodes_of(proto: Any) -> List[GraphNode]:
    """The top-level nodes of an ONNX ``ModelProto`` (unnamed nodes get ONNX Runtime's naming
    convention is not reproducible, so they keep an empty name and can only be reached by output)."""
    return [GraphNode(n.name, n.op_type, tuple(n.input), tuple(n.output)) for n in proto.graph.node]


_SUFFIXES = (re.compile(r"_nchwc$"), re.compile(r"/[A-Za-z]+Fusion/?$"), re.compile(r"_token_\d+$"),
             re.compile(r"_fusion$"), re.compile(r"_Fused$"))
_TRT_ONNX = re.compile(r"ONNX Layer:\s*([^\]\x1e]+)")


def _candidates(name: str) -> List[str]:
    """Names a runtime layer may stand for: itself and itself with known optimizer suffixes
    stripped (ORT NCHWc ``<output>_nchwc``, ``<node>/QuickGeluFusion/``, ``_token_N``)."""
    out = [name]
    cur = name
    for _ in range(3):
        for pat in _SUFFIXES:
            stripped = pat.sub("", cur)
            if stripped != cur and stripped:
                cur = stripped
                out.append(cur)
    return out


def _primary(layer: LayerTime, by_name: Mapping[str, GraphNode], by_output: Mapping[str, GraphNode]) -> List[str]:
    if layer.onnx_nodes:  # the runtime told us (TensorRT metadata, or a name list): keep known ones
        return [n for n in layer.onnx_nodes if n in by_name] or list(layer.onnx_nodes)
    for parts in ([p.strip() for p in layer.name.split(" + ")],):  # TensorRT fuses as "A + B"
        if len(parts) > 1:
            found = [n for p in parts for n in _candidates(p) if n in by_name]
            if found:
                return found
    for cand in _candidates(layer.name):
        if cand in by_name:
            return [cand]
        if cand in by_output:  # NCHWc renames a node after its output
            return [by_output[cand].name]
    return []


def map_to_onnx(layers: Sequence[LayerTime], nodes: Sequence[GraphNode]) -> List[str]:
    """Fill each layer's ``onnx_nodes`` from the graph; returns the ONNX nodes no layer ran.

    First each layer's own node (exact name, optimizer suffixes stripped, NCHWc output name,
    TensorRT ``A + B``). Then nodes the optimizer fused away (no layer of their own: the Sigmoid
    of a SiLU, a BatchNorm folded into a Conv) join the layer that consumes their output, and
    failing that the layer that produces their input, until nothing moves."""
    by_name = {n.name: n for n in nodes if n.name}
    by_output = {o: n for n in nodes for o in n.outputs}
    owner: Dict[str, LayerTime] = {}
    for layer in layers:
        layer.onnx_nodes = _primary(layer, by_name, by_output)
        for node_name in layer.onnx_nodes:
            owner.setdefault(node_name, layer)
    consumers: Dict[str, List[GraphNode]] = {}
    for node in nodes:
        for i in node.inputs:
            consumers.setdefault(i, []).append(node)
    pending = [node for node in nodes if node.name and node.name not in owner and node.op_type != "Constant"]
    moved = True
    while pending and moved:
        rest = [node for node in pending if not _attach(node, owner, consumers, by_output)]
        moved, pending = len(rest) < len(pending), rest
    return [node.name for node in pending]


def _attach(node: GraphNode, owner: Dict[str, LayerTime], consumers: Mapping[str, List[GraphNode]],
            by_output: Mapping[str, GraphNode]) -> bool:
    """Join ``node`` to the layer that consumes its output, else to the layer that produces its
    input; False when neither is known yet."""
    target = next((owner[c.name] for o in node.outputs for c in consumers.get(o, []) if c.name in owner), None)
    if target is None:
        target = next((owner[by_output[i].name] for i in node.inputs
                       if i in by_output and by_output[i].name in owner), None)
    if target is None:
        return False
    target.onnx_nodes.append(node.name)
    owner[node.name] = target
    return True


def trt_layer_onnx_nodes(layer_info: Mapping[str, Any]) -> List[str]:
    """ONNX node names of one TensorRT engine-inspector layer (``LayerInformationFormat.JSON``,
    engines built with ``ProfilingVerbosity.DETAILED``): the ``Metadata`` field's
    ``[ONNX Layer: <name>]`` entries (one per fused node), else the layer name split on ``" + "``."""
    meta = str(layer_info.get("Metadata") or "")
    found = [m.strip() for m in _TRT_ONNX.findall(meta)]
    if found:
        return found
    name = str(layer_info.get("Name") or "")
    return [p.strip() for p in name.split(" + ") if p.strip()]


def layers_from_times(times: Mapping[str, Sequence[float]], runs: int, provider: str,
                      info: Optional[Mapping[str, Mapping[str, Any]]] = None) -> List[LayerTime]:
    """Layers from per-layer millisecond lists (an IProfiler's ``report_layer_time`` calls over
    ``runs`` inferences); ``info`` (layer name -> engine-inspector entry) adds op type,
    precision and ONNX nodes."""
    out = []
    for name, samples in times.items():
        meta = dict((info or {}).get(name) or {})
        ins = meta.get("Inputs") or []
        precision = None
        if ins and isinstance(ins[0], Mapping):
            fmt = str(ins[0].get("Format/Datatype") or "")
            precision = precision_name(fmt.split()[-1]) if fmt else None
        out.append(LayerTime(name=name, op_type=str(meta.get("LayerType") or "?"),
                             time_ms=float(sum(samples)) / max(1, runs), calls=len(samples) / max(1, runs),
                             onnx_nodes=trt_layer_onnx_nodes(meta) if meta else [], precision=precision,
                             provider=provider))
    return out


def mean(values: Iterable[float]) -> Optional[float]:
    vals = list(values)
    return float(sum(vals) / len(vals)) if vals else None
