"""``benchmark()``: open a model on a target and measure its latency with the shared loop.

Used by ``sdk bench``, the Python API and the board agent. Runs on the board too (Python 3.8).
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..bench import EarlyStop, LatencyRun, measure_latency
from ..result import BenchResult, Energy, Power
from ..data import Feed, check_feed, random_feed, with_values
from ..errors import InputError
from ..tensors import check_input_names
from ..hostinfo import host_info
from ..stats import PAIRED_ROUNDS
from .base import Artifact, Session, Target
from .registry import get_target

__all__ = ["BenchResult", "benchmark", "benchmark_session", "benchmark_pair", "PairTiming", "describe_inputs",
           "HOST_POWER_REASON"]

#: Why a measurement on this host has no power figures.
HOST_POWER_REASON = "no power sensor: measurements on the host sample no power (run on a board for power)"


def _feeds_for(session: Session, shapes: Optional[Mapping[str, Sequence[int]]], data: Any, seed: int,
               values: Optional[Mapping[str, Any]] = None) -> List[Feed]:
    if data is None:
        known = {**session.input_shapes_or_none(shapes, values)}
        return [random_feed(session.inputs, known, seed=seed, values=values)]
    if isinstance(data, (str, os.PathLike)):
        from ..sources import ArraySource

        feeds = list(itertools.islice(iter(ArraySource(data, session.inputs, values=values)), 0, 64))
    elif isinstance(data, Mapping):
        feeds = [dict(data)]
    else:
        feeds = list(itertools.islice(iter(data), 0, 64))
    if not feeds or any(getattr(a, "size", 1) == 0 for f in feeds for a in f.values()):
        raise InputError("the input data holds no samples (an empty array)", "give at least one sample")
    feeds = [with_values(f, values) for f in feeds]
    for i, f in enumerate(feeds):
        check_feed(f, session.inputs, source=f"input sample {i}")
    return feeds


def describe_inputs(session: Session, input_shapes: Optional[Mapping[str, Sequence[int]]], data: Any,
                    values: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """The ``inputs`` block of a result: each input's spec, with the concrete shape the random
    feeds had when no ``data`` was given, and the value of each input given one."""
    import numpy as np

    out = [s.to_dict() for s in session.inputs]
    if data is None:
        shapes = session.input_shapes_or_none(input_shapes, values)
        for d in out:
            d["shape"] = list(shapes[d["name"]])
    for d in out:
        if values and d["name"] in values:
            v = np.asarray(values[d["name"]])
            d["shape"] = list(v.shape)
            d["value"] = v.tolist() if v.size <= 16 else f"{v.size} given elements"
    return out


def benchmark_session(
    session: Session,
    *,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    data: Any = None,
    warmup: int = 10,
    runs: int = 100,
    min_seconds: float = 1.0,
    max_seconds: Optional[float] = None,
    seed: int = 0,
    early_stop: Optional[EarlyStop] = None,
    input_values: Optional[Mapping[str, Any]] = None,
    carry: Optional[Mapping[str, str]] = None,
) -> LatencyRun:
    """Measure an open session. ``data``: None (seeded random feeds), a ``.npy``/``.npz`` path
    or folder, one feed, or an iterable of feeds (up to 64 are cycled). ``early_stop``: keep
    measuring until a tail percentile is measured well enough (:class:`sdk.bench.EarlyStop`).
    ``input_values``: arrays of inputs that are not data (:func:`sdk.data.parse_input_values`).
    ``carry``: ``{output: input}``: each run feeds that output of the run before back as the input
    (a recurrent state, as streaming models run); the first run uses the data's (or random) value."""
    feeds = _feeds_for(session, input_shapes, data, seed, input_values)
    if carry:
        run_once = _carrying_runner(session, feeds, carry)
    else:
        run_once = _cycling_runner(session, feeds)
    return measure_latency(run_once, warmup=warmup, min_runs=runs, min_seconds=min_seconds, max_seconds=max_seconds,
                           early_stop=early_stop)


