"""Activation-weight balancing before float, side by side, on an attention recognizer of the corpus.

The same model, calibration, held-out and unseen inputs, quantized twice with the task's corpus
metric as budget: ``--no-balance`` (the fallback keeps the sensitive layers in float, as before) and
the default (a MatMul/Gemm fed by a LayerNorm is first tried in INT8 with SmoothQuant-style
balancing, :mod:`sdk.quantize.smooth`). Prints, for each: layers in float, layers balanced, the task
metric vs FP32 on the held-out inputs (what the budget read) and on unseen ones, wall time, and the
latency of FP32 and both INT8 models timed interleaved in this process (medians, ratios).

    python benchmarks/quantize_balancing.py                       # ppocr-v4-rec, 16/16/24 inputs
    python benchmarks/quantize_balancing.py --model ppocr-v4-rec --calib 32 --eval 16 --unseen 32
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ppocr-v4-rec")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--unseen", type=int, default=24)
    ap.add_argument("--min-task-metric", type=float, default=0.99, help="the budget (1-CER within 1 point: 0.99)")
    ap.add_argument("--threads", type=int, default=None, help="intra-op threads of the timing sessions")
    a = ap.parse_args()

    from sdk import corpus
    from sdk.corpus.tasks import run_reference
    from sdk.quantize import quantize
    from sdk.quantize.speed import latency_rounds

    path = str(corpus.fetch([a.model])[a.model])
    calib = corpus.sample_inputs(a.model, a.calib, seed=0)
    ev = corpus.sample_inputs(a.model, a.eval, seed=1)
    unseen = corpus.sample_inputs(a.model, a.unseen, seed=2)
    ref = run_reference(path, unseen)
    rows: Dict[str, Dict[str, Any]] = {}
    models: List[Any] = []
    for label, balance in (("float fallback (--no-balance)", False), ("balanced before float", True)):
        t0 = time.perf_counter()
        r = quantize(path, calib, eval_data=ev, task_metric=f"corpus:{a.model}", min_task_metric=a.min_task_metric,
                     workers=1, balance=balance, speed_check=False, use_cache=True)
        wall = time.perf_counter() - t0
        prec = r.report["layer_precision"]
        got = run_reference(r.model.proto.SerializeToString(), unseen)
        rows[label] = {"float": sum(1 for v in prec.values() if v["precision"] == "float"),
                       "balanced": sum(1 for v in prec.values() if "balanced" in v["precision"]),
                       "layers": len(prec), "held_out": r.report["accuracy"]["task_metric"],
                       "unseen": corpus.metric(a.model, ref, got), "wall_s": wall,
                       "balancing": r.report.get("balancing"), "failures": r.failures}
        models.append(r.model.proto)
    import onnx

    fp32 = onnx.load(path)
    rounds = latency_rounds([fp32] + models, unseen[0], rounds=9, round_s=0.2, threads=a.threads)
    ms = [float(np.median(x)) for x in rounds]
    print(f"{a.model}: {a.calib} calibration, {a.eval} held-out, {a.unseen} unseen inputs; budget task metric "
          f">= {a.min_task_metric}; FP32 {ms[0]:.2f} ms (median of {len(rounds[0])} interleaved rounds)")
    for (label, row), m in zip(rows.items(), ms[1:]):
        print(f"  {label:32s} float {row['float']:2d}/{row['layers']} balanced {row['balanced']}  task held-out "
              f"{row['held_out']:.4f} unseen {row['unseen']:.4f}  INT8 {m:.2f} ms = {ms[0] / m:.2f}x FP32  "
              f"wall {row['wall_s']:.0f} s" + (f"  failures: {row['failures']}" if row["failures"] else ""))
    b, f = list(rows.values())[1], list(rows.values())[0]
    print(f"  balanced / float fallback: float layers {b['float']}/{f['float']}, INT8 latency {ms[2] / ms[1]:.3f}x, "
          f"speedup {(ms[0] / ms[2]) / (ms[0] / ms[1]):.3f}x")
    print(f"  balancing: {b['balancing']}")


if __name__ == "__main__":
    main()
