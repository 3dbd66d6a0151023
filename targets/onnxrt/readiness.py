"""Mobile execution-provider readiness: which nodes NNAPI, CoreML or XNNPACK would take.

:func:`ep_readiness` answers, for one model and one EP, with one :class:`EpReadiness`: the
partitions (groups of nodes the EP takes, in onnxruntime's partitioning order), node counts, and
for each node left to the CPU the reasons (op not supported by the EP, an input of dynamic shape,
an input rank over the EP's limit).

The verdict is onnxruntime's own: the usability checker that ``python -m
onnxruntime.tools.check_onnx_model_mobile_usability`` runs
(``onnxruntime/tools/mobile_helpers/usability_checker.py``), on the same graph it checks (the
model optimised at the BASIC level, then ONNX shape inference), with the EP support tables that
onnxruntime ships beside it (``nnapi_supported_ops.md``, ``coreml_supported_neuralnetwork_ops.md``,
``coreml_supported_mlprogram_ops.md``) and its rules (fixed input shapes first; CoreML rank <= 5).
onnxruntime ships no table for XNNPACK: ``ep_tables/xnnpack_supported_ops.md`` is taken from the
XNNPACK EP's source (cited there) and fed to the same checker. Per-node reasons are worked out from
the same rules and must reproduce the checker's verdict node for node
(``tests/targets/test_ort_readiness.py`` checks that on every corpus model).

Where the EP is present in this onnxruntime build, :attr:`EpReadiness.assignment` also holds the
session's real placement (ONNX Runtime's verbose "Node placements" log: nodes per provider). The
op tables ignore per-op caveats (e.g. NNAPI's "only 2D Conv"), exactly like onnxruntime's checker;
they are listed in :attr:`EpReadiness.caveats`.
"""
from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from ...errors import InputError, MissingDependencyError, UnsupportedModelError
from ...registry import Registry

__all__ = ["EpRules", "EP_RULES", "EpReadiness", "NodeReadiness", "ep_readiness", "ep_names",
           "parse_node_placements"]

_TABLES = Path(__file__).resolve().parent / "ep_tables"


@dataclass(frozen=True)
class EpRules:
    """How onnxruntime's usability checker judges one EP: its support table (``table``: a file
    name in onnxruntime's ``tools/mobile_helpers`` or a path), the highest input rank it takes,
    and whether inputs must have fixed shapes (the checker's first pass always asks for them)."""

    name: str
    provider: str
    table: str
    max_rank: int = 999
    require_fixed_shapes: bool = True
    shipped_table: bool = True
    description: str = ""

    def table_path(self) -> Path:
        if not self.shipped_table:
            return Path(self.table)
        try:
            from onnxruntime.tools.mobile_helpers import usability_checker
        except ImportError as exc:
            raise MissingDependencyError("EP readiness", "onnxruntime", "pip install onnxruntime") from exc
        path = Path(usability_checker.__file__).parent / self.table
        if not path.is_file():
            raise MissingDependencyError(f"{self.name} readiness ({self.table})", "onnxruntime's mobile_helpers",
                                         "pip install onnxruntime (a full build ships the tables)")
        return path


#: EP short name -> its rules. CoreML's default model format in onnxruntime is NeuralNetwork
#: (``ModelFormat`` provider option); ``coreml-mlprogram`` is the MLProgram table.
EP_RULES: "Registry[EpRules]" = Registry("mobile execution provider", {
    "nnapi": EpRules("nnapi", "NnapiExecutionProvider", "nnapi_supported_ops.md",
                     description="Android NNAPI (onnxruntime's nnapi_supported_ops.md)"),
    "coreml": EpRules("coreml", "CoreMLExecutionProvider", "coreml_supported_neuralnetwork_ops.md", max_rank=5,
                      description="Apple CoreML, NeuralNetwork format (onnxruntime's coreml_supported_neuralnetwork_ops.md)"),
    "coreml-mlprogram": EpRules("coreml-mlprogram", "CoreMLExecutionProvider", "coreml_supported_mlprogram_ops.md",
                                max_rank=5,
                                description="Apple CoreML, MLProgram format (onnxruntime's coreml_supported_mlprogram_ops.md)"),
    "xnnpack": EpRules("xnnpack", "XnnpackExecutionProvider", str(_TABLES / "xnnpack_supported_ops.md"),
                       require_fixed_shapes=False, shipped_table=False,
                       description="XNNPACK (table from the EP's source: ep_tables/xnnpack_supported_ops.md)"),
}, known_label="known EPs")


def ep_names() -> List[str]:
    return EP_RULES.names()


