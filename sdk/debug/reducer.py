"""``sdk debug reduce``: the smallest subgraph of an ONNX model that still fails a check, by
bisection (the shortest failing prefix, then the shortest failing suffix of it), then unit by unit
(dropping each remaining unit that is not needed for the failure, while runs are left). A unit is a
node; for a ``diff`` check, a layer (a node with its Q/DQ nodes: :class:`sdk.debug.subgraph.Subgraph`
with ``layers``).

A check (:func:`parse_check`) is one of:

- ``error:PATTERN@TARGET`` (or ``@board:NAME``): the subgraph is opened and run on that target here
  (or on that board through its agent) and fails when the error's message matches the regular
  expression ``PATTERN``;
- ``check:TARGET[@VERSION]``: ``sdk.check`` says a node cannot run there (no build, no runtime);
- ``diff:MIN_SNR_DB@TARGET`` (or ``@board:NAME``), with an FP32 ``reference`` model: the subgraph
  runs there and fails when one of its outputs (and every layer output it makes, as the next layer
  reads it) has an SNR below ``MIN_SNR_DB`` against the reference's tensor of that name
  (:mod:`sdk.debug.reference`; an output without a counterpart is not judged, and the result says so).

Each candidate subgraph is fed the values its boundary tensors take on the model's inputs
(computed on this host by the nodes before it); for a ``diff`` check, the reference's values where
the reference has the tensor, so a subgraph fails only when it contains the layer that adds the
error. The result writes the minimal failing model and the largest passing one found, each with an
``.npz`` of the inputs that reproduce it.
"""
from __future__ import annotations

import math
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import EdgeSDKError, InputError

