"""Our INT8 quantizer against onnxruntime's ``quantize_static``, side by side in one run.

Same MobileNetV2-class model (built by ``benchmarks/models/make_mobilenet.py``), same calibration
set, same method, QDQ with per-channel weights for both. Each quantizer runs in its own subprocess;
the driver samples the RSS of that process tree (children included) every
20 ms for the peak, and times the wall clock. Then, in this process: INT8 latency of both against
FP32 (median, ONNX Runtime CPU), and agreement with FP32 on a held-out set (top-1 agreement, cosine,
SNR of the logits). Prints a table and the ratios.

    python benchmarks/quantize_vs_ort.py --n 64 --size 128 --method entropy

Each quantizer runs ``--repeat`` times (default 3), interleaved with the other; the table shows the
median wall time and the largest peak RSS.
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

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "models"))


# -- roles (run in subprocesses) ----------------------------------------------------------------------------
def role_ours(a) -> dict:
    from sdk.quantize import quantize

    t0 = time.perf_counter()
    stats = Path(a.out).with_suffix(".stats.npz")
    if stats.exists():
        stats.unlink()
    r = quantize(a.model, a.calib, output=a.out, target="onnxruntime", method=a.method, use_cache=False,
                 workers=a.workers, stats_path=stats)
    return {"wall_s": time.perf_counter() - t0, "calibration_s": r.report["calibration"]["time_s"],
            "workers": r.report["calibration"]["workers"]}


def role_methods(a) -> dict:
    """Every other method from the statistics the ``ours`` run saved: no inference."""
    from sdk.quantize import quantize

    stats = Path(a.out).with_suffix(".stats.npz")
    res = {}
    for m in ("minmax", "percentile", "entropy", "mse"):
        if m != a.method:
            t1 = time.perf_counter()
            r = quantize(a.model, a.calib, output=str(Path(a.out).with_name(f"ours_int8_{m}.onnx")), method=m,
                         use_cache=False, stats_path=stats)
            assert r.report["calibration"]["reused_statistics"]
            res[m] = time.perf_counter() - t1
    return {"other_methods_s": res}


def role_ort(a) -> dict:
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        """Streams the samples of the .npz one by one (quantize_static keeps their outputs anyway)."""

        def __init__(self, path):
            self.x = np.load(path, mmap_mode="r")["x"]
            self.i = 0

        def get_next(self):
            if self.i >= len(self.x):
                return None
            self.i += 1
            return {"input": np.ascontiguousarray(self.x[self.i - 1:self.i])}

    methods = {"entropy": CalibrationMethod.Entropy, "minmax": CalibrationMethod.MinMax,
               "percentile": CalibrationMethod.Percentile}
    t0 = time.perf_counter()
    quantize_static(a.model, a.out, Reader(a.calib), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=methods[a.method])
    return {"wall_s": time.perf_counter() - t0}


# -- driver ----------------------------------------------------------------------------------------------
def _tree_rss_bytes(pid: int) -> int:
    """Sum of VmRSS of ``pid`` and all its descendants (Linux /proc)."""
    children = {}
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


def run_role(role: str, a, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--role", role, "--model", str(a.model_path), "--calib", str(a.calib_path),
           "--out", str(out), "--method", a.method] + (["--workers", str(a.workers)] if a.workers else [])
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{role} failed:\n{stderr[-3000:]}")
    res = json.loads(stdout.strip().splitlines()[-1])
    res.update({"process_wall_s": wall, "peak_rss_mb": peak / 2 ** 20})
    return res


def _median_run(results: list) -> dict:
    """The run of median wall time (an odd count picks the middle one), with the largest peak RSS of
    all runs (memory is no timing noise: report the worst)."""
    ranked = sorted(results, key=lambda r: r["process_wall_s"])
    mid = dict(ranked[(len(ranked) - 1) // 2])
    if len(ranked) % 2 == 0:
        lo, hi = ranked[len(ranked) // 2 - 1], ranked[len(ranked) // 2]
        mid["process_wall_s"] = (lo["process_wall_s"] + hi["process_wall_s"]) / 2
    mid["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
    mid["runs_wall_s"] = [round(r["process_wall_s"], 3) for r in results]
    return mid


def latencies_ms(paths, x: np.ndarray, threads: int, seconds: float, rounds: int = 3):
    """Median over ``rounds`` interleaved rounds of each model's p50 (ms): a busy shared machine
    slows every model alike."""
    import onnxruntime as ort

    from sdk.bench import measure_latency

    sessions = []
    for path in paths:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        sessions.append(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]))
    feed = {"input": x}
    p50s = [[] for _ in paths]
    for _ in range(rounds):
        for i, sess in enumerate(sessions):
            run = lambda: sess.run(None, feed)  # noqa: E731
            p50s[i].append(measure_latency(run, warmup=10, min_runs=50, min_seconds=seconds / rounds).stats.p50_ms)
    return [float(np.median(v)) for v in p50s]


def agreement(ref_path: Path, q_path: Path, x: np.ndarray) -> dict:
    import onnxruntime as ort

    from sdk.metrics import cosine_similarity, snr_db, top1_agreement

    ref = ort.InferenceSession(str(ref_path), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(q_path), providers=["CPUExecutionProvider"])
    r = np.concatenate([ref.run(None, {"input": x[i:i + 8]})[0] for i in range(0, len(x), 8)])
    o = np.concatenate([q.run(None, {"input": x[i:i + 8]})[0] for i in range(0, len(x), 8)])
    return {"top1_agreement": top1_agreement(r, o), "cosine": cosine_similarity(r, o), "snr_db": snr_db(r, o)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["ours", "ort", "methods"])
    ap.add_argument("--model")
    ap.add_argument("--calib")
    ap.add_argument("--out")
    ap.add_argument("--method", default="entropy", choices=["entropy", "minmax", "percentile"])
    ap.add_argument("--workers", type=int, default=None, help="our calibration threads (default: all cores)")
    ap.add_argument("--n", type=int, default=64, help="calibration samples")
    ap.add_argument("--eval-n", type=int, default=64, help="held-out samples for agreement")
    ap.add_argument("--size", type=int, default=128, help="input height = width")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads for the latency runs")
    ap.add_argument("--seconds", type=float, default=3.0, help="minimum seconds per latency measurement")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs of each quantizer (median wall time)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    if a.role:
        res = {"ours": role_ours, "ort": role_ort, "methods": role_methods}[a.role](a)
        print(json.dumps(res))
        return

    from make_mobilenet import build, make_images

    work = Path(a.workdir or tempfile.mkdtemp(prefix="qbench-"))
    work.mkdir(parents=True, exist_ok=True)
    a.model_path = work / f"mobilenet_v2_{a.size}.onnx"
    if not a.model_path.exists():
        build(a.model_path, a.size)
    a.calib_path = work / f"calib_{a.n}_{a.size}.npz"
    if not a.calib_path.exists():
        np.savez(a.calib_path, x=make_images(a.n, a.size, seed=1))
    x_eval = make_images(a.eval_n, a.size, seed=2)

    print(f"model: MobileNetV2-class, input 1x3x{a.size}x{a.size}; {a.n} calibration samples; method {a.method}; "
          f"{os.cpu_count()} cores")
    # interleaved rounds (the order alternates): a busy shared machine slows both sides alike; medians
    runs = {"ours": [], "ort": []}
    for r in range(max(1, a.repeat)):
        for role in (("ours", "ort") if r % 2 == 0 else ("ort", "ours")):
            runs[role].append(run_role(role, a, work / f"{role}_int8.onnx"))
    ours, ort_res = (_median_run(runs[k]) for k in ("ours", "ort"))
    ours["other_methods_s"] = run_role("methods", a, work / "ours_int8.onnx")["other_methods_s"]
    x1 = x_eval[:1]
    lat_fp32, lat_ours, lat_ort = latencies_ms([a.model_path, work / "ours_int8.onnx", work / "ort_int8.onnx"], x1,
                                               a.threads, a.seconds)
    ag_ours = agreement(a.model_path, work / "ours_int8.onnx", x_eval)
    ag_ort = agreement(a.model_path, work / "ort_int8.onnx", x_eval)

    rows = [("edgesdk", ours, lat_ours, ag_ours), ("ort quantize_static", ort_res, lat_ort, ag_ort)]
    print(f"{'quantizer':<22}{'wall s':>9}{'peak RSS MB':>13}{'INT8 p50 ms':>13}{'vs FP32':>9}"
          f"{'top1 agree':>12}{'cosine':>9}{'SNR dB':>8}")
    for name, r, lat, ag in rows:
        print(f"{name:<22}{r['process_wall_s']:>9.2f}{r['peak_rss_mb']:>13.0f}{lat:>13.3f}{lat_fp32 / lat:>8.2f}x"
              f"{100 * ag['top1_agreement']:>11.1f}%{ag['cosine']:>9.4f}{ag['snr_db']:>8.1f}")
    print(f"FP32 p50: {lat_fp32:.3f} ms ({a.threads} thread(s))")
    if a.repeat > 1:
        for name, res in (("edgesdk", ours), ("ort quantize_static", ort_res)):
            walls = sorted(res["runs_wall_s"])
            print(f"{name}: wall s over {len(walls)} interleaved runs: median {res['process_wall_s']:.2f}, "
                  f"range {walls[0]:.2f}-{walls[-1]:.2f}; peak RSS max {res['peak_rss_mb']:.0f} MB")
    for m, secs in ours["other_methods_s"].items():
        ag = agreement(a.model_path, work / f"ours_int8_{m}.onnx", x_eval)
        print(f"edgesdk --method {m:<10} from the saved statistics in {secs:.2f} s (no inference): "
              f"top-1 agreement {100 * ag['top1_agreement']:.1f}%, cosine {ag['cosine']:.4f}, SNR {ag['snr_db']:.1f} dB")
    print(f"ratios: wall time ort/ours = {ort_res['process_wall_s'] / ours['process_wall_s']:.2f}x, "
          f"peak RSS ours/ort = {ours['peak_rss_mb'] / ort_res['peak_rss_mb']:.3f}, "
          f"INT8 speed-up vs FP32 ours {lat_fp32 / lat_ours:.2f}x / ort {lat_fp32 / lat_ort:.2f}x, "
          f"top-1 agreement ours {100 * ag_ours['top1_agreement']:.1f}% / ort {100 * ag_ort['top1_agreement']:.1f}%")
    print(json.dumps({"ours": ours, "ort": ort_res, "latency_ms": {"fp32": lat_fp32, "ours": lat_ours, "ort": lat_ort},
                      "agreement": {"ours": ag_ours, "ort": ag_ort}}))


if __name__ == "__main__":
    main()
