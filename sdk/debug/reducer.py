"""``sdk debug reduce``: the smallest subgraph of an ONNX model that still fails a check, by
bisection (the shortest failing prefix, then the shortest failing suffix of it), then node by node
(dropping each remaining node that is not needed for the failure, while runs are left).

A check (:func:`parse_check`) is one of:

- ``error:PATTERN@TARGET`` (or ``@board:NAME``): the subgraph is opened and run on that target here
  (or on that board through its agent) and fails when the error's message matches the regular
  expression ``PATTERN``;
- ``check:TARGET[@VERSION]``: ``sdk.check`` says a node cannot run there (no build, no runtime).

Each candidate subgraph is fed the values its boundary tensors take on the model's inputs
(computed on this host by the nodes before it). The result writes the minimal failing model and
the largest passing one found, each with an ``.npz`` of the inputs that reproduce it.
"""
from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import EdgeSDKError, InputError

__all__ = ["Check", "parse_check", "reduce", "ReduceResult", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1


@dataclass
class Check:
    """A parsed ``--fails`` check; ``fails(model_proto, inputs)`` -> ``(failed, message)``."""

    text: str
    kind: str
    pattern: str = ""
    target: str = ""
    board: Optional[str] = None

    def fails(self, proto: Any, inputs: Mapping[str, np.ndarray]) -> Tuple[bool, str]:
        if self.kind == "check":
            from ..targets.capability import check

            with tempfile.TemporaryDirectory(prefix="edgesdk-reduce-") as tmp:
                path = Path(tmp) / "sub.onnx"
                _save(proto, path)
                report = check(path, self.target)
            bad = report.failing()
            return bool(bad), "; ".join(f"{n.node}: {n.reason}" for n in bad[:3])
        try:
            self._run(proto, inputs)
        except Exception as exc:  # any refusal of the target counts; the pattern decides
            message = str(exc)
            return bool(re.search(self.pattern, message)), message.splitlines()[0] if message else type(exc).__name__
        return False, ""

    def _run(self, proto: Any, inputs: Mapping[str, np.ndarray]) -> None:
        with tempfile.TemporaryDirectory(prefix="edgesdk-reduce-") as tmp:
            path = Path(tmp) / "sub.onnx"
            _save(proto, path)
            if self.board is not None:
                from ..data import save_npz
                from ..remote import Board

                feeds = Path(tmp) / "inputs.npz"
                save_npz(feeds, {k: np.asarray(v) for k, v in inputs.items()})
                with Board(self.board) as board:
                    board.infer(path, feeds)
                return
            from ..model import Model
            from ..targets import get_target

            target = get_target(self.target)
            with target.open(target.prepare(Model.load(path))) as session:
                session.run({k: np.asarray(v) for k, v in inputs.items()})


def parse_check(text: str) -> Check:
    """``error:PATTERN@TARGET``, ``error:PATTERN@board:NAME`` or ``check:TARGET[@VERSION]``."""
    kind, sep, rest = text.partition(":")
    if kind == "check" and sep and rest:
        from ..targets.capability import parse_target

        parse_target(rest)  # an unknown target fails now, with the known names
        return Check(text, "check", target=rest)
    if kind == "error" and sep and "@" in rest:
        pattern, _, where = rest.rpartition("@")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(f"--fails: bad pattern '{pattern}': {exc}") from exc
        if where.startswith("board:"):
            return Check(text, "error", pattern=pattern, board=where[len("board:"):])
        from ..targets.registry import TARGETS

        return Check(text, "error", pattern=pattern, target=TARGETS.canonical(where))
    raise InputError(f"bad --fails '{text}'",
                     "write error:PATTERN@TARGET, error:PATTERN@board:NAME or check:TARGET[@VERSION]")


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

    def summary(self) -> str:
        return (f"{len(self.failing_nodes)} of {self.nodes_total} nodes still fail ({', '.join(self.failing_ops)}) "
                f"after {self.runs} runs of the check: {self.message}")

    def to_dict(self) -> Dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": "reduce", "model": self.model, "check": self.check,
                "nodes_total": self.nodes_total, "failing_nodes": self.failing_nodes, "failing_ops": self.failing_ops,
                "message": self.message, "runs": self.runs, "passing_nodes": self.passing_nodes,
                "failing_model": self.failing_model, "failing_inputs": self.failing_inputs,
                "passing_model": self.passing_model, "passing_inputs": self.passing_inputs,
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
           progress: Optional[Callable[[str], None]] = None) -> ReduceResult:
    """Shrink ``model`` (an ONNX path) to the smallest range of its nodes that still fails
    ``fails`` (a :class:`Check` or its text, see :func:`parse_check`), feeding ``feed`` (one sample,
    ``{input: array}``; seeded random data of the inputs' shapes when None). Writes into ``out_dir``
    (when given): ``failing.onnx`` + ``failing_inputs.npz`` and ``passing.onnx`` + ``passing_inputs.npz``."""
    from ..data import random_feed
    from ..model import Model
    from .subgraph import Subgraph

    start = time.perf_counter()
    check = fails if isinstance(fails, Check) else parse_check(str(fails))
    m = Model.load(model)
    if m.format != "onnx":
        raise InputError("sdk debug reduce takes ONNX models", "give the .onnx the target runs")
    if feed is None:
        feed = random_feed(m.inputs, seed=0)
    feed = {k: np.asarray(v) for k, v in feed.items()}
    sub = Subgraph(_fixed_shapes(m, feed))
    n = len(sub)
    if n == 0:
        raise InputError(f"'{m.path}' has no nodes to reduce")
    runs = 0
    trail: List[Dict[str, Any]] = []
    cache: Dict[Tuple[int, int], Tuple[bool, str]] = {}

    def probe(a: int, b: int) -> bool:
        nonlocal runs
        if (a, b) in cache:
            return cache[(a, b)][0]
        if runs >= max_runs:
            raise EdgeSDKError(f"sdk debug reduce: {max_runs} runs of the check used up", "raise --max-runs")
        inputs = sub.inputs_for(a, b, feed, random_ok=check.kind == "check" or check.kind == "error")
        runs += 1
        failed, message = check.fails(sub.extract(a, b), inputs)
        cache[(a, b)] = (failed, message)
        trail.append({"nodes": [a, b], "fails": failed})
        if progress is not None:
            progress(f"run {runs}: nodes {a}..{b} ({b - a + 1}) {'fail' if failed else 'pass'}")
        return failed

    if not probe(0, n - 1):
        raise InputError(f"the whole model passes the check '{check.text}': nothing to reduce",
                         "check the pattern and the target")
    lo, hi = -1, n - 1          # the shortest failing prefix 0..hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(0, mid):
            hi = mid
        else:
            lo = mid
    b = hi
    lo, hi = 0, b + 1           # the shortest failing suffix lo..b of that prefix
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid, b):
            lo = mid
        else:
            hi = mid
    a = lo
    best_pass = (0, b - 1) if b > 0 else None
    message = cache[(a, b)][1]
    result = ReduceResult(str(m.path), check.text, n, [sub.nodes[i].name or sub.nodes[i].op_type for i in range(a, b + 1)],
                          [sub.nodes[i].op_type for i in range(a, b + 1)], message, runs,
                          0 if best_pass is None else best_pass[1] + 1, trail=trail)
    if out_dir is not None:
        out = Path(out_dir)
        if not out.is_dir():
            raise InputError(f"--out: '{out}' is not a folder", "create it first")
        _write(sub.extract(a, b), sub.inputs_for(a, b, feed, random_ok=True), out / "failing.onnx", out / "failing_inputs.npz")
        result.failing_model, result.failing_inputs = str(out / "failing.onnx"), str(out / "failing_inputs.npz")
        if best_pass is not None:
            _write(sub.extract(*best_pass), sub.inputs_for(best_pass[0], best_pass[1], feed, random_ok=True), out / "passing.onnx",
                   out / "passing_inputs.npz")
            result.passing_model, result.passing_inputs = str(out / "passing.onnx"), str(out / "passing_inputs.npz")
    result.seconds = time.perf_counter() - start
    return result


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