__all__ = ["Check", "parse_check", "reduce", "ReduceResult", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
_FORMS = ("write error:PATTERN@TARGET, error:PATTERN@board:NAME, check:TARGET[@VERSION] "
          "or diff:MIN_SNR_DB@TARGET (with --reference FP32.onnx)")


@dataclass
class Check:
    """A parsed ``--fails`` check; ``fails(model_proto, inputs)`` -> ``(failed, message)``. A
    ``diff`` check is bound to its reference values by :meth:`bind` (which :func:`reduce` calls)."""

    text: str
    kind: str
    pattern: str = ""
    target: str = ""
    board: Optional[str] = None
    min_snr_db: float = 0.0
    reference: Optional[str] = None
    ref: Optional[Any] = field(default=None, repr=False)
    unjudged: List[str] = field(default_factory=list, repr=False)

    def bind(self, sub: Any, feed: Mapping[str, np.ndarray]) -> None:
        """Run the reference on ``feed`` and map its tensors onto the candidate ``sub`` (diff checks)."""
        if self.kind == "diff":
            from .reference import Reference

            self.ref = Reference(self.reference, sub, feed)
            self.unjudged = []

    def known(self) -> Optional[Dict[str, np.ndarray]]:
        """The boundary values a subgraph is fed from the reference (None: none)."""
        return self.ref.known() if self.ref is not None else None

    def outputs(self, sub: Any, idx: Sequence[int]) -> Optional[List[str]]:
        """The outputs the subgraph of nodes ``idx`` is given (None: its own, :meth:`Subgraph.outputs_of`)."""
        if self.ref is None:
            return None
        outs = list(sub.outputs_of(idx))
        made = [o for i in sorted(idx) for o in sub.nodes[i].output if o]
        return outs + [t for t in self.ref.judged(made) if t not in outs]

    def fails(self, proto: Any, inputs: Mapping[str, np.ndarray]) -> Tuple[bool, str]:
        if self.kind == "check":
            from ..targets.capability import check

            with tempfile.TemporaryDirectory(prefix="edgesdk-reduce-") as tmp:
                path = Path(tmp) / "sub.onnx"
                _save(proto, path)
                report = check(path, self.target)
            bad = report.failing()
            return bool(bad), "; ".join(f"{n.node}: {n.reason}" for n in bad[:3])
        if self.kind == "diff":
            if self.ref is None:
                raise EdgeSDKError("a diff check judges against its reference: bind() it first")
            outputs = self._run(proto, inputs)
            failed, message, unjudged = self.ref.compare(outputs, self.min_snr_db)
            self.unjudged.extend(u for u in unjudged if u not in self.unjudged)
            return failed, message
        try:
            self._run(proto, inputs)
        except Exception as exc:  # any refusal of the target counts; the pattern decides
            message = str(exc)
            return bool(re.search(self.pattern, message)), message.splitlines()[0] if message else type(exc).__name__
        return False, ""

    def _run(self, proto: Any, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        with tempfile.TemporaryDirectory(prefix="edgesdk-reduce-") as tmp:
            path = Path(tmp) / "sub.onnx"
            _save(proto, path)
            if self.board is not None:
                from ..data import save_npz
                from ..remote import Board

                feeds = Path(tmp) / "inputs.npz"
                save_npz(feeds, {k: np.asarray(v) for k, v in inputs.items()})
                with Board(self.board) as board:
                    return board.infer(path, feeds)
            from ..model import Model
            from ..targets import get_target

            target = get_target(self.target)
            with target.open(target.prepare(Model.load(path))) as session:
                return session.run({k: np.asarray(v) for k, v in inputs.items()})


def parse_check(text: str, reference: Optional[Any] = None) -> Check:
    """``error:PATTERN@TARGET``, ``error:PATTERN@board:NAME``, ``check:TARGET[@VERSION]``, or
    ``diff:MIN_SNR_DB@TARGET`` / ``diff:MIN_SNR_DB@board:NAME`` with ``reference`` (the FP32 .onnx)."""
    kind, sep, rest = text.partition(":")
    if reference is not None and kind != "diff":
        raise InputError(f"--reference is for diff checks, not '{text}'",
                         "write --fails diff:MIN_SNR_DB@TARGET, or leave --reference out")
    if kind == "check" and sep and rest:
        from ..targets.capability import parse_target

        parse_target(rest)  # an unknown target fails now, with the known names
        return Check(text, "check", target=rest)
    if kind in ("error", "diff") and sep and "@" in rest:
        head, _, where = rest.rpartition("@")
        found = Check(text, kind)
        if kind == "error":
            try:
                re.compile(head)
            except re.error as exc:
                raise InputError(f"--fails: bad pattern '{head}': {exc}") from exc
            found.pattern = head
        else:
            try:
                found.min_snr_db = float(head)
            except ValueError:
                found.min_snr_db = math.nan
            if not math.isfinite(found.min_snr_db):
                raise InputError(f"--fails: bad tolerance '{head}' in '{text}'",
                                 "give the lowest SNR in dB an output may have, e.g. diff:20@onnxruntime")
            if reference is None:
                raise InputError(f"--fails {text} compares with an FP32 reference: --reference is missing",
                                 "add --reference FP32.onnx (the model the candidate was made from)")
            ref_path = Path(str(reference))
            if not ref_path.is_file():
                raise InputError(f"--reference: '{ref_path}' does not exist",
                                 "give the FP32 .onnx the model was made from")
            found.reference = str(ref_path)
        if where.startswith("board:"):
            if not where[len("board:"):]:
                raise InputError(f"bad --fails '{text}': no board name after 'board:'", _FORMS)
            found.board = where[len("board:"):]
            return found
        from ..targets.registry import TARGETS

        found.target = TARGETS.canonical(where)
        return found
    raise InputError(f"bad --fails '{text}'", _FORMS)


def _save(proto: Any, path: Path) -> None:
    import onnx

    onnx.save(proto, str(path))


@dataclass
class ReduceResult:
    """The smallest failing range of nodes found, in the model's graph order."""

    model: str
    check: str
    nodes_total: int
    failing_nodes: List[str]
    failing_ops: List[str]
    message: str
    runs: int
    passing_nodes: int
    failing_model: Optional[str] = None
    failing_inputs: Optional[str] = None
    passing_model: Optional[str] = None
    passing_inputs: Optional[str] = None
    seconds: float = 0.0
    trail: List[Dict[str, Any]] = field(default_factory=list)
    failing_layers: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def summary(self) -> str:
        layers = ""
        if self.failing_layers and len(self.failing_layers) != len(self.failing_nodes):
            k = len(self.failing_layers)
            layers = f"; {k} layer{'' if k == 1 else 's'}: {', '.join(self.failing_layers)}"
        return (f"{len(self.failing_nodes)} of {self.nodes_total} nodes still fail ({', '.join(self.failing_ops)}{layers}) "
                f"after {self.runs} runs of the check: {self.message}")

    def to_dict(self) -> Dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": "reduce", "model": self.model, "check": self.check,
                "nodes_total": self.nodes_total, "failing_nodes": self.failing_nodes, "failing_ops": self.failing_ops,
                "message": self.message, "runs": self.runs, "passing_nodes": self.passing_nodes,
                "failing_model": self.failing_model, "failing_inputs": self.failing_inputs,
                "passing_model": self.passing_model, "passing_inputs": self.passing_inputs,
                "failing_layers": self.failing_layers, "notes": self.notes,
                "summary": self.summary(), "seconds": round(self.seconds, 3), "trail": self.trail}


def _fixed_shapes(m: Any, feed: Mapping[str, np.ndarray]) -> Any:
    """The model's proto with the feed's shapes on its inputs and shapes inferred; where strict
    inference refuses them (the failure being reduced may be exactly that a node's shapes do not
    fit), the inputs keep the model's own (dynamic) dims, so each subgraph fails where the model
    did (at run, not at load), and the rest is inferred as far as it goes."""
    import onnx

    try:
        return m.with_input_shapes({k: list(v.shape) for k, v in feed.items()}).proto
    except InputError:
        proto = onnx.ModelProto()
        proto.CopyFrom(m.proto)
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False)