def check_carry(carry: Mapping[str, str], session: Any) -> Dict[str, str]:
    """``carry`` checked against a session or a :class:`~sdk.model.Model` (anything with
    ``inputs`` and ``outputs`` specs): each output and input exists, of one dtype
    (:class:`InputError` names the pair)."""
    outs = {s.name: s for s in session.outputs}
    ins = {s.name: s for s in session.inputs}
    for out, inp in carry.items():
        if out not in outs:
            raise InputError(f"--carry {out}={inp}: '{out}' is not a model output", f"outputs: {', '.join(outs)}")
        if inp not in ins:
            raise InputError(f"--carry {out}={inp}: '{inp}' is not a model input", f"inputs: {', '.join(ins)}")
        if np_dtype(outs[out].dtype) != np_dtype(ins[inp].dtype):
            raise InputError(f"--carry {out}={inp}: output dtype {outs[out].dtype} is not the input's {ins[inp].dtype}")
    return dict(carry)


def np_dtype(name: str) -> Any:
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:
        return name


class CarriedRuns:
    """Runs of ``session`` that carry a recurrent state: each run's ``carry`` outputs
    (``{output: input}``) replace those inputs of the next feed; the first feed keeps its own."""

    def __init__(self, session: Any, carry: Mapping[str, str]) -> None:
        self.session, self.carry = session, check_carry(carry, session)
        self.state: Dict[str, Any] = {}

    def run(self, feed: Feed) -> Any:
        fed = dict(feed)
        fed.update(self.state)
        out = self.session.run(fed)
        for o, i in self.carry.items():
            self.state[i] = out[o]
        return out


def _carrying_runner(session: Session, feeds: List[Feed], carry: Mapping[str, str]) -> Any:
    runs = CarriedRuns(session, carry)
    it = itertools.cycle(feeds)
    return lambda: runs.run(next(it))


def parse_carry(items: Optional[Sequence[str]]) -> Dict[str, str]:
    """``["stateN=state"]`` -> ``{"stateN": "state"}`` (output = input)."""
    out: Dict[str, str] = {}
    for item in items or []:
        o, sep, i = item.partition("=")
        if not sep or not o.strip() or not i.strip():
            raise InputError(f"bad --carry '{item}'", "write OUTPUT=INPUT, e.g. stateN=state")
        out[o.strip()] = i.strip()
    return out


def benchmark(
    model: Any,
    target: Optional[Union[str, Target]] = None,
    *,
    target_options: Optional[Mapping[str, Any]] = None,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    data: Any = None,
    warmup: int = 10,
    runs: int = 100,
    min_seconds: float = 1.0,
    max_seconds: Optional[float] = None,
    seed: int = 0,
    workdir: Optional[Union[str, os.PathLike]] = None,
    build_options: Optional[Mapping[str, Any]] = None,
    early_stop: Optional[EarlyStop] = None,
    input_values: Optional[Mapping[str, Any]] = None,
    carry: Optional[Mapping[str, str]] = None,
) -> BenchResult:
    """Prepare ``model`` for ``target``, open a session and measure latency (MLPerf
    SingleStream: at least ``runs`` runs AND ``min_seconds``). ``input_shapes`` fixes dynamic dims
    of the random inputs; ``data`` gives real inputs instead. ``target`` None: the one that runs
    the model's format (``onnxruntime`` for ONNX, ``tflite`` for TFLite). ``input_values``: the
    values of inputs that are not data (``{"sr": np.array(16000)}``; strings ``"sr=16000"`` are
    parsed by the model's dtypes); an input that chooses a control-flow branch or bounds a loop
    must have one (:class:`InputError` otherwise). ``carry``: ``{output: input}`` fed back across
    runs (see :func:`benchmark_session`)."""
    from ..formats import default_target
    from ..model import Model

    if not isinstance(model, Model):
        model = Model.load(model)
    if target is None:
        target = default_target(model)
    tgt = target if isinstance(target, Target) else get_target(target, **dict(target_options or {}))
    artifact: Artifact = tgt.prepare(model, workdir=workdir, **dict(build_options or {}))
    with tgt.open(artifact) as session:
        check_input_names(input_shapes or {}, session.inputs)  # against the session, whatever the format
        values = as_values(input_values, session.inputs)
        if data is None:
            require_control_values(model, values, "sdk bench")
        run = benchmark_session(session, input_shapes=input_shapes, data=data, warmup=warmup, runs=runs,
                                min_seconds=min_seconds, max_seconds=max_seconds, seed=seed, early_stop=early_stop,
                                input_values=values, carry=carry)
        feeds_desc = describe_inputs(session, input_shapes, data, values)
    describe = tgt.describe()
    describe.update({k: v for k, v in artifact.metadata.items() if k not in describe})
    return BenchResult(
        stats=run.stats,
        target=str(describe.get("name") or tgt.name),
        runtime=describe,
        model={"path": str(model.origin) if model.origin else None, "sha256": model.sha256, "format": model.format},
        host=host_info(),
        inputs=feeds_desc,
        settings=bench_settings(warmup, runs, min_seconds, max_seconds, data, seed, early_stop,
                                **({"carry": dict(carry)} if carry else {}),
                                **({"notes": data_steering_notes(model)} if data is None and
                                   data_steering_notes(model) else {})),
        samples_ms=run.samples_ms,
        window={"begin_s": run.begin_s, "end_s": run.end_s, "clock": "time.monotonic"},
        power=Power.unmeasured(HOST_POWER_REASON),
        energy=Energy.unmeasured(HOST_POWER_REASON),
    )


