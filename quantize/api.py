"""``quantize()``: FP32 ONNX + calibration data -> INT8 QDQ ONNX for a target, with a report.

::

    from sdk.quantize import quantize
    result = quantize("model.onnx", "calib/", scheme="onnxruntime", method="entropy",
                      eval_data="eval.npz", max_drop=1.0, output="model_int8.onnx")
    print(result.report["accuracy"])

Steps: prepare the model (fix input shapes, upgrade to opset 13, name nodes), collect the
calibration statistics in one streamed FP32 pass (or reuse the saved artifact), derive ranges with
the chosen method, plan Q/DQ with the target's scheme, correct biases, emit, check the graph loads in
ONNX Runtime, measure accuracy on held-out data, keep the most sensitive layers in float until the
budget holds, and write every output atomically.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import time
import warnings
import zipfile
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import InputError, QuantizationError
from .schemes import get_scheme
from .schemes.base import QParams, QuantPlan, Scheme, ensure_node_names
from .stats import CalibrationStats

__all__ = ["quantize", "QuantizeConfig", "QuantizeResult", "DEFAULT_MIN_COSINE", "load_or_calibrate", "MIN_OPSET", "cache_dir"]

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
    failures: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False when a budget, the speed check or the coverage did not hold (see ``failures``)."""
        return not self.failures


def cache_dir() -> Path:
    """Where calibration artifacts are kept: ``$EDGESDK_CACHE/calib`` or ``~/.cache/edgesdk/calib``."""
    root = os.environ.get("EDGESDK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "edgesdk")
    return Path(root) / "calib"


def _opset_upgrade_why(opset_in: Optional[int], opset_to: int) -> str:
    """What needed the upgrade: per-channel DequantizeLinear below 13, HardSwish (14) above it."""
    needs = []
    if (opset_in or 0) < MIN_OPSET:
        needs.append("per-channel DequantizeLinear")
    if opset_to > MIN_OPSET:
        needs.append("HardSwish")
    return " and ".join(needs) + (" needs it" if len(needs) == 1 else " need it")


def _prepare(model: Any, input_shapes: Optional[Mapping[str, Sequence[int]]], hardswish_op: bool = False
             ) -> Tuple[Any, Dict[str, Any]]:
    """Load, fold constants (weights in ``Constant`` nodes or behind Identity/Cast/Transpose chains
    become initializers), upgrade to opset 13 (per-channel DequantizeLinear) when the converter can,
    else keep the opset and note ``per_tensor_only``; fix the input shapes that were asked for; then
    the exact float rewrites of :mod:`sdk.formats.onnx_rewrite` (``float_rewrites``). ``hardswish_op``
    (a target with a hard-swish kernel): hard-swishes become one ``HardSwish`` node, the opset raised
    to 14 for it when the model has one."""
    from ..errors import ModelError
    from ..model import Model
    from .graph import check_not_quantized

    m = model if isinstance(model, Model) else Model.load(model)
    if m.format != "onnx":
        raise InputError(f"'{m.name}' is a {m.format} model; quantization takes an FP32 ONNX model")
    check_not_quantized(m.proto, m.name)
    notes: Dict[str, Any] = {"source_sha256": m.sha256, "opset_in": m.opset}
    folded = m.fold_constants()
    notes["constants_folded"] = 0 if folded is m else len(m.proto.graph.node) - len(folded.proto.graph.node)
    m = folded
    if (m.opset or 0) < MIN_OPSET:
        try:
            m = m.with_opset(MIN_OPSET)
            notes["opset_upgraded_to"] = MIN_OPSET
        except ModelError as exc:
            notes["per_tensor_only"] = str(exc)
    if input_shapes:
        steering = sorted({c["input"] for c in m.control_inputs() if c["role"].startswith("chooses an If")})
        if steering:
            # a static shape makes the runtime infer the branch the value never takes, which then
            # fails ("LSTM: first input must have rank 3"): the shapes stay the calibration data's
            notes["input_shapes_not_fixed"] = (f"an If branch depends on input {', '.join(steering)}: "
                                               "the graph keeps its dynamic shapes")
        else:
            m = m.with_input_shapes(input_shapes)
    import onnx

    from ..formats.onnx_rewrite import count_hardswish, simplify

    if hardswish_op and (m.opset or 0) < 14 and not notes.get("per_tensor_only") and count_hardswish(m.proto.graph):
        try:
            m = m.with_opset(14)
            notes["opset_upgraded_to"] = 14
        except ModelError:
            pass                            # HardSwish needs opset 14: the x * HardSigmoid(x) form stays
    proto, rewrites = simplify(m.proto, hardswish_op=hardswish_op and (m.opset or 0) >= 14)
    if rewrites:
        notes["float_rewrites"] = rewrites
    if proto is m.proto:
        proto = onnx.ModelProto()
        proto.CopyFrom(m.proto)
    ensure_node_names(proto)
    return m.derive(proto), notes


def load_or_calibrate(model: Any, source: Any, *, stats_path: Optional[Union[str, os.PathLike]] = None,
                      use_cache: bool = True, workers: Optional[int] = None, batch_size: Optional[int] = None,
                      progress: Optional[ProgressFn] = None, executor: Any = None, save_stats: bool = True
                      ) -> Tuple[CalibrationStats, Dict[str, Any]]:
    """The calibration statistics of ``model`` (prepared) over ``source``: read from ``stats_path`` or
    the cache when they match the model's sha256 and tensor names, else one streamed FP32 pass
    (saved to ``stats_path`` and the cache) on ``executor`` (:mod:`sdk.quantize.executors`).
    ``save_stats=False``: fresh statistics are not written to ``stats_path`` here (the caller
    writes them with its other outputs, as one set). Returns ``(stats, info)``."""
    from .calibrate import calibrate, calibration_tensors

    plan = calibration_tensors(model.proto)
    names = plan["tensors"]
    extremes = plan.get("extremes", [])
    # the per-channel extremes balancing needs are part of the key (models without a balancing site: as before)
    key_text = model.sha256 + "\0" + "\0".join(names) + ("\0extremes\0" + "\0".join(extremes) if extremes else "")
    key = hashlib.sha256(key_text.encode()).hexdigest()
    fp = source.fingerprint() if hasattr(source, "fingerprint") else None
    notes: List[str] = []
    candidates: List[Path] = []
    if stats_path is not None:
        candidates.append(Path(stats_path))
    cache_file = cache_dir() / f"{key[:20]}-{fp[:20]}.npz" if (use_cache and fp) else None
    if cache_file is not None:
        candidates.append(cache_file)
    reused = _reuse_stats(candidates, model.sha256, names, fp, notes)
    if reused is not None:
        from ..digest import file_sha256

        return reused[0], {"reused": str(reused[1]), "time_s": 0.0, "warnings": notes,
                           "statistics_file": {"path": str(reused[1]), "sha256": file_sha256(reused[1])}}
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
    _save_stats(st, stats_path if save_stats else None, cache_file)
    return st, {"reused": None, "time_s": elapsed, "warnings": notes}


def _reuse_stats(candidates: List[Path], model_sha256: str, names: List[str], fp: Optional[str],
                 notes: List[str]) -> Optional[Tuple[CalibrationStats, Path]]:
    """The first of ``candidates`` that holds statistics of this model (sha256, tensor names) over
    the same data; unreadable ones are noted in ``notes`` (and warned about) and skipped."""
    for c in candidates:
        if c.exists():
            try:
                st = CalibrationStats.load(c)
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, InputError) as exc:  # corrupt: recalibrate
                notes.append(f"ignored unreadable calibration statistics '{c}' ({exc}); calibrated again "
                             "and replaced them")
                warnings.warn(notes[-1], stacklevel=3)
                continue
            same_data = fp is None or st.meta.get("data_fingerprint") in (None, fp)
            if st.model_sha256 == model_sha256 and set(names) <= set(st.names) and same_data:
                return st, c
    return None


