"""The board agent's commands as plain functions: ``request dict -> result dict``.

The CLI (:mod:`.main`) reads the request JSON and prints the result; the host side calls the same
functions for the ``local`` board. Models are opened through the same target registry as on the
host (:func:`sdk.targets.get_target`), and latency is measured with the same loop as ``sdk bench``
(:func:`sdk.targets.measure.benchmark_session`). Runs on the board: Python 3.8, NumPy and the
target's runtime only (the ``onnx`` package is not needed: models are not re-validated here).

Requests (JSON objects; unknown keys are a :class:`~sdk.errors.ConfigError`):

``facts``  ``{sysfs_root?, sensors?}``
``bench``  ``{model_path, target? (default: the one that runs the model's format), target_options?, precision?, input_shapes?
           ({name: [dims]} or ["name=1x3x8x8"]), data_path? (.npy/.npz), runs?=100, warmup?=10,
           min_seconds?=1.0, max_seconds?, seed?=0, workdir?, idle_seconds?=1.0,
           power? ({sensors?, sysfs_root?, rate_hz?=20} or false), samples?, max_samples?=20000,
           early_stop? ({percentile, max_ci_width_pct?} or a percentile), telemetry? ({rate_hz?=5} or
           false; default on), lock_clocks? ({power_mode?, sudo?} or true: nvpmodel + jetson_clocks,
           restored after)}``: prints :meth:`sdk.result.BenchResult.to_dict`
``infer``  ``{model_path, target?, target_options?, precision?, workdir?, inputs_npz, outputs_npz,
           cache_max_bytes?}``: after the run, the folder of ``inputs_npz`` (the board's data cache)
           is trimmed to ``cache_max_bytes``, least recently used files first.
``clean``  ``{workdir}``: empty the board cache (``<workdir>/data`` and ``<workdir>/models``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ... import __version__
from ...atomic import atomic_path
from ...config import check_keys
from ...errors import ConfigError, InputError, MissingDependencyError, ModelNotFoundError
from ...probe import module_installed

__all__ = ["COMMANDS", "run_command", "facts", "bench", "infer", "version", "profile", "clean", "trim_cache", "pipeline"]

_INSTALL_NUMPY = "pip3 install numpy (or: sudo apt install python3-numpy)"


def _check_keys(request: Mapping[str, Any], command: str, allowed: Sequence[str], required: Sequence[str] = ()) -> None:
    if not isinstance(request, Mapping):
        raise ConfigError("the %s request must be a JSON object" % command)
    check_keys(request, allowed, "unknown key(s) in the %s request: {keys}" % command)
    missing = [k for k in required if request.get(k) in (None, "")]
    if missing:
        raise ConfigError("the %s request needs %s" % (command, ", ".join(missing)))


def _need_numpy(feature: str) -> None:
    if not module_installed("numpy"):
        raise MissingDependencyError(feature, "numpy", _INSTALL_NUMPY)


# -- version / facts ------------------------------------------------------------------------------------
def version(request: Mapping[str, Any]) -> Dict[str, Any]:
    """The agent's version and the Python running it (cheap: for a connection check)."""
    import platform
    import sys

    _check_keys(request, "version", ())
    return {"agent": __version__, "agent_file": __file__, "python": platform.python_version(),
            "python_executable": sys.executable, "numpy": module_installed("numpy")}


def facts(request: Mapping[str, Any]) -> Dict[str, Any]:
    """Device facts (see :func:`.facts.device_facts`)."""
    from .facts import device_facts

    _check_keys(request, "facts", ("sysfs_root", "sensors"))
    return device_facts(request.get("sysfs_root"), request.get("sensors"))


# -- shared: open a model on a target ------------------------------------------------------------------
def _model(request: Mapping[str, Any]):
    from ...model import Model

    path = Path(os.path.expanduser(str(request["model_path"])))
    if not path.is_file():
        raise ModelNotFoundError("model file '%s' does not exist on this machine" % path)
    return Model(path)  # no onnx.checker here: the board may not have the onnx package