@dataclass
class NodeReadiness:
    """One node of the checked graph: ``op`` is ``domain:op``; ``partition`` the index of the
    EP partition that holds it (None: left to the CPU); ``reasons`` why it is left to the CPU."""

    name: str
    op: str
    supported: bool
    partition: Optional[int] = None
    reasons: List[str] = field(default_factory=list)

    @property
    def why(self) -> str:
        """The reasons without tensor names (``op not in the table; dynamic input shape``), to group nodes by."""
        kinds = []
        for r in self.reasons:
            kind = ("op not in the EP's table" if r.startswith("op ") else "dynamic input shape" if "dynamic" in r
                    else r.split("'")[0].strip() if "rank" not in r else "input rank over the EP's limit")
            if kind not in kinds:
                kinds.append(kind)
        return "; ".join(kinds)


@dataclass
class EpReadiness:
    """Which nodes of a model one mobile EP takes (onnxruntime's usability checker's verdict).

    ``suitability``: the checker's YES / MAYBE / NO for the model as it is; ``if_fixed_shapes``:
    the same with shapes ignored (what fixing dynamic inputs would give), when the model has
    dynamic inputs. ``assignment``: provider -> node count from a real session where the EP is
    present in this onnxruntime build, else None with ``assignment_note`` saying why."""

    ep: str
    provider: str
    model: str
    source: str
    table: str
    num_nodes: int
    supported_nodes: int
    partitions: List[List[str]]
    nodes: List[NodeReadiness]
    unsupported_ops: List[str]
    caveats: List[str]
    dynamic_inputs: List[str]
    suitability: str
    if_fixed_shapes: Optional[Dict[str, Any]] = None
    assignment: Optional[Dict[str, int]] = None
    assignment_note: str = ""
    fallback_counts: Dict[str, int] = field(default_factory=dict)

    @property
    def coverage(self) -> float:
        """Fraction of the nodes the EP takes (0..1)."""
        return self.supported_nodes / self.num_nodes if self.num_nodes else 0.0

    @property
    def cpu_nodes(self) -> List[NodeReadiness]:
        return [n for n in self.nodes if not n.supported]

    def summary(self) -> str:
        sizes = ", ".join(str(len(p)) for p in self.partitions)
        return (f"{self.ep}: {self.supported_nodes}/{self.num_nodes} nodes ({100 * self.coverage:.1f}%) in "
                f"{len(self.partitions)} partition(s){f' [{sizes}]' if sizes else ''}; suitability {self.suitability}")

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["coverage"] = self.coverage
        out["schema"] = "edgesdk.ep_readiness/1"
        return out