def _save_stats(st: CalibrationStats, stats_path: Optional[Union[str, os.PathLike]],
                cache_file: Optional[Path]) -> None:
    """Save freshly computed statistics to ``stats_path`` (a failure is an error: it was asked
    for) and to the cache (a failure is a warning)."""
    if stats_path is not None:
        try:
            st.save(Path(stats_path))
        except OSError as exc:
            raise InputError(f"could not save the calibration statistics to '{stats_path}': "
                             f"{exc.strerror or exc}", "give a writable --stats path") from exc
    if cache_file is not None:
        try:
            st.save(cache_file)
        except OSError as exc:
            warnings.warn(f"could not save calibration statistics to '{cache_file}': {exc}", stacklevel=3)


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
        self.bias_memo: Dict[Any, Any] = {}     # each layer's corrected bias, made once per run

    def build(self, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None,
              scheme: Optional[Scheme] = None) -> Tuple[Any, QuantPlan, Dict[str, QParams]]:
        from .bias_correction import correct_biases
        from .graph import GraphIndex
        from .qdq import emit_qdq

        scheme = scheme or self.scheme
        plan = scheme.plan(self.idx, exclude=exclude, only=only)
        proto, idx = self.proto, self.idx
        if self.bias_correction and plan.weights:
            proto, self.corrected = correct_biases(proto, plan, self.stats, scheme.reduce_range, self.idx,
                                                   self.bias_memo)
            idx = GraphIndex(proto, types_of=self.idx)      # the same nodes, other bias initializers
            plan = scheme.plan(idx, exclude=exclude, only=only)
        # a candidate is checked by the runtime that judges it; the final model by _Run.result
        qproto, qparams = emit_qdq(proto, plan, self.ranges, scheme, types_of=idx, check=False)
        return qproto, plan, qparams


DEFAULT_MIN_COSINE = 0.99
#: a classifier's top-1 agreement with FP32 kept by the default budget (a cosine of 0.99 lets argmaxes flip)
DEFAULT_MIN_TOP1 = 0.99
DEFAULT_MIN_TASK_METRIC = 0.99
#: the speed-aware plan times op-type variants only when the full INT8 plan is less than this much faster
SEARCH_BELOW_SPEEDUP = 1.15


@dataclass
class QuantizeConfig:
    """Everything :func:`quantize` takes besides the model and the calibration data (the CLI builds
    one from its options). ``method`` None: the scheme's default (``auto`` for onnxruntime).
    With ``eval_data`` and no budget, ``min_cosine`` defaults to :data:`DEFAULT_MIN_COSINE` (and a
    classifier's top-1 agreement to :data:`DEFAULT_MIN_TOP1`);
    ``budget=False`` turns the default off. ``task_metric(reference, candidate)``: the task's own
    agreement of INT8 with FP32 (per-sample lists of output arrays in, 1.0 = same result), or its
    name (:mod:`sdk.quantize.task_metrics`: ``top1``, ``corpus:NAME``, ``FILE.py:FUNCTION``), bounded
    below by ``min_task_metric`` (default 0.99 when a task metric is given; it then replaces the
    default cosine budget). The fallback search evaluates candidates on the first ``search_samples``
    held-out samples and confirms the result on all (None: all, every time). ``speed_check``: on
    the host target (onnxruntime), measure FP32 against INT8 variants and keep in float the op types
    (or low-intensity convs) whose int8 form is slower; a slower INT8 model is a failure unless
    ``allow_slower``."""

    scheme: str = "onnxruntime"          # the CLI's --target: onnxruntime, tensorrt, tflite
    method: Optional[str] = None
    method_params: Dict[str, Any] = field(default_factory=dict)
    preprocess: Any = None
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None
    #: values of inputs that are not data (``{"sr": 16000}`` or ``["sr=16000"]``): added to every
    #: calibration and evaluation sample that does not hold them
    input_values: Any = None
    #: which axis of each calibration array holds the samples (None: one value for every sample)
    sample_axes: Optional[Mapping[str, Optional[int]]] = None
    eval_data: Any = None
    labels: Any = None
    max_drop: Optional[float] = None
    min_cosine: Optional[float] = None
    budget: bool = True
    task_metric: Union[None, str, Callable[[Any, Any], float]] = None
    min_task_metric: Optional[float] = None
    max_fallback: Optional[int] = None
    sensitivity: Optional[bool] = None
    sensitivity_samples: int = 16
    search_samples: Optional[int] = 16
    bias_correction: bool = True
    per_channel: bool = True
    #: None: 7-bit weights when the CPU the model is for needs them (the scheme's
    #: :meth:`~sdk.quantize.schemes.base.Scheme.reduced_range_reason`), else 8-bit
    reduce_range: Optional[bool] = None
    #: the CPU the model is for: architecture (``x86_64``, ``aarch64``) and ``/proc/cpuinfo`` flags
    #: (None: this host's)
    cpu_arch: Optional[str] = None
    cpu_flags: Optional[Sequence[str]] = None
    #: where ``cpu_arch``/``cpu_flags`` came from, in words (``report.cpu.source``; default "given")
    cpu_source: Optional[str] = None
    activation_dtype: Optional[str] = None
    exclude: Sequence[str] = ()
    #: output name -> role (:data:`sdk.quantize.roles.ROLES`), over the one recognised from the outputs
    output_roles: Optional[Mapping[str, str]] = None
    workers: Optional[int] = None
    executor: Any = None
    executor_options: Optional[Mapping[str, Any]] = None
    batch_size: Optional[int] = None
    calib_limit: Optional[int] = None
    stats_path: Optional[Union[str, os.PathLike]] = None
    use_cache: bool = True
    report_path: Optional[Union[str, os.PathLike]] = None
    trt_cache: Optional[Union[str, os.PathLike]] = None
    trt_version: Optional[str] = None
    ranges_path: Optional[Union[str, os.PathLike]] = None
    speed_check: bool = True
    #: intra-op threads of the speed check's sessions (None: onnxruntime's default, as ``sdk bench``)
    speed_threads: Optional[int] = None
    allow_slower: bool = False
    #: without ``eval_data``: hold out the last 20% (at least 8) of the calibration samples, never used
    #: for ranges, and check the default budget on them (:mod:`sdk.quantize.guard`)
    guard: bool = True
    #: a run whose accuracy could not be checked (too few samples to hold out), or whose samples are too
    #: few to establish a budget that holds on them (accuracy.not_established), is a failure
    strict: bool = False
    #: before the fallback keeps a MatMul/Gemm fed by a LayerNorm in float, try it in INT8 with
    #: activation-weight balancing (:mod:`sdk.quantize.smooth`); False: float directly, as before
    balance: bool = True
    #: the fallback aims at a budget its samples establish, not only one they meet: the low end of
    #: each role's interval keeps its bound, where FP32 judged against itself shows it can (a budget
    #: met with no margin on 8 samples misses on others as often as it holds); False: the score alone
    margin: bool = True
    progress: Optional[ProgressFn] = None
    #: an ``output`` ending in ``.tflite`` (scheme ``tflite``): float or int8 graph inputs/outputs
    tflite_io: str = "float"
    #: a float ``.tflite``'s fallback: ``int16`` (16x8 before float), ``float``, or ``auto`` (16x8 first
    #: for ``tflite_io="int8"``, float otherwise: :func:`sdk.quantize.tflite_model.fallback_steps`)
    fallback_precision: str = "auto"


def quantize(model: Any, calib: Any, config: Optional[QuantizeConfig] = None, *,
             output: Optional[Union[str, os.PathLike]] = None, **options: Any) -> QuantizeResult:
    """Quantize ``model`` (path or :class:`sdk.Model`, FP32 ONNX; a float ``.tflite`` goes through the
    TFLite adapter, :mod:`sdk.quantize.tflite_model`) for ``config.scheme`` (a scheme name:
    onnxruntime, tensorrt, tflite; ``output`` ending in ``.tflite``: a full-integer TFLite file) from ``calib`` (image folder + ``preprocess``, ``.npy``/``.npz``
    file or folder, or an iterable of feeds). ``options`` override fields of ``config``
    (:class:`QuantizeConfig`); ``output``: the INT8 ``.onnx``.

    Steps: prepare (fold constants, upgrade the opset, fix shapes), calibrate once (streamed), ranges
    by ``method`` (``auto`` picks per tensor), plan Q/DQ by the scheme, on the host target keep the
    op types that run faster in int8, measure accuracy on ``eval_data`` and keep the layers that
    break the budget in float (ranked in one pass, then a doubling/bisecting search), write every
    file atomically once the model passed the checker and loads in ONNX Runtime.

    Returns a :class:`QuantizeResult`; ``result.failures`` lists what did not hold (budget, speed,
    nothing quantized): the model is still written and the report says why.
    """
    try:
        cfg = replace(config or QuantizeConfig(), **options)
    except TypeError as exc:
        raise InputError(f"quantize(): {exc}") from None
    if isinstance(cfg.task_metric, str):
        from .task_metrics import resolve_task_metric

        cfg = replace(cfg, task_metric=resolve_task_metric(cfg.task_metric))
    from .tflite_model import is_tflite, quantize_tflite

    if is_tflite(model):  # the TFLite format adapter under the same core (statistics, methods, budget)
        return quantize_tflite(model, calib, cfg, Path(output) if output is not None else None)
    if output is not None and Path(output).suffix.lower() == ".tflite":
        _check_tflite_output(cfg)
    t_start = time.perf_counter()
    run = _Run(cfg, tflite_output=output is not None and Path(output).suffix.lower() == ".tflite")
    run.defer_stats = output is not None       # -o and --stats are written together, as one set
    run.prepare(model)
    run.calibrate(calib)
    run.plan()
    run.speed_plan()
    run.accuracy()
    run.finish_latency()
    res = run.result(time.perf_counter() - t_start)
    if output is not None:
        # --stats always receives the statistics this run used (computed, or reused from the cache or
        # from --stats itself), written with -o under one lock: the pair on disk is one run's
        _write_outputs(res, run.extras(), Path(output), cfg.report_path, cfg.trt_cache, cfg.trt_version,
                       cfg.ranges_path, stats=(run.stats, Path(cfg.stats_path)) if cfg.stats_path else None,
                       stats_file=run.calib_info.get("statistics_file"), cfg=cfg)
    elif cfg.report_path is not None:
        _write_json(Path(cfg.report_path), res.report)
    return res


