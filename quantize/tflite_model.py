"""``quantize()`` on a float ``.tflite`` model: the TFLite format adapter of the one quantizer core.

The adapter says what the tensors are (:func:`sdk.targets.tflite.reader.read_tflite`: every float
activation of the primary subgraph, float16 weights folded to float32), runs the model with every
intermediate readable (LiteRT's interpreter with ``experimental_preserve_all_tensors``, builtin
kernels), and writes the result (the same int8 pass that writes converted ONNX models:
:func:`sdk.targets.tflite.int8.quantize_graph`). The statistics (:class:`~.stats.CalibrationStats`,
streamed), the calibration methods (:mod:`.methods`, ``auto`` included) and the default budget
(cosine 0.99 vs the float model on held-out data, or the task metric) are the core's.

With held-out data the float fallback goes through the core's doubling/bisecting
:func:`~.fallback.search_fallback`, layers ranked by the error each adds in the INT8 model (its output's
relative error minus its inputs'). Not done for TFLite input yet (the ONNX path has them): the 16x8
fallback step, the own-noise x gain ranking, bias correction and the XNNPACK speed plan. A budget that
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

    def write(self, qparams: Mapping[str, Tuple[float, int]], io: str, exclude: Any = ()) -> Tuple[bytes, Dict[str, Any]]:
        """The full-integer model with these activation scales/zero points; the ops writing the
        tensors in ``exclude`` stay float (the fallback). The adapter's graph is left as it was."""
        from ..targets.tflite.int8 import quantize_graph
        from ..targets.tflite.reader import read_tflite
        from ..targets.tflite.tflgraph import write_flatbuffer

        graph, _ = read_tflite(self.float_bytes)
        lw = SimpleNamespace(g=graph, qparams=dict(qparams))
        info = quantize_graph(lw, io=io, exclude=exclude)
        return write_flatbuffer(graph, description="edgesdk int8"), info


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
    out_names = adapter.outputs()
    data, info = adapter.write(qparams, cfg.tflite_io)
    failures: List[str] = []
    accuracy = None
    fallback: List[str] = []
    if cfg.eval_data is not None:
        ev = _Eval(cfg, m, adapter, out_names)
        accuracy, failures = ev.check(data, DEFAULT_MIN_COSINE)
        if failures and cfg.max_fallback != 0:
            data, info, accuracy, failures, fallback = _fallback(cfg, adapter, ev, qparams, data, info, accuracy,
                                                                 failures, DEFAULT_MIN_COSINE)
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
        "bias_correction": {"corrected_layers": 0}, "fallback_layers": fallback,
        "not_done_for_tflite_input": ["16x8 fallback (float only)", "ranking by own noise x gain (ranked by the "
                                      "layer's output error in the INT8 model)", "bias correction", "speed plan"],
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


class _Eval:
    """The held-out samples, the float model's outputs on them (once), and the budget check."""

    def __init__(self, cfg: Any, m: Any, adapter: TFLiteAdapter, out_names: List[str]):
        from ..sources import open_source

        self.cfg, self.adapter, self.out_names = cfg, adapter, out_names
        self.rows: List[Dict[str, np.ndarray]] = []
        for feed, _ in open_source(cfg.eval_data, m.inputs, cfg.preprocess).samples():
            self.rows.extend(_rows(feed))
        self.ref = [[adapter.run(r, out_names)[n] for n in out_names] for r in self.rows]

    def check(self, data: bytes, default_cos: float) -> Tuple[Dict[str, Any], List[str]]:
        got = [_run_int8(data, r) for r in self.rows]
        ref, cfg = self.ref, self.cfg
        outs: Dict[str, Any] = {}
        for k, n in enumerate(self.out_names):
            r = np.concatenate([x[k].ravel() for x in ref]).astype(np.float64)
            e = np.concatenate([x[k].ravel() for x in got]).astype(np.float64) - r
            outs[n] = {"cosine": min(_cos(g[k], x[k]) for g, x in zip(got, ref)),
                       "snr_db": float(10 * np.log10((r @ r + 1e-30) / (e @ e + 1e-30))),
                       "max_abs_error": float(np.abs(e).max())}
        acc: Dict[str, Any] = {"samples": len(ref), "outputs": outs}
        failures: List[str] = []
        if cfg.task_metric is not None:
            tm = float(cfg.task_metric(ref, got))
            acc["task_metric"] = tm
            limit = cfg.min_task_metric if cfg.min_task_metric is not None else 0.99
            if tm < limit:
                failures.append(f"task metric {tm:.4f} < {limit} on the held-out data")
        elif cfg.budget:
            limit = cfg.min_cosine if cfg.min_cosine is not None else default_cos
            worst = min(o["cosine"] for o in outs.values())
            if worst < limit:
                failures.append(f"output cosine {worst:.4f} < {limit} vs the float model on the held-out data")
        return acc, failures

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


def _fallback(cfg: Any, adapter: TFLiteAdapter, ev: _Eval, qparams: Mapping[str, Tuple[float, int]], data: bytes,
              info: Dict[str, Any], accuracy: Any, failures: List[str], default_cos: float) -> Tuple[Any, ...]:
    """Keep the layers with the largest output error in float, the fewest that make the budget hold
    (the core's doubling/bisecting :func:`~.fallback.search_fallback`)."""
    from .fallback import search_fallback

    order = [nm for nm, _ in ev.layer_errors(data)]
    built: Dict[int, Tuple[bytes, Dict[str, Any], Any, List[str]]] = {}

    def holds(prefix: Any) -> Tuple[bool, Any]:
        d, inf = adapter.write(qparams, cfg.tflite_io, exclude=prefix)
        acc, fails = ev.check(d, default_cos)
        built[len(prefix)] = (d, inf, acc, fails)
        return not fails, len(prefix)

    prefix, last, ok, _ = search_fallback(order, holds, limit=cfg.max_fallback)
    if len(prefix) not in built:
        return data, info, accuracy, failures, []
    d, inf, acc, fails = built[len(prefix)]
    if not ok:
        fails = fails + [f"the budget does not hold with {len(prefix)} layers kept in float"]
    return d, inf, acc, fails, list(prefix)
