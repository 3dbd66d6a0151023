"""``profile_model()``: per-layer times of a model, mapped to its ONNX nodes, here or on a board,
with an optional roofline against the board's chip.

::

    from sdk.profiler import ProfileConfig, profile_model
    doc = profile_model("yolov8n.onnx", ProfileConfig(target="onnxruntime", roofline=True))
    for layer in doc["layers"][:5]:
        print(layer["name"], layer["onnx_nodes"], layer["time_ms"], layer["bound"])

Here: the target's :meth:`~sdk.targets.Session.profile`. On a board (``board="jetson-orin-nx"``):
the board agent's ``profile`` command, the same code. The host maps runtime layers to ONNX nodes
(:func:`sdk.targets.profiling.map_to_onnx`) and, with ``roofline=True``, adds per-layer FLOPs,
bytes, intensity and bound (:mod:`sdk.roofline`) against the board profile's ``[hardware]`` roofs
(``local``: estimated on this machine). ``roofline=True`` with a board that cannot be reached (or
``estimate_only=True``) gives an estimate from the graph alone, labelled ``"mode": "estimate"``.

This module runs targets and boards: it sits above both floors (like validation), and is imported
by nothing below it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .errors import BoardConnectionError, InputError, RemoteError

__all__ = ["ProfileConfig", "profile_model", "hardware_for"]


@dataclass
class ProfileConfig:
    """What to profile and how. ``board``: a board profile name (None: this machine, no agent).
    ``input_shapes``: concrete shapes for dynamic inputs. ``roofline``: add the roofline fields.
    ``estimate_only``: do not run anything (roofline from the graph and the board's roofs)."""

    target: Optional[str] = None
    target_options: Dict[str, Any] = field(default_factory=dict)
    input_shapes: Dict[str, Sequence[int]] = field(default_factory=dict)
    #: Values of inputs that are not data: ``{name: array}`` or ``["NAME=VALUE"]`` strings.
    input_values: Any = None
    runs: int = 20
    warmup: int = 3
    seed: int = 0
    board: Optional[str] = None
    roofline: bool = False
    estimate_only: bool = False
    precision: Optional[str] = None


def hardware_for(board: Optional[str]) -> Any:
    """The roofline :class:`~sdk.roofline.Hardware` of a board profile (``None``: ``local``). A
    profile without ``[hardware] peak_gops``/``memory_bandwidth_gbs`` gets figures ESTIMATED on this
    machine when it is the local board, else :class:`InputError` naming what is missing."""
    from .remote.profiles import get_profile
    from .roofline import Hardware, estimate_host_hardware

    prof = get_profile(board or "local")
    hw = prof.hardware
    if hw.peak_gops and hw.memory_bandwidth_gbs:
        return Hardware({k: float(v) for k, v in hw.peak_gops.items()}, float(hw.memory_bandwidth_gbs),
                        source=hw.source or f"board profile {prof.source}")
    if prof.connection.is_local:
        return estimate_host_hardware()
    raise InputError(f"board '{prof.name}' has no roofline figures ([hardware] peak_gops and memory_bandwidth_gbs)",
                     f"add them to {prof.source}")


def _local_profile(model: Any, cfg: ProfileConfig) -> Dict[str, Any]:
    from .data import random_feed
    from .formats import default_target
    from .hostinfo import host_info
    from .targets import get_target
    from .targets.measure import as_values, require_control_values

    tgt = get_target(cfg.target or default_target(model), **dict(cfg.target_options))
    type(tgt).check_precision(cfg.precision, model)   # a precision it cannot honour: exit 2
    artifact = tgt.prepare(model)
    with tgt.open(artifact) as session:
        values = as_values(cfg.input_values, session.inputs)
        require_control_values(model, values, "sdk profile")
        feed = random_feed(session.inputs, session.input_shapes_or_none(cfg.input_shapes or None, values),
                           seed=cfg.seed, values=values)
        doc = session.profile(feed, runs=cfg.runs, warmup=cfg.warmup).to_dict()
        doc["inputs"] = [dict(s.to_dict(), shape=list(feed[s.name].shape)) for s in session.inputs]
    describe = tgt.describe()
    describe.update({k: v for k, v in artifact.metadata.items() if k not in describe})
    doc.update(runtime=describe, host=host_info(), where="host")
    return doc


def _board_profile(model: Any, cfg: ProfileConfig) -> Dict[str, Any]:
    from .data import values_to_json
    from .remote import Board
    from .targets.measure import as_values, require_control_values

    values = as_values(cfg.input_values, model.inputs)
    require_control_values(model, values, "sdk profile")
    with Board(cfg.board) as board:
        prof = board.profile
        pushed = board.push(model.path)
        target = board._pick_target(pushed, cfg.target)     # the profile's first target that runs this format
        from .targets import target_class

        target_class(target).check_precision(cfg.precision, model)   # one it cannot honour: exit 2
        request = {"model_path": board._abs(pushed.remote_path), "target": target,
                   "target_options": prof.runtime.target_options(target, cfg.target_options),
                   "precision": cfg.precision or prof.runtime.precision,
                   "input_shapes": {k: list(v) for k, v in cfg.input_shapes.items()},
                   "input_values": values_to_json(values),
                   "runs": cfg.runs, "warmup": cfg.warmup, "seed": cfg.seed,
                   "workdir": board._abs(board.workdir), "sysfs_root": prof.power.sysfs_root}
        doc = board.agent("profile", request, timeout_s=900.0)
        doc["board"] = board.info()
        doc["transfer"] = pushed.transfer
    doc["where"] = "board"
    return doc


def _input_shapes_of(doc: Mapping[str, Any], cfg: ProfileConfig) -> Dict[str, List[int]]:
    shapes = {i["name"]: list(i["shape"]) for i in doc.get("inputs") or [] if i.get("shape")}
    shapes.update({k: list(v) for k, v in cfg.input_shapes.items()})
    return shapes


def profile_model(model: Union[str, "os.PathLike[str]", Any], config: Optional[ProfileConfig] = None) -> Dict[str, Any]:
    """Profile ``model`` (see the module docstring); returns the ``sdk profile`` JSON document."""
    from .model import Model
    from .targets.profiling import graph_nodes_of

    cfg = config or ProfileConfig()
    if not isinstance(model, Model):
        model = Model.load(model)
    if cfg.estimate_only and not cfg.roofline:
        raise InputError("an estimate without a profile is only a roofline", "add --roofline")
    unreachable: Optional[str] = None
    doc: Optional[Dict[str, Any]] = None
    if not cfg.estimate_only:
        try:
            doc = _board_profile(model, cfg) if cfg.board else _local_profile(model, cfg)
        except (BoardConnectionError, RemoteError) as exc:
            if not (cfg.roofline and isinstance(exc, BoardConnectionError)):
                raise
            unreachable = str(exc)
    if doc is not None:
        doc["mode"] = "measured"
        if model.format == "onnx":
            doc["onnx_nodes_without_layer"] = map_to_onnx_dicts(doc["layers"], graph_nodes_of(model.proto))
    doc = doc if doc is not None else _estimate_doc(cfg, unreachable)
    doc["model"] = {**dict(doc.get("model") or {}), "path": str(model.path), "sha256": model.sha256,
                    "format": model.format}
    if cfg.roofline:
        _add_roofline(doc, model, cfg)
    return doc


def map_to_onnx_dicts(layers: List[Dict[str, Any]], nodes: Sequence[Any]) -> List[str]:
    """:func:`~sdk.targets.profiling.map_to_onnx` on layer dicts (in place)."""
    from .targets.profiling import LayerTime, map_to_onnx

    objs = [LayerTime.from_dict(l) for l in layers]
    left = map_to_onnx(objs, nodes)
    for d, o in zip(layers, objs):
        d["onnx_nodes"] = o.onnx_nodes
    return left


def _estimate_doc(cfg: ProfileConfig, unreachable: Optional[str]) -> Dict[str, Any]:
    why = (f"ESTIMATE ONLY: board '{cfg.board}' could not be reached ({unreachable}); layer times are the "
           "roofline's lower bound from the graph and the board's [hardware] figures, nothing was run"
           if unreachable else "ESTIMATE ONLY (--estimate): nothing was run; layer times are the roofline's lower "
                               "bound from the graph and the board's [hardware] figures")
    return {"schema": "edgesdk.profile/1", "mode": "estimate", "estimate_reason": why, "target": cfg.target,
            "profiler": None, "runs": 0, "layers": [], "end_to_end_ms": None, "flagged": False, "flag_reason": None,
            "notes": [why], "where": "nowhere (estimate)"}


def _add_roofline(doc: Dict[str, Any], model: Any, cfg: ProfileConfig) -> None:
    from .roofline import estimate_layers, graph_costs, precision_key, roofline_layers

    if model.format != "onnx":
        raise InputError("the roofline needs an ONNX model (FLOPs and bytes come from its graph)")
    from .remote.profiles import get_profile

    hw = hardware_for(cfg.board)
    costs = graph_costs(model, _input_shapes_of(doc, cfg))
    if doc["mode"] == "estimate":
        precision = cfg.precision or get_profile(cfg.board or "local").runtime.precision
        doc["layers"] = estimate_layers(costs, hw, precision_key(precision))
        doc["notes"].append(f"estimated at {precision_key(precision)}: the graph's float32 bytes scaled to that "
                            "precision; times are the roofline's lower bound (perfect overlap, no launch overhead)")
        doc["total_ms"] = sum(l["estimated_ms"] or 0.0 for l in doc["layers"])
        doc["estimated_total_ms"] = doc["total_ms"]
    summary = roofline_layers(doc["layers"], costs, hw) if doc["mode"] == "measured" else None
    if summary is None:
        from .roofline import _summary

        summary = _summary(doc["layers"], costs, hw)
    summary["board"] = cfg.board or "local"
    summary["mode"] = doc["mode"]
    doc["roofline"] = summary