class _Run:
    """The state of one :func:`quantize` call, step by step (each step a small method)."""

    def __init__(self, cfg: QuantizeConfig, tflite_output: bool = False):
        from .methods import get_method

        self.cfg = cfg
        self.defer_stats = False       # True: --stats is written with -o at the end (one set, one lock)
        self.cpu = _target_cpu(cfg)
        self.scheme = get_scheme(cfg.scheme, per_channel=cfg.per_channel, reduce_range=bool(cfg.reduce_range),
                                 activation_dtype=cfg.activation_dtype).for_io(cfg.tflite_io)
        if cfg.reduce_range is None:
            why = type(self.scheme).reduced_range_reason(self.cpu["arch"], frozenset(self.cpu["flags"]))
            self.scheme.reduce_range = why is not None
            self.cpu["reduce_range"] = why or "8-bit weights: this CPU's int8 kernels accumulate in 32 bits"
        else:
            self.cpu["reduce_range"] = f"{'7' if cfg.reduce_range else '8'}-bit weights, as asked"
        #: the written model runs on this host's onnxruntime kernels: judge it as they compute it; any
        #: other target is judged on the exact int8 arithmetic, Q/DQ unfused (:func:`.accuracy.ort_session`)
        self.runs_here = self.scheme.host_runtime and cfg.cpu_arch is None and cfg.cpu_flags is None
        self.tflite_output = tflite_output                  # -o *.tflite: the converter writes the QDQ model
        #: the candidates' .tflite conversions by their Q/DQ model's digest: the final one is written as judged
        self.converted: "OrderedDict[str, Mapping[str, Any]]" = OrderedDict()
        #: the final model's .tflite conversion made for the speed check when no guard judged one:
        #: ``-o`` writes these bytes too (not marked judged)
        self.timed_tflite: Optional[Mapping[str, Any]] = None
        self.cpu["judged_as"] = ("the written .tflite, run by LiteRT with its default delegate" if tflite_output
                                 else "this host's onnxruntime int8 kernels" if self.runs_here else
                                 "the exact int8 arithmetic (Q/DQ unfused), as the target computes it")
        self.method = cfg.method or self.scheme.default_method
        get_method(self.method)  # unknown method: fail before any work
        from .executors import get_executor

        self.executor = get_executor(cfg.executor, **dict(cfg.executor_options or {}))
        self.budget = _budget(cfg)
        if self.budget.active and cfg.eval_data is None:
            raise InputError("--max-drop / --min-cosine / --task-metric need held-out data", "pass --eval PATH")
        self.failures: List[str] = []
        self.warnings: List[str] = []
        self.fallback: List[str] = []
        self.latency: Optional[Dict[str, Any]] = None
        self.accuracy_report: Optional[Dict[str, Any]] = None
        self.sensitivity: Optional[List[Dict[str, Any]]] = None
        self.feed: Optional[Dict[str, np.ndarray]] = None
        self.held_out: Any = None                       # the guard's held-out calibration samples
        self.budget_report: Optional[Dict[str, Any]] = None
        self.run_eval: Optional[Callable[..., Dict[str, Any]]] = None
        self.balancing: Optional[Dict[str, Any]] = None     # activation-weight balancing tried (smooth.py)
        self.balanced_layers: Dict[str, str] = {}           # layer -> "int8 (balanced, a=0.5)"
        self.fallback_precision = "float"                   # the fallback layers' precision: float or int16
        self.fallback_why = ""
        self.roles: Dict[str, Any] = {}
        self.margin_aim = False
        #: whether the fallback's layers establish the budget (``cfg.margin``), None where not aimed at
        self.margin_held: Optional[bool] = None

    # -- steps ---------------------------------------------------------------------------------------
    def prepare(self, model: Any) -> None:
        from ..model import Model

        m = model if isinstance(model, Model) else Model.load(model)
        given = m
        m, specialized = self._resolve_control_flow(m)
        #: the FP32 model ``sdk bench`` of the user's file times (None: the written model is for given
        #: input values, so the source is not its FP32 counterpart)
        self.source_fp32 = given if specialized is None else None
        self.prepared, self.notes = _prepare(m, self.cfg.input_shapes, type(self.scheme).hardswish_op)
        if specialized is not None:
            self.notes["specialized"] = specialized
        if self.notes.get("per_tensor_only"):
            self.scheme.per_channel = False  # per-channel DequantizeLinear needs opset 13
            self.warnings.append(f"kept opset {self.notes['opset_in']} ({self.notes['per_tensor_only']}): "
                                 "per-tensor weights")
        if self.notes.get("opset_upgraded_to"):
            to = self.notes["opset_upgraded_to"]
            self.warnings.append(f"opset upgraded from {self.notes['opset_in']} to {to} ("
                                 + _opset_upgrade_why(self.notes['opset_in'], to) + ")")

    def _resolve_control_flow(self, m: Any) -> Tuple[Any, Optional[Dict[str, Any]]]:
        """A model whose weighted ops sit inside If branches that the given input values (and
        shapes) decide is quantized as the model for those values: each decided If replaced by the
        branch it takes, checked against the original as ``sdk convert -o flat.onnx`` checks it
        (:func:`sdk.targets.onnx_flat.specialize_checked`). The valued inputs are then constants
        of the written model. Returns the model to quantize and the record (None: unchanged)."""
        from ..targets.measure import as_values

        cfg = self.cfg
        if m.format != "onnx" or not cfg.input_values:
            return m, None
        hidden = _weighted_ops_in_bodies(m.proto)
        if not hidden:
            return m, None
        from ..targets.onnx_flat import specialize_checked

        values = as_values(cfg.input_values, m.inputs)
        shapes = {k: [int(d) for d in v] for k, v in (cfg.input_shapes or {}).items()}
        spec, check = specialize_checked(m, values, shapes)
        left = _weighted_ops_in_bodies(spec.proto)
        if not spec.resolved or sum(left.values()) >= sum(hidden.values()):
            return m, None
        kept = {i.name for i in spec.proto.graph.input}
        self.cfg = replace(cfg, input_values={k: v for k, v in values.items() if k in kept} or None)
        given = ", ".join(f"{k}={np.asarray(v).tolist()}" for k, v in values.items())
        self.warnings.append(
            f"{len(spec.resolved)} If node(s) decided by {given} were replaced by the branch they take, so their "
            f"{', '.join(sorted(hidden))} can be quantized: the written model is for {given}"
            + (f" and input shapes {', '.join(k + '=' + 'x'.join(map(str, v)) for k, v in shapes.items())}"
               if shapes else "") + " only")
        return m.derive(spec.proto), {"resolved": [r.to_dict() for r in spec.resolved],
                                      "unresolved": [u.to_dict() for u in spec.unresolved],
                                      "values": {k: np.asarray(v).tolist() for k, v in values.items()},
                                      "shapes": shapes, "weighted_ops_in_bodies_before": hidden,
                                      "weighted_ops_in_bodies_after": left, "check": check}

    def calibrate(self, calib: Any) -> None:
        from ..sources import open_source

        from ..targets.measure import as_values

        cfg = self.cfg
        values = as_values(cfg.input_values, self.prepared.inputs)
        self.source = open_source(calib, self.prepared.inputs, cfg.preprocess, limit=cfg.calib_limit,
                                  values=values, sample_axes=cfg.sample_axes)
        if cfg.eval_data is None and cfg.budget and cfg.guard:
            self._hold_out()
        self.stats, self.calib_info = load_or_calibrate(
            self.prepared, self.source, stats_path=cfg.stats_path, use_cache=cfg.use_cache, workers=cfg.workers,
            batch_size=cfg.batch_size, progress=cfg.progress, executor=self.executor,
            save_stats=not self.defer_stats)
        self.skipped = getattr(self.source, "skipped", 0)  # before any later pass over the source resets it
        source_warnings = list(getattr(self.source, "warnings", []))
        source_warnings += list(self.calib_info.get("warnings", []))
        source_warnings += _constant_input_warnings(self.stats, self.prepared.inputs)
        for w in source_warnings[:5]:
            warnings.warn(w, stacklevel=2)
        self.warnings = source_warnings + self.warnings

    def _hold_out(self) -> None:
        """The guard: the calibration data's last part held out for the default budget, or the
        reason it cannot be (one warning line; ``budget.checked`` false; a failure under ``strict``)."""
        from .guard import MIN_HELD_OUT, split

        head, held, why = split(self.source)
        if held is None:
            msg = f"accuracy was not checked: {why}; pass --eval with held-out data"
            self.warnings.append(msg)
            warnings.warn(msg, stacklevel=3)
            self.budget_report = {"checked": False, "why": why, "holds": None}
            if self.cfg.strict:
                self.failures.append(msg)
            return
        self.source, self.held_out = head, held
        self.budget = _budget(self.cfg, held_out=True)
        assert len(held) >= MIN_HELD_OUT

    def plan(self) -> None:
        from .graph import GraphIndex, fold_batchnorm

        self.work, self.bn_folded = self.prepared.proto, 0
        if self.scheme.fold_batchnorm:
            self.work, self.bn_folded = fold_batchnorm(self.work)
        work_idx = GraphIndex(self.work)
        if self.scheme.writes_calibration_cache or self.scheme.exports_ranges or self.cfg.ranges_path is not None:
            wanted = None
        else:
            full = self.scheme.plan(work_idx)
            wanted = set(full.activations) | {t for g in full.shared for t in g}
        self.ranges = _ranges(self.stats, self.method, dict(self.cfg.method_params or {}),
                              self.scheme.activation_symmetric, wanted)
        self.builder = _Builder(self.work, self.scheme, self.stats, self.ranges, self.cfg.bias_correction, work_idx)
        self.qproto, self.qplan, self.qparams = self.builder.build(exclude=self.cfg.exclude)
        wide = _wide_concats(self.qplan, work_idx, self.ranges)
        if wide:  # one output scale for inputs of very different ranges crushes the narrow ones
            self.auto_excluded = wide
            self.cfg = replace(self.cfg, exclude=list(self.cfg.exclude) + wide)
            self.qproto, self.qplan, self.qparams = self.builder.build(exclude=self.cfg.exclude)
        if not self.qplan.layers:
            hidden = _weighted_ops_in_bodies(self.work)
            if hidden:
                raise QuantizationError(
                    f"'{self.prepared.name}' has no op that the {self.scheme.name} scheme quantizes outside "
                    f"control flow: its {', '.join(sorted(hidden))} sit inside If/Loop bodies",
                    "give the values and shapes that decide those Ifs (sdk quantize "
                    f"{self.prepared.name} --input-value NAME=VALUE --input-shape NAME=DIMS ...): the model "
                    "for them is quantized, as sdk convert -o flat.onnx with the same flags writes it")
            weighted = getattr(self.scheme, "WEIGHTED", None) or getattr(self.scheme, "WEIGHTED_OPS", None)
            needs = "/".join(weighted) if weighted else "Conv, Gemm, MatMul or similar"
            raise QuantizationError(f"'{self.prepared.name}' has no op that the {self.scheme.name} scheme quantizes",
                                    f"it needs a {needs} with float weights")
        in_bodies = _weighted_ops_by_body(self.work)
        if in_bodies:   # quantized around them: say which weights stay float, and where
            self.notes["float_in_control_flow"] = in_bodies
            where = "; ".join(f"{', '.join(f'{n} {op}' for op, n in sorted(ops.items()))} in {host}"
                              for host, ops in sorted(in_bodies.items()))
            self.warnings.append(f"weighted ops inside control-flow bodies stay in float ({where}): the quantizer "
                                 "does not enter If/Loop bodies; an If that --input-value decides is replaced by "
                                 "its branch first")
        self.layers_full = len(self.qplan.layers)
        self.all_layers = list(self.qplan.layers)   # the quantizable layers, for the per-layer precision report
        self.weights_full = len(self.qplan.weights)  # coverage before any fallback or speed choice

    def _first_feed(self) -> Dict[str, np.ndarray]:
        if self.feed is None:
            for feed, _ in self.source.samples():
                self.feed = dict(feed)
                break
        if self.feed is None:
            raise QuantizationError("no calibration sample to measure latency on")
        return self.feed

    def speed_plan(self) -> None:
        """Host target only: FP32 and the full INT8 plan timed side by side; unless INT8 is clearly
        faster (:data:`SEARCH_BELOW_SPEEDUP`), the scheme's variants (op types, or convs with few
        MACs per output, kept in float) are timed too and the fastest is kept."""
        from .speed import latencies_ms

        if not self.cfg.speed_check or not self.scheme.host_runtime:
            return
        feed = self._first_feed()
        fp32_ms, all_ms = latencies_ms([self.prepared.proto, self.qproto], feed, rounds=5,
                                       threads=self.cfg.speed_threads)
        self.speed_search: Dict[str, Any] = {"fp32_ms": fp32_ms, "variants": {"all": all_ms}, "chosen": "all"}
        self.measured = (self.qproto, fp32_ms, all_ms)
        if fp32_ms >= all_ms * SEARCH_BELOW_SPEEDUP:
            return
        built = [("all", self.scheme, self.qproto, self.qplan, self.qparams)]
        for label, scheme in self.scheme.speed_variants(self.qplan, self.builder.idx):
            q, p, qp = self.builder.build(exclude=self.cfg.exclude, scheme=scheme)
            if p.layers:
                built.append((label, scheme, q, p, qp))
        # borderline: longer interleaved rounds (a 0.04 s round on a shared 2-core host swings by 20%)
        ms = latencies_ms([self.prepared.proto] + [b[2] for b in built], feed, rounds=9, round_s=0.1,
                          threads=self.cfg.speed_threads)
        best = min(range(len(built)), key=lambda i: ms[i + 1])
        label, scheme, self.qproto, self.qplan, self.qparams = built[best]
        self.builder.scheme = self.scheme = scheme
        self.speed_search = {"fp32_ms": ms[0], "variants": {b[0]: ms[i + 1] for i, b in enumerate(built)},
                             "chosen": label, "int8_ops": sorted(getattr(scheme, "int8_ops", [])),
                             "float_for_speed": sorted(getattr(scheme, "float_layers", []))}
        self.measured = (self.qproto, ms[0], ms[best + 1])

    def accuracy(self) -> None:
        from ..sources import batched
        from .accuracy import add_intervals, aims_at_margin, evaluate, not_established, ort_session

        cfg = self.cfg
        if cfg.eval_data is None and self.held_out is None:
            return
        self.ref_sess = ort_session(self.work)
        eval_src = self.held_out if cfg.eval_data is None else \
            _eval_source(cfg.eval_data, cfg.labels, self.prepared, cfg.preprocess, cfg)
        eb = 8 if _dynamic_batch(self.prepared) and cfg.task_metric is None and not self.tflite_output else 1

        ref_cache: Dict[Optional[int], List[Dict[str, np.ndarray]]] = {}
        metric = cfg.task_metric if callable(cfg.task_metric) else None  # names are resolved in quantize()
        roles = self._roles(eval_src)

        def run_eval(qproto: Any, limit: Optional[int] = None) -> Dict[str, Any]:
            """INT8 against FP32 on the held-out data (its first ``limit`` samples)."""
            samples = eval_src.samples() if limit is None else itertools.islice(eval_src.samples(), limit)
            return evaluate(self.ref_sess, self._candidate_session(qproto),
                            _with_labels(batched(samples, eb), cfg.labels), ref_cache=ref_cache.setdefault(limit, []),
                            task_metric=metric, roles=roles)

        self.run_eval = run_eval
        result = run_eval(self.qproto)
        self.roles = roles or {}
        self.margin_aim = aims_at_margin(cfg.margin, self.budget, result, self.roles)
        needs_fallback = self.budget.active and not self._passes(result, self.margin_aim)
        if cfg.sensitivity or needs_fallback:
            result = self._fallback(eval_src, run_eval, result, needs_fallback)
        add_intervals(result, roles or {})
        self.accuracy_report = result
        holds = self.budget.holds(result) if self.budget.active else None
        self.budget_report = budget_record(self.budget, cfg, self.held_out, result, roles,
                                           _margin(cfg, self.budget, self.margin_aim, self.margin_held))
        weak = not_established(result, cfg.eval_data is not None) if self.budget_report["established"] is False \
            else None
        if weak is not None:
            self.warnings.append(weak)
            warnings.warn(weak, stacklevel=3)
            if cfg.strict:
                self.failures.append(weak)
        if holds is False:
            self.failures.append(f"the accuracy budget ({self.budget.describe()}) does not hold even with "
                                 f"{len(self.fallback)} layers in float")

    def _candidate_session(self, qproto: Any) -> Any:
        """What judges a candidate: the ``.tflite`` it is written as (``-o m.tflite``, run by LiteRT),
        else onnxruntime as the target computes it (this host's kernels, or the exact arithmetic)."""
        from .accuracy import ort_session

        if self.tflite_output:
            from .tflite_model import WrittenTFLite

            key = _proto_digest(qproto)
            written = WrittenTFLite(qproto, self.cfg.tflite_io, self.cfg.input_shapes, self.notes["source_sha256"],
                                    converted=self.converted.pop(key, None))
            self.converted[key] = written.converted          # the newest last; the oldest go past the cap
            while len(self.converted) > 1 and sum(len(c["data"]) for c in self.converted.values()) > _CONVERTED_CAP:
                self.converted.pop(next(iter(self.converted)))
            return written
        return ort_session(qproto, unfused=not self.runs_here)

    def written_tflite(self) -> Optional[Mapping[str, Any]]:
        """The final model's ``.tflite`` conversion as the guard judged it (None: not kept or not made)."""
        return self.converted.get(_proto_digest(self.qproto)) if self.tflite_output and self.converted else None

    def _passes(self, result: Mapping[str, Any], margin: bool) -> bool:
        """The budget holds on ``result``; with ``margin``, its samples also establish it
        (:func:`~.accuracy.established`)."""
        from .accuracy import established

        return self.budget.holds(result) and (not margin or established(result, self.roles))

    def _roles(self, eval_src: Any) -> Dict[str, Any]:
        """Each output's role (:mod:`sdk.quantize.roles`) from FP32's outputs on the first held-out
        samples, the graph's hints (a Log output) and ``--output-role``."""
        from .graph import output_hints
        from .roles import image_size, infer_roles

        names = [o.name for o in self.ref_sess.get_outputs()]
        feeds = [dict(feed) for feed, _ in _take(eval_src.samples(), 4)]
        ref = [dict(zip(names, self.ref_sess.run(names, feed))) for feed in feeds]
        return infer_roles(names, ref, output_hints(self.work), self.cfg.output_roles,
                           image_size(feeds[0]) if feeds else None)

    def _fallback(self, eval_src: Any, run_eval: Callable[..., Dict[str, Any]], result: Dict[str, Any],
                  needs_fallback: bool) -> Dict[str, Any]:
        """Rank the layers, then search the shortest prefix that holds the budget: first on the first
        ``search_samples`` held-out samples, then confirmed on all of them (continuing the search on
        all of them only when the confirmation fails). Writing a ``.tflite``, the layers go to 16x8
        first where :func:`~.tflite_model.fallback_steps` says so, float when 16x8 cannot hold it."""
        from .accuracy import ort_session
        from .fallback import rank_layers

        feeds = [f for f, _ in _take(eval_src.samples(), self.cfg.sensitivity_samples)]
        layers = list(self.qplan.layers)

        def only_int8(keep: Sequence[str]) -> Any:
            kept = set(keep)
            return self.builder.build(exclude=list(self.cfg.exclude) + [x for x in layers if x not in kept])[0]

        rows = rank_layers(self.work, self.qproto, layers, feeds,
                           functools.partial(ort_session, unfused=not self.runs_here), only_int8)
        self.sensitivity = rows
        if not needs_fallback:
            return result
        order = [r["layer"] for r in rows]
        from .tflite_model import fallback_steps, sixteen_did_not_hold

        steps: Tuple[str, ...] = ("float",)
        if self.tflite_output:          # a .tflite: 16x8 before float where the file is integer-only
            steps, self.fallback_why = fallback_steps(self.cfg)
        for kind in steps:
            held, res = self._search(order, kind, run_eval, result)
            if held or kind == steps[-1]:
                return res
            self.fallback_why += sixteen_did_not_hold(len(order), self.cfg.max_fallback)
        return result     # pragma: no cover (the last step returns)

    def _search(self, order: Sequence[str], kind: str, run_eval: Callable[..., Dict[str, Any]],
                result: Dict[str, Any]) -> Tuple[bool, Dict[str, Any]]:
        """The shortest prefix of ``order`` that holds the budget with those layers in ``kind`` (float, or
        int16: 16x8): ``(held, evaluation)``; the run takes the prefix unless 16x8 did not hold."""
        from .fallback import search_fallback, widen_to_margin

        built: Dict[int, Tuple[Any, Any, Any]] = {}

        def build(k: int) -> Tuple[Any, Any, Any]:
            if k not in built and kind == "int16":
                built[k] = self.builder.build(exclude=self.cfg.exclude, scheme=self.scheme.with_int16(order[:k]))
            elif k not in built:
                built[k] = self.builder.build(exclude=list(self.cfg.exclude) + list(order[:k]))
            return built[k]

        def holds_on(limit: Optional[int], margin: bool = False) -> Callable[[Sequence[str]], Tuple[bool, Dict[str, Any]]]:
            def holds(prefix: Sequence[str]) -> Tuple[bool, Dict[str, Any]]:
                q = build(len(prefix))
                res = run_eval(q[0], limit)
                return (True if not q[1].layers else self._passes(res, margin)), res
            return holds

        subset = self.cfg.search_samples
        evals = 0
        start = 0
        confirmed: Optional[Tuple[List[str], Dict[str, Any]]] = None
        if self.budget.holds(result):   # only the margin is missing (``margin_aim``)
            confirmed = [], result
        elif subset is not None and result["samples"] > subset:
            prefix, _, ok, evals = search_fallback(order, holds_on(subset), self.cfg.max_fallback)
            if ok:  # confirm on all the held-out data
                ok, res = holds_on(None)(prefix)
                evals += 1
                if ok:
                    confirmed = list(prefix), res
                start = len(prefix)
        if confirmed is None:
            prefix, res, ok, more = search_fallback(order, holds_on(None), self.cfg.max_fallback, start=start)
            evals += more
            if kind == "int16" and not ok:
                return False, result
        else:
            (prefix, res), ok = confirmed, True
        if ok and self.margin_aim:   # on to the fewest layers whose samples establish it
            prefix, res, self.margin_held, more = widen_to_margin(
                order, prefix, res, self._passes(res, True), holds_on(None, True), self.cfg.max_fallback)
            evals += more
        return ok, (self._take_fallback(prefix, res, built, evals, kind) if prefix else result)

    def _take_fallback(self, prefix: Sequence[str], res: Dict[str, Any], built: Dict[int, Tuple[Any, Any, Any]],
                       evals: int, kind: str = "float") -> Dict[str, Any]:
        self.fallback_evaluations = evals
        self.qproto, self.qplan, self.qparams = built[len(prefix)]
        self.fallback = list(prefix)
        self.fallback_precision = kind
        return self._balance_before_float(res) if kind == "float" else res

    def _balance_before_float(self, res: Dict[str, Any]) -> Dict[str, Any]:
        """Float is the last resort for a MatMul/Gemm fed by a LayerNorm: the fallback's float layers
        that read a balanceable LayerNorm (:mod:`sdk.quantize.smooth`) are tried in INT8 with the
        activation-weight balancing, all of them first, then the least sensitive ones (bisected), on
        all the held-out data; those for which the budget holds stay INT8, balanced."""
        from .smooth import ALPHA, balance, balance_sites, describe, ranges_with

        run_eval = self.run_eval
        if not self.fallback or run_eval is None or not self.cfg.balance:
            return res
        in_float = set(self.fallback)
        sites = [s for s in balance_sites(self.work) if in_float & set(s.consumers)]
        if not sites:
            return res
        bal = balance(self.work, sites, self.stats, ALPHA)
        info: Dict[str, Any] = {"alpha": ALPHA, "sites": {}, "skipped": dict(bal.skipped), "evaluations": 0}
        self.balancing = info
        if not bal.sites:
            return res
        bal_ranges = ranges_with(self.ranges, bal)
        builder = _Builder(bal.proto, self.scheme, bal.stats, bal_ranges, self.cfg.bias_correction)
        consumer_site = {c: s for s in bal.sites for c in s.consumers}
        candidates = [x for x in self.fallback if x in consumer_site]    # most sensitive first
        tried: Dict[int, Tuple[bool, Dict[str, Any], Tuple[Any, Any, Any]]] = {}

        def attempt(m: int) -> bool:      # the m least sensitive candidates back in INT8, balanced
            if m not in tried:
                rescued = set(candidates[len(candidates) - m:])
                floats = [x for x in self.fallback if x not in rescued]
                q = builder.build(exclude=list(self.cfg.exclude) + floats)
                r = run_eval(q[0])
                tried[m] = (self._passes(r, bool(self.margin_held)), r, q)
                info["evaluations"] += 1
            return tried[m][0]

        lo, hi = 0, len(candidates)      # lo: known to hold (the search's result); find the largest m
        if not attempt(hi):
            hi -= 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if attempt(mid):
                    lo = mid
                else:
                    hi = mid - 1
            best = lo
        else:
            best = hi
        for site in bal.sites:
            info["sites"][site.tensor] = {"form": site.form, "consumers": list(site.consumers),
                                                    "scale_max": round(float(bal.scales[site.tensor].max()), 4),
                                                    "scale_min": round(float(bal.scales[site.tensor].min()), 4)}
        if best == 0:
            info["result"] = "balancing did not hold the budget: those layers stay in float"
            return res
        rescued = candidates[len(candidates) - best:]
        ok, r, q = tried[best]
        self.qproto, self.qplan, self.qparams = q
        self.builder, self.work, self.ranges = builder, bal.proto, bal_ranges   # what extras() exports
        self.fallback = [x for x in self.fallback if x not in set(rescued)]
        self.balanced_layers = {x: describe(consumer_site[x], ALPHA) for x in rescued}
        info["result"] = f"{len(rescued)} of {len(candidates)} layers back in INT8, balanced"
        return r

    def finish_latency(self) -> None:
        from .speed import GRAPH_OPTIMIZATION, PROVIDER, SLOWER_TOLERANCE, bench_command, latency_rounds, paired_speedup, speedup_interval

        if not self.qplan.layers:
            self.failures.append("nothing is quantized: every layer is kept in float"
                                 + (" to hold the accuracy budget" if self.fallback else ""))
        if self.cfg.speed_check and self.tflite_output:
            self._finish_latency_tflite()
            return
        if not self.cfg.speed_check or not self.scheme.host_runtime:
            return
        # the written model timed against FP32 once more, interleaved, as `sdk bench` opens them (same
        # provider, session options, threads, shapes): the figures the report and the verdict give
        threads = self.cfg.speed_threads
        fp32, fp32_is, rewritten = self._fp32_as_benched(threads)
        timed = [fp32, self.qproto] + ([self.prepared.proto] if rewritten else [])
        rounds = latency_rounds(timed, self._first_feed(), rounds=9, round_s=0.1, threads=threads)
        fp32_ms, int8_ms = float(np.median(rounds[0])), float(np.median(rounds[1]))
        speedup = paired_speedup(rounds)     # the verdict's figure: each round's ratio, then the median
        search = getattr(self, "speed_search", None)
        shapes = {k: list(v.shape) for k, v in self._first_feed().items()}
        self.latency = {"runtime": "onnxruntime CPU (this host)", "provider": PROVIDER,
                        "graph_optimization": GRAPH_OPTIMIZATION,
                        "threads": threads if threads else f"onnxruntime default ({os.cpu_count()} logical cores)",
                        "input_shapes": shapes, "rounds": len(rounds[0]), "fp32_model": fp32_is,
                        "fp32_ms": round(fp32_ms, 3), "int8_ms": round(int8_ms, 3),
                        "speedup": round(speedup, 3) if speedup else None,
                        "speedup_ci95": speedup_interval(rounds),
                        "bench_command": bench_command("MODEL.onnx", threads, shapes),
                        "search": search}
        if rewritten:        # what INT8 adds over the quantizer's exact float rewrites alone
            vs = paired_speedup([rounds[2], rounds[1]])
            rewritten_ms = float(np.median(rounds[2]))
            self.latency.update({"rewritten_fp32_ms": round(rewritten_ms, 3),
                                 "speedup_vs_rewritten_fp32": round(vs, 3) if vs else None,
                                 "float_rewrites": rewritten})
            if self.qplan.layers and vs and vs * (1.0 + SLOWER_TOLERANCE) < 1.0:
                self.warnings.append(
                    f"INT8 is slower on this host than the FP32 graph after the exact float rewrites ({int8_ms:.2f} vs "
                    f"{rewritten_ms:.2f} ms; {rewritten}): the speed-up over the model as given "
                    f"({fp32_ms:.2f} ms) is the rewrites'; that float graph: sdk convert MODEL.onnx -o fp32.onnx "
                    "--option float_rewrites=true" + (" --input-shape ..." if self.cfg.input_shapes else ""))
        if self.qplan.layers and speedup and speedup * (1.0 + SLOWER_TOLERANCE) < 1.0 and not self.cfg.allow_slower:
            self.failures.append(f"the INT8 model is slower than FP32 on this host ({int8_ms:.2f} vs {fp32_ms:.2f} ms)"
                                 "; pass --allow-slower to accept it")

    def _fp32_as_benched(self, threads: Optional[int]) -> Tuple[Any, str, Optional[str]]:
        """The FP32 side of the final timing: the user's model as given, opened as ``sdk bench`` opens
        it (so the speedup is the one bench reads of the two files), with what the quantizer's exact
        float rewrites changed (None: nothing that runs differently); the prepared FP32 where the
        source is not the written model's counterpart (input values decided an If) or does not open."""
        from ..errors import first_line
        from .speed import session

        src = self.source_fp32
        if src is None:
            return self.prepared.proto, "the prepared FP32 graph (the written model is for the given input values)", None
        try:
            sess = session(src.proto, threads)
        except Exception as exc:    # noqa: BLE001 - the runtime's own error, said in the report
            return (self.prepared.proto,
                    f"the prepared FP32 graph (the source does not open in onnxruntime: {first_line(exc)})", None)
        notes, cfg = self.notes, self.cfg
        changed = [f"{k} x{v}" for k, v in (notes.get("float_rewrites") or {}).items()]
        changed += [f"opset {notes['opset_in']} -> {notes['opset_upgraded_to']}"] if notes.get("opset_upgraded_to") else []
        changed += ["input shapes fixed"] if cfg.input_shapes and not notes.get("input_shapes_not_fixed") else []
        return sess, "the source model as given (as sdk bench opens it)", "; ".join(changed) or None

    def _finish_latency_tflite(self) -> None:
        """``-o m.tflite`` (float I/O): the file written timed against the float ``.tflite`` the
        converter makes of the prepared FP32 graph, on this host's LiteRT as ``sdk bench --target
        tflite`` runs them; slower is a failure unless ``allow_slower``, as for a float ``.tflite``
        source (:func:`~.tflite_model.speed_check`). Integer I/O files (Edge TPU, microcontrollers)
        are not timed here."""
        from ..model import Model
        from ..targets.tflite.convert import onnx_to_tflite_bytes
        from .tflite_model import file_feed, speed_check

        if not self.qplan.layers or self.cfg.tflite_io != "float":
            return
        written = self.written_tflite()
        if written is None:
            written = self.timed_tflite = onnx_to_tflite_bytes(
                self.qproto, self.cfg.input_shapes, int8_io=self.cfg.tflite_io, all_float_ok=True,
                source_sha256=self.notes["source_sha256"])
        floats = onnx_to_tflite_bytes(self.prepared.proto, self.cfg.input_shapes)["data"]
        self.latency = speed_check(self.cfg, Model(data=floats, format="tflite"), written["data"],
                                   file_feed(floats, self._first_feed()), self.failures)

    # -- results -------------------------------------------------------------------------------------
    def result(self, elapsed_s: float) -> QuantizeResult:
        cfg, stats, plan = self.cfg, self.stats, self.qplan
        report: Dict[str, Any] = {
            "model": {"path": str(self.prepared.origin) if self.prepared.origin else None,
                      "sha256": self.notes["source_sha256"], "opset_in": self.notes["opset_in"],
                      "opset_upgraded_to": self.notes.get("opset_upgraded_to"),
                      "batchnorm_folded": self.bn_folded, "constants_folded": self.notes.get("constants_folded", 0),
                      "float_rewrites": self.notes.get("float_rewrites", {}),
                      "specialized": self.notes.get("specialized"),
                      "float_in_control_flow": self.notes.get("float_in_control_flow") or {}},
            "target": self.scheme.name,
            "scheme": self.scheme.options(),
            "cpu": {k: v for k, v in self.cpu.items() if k != "flags"},
            "method": {"name": self.method, "params": dict(cfg.method_params or {})},
            "calibration": {"samples": stats.samples, "time_s": round(self.calib_info["time_s"], 3),
                            "reused_statistics": self.calib_info["reused"], "tensors": len(stats.tensors),
                            "skipped": self.skipped,
                            "workers": stats.meta.get("workers"), "batch_size": stats.meta.get("batch_size"),
                            "executor": stats.meta.get("executor", "threads")},
            "layers": {"quantized": len(plan.layers), "quantizable": self.layers_full,
                       "activations_with_qdq": len(plan.activations), "weights": len(plan.weights),
                       "weights_planned": self.weights_full, "weights_total": _weight_total(self.work),
                       "int32_biases": len(plan.biases)},
            "bias_correction": {"enabled": cfg.bias_correction, "corrected_layers": self.builder.corrected},
            "warnings": self.warnings,
            "accuracy": self.accuracy_report,
            "sensitivity": self.sensitivity,
            "fallback_layers": self.fallback,
            "fallback": {"precision": self.fallback_precision if self.fallback else None,
                         "why": self.fallback_why or None},
            "layer_precision": self.layer_precision(),
            "latency": self.latency,
            "failures": self.failures,
            "time_s": round(elapsed_s, 3),
        }
        if self.balancing is not None:
            report["balancing"] = self.balancing
        if self.budget_report is not None:
            report["budget"] = self.budget_report
            if self.fallback:
                report["fallback_evaluations"] = getattr(self, "fallback_evaluations", None)
        from .qdq import check_quantized

        check_quantized(self.qproto)
        return QuantizeResult(self.prepared.derive(self.qproto), report, stats, self.ranges, plan, self.qparams,
                              self.scheme, failures=list(self.failures))

    def layer_precision(self) -> Dict[str, Dict[str, str]]:
        """Each layer the scheme can quantize: ``{"precision", "why"}`` as the run left it."""
        int8 = set(self.qplan.layers)
        user = set(self.cfg.exclude) - set(getattr(self, "auto_excluded", []))
        wide = set(getattr(self, "auto_excluded", []))
        ops = {n.name: n.op_type for n in self.work.graph.node}
        int8_ops = getattr(self.scheme, "int8_ops", None)
        speed = set(getattr(self.scheme, "float_layers", ())) | \
            {x for x in self.all_layers if int8_ops and ops.get(x) not in int8_ops}
        tried = {c for s in (self.balancing or {}).get("sites", {}).values() for c in s["consumers"]}
        out: Dict[str, Dict[str, str]] = {}
        for layer in self.all_layers:
            if layer in self.balanced_layers:
                out[layer] = {"precision": self.balanced_layers[layer],
                              "why": "in float the budget held; balanced INT8 holds it too"}
            elif layer in self.fallback and self.fallback_precision == "int16":
                sixteen = ops.get(layer) not in getattr(self.scheme, "NO_INT16", ())
                out[layer] = {"precision": "16x8" if sixteen else "float",
                              "why": f"accuracy budget (sensitivity fallback): {self.fallback_why}"
                              + ("" if sixteen else f"; TFLite has no 16x8 {ops.get(layer)}")}
            elif layer in int8:
                out[layer] = {"precision": "int8", "why": "within the budget"}
            elif layer in self.fallback:
                out[layer] = {"precision": "float", "why": "accuracy budget (sensitivity fallback)"
                              + ("; balanced INT8 did not hold it" if layer in tried else "")}
            elif layer in user:
                out[layer] = {"precision": "float", "why": "excluded (--exclude)"}
            elif layer in wide:
                out[layer] = {"precision": "float", "why": f"a Concat of inputs whose ranges differ more than "
                                                           f"{CONCAT_RANGE_RATIO:g}x"}
            elif layer in speed:
                out[layer] = {"precision": "float", "why": "faster in float on this host (speed check)"}
            else:
                out[layer] = {"precision": "float", "why": "the scheme quantizes it only next to int8 layers, and "
                                                           "its neighbours are in float"}
        return out

    def extras(self) -> Dict[str, Any]:
        extras: Dict[str, Any] = {}
        written = self.written_tflite()
        if written is not None or self.timed_tflite is not None:
            extras["tflite_converted"] = written if written is not None else self.timed_tflite
            extras["tflite_judged"] = written is not None
        if self.scheme.writes_calibration_cache:
            extras["trt_scales"] = {n: max(abs(r[0]), abs(r[1])) / 127.0 for n, r in self.ranges.items()}
        if self.scheme.exports_ranges or self.cfg.ranges_path is not None:
            from .qdq import export_ranges

            extras["ranges"] = export_ranges(self.qplan, self.ranges, self.qparams, self.builder.proto, self.scheme,
                                             all_ranges=self.ranges)
        return extras


