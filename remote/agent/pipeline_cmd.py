"""The agent's ``pipeline`` command: a whole pipeline run on the board (every stage and glue step
there; nothing round-trips per stage), with power sampled over the measured serial window.
Runs on the board: Python 3.8, NumPy, the targets' runtimes (OpenCV for decoding and DB boxes).

Request: ``{spec (PipelineSpec.to_dict, models and glue files as board paths), inputs: [{name,
path}], frames?=20, warmup?=2, overlapped?=true, queue_depth?=2, workdir?, idle_seconds?=0.5,
power? ({sensors?, sysfs_root?, rate_hz?=20} or false)}``. Result: :meth:`PipelineResult.to_dict`
with ``energy`` (mJ per frame from the board's sensor, or the reason there is none) and ``device``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Tuple

__all__ = ["pipeline", "PIPELINE_KEYS"]

PIPELINE_KEYS = ("spec", "inputs", "frames", "warmup", "overlapped", "queue_depth", "workdir", "idle_seconds",
                 "power")


def _inputs(request: Mapping[str, Any]) -> List[str]:
    from ...errors import ConfigError, InputError

    items = request.get("inputs")
    if not isinstance(items, list) or not items:
        raise ConfigError("the pipeline request needs inputs: [{name, path}]")
    paths = []
    for it in items:
        if not isinstance(it, Mapping) or not it.get("path"):
            raise ConfigError("a pipeline input is {name, path}")
        p = os.path.expanduser(str(it["path"]))
        if not os.path.isfile(p):
            raise InputError("pipeline input '%s' does not exist on the board" % p)
        paths.append((str(it.get("name") or os.path.basename(p)), p))
    # the runner names inputs by file name: link each under its own name in a private folder
    folder = tempfile.mkdtemp(prefix="edgesdk-pipeline-")
    out = []
    for name, p in paths:
        dst = os.path.join(folder, os.path.basename(name))
        try:
            os.symlink(p, dst)
        except OSError:
            shutil.copyfile(p, dst)
        out.append(dst)
    return out


def pipeline(request: Mapping[str, Any]) -> Dict[str, Any]:
    from ...errors import InputError
    from ...hostinfo import host_info
    from ...kernels.pipelines import PipelineSpec, RunConfig, load_images, run_pipeline_spec
    from ...result import Energy, Power
    from .commands import _check_keys, _need_numpy, _power_request
    from .facts import device_facts, temperatures
    from .power import PowerSampler, open_source
    from .power.sampler import power_report, sampled_run

    _check_keys(request, "pipeline", PIPELINE_KEYS, ("spec", "inputs"))
    _need_numpy("the board agent's pipeline")
    spec = PipelineSpec.from_dict(request["spec"], resolve=False)
    for st in spec.stages:
        if not os.path.isfile(st.model):
            raise InputError("stage '%s': model '%s' is not on the board" % (st.name, st.model))
    files = _inputs(request)
    try:
        images = load_images(files)
    finally:
        shutil.rmtree(os.path.dirname(files[0]), ignore_errors=True)
    power_req, sensors, root, rate_hz = _power_request(request)
    source: Any = None
    tried: List[Dict[str, Any]] = []
    if power_req is not False:
        source, tried = open_source(sensors, root)
    device = device_facts(root, sensors)
    del device["temperatures_c"]
    window: Dict[str, Tuple[float, float]] = {}
    cfg = RunConfig(frames=int(request.get("frames", 20)), warmup=int(request.get("warmup", 2)),
                    overlapped=bool(request.get("overlapped", True)), queue_depth=int(request.get("queue_depth", 2)),
                    workdir=request.get("workdir"), on_window=lambda b, e: window.__setitem__("run", (b, e)))
    idle_s = float(request.get("idle_seconds", 0.5) or 0.0)
    sampler = PowerSampler(source, rate_hz) if source is not None else None
    device["temperatures_before_c"] = temperatures(root)
    result, idle_window = sampled_run(sampler, idle_s, lambda: run_pipeline_spec(spec, images, cfg))
    device["temperatures_after_c"] = temperatures(root)
    if power_req is False:
        energy: Dict[str, Any] = {"measured": False, "reason": "power sampling was not requested"}
    elif sampler is None:
        energy = {"measured": False, "reason": "no power sensor found (tried: %s)"
                  % "; ".join("%s: %s" % (t["sensor"], t["why_not"]) for t in tried)}
    else:
        power_d, energy_d = power_report(sampler, window["run"], idle_window, result.frames, tried)
        power, en = Power.from_dict(power_d), Energy.from_dict(energy_d)
        if power.measured:
            energy = {"measured": True, "mj_per_frame": en.total_mj, "above_idle_mj_per_frame": en.above_idle_mj,
                      "mean_w": power.mean_w, "idle_w": power.idle_w, "source": power.source,
                      "samples": power.samples, "measures": power.measures,
                      "window": "the serial measured run (%d frames)" % result.frames}
        else:
            energy = {"measured": False, "reason": power.reason or "no samples inside the run"}
    result.energy = energy
    result.host = host_info()
    result.device = dict(device, where="board")
    return result.to_dict(samples=True)
