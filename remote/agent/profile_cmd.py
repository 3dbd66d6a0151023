"""The agent's ``profile`` command: per-layer times of a model on the board, through the target's
own profiler (:meth:`sdk.targets.Session.profile`). Runs on the board: Python 3.8, NumPy and the
target's runtime (the ONNX node mapping and the roofline are done on the host, which has the model).

Request: ``{model_path, target?, target_options?, precision?, input_shapes?, runs?=20, warmup?=3,
seed?=0, workdir?, sysfs_root?}``. Result: the :class:`~sdk.targets.profiling.LayerProfile` JSON
plus ``device`` (clocks, power mode, temperatures before/after), ``inputs``, ``target``.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

__all__ = ["profile"]

PROFILE_KEYS = ("model_path", "target", "target_options", "precision", "input_shapes", "input_values", "runs", "warmup", "seed",
                "workdir", "sysfs_root")


def profile(request: Mapping[str, Any]) -> Dict[str, Any]:
    from ...data import random_feed
    from ...errors import InputError
    from .commands import _check_keys, _model, _need_numpy, _shapes, _target, _values
    from .facts import clocks_locked, power_mode, temperatures

    _check_keys(request, "profile", PROFILE_KEYS, ("model_path",))
    _need_numpy("the board agent's profile")
    runs, warmup = int(request.get("runs", 20)), int(request.get("warmup", 3))
    if runs < 1 or warmup < 0:
        raise InputError("profile runs must be >= 1 and warmup >= 0")
    root = request.get("sysfs_root") or "/"
    model = _model(request)
    tgt, precision = _target(request)
    shapes = _shapes(request.get("input_shapes"))
    artifact = tgt.prepare(model, workdir=request.get("workdir"))
    device: Dict[str, Any] = {"clocks": clocks_locked(root), "power_mode": power_mode(root)}
    with tgt.open(artifact) as session:
        values = _values(request)
        feed = random_feed(session.inputs, session.input_shapes_or_none(shapes, values),
                           seed=int(request.get("seed", 0)), values=values)
        device["temperatures_before_c"] = temperatures(root)
        result = session.profile(feed, runs=runs, warmup=warmup).to_dict()
        inputs = [dict(s.to_dict(), shape=list(feed[s.name].shape)) for s in session.inputs]
    device["temperatures_after_c"] = temperatures(root)
    describe = tgt.describe()
    describe.update({k: v for k, v in artifact.metadata.items() if k not in describe})
    result.update(device=device, inputs=inputs, runtime=describe, precision=precision,
                  model={"path": str(model.path), "sha256": model.sha256, "format": model.format})
    return result