#: how many bytes of candidate .tflite conversions a run keeps to write the final one as judged
_CONVERTED_CAP = 256 << 20


def _proto_digest(proto: Any) -> str:
    """The sha256 of a ModelProto's deterministic serialization."""
    return hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()


def _target_cpu(cfg: QuantizeConfig) -> Dict[str, Any]:
    """The CPU the model is for: ``{"arch", "flags", "source"}`` (this host unless the
    config names one)."""
    from ..hostinfo import cpu_flags

    if cfg.cpu_arch is None and cfg.cpu_flags is None:
        arch, flags = cpu_flags()
        source = "this host (/proc/cpuinfo)"
    else:
        host_arch, _ = cpu_flags()
        arch, flags = (cfg.cpu_arch or host_arch).lower(), frozenset(cfg.cpu_flags or ())
        source = cfg.cpu_source or "given"
    return {"arch": arch, "flags": sorted(flags), "source": source}


def budget_record(budget: Any, cfg: QuantizeConfig, held_out: Any, result: Mapping[str, Any],
                  roles: Mapping[str, Any], margin: Optional[str] = None) -> Dict[str, Any]:
    """``report.budget`` of a checked run (ONNX and TFLite alike): the bounds, whether they are the
    defaults, what they were checked on, each output's role, whether the budget holds and what the
    fallback aimed at (``margin``: :func:`_margin`)."""
    return {"max_drop": budget.max_drop, "min_cosine": budget.min_cosine, "min_task_metric": budget.min_task_metric,
            "min_top1_agreement": budget.min_top1_agreement,
            "default": cfg.max_drop is None and cfg.min_cosine is None and cfg.min_task_metric is None,
            "checked": True, "checked_on": _checked_on(held_out, result["samples"]), "by_role": budget.by_role,
            "roles": {k: r.describe() for k, r in roles.items()},
            "holds": budget.holds(result) if budget.active else None,
            "established": _established(budget, result), "fallback_aim": margin}


