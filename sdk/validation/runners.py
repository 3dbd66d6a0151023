"""Where validation runs the model: a board of the remote runner, or a target on this host.

Both follow one typed protocol, :class:`Runner` (the methods :class:`sdk.remote.Board` has)::

    with open_runner("jetson-nano") as board:      # or HostRunner("onnxruntime")
        facts = board.check()                      # device facts dict
        outputs = board.infer(model, "inputs.npz") # {output: array}, samples along axis 0
        result = board.benchmark(model, target="onnxruntime", precision="fp32", runs=200, min_seconds=2)

:class:`HostRunner` is also the FP32 reference (ONNX Runtime on the host) and the ``--target`` of
``sdk robustness``. It has no power sensor: its power fields are null with the reason.
Validation is the floor above ``targets`` and ``remote``: it imports both as ordinary modules.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from ..errors import EdgeSDKError, InputError

if TYPE_CHECKING:
    from ..result import BenchResult

__all__ = ["Runner", "HostRunner", "open_runner"]

_CHUNK_BYTES = 32 << 20


@runtime_checkable
class Runner(Protocol):
    """What validation runs a model on: :class:`sdk.remote.Board` (over SSH, or ``local``) or
    :class:`HostRunner` (a target on this machine). A context manager; ``name`` is what reports
    call it. ``infer`` returns the outputs with samples along axis 0; ``benchmark`` returns a
    :class:`sdk.result.BenchResult`."""

    name: str

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...

    def check(self) -> Dict[str, Any]:
        """Device facts."""
        ...

    def infer(self, __model: Any, __feeds_npz: Union[str, "os.PathLike[str]"], *,
              target: Optional[str] = None) -> Mapping[str, Any]:
        """Run every sample of an ``.npz`` (one array per input name, samples along axis 0);
        ``carry=`` (``{output: input}``, when given) runs them in order with the state carried."""
        ...

    def benchmark(self, __model: Any, *, target: Optional[str] = None, precision: Optional[str] = None,
                  runs: int = 100, min_seconds: float = 1.0, warmup: int = 10,
                  input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                  samples: bool = False) -> "BenchResult":
        """Latency (and power where the runner measures it) of ``model``: one result type."""
        ...


class HostRunner:
    """A target on this machine behind the board protocol (``check``/``infer``/``benchmark``).

    ``target``: a registered target name; ``options``: its options (e.g. ``providers=["cpu"]``).
    ``name``: what reports call it (default ``host:<target>``).
    """

    def __init__(self, target: Optional[str] = None, name: Optional[str] = None, **options: Any):
        self.target = target  # None: the target that runs each model's format
        self.options = dict(options)
        self.name = name or (f"host:{target}" if target else "host")
        self._sessions: Dict[Any, Any] = {}

    def __enter__(self) -> "HostRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for s in self._sessions.values():
            s.close()
        self._sessions.clear()

    def check(self) -> Dict[str, Any]:
        """Host facts (CPU, OS, Python, runtime versions); no power mode, clocks or sensors."""
        from ..hostinfo import host_info
        from ..targets import target_class

        facts: Dict[str, Any] = dict(host_info())
        facts["board"] = self.name
        for name in ([self.target] if self.target else ["onnxruntime", "tflite"]):
            try:
                facts.setdefault("runtimes", {})[name] = target_class(name).availability().version
            except EdgeSDKError:
                facts.setdefault("runtimes", {})[name] = None
        facts.update(power_mode=None, clocks_locked=None, temperatures={}, power_sensors=[],
                     notes="host runner: no power mode, clock or power sensor facts")
        return facts

    def _session(self, model: Any, target: Optional[str] = None, options: Optional[Mapping[str, Any]] = None):
        from ..formats import default_target
        from ..model import Model
        from ..targets import get_target

        m = model if isinstance(model, Model) else Model.load(model)
        name = target or self.target or default_target(m)
        opts = dict(self.options if options is None else options)
        key = (m.sha256, name, repr(sorted(opts.items())))
        if key not in self._sessions:
            tgt = get_target(name, **opts)
            self._sessions[key] = tgt.open(tgt.prepare(m))
        return self._sessions[key]

    def run_arrays(self, model: Any, inputs: Mapping[str, np.ndarray], stacked: bool = False,
                   carry: Optional[Mapping[str, str]] = None) -> Dict[str, np.ndarray]:
        """Run every sample of ``inputs`` (samples along axis 0); batched when the model's batch
        dim is dynamic, else one sample at a time. Returns outputs with samples along axis 0.
        ``stacked``: each array is ``[n, *input_shape]``, one feed per sample, outputs stacked.
        ``carry`` (``{output: input}``): one sample at a time, in order, each fed the state the one
        before left (the first keeps its own)."""
        from ..targets.measure import CarriedRuns

        session = self._session(model)
        run = CarriedRuns(session, carry).run if carry else session.run
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        if stacked:
            # stacked samples (an input without a batch axis): one feed per sample, outputs stacked
            n = len(next(iter(arrays.values())))
            outs = [run({k: np.ascontiguousarray(a[i]) for k, a in arrays.items()}) for i in range(n)]
            return {k: np.stack([np.asarray(o[k]) for o in outs]) for k in outs[0]} if outs else {}
        counts = {len(a) for a in arrays.values()}
        if len(counts) != 1:
            raise InputError(f"inputs have different sample counts {sorted(counts)}")
        n = counts.pop()
        dynamic = not carry and all(s.shape and not (isinstance(s.shape[0], int) and s.shape[0] >= 0)
                                    for s in session.inputs)
        if dynamic:
            per = max(1, sum(a[:1].nbytes for a in arrays.values()))
            step = max(1, min(n, _CHUNK_BYTES // per))
        else:
            step = 1
        parts: Dict[str, list] = {}
        for i in range(0, n, step):
            out = run({k: np.ascontiguousarray(a[i:i + step]) for k, a in arrays.items()})
            for k, v in out.items():
                parts.setdefault(k, []).append(np.asarray(v))
        return {k: _join(v, batched=dynamic) for k, v in parts.items()}

    def infer(self, model: Any, inputs_npz_path: Union[str, os.PathLike], target: Optional[str] = None,
              carry: Optional[Mapping[str, str]] = None, **_ignored: Any) -> Dict[str, np.ndarray]:
        """Run the samples of an ``.npz`` (one array per input name, samples along axis 0) with
        this runner's target (``target`` must be it or None: a host runner has one target)."""
        if target not in (None, self.target) and self.target is not None:
            raise InputError(f"the host runner '{self.name}' runs {self.target}, not {target}",
                             f"use --board host:{target}")
        from ..sources import check_array_file

        check_array_file(inputs_npz_path)
        with np.load(inputs_npz_path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        session = self._session(model, target)
        ranks = {s.name: len(s.shape) for s in session.inputs}
        # the board agent's convention: an extra leading axis indexes samples, one feed each
        stacked = bool(arrays) and all(k in ranks and a.ndim == ranks[k] + 1 for k, a in arrays.items())
        return self.run_arrays(model, arrays, stacked=stacked, carry=carry)

    def benchmark(self, model: Any, target: Optional[str] = None, precision: Optional[str] = None,
                  runs: int = 100, min_seconds: float = 1.0, input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                  warmup: int = 10, data: Any = None, samples: bool = True, early_stop: Any = None,
                  input_values: Optional[Mapping[str, Any]] = None,
                  carry: Optional[Mapping[str, str]] = None) -> "BenchResult":
        """Latency on this host (``sdk.targets.benchmark``): the same :class:`sdk.result.BenchResult`
        as a board's, with ``board`` = this runner, ``device`` = host facts, and no power figures
        (null, with the reason)."""
        from ..model import Model
        from ..targets import benchmark

        m = model if isinstance(model, Model) else Model.load(model)
        shapes = dict(input_shapes or {})
        for s in m.inputs:
            if s.name not in shapes and not s.is_static and s.name not in (input_values or {}):
                shapes[s.name] = s.resolve(default_dim=1)
        res = benchmark(m, target or self.target, target_options=self.options, input_shapes=shapes or None,
                        data=data, warmup=warmup, runs=runs, min_seconds=min_seconds, early_stop=early_stop,
                        input_values=input_values, carry=carry)
        res.board = {"name": self.name}
        res.precision = {"requested": precision or "fp32", "applied_as_option": False,
                         "note": "the host runner runs the model as stored"}
        res.device = self.check()
        if not samples:
            res.samples_ms = []
        return res


def _join(parts: list, batched: bool) -> np.ndarray:
    """Outputs of consecutive runs with samples along axis 0: concatenated when the runs were
    batches or every output leads with a batch dim of 1; else stacked (an output whose first
    axis is not the batch, e.g. a CRNN's [seq, 1, classes])."""
    if batched or all(p.ndim >= 1 and p.shape[0] == 1 for p in parts):
        return np.concatenate(parts, axis=0)
    return np.stack(parts)


def check_run_precision(model: Any, precision: Optional[str], target: Optional[str], boards: Sequence[Any]) -> None:
    """:class:`~sdk.errors.InputError` when ``precision`` is one the target cannot honour: ``target``,
    else each board's pick for the model's format (a board profile, or a runner with a ``profile``
    or a ``target``; the format's default target otherwise). Called before anything runs, so a
    precision that would be ignored is bad input (exit 2), not a run of the stored precision."""
    if not precision:
        return
    from ..formats import default_target
    from ..targets import target_class
    from ..targets.registry import first_target_for

    names = {target} if target else set()
    if not target:
        for b in boards:
            profile_targets = getattr(getattr(getattr(b, "profile", b), "runtime", None), "targets", ())
            names.add(first_target_for(profile_targets, model.format) or getattr(b, "target", None)
                      or default_target(model))
    for name in sorted(n for n in names if n):
        target_class(name).check_precision(precision, model)


def open_runner(board: Union[str, Runner]) -> Runner:
    """The runner for ``board``: a runner object is returned as is; ``host:<target>`` is a
    :class:`HostRunner`; any other name is a :class:`sdk.remote.Board` (a context manager;
    enter it to connect; an unknown name raises :class:`~sdk.errors.UnknownBoardError`)."""
    if not isinstance(board, str):
        return board
    if board.startswith("host:"):
        from ..targets import target_class

        target = board.split(":", 1)[1] or None
        if target is not None:
            target_class(target)        # an unknown target is a usage error (exit 2), not a NO-GO
        return HostRunner(target, name=board)
    from ..remote.board import Board

    return Board(board)

