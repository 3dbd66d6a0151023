"""``quantize()`` on a float ``.tflite`` model: the TFLite format adapter of the one quantizer core.

The adapter says what the tensors are (:func:`sdk.targets.tflite.reader.read_tflite`: every float
activation of the primary subgraph, float16 weights folded to float32), runs the model with every
intermediate readable (LiteRT's interpreter with ``experimental_preserve_all_tensors``, builtin
kernels), and writes the result (the same int8 pass that writes converted ONNX models:
:func:`sdk.targets.tflite.int8.quantize_graph`). The statistics (:class:`~.stats.CalibrationStats`,
streamed), the calibration methods (:mod:`.methods`, ``auto`` included) and the default budget
(cosine 0.99 vs the float model on held-out data, or the task metric) are the core's.

Without ``--eval`` the core's guard holds out the last calibration samples (:mod:`.guard`), and the
budget reads each output by its role (:mod:`.roles`), as on the ONNX path. The float fallback goes
through the core's doubling/bisecting :func:`~.fallback.search_fallback`, layers ranked by
:func:`rank_layers` (each quantized alone, measured at the outputs). Not done for TFLite input yet
(the ONNX path has them): the 16x8 fallback step and a speed-aware plan (bias correction is done,
and the speed is checked side by side, not searched). A budget that does not hold is reported as a
failure; the model is still written.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError, QuantizationError

__all__ = ["TFLiteAdapter", "WrittenTFLite", "quantize_tflite", "is_tflite", "speed_check", "file_feed"]


def is_tflite(model: Any) -> bool:
    from ..model import Model

    if isinstance(model, Model):
        return model.format == "tflite"
    return isinstance(model, (str, Path)) and str(model).lower().endswith(".tflite")


class TFLiteAdapter:
    """A float ``.tflite`` as the quantizer sees it: activation tensors, a run with intermediates,
    and the writer of the full-integer result."""

    def __init__(self, data: bytes):
        from ..targets.tflite.reader import read_tflite
        from ..targets.tflite.tflgraph import write_flatbuffer

        self.graph, self.info = read_tflite(data)
        self.float_bytes = write_flatbuffer(self.graph, description="edgesdk float (weights float32)")
        self._half = {t.name for t in self.graph.tensors if t.half}
        self._interp: Any = None
        #: input tensor -> per-channel calibration mean: the bias correction of every :meth:`write`
        self.channel_means: Dict[str, np.ndarray] = {}
        #: op outputs every :meth:`write` keeps float (``--exclude``)
        self.kept_float: FrozenSet[str] = frozenset()

    def keep_float(self, names: Sequence[str]) -> None:
        """Keep the ops writing ``names`` in float in every model written (``--exclude``: a layer is
        named by its output tensor, as in ``report.layer_precision``)."""
        ops = {self.graph.tensors[o].name for op in self.graph.ops for o in op.outputs}
        bad = [n for n in names if n not in ops]
        if bad:
            raise InputError(f"--exclude {bad[0]!r} names no op output of this .tflite",
                             "name a layer by its output tensor, as report.layer_precision lists them "
                             f"(e.g. {sorted(ops)[0]!r})")
        self.kept_float = frozenset(names)

    def activations(self) -> List[str]:
        """The float activation tensors (the calibrated ones), graph inputs included."""
        return [t.name for t in self.graph.tensors if t.data is None and t.dtype == "float32"]

    def _interpreter(self) -> Any:
        if self._interp is None:
            from ..formats.tflite import load_runtime, quiet_native_info

            rt = load_runtime()
            with quiet_native_info():
                it = rt.Interpreter(model_content=self.float_bytes, experimental_preserve_all_tensors=True,
                                    **rt.resolver_kwargs(False))
                it.allocate_tensors()
            self._interp = it
            self._index = {t["name"]: int(t["index"]) for t in it.get_tensor_details()}
        return self._interp

    def run(self, feed: Mapping[str, np.ndarray], names: Optional[List[str]] = None) -> Dict[str, np.ndarray]:
        """One sample (batch 1) through the float model: ``names`` (default: every activation)."""
        it = self._interpreter()
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.asarray(feed[d["name"]], d["dtype"]))
        it.invoke()
        wanted = names if names is not None else self.activations()
        return {n: it.get_tensor(self._index[n]) for n in wanted}

    def outputs(self) -> List[str]:
        return [self.graph.tensors[i].name for i in self.graph.outputs]

    def weighted_inputs(self) -> List[str]:
        """The activations CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED read: their per-channel
        means feed the bias correction."""
        g = self.graph
        return sorted({g.tensors[op.inputs[0]].name for op in g.ops
                       if op.code in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED") and op.inputs
                       and g.tensors[op.inputs[0]].data is None})

    def write(self, qparams: Mapping[str, Tuple[float, int]], io: str, exclude: Any = (),
              int16: Any = ()) -> Tuple[bytes, Dict[str, Any]]:
        """The full-integer model with these activation scales/zero points; the ops writing the
        tensors in ``exclude`` stay float, those in ``int16`` run 16x8 (the fallback's two steps);
        biases corrected by :attr:`channel_means` when set. The adapter's graph is left as it was."""
        from ..targets.tflite.int8 import quantize_graph
        from ..targets.tflite.reader import read_tflite
        from ..targets.tflite.tflgraph import write_flatbuffer

        graph, _ = read_tflite(self.float_bytes)
        for t in graph.tensors:      # float16 in the source (float_bytes holds the float32 copy)
            t.half = t.name in self._half
        lw = SimpleNamespace(g=graph, qparams=dict(qparams), channel_means=dict(self.channel_means))
        info = quantize_graph(lw, io=io, exclude=set(exclude) | self.kept_float, int16=set(int16) - self.kept_float)
        return write_flatbuffer(graph, description="edgesdk int8"), info


def _rows(feed: Mapping[str, np.ndarray]) -> Iterator[Dict[str, np.ndarray]]:
    n = min(int(np.shape(v)[0]) if np.ndim(v) else 1 for v in feed.values())
    for i in range(n):
        yield {k: np.asarray(v)[i:i + 1] for k, v in feed.items()}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _int8_interpreter(data: bytes) -> Any:
    """An allocated LiteRT interpreter (default delegate) of the INT8 ``data``, built once per model."""
    from ..formats.tflite import load_runtime, quiet_native_info

    rt = load_runtime()
    with quiet_native_info():
        it = rt.Interpreter(model_content=data, **rt.resolver_kwargs(True))
        it.allocate_tensors()
    return it


def _run_int8(it: Any, feed: Mapping[str, np.ndarray]) -> List[np.ndarray]:
    """One sample through the INT8 interpreter ``it``: float in, float out (int8 ends converted)."""
    for d in it.get_input_details():
        x = np.asarray(feed[d["name"]], np.float32)
        if d["dtype"] == np.int8:
            s, z = d["quantization"]
            x = np.clip(np.round(x / s + z), -128, 127)
        it.set_tensor(d["index"], x.astype(d["dtype"]))
    it.invoke()
    out = []
    for d in it.get_output_details():
        y = it.get_tensor(d["index"]).astype(np.float32)
        if d["dtype"] == np.int8:
            s, z = d["quantization"]
            y = (y - z) * s
        out.append(y)
    return out


class WrittenTFLite:
    """The ``.tflite`` that ``-o m.tflite`` writes from a Q/DQ model (the converter's full-integer
    file, :func:`~sdk.targets.tflite.convert.onnx_to_tflite_bytes`), run by LiteRT with its default
    delegate and asked as an onnxruntime session is (``run(names, feed)``, ONNX names and layouts,
    from the file's ``edgesdk.onnx`` metadata): the guard judges the file it ships, not the Q/DQ
    model it came from (layout-cdla: 1.0 for the Q/DQ model on 8 held-out pages, 0.83 for its file)."""

    def __init__(self, qproto: Any, io: str = "float", input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 source_sha256: str = "", converted: Optional[Mapping[str, Any]] = None):
        from ..targets.tflite.convert import onnx_names, onnx_to_tflite_bytes

        #: the conversion record (``onnx_to_tflite_bytes``): ``-o`` writes these very bytes
        self.converted = converted or onnx_to_tflite_bytes(qproto, input_shapes, int8_io=io, all_float_ok=True,
                                                           source_sha256=source_sha256)
        data = self.converted["data"]
        meta = onnx_names(data)
        self._it = _int8_interpreter(data)

        def ports(details: Sequence[Mapping[str, Any]], names: Mapping[str, Any]) -> List[Tuple[str, str, Any]]:
            """``(file's name, ONNX name, perm)`` per port (the file's tensor: the ONNX value transposed by perm)."""
            out = []
            for d in details:
                entry = names.get(d["name"]) or {}
                perm = tuple(entry["perm"]) if entry.get("perm") else None
                out.append((d["name"], str(entry.get("onnx") or d["name"]), perm))
            return out

        self._in = ports(self._it.get_input_details(), meta.get("inputs") or {})
        self._out = ports(self._it.get_output_details(), meta.get("outputs") or {})

    def run(self, names: Optional[Sequence[str]], feed: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        """Each sample of ``feed`` through the file (its shapes are static: one sample at a time),
        the outputs ``names`` stacked again, in ONNX layout."""
        rows = []
        for row in _rows(feed):
            tfl = {t: np.asarray(row[o]).transpose(p) if p else row[o] for t, o, p in self._in}
            rows.append({o: y.transpose(np.argsort(p)) if p else y
                         for y, (_, o, p) in zip(_run_int8(self._it, tfl), self._out)})
        wanted = list(names) if names else [o for _, o, _ in self._out]
        return [np.concatenate([r[n] for r in rows]) for n in wanted]


def quantize_tflite(model: Any, calib: Any, cfg: Any, output: Optional[Path]) -> Any:
    """:func:`sdk.quantize.quantize` for a float ``.tflite`` (``cfg``: a :class:`QuantizeConfig`)."""
    from ..atomic import atomic_write
    from ..model import Model
    from ..sources import open_source
    from .api import QuantizeResult
    from .methods import compute_range, get_method
    from .schemes import get_scheme
    from .schemes.base import QuantPlan
    from .stats import CalibrationStats

    t0 = time.perf_counter()
    if cfg.scheme not in ("tflite", "onnxruntime"):
        raise InputError(f"'{model}' is a TFLite model; --target {cfg.scheme} takes an ONNX model",
                         "quantize a .tflite for --target tflite")
    if cfg.tflite_io not in ("float", "int8"):
        raise InputError(f"--io {cfg.tflite_io!r}", "use --io float or --io int8")
    if output is not None and Path(output).suffix.lower() != ".tflite":
        raise InputError(f"-o '{output}': a TFLite model quantizes to a .tflite file", "name the output *.tflite")
    fallback_steps(cfg)     # a bad --fallback-precision: one line, before any work
    scheme = get_scheme("tflite")
    method = cfg.method or scheme.default_method
    get_method(method)
    m = model if isinstance(model, Model) else Model.load(model)
    adapter = TFLiteAdapter(m.to_bytes())
    adapter.keep_float(list(cfg.exclude or ()))
    names = adapter.activations()
    stats = CalibrationStats.empty(m.sha256, names,
                                   channel_names=adapter.weighted_inputs() if cfg.bias_correction else ())
    source = open_source(calib, m.inputs, cfg.preprocess, limit=cfg.calib_limit)
    failures: List[str] = []
    warned: List[str] = []
    held = None
    budget_report: Optional[Dict[str, Any]] = None
    if cfg.eval_data is None and cfg.budget and cfg.guard:   # the core's guard (sdk.quantize.guard)
        from .guard import split

        source, held, why = split(source)
        if held is None:
            msg = f"accuracy was not checked: {why}; pass --eval with held-out data"
            warned.append(msg)
            warnings.warn(msg, stacklevel=3)
            budget_report = {"checked": False, "why": why, "holds": None}
            if cfg.strict:
                failures.append(msg)
    tc = time.perf_counter()
    first_row: Optional[Dict[str, np.ndarray]] = None
    for feed, _ in source.samples():
        for row in _rows(feed):
            stats.update(adapter.run(row), 1, channel_axis=-1)
            first_row = row if first_row is None else first_row
    calib_s = time.perf_counter() - tc
    if stats.samples == 0:
        raise QuantizationError("no calibration sample was read", "check --calib")
    params = dict(cfg.method_params or {})
    ranges = {n: compute_range(stats.tensors[n], method, False, **params) for n in names if stats.tensors[n].seen}
    from ..targets.tflite.int8 import _from_range

    qparams = {n: _from_range(lo, hi) for n, (lo, hi) in ranges.items()}
    means: Dict[str, np.ndarray] = {}
    for n in names:
        mean = stats.tensors[n].channel_mean()
        if mean is not None:
            means[n] = mean
    out_names = adapter.outputs()
    adapter.channel_means = means   # every model written from here on is bias-corrected with them
    data, info = adapter.write(qparams, cfg.tflite_io)
    accuracy = None
    fallback: List[str] = []
    fallback_kind = fallback_why = ""     # set by the fallback, when it runs
    eval_src = held if cfg.eval_data is None else open_source(cfg.eval_data, m.inputs, cfg.preprocess)
    if eval_src is not None:
        from .accuracy import add_intervals, aims_at_margin, established, not_established
        from .api import _budget, _margin, budget_record

        ev = _Eval(cfg, adapter, out_names, eval_src, _budget(cfg, held_out=held is not None))
        accuracy, fails = ev.check(data)
        ev.margin_aim = aims_at_margin(cfg.margin, ev.budget, accuracy, ev.roles)
        if (fails or (ev.margin_aim and not established(accuracy, ev.roles))) and cfg.max_fallback != 0:
            data, info, accuracy, fails, fallback, fallback_kind, fallback_why = _fallback(
                cfg, adapter, ev, qparams, data, info, accuracy, fails)
        failures += fails
        add_intervals(accuracy, ev.roles)
        budget_report = budget_record(ev.budget, cfg, held, accuracy, ev.roles,
                                      _margin(cfg, ev.budget, ev.margin_aim, ev.margin_held))
        weak = not_established(accuracy, cfg.eval_data is not None) if budget_report["established"] is False \
            else None
        if weak is not None:
            warned.append(weak)
            warnings.warn(weak, stacklevel=3)
            if cfg.strict:
                failures.append(weak)
    latency = speed_check(cfg, m, data, first_row, failures) if cfg.speed_check and info["ops_int8"] and \
        first_row is not None else None
    report = {
        "model": {"path": str(m.origin) if m.origin else None, "sha256": m.sha256, "format": "tflite",
                  "weights_dequantized": adapter.info["dequantize_folded"], "custom_ops": adapter.info["custom_ops"],
                  "custom_ops_as_builtin": adapter.info["custom_ops_as_builtin"]},
        "target": "tflite", "method": {"name": method, "params": params},
        "calibration": {"samples": stats.samples, "time_s": round(calib_s, 3), "reused_statistics": None,
                        "tensors": len(names), "runtime": "LiteRT interpreter, every intermediate tensor readable"},
        "tflite": {"io": cfg.tflite_io, "bytes": len(data), **{k: v for k, v in info.items() if k != "notes"}},
        "accuracy": accuracy, "warnings": warned + list(info.get("notes", [])), "failures": failures,
        "layers": {"quantized": info["ops_int8"], "int16": info.get("ops_int16", 0),
                   "quantizable": info["ops_int8"] + info.get("ops_int16", 0) + info["ops_float"],
                   "activations_with_qdq": len(qparams), "weights": info["ops_int8"], "weights_total":
                   info["ops_int8"] + info.get("ops_int16", 0) + info["ops_float"]},
        "bias_correction": {"corrected_layers": info.get("bias_corrected", 0)}, "fallback_layers": fallback,
        "fallback": {"precision": fallback_kind if fallback else None, "why": fallback_why or None},
        "layer_precision": layer_precision(data, fallback, fallback_why, adapter.kept_float),
        "not_done_for_tflite_input": ["speed plan (the speed is checked, not searched)"],
        "time_s": round(time.perf_counter() - t0, 3), "outputs": {},
    }
    if budget_report is not None:
        report["budget"] = budget_report
    if latency is not None:
        report["latency"] = latency
    saved = None
    if output is not None:
        atomic_write(Path(output), data)
        saved = Model.load(output)
        report["outputs"] = {"model": str(output)}
    if cfg.report_path is not None:
        import json

        Path(cfg.report_path).write_text(json.dumps(report, indent=1, default=float))
    plan = QuantPlan(layers=[op.source or op.code for op in adapter.graph.ops])
    return QuantizeResult(model=saved, report=report, stats=stats, ranges=ranges, plan=plan, qparams={},
                          scheme=scheme, failures=failures)


def layer_precision(data: bytes, fallback: Sequence[str], why: str, kept: Any = ()) -> Dict[str, Dict[str, str]]:
    """Each op of the written model (by its output tensor): ``{"precision": int8 | 16x8 | float, "why"}``;
    ``kept``: the ones ``--exclude`` kept in float."""
    from ..targets.tflite.reader import read_tflite

    g, _ = read_tflite(data)
    moved = set(fallback)
    out: Dict[str, Dict[str, str]] = {}
    for op in g.ops:
        if op.code in ("QUANTIZE", "DEQUANTIZE") or not op.outputs:
            continue
        t = g.tensors[op.outputs[0]]
        suffix = f"/{t.dtype}"     # a graph output the writer renamed NAME/<dtype> (int8.py, _output_as)
        name = t.name[:-len(suffix)] if t.name.endswith(suffix) else t.name
        if t.dtype == "int8":
            out[name] = {"precision": "int8", "why": "within the budget"}
        elif t.dtype == "int16":
            out[name] = {"precision": "16x8", "why": f"accuracy budget (sensitivity fallback): {why}"}
        elif name in moved:
            out[name] = {"precision": "float", "why": f"accuracy budget (sensitivity fallback): {why}"}
        elif name in kept:
            out[name] = {"precision": "float", "why": "--exclude"}
        else:
            out[name] = {"precision": str(t.dtype), "why": f"{op.code}: no int8 kernel, or a tensor left uncalibrated"}
    return out


class _Timed:
    """A TFLite session (the ``tflite`` target's, as ``sdk bench`` opens it) behind the ``run(names,
    feed)`` call :func:`~.speed.latency_rounds` times."""

    def __init__(self, session: Any):
        self.session = session

    def run(self, names: Any, feed: Mapping[str, np.ndarray]) -> Any:
        return self.session.run(feed)


def file_feed(data: bytes, onnx_feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``onnx_feed`` (ONNX names and layouts) as the converted ``.tflite`` ``data`` takes it: its
    inputs' names and permutations from the file's ``edgesdk.onnx`` metadata."""
    from ..targets.tflite.convert import onnx_names

    out = {}
    for name, entry in (onnx_names(data).get("inputs") or {}).items():
        value = np.asarray(onnx_feed[entry.get("onnx") or name])
        out[name] = value.transpose(entry["perm"]) if entry.get("perm") else value
    return out


def speed_check(cfg: Any, m: Any, data: bytes, feed: Mapping[str, np.ndarray], failures: List[str]
                ) -> Dict[str, Any]:
    """The float file and the INT8 one timed side by side on this host, as ``sdk bench --target
    tflite`` runs them (LiteRT with its default XNNPACK delegate, ``--threads``): interleaved rounds,
    the speedup the median of their ratios (:func:`~.speed.paired_speedup`), as on the ONNX path;
    INT8 slower beyond :data:`~.speed.SLOWER_TOLERANCE` is a failure unless ``allow_slower``."""
    from ..model import Model
    from ..targets import get_target
    from .speed import SLOWER_TOLERANCE, bench_command, latency_rounds, paired_speedup, speedup_interval

    target = get_target("tflite", **({"threads": cfg.speed_threads} if cfg.speed_threads else {}))
    float_s = target.open(m)
    int8_s = target.open(Model(data=data, format="tflite"))
    try:
        rounds = latency_rounds([_Timed(float_s), _Timed(int8_s)], feed, rounds=9, round_s=0.1)
    finally:
        float_s.close()
        int8_s.close()
    fp_ms, q_ms = float(np.median(rounds[0])), float(np.median(rounds[1]))
    speedup = paired_speedup(rounds)
    shapes = {k: list(np.shape(v)) for k, v in feed.items()}
    threads = cfg.speed_threads
    if speedup and speedup * (1.0 + SLOWER_TOLERANCE) < 1.0 and not cfg.allow_slower:
        failures.append(f"the INT8 model is slower than the float model on this host ({q_ms:.2f} vs {fp_ms:.2f} ms)"
                        "; pass --allow-slower to accept it")
    return {"runtime": f"{getattr(float_s, 'runtime', '') or 'LiteRT'} with XNNPACK (this host)",
            "threads": threads if threads else "LiteRT default", "input_shapes": shapes, "rounds": len(rounds[0]),
            "fp32_ms": round(fp_ms, 3), "int8_ms": round(q_ms, 3), "speedup": round(speedup, 3) if speedup else None,
            "speedup_ci95": speedup_interval(rounds),
            "bench_command": bench_command("MODEL.tflite", threads, shapes, target="tflite")}


class _Eval:
    """The held-out samples (``--eval`` or the guard's), the float model's outputs on them (once),
    each output's role (:func:`~.roles.infer_roles`) and the budget check: the core's accumulators
    (:class:`~.accuracy.OutputAccumulator`) and :class:`~.accuracy.Budget`, as on the ONNX path."""

    def __init__(self, cfg: Any, adapter: TFLiteAdapter, out_names: List[str], source: Any, budget: Any):
        from .roles import image_size, infer_roles

        self.cfg, self.adapter, self.out_names, self.budget = cfg, adapter, out_names, budget
        self.margin_aim = False                       # the fallback aims at a margin (QuantizeConfig.margin)
        self.margin_held: Optional[bool] = None
        self.rows: List[Dict[str, np.ndarray]] = []
        for feed, _ in source.samples():
            self.rows.extend(_rows(feed))
        self.ref = [[adapter.run(r, out_names)[n] for n in out_names] for r in self.rows]
        self.roles = infer_roles(out_names, [dict(zip(out_names, x)) for x in self.ref[:4]], None, cfg.output_roles,
                                 image_size(self.rows[0]) if self.rows else None)

    def evaluate(self, data: bytes) -> Dict[str, Any]:
        """INT8 ``data`` against the float model on the held-out samples."""
        from .accuracy import Evaluation, OutputAccumulator, judge_by_role

        ref = self.ref
        it = _int8_interpreter(data)
        got = [_run_int8(it, r) for r in self.rows]
        outs: Dict[str, Any] = {}
        per_output: Dict[str, Any] = {}
        for k, n in enumerate(self.out_names):
            acc = OutputAccumulator()
            for x, g in zip(ref, got):
                acc.update(x[k], g[k].reshape(x[k].shape))
            outs[n] = acc.result()
            if n in self.roles:
                per_output[n] = ([x[k] for x in ref], [g[k].reshape(x[k].shape) for x, g in zip(ref, got)])
        result = Evaluation(samples=len(ref), outputs=outs)
        result.pairs = judge_by_role(self.roles, per_output, outs)
        if self.cfg.task_metric is not None:
            result["task_metric"] = float(self.cfg.task_metric(ref, got))
        return result

    def check(self, data: bytes) -> Tuple[Dict[str, Any], List[str]]:
        result = self.evaluate(data)
        b = self.budget
        fails = [] if not b.active or b.holds(result) else [f"the accuracy budget ({b.describe()}) does not hold on "
                                                           f"{result['samples']} held-out samples"]
        return result, fails

    def layer_errors(self, data: bytes, n: int = 4) -> List[Tuple[str, float]]:
        """Each int8 op's *added* error in the INT8 model: the relative squared error of its output
        vs the float model minus the largest of its inputs' (mean over ``n`` held-out samples), so
        that a layer is ranked by the noise it brings, not by what reached it; largest first."""
        from ..formats.tflite import load_runtime

        rt = load_runtime()
        it = rt.Interpreter(model_content=data, experimental_preserve_all_tensors=True, **rt.resolver_kwargs(False))
        it.allocate_tensors()
        details = {t["name"]: t for t in it.get_tensor_details()}
        acts = set(self.adapter.activations())
        # a graph output written int8 then dequantized carries its name on the float copy
        alias = {nm: nm + "/int8" if nm + "/int8" in details else nm for nm in acts}
        names = [nm for nm in acts if alias[nm] in details and details[alias[nm]]["dtype"] in (np.int8, np.float32)]
        err: Dict[str, float] = {nm: 0.0 for nm in names}
        for row in self.rows[:n]:
            ref = self.adapter.run(row, names)
            for d in it.get_input_details():
                x = np.asarray(row[d["name"]], np.float32)
                if d["dtype"] == np.int8:
                    sc, z = d["quantization"]
                    x = np.clip(np.round(x / sc + z), -128, 127)
                it.set_tensor(d["index"], x.astype(d["dtype"]))
            it.invoke()
            for nm in names:
                t = details[alias[nm]]
                y = it.get_tensor(t["index"]).astype(np.float64)
                if t["dtype"] == np.int8:
                    sc, z = t["quantization"]
                    y = (y - z) * sc
                r = ref[nm].astype(np.float64)
                err[nm] += float(((y - r) ** 2).sum() / ((r ** 2).sum() + 1e-12)) / n
        g = self.adapter.graph
        added: Dict[str, float] = {}
        for op in g.ops:
            outs = [g.tensors[o].name for o in op.outputs if g.tensors[o].name in err]
            ins = [err[g.tensors[i].name] for i in op.inputs if i >= 0 and g.tensors[i].name in err]
            for o in outs:
                if details[alias[o]]["dtype"] == np.int8:
                    added[o] = err[o] - (max(ins) if ins else 0.0)
        return sorted(added.items(), key=lambda kv: -kv[1])


class _Session:
    """An INT8 ``.tflite`` behind the interface :func:`~.accuracy.layer_sensitivity` opens models with
    (ONNX Runtime's ``get_outputs()`` / ``run(names, feed)``), outputs by the float model's names."""

    def __init__(self, data: bytes, out_names: List[str]):
        self.interp, self.names = _int8_interpreter(data), out_names

    def get_outputs(self) -> List[Any]:
        return [SimpleNamespace(name=n) for n in self.names]

    def run(self, names: Any, feed: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        return _run_int8(self.interp, feed)


#: above this many int8 layers the one-at-a-time ranking (one interpreter per layer) is skipped for
#: the cheaper added-error ranking
ONE_AT_A_TIME_MAX_LAYERS = 400


def rank_layers(adapter: TFLiteAdapter, ev: _Eval, qparams: Mapping[str, Tuple[float, int]], io: str,
                data: bytes, samples: int = 4) -> List[str]:
    """The INT8 layers (their output tensors), most harmful first: each one quantized alone, every
    other layer float, measured at the outputs on ``samples`` held-out samples (the core's
    :func:`~.accuracy.layer_sensitivity`): its own noise times what reaches the outputs, as the ONNX
    path's own-noise x gain ranks them. Past :data:`ONE_AT_A_TIME_MAX_LAYERS` layers, by the error
    each adds inside the full INT8 model (:meth:`_Eval.layer_errors`)."""
    from .accuracy import layer_sensitivity

    added = ev.layer_errors(data)
    layers = [nm for nm, _ in added]
    if len(layers) > ONE_AT_A_TIME_MAX_LAYERS:
        return layers
    everything = set(layers)
    rows = ev.rows[:samples]
    refs = [dict(zip(ev.out_names, x)) for x in ev.ref[:samples]]
    ranked = layer_sensitivity(lambda keep: adapter.write(qparams, io, exclude=everything - set(keep))[0], layers,
                               rows, refs, session=lambda d: _Session(d, ev.out_names))
    return [r["layer"] for r in ranked]


#: the fallback's precision steps, by ``QuantizeConfig.fallback_precision``
FALLBACK_STEPS = {"int16": ("int16", "float"), "float": ("float",)}


def sixteen_did_not_hold(layers: int, max_fallback: Optional[int]) -> str:
    """The fallback's reason, extended when 16x8 on every layer it may move did not hold the budget."""
    return f"; 16x8 did not hold with {min(layers, max_fallback or layers)} layers, so float"


def fallback_steps(cfg: Any) -> Tuple[Tuple[str, ...], str]:
    """The precisions the fallback tries, in order, and why. ``auto``: 16x8 first for an integer-only
    model (``--io int8``: microcontrollers and NPUs have no float kernels), float for a model with
    float I/O (LiteRT on a CPU runs 16x8 ops on its builtin kernels, outside XNNPACK: slower than float;
    benchmarks/tflite_int8.py --int16 measures it)."""
    want = getattr(cfg, "fallback_precision", "auto") or "auto"
    if want not in ("auto", "int16", "float"):
        raise InputError(f"--fallback-precision {want!r}", "use auto, int16 or float")
    if want != "auto":
        return FALLBACK_STEPS[want], f"--fallback-precision {want}"
    if cfg.tflite_io == "int8":
        return FALLBACK_STEPS["int16"], "integer-only model (--io int8): 16x8 before float"
    return FALLBACK_STEPS["float"], ("float I/O: float layers run in XNNPACK, 16x8 ones on LiteRT's slower builtin "
                                     "kernels (--fallback-precision int16 to prefer 16x8)")


def _fallback(cfg: Any, adapter: TFLiteAdapter, ev: _Eval, qparams: Mapping[str, Tuple[float, int]], data: bytes,
              info: Dict[str, Any], accuracy: Any, failures: List[str]) -> Tuple[Any, ...]:
    """Move the most harmful layers (:func:`rank_layers`) to higher precision, the fewest that make
    the budget hold (the core's doubling/bisecting :func:`~.fallback.search_fallback`): 16x8 first
    where :func:`fallback_steps` says so, float last. Returns ``(data, info, accuracy, failures,
    layers, precision, why)``."""
    from .accuracy import established
    from .fallback import search_fallback, widen_to_margin

    steps, why = fallback_steps(cfg)
    order = rank_layers(adapter, ev, qparams, cfg.tflite_io, data)
    built: Dict[Tuple[str, int], Tuple[bytes, Dict[str, Any], Any, List[str]]] = {}

    def holds_as(kind: str) -> Any:
        def holds(prefix: Any) -> Tuple[bool, Any]:
            d, inf = adapter.write(qparams, cfg.tflite_io, **({"int16": prefix} if kind == "int16" else
                                                               {"exclude": prefix}))
            acc, fails = ev.check(d)
            built[(kind, len(prefix))] = (d, inf, acc, fails)
            return not fails, len(prefix)
        return holds

    def established_as(kind: str) -> Any:
        def holds(prefix: Any) -> Tuple[bool, Any]:
            ok, n = holds_as(kind)(prefix)
            return ok and established(built[(kind, n)][2], ev.roles), n
        return holds

    tried: List[str] = []
    prefix: List[str] = []
    ok, kind = not failures, steps[0]     # not failures: the budget holds, only the margin is missing
    built[(kind, 0)] = (data, info, accuracy, failures)
    for kind in steps if failures else ():
        prefix, last, ok, _ = search_fallback(order, holds_as(kind), limit=cfg.max_fallback)
        tried.append(kind)
        if ok:
            break
    if ok and ev.margin_aim:    # on to the fewest layers whose samples establish the budget
        prefix, _, ev.margin_held, _ = widen_to_margin(order, prefix, None,
                                                       established(built[(kind, len(prefix))][2], ev.roles),
                                                       established_as(kind), cfg.max_fallback)
    if not prefix or (kind, len(prefix)) not in built:
        return data, info, accuracy, failures, [], kind, why
    d, inf, acc, fails = built[(kind, len(prefix))]
    if not ok:
        fails = fails + [f"the budget does not hold with {len(prefix)} layers kept in "
                         f"{' or '.join('16x8' if k == 'int16' else k for k in tried)}"]
    elif kind == "float" and "int16" in tried:
        why += sixteen_did_not_hold(len(order), cfg.max_fallback)
    return d, inf, acc, fails, list(prefix), kind, why
