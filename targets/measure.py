"""``benchmark()``: open a model on a target and measure its latency with the shared loop.

Used by ``sdk bench``, the Python API and the board agent. Runs on the board too (Python 3.8).
"""
from __future__ import annotations

import itertools
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ..bench import EarlyStop, LatencyRun, measure_latency
from ..result import BenchResult, Energy, Power
from ..data import Feed, check_feed, random_feed, with_values
from ..errors import InputError
from ..tensors import check_input_names
from ..hostinfo import host_info
from .base import Artifact, Session, Target
from .registry import get_target

__all__ = ["BenchResult", "benchmark", "benchmark_session", "describe_inputs", "HOST_POWER_REASON"]

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
    elif len(feeds) == 1:
        run_once = session.runner(feeds[0])
    else:
        runners = [session.runner(f) for f in feeds]
        it = itertools.cycle(runners)
        run_once = lambda: next(it)()  # noqa: E731
    return measure_latency(run_once, warmup=warmup, min_runs=runs, min_seconds=min_seconds, max_seconds=max_seconds,
                           early_stop=early_stop)


def check_carry(carry: Mapping[str, str], session: Session) -> Dict[str, str]:
    """``carry`` checked against the session: each output and input exists, with equal shapes
    where both are static (:class:`InputError` names the pair)."""
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


def _carrying_runner(session: Session, feeds: List[Feed], carry: Mapping[str, str]) -> Any:
    check_carry(carry, session)
    state: Dict[str, Any] = {}
    it = itertools.cycle(feeds)

    def run_once() -> Any:
        feed = dict(next(it))
        feed.update(state)
        out = session.run(feed)
        for o, i in carry.items():
            state[i] = out[o]
        return out

    return run_once


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