def _margin(cfg: QuantizeConfig, budget: Any, aimed: bool, held: Optional[bool]) -> Optional[str]:
    """What the fallback aimed at, in words (``report.budget.fallback_aim``); None without a budget."""
    if not budget.active:
        return None
    if not aimed:
        why = ("margin off" if not cfg.margin else "outputs judged by cosine" if not budget.by_role else
               "FP32 against itself shows these samples are too few to establish the bound")
        return f"the score on the samples ({why})"
    if held is False:
        return ("a margin (each role's interval above its bound), not reached: the fewest layers that "
                "hold the score on the samples")
    return "a margin: each role's interval on the samples keeps its bound, not only its score"


def _established(budget: Any, result: Mapping[str, Any]) -> Optional[bool]:
    """Whether the samples establish a holding budget: the low end of every role-judged output's
    interval (``accuracy.add_intervals``) keeps its bound; None when not judged by role or not held."""
    rows = [o for o in result["outputs"].values() if "role_established" in o]
    if not (budget.active and budget.by_role and rows and budget.holds(result)):
        return None
    return all(o["role_established"] for o in rows)


def _checked_on(held_out: Any, samples: int) -> str:
    if held_out is None:
        return f"{samples} --eval samples"
    return f"{samples} held-out calibration samples ({held_out.how}, never used for ranges)"