def _target(request: Mapping[str, Any], model: Any = None) -> Tuple[Any, Dict[str, Any]]:
    """The target instance and the precision record: a requested precision is passed as the
    target's ``precision`` option when it has one, else only recorded. No target in the request:
    the one that runs the model's format."""
    from ...formats import default_target
    from ...targets.registry import target_class

    name = request.get("target") or (default_target(model) if model is not None else "onnxruntime")
    options = dict(request.get("target_options") or {})
    if not isinstance(request.get("target_options") or {}, Mapping):
        raise ConfigError("target_options must be a JSON object")
    cls = target_class(name)
    precision = request.get("precision")
    record: Dict[str, Any] = {"requested": precision, "applied_as_option": False}
    if precision:
        if "precision" in getattr(cls, "default_options", {}):
            if options.get("precision") not in (None, precision):
                raise ConfigError("precision '%s' contradicts target_options precision '%s'"
                                  % (precision, options["precision"]), "give one of them")
            options["precision"] = precision
            record["applied_as_option"] = True
        else:
            record["note"] = "target '%s' has no precision option: the model ran as stored" % cls.name
    return cls(**options), record


def _values(request: Mapping[str, Any]) -> Dict[str, Any]:
    """The request's ``input_values`` (``{name: {dtype, shape, data}}``) as arrays."""
    from ...data import values_from_json

    return values_from_json(request.get("input_values"))


def _shapes(value: Any) -> Optional[Dict[str, Tuple[int, ...]]]:
    from ...tensors import parse_input_shapes

    if not value:
        return None
    if isinstance(value, Mapping):
        try:
            return {str(k): tuple(int(d) for d in v) for k, v in value.items()}
        except (TypeError, ValueError) as exc:
            raise InputError("input_shapes must map input names to lists of ints: %s" % exc) from exc
    if isinstance(value, str):
        value = [value]
    return parse_input_shapes(value)


# -- bench -----------------------------------------------------------------------------------------------
_BENCH_KEYS = ("model_path", "target", "target_options", "precision", "input_shapes", "input_values", "data_path", "runs",
               "warmup", "min_seconds", "max_seconds", "seed", "workdir", "idle_seconds", "power", "samples",
               "max_samples", "early_stop", "telemetry", "lock_clocks", "carry")


def _power_request(request: Mapping[str, Any]) -> Tuple[Any, Optional[List[str]], str, float]:
    """``(power request or False, sensors, sysfs root, rate_hz)`` from the bench request."""
    power_req = request.get("power", {})
    if power_req is None:
        power_req = {}
    if power_req is not False and not isinstance(power_req, Mapping):
        raise ConfigError("power must be an object {sensors, sysfs_root, rate_hz} or false")
    if isinstance(power_req, Mapping):
        _check_keys(power_req, "bench power", ("sensors", "sysfs_root", "rate_hz"))
    opts = power_req or {}
    rate_hz = float(opts.get("rate_hz") or 20.0)
    if rate_hz <= 0:
        raise InputError("power rate_hz must be > 0")
    return power_req, opts.get("sensors") or None, opts.get("sysfs_root") or "/", rate_hz


def _early_stop(value: Any) -> Any:
    """``{percentile, max_ci_width_pct?}`` (or a bare percentile) -> :class:`sdk.bench.EarlyStop`."""
    from ...bench import EarlyStop

    if not value:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"percentile": value}
    if not isinstance(value, Mapping):
        raise ConfigError("early_stop must be {percentile, max_ci_width_pct} or a percentile")
    _check_keys(value, "bench early_stop", ("percentile", "max_ci_width_pct"))
    pct = float(value.get("percentile", 99.0))
    if not 0.0 < pct < 100.0:
        raise InputError("early_stop percentile must be in (0, 100), not %g" % pct)
    width = value.get("max_ci_width_pct")
    return EarlyStop(pct, None if width is None else float(width))


def _measure(session: Any, sampler: Any, idle_s: float, shapes: Any, data: Any, request: Mapping[str, Any],
             early_stop: Any) -> Tuple[Any, Optional[Tuple[float, float]]]:
    """Idle window (when sampling power), then the measured run; the sampler stops either way."""
    from ...targets.measure import benchmark_session
    from .power.sampler import sampled_run

    max_seconds = request.get("max_seconds")
    return sampled_run(sampler, idle_s, lambda: benchmark_session(
        session, input_shapes=shapes, data=data, warmup=int(request.get("warmup", 10)), input_values=_values(request),
        runs=int(request.get("runs", 100)), min_seconds=float(request.get("min_seconds", 1.0)),
        max_seconds=float(max_seconds) if max_seconds else None, seed=int(request.get("seed", 0)),
        early_stop=early_stop, carry=_carry(request)))