def reduce(model: Any, fails: Any, feed: Optional[Mapping[str, np.ndarray]] = None, *,
           out_dir: Optional[Any] = None, max_runs: int = 64,
           progress: Optional[Callable[[str], None]] = None, reference: Optional[Any] = None) -> ReduceResult:
    """Shrink ``model`` (an ONNX path) to the smallest set of its nodes that still fails ``fails``
    (a :class:`Check` or its text, see :func:`parse_check`; ``reference``: the FP32 .onnx of a
    ``diff`` check given as text), feeding ``feed`` (one sample, ``{input: array}``; seeded random
    data of the inputs' shapes when None). Writes into ``out_dir`` (when given): ``failing.onnx`` +
    ``failing_inputs.npz`` and ``passing.onnx`` + ``passing_inputs.npz``."""
    from ..data import random_feed
    from ..model import Model
    from .subgraph import Subgraph

    start = time.perf_counter()
    check = fails if isinstance(fails, Check) else parse_check(str(fails), reference)
    if out_dir is not None and not Path(out_dir).is_dir():
        raise InputError(f"--out: '{out_dir}' is not a folder", "create it first")
    m = Model.load(model)
    if m.format != "onnx":
        raise InputError("sdk debug reduce takes ONNX models", "give the .onnx the target runs")
    if feed is None:
        feed = random_feed(m.inputs, seed=0)
    feed = {k: np.asarray(v) for k, v in feed.items()}
    sub = Subgraph(_fixed_shapes(m, feed), layers=check.kind == "diff")
    n = len(sub)
    if n == 0:
        raise InputError(f"'{m.path}' has no nodes to reduce")
    check.bind(sub, feed)
    known = check.known()
    random_ok = check.kind != "diff"  # random boundary values judged against the reference mean nothing
    units = len(sub.units)
    runs = 0
    trail: List[Dict[str, Any]] = []
    cache: Dict[Tuple[int, ...], Tuple[bool, str]] = {}

    def model_of(us: Sequence[int]) -> Tuple[Any, Dict[str, np.ndarray]]:
        idx = sub.nodes_of(us)
        return (sub.extract_of(idx, check.outputs(sub, idx)),
                sub.inputs_of(idx, feed, random_ok=random_ok, known=known))

    def probe(us: Sequence[int]) -> bool:
        nonlocal runs
        key = tuple(us)
        if key in cache:
            return cache[key][0]
        if runs >= max_runs:
            raise EdgeSDKError(f"sdk debug reduce: {max_runs} runs of the check used up", "raise --max-runs")
        idx = sub.nodes_of(us)
        inputs = sub.inputs_of(idx, feed, random_ok=random_ok, known=known)
        runs += 1
        failed, message = check.fails(sub.extract_of(idx, check.outputs(sub, idx)), inputs)
        cache[key] = (failed, message)
        trail.append({"nodes": [idx[0], idx[-1]], "count": len(idx), "fails": failed, "message": message,
                      **({"units": list(key)} if units != n else {})})
        if progress is not None:
            what = "nodes" if units == n else "layers"
            span = f"{key[0]}..{key[-1]}" if len(key) == key[-1] - key[0] + 1 else ",".join(map(str, key))
            progress(f"run {runs}: {what} {span} ({len(idx)} nodes) {'fail' if failed else 'pass'}"
                     + (f": {message}" if check.kind == "diff" else ""))
        return failed

    if not probe(range(units)):
        raise InputError(f"the whole model passes the check '{check.text}': nothing to reduce",
                         "check the pattern, the tolerance and the target")
    kept, b = _shrink(probe, units, lambda: runs < max_runs)
    best_pass = list(range(b)) if b > 0 else None
    message = cache[tuple(kept)][1]
    idx = sub.nodes_of(kept)
    names = [sub.nodes[i].name or sub.nodes[i].op_type for i in idx]
    layer_names = [sub.nodes[i].name or sub.nodes[i].op_type for i in idx
                   if sub.nodes[i].op_type not in ("QuantizeLinear", "DequantizeLinear")]
    passing_nodes = 0 if best_pass is None else len(sub.nodes_of(best_pass))
    result = ReduceResult(str(m.path), check.text, n, names, [sub.nodes[i].op_type for i in idx], message, runs,
                          passing_nodes, trail=trail, failing_layers=layer_names)
    if check.unjudged:
        result.notes.append(f"{len(check.unjudged)} outputs have no counterpart in the reference and were not judged "
                            f"(not failures): {', '.join(check.unjudged[:5])}" + (" ..." if len(check.unjudged) > 5 else ""))
    if out_dir is not None:
        out = Path(out_dir)
        _write(*model_of(kept), out / "failing.onnx", out / "failing_inputs.npz")
        result.failing_model, result.failing_inputs = str(out / "failing.onnx"), str(out / "failing_inputs.npz")
        if best_pass is not None:
            _write(*model_of(best_pass), out / "passing.onnx", out / "passing_inputs.npz")
            result.passing_model, result.passing_inputs = str(out / "passing.onnx"), str(out / "passing_inputs.npz")
    result.seconds = time.perf_counter() - start
    return result


