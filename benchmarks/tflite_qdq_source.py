"""INT8 ``.tflite`` from a model that is already QDQ, side by side in one run:
``sdk convert qdq.onnx --int8 -o m.tflite`` (no ``--calib``: the source's own scales) against the two
float files of the same model, on the corpus models shipped quantized (smart-turn-v3).

Per model: conversion wall time; the int8 file's ops by precision; agreement of each file with the
QDQ model on onnxruntime over unseen corpus samples (seed 2), both as onnxruntime runs it by default
(fused int8 kernels: what the model's users get) and unfused (``ORT_DISABLE_ALL``: the Q/DQ
arithmetic as written): corpus task metric, least cosine, max abs error; LiteRT latency (default
delegates, 1 and 2 threads, rounds interleaved) of

- ``int8``: the full-integer file at the source's scales;
- ``fakeq``: ``sdk convert`` without ``--int8`` (each activation pair kept as QUANTIZE -> DEQUANTIZE);
- ``float``: the source with its activation pairs removed and weights dequantized, converted (the
  float model the INT8 one stands for).

The machine may be shared: latencies are medians of interleaved rounds, compare the ratios.

    python benchmarks/tflite_qdq_source.py [--models smart-turn-v3] [--eval 16] [--runs 20]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tflite_16x8 import _file_ops  # noqa: E402
from tflite_int8 import _cos, _latencies, _outputs  # noqa: E402


def _without_activation_pairs(proto: Any) -> Any:
    """``proto`` with each activation QuantizeLinear -> DequantizeLinear pair bypassed (weights keep
    their DequantizeLinear: the converter folds it into float constants)."""
    import onnx

    from sdk.targets.tflite.convert import activation_pairs

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    inits = {t.name for t in out.graph.initializer}
    q_of = {n.output[0]: n for n in out.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits}
    bypass = {n.output[0]: q_of[n.input[0]].input[0] for n in out.graph.node
              if n.op_type == "DequantizeLinear" and n.input[0] in q_of}
    keep = [n for n in out.graph.node if not (n.op_type == "QuantizeLinear" and n.output[0] in q_of)
            and not (n.op_type == "DequantizeLinear" and n.output[0] in bypass)]
    outs = {o.name for o in out.graph.output}
    for n in keep:
        for k, name in enumerate(n.input):
            n.input[k] = bypass.get(name, name)
    for o in out.graph.output:
        if o.name in bypass:       # a graph output written by a DequantizeLinear: its source takes the name
            src = bypass[o.name]
            for n in keep:
                n.output[:] = [o.name if x == src else x for x in n.output]
                n.input[:] = [o.name if x == src else x for x in n.input]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    assert activation_pairs(out) == 0 and outs == {o.name for o in out.graph.output}
    return out


def bench_model(name: str, work: Path, args: argparse.Namespace) -> Dict[str, Any]:
    import onnx
    import onnxruntime as ort

    from sdk import corpus
    from sdk.targets.convert import ConvertOptions, convert
    from sdk.targets.tflite.convert import activation_pairs

    src = corpus.path(name)
    shapes = dict(corpus.get(name).input_shapes)
    proto = onnx.load(str(src))
    row: Dict[str, Any] = {"model": name, "activation_pairs": activation_pairs(proto)}
    paths = {"int8": work / f"{name}.int8.tflite", "fakeq": work / f"{name}.fakeq.tflite",
             "float": work / f"{name}.float.tflite"}
    t0 = time.perf_counter()
    convert(src, paths["int8"], ConvertOptions(input_shapes=shapes, int8=True))
    row["convert_int8_s"] = time.perf_counter() - t0
    convert(src, paths["fakeq"], ConvertOptions(input_shapes=shapes))
    stripped = work / f"{name}.float.onnx"
    onnx.save(_without_activation_pairs(proto), str(stripped))
    convert(stripped, paths["float"], ConvertOptions(input_shapes=shapes))
    row["int8_ops"] = _file_ops(paths["int8"])
    names = [o.name for o in proto.graph.output]
    unseen = corpus.sample_inputs(name, args.eval, seed=2)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    refs = {"ort": ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]),
            "ort_unfused": ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])}
    ref = {k: [s.run(None, f) for f in unseen] for k, s in refs.items()}
    row["ort_vs_unfused_task"] = corpus.metric(name, ref["ort_unfused"], ref["ort"])
    for k, p in paths.items():
        got = _outputs(str(p), unseen, names)
        for r, rows in ref.items():
            row[f"{k}_vs_{r}_task"] = corpus.metric(name, rows, got)
            row[f"{k}_vs_{r}_cos"] = min(_cos(g, x) for gs, xs in zip(got, rows) for g, x in zip(gs, xs))
            row[f"{k}_vs_{r}_maxabs"] = max(float(np.abs(g - x).max()) for gs, xs in zip(got, rows)
                                           for g, x in zip(gs, xs))
        row[f"{k}_MB"] = p.stat().st_size / 1e6
    for threads in (1, 2):
        lat = _latencies({k: str(p) for k, p in paths.items()}, unseen[0], threads, args.runs)
        for k, ms in lat.items():
            row[f"{k}_ms_t{threads}"] = ms
        row[f"float_over_int8_t{threads}"] = lat["float"] / lat["int8"]
        row[f"fakeq_over_int8_t{threads}"] = lat["fakeq"] / lat["int8"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smart-turn-v3")
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args()
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            try:
                rows.append(bench_model(name, Path(tmp), args))
            except Exception as exc:  # noqa: BLE001 - one model's failure is a row of the table
                rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(rows[-1], indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print("| model | int8 ops i8/f32 | vs onnxruntime: task / least cos (int8 ; fakeq ; float) "
          "| vs unfused: task (int8 ; fakeq) | float/int8 1T ; 2T | fakeq/int8 1T ; 2T |")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['error']} |")
            continue
        print(f"| {r['model']} | {r['int8_ops'].get('int8', 0)}/{r['int8_ops'].get('float32', 0)} "
              f"| {r['int8_vs_ort_task']:.3f} / {r['int8_vs_ort_cos']:.4f} ; {r['fakeq_vs_ort_task']:.3f} / "
              f"{r['fakeq_vs_ort_cos']:.4f} ; {r['float_vs_ort_task']:.3f} / {r['float_vs_ort_cos']:.4f} "
              f"| {r['int8_vs_ort_unfused_task']:.3f} ; {r['fakeq_vs_ort_unfused_task']:.3f} "
              f"| {r['float_over_int8_t1']:.2f}x ; {r['float_over_int8_t2']:.2f}x "
              f"| {r['fakeq_over_int8_t1']:.2f}x ; {r['fakeq_over_int8_t2']:.2f}x |")


if __name__ == "__main__":
    main()