# -- the checked graph --------------------------------------------------------------------------------
def _prepare(model: Any, input_shapes: Optional[Mapping[str, Sequence[int]]], tmp: Path) -> Tuple[Any, str]:
    """(the shape-inferred, BASIC-optimised ONNX proto, the model's name), as analyze_model makes it."""
    from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model

    from ...model import Model

    m = model if isinstance(model, Model) else Model.load(model)
    if m.format != "onnx":
        raise UnsupportedModelError(f"EP readiness reads ONNX models, not {m.format}: check the source .onnx "
                                    "(an .ort file holds the same graph after optimisation)")
    if input_shapes:
        m = m.with_input_shapes(input_shapes)
    src = tmp / "model.onnx"
    src.write_bytes(m.to_bytes())
    opt = tmp / "model.basic.onnx"
    try:
        optimize_model(src, opt, use_external_initializers=True)
        shaped = ModelProtoWithShapeInfo(opt).model_with_shape_info
    except Exception as exc:  # noqa: BLE001 - onnxruntime / onnx raise their own types
        raise UnsupportedModelError(f"onnxruntime cannot prepare '{m.name}' for the EP check: "
                                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    return shaped, m.name


def _node_key(node: Any, i: int, prefix: str = "") -> str:
    return node.name or f"{prefix}{node.op_type}#{i}"


@dataclass
class _Scope:
    """One graph the checker walks (the main graph, then each If/Loop/Scan body under it, depth first,
    as ``check_partitioning``'s ``_check_graph`` recurses): ``prefix`` names it (``If_0/then_branch/``),
    ``value_info`` and ``outer_inits`` are what the checker sees there."""

    graph: Any
    prefix: str
    value_info: Dict[str, Any]
    outer_inits: Set[str]


def _scopes(main: Any, require_fixed: bool) -> List[_Scope]:
    """The graphs in the checker's order with its value-info scoping: the main graph's value info only
    when fixed shapes are required, a subgraph's always (the checker passes its parent's dict down,
    empty or not, and extends it with the subgraph's own values)."""
    out: List[_Scope] = []

    def visit(graph: Any, prefix: str, outer: Optional[Dict[str, Any]], outer_inits: Set[str]) -> None:
        value_info: Dict[str, Any] = {}
        if outer is not None:
            value_info = dict(outer)
            for v in list(graph.input) + list(graph.output) + list(graph.value_info):
                value_info[v.name] = v
        out.append(_Scope(graph, prefix, value_info, set(outer_inits)))
        inner_inits = set(outer_inits) | {i.name for i in graph.initializer}
        for i, node in enumerate(graph.node):
            for attr in node.attribute:
                if attr.HasField("g"):
                    visit(attr.g, f"{_node_key(node, i, prefix)}/{attr.name}/", value_info, inner_inits)

    visit(main, "", {} if require_fixed else None, set())
    return out


def _reasons(scope: _Scope, checker: Any, rules: EpRules, require_fixed: bool) -> Dict[int, List[str]]:
    """Per node of one scope (by position), why the usability checker's rules leave it to the CPU: the
    same three tests as ``_check_partitioning_for_graph`` (op in the table; every input, even an empty
    optional one, of fixed shape when fixed shapes are required, value info before initializers; input
    rank <= max_rank where there is value info, and a Transpose's perm length)."""
    from onnxruntime.tools.onnx_model_utils import is_fixed_size_tensor

    graph = scope.graph
    value_info = scope.value_info
    inits = {i.name for i in graph.initializer} | scope.outer_inits

    def fixed(x: str) -> bool:
        return is_fixed_size_tensor(value_info[x]) if x in value_info else x in inits

    out: Dict[int, List[str]] = {}
    for i, node in enumerate(graph.node):
        why: List[str] = []
        op = f"{node.domain or 'ai.onnx'}:{node.op_type}"
        if op not in checker._ops:
            why.append(f"op {op} is not in the {rules.name} support table")
        if require_fixed:
            dyn = [x for x in node.input if not fixed(x)]
            if dyn:
                shown = ", ".join(repr(x) if x else "(empty optional input)" for x in dyn[:3])
                why.append(f"input {shown} has a dynamic or unknown shape")
        if value_info:
            for x in node.input:
                v = value_info.get(x)
                if x and v is not None and v.type.HasField("tensor_type") \
                        and len(v.type.tensor_type.shape.dim) > rules.max_rank:
                    why.append(f"input '{x}' has rank {len(v.type.tensor_type.shape.dim)} > {rules.max_rank}")
                    break
        if node.op_type == "Transpose" and node.attribute and len(node.attribute[0].ints) > rules.max_rank:
            why.append(f"Transpose perm of rank {len(node.attribute[0].ints)} > {rules.max_rank}")
        if why:
            out[i] = why
    return out


def _check(graph: Any, rules: EpRules, require_fixed: bool) -> Any:
    from onnxruntime.tools.mobile_helpers import usability_checker as uc

    checker = uc._SupportedOpsChecker(rules.table_path())  # noqa: SLF001 - the checker's own table reader
    info = uc.check_partitioning(graph, checker, require_fixed, rules.max_rank)
    return info, checker


def ep_readiness(model: Union[str, "os.PathLike[str]", Any], ep: str,
                 input_shapes: Optional[Mapping[str, Sequence[int]]] = None, *,
                 session_assignment: bool = True) -> EpReadiness:
    """Which nodes of ``model`` (an ONNX path or :class:`~sdk.Model`) the EP ``ep`` (nnapi, coreml,
    coreml-mlprogram, xnnpack) takes, by onnxruntime's usability checker; ``input_shapes`` fix
    dynamic inputs first. ``session_assignment``: also read a real session's placement when the EP
    is in this onnxruntime build. Raises :class:`~sdk.errors.UnknownNameError` for an unknown EP."""
    rules = EP_RULES.load(ep.strip().lower())
    try:
        import onnxruntime  # noqa: F401
        from onnxruntime.tools.mobile_helpers import usability_checker as uc
    except ImportError as exc:
        raise MissingDependencyError("EP readiness", "onnxruntime", "pip install onnxruntime") from exc
    with tempfile.TemporaryDirectory(prefix="edgesdk-ep-") as tmp:
        shaped, name = _prepare(model, input_shapes, Path(tmp))
        graph = shaped.graph
        if not graph.value_info and len(graph.node) > 1:
            # every value is a graph input or output (nothing left to infer): the checker refuses a
            # graph without value info, so its outputs' are given as value info too
            graph.value_info.extend(graph.output)
        # the checker's own logger argument is optional but used unguarded when a graph has no value
        # info beyond its inputs and outputs (every value a graph output): give it a silent one
        quiet = logging.getLogger("edgesdk.readiness.checker")
        quiet.propagate = False
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())
        dynamic, _ = uc.check_shapes(graph, quiet)
        info, checker = _check(graph, rules, rules.require_fixed_shapes)
        # every node the checker counts, main graph first, then each subgraph under its node
        walked: List[Tuple[Any, str, List[str]]] = []
        for scope in _scopes(graph, rules.require_fixed_shapes):
            reasons = _reasons(scope, checker, rules, rules.require_fixed_shapes)
            for i, node in enumerate(scope.graph.node):
                walked.append((node, _node_key(node, i, scope.prefix), reasons.get(i, [])))
        key = {id(node): k for node, k, _ in walked}
        where = {id(n): p for p, group in enumerate(info.supported_groups) for n in group}
        nodes = []
        for node, k, reasons_of in walked:
            ok = id(node) in where
            why = [] if ok else (reasons_of or ["left out by the checker's partitioning (no rule fired)"])
            nodes.append(NodeReadiness(k, f"{node.domain or 'ai.onnx'}:{node.op_type}", ok, where.get(id(node)), why))
        fixed = None
        if dynamic and rules.require_fixed_shapes:
            relaxed, _ = _check(graph, rules, False)
            fixed = {"supported_nodes": relaxed.num_supported_nodes, "partitions": relaxed.num_partitions,
                     "suitability": relaxed.suitability().name}
        assignment, note = (None, "not asked") if not session_assignment else _assignment(Path(tmp) / "model.basic.onnx",
                                                                                        rules)
    counts = {"op": info.nodes_unsupported_due_to_op, "dynamic_shape": info.nodes_unsupported_due_to_dynamic_input,
              "rank": info.num_unsupported_nodes_due_to_rank}
    return EpReadiness(
        ep=rules.name, provider=rules.provider, model=name,
        source="onnxruntime usability_checker (check_onnx_model_mobile_usability)"
               + ("" if rules.shipped_table else ", edgesdk's XNNPACK table from the EP source"),
        table=rules.table if rules.shipped_table else "ep_tables/xnnpack_supported_ops.md",
        num_nodes=info.num_nodes, supported_nodes=info.num_supported_nodes,
        partitions=[[key.get(id(n), n.name) for n in g] for g in info.supported_groups],
        nodes=nodes, unsupported_ops=sorted(info.unsupported_ops), caveats=checker.get_caveats(),
        dynamic_inputs=[v.name for v in dynamic], suitability=info.suitability().name if info.num_nodes else "NO",
        if_fixed_shapes=fixed, assignment=assignment, assignment_note=note, fallback_counts=counts,
    )


