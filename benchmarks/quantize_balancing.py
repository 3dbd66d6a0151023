"""Activation-weight balancing before float, side by side, on an attention recognizer of the corpus.

The same model, calibration, held-out and unseen inputs, quantized twice with the task's corpus
metric as budget: ``--no-balance`` (the fallback keeps the sensitive layers in float, as before) and
the default (a MatMul/Gemm fed by a LayerNorm is first tried in INT8 with SmoothQuant-style
balancing, :mod:`sdk.quantize.smooth`). Prints, for each: layers in float, layers balanced, the task
metric vs FP32 on the held-out inputs (what the budget read) and on unseen ones, wall time, and the
latency of FP32 and both INT8 models timed interleaved in this process (medians, ratios).

    python benchmarks/quantize_balancing.py                       # ppocr-v4-rec, 16/16/24 inputs
    python benchmarks/quantize_balancing.py --model ppocr-v4-rec --calib 32 --eval 16 --unseen 32
    python benchmarks/quantize_balancing.py --sites-only   # only the LayerNorm-fed layers in INT8

``--sites-only``: every layer in float but the MatMul/Gemm layers fed by a balanceable LayerNorm,
those in INT8 without and with balancing (no budget, no fallback): the error those layers alone add
at the outputs, cosine and task metric vs FP32 on the unseen inputs.
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
    ap.add_argument("--sites-only", action="store_true")
    a = ap.parse_args()
    if a.sites_only:
        return sites_only(a)

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


def sites_only(a: argparse.Namespace) -> None:
    from sdk import corpus
    from sdk.corpus.tasks import run_reference
    from sdk.quantize import quantize
    from sdk.quantize.api import _prepare
    from sdk.quantize.calibrate import calibrate, calibration_tensors
    from sdk.quantize.smooth import balance, balance_sites

    path = str(corpus.fetch([a.model])[a.model])
    calib = corpus.sample_inputs(a.model, a.calib, seed=0)
    unseen = corpus.sample_inputs(a.model, a.unseen, seed=2)
    model, _ = _prepare(path, corpus.get(a.model).input_shapes)
    sites = balance_sites(model.proto)
    keep = {c for s in sites for c in s.consumers}
    plan = calibration_tensors(model.proto)
    stats = calibrate(model, [(f, None) for f in calib], workers=1, plan=plan, tensors=plan["extremes"])
    bal = balance(model.proto, sites, stats)
    ref = run_reference(path, unseen)
    print(f"{a.model}: {len(sites)} balanceable sites, layers {sorted(keep)} alone in INT8 "
          f"({a.calib} calibration, {a.unseen} unseen inputs)")
    for label, proto in (("unbalanced", model.proto), ("balanced", bal.proto)):
        m = model.derive(proto)
        others = [n.name for n in proto.graph.node if n.name not in keep]
        r = quantize(m, calib, workers=1, budget=False, speed_check=False, use_cache=False, exclude=others)
        got = run_reference(r.model.proto.SerializeToString(), unseen)
        cos = [float(np.dot(x.ravel(), y.ravel()) / (np.linalg.norm(x) * np.linalg.norm(y)))
               for xr, yr in zip(ref, got) for x, y in zip(xr, yr)]
        err = [float(np.sum((x - y) ** 2) / np.sum(x * x)) for xr, yr in zip(ref, got) for x, y in zip(xr, yr)]
        print(f"  {label:10s} int8 layers {sorted(r.plan.layers)}  output cosine {np.mean(cos):.6f}  "
              f"relative squared error {np.mean(err):.3e}  task metric vs FP32 {corpus.metric(a.model, ref, got):.4f}")
    print(f"  scales s per site (max/min): {[round(float(s.max() / s.min()), 1) for s in bal.scales.values()]}")


if __name__ == "__main__":
    main()