def _carry(request: Mapping[str, Any]) -> Dict[str, str]:
    """The request's ``carry`` (``{output: input}``), checked for its type."""
    carry = request.get("carry") or {}
    if not isinstance(carry, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in carry.items()):
        raise ConfigError("carry must map output names to input names")
    return dict(carry)


def _power_figures(power_req: Any, sampler: Any, tried: List[Dict[str, Any]], run: Any,
                   idle_window: Optional[Tuple[float, float]], with_trace: bool) -> Tuple[Any, Any]:
    """:class:`sdk.result.Power` and :class:`~sdk.result.Energy` of the run."""
    from ...result import Energy, Power
    from .power.sampler import power_report

    if power_req is False:
        reason = "power sampling was not requested"
        return Power.unmeasured(reason), Energy.unmeasured(reason)
    if sampler is None:
        reason = "no power sensor found (tried: %s)" % "; ".join("%s: %s" % (t["sensor"], t["why_not"]) for t in tried)
        return Power.unmeasured(reason, tried), Energy.unmeasured(reason)
    power_d, energy_d = power_report(sampler, (run.begin_s, run.end_s), idle_window, run.stats.count, tried)
    power, energy = Power.from_dict(power_d), Energy.from_dict(energy_d)
    if with_trace and power.measured:
        power.trace = sampler.trace()  # same clock as the result's window
    return power, energy


def bench(request: Mapping[str, Any]) -> Dict[str, Any]:
    """Build/load the model with the target, sample power over an idle window and the measured
    run, and return the result JSON: :meth:`sdk.result.BenchResult.to_dict` (``latency_ms`` with
    its 95% intervals, ``throughput_ips``, ``power``, ``energy_mj_per_inference``, ``device``,
    ``model``, ``target``, ``runtime``, ...)."""
    _check_keys(request, "bench", _BENCH_KEYS, ("model_path",))
    _need_numpy("the board agent's bench")
    from ...hostinfo import host_info
    from ...result import BenchResult
    from ...targets.measure import bench_settings, describe_inputs
    from .facts import device_facts, temperatures
    from .power import PowerSampler, open_source

    power_req, sensors, root, rate_hz = _power_request(request)
    idle_s = float(request.get("idle_seconds", 1.0) or 0.0)
    shapes = _shapes(request.get("input_shapes"))
    data = request.get("data_path")
    if data is not None:
        data = os.path.expanduser(str(data))
    early_stop = _early_stop(request.get("early_stop"))

    model = _model(request)
    tgt, precision = _target(request, model)
    device = device_facts(root, sensors)
    del device["temperatures_c"]  # taken again right before the run, after the build
    source: Any = None
    tried: List[Dict[str, Any]] = []
    if power_req is not False:
        source, tried = open_source(sensors, root)
    artifact = tgt.prepare(model, workdir=request.get("workdir"))
    from .power.runctx import RunContext

    run_ctx = RunContext(request.get("telemetry", True), request.get("lock_clocks"), root, source)
    with tgt.open(artifact) as session, run_ctx:
        device["temperatures_before_c"] = temperatures(root)
        sampler = PowerSampler(source, rate_hz) if source is not None else None
        run_ctx.start_telemetry()
        try:
            run, idle_window = _measure(session, sampler, idle_s, shapes, data, request, early_stop)
        finally:
            run_ctx.stop_telemetry()
        inputs = describe_inputs(session, shapes, data, _values(request))
    device["temperatures_after_c"] = temperatures(root)
    with_samples = bool(request.get("samples"))
    power, energy = _power_figures(power_req, sampler, tried, run, idle_window, with_samples)
    describe = tgt.describe()
    describe.update({k: v for k, v in artifact.metadata.items() if k not in describe})
    samples, stride = _strided(run.samples_ms, int(request.get("max_samples") or 20000))
    window: Dict[str, Any] = {"begin_s": run.begin_s, "end_s": run.end_s, "clock": "time.monotonic"}
    if idle_window is not None:
        window["idle_begin_s"], window["idle_end_s"] = idle_window
    result = BenchResult(
        stats=run.stats, target=str(describe.get("name") or tgt.name), runtime=describe,
        model={"path": str(model.path), "sha256": model.sha256, "format": model.format},
        host=host_info(), inputs=inputs,
        settings=bench_settings(int(request.get("warmup", 10)), int(request.get("runs", 100)),
                                float(request.get("min_seconds", 1.0)), request.get("max_seconds"),
                                data, int(request.get("seed", 0)), early_stop, idle_seconds=idle_s,
                                **({"carry": _carry(request)} if request.get("carry") else {})),
        samples_ms=samples, samples_stride=stride, window=window, power=power, energy=energy,
        precision=precision, device=device, agent={"version": __version__},
        **run_ctx.report((idle_window or (run.begin_s, run.end_s))[0], (run.begin_s, run.end_s),
                     sampler.trace() if sampler is not None and power.measured else None))
    return result.to_dict(samples=with_samples)