def _budget(cfg: QuantizeConfig, held_out: bool = False) -> Any:
    """The budget asked for; with held-out data and none asked for, the default: every float output's
    cosine >= :data:`DEFAULT_MIN_COSINE` and, for a classifier (or a recognizer's per-position class
    distributions), top-1 agreement >= :data:`DEFAULT_MIN_TOP1`."""
    from .accuracy import Budget

    min_cos, min_task, min_top1 = cfg.min_cosine, cfg.min_task_metric, None
    if cfg.task_metric is not None and min_task is None and cfg.budget:
        min_task = DEFAULT_MIN_TASK_METRIC
    by_role = False
    if (cfg.eval_data is not None or held_out) and cfg.budget and cfg.max_drop is None and min_cos is None \
            and min_task is None:
        min_cos, min_top1, by_role = DEFAULT_MIN_COSINE, DEFAULT_MIN_TOP1, True
    return Budget(cfg.max_drop, min_cos, min_task, min_top1, by_role)


#: a Concat whose inputs' ranges differ more than this stays float (its one output scale would crush
#: the narrow inputs: e.g. box coordinates next to class logits in a detection head)
CONCAT_RANGE_RATIO = 8.0


#: ops whose float weights a scheme quantizes (to name them when they sit where it does not look)
_WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN")