def as_values(values: Any, specs: Sequence[Any]) -> Dict[str, Any]:
    """``values`` as ``{name: array}``: a mapping of arrays (checked against ``specs``) or
    ``["NAME=VALUE", ...]`` strings (:func:`sdk.data.parse_input_values`)."""
    import numpy as np

    from ..data import parse_input_values

    if not values:
        return {}
    if not isinstance(values, Mapping):
        return parse_input_values(list(values), specs)
    out = parse_input_values([f"{k}={v}" for k, v in values.items() if isinstance(v, str)], specs)
    check_input_names({k: v for k, v in values.items() if not isinstance(v, str)}, specs)
    by_name = {s.name: s for s in specs}
    for k, v in values.items():
        if not isinstance(v, str):
            out[k] = np.asarray(v, dtype=np.dtype(by_name[k].dtype))
    return out


def data_steering_notes(model: Any) -> List[str]:
    """One note per data input whose content steers control flow (a Loop that ends on what the
    model computes from it): random inputs time another number of iterations than real data."""
    control = getattr(model, "control_inputs", None)
    if control is None:
        return []
    return [f"input '{c['input']}' {c['role']} ({c['node']}): random data may run another number of "
            f"iterations or another branch than real data; measure with --data" for c in control()
            if c.get("kind") == "data"]


def require_control_values(model: Any, values: Mapping[str, Any], command: str) -> None:
    """:class:`InputError` when a random input would choose an ``If`` branch or bound a ``Loop``:
    a random value times an arbitrary branch (see :meth:`sdk.model.Model.control_inputs`)."""
    control = getattr(model, "control_inputs", None)
    if control is None:
        return
    missing = [c for c in control() if c["input"] not in values and c.get("kind") == "value"]
    if missing:
        c = missing[0]
        raise InputError(f"input '{c['input']}' {c['role']} ({c['node']}); a random value would run an "
                         f"arbitrary branch", f"give its value: --input-value {c['input']}=VALUE, or real --data")


def bench_settings(warmup: int, runs: int, min_seconds: float, max_seconds: Optional[float], data: Any, seed: int,
                   early_stop: Optional[EarlyStop], **more: Any) -> Dict[str, Any]:
    """The ``settings`` block of a result: how the run was measured (host and board alike)."""
    out: Dict[str, Any] = {
        "warmup": warmup, "min_runs": runs, "min_seconds": min_seconds, "max_seconds": max_seconds,
        "data": "random" if data is None else (str(data) if isinstance(data, (str, os.PathLike)) else "feeds"),
        "seed": seed,
        "early_stop": None if early_stop is None else {"percentile": early_stop.percentile,
                                                       "max_ci_width_pct": early_stop.max_ci_width_pct,
                                                       "min_runs": early_stop.min_runs},
    }
    out.update(more)
    return out