def _strided(samples: List[float], limit: int) -> Tuple[List[float], int]:
    """At most ``limit`` samples, every ``stride``-th in run order (the stride is returned)."""
    stride = max(1, -(-len(samples) // max(1, limit)))
    return list(samples[::stride]), stride


# -- infer -----------------------------------------------------------------------------------------------
def infer(request: Mapping[str, Any]) -> Dict[str, Any]:
    """Run every sample of ``inputs_npz`` and write the outputs to ``outputs_npz`` (atomically).

    The inputs are read by the same reader as ``--data`` on the host (:class:`sdk.sources.ArraySource`):
    arrays keyed by input name (one array with any key for a single-input model). When every
    array has one more dimension than its input (``stacked``), the first axis indexes samples and
    each output gets that leading axis too (``batched: true``); rows of a dynamic batch axis run
    in chunks and their outputs are concatenated; otherwise the file is one feed. ``carry``
    (``{output: input}``): the samples run one at a time, in order, each fed the state the one
    before left (a streaming model's recurrent state)."""
    _check_keys(request, "infer", ("model_path", "target", "target_options", "precision", "workdir",
                                   "inputs_npz", "outputs_npz", "cache_max_bytes", "compress", "carry"),
                ("model_path", "inputs_npz", "outputs_npz"))
    _need_numpy("the board agent's infer")
    model = _model(request)
    tgt, precision = _target(request, model)
    src = Path(os.path.expanduser(str(request["inputs_npz"])))
    dst = Path(os.path.expanduser(str(request["outputs_npz"])))
    if not src.is_file():
        raise InputError("inputs file '%s' does not exist" % src)
    _touch(src)  # the board cache evicts least recently used files first
    artifact = tgt.prepare(model, workdir=request.get("workdir"))
    with tgt.open(artifact) as session:
        outputs, n, stacked = _run_file(session, src, _carry(request))
    _write_npz_atomic(dst, outputs, compress=bool(request.get("compress")))
    cache = None
    if request.get("cache_max_bytes") is not None:
        cache = trim_cache(src.parent, int(request["cache_max_bytes"]), keep=(src, dst))
    return {"cache": cache, "outputs": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in outputs.items()],
            "samples": n, "batched": stacked, "outputs_npz": str(dst), "target": tgt.name, "precision": precision,
            "model": {"path": str(model.path), "sha256": model.sha256}}


_CHUNK_BYTES = 32 << 20


def _run_file(session: Any, src: Path, carry: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, Any], int, bool]:
    """Outputs of every sample of ``src``; returns ``(outputs, samples, stacked)``."""
    import numpy as np

    from ...sources import ROWS, STACKED, ArraySource, batched
    from ...targets.measure import CarriedRuns

    source = ArraySource(src, session.inputs)
    layout = source.layouts[0]
    dynamic = all(s.shape and not (isinstance(s.shape[0], int) and s.shape[0] >= 0) for s in session.inputs)
    step = 1
    if layout == ROWS and dynamic and not carry:
        step = max(1, _CHUNK_BYTES // max(1, source.sample_nbytes()))
    run = CarriedRuns(session, carry).run if carry else session.run
    collected: Dict[str, List[Any]] = {}
    n = 0
    for feed, _labels, count in batched(source.samples(), step):
        n += count
        for name, arr in run(feed).items():
            collected.setdefault(name, []).append(np.asarray(arr))
    if layout == STACKED:
        return {k: np.stack(v) for k, v in collected.items()}, n, True
    # rows: batches concatenate; per-sample outputs whose first axis is not the batch (a CRNN's
    # [seq, 1, classes]) are stacked, as the host reference does
    joinable = step > 1 or all(all(a.ndim >= 1 and a.shape[0] == 1 for a in v) for v in collected.values())
    if len(next(iter(collected.values()), [])) == 1 or joinable:
        return {k: (np.concatenate(v, axis=0) if len(v) > 1 else v[0]) for k, v in collected.items()}, n, False
    return {k: np.stack(v) for k, v in collected.items()}, n, True


def _write_npz_atomic(dst: Path, outputs: Mapping[str, Any], compress: bool = False) -> None:
    import numpy as np

    to_save: Dict[str, Any] = dict(outputs)
    with atomic_path(dst) as tmp, open(str(tmp), "wb") as f:
        (np.savez_compressed if compress else np.savez)(f, **to_save)


def _touch(path: Path) -> None:
    """Mark a cached file as used now (its mtime orders the cache's LRU eviction)."""
    try:
        os.utime(str(path), None)
    except OSError:
        pass


# -- the board cache -------------------------------------------------------------------------------------
_PARTIAL = (".part", ".tmp")


def trim_cache(folder: Path, max_bytes: int, keep: Sequence[Path] = ()) -> Dict[str, Any]:
    """Delete the least recently used files of ``folder`` (by mtime: pushes and runs touch them)
    until it holds at most ``max_bytes``. Files in ``keep`` and uploads in progress stay.
    Returns ``{bytes, files, evicted, evicted_bytes, max_bytes}`` after trimming."""
    keep_set = set(os.path.abspath(str(k)) for k in keep)
    entries = []
    try:
        names = os.listdir(str(folder))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(str(folder), name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isfile(path):
            entries.append((st.st_mtime, st.st_size, path))
    total = sum(e[1] for e in entries)
    evicted = evicted_bytes = 0
    for _mtime, size, path in sorted(entries):
        if total <= max_bytes:
            break
        if path in keep_set or path.endswith(_PARTIAL) or os.path.basename(path).startswith("."):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        evicted += 1
        evicted_bytes += size
    return {"bytes": total, "files": len(entries) - evicted, "evicted": evicted, "evicted_bytes": evicted_bytes,
            "max_bytes": max_bytes}


def clean(request: Mapping[str, Any]) -> Dict[str, Any]:
    """Empty the board cache: every file under ``<workdir>/data`` and ``<workdir>/models``
    (content-addressed; pushed again when next needed). The agent itself stays."""
    import shutil

    _check_keys(request, "clean", ("workdir",), ("workdir",))
    root = Path(os.path.expanduser(str(request["workdir"])))
    removed = removed_bytes = 0
    for kind in ("data", "models"):
        folder = root / kind
        if not folder.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(str(folder)):
            for name in files:
                try:
                    removed_bytes += os.path.getsize(os.path.join(dirpath, name))
                    removed += 1
                except OSError:
                    pass
        shutil.rmtree(str(folder), ignore_errors=True)
    return {"workdir": str(root), "removed_files": removed, "removed_bytes": removed_bytes}


def profile(request: Mapping[str, Any]) -> Dict[str, Any]:
    """Per-layer profile on the board (see :mod:`.profile_cmd`)."""
    from .profile_cmd import profile as run_profile

    return run_profile(request)


def pipeline(request: Mapping[str, Any]) -> Dict[str, Any]:
    """A whole pipeline run on the board (see :mod:`.pipeline_cmd`)."""
    from .pipeline_cmd import pipeline as run_pipeline

    return run_pipeline(request)


COMMANDS: Dict[str, Callable[[Mapping[str, Any]], Dict[str, Any]]] = {
    "pipeline": pipeline,
    "version": version,
    "facts": facts,
    "bench": bench,
    "infer": infer,
    "profile": profile,
    "clean": clean,
}


def run_command(command: str, request: Mapping[str, Any]) -> Dict[str, Any]:
    """Run one agent command; :class:`InputError` lists the known ones for an unknown name."""
    fn = COMMANDS.get(command)
    if fn is None:
        raise InputError("unknown agent command '%s'" % command, "commands: %s" % ", ".join(COMMANDS))
    return fn(request)