# -- the real assignment -------------------------------------------------------------------------------
_PLACED = re.compile(r"(?:All nodes placed on|Node\(s\) placed on) \[(\w+)\]\. Number of nodes: (\d+)")


def parse_node_placements(log: str) -> Dict[str, int]:
    """``{provider: nodes}`` from ONNX Runtime's verbose session log ("All nodes placed on
    [CPUExecutionProvider]. Number of nodes: 12" / "Node(s) placed on [X]. Number of nodes: 3")."""
    out: Dict[str, int] = {}
    for provider, count in _PLACED.findall(log):
        out[provider] = out.get(provider, 0) + int(count)
    return out


def _assignment(model_path: Path, rules: EpRules) -> Tuple[Optional[Dict[str, int]], str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    if rules.provider not in available:
        from .providers import NOT_LOCAL, short_name

        return None, (f"{rules.provider} is not in this onnxruntime build (it has: "
                      f"{', '.join(short_name(p) for p in available if p not in NOT_LOCAL)}): the checker's verdict only")
    placements, err = session_placements(model_path, [rules.provider, "CPUExecutionProvider"])
    if placements is None:
        return None, f"a session with {rules.provider} could not be created: {err}"
    return placements, "from a real session's node placements (BASIC optimisation, like the checker's graph)"


def session_placements(model_path: Union[str, Path], providers: Sequence[str]) -> Tuple[Optional[Dict[str, int]], str]:
    """Create a session with ``providers`` at BASIC optimisation and verbose logging; the node count
    each provider got, read from its log (fd 2 captured while the session is created)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 0
    text, err = "", ""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            ort.InferenceSession(str(model_path), so, providers=list(providers))
        except Exception as exc:  # noqa: BLE001 - any session failure is reported, not raised
            err = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
    if err:
        return None, err
    placed = parse_node_placements(text)
    if not placed:
        return None, "the session log has no node placements"
    return placed, ""


def check_ep_name(ep: str) -> str:
    """The canonical EP name, or :class:`InputError` listing the known ones."""
    key = ep.strip().lower()
    if key not in EP_RULES:
        raise InputError(f"unknown EP '{ep}' for readiness", f"known: {', '.join(EP_RULES)}")
    return key