@dataclass
class PairTiming:
    """Interleaved rounds of two models in one process: ``a_round_ms``/``b_round_ms`` the mean
    latency (ms) of each round (round i of A and of B ran back to back, their order alternating),
    ``runs_per_round`` of each, and what ran (``target``, ``options``, ``models``)."""

    a_round_ms: List[float]
    b_round_ms: List[float]
    runs_per_round: Tuple[int, int]
    target: str
    options: Dict[str, Any] = field(default_factory=dict)
    models: Tuple[Optional[str], Optional[str]] = (None, None)

    def to_dict(self) -> Dict[str, Any]:
        return {"a_round_ms": self.a_round_ms, "b_round_ms": self.b_round_ms,
                "runs_per_round": list(self.runs_per_round), "target": self.target, "options": self.options,
                "models": list(self.models)}


def _cycling_runner(session: Session, feeds: List[Feed]) -> Callable[[], Any]:
    """One call runs the next of ``feeds`` (the only one when there is one)."""
    if len(feeds) == 1:
        return session.runner(feeds[0])
    it = itertools.cycle([session.runner(f) for f in feeds])

    def run_once() -> Any:
        return next(it)()
    return run_once


def _timed_rounds(runners: Sequence[Any], rounds: int, round_s: float, warmup: int) -> Tuple[List[List[float]], List[int]]:
    per_round = []
    for run_once in runners:  # warm up, then how many runs fill a round
        for _ in range(max(1, warmup)):
            run_once()
        t0 = time.perf_counter()
        run_once()
        per_round.append(max(1, int(round_s / max(time.perf_counter() - t0, 1e-6))))
    out: List[List[float]] = [[] for _ in runners]
    perf = time.perf_counter
    for r in range(rounds):
        order = range(len(runners)) if r % 2 == 0 else reversed(range(len(runners)))  # ABBA: no order bias
        for i in order:
            run_once, k = runners[i], per_round[i]
            t0 = perf()
            for _ in range(k):
                run_once()
            out[i].append((perf() - t0) * 1e3 / k)
    return out, per_round


def benchmark_pair(
    model_a: Any,
    model_b: Any,
    target: Optional[Union[str, Target]] = None,
    *,
    target_options: Optional[Mapping[str, Any]] = None,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    data: Any = None,
    rounds: int = PAIRED_ROUNDS,
    round_s: float = 0.1,
    warmup: int = 5,
    seed: int = 0,
    workdir: Optional[Union[str, os.PathLike]] = None,
    input_values: Any = None,
) -> PairTiming:
    """Time A and B side by side: both opened on one ``target`` with the same options, the same
    feeds (``data``, or seeded random inputs of ``input_shapes``; both models must take them), then
    ``rounds`` interleaved rounds of about ``round_s`` seconds per model, the order alternating
    (A B, B A, ...). ``input_values``: values of inputs that are not data (as :func:`benchmark`;
    an input that chooses a branch needs one). Judge the result with :func:`sdk.compare.compare_paired`."""
    from ..formats import default_target
    from ..model import Model

    if rounds < 6:
        raise InputError(f"--rounds {rounds}: a paired comparison needs at least 6 rounds for an interval")
    if not round_s > 0 or round_s > 60:
        raise InputError(f"bad round length {round_s} s", "give a number of seconds in (0, 60]")
    ma = model_a if isinstance(model_a, Model) else Model.load(model_a)
    mb = model_b if isinstance(model_b, Model) else Model.load(model_b)
    if target is None:
        target = default_target(ma)
    tgt = target if isinstance(target, Target) else get_target(target, **dict(target_options or {}))
    art_a = tgt.prepare(ma, workdir=workdir)
    art_b = tgt.prepare(mb, workdir=workdir)
    with tgt.open(art_a) as sa, tgt.open(art_b) as sb:
        check_input_names(input_shapes or {}, sa.inputs)
        values = as_values(input_values, sa.inputs)
        if data is None:
            for m in (ma, mb):
                require_control_values(m, values, "sdk compare")
        feeds = _feeds_for(sa, input_shapes, data, seed, values)
        for i, f in enumerate(feeds):
            check_feed(f, sb.inputs, source=f"input sample {i} (for B)")
        runners = [_cycling_runner(s, feeds) for s in (sa, sb)]
        (a_ms, b_ms), per_round = _timed_rounds(runners, rounds, round_s, warmup)
    describe = tgt.describe()
    return PairTiming(a_ms, b_ms, (per_round[0], per_round[1]), str(describe.get("name") or tgt.name),
                      dict(describe.get("options") or {}),
                      (str(ma.origin) if ma.origin else None, str(mb.origin) if mb.origin else None))
