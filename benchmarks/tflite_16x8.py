"""16x8 before float, side by side in one run: ONNX -> integer-only ``.tflite``
(``sdk quantize model.onnx --target tflite --io int8 -o m.tflite``) on corpus models, with the
fallback's layers in 16x8 first (the default for ``--io int8``) against float only
(``--fallback-precision float``), from one calibration.

Per model and fallback precision: quantize wall time; the layers the fallback moved and where to; the
written file's ops by precision and whether it is integer-only (no float op: what an Edge TPU or a
microcontroller needs); the corpus task metric against onnxruntime FP32 on unseen samples (seed 2),
read from the file run by LiteRT; LiteRT latency (default delegates, 1 thread, rounds interleaved with
the float file's). The budget is the corpus task metric on held-out samples (``--eval``, seed 1), as in
``benchmarks/tflite_int8.py``; ``--default-budget`` uses the product default instead (calibration only,
the guard's held-out share). The machine may be shared: latencies are medians of interleaved rounds.

    python benchmarks/tflite_16x8.py [--models a,b] [--calib 32] [--eval 16] [--runs 20] [--default-budget]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tflite_int8 import BUDGET, _latencies, _outputs  # noqa: E402


def _file_ops(path: Path) -> Dict[str, int]:
    from sdk.targets.tflite.reader import read_tflite

    g, _ = read_tflite(path.read_bytes())
    out = {"int8": 0, "int16": 0, "float32": 0}
    for op in g.ops:
        if op.code in ("QUANTIZE", "DEQUANTIZE") or not op.outputs:
            continue
        dt = g.tensors[op.outputs[0]].dtype
        out[dt] = out.get(dt, 0) + 1
    return out


def bench_model(name: str, work: Path, args: argparse.Namespace) -> List[Dict[str, Any]]:
    import onnxruntime as ort

    from sdk import corpus
    from sdk.quantize import quantize
    from sdk.targets.convert import ConvertOptions, convert

    src = corpus.path(name)
    shapes = dict(corpus.get(name).input_shapes)
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    unseen = corpus.sample_inputs(name, args.eval, seed=2)
    ref = [sess.run(None, f) for f in unseen]
    calib = corpus.sample_inputs(name, args.calib, seed=0)
    flt = work / f"{name}.tflite"
    convert(src, flt, ConvertOptions(input_shapes=shapes))
    budget: Dict[str, Any] = {} if args.default_budget else {
        "eval_data": corpus.sample_inputs(name, args.eval, seed=1), "task_metric": f"corpus:{name}",
        "min_task_metric": BUDGET.get(name, 0.95)}
    rows: List[Dict[str, Any]] = []
    paths = {"fp32": str(flt)}
    for precision in ("int16", "float"):
        out = work / f"{name}.{precision}.tflite"
        t0 = time.perf_counter()
        res = quantize(src, calib, scheme="tflite", tflite_io="int8", fallback_precision=precision,
                       input_shapes=shapes or None, speed_check=False, use_cache=False, output=out, **budget)
        rep = res.report
        prec = [v["precision"] for v in rep["layer_precision"].values()]
        ops = _file_ops(out)
        rows.append({"model": name, "asked": precision, "quantize_s": time.perf_counter() - t0,
                     "fallback": rep["fallback"]["precision"], "layers_16x8": prec.count("16x8"),
                     "layers_float": prec.count("float"), "layers": len(prec), "ops": ops,
                     "integer_only": ops.get("float32", 0) == 0,
                     "task": corpus.metric(name, ref, _outputs(str(out), unseen, names)),
                     "failures": res.failures})
        paths["q_" + precision] = str(out)
    lat = _latencies(paths, unseen[0], 1, args.runs)
    for r in rows:
        r["ms_t1"], r["float_ms_t1"] = lat["q_" + r["asked"]], lat["fp32"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(BUDGET))
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--default-budget", action="store_true", help="the product default (guard), not --eval")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tflite_16x8_"))
    rows: List[Dict[str, Any]] = []
    for name in args.models.split(","):
        try:
            rows.extend(bench_model(name, work, args))
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row of the table
            rows.append({"model": name, "error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"})
        for r in rows[-2:]:
            print(json.dumps(r, default=float))
    print()
    print("model | asked | fallback | 16x8 / float / layers | ops int8/int16/float | integer-only | task | "
          "quantize s | ms (1T) | float ms | failures")
    for r in rows:
        if "error" in r:
            print(f"{r['model']} | error: {r['error']}")
            continue
        o = r["ops"]
        print(f"{r['model']} | {r['asked']} | {r['fallback']} | {r['layers_16x8']} / {r['layers_float']} / "
              f"{r['layers']} | {o.get('int8', 0)}/{o.get('int16', 0)}/{o.get('float32', 0)} | {r['integer_only']} | "
              f"{r['task']:.4f} | {r['quantize_s']:.1f} | {r['ms_t1']:.2f} | {r['float_ms_t1']:.2f} | "
              f"{'; '.join(r['failures']) or '-'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