def _weighted_ops_in_bodies(proto: Any) -> Dict[str, int]:
    """``{op: count}`` of weighted ops inside If/Loop/Scan bodies (at any depth) of ``proto``."""
    from collections import Counter

    from ..formats.onnx import iter_nodes
    from ..formats.onnx_control import subgraphs

    return dict(Counter(n.op_type for top in proto.graph.node for body in subgraphs(top)
                        for n in iter_nodes(body) if n.op_type in _WEIGHTED_OPS))


def _weighted_ops_by_body(proto: Any) -> Dict[str, Dict[str, int]]:
    """``{"Loop 'p2o.Loop.0'": {"MatMul": 10}}``: the weighted ops of each top-level If/Loop/Scan's bodies."""
    from collections import Counter

    from ..formats.onnx import iter_nodes
    from ..formats.onnx_control import subgraphs

    out: Dict[str, Dict[str, int]] = {}
    for top in proto.graph.node:
        ops = Counter(n.op_type for body in subgraphs(top) for n in iter_nodes(body) if n.op_type in _WEIGHTED_OPS)
        if ops:
            out[f"{top.op_type} '{top.name or top.output[0]}'"] = dict(ops)
    return out


def _wide_concats(plan: QuantPlan, idx: Any, ranges: Mapping[str, Tuple[float, float]]) -> List[str]:
    by_name = {n.name: n for n in idx.graph.node}
    out = []
    for layer in plan.layers:
        node = by_name.get(layer)
        if node is None or node.op_type != "Concat" or node.name in plan.fixed:
            continue
        widths = [ranges[i][1] - ranges[i][0] for i in node.input if i in ranges]
        if len(widths) > 1 and min(widths) > 0 and max(widths) / min(widths) > CONCAT_RANGE_RATIO:
            out.append(node.name)
    return out


