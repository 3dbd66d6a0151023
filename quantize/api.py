"""``quantize()``: FP32 ONNX + calibration data -> INT8 QDQ ONNX for a target, with a report.

::

    from sdk.quantize import quantize
    result = quantize("model.onnx", "calib/", target="onnxruntime", method="entropy",
                      eval_data="eval.npz", max_drop=1.0, output="model_int8.onnx")
    print(result.report["accuracy"])

Steps: prepare the model (fix input shapes, upgrade to opset 13, name nodes), collect the
calibration statistics in one streamed FP32 pass (or reuse the saved artifact), derive ranges with
the chosen method, plan Q/DQ with the target's scheme, correct biases, emit, check the graph loads in
ONNX Runtime, measure accuracy on held-out data, keep the most sensitive layers in float until the
budget holds, and write every output atomically.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import InputError, QuantizationError
from .schemes import get_scheme
from .schemes.base import QParams, QuantPlan, Scheme, ensure_node_names
from .stats import CalibrationStats

__all__ = ["quantize", "QuantizeResult", "load_or_calibrate", "MIN_OPSET", "cache_dir"]

MIN_OPSET = 13
ProgressFn = Callable[[str, int, Optional[int]], None]


@dataclass
class QuantizeResult:
    """The INT8 model (an in-memory :class:`sdk.Model`; ``path`` set once saved), the report dict,
    the calibration statistics, the activation ranges used, the plan and the quantization parameters."""

    model: Any
    report: Dict[str, Any]
    stats: CalibrationStats
    ranges: Dict[str, Tuple[float, float]]
    plan: QuantPlan
    qparams: Dict[str, QParams]
    scheme: Scheme
    extras: Dict[str, str] = field(default_factory=dict)


def cache_dir() -> Path:
    """Where calibration artifacts are kept: ``$EDGESDK_CACHE/calib`` or ``~/.cache/edgesdk/calib``."""
    root = os.environ.get("EDGESDK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "edgesdk")
    return Path(root) / "calib"


def _prepare(model: Any, input_shapes: Optional[Mapping[str, Sequence[int]]]) -> Tuple[Any, Dict[str, Any]]:
    from ..model import Model
    from .graph import check_not_quantized

    m = model if isinstance(model, Model) else Model.load(model)
    if m.format != "onnx":
        raise InputError(f"'{m.name}' is a {m.format} model; quantization takes an FP32 ONNX model")
    check_not_quantized(m.proto, m.name)
    notes: Dict[str, Any] = {"source_sha256": m.sha256, "opset_in": m.opset}
    if input_shapes:
        m = m.with_input_shapes(input_shapes)
    if (m.opset or 0) < MIN_OPSET:
        m = m.with_opset(MIN_OPSET)
        notes["opset_upgraded_to"] = MIN_OPSET
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(m.proto)
    ensure_node_names(proto)
    return m.derive(proto), notes


def load_or_calibrate(model: Any, source: Any, *, stats_path: Optional[Union[str, os.PathLike]] = None,
                      use_cache: bool = True, workers: Optional[int] = None, batch_size: Optional[int] = None,
                      progress: Optional[ProgressFn] = None, executor: Any = None
                      ) -> Tuple[CalibrationStats, Dict[str, Any]]:
    """The calibration statistics of ``model`` (prepared) over ``source``: read from ``stats_path`` or
    the cache when they match the model's sha256 and tensor names, else one streamed FP32 pass
    (saved to ``stats_path`` and the cache) on ``executor`` (:mod:`sdk.quantize.executors`).
    Returns ``(stats, info)``."""
    from .calibrate import calibrate, calibration_tensors

    plan = calibration_tensors(model.proto)
    names = plan["tensors"]
    key = hashlib.sha256((model.sha256 + "\0" + "\0".join(names)).encode()).hexdigest()
    fp = source.fingerprint() if hasattr(source, "fingerprint") else None
    notes: List[str] = []
    candidates: List[Path] = []
    if stats_path is not None:
        candidates.append(Path(stats_path))
    cache_file = cache_dir() / f"{key[:20]}-{fp[:20]}.npz" if (use_cache and fp) else None
    if cache_file is not None:
        candidates.append(cache_file)
    for c in candidates:
        if c.exists():
            try:
                st = CalibrationStats.load(c)
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:   # corrupt: recalibrate
                notes.append(f"ignored unreadable calibration statistics '{c}' ({exc}); calibrated again "
                             "and replaced them")
                warnings.warn(notes[-1], stacklevel=2)
                continue
            same_data = fp is None or st.meta.get("data_fingerprint") in (None, fp)
            if st.model_sha256 == model.sha256 and set(names) <= set(st.names) and same_data:
                return st, {"reused": str(c), "time_s": 0.0, "warnings": notes}
    total = source.length() if hasattr(source, "length") else None
    t0 = time.perf_counter()
    from .executors import get_executor

    ex = get_executor(executor)
    stage = "calibrate" if ex.progress_unit == "samples" else f"calibrate ({ex.progress_unit})"
    cb = (lambda done, tot: progress(stage, done, tot)) if progress else None
    st = calibrate(model, source, batch_size=batch_size, workers=workers, total=total, progress=cb,
                   plan=plan, executor=ex)
    elapsed = time.perf_counter() - t0
    st.meta.update({"data_fingerprint": fp, "time_s": elapsed})
    if stats_path is not None:        # asked for: a failure to save is an error, not a warning
        try:
            st.save(Path(stats_path))
        except OSError as exc:
            raise InputError(f"could not save the calibration statistics to '{stats_path}': "
                             f"{exc.strerror or exc}", "give a writable --stats path") from exc
    if cache_file is not None:
        try:
            st.save(cache_file)
        except OSError as exc:
            warnings.warn(f"could not save calibration statistics to '{cache_file}': {exc}", stacklevel=2)
    return st, {"reused": None, "time_s": elapsed, "warnings": notes}


def _constant_input_warnings(stats: CalibrationStats, inputs: Iterable[Any]) -> List[str]:
    """A warning per model input whose calibration values were all one value (all zeros: an
    unset buffer, a failed decode, a wrong normalisation): ranges from such data are meaningless."""
    out = []
    for spec in inputs:
        t = stats.tensors.get(spec.name)
        if t is not None and t.seen and t.min == t.max:
            out.append(f"calibration input '{spec.name}' is constant ({t.min:g}) in all {stats.samples} samples: the "
                       "INT8 ranges will not fit real data; check the calibration data and its preprocessing")
    return out


def _ranges(stats: CalibrationStats, method: str, params: Mapping[str, Any], symmetric: bool,
            names: Optional[Iterable[str]] = None) -> Dict[str, Tuple[float, float]]:
    """Ranges of ``names`` (default: every calibrated tensor) by ``method``."""
    from .methods import compute_range

    wanted = stats.tensors if names is None else [n for n in names if n in stats.tensors]
    return {n: compute_range(stats.tensors[n], method, symmetric, **params) for n in wanted if stats.tensors[n].seen}


class _Builder:
    """Re-emits the model for a set of float-kept layers (fallback) or a single layer (sensitivity)."""

    def __init__(self, proto: Any, scheme: Scheme, stats: CalibrationStats, ranges: Mapping[str, Tuple[float, float]],
                 bias_correction: bool, idx: Any = None):
        from .graph import GraphIndex

        self.proto, self.scheme, self.stats, self.ranges = proto, scheme, stats, ranges
        self.bias_correction = bias_correction
        self.idx = idx if idx is not None else GraphIndex(proto)  # shape inference: reuse the caller's
        self.corrected = 0

    def build(self, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None) -> Tuple[Any, QuantPlan, Dict[str, QParams]]:
        from .bias_correction import correct_biases
        from .graph import GraphIndex
        from .qdq import emit_qdq

        plan = self.scheme.plan(self.idx, exclude=exclude, only=only)
        proto, idx = self.proto, self.idx
        if self.bias_correction and plan.weights:
            proto, self.corrected = correct_biases(proto, plan, self.stats, self.scheme.reduce_range)
            idx = GraphIndex(proto)
            plan = self.scheme.plan(idx, exclude=exclude, only=only)
        qproto, qparams = emit_qdq(proto, plan, self.ranges, self.scheme)
        return qproto, plan, qparams


def quantize(
    model: Any,
    calib: Any,
    *,
    output: Optional[Union[str, os.PathLike]] = None,
    target: str = "onnxruntime",
    method: Optional[str] = None,
    method_params: Optional[Mapping[str, Any]] = None,
    preprocess: Any = None,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    eval_data: Any = None,
    labels: Any = None,
    max_drop: Optional[float] = None,
    min_cosine: Optional[float] = None,
    max_fallback: int = 8,
    sensitivity: Optional[bool] = None,
    sensitivity_samples: int = 32,
    bias_correction: bool = True,
    per_channel: bool = True,
    reduce_range: bool = False,
    activation_dtype: Optional[str] = None,
    exclude: Sequence[str] = (),
    workers: Optional[int] = None,
    executor: Any = None,
    executor_options: Optional[Mapping[str, Any]] = None,
    batch_size: Optional[int] = None,
    calib_limit: Optional[int] = None,
    stats_path: Optional[Union[str, os.PathLike]] = None,
    use_cache: bool = True,
    report_path: Optional[Union[str, os.PathLike]] = None,
    trt_cache: Optional[Union[str, os.PathLike]] = None,
    trt_version: Optional[str] = None,
    ranges_path: Optional[Union[str, os.PathLike]] = None,
    progress: Optional[ProgressFn] = None,
) -> QuantizeResult:
    """Quantize ``model`` (path or :class:`sdk.Model`, FP32 ONNX) for ``target`` (a scheme name:
    onnxruntime, tensorrt, tflite) from ``calib`` (image folder + ``preprocess``, ``.npy``/``.npz``
    file or folder, or an iterable of feeds).

    ``method``: minmax | percentile | entropy | mse (default: the scheme's). ``eval_data``: held-out
    data (``.npz`` with ``y`` labels, or with ``labels`` a ``.npy`` of class ids) for the accuracy
    report; ``max_drop`` (points of top-1 accuracy, or of top-1 agreement without labels) and/or
    ``min_cosine`` set the budget that the fallback keeps by leaving the most sensitive layers in
    float (at most ``max_fallback``). ``output``: the INT8 ``.onnx``; TensorRT also writes its
    calibration cache (``trt_cache``, default ``OUTPUT`` with ``.calib.cache``), TFLite the ranges
    JSON (``ranges_path``, default ``OUTPUT`` with ``.ranges.json``). Every file is written atomically,
    and only once the model passed the checker and loads in ONNX Runtime. ``executor``: where the
    calibration pass runs (``threads``, ``ray`` or an ``Executor``; :mod:`sdk.quantize.executors`),
    with ``executor_options`` (e.g. ``{"address": "HOST:6379"}`` for ``ray``); ``workers``: its
    threads or actors. The result does not depend on the executor.
    """
    from ..sources import batched, open_source
    from .accuracy import Budget, evaluate, layer_sensitivity, ort_session
    from .graph import GraphIndex, fold_batchnorm

    t_start = time.perf_counter()
    scheme = get_scheme(target, per_channel=per_channel, reduce_range=reduce_range, activation_dtype=activation_dtype)
    method = method or scheme.default_method
    from .executors import get_executor
    from .methods import get_method

    get_method(method)  # unknown method: fail before any work
    executor = get_executor(executor, **dict(executor_options or {}))
    prepared, notes = _prepare(model, input_shapes)
    source = open_source(calib, prepared.inputs, preprocess, limit=calib_limit)
    stats, calib_info = load_or_calibrate(prepared, source, stats_path=stats_path, use_cache=use_cache,
                                          workers=workers, batch_size=batch_size, progress=progress,
                                          executor=executor)
    source_warnings = list(getattr(source, "warnings", []))
    source_warnings += list(calib_info.get("warnings", [])) + _constant_input_warnings(stats, prepared.inputs)
    for w in source_warnings[:5]:
        warnings.warn(w, stacklevel=2)

    work = prepared.proto
    folded = 0
    if scheme.fold_batchnorm:
        work, folded = fold_batchnorm(work)
    # ranges of what the scheme can quantize (all tensors for TensorRT's cache and exported ranges)
    work_idx = GraphIndex(work)
    if scheme.writes_calibration_cache or scheme.exports_ranges or ranges_path is not None:
        wanted = None
    else:
        full = scheme.plan(work_idx)
        wanted = set(full.activations) | {t for g in full.shared for t in g}
    ranges = _ranges(stats, method, dict(method_params or {}), scheme.activation_symmetric, wanted)
    builder = _Builder(work, scheme, stats, ranges, bias_correction, work_idx)
    qproto, plan, qparams = builder.build(exclude=exclude)
    if not plan.layers:
        raise QuantizationError(f"'{prepared.name}' has no op that the {scheme.name} scheme quantizes",
                                "it needs Conv, Gemm, MatMul or similar with float weights")
    ref_sess = ort_session(work)
    q_sess = ort_session(qproto)

    report: Dict[str, Any] = {
        "model": {"path": str(prepared.origin) if prepared.origin else None, "sha256": notes["source_sha256"],
                  "opset_in": notes["opset_in"], "opset_upgraded_to": notes.get("opset_upgraded_to"),
                  "batchnorm_folded": folded},
        "target": scheme.name,
        "scheme": scheme.options(),
        "method": {"name": method, "params": dict(method_params or {})},
        "calibration": {"samples": stats.samples, "time_s": round(calib_info["time_s"], 3),
                        "reused_statistics": calib_info["reused"], "tensors": len(stats.tensors),
                        "skipped": getattr(source, "skipped", 0),
                        "workers": stats.meta.get("workers"), "batch_size": stats.meta.get("batch_size"),
                        "executor": stats.meta.get("executor", "threads")},
        "layers": {"quantized": len(plan.layers), "activations_with_qdq": len(plan.activations),
                   "weights": len(plan.weights), "int32_biases": len(plan.biases)},
        "bias_correction": {"enabled": bias_correction, "corrected_layers": builder.corrected},
        "warnings": source_warnings,
        "accuracy": None,
        "sensitivity": None,
        "fallback_layers": [],
    }
    if notes.get("opset_upgraded_to"):
        report["warnings"].append(f"opset upgraded from {notes['opset_in']} to {MIN_OPSET} (per-channel DequantizeLinear needs it)")

    budget = Budget(max_drop, min_cosine)
    if budget.active and eval_data is None:
        raise InputError("--max-drop / --min-cosine need held-out data", "pass --eval PATH")
    if eval_data is not None:
        eval_src = _eval_source(eval_data, labels, prepared)
        eb = 8 if _dynamic_batch(prepared) else 1

        def run_eval(qs) -> Dict[str, Any]:
            return evaluate(ref_sess, qs, _with_labels(batched(eval_src.samples(), eb), labels))

        result = run_eval(q_sess)
        report["accuracy"] = result
        needs_fallback = budget.active and not budget.holds(result)
        if sensitivity or needs_fallback:
            feeds, refs = _subset(eval_src, ref_sess, sensitivity_samples)
            layers = list(plan.layers)
            sens = layer_sensitivity(lambda only: builder.build(only=only)[0], layers, feeds, refs,
                                     progress=(lambda d, t: progress("sensitivity", d, t)) if progress else None)
            report["sensitivity"] = sens
            fallback: List[str] = list(exclude)
            for row in sens[:max_fallback] if needs_fallback else []:
                fallback.append(row["layer"])
                qproto, plan, qparams = builder.build(exclude=fallback)
                q_sess = ort_session(qproto)
                result = run_eval(q_sess)
                if budget.holds(result):
                    break
            report["fallback_layers"] = [f for f in fallback if f not in exclude]
            report["accuracy"] = result
            report["layers"].update({"quantized": len(plan.layers), "activations_with_qdq": len(plan.activations)})
            if budget.active and not budget.holds(result):
                report["warnings"].append(
                    f"the accuracy budget does not hold even with {len(report['fallback_layers'])} layers in float")
        report["budget"] = {"max_drop": max_drop, "min_cosine": min_cosine,
                            "holds": budget.holds(result) if budget.active else None}

    qmodel = prepared.derive(qproto)
    extras: Dict[str, Any] = {}
    if scheme.writes_calibration_cache:
        extras["trt_scales"] = {n: max(abs(r[0]), abs(r[1])) / 127.0 for n, r in ranges.items()}
    if scheme.exports_ranges or ranges_path is not None:
        from .qdq import export_ranges

        extras["ranges"] = export_ranges(plan, ranges, qparams, builder.proto, scheme, all_ranges=ranges)
    report["time_s"] = round(time.perf_counter() - t_start, 3)
    res = QuantizeResult(qmodel, report, stats, ranges, plan, qparams, scheme)
    if output is not None:
        _write_outputs(res, extras, Path(output), report_path, trt_cache, trt_version, ranges_path)
    elif report_path is not None:
        _write_json(Path(report_path), report)
    return res


def _dynamic_batch(model: Any) -> bool:
    return all(s.shape and not (isinstance(s.shape[0], int) and s.shape[0] > 0) for s in model.inputs)


def _eval_source(eval_data: Any, labels: Any, model: Any):
    from ..sources import open_source

    src = open_source(eval_data, model.inputs)
    return src


def _with_labels(batches, labels: Any):
    """Attach labels from a separate ``.npy``/array (in sample order) when given."""
    if labels is None:
        yield from batches
        return
    y = np.load(labels, allow_pickle=False) if isinstance(labels, (str, os.PathLike)) else np.asarray(labels)
    i = 0
    for feed, _, n in batches:
        if i + n > len(y):
            raise InputError(f"the labels hold {len(y)} entries, fewer than the evaluation samples")
        yield feed, list(y[i:i + n]), n
        i += n


def _subset(src: Any, ref_sess: Any, n: int):
    feeds, refs = [], []
    names = [o.name for o in ref_sess.get_outputs()]
    for feed, _ in src.samples():
        feeds.append(feed)
        refs.append(dict(zip(names, ref_sess.run(names, feed))))
        if len(feeds) >= n:
            break
    return feeds, refs


def _write_json(path: Path, data: Any) -> None:
    from ..atomic import atomic_write

    atomic_write(path, json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _write_outputs(res: QuantizeResult, extras: Dict[str, Any], output: Path, report_path, trt_cache, trt_version,
                   ranges_path) -> None:
    from .trtcache import DEFAULT_TRT_VERSION, write_cache

    saved = res.model.save(output)
    res.model = saved
    res.extras["model"] = str(output)
    if "trt_scales" in extras:
        p = Path(trt_cache) if trt_cache else output.with_suffix(".calib.cache")
        write_cache(p, extras["trt_scales"], trt_version or DEFAULT_TRT_VERSION)
        res.extras["trt_cache"] = str(p)
    if "ranges" in extras:
        p = Path(ranges_path) if ranges_path else output.with_suffix(".ranges.json")
        _write_json(p, extras["ranges"])
        res.extras["ranges"] = str(p)
    res.report["outputs"] = dict(res.extras)
    if report_path is not None:
        _write_json(Path(report_path), res.report)
        res.extras["report"] = str(report_path)
