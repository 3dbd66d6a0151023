"""The Target contract: every runtime backend is a :class:`Target` that builds an
:class:`Artifact` from a model and opens a :class:`Session` on it.

Lifecycle::

    target = get_target("onnxruntime", providers=["cpu"], threads=2)
    artifact = target.prepare(model)            # build step: model in, artifact out
    with target.open(artifact) as session:      # acquire the runtime's resources
        outputs = session.run({"x": x})         # hot path
    # released on exit

Subclasses implement ``_probe`` / ``_prepare_impl`` / ``_open_impl`` on the target and
``_run_impl`` / ``_close_impl`` on the session; the public methods do the shared checks.
Runs on the board too: Python 3.8, NumPy and the target's runtime only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import EdgeSDKError, InferenceError, InputError, TargetUnavailableError, first_line
from ..tensors import TensorSpec

__all__ = ["Target", "Session", "Artifact", "Availability"]


@dataclass(frozen=True)
class Availability:
    """Whether a target can run here: ``available``, the runtime ``version``, and ``reason`` when not."""

    available: bool
    version: Optional[str] = None
    reason: Optional[str] = None
    details: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Artifact:
    """What a target runs: a file (``path``) or bytes (``data``), with build ``metadata``
    (precision, shapes, runtime version, ...). ``model_sha256`` ties it to its source model."""

    target: str
    model_sha256: str
    path: Optional[Path] = None
    data: Optional[bytes] = None
    metadata: Dict[str, Any] = field(default_factory=dict)
    inputs: List[TensorSpec] = field(default_factory=list)
    outputs: List[TensorSpec] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "model_sha256": self.model_sha256,
            "path": str(self.path) if self.path else None,
            "metadata": self.metadata,
        }


class Session:
    """An open runtime session: a context manager whose ``run(feeds) -> outputs`` is the hot path.

    ``inputs`` / ``outputs`` are the artifact's :class:`TensorSpec` lists. ``run`` does no
    per-call validation on success; when the runtime fails, the feeds are checked against the
    specs so the error names the input at fault.
    """

    target_name: ClassVar[str] = ""
    #: Why :meth:`profile` is not available on this target (the base implementation's error).
    profile_unavailable: ClassVar[str] = "this target exposes no per-layer profiler"

    def __init__(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]):
        self.inputs: List[TensorSpec] = list(inputs)
        self.outputs: List[TensorSpec] = list(outputs)
        #: Shapes a backend proposes for its dynamic inputs (TFLite: the allocated shape); used for
        #: random inputs when the caller gives none.
        self.default_shapes: Dict[str, Tuple[int, ...]] = {}
        self._closed = False

    def input_shapes(self, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Dict[str, Tuple[int, ...]]:
        """Concrete shapes of every input: ``shapes`` where given, else :attr:`default_shapes`,
        else the spec's static shape (:class:`InputError` for a dynamic dim left open)."""
        from ..tensors import check_input_names

        check_input_names(shapes or {}, self.inputs)
        known = {**self.default_shapes, **dict(shapes or {})}
        return {s.name: s.resolve(known.get(s.name)) for s in self.inputs}

    def input_shapes_or_none(self, shapes: Optional[Mapping[str, Sequence[int]]] = None,
                             values: Optional[Mapping[str, Any]] = None) -> Dict[str, Tuple[int, ...]]:
        """:meth:`input_shapes`, where an input given a value takes the value's shape."""
        import numpy as np

        given = {k: tuple(np.asarray(v).shape) for k, v in (values or {}).items()}
        merged = {**dict(shapes or {}), **given}
        return self.input_shapes(merged or None)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run once. ``feeds`` maps input names to arrays; returns output name -> array."""
        try:
            return self._run_impl(feeds)
        except EdgeSDKError:
            raise
        except Exception as exc:
            raise self._explain(feeds, exc) from exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_impl()

    @property
    def closed(self) -> bool:
        return self._closed

    def runner(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """A zero-argument callable that runs ``feeds`` once, with the least per-call Python
        work this backend allows (for latency loops; what it returns is the backend's own).

        The template method of the timed path: the backend's fast callable
        (:meth:`_runner_impl`) is bound once here, and a runtime failure while building or
        calling it is translated like :meth:`run`'s (:class:`InferenceError`, or the
        :class:`InputError` naming the bad feed) by an ``except`` clause around the call, which
        costs nothing while the runtime succeeds."""
        explain = self._explain
        try:
            fast = self._runner_impl(feeds)
        except EdgeSDKError:
            raise
        except Exception as exc:
            raise explain(feeds, exc) from exc

        def run_once() -> Any:
            try:
                return fast()
            except EdgeSDKError:
                raise
            except Exception as exc:
                raise explain(feeds, exc) from exc

        return run_once

    def profile(self, feeds: Mapping[str, np.ndarray], *, runs: int = 20, warmup: int = 3) -> Any:
        """Per-layer times of ``runs`` inferences of ``feeds`` (after ``warmup``), through the
        runtime's own profiler: a :class:`~sdk.targets.profiling.LayerProfile` whose layers carry
        the runtime's names (``onnx_nodes`` filled where the runtime says; see
        :func:`~sdk.targets.profiling.map_to_onnx`). Targets without a reachable profiler raise
        :class:`~sdk.errors.ProfilingUnavailableError` saying why."""
        if runs < 1 or warmup < 0:
            raise InputError("profile runs must be >= 1 and warmup >= 0")
        if self._closed:
            raise InferenceError(f"{self.target_name} session is closed")
        try:
            return self._profile_impl(feeds, runs, warmup)
        except EdgeSDKError:
            raise
        except Exception as exc:
            raise self._explain(feeds, exc) from exc

    # -- for subclasses ----------------------------------------------------------------------------
    def _profile_impl(self, feeds: Mapping[str, np.ndarray], runs: int, warmup: int) -> Any:
        from ..errors import ProfilingUnavailableError

        raise ProfilingUnavailableError(f"per-layer profiling is not available on target "
                                        f"'{self.target_name or type(self).__name__}': {self.profile_unavailable}")

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        raise NotImplementedError

    def _runner_impl(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """The backend's fastest zero-argument call for ``feeds`` (bind everything once here);
        it may raise the runtime's own errors, :meth:`runner` translates them."""
        return lambda: self._run_impl(feeds)

    def _close_impl(self) -> None:
        """Release runtime resources."""

    def _explain(self, feeds: Mapping[str, np.ndarray], exc: Exception) -> EdgeSDKError:
        """Turn a runtime failure into an SDK error, naming the bad input when there is one."""
        from ..data import check_feed

        if self._closed:
            return InferenceError(f"{self.target_name} session is closed")
        try:
            check_feed(feeds, self.inputs)
        except InputError as bad:
            return bad
        first = strip_ansi(first_line(exc))
        why = self._diagnose(feeds, str(exc))
        if why:
            return InputError(f"{self.target_name} cannot run these inputs: {why}", f"the runtime said: {first[:200]}")
        return InferenceError(f"{self.target_name} failed to run: "
                              f"{strip_ansi(self._what_failed(feeds, str(exc)) or first)}")

    def _diagnose(self, feeds: Mapping[str, np.ndarray], message: str) -> Optional[str]:
        """A backend's explanation of a failure from the model's own shapes (None: none)."""
        return None

    def _what_failed(self, feeds: Mapping[str, np.ndarray], message: str) -> Optional[str]:
        """The runtime's failure restated naming the node (None: the message's first line says it)."""
        return None