def _take(it: Iterable[Any], n: int) -> List[Any]:
    out = []
    for x in it:
        out.append(x)
        if len(out) >= n:
            break
    return out


def _weight_total(proto: Any) -> int:
    """Float weights of Conv/ConvTranspose/MatMul/Gemm (initializers on input 1)."""
    inits = {t.name: t for t in proto.graph.initializer}
    return sum(1 for n in proto.graph.node if n.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm")
               and len(n.input) > 1 and n.input[1] in inits and inits[n.input[1]].data_type == 1)


def _dynamic_batch(model: Any) -> bool:
    return all(s.shape and not (isinstance(s.shape[0], int) and s.shape[0] > 0) for s in model.inputs)


def _eval_source(eval_data: Any, labels: Any, model: Any, preprocess: Any = None, cfg: Any = None):
    from ..sources import open_source
    from ..targets.measure import as_values

    values = as_values(getattr(cfg, "input_values", None), model.inputs)
    return open_source(eval_data, model.inputs, preprocess, values=values,
                       sample_axes=getattr(cfg, "sample_axes", None))


def _with_labels(batches, labels: Any):
    """Attach labels from a separate ``.npy``/array (in sample order) when given."""
    if labels is None:
        yield from batches
        return
    if isinstance(labels, (str, os.PathLike)):
        from ..sources import check_array_file

        check_array_file(labels)
        y = np.load(labels, allow_pickle=False)
    else:
        y = np.asarray(labels)
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


def _check_tflite_output(cfg: QuantizeConfig) -> None:
    if cfg.scheme != "tflite":
        raise InputError(f"-o *.tflite writes a TFLite model, but --target is {cfg.scheme}", "add --target tflite")
    if cfg.tflite_io not in ("float", "int8"):
        raise InputError(f"--io {cfg.tflite_io!r}", "use --io float or --io int8")
    from .tflite_model import fallback_steps

    fallback_steps(cfg)     # a bad --fallback-precision: one line, before any work


@contextmanager
def _folder_locks(paths: Iterable[Path]) -> Iterator[None]:
    """Exclusive ``flock`` on the folders of ``paths`` (sorted: two runs never deadlock), held while
    a run writes its set of files: another run writing the same ``-o``/``--stats`` waits, so the
    files on disk always come from one run (nothing is left behind: no lock file)."""
    import fcntl

    fds = []
    try:
        for folder in sorted({str(Path(p).resolve().parent) for p in paths}):
            Path(folder).mkdir(parents=True, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)        # closing releases the lock


def _write_outputs(res: QuantizeResult, extras: Dict[str, Any], output: Path, report_path, trt_cache, trt_version,
                   ranges_path, stats: Optional[Tuple[CalibrationStats, Path]] = None,
                   stats_file: Optional[Dict[str, Any]] = None, cfg: Optional[QuantizeConfig] = None) -> None:
    """Every output of one run, written as a set under one lock: the statistics (when computed by
    this run), the model, the TensorRT cache, the ranges, the report (which names the statistics
    file it used, with its sha256)."""
    paths = [output] + ([stats[1]] if stats else []) + ([Path(report_path)] if report_path else [])
    with _folder_locks(paths):
        if stats is not None:
            from ..digest import file_sha256

            _save_stats(stats[0], stats[1], None)
            stats_file = {"path": str(stats[1]), "sha256": file_sha256(stats[1])}
        if stats_file is not None:
            res.report.setdefault("calibration", {})["statistics_file"] = stats_file
        _write_outputs_locked(res, extras, output, report_path, trt_cache, trt_version, ranges_path, cfg)


def _write_outputs_locked(res: QuantizeResult, extras: Dict[str, Any], output: Path, report_path, trt_cache,
                          trt_version, ranges_path, cfg: Optional[QuantizeConfig] = None) -> None:
    from .trtcache import DEFAULT_TRT_VERSION, write_cache

    if output.suffix.lower() == ".tflite":
        from ..targets.tflite.convert import write_qdq_tflite

        c = cfg or QuantizeConfig(scheme="tflite")
        res.report["tflite"] = write_qdq_tflite(res.model.proto, output, io=c.tflite_io,
                                                input_shapes=c.input_shapes, source_sha256=res.report.get(
                                                    "model", {}).get("sha256", ""),
                                                converted=extras.get("tflite_converted"))
        res.report["tflite"]["judged"] = bool(extras.get("tflite_judged"))   # these bytes are the ones the guard ran
        from ..model import Model

        saved = Model.load(output)
    else:
        saved = res.model.save(output)
    res.model = saved
    res.extras["model"] = str(output)
    res.extras["model_sha256"] = saved.sha256
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
