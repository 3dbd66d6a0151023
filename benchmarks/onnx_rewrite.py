"""The exact float rewrites (``sdk/formats/onnx_rewrite.py``) on the corpus, side by side in one run:
per ONNX model, what was rewritten, the largest output difference, and FP32 latency on ONNX Runtime's
CPU provider of the file as shipped vs the rewritten graph (interleaved rounds, medians, ratio).

    python benchmarks/onnx_rewrite.py
    python benchmarks/onnx_rewrite.py --models layout-cdla ppocr-v4-rec --threads 1 --rounds 9
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
    from sdk.formats.onnx_rewrite import simplify

    path = str(corpus.fetch([name])[name])
    proto = onnx.load(path)
    rewritten, done = simplify(proto)
    row: Dict[str, Any] = {"model": name, "rewrites": done}
    if not done:
        return row
    feed = corpus.sample_inputs(name, 1, seed=0)[0]
    a, b = _session(path, threads), _session(rewritten, threads)
    ref, got = a.run(None, feed), b.run(None, feed)
    row["max_abs_diff"] = max(float(np.max(np.abs(np.asarray(r, np.float64) - np.asarray(g, np.float64))))
                              for r, g in zip(ref, got))
    n = max(1, int(0.2 / max(1e-4, _once(a, feed))))
    ms: List[List[float]] = [[], []]
    for _ in range(rounds):
        for i, s in enumerate((a, b)):
            t = time.perf_counter()
            for _ in range(n):
                s.run(None, feed)
            ms[i].append((time.perf_counter() - t) / n * 1e3)
    row["fp32_ms"], row["rewritten_ms"] = float(np.median(ms[0])), float(np.median(ms[1]))
    row["ratios"] = sorted(x / y for x, y in zip(ms[0], ms[1]))
    return row


def _once(sess: Any, feed: Dict[str, np.ndarray]) -> float:
    t = time.perf_counter()
    sess.run(None, feed)
    return time.perf_counter() - t


def main() -> None:
    from sdk import corpus

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="corpus model names (default: every ONNX model)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: onnxruntime's default)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = ap.parse_args()
    names = args.models or corpus.names("onnx")
    print(f"{'model':22s} {'rewrites':44s} {'max abs':>9s} {'FP32 ms':>8s} {'rewritten':>9s} {'ratio (min-max)':>18s}")
    for name in names:
        r = measure(name, args.threads, args.rounds)
        what = ", ".join(f"{k} {v}" for k, v in r["rewrites"].items()) or "none"
        if "fp32_ms" not in r:
            print(f"{name:22s} {what:44s}")
            continue
        ratios = r["ratios"]
        print(f"{name:22s} {what:44s} {r['max_abs_diff']:9.2e} {r['fp32_ms']:8.2f} {r['rewritten_ms']:9.2f} "
              f"{r['fp32_ms'] / r['rewritten_ms']:6.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")


if __name__ == "__main__":
    main()
