"""The exact float rewrites (``sdk/formats/onnx_rewrite.py``) on the corpus, side by side in one run:
per ONNX model, what was rewritten, the largest output difference, and FP32 latency on ONNX Runtime's
CPU provider of the file as shipped vs the rewritten graph (interleaved rounds, medians, ratio); where
an affine was folded into the conv after it, also the rewritten graph without that fold (``no fwd``,
with the ratio of the full rewrite over it).

    python benchmarks/onnx_rewrite.py
    python benchmarks/onnx_rewrite.py --models layout-cdla ppocr-v4-rec --threads 1 --rounds 9

``--tflite-int8``: per model with hard-swishes, ``--target tflite`` default runs (calibration, held-out
and unseen corpus sets) with each hard-swish prepared as one ``HardSwish`` (the tflite scheme's
choice) vs as ``x * HardSigmoid(x)`` (the onnxruntime scheme's), side by side: layers kept in float,
the task metric on unseen inputs, and LiteRT (XNNPACK) INT8 vs float speed at 1 and 2 threads.

    python benchmarks/onnx_rewrite.py --tflite-int8 --models layout-cdla
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List

import numpy as np


def _session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def measure(name: str, threads: int, rounds: int) -> Dict[str, Any]:
    import onnx

    from sdk import corpus
    from sdk.formats.onnx_rewrite import fold_scalar_affine, fuse_hardswish, simplify

    path = str(corpus.fetch([name])[name])
    proto = onnx.load(path)
    rewritten, done = simplify(proto)
    sessions_of: List[Any] = [path, rewritten]
    if done.get("affine_folded_forward"):
        sessions_of.append(fuse_hardswish(fold_scalar_affine(proto)[0])[0])
    row: Dict[str, Any] = {"model": name, "rewrites": done}
    if not done:
        return row
    feed = corpus.sample_inputs(name, 1, seed=0)[0]
    sessions = [_session(m, threads) for m in sessions_of]
    a, b = sessions[0], sessions[1]
    ref, got = a.run(None, feed), b.run(None, feed)
    row["max_abs_diff"] = max(float(np.max(np.abs(np.asarray(r, np.float64) - np.asarray(g, np.float64))))
                              for r, g in zip(ref, got))
    n = max(1, int(0.2 / max(1e-4, _once(a, feed))))
    ms: List[List[float]] = [[] for _ in sessions]
    for _ in range(rounds):
        for i, s in enumerate(sessions):
            t = time.perf_counter()
            for _ in range(n):
                s.run(None, feed)
            ms[i].append((time.perf_counter() - t) / n * 1e3)
    row["fp32_ms"], row["rewritten_ms"] = float(np.median(ms[0])), float(np.median(ms[1]))
    row["ratios"] = sorted(x / y for x, y in zip(ms[0], ms[1]))
    if len(ms) > 2:
        row["no_forward_ms"] = float(np.median(ms[2]))
        row["forward_ratios"] = sorted(x / y for x, y in zip(ms[2], ms[1]))
    return row


def _once(sess: Any, feed: Dict[str, np.ndarray]) -> float:
    t = time.perf_counter()
    sess.run(None, feed)
    return time.perf_counter() - t


def tflite_int8(name: str, calib: int, held: int, unseen: int, runs: int) -> Dict[str, Any]:
    """The two hard-swish forms through ``--target tflite`` defaults, and the float ``.tflite``."""
    import sys
    import tempfile
    from pathlib import Path

    import onnx
    import onnxruntime as ort

    from sdk import corpus
    from sdk.formats.onnx_rewrite import count_hardswish
    from sdk.quantize import quantize
    from sdk.quantize.schemes.tflite import TFLiteScheme
    from sdk.targets.convert import ConvertOptions, convert

    sys.path.insert(0, str(Path(__file__).parent))
    from tflite_int8 import _latencies, _outputs

    src = corpus.fetch([name])[name]
    row: Dict[str, Any] = {"model": name, "hardswish": count_hardswish(onnx.load(str(src)).graph)}
    if not row["hardswish"]:
        return row
    shapes = dict(corpus.get(name).input_shapes)
    work = Path(tempfile.mkdtemp(prefix="hswish_tflite_"))
    paths = {"float": str(work / "float.tflite")}
    convert(src, paths["float"], ConvertOptions(input_shapes=shapes))
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feeds = corpus.sample_inputs(name, unseen, seed=2)
    ref = [sess.run(None, f) for f in feeds]
    kept = TFLiteScheme.hardswish_op
    try:
        for label, as_op in (("HardSigmoid*x", False), ("HardSwish", True)):
            TFLiteScheme.hardswish_op = as_op
            out = work / f"{label}.tflite"
            t0 = time.perf_counter()
            res = quantize(src, corpus.sample_inputs(name, calib, seed=0), scheme="tflite", input_shapes=shapes,
                           eval_data=corpus.sample_inputs(name, held, seed=1), speed_check=False, use_cache=False,
                           output=out)
            row[label] = {"float_layers": len(res.report["fallback_layers"]), "holds": res.report["budget"]["holds"],
                          "unseen_task": corpus.metric(name, ref, _outputs(str(out), feeds, names)),
                          "wall_s": time.perf_counter() - t0}
            paths[label] = str(out)
    finally:
        TFLiteScheme.hardswish_op = kept
    for threads in (1, 2):
        lat = _latencies(paths, feeds[0], threads, runs)
        for label in ("HardSigmoid*x", "HardSwish"):
            row[label][f"speedup_t{threads}"] = lat["float"] / lat[label]
    return row


def main() -> None:
    from sdk import corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="corpus model names (default: every ONNX model)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: onnxruntime's default)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    ap.add_argument("--tflite-int8", action="store_true", help="the hard-swish forms through --target tflite")
    ap.add_argument("--calib", type=int, default=8, help="--tflite-int8: calibration samples (seed 0)")
    ap.add_argument("--held", type=int, default=16, help="--tflite-int8: held-out samples for the budget (seed 1)")
    ap.add_argument("--unseen", type=int, default=16, help="--tflite-int8: unseen samples for the task metric (seed 2)")
    args = ap.parse_args()
    names = args.models or corpus.names("onnx")
    if args.tflite_int8:
        print(f"{'model':20s} {'form':14s} {'float layers':>12s} {'holds':>6s} {'unseen task':>11s} "
              f"{'INT8/float 1T':>13s} {'2T':>6s} {'wall s':>7s}")
        for name in names:
            r = tflite_int8(name, args.calib, args.held, args.unseen, max(10, args.rounds * 3))
            if r["hardswish"] == 0:
                print(f"{name:20s} no hard-swish")
                continue
            for label in ("HardSigmoid*x", "HardSwish"):
                c = r[label]
                print(f"{name:20s} {label:14s} {c['float_layers']:12d} {str(c['holds']):>6s} {c['unseen_task']:11.4f} "
                      f"{c['speedup_t1']:12.2f}x {c['speedup_t2']:5.2f}x {c['wall_s']:7.0f}")
        return
    print(f"{'model':22s} {'rewrites':44s} {'max abs':>9s} {'FP32 ms':>8s} {'rewritten':>9s} {'ratio (min-max)':>18s}")
    for name in names:
        r = measure(name, args.threads, args.rounds)
        what = ", ".join(f"{k} {v}" for k, v in r["rewrites"].items()) or "none"
        if "fp32_ms" not in r:
            print(f"{name:22s} {what:44s}")
            continue
        ratios = r["ratios"]
        fwd = ""
        if "no_forward_ms" in r:
            fr = r["forward_ratios"]
            fwd = (f"   no fwd {r['no_forward_ms']:.2f} ms: {r['no_forward_ms'] / r['rewritten_ms']:.2f}x "
                   f"({fr[0]:.2f}-{fr[-1]:.2f})")
        print(f"{name:22s} {what:44s} {r['max_abs_diff']:9.2e} {r['fp32_ms']:8.2f} {r['rewritten_ms']:9.2f} "
              f"{r['fp32_ms'] / r['rewritten_ms']:6.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}){fwd}")


if __name__ == "__main__":
    main()