def _shrink(probe: Callable[[Sequence[int]], bool], units: int, runs_left: Callable[[], bool]) -> Tuple[List[int], int]:
    """Bisection: the shortest failing prefix ``0..b``, the shortest failing suffix ``a..b`` of it;
    then unit by unit, each unit the failure does not need dropped (while runs are left). Returns
    the failing units and ``b`` (``0..b-1`` passed)."""
    lo, hi = -1, units - 1      # the shortest failing prefix 0..hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(range(mid + 1)):
            hi = mid
        else:
            lo = mid
    b = hi
    lo, hi = 0, b + 1           # the shortest failing suffix lo..b of that prefix
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(range(mid, b + 1)):
            lo = mid
        else:
            hi = mid
    kept = list(range(lo, b + 1))
    for u in list(kept):
        if len(kept) == 1 or not runs_left():
            break
        trial = [x for x in kept if x != u]
        if probe(trial):
            kept = trial
    return kept, b


def _write(proto: Any, inputs: Mapping[str, np.ndarray], model_path: Path, inputs_path: Path) -> None:
    from ..atomic import atomic_path
    from ..data import save_npz

    with atomic_path(model_path) as tmp:
        _save(proto, Path(str(tmp)))
    save_npz(inputs_path, {k: np.asarray(v) for k, v in inputs.items()})


def plant_unrunnable(src: Any, dst: Any, after: Optional[str] = None, domain: str = "edgesdk.test",
                     op: str = "Unrunnable") -> str:
    """Write a copy of ``src`` with one node of an op no runtime has (``domain:op``, passing its
    input through) after the node ``after`` (default: the middle compute node); returns its name.
    For testing :func:`reduce` and ``sdk check``."""
    import onnx
    from onnx import helper

    proto = onnx.load(str(src))
    nodes = [n for n in proto.graph.node if n.op_type != "Constant"]
    host = next((n for n in nodes if n.name == after), None) if after else nodes[len(nodes) // 2]
    if host is None:
        raise InputError(f"no node named '{after}'")
    t = host.output[0]
    new_t = t + "__planted"
    for n in proto.graph.node:
        for i, x in enumerate(n.input):
            if x == t:
                n.input[i] = new_t
    for o in proto.graph.output:
        if o.name == t:
            o.name = new_t
    planted = helper.make_node(op, [t], [new_t], name=f"planted_{op}", domain=domain)
    idx = list(proto.graph.node).index(host)
    proto.graph.node.insert(idx + 1, planted)
    if not any(o.domain == domain for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(domain, 1))
    onnx.save(proto, str(dst))
    return planted.name
