"""Build step of the ONNX Runtime target: session options from target options, and the
optional optimised graph written to disk (what ``optimized_model_filepath`` produces)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from ...errors import InputError

GRAPH_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                    "extended": "ORT_ENABLE_EXTENDED", "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}


def session_options(ort: Any, options: Dict[str, Any], optimized_path: Optional[Path] = None) -> Any:
    so = ort.SessionOptions()
    level = str(options.get("graph_optimization", "all")).lower()
    if level not in GRAPH_OPT_LEVELS:
        raise InputError(f"unknown graph optimisation level '{level}'", f"use one of: {', '.join(GRAPH_OPT_LEVELS)}")
    enum = getattr(ort.GraphOptimizationLevel, GRAPH_OPT_LEVELS[level], None)
    if enum is None:  # older builds lack ORT_ENABLE_LAYOUT
        enum = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.graph_optimization_level = enum
    threads = _count(options, "threads")
    if threads:
        so.intra_op_num_threads = threads
    inter = _count(options, "inter_threads")
    if inter:
        so.inter_op_num_threads = inter
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    # the runtime's own log (E:/W: lines, coloured) stays off the terminal: its failures come back
    # as exceptions and are translated; EDGESDK_RUNTIME_LOG=1 (sdk --debug) shows warnings and errors
    so.log_severity_level = runtime_log_level()
    if optimized_path is not None:
        so.optimized_model_filepath = str(optimized_path)
    return so


def runtime_log_level() -> int:
    """ONNX Runtime severity: 4 (fatal only) normally, 2 (warnings) with ``EDGESDK_RUNTIME_LOG=1``."""
    import os

    return 2 if os.environ.get("EDGESDK_RUNTIME_LOG") == "1" else 4


def _count(options: Dict[str, Any], key: str) -> int:
    """A thread count option: a whole number >= 1 (0 or unset: the runtime's default)."""
    value = options.get(key)
    if value in (None, 0, "0", ""):
        return 0
    try:
        n = int(value)
        if isinstance(value, bool) or n != float(value) or n < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise InputError(f"bad option {key}={value!r}", f"{key} is a whole number >= 1") from None
    return n


def provider_options(providers, options: Dict[str, Any]):
    """Per-provider option dicts in the providers' order (XNNPACK gets the thread count)."""
    extra = dict(options.get("provider_options") or {})
    out = []
    for p in providers:
        opts = dict(extra.get(p, {}))
        if p == "XnnpackExecutionProvider" and options.get("threads") and "intra_op_num_threads" not in opts:
            opts["intra_op_num_threads"] = str(int(options["threads"]))
        out.append({k: str(v) for k, v in opts.items()})
    return out