class Target:
    """Base class of a runtime backend. Register subclasses in :mod:`sdk.targets.registry`.

    ``options`` are the backend's own settings (threads, providers, precision, delegates...);
    unknown options raise :class:`InputError` listing the known ones.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: Model formats this target opens (e.g. ``("onnx",)``).
    model_formats: ClassVar[Tuple[str, ...]] = ("onnx",)
    #: Option names and defaults; subclasses extend.
    default_options: ClassVar[Dict[str, Any]] = {}
    #: What to pip install for this target (shown when unavailable).
    install_hint: ClassVar[str] = ""
    #: Precisions this target builds a model in (a ``precision`` option); empty: it runs the model
    #: as stored, so a model's precision comes from the model (quantize it first).
    precisions: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def check_precision(cls, precision: Optional[str], model: Any = None) -> None:
        """:class:`InputError` when ``precision`` is one this target cannot honour: not among
        :attr:`precisions`, or, for a target that runs models as stored, not the model's own."""
        if not precision:
            return
        if cls.precisions:
            if precision not in cls.precisions:
                raise InputError(f"target '{cls.name}' cannot build {precision}",
                                 f"it supports: {', '.join(cls.precisions)}")
            return
        stored = stored_precision(model) if model is not None else None
        if precision != stored:
            raise InputError(
                f"target '{cls.name}' runs a model in the precision it is stored in"
                + (f" ({stored})" if stored else "") + f", not {precision}",
                f"leave out --precision, or quantize the model first: sdk quantize MODEL --calib DATA "
                f"--target {cls.name}" if precision == "int8" else "leave out --precision")

    @classmethod
    def source_io(cls, model: Any) -> Optional[Dict[str, Any]]:
        """How ``model``'s graph inputs and outputs relate to the ONNX model it was converted from,
        when the file records it: ``{"inputs": {name: {"onnx": onnx_name, "perm": [...] or None}},
        "outputs": {...}}`` (the model's tensor holds the ONNX value transposed by ``perm``); None
        when the file records nothing (the default)."""
        return None

    def __init__(self, **options: Any):
        unknown = sorted(set(options) - set(self.default_options))
        if unknown:
            raise InputError(
                f"target '{self.name}' has no option {', '.join(repr(u) for u in unknown)}",
                f"its options are: {', '.join(sorted(self.default_options)) or 'none'}",
            )
        self.options: Dict[str, Any] = {**self.default_options, **{k: v for k, v in options.items() if v is not None}}

    # -- availability (class-level, cheap: no heavy imports unless the probe must) ---------------------
    @classmethod
    def availability(cls, deep: bool = False) -> Availability:
        """Whether the runtime is installed here, its version, and why not. The default probe is
        cheap (package metadata, no import); ``deep=True`` imports the runtime to tell a broken
        install from a working one."""
        try:
            return cls._probe(deep)
        except EdgeSDKError as exc:
            return Availability(False, reason=str(exc))

    @classmethod
    def is_available(cls) -> bool:
        return cls.availability().available

    @classmethod
    def runtime_version(cls) -> Optional[str]:
        return cls.availability().version

    @classmethod
    def _probe(cls, deep: bool) -> Availability:
        raise NotImplementedError

    def require_available(self) -> Availability:
        avail = self.availability(deep=True)
        if not avail.available:
            raise TargetUnavailableError(
                f"target '{self.name}' is not available: {avail.reason}",
                self.install_hint or None,
            )
        return avail

    # -- build and open ----------------------------------------------------------------------------
    def prepare(self, model: Any, workdir: Optional[Union[str, os.PathLike]] = None, **build: Any) -> Artifact:
        """Turn ``model`` (a :class:`~sdk.Model` or a path) into an :class:`Artifact` for this
        target. ``workdir`` is where built files go (a cache); ``build`` holds build options."""
        from ..model import Model

        if not isinstance(model, Model):
            model = Model.load(model)
        if model.format not in self.model_formats:
            raise InputError(
                f"target '{self.name}' runs {'/'.join(self.model_formats)} models, not {model.format}",
                "pick a target with --target (see `sdk targets`)",
            )
        self.require_available()
        return self._prepare_impl(model, Path(workdir) if workdir else None, **build)

    def open(self, artifact: Any) -> Session:
        """Open a :class:`Session` on an artifact (or a model/path, prepared with defaults)."""
        if not isinstance(artifact, Artifact):
            artifact = self.prepare(artifact)
        self.require_available()
        return self._open_impl(artifact)

    def _prepare_impl(self, model: Any, workdir: Optional[Path], **build: Any) -> Artifact:
        raise NotImplementedError

    def _open_impl(self, artifact: Artifact) -> Session:
        raise NotImplementedError

    # -- helpers for subclasses -----------------------------------------------------------------------
    def describe(self) -> Dict[str, Any]:
        """Target facts for result JSON: name, runtime version, effective options."""
        avail = self.availability()
        return {"name": self.name, "version": avail.version, "options": _jsonable(self.options)}

    def __repr__(self) -> str:
        return f"<Target {self.name} {self.options}>"


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (a runtime's coloured log text)."""
    import re

    return re.sub(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]", "", text)


def stored_precision(model: Any) -> Optional[str]:
    """The precision a model is stored in: ``int8`` for a quantized model (Q/DQ or integer
    operators, an int8/uint8 TFLite), ``fp16`` when its float weights are all float16, else
    ``fp32``; None when it cannot be told."""
    from ..model import Model

    try:
        m = model if isinstance(model, Model) else Model.load(model)
        if m.format == "onnx":
            ops = {n.op_type for n in m.proto.graph.node}
            if ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                      "ConvInteger", "DynamicQuantizeLinear"}:
                return "int8"
            floats = [i.data_type for i in m.proto.graph.initializer if i.data_type in (1, 10)]
            return "fp16" if floats and all(t == 10 for t in floats) else "fp32"
        dtypes = {str(s.dtype) for s in m.inputs}
        return "int8" if dtypes & {"int8", "uint8"} else ("fp16" if dtypes == {"float16"} else "fp32")
    except Exception:  # noqa: BLE001 - unreadable: the caller's own checks name the problem
        return None


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)
