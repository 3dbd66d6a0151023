"""``quantize()`` on a float ``.tflite`` model: the TFLite format adapter of the one quantizer core.

The adapter says what the tensors are (:func:`sdk.targets.tflite.reader.read_tflite`: every float
activation of the primary subgraph, float16 weights folded to float32), runs the model with every
intermediate readable (LiteRT's interpreter with ``experimental_preserve_all_tensors``, builtin
kernels), and writes the result (the same int8 pass that writes converted ONNX models:
:func:`sdk.targets.tflite.int8.quantize_graph`). The statistics (:class:`~.stats.CalibrationStats`,
streamed), the calibration methods (:mod:`.methods`, ``auto`` included) and the default budget
(cosine 0.99 vs the float model on held-out data, or the task metric) are the core's.

Not done for TFLite input yet (the ONNX path has them): the per-layer sensitivity ranking and the
fallback search (16x8 first, then float), bias correction, and the XNNPACK speed plan. A budget that
does not hold is reported as a failure; the model is still written.
"""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import InputError, QuantizationError

__all__ = ["TFLiteAdapter", "quantize_tflite", "is_tflite"]


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
        self._interp: Any = None

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

    def write(self, qparams: Mapping[str, Tuple[float, int]], io: str) -> Tuple[bytes, Dict[str, Any]]:
        """The full-integer model with these activation scales/zero points (the graph is rewritten)."""
        from ..targets.tflite.int8 import quantize_graph
        from ..targets.tflite.tflgraph import write_flatbuffer

        lw = SimpleNamespace(g=self.graph, qparams=dict(qparams))
        info = quantize_graph(lw, io=io)
        return write_flatbuffer(self.graph, description="edgesdk int8"), info


def _rows(feed: Mapping[str, np.ndarray]) -> Iterator[Dict[str, np.ndarray]]:
    n = min(int(np.shape(v)[0]) if np.ndim(v) else 1 for v in feed.values())
    for i in range(n):
        yield {k: np.asarray(v)[i:i + 1] for k, v in feed.items()}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _run_int8(data: bytes, feed: Mapping[str, np.ndarray]) -> List[np.ndarray]:
    from ..formats.tflite import load_runtime, quiet_native_info

    rt = load_runtime()
    with quiet_native_info():
        it = rt.Interpreter(model_content=data, **rt.resolver_kwargs(True))
        it.allocate_tensors()
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


def quantize_tflite(model: Any, calib: Any, cfg: Any, output: Optional[Path]) -> Any:
    """:func:`sdk.quantize.quantize` for a float ``.tflite`` (``cfg``: a :class:`QuantizeConfig`)."""
    from ..atomic import atomic_write
    from ..model import Model
    from ..sources import open_source
    from .api import DEFAULT_MIN_COSINE, QuantizeResult
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
    scheme = get_scheme("tflite")
    method = cfg.method or scheme.default_method
    get_method(method)
    m = model if isinstance(model, Model) else Model.load(model)
    adapter = TFLiteAdapter(m.to_bytes())
    names = adapter.activations()
    stats = CalibrationStats.empty(m.sha256, names)
    source = open_source(calib, m.inputs, cfg.preprocess, limit=cfg.calib_limit)
    tc = time.perf_counter()
    for feed, _ in source.samples():
        for row in _rows(feed):
            stats.update(adapter.run(row), 1)
    calib_s = time.perf_counter() - tc
    if stats.samples == 0:
        raise QuantizationError("no calibration sample was read", "check --calib")
    params = dict(cfg.method_params or {})
    ranges = {n: compute_range(stats.tensors[n], method, False, **params) for n in names if stats.tensors[n].seen}
    from ..targets.tflite.int8 import _from_range

    qparams = {n: _from_range(lo, hi) for n, (lo, hi) in ranges.items()}
    float_bytes = adapter.float_bytes
    out_names = adapter.outputs()
    data, info = adapter.write(qparams, cfg.tflite_io)
    failures: List[str] = []
    accuracy = None
    if cfg.eval_data is not None:
        accuracy, failures = _accuracy(cfg, m, float_bytes, data, out_names, DEFAULT_MIN_COSINE)
    report = {
        "model": {"path": str(m.origin) if m.origin else None, "sha256": m.sha256, "format": "tflite",
                  "weights_dequantized": adapter.info["dequantize_folded"], "custom_ops": adapter.info["custom_ops"],
                  "custom_ops_as_builtin": adapter.info["custom_ops_as_builtin"]},
        "target": "tflite", "method": {"name": method, "params": params},
        "calibration": {"samples": stats.samples, "time_s": round(calib_s, 3), "reused_statistics": None,
                        "tensors": len(names), "runtime": "LiteRT interpreter, every intermediate tensor readable"},
        "tflite": {"io": cfg.tflite_io, "bytes": len(data), **{k: v for k, v in info.items() if k != "notes"}},
        "accuracy": accuracy, "warnings": list(info.get("notes", [])), "failures": failures,
        "layers": {"quantized": info["ops_int8"], "quantizable": info["ops_int8"] + info["ops_float"],
                   "activations_with_qdq": len(qparams), "weights": info["ops_int8"], "weights_total":
                   info["ops_int8"] + info["ops_float"]},
        "bias_correction": {"corrected_layers": 0}, "fallback_layers": [],
        "not_done_for_tflite_input": ["sensitivity ranking", "fallback search (16x8, float)", "bias correction",
                                      "speed plan"],
        "time_s": round(time.perf_counter() - t0, 3), "outputs": {},
    }
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


def _accuracy(cfg: Any, m: Any, float_bytes: bytes, data: bytes, out_names: List[str], default_cos: float
              ) -> Tuple[Dict[str, Any], List[str]]:
    from ..sources import open_source

    src = open_source(cfg.eval_data, m.inputs, cfg.preprocess)
    adapter = TFLiteAdapter.__new__(TFLiteAdapter)
    adapter.float_bytes, adapter._interp = float_bytes, None
    ref: List[List[np.ndarray]] = []
    got: List[List[np.ndarray]] = []
    for feed, _ in src.samples():
        for row in _rows(feed):
            r = adapter.run(row, out_names)
            ref.append([r[n] for n in out_names])
            got.append(_run_int8(data, row))
    cos = {n: min(_cos(g[k], r[k]) for g, r in zip(got, ref)) for k, n in enumerate(out_names)}
    outs: Dict[str, Any] = {}
    for k, n in enumerate(out_names):
        r = np.concatenate([x[k].ravel() for x in ref]).astype(np.float64)
        e = np.concatenate([x[k].ravel() for x in got]).astype(np.float64) - r
        outs[n] = {"cosine": cos[n], "snr_db": float(10 * np.log10((r @ r + 1e-30) / (e @ e + 1e-30))),
                   "max_abs_error": float(np.abs(e).max())}
    acc: Dict[str, Any] = {"samples": len(ref), "outputs": outs}
    failures: List[str] = []
    if cfg.task_metric is not None:
        tm = float(cfg.task_metric(ref, got))
        acc["task_metric"] = tm
        limit = cfg.min_task_metric if cfg.min_task_metric is not None else 0.99
        if tm < limit:
            failures.append(f"task metric {tm:.4f} < {limit} (no fallback for TFLite input yet)")
    elif cfg.budget:
        limit = cfg.min_cosine if cfg.min_cosine is not None else default_cos
        worst = min(cos.values())
        if worst < limit:
            failures.append(f"output cosine {worst:.4f} < {limit} vs the float model (no fallback for TFLite input yet)")
    return acc, failures
