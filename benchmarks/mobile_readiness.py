"""Mobile EP node coverage of every corpus ONNX model, FP32 and INT8, in one table.

For each corpus ONNX model (input shapes fixed as the corpus manifest gives them, else the model's
own): the ``.ort`` conversion (yes/no, size), then per EP the nodes it takes by onnxruntime's
usability checker (``sdk.targets.onnxrt.readiness``), FP32 and INT8. The INT8 model of an EP is the
one its scheme writes (``sdk quantize --target onnxruntime --ep xnnpack|nnapi``; CoreML has no
scheme of its own: its INT8 column judges the NNAPI scheme's model, uint8 activations like CoreML's
QDQ support), calibrated on 8 corpus samples, no accuracy budget (every layer the scheme plans); a model
shipped as INT8 is judged as it is in the INT8 columns.

Usage: python benchmarks/mobile_readiness.py [--models a,b] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any, Dict

EPS = ("nnapi", "coreml", "xnnpack")
INT8_SCHEME = {"nnapi": "onnxruntime-nnapi", "coreml": "onnxruntime-nnapi", "xnnpack": "onnxruntime-xnnpack"}


def main() -> None:
    from sdk import corpus
    from sdk.errors import EdgeSDKError, UnsupportedModelError
    from sdk.quantize import quantize
    from sdk.targets.convert import convert
    from sdk.targets.onnxrt.readiness import ep_readiness

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    names = [n for n in (args.models.split(",") if args.models else corpus.names()) if corpus.get(n).format == "onnx"]
    paths = corpus.fetch(names)
    rows: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            src = Path(paths[name])
            shapes = dict(corpus.get(name).input_shapes) or None
            row: Dict[str, Any] = {}
            try:
                convert(src, Path(tmp) / f"{name}.ort")
                row["ort"] = (Path(tmp) / f"{name}.ort").stat().st_size
            except Exception as exc:  # noqa: BLE001 - the table says why
                row["ort"] = f"no: {exc}"
            int8: Dict[str, Any] = {}
            cm = corpus.get(name)
            calib = [{k: v for k, v in f.items() if k not in cm.input_values}   # fixed values are not fed
                     for f in corpus.sample_inputs(name, 8, seed=0)]
            for scheme in sorted(set(INT8_SCHEME.values())):
                out = Path(tmp) / f"{name}.{scheme}.onnx"
                try:
                    quantize(src, calib, output=out, scheme=scheme, workers=1,
                             use_cache=False, speed_check=False, budget=False, input_shapes=shapes,
                             input_values=dict(cm.input_values) or None,
                             sample_axes={k: None for k in cm.carry.values()} or None)   # a carried state has no sample axis
                except EdgeSDKError as exc:   # a model shipped as INT8 (smart-turn-v3) is judged as it is
                    if "already quantized" in str(exc):
                        out, row["shipped_int8"] = src, True
                    else:                     # the scheme quantizes no op of it: the INT8 cell says why
                        out = str(exc).splitlines()[0]
                int8[scheme] = out
            try:
                ep_readiness(src, EPS[0], shapes, session_assignment=False)
            except UnsupportedModelError as exc:   # silero-vad: a fixed shape breaks its dead If branch
                row["shapes"] = f"the model's own ({exc})"
                shapes = None
            for ep in EPS:
                fp = ep_readiness(src, ep, shapes, session_assignment=False)
                q8 = int8[INT8_SCHEME[ep]]
                q = ep_readiness(q8, ep, shapes, session_assignment=False) if isinstance(q8, Path) else None
                row[ep] = {"fp32": [fp.supported_nodes, fp.num_nodes, len(fp.partitions)],
                           "int8": [q.supported_nodes, q.num_nodes, len(q.partitions)] if q else f"no INT8: {q8}"}
            rows[name] = row
            cells = [f"{ep} {_cell(row[ep]['fp32'])} | {_cell(row[ep]['int8'])}" for ep in EPS]
            ort_cell = f"{row['ort'] / 1e6:.2f} MB" if isinstance(row["ort"], int) else row["ort"]
            print(f"{name:18s} .ort {ort_cell:10s} " + "   ".join(cells)
                  + (" [shapes: the model's own]" if "shapes" in row else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def _cell(v: Any) -> str:
    return f"{v[0]}/{v[1]} ({v[2]}p)" if isinstance(v, list) else "-"


if __name__ == "__main__":
    main()
