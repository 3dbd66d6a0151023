"""Build step of the TFLite target: target options -> an interpreter configuration (threads,
op resolver with or without XNNPACK, external delegates loaded by path with their options), and
the interpreter built from a model with its tensors allocated, so that a model the runtime cannot
run (an op it lacks) or a delegate that cannot load fails here, before any session opens.

Runs on the board too: Python 3.8, NumPy and the TFLite runtime.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ...errors import BuildError, InputError, InvalidModelError, TargetUnavailableError
from ...formats.tflite import TFLiteRuntime, quiet_native_info

QUANTIZED_IO = ("float", "raw")


@dataclass(frozen=True)
class DelegateSpec:
    """An external delegate: a shared library (``libedgetpu.so.1``, a GPU delegate...) and the
    string options passed to its ``tflite_plugin_create_delegate``."""

    path: str
    options: Tuple[Tuple[str, str], ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "options": dict(self.options)}


@dataclass(frozen=True)
class InterpreterConfig:
    """Everything that decides how the interpreter is built."""

    threads: Optional[int] = None
    xnnpack: bool = True
    delegates: Tuple[DelegateSpec, ...] = ()
    quantized_io: str = "float"
    signature: Optional[str] = None
    runtime: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> Dict[str, Any]:
        return {"threads": self.threads, "xnnpack": self.xnnpack,
                "delegates": [d.to_dict() for d in self.delegates],
                "quantized_io": self.quantized_io, "signature": self.signature}


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InputError(f"option {name}={value!r} is not a boolean", "use true or false")


def _as_json(name: str, value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise InputError(f"option {name} is not valid JSON: {exc}") from exc
    return value


def parse_config(options: Mapping[str, Any]) -> InterpreterConfig:
    """Check and normalise the target options (raises :class:`InputError` naming the bad one).

    ``delegate``: a path or a list of paths; ``delegate_options``: a dict (JSON text accepted),
    or a list of dicts aligned with the paths.
    """
    threads = _threads(options.get("threads"))
    xnnpack = _as_bool("xnnpack", options.get("xnnpack", True))
    qio = str(options.get("quantized_io") or "float").lower()
    if qio not in QUANTIZED_IO:
        raise InputError(f"option quantized_io={qio!r} is not one of: {', '.join(QUANTIZED_IO)}",
                         "float: pass and get float32 (quantised with scale/zero-point); raw: the model's integers")
    paths = _delegate_paths(_as_json("delegate", options.get("delegate")))
    dopts = _as_json("delegate_options", options.get("delegate_options"))
    dopts_list = _delegate_options(dopts, len(paths))
    if dopts and not paths:
        raise InputError("option delegate_options was given without a delegate", "add -o delegate=/path/to/lib.so")
    if len(dopts_list) != len(paths):
        raise InputError(f"{len(paths)} delegate(s) but {len(dopts_list)} delegate_options")
    delegates = tuple(
        DelegateSpec(str(p).strip(), tuple(sorted((str(k), _opt_text(v)) for k, v in d.items())))
        for p, d in zip(paths, dopts_list)
    )
    signature = options.get("signature")
    runtime = options.get("runtime")
    return InterpreterConfig(threads, xnnpack, delegates, qio, str(signature) if signature else None,
                             str(runtime) if runtime else None)


def _threads(value: Any) -> Optional[int]:
    if value is None:
        return None
    try:
        threads = int(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"option threads={value!r} is not an integer") from exc
    if threads < 1:
        raise InputError("option threads must be >= 1")
    return threads


def _delegate_paths(paths: Any) -> List[str]:
    """``delegate``: nothing, a path, comma-separated paths or a list of paths -> a list."""
    if paths is None or paths == "" or paths == []:
        return []
    if isinstance(paths, str):
        return [p for p in paths.split(",") if p.strip()] if "," in paths else [paths]
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
        raise InputError(f"option delegate={paths!r} must be a path or a list of paths")
    return list(paths)


def _delegate_options(dopts: Any, n_paths: int) -> List[Dict[str, Any]]:
    """``delegate_options``: nothing, one dict for every delegate, or a list of dicts."""
    if dopts is None or dopts == "":
        return [{} for _ in range(n_paths)]
    if isinstance(dopts, dict):
        return [dict(dopts) for _ in range(n_paths)]
    if isinstance(dopts, (list, tuple)) and all(isinstance(d, dict) for d in dopts):
        return [dict(d) for d in dopts]
    raise InputError("option delegate_options must be a JSON object (or a list of them, one per delegate)",
                     'e.g. -o delegate_options=\'{"device": ":0"}\'')


def _opt_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def load_delegates(rt: TFLiteRuntime, specs: Tuple[DelegateSpec, ...]) -> List[Any]:
    """Load each external delegate. A library that is missing, is not a TFLite delegate, or
    whose create function fails raises :class:`TargetUnavailableError` naming it."""
    import ctypes

    out = []
    for spec in specs:
        where = f"the TFLite delegate '{spec.path}'"
        hint = "check the path and that the library is a TFLite delegate built for this machine " \
               "(e.g. libedgetpu.so.1 for a Coral Edge TPU)"
        # Check the library first: the runtimes' Delegate object prints a traceback when it is
        # destroyed half-built, which a clear error should not carry.
        try:
            lib = ctypes.CDLL(spec.path)
        except OSError as exc:
            raise TargetUnavailableError(f"cannot load {where}: {_first(exc)}", hint) from exc
        if not hasattr(lib, "tflite_plugin_create_delegate") or not hasattr(lib, "tflite_plugin_destroy_delegate"):
            raise TargetUnavailableError(
                f"{where} is not a TFLite external delegate (no tflite_plugin_create_delegate symbol)", hint)
        try:
            out.append(rt.load_delegate(spec.path, dict(spec.options)))
        except (ValueError, RuntimeError, OSError, AttributeError) as exc:
            raise TargetUnavailableError(f"cannot load {where}: {_first(exc)}", hint) from exc
    return out


def _first(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__


def create_interpreter(rt: TFLiteRuntime, config: InterpreterConfig, model_path: Optional[str] = None,
                       model_content: Optional[bytes] = None, delegates: Optional[List[Any]] = None) -> Any:
    """Build and allocate an interpreter (delegates loaded unless given). Raises
    :class:`InvalidModelError` when the runtime cannot run the model (an op it lacks, a bad
    graph) and :class:`BuildError` when a delegate refuses the graph."""
    if delegates is None:
        delegates = load_delegates(rt, config.delegates)
    if not config.xnnpack and rt.resolver(False) is None:
        raise InputError(f"{rt.describe()} cannot turn XNNPACK off (no OpResolverType)",
                         "drop -o xnnpack=false or install a newer runtime: " + "pip install 'edgesdk[tflite]'")
    kwargs: Dict[str, Any] = rt.resolver_kwargs(config.xnnpack)
    if config.threads:
        kwargs["num_threads"] = int(config.threads)
    if delegates:
        kwargs["experimental_delegates"] = delegates
    source = {"model_path": os.fspath(model_path)} if model_path is not None else {"model_content": model_content}
    try:
        with quiet_native_info():
            interp = rt.Interpreter(**source, **kwargs)
    except (ValueError, RuntimeError) as exc:
        text = str(exc).strip() and _first(exc)
        if delegates and "flatbuffer" not in text.lower():
            names = ", ".join(d.path for d in config.delegates)
            raise BuildError(
                f"the TFLite delegate {names} could not be applied to the model: "
                f"{text or 'the runtime gave no reason'}",
                "delegates for accelerators usually need static shapes and their own ops; "
                "see the runtime's log lines above, or run without the delegate",
            ) from exc
        raise InvalidModelError(f"{rt.name} cannot load the model: {text or type(exc).__name__}") from exc
    try:
        with quiet_native_info():
            interp.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        text = _first(exc)
        if "custom op" in text.lower() or "unresolved" in text.lower() or "op " in text.lower():
            raise InvalidModelError(f"{rt.describe()} cannot run the model: {text}",
                                    "the model uses an op this runtime lacks; convert it with builtin ops "
                                    "only or use a runtime that has the op") from exc
        raise InvalidModelError(f"{rt.describe()} cannot prepare the model: {_node_named(interp, str(exc)) or text}",
                                "the shapes the file declares do not fit its ops: fix them in the exporter, or "
                                "feed other ones with --input-shape") from exc
    return interp


def _node_named(interp: Any, message: str) -> Optional[str]:
    """LiteRT's "Node number N (OP) failed to prepare" restated naming the node (:mod:`.diagnose`)."""
    try:
        from .diagnose import explain_failure

        return explain_failure(message, interp, {}, {})[0]
    except Exception:  # noqa: BLE001 - the runtime's own line stays
        return None
