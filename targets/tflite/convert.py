"""ONNX -> ``.tflite`` without TensorFlow: ``sdk convert model.onnx -o model.tflite``.

Steps: fix the input shapes and fold every constant subgraph (:mod:`.onnx_prep`), lower each ONNX
node to TFLite builtin operators with NCHW activations kept NHWC inside (:mod:`.onnx_lower`), fuse
Relu/Relu6 into the op before them, and write the flatbuffer with TFLite's schema (:mod:`.tflgraph`).
With ``--int8`` the model is first quantized by :func:`sdk.quantize.quantize` with the ``tflite``
scheme (the same calibration statistics, methods, budget and fallback as the QDQ ONNX model), and
the QDQ graph is written as a full-integer ``.tflite`` (:mod:`.int8`).

The file's metadata entry ``edgesdk.onnx`` (JSON) maps every TFLite tensor that holds an ONNX
tensor back to its ONNX name and layout (``perm``: the TFLite tensor is the ONNX value transposed by
it), and records the source model's sha256 and the input/output layouts.

Converter options (``--option KEY=VALUE``): ``io_layout=onnx|nhwc`` (graph inputs/outputs keep
ONNX's NCHW, the default, or are NHWC), ``io=float|int8`` (INT8 only: float inputs/outputs with
QUANTIZE/DEQUANTIZE at the edges, or int8 ones), ``method``, ``calib_limit``, ``signature=KEY`` (add a
SignatureDef, e.g. ``serving_default``, for tools that drive models through one, such as
ai-edge-quantizer; off by default because LiteRT lists a signature's outputs sorted by name, not in the
ONNX graph's order).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from ...errors import InputError
from ..convert import ConvertOptions, ConvertResult

__all__ = ["convert_to_tflite", "onnx_to_tflite_bytes", "write_qdq_tflite", "METADATA_KEY", "onnx_names"]

METADATA_KEY = "edgesdk.onnx"
_OPTIONS = ("io_layout", "io", "method", "calib_limit", "signature")


def _metadata(lw: Any, source_sha256: str, extra: Mapping[str, Any]) -> bytes:
    g = lw.g
    tensors: Dict[str, Any] = {}
    for t in g.tensors:
        if t.data is not None:
            continue
        if t.onnx and _holds(lw, t):
            tensors[t.name] = {"onnx": t.onnx, "perm": list(t.perm) if t.perm else None}
    doc = {"schema": "edgesdk.tflite-onnx/1", "source_sha256": source_sha256,
           "inputs": {g.tensors[i].name: tensors.get(g.tensors[i].name) for i in g.inputs},
           "outputs": {g.tensors[i].name: tensors.get(g.tensors[i].name) for i in g.outputs},
           "tensors": tensors, **extra}
    return json.dumps(doc, sort_keys=True).encode()


def _holds(lw: Any, t: Any) -> bool:
    """Tensor ``t`` holds its ONNX value (in layout ``t.perm``), not only its quantization: a 1-D conv's
    ``[N, 1, L, C]`` copy or a ConvTranspose's blocks before DEPTH_TO_SPACE are left out of the map."""
    from .onnx_lower import _stored

    shape = lw.p.shapes.get(t.onnx)
    return shape is None or tuple(t.shape) == _stored(shape, t.perm)


def onnx_to_tflite_bytes(proto: Any, input_shapes: Optional[Mapping[str, Sequence[int]]] = None, *,
                         io_layout: str = "onnx", int8_io: Optional[str] = None, source_sha256: str = "",
                         signature: Optional[str] = None, all_float_ok: bool = False) -> Dict[str, Any]:
    """Convert an ONNX ``ModelProto`` (float, or QDQ when ``int8_io`` is ``"float"`` or ``"int8"``;
    ``all_float_ok``: a quantizer's model with every layer kept in float is written float, not refused).

    Returns ``{"data": bytes, "ops": {op: count}, "notes": [...], "tensors": n, "folded": n}``;
    raises :class:`ConversionError` before returning anything for a node TFLite cannot express."""
    from .int8 import transpose_conv_blocks
    from .onnx_lower import lower
    from .onnx_prep import prepare
    from .tflgraph import write_flatbuffer

    if io_layout not in ("onnx", "nhwc"):
        raise InputError(f"option io_layout={io_layout!r}", "use io_layout=onnx or io_layout=nhwc")
    prep = prepare(proto, input_shapes)
    lw = lower(prep, io_layout, fake_quant=int8_io is None)
    notes = list(prep.notes)
    pairs = sum(1 for op in lw.g.ops if op.code == "QUANTIZE") if int8_io is None else 0
    if pairs:
        notes.append(f"{pairs} activation QuantizeLinear/DequantizeLinear pair(s) of the QDQ source kept as "
                     "QUANTIZE -> DEQUANTIZE: this float file computes the same fake quantization")
    extra: Dict[str, Any] = {"io_layout": io_layout}
    if int8_io is None or not lw.qparams:       # a float file (quantize_graph rewrites the int8 ones)
        transpose_conv_blocks(lw)
    if int8_io is not None and not lw.qparams and all_float_ok:
        floats = sum(1 for op in lw.g.ops if op.code not in ("QUANTIZE", "DEQUANTIZE"))
        note = "the quantizer kept every layer in float: the file is float" + \
            (" (float inputs and outputs, not int8)" if int8_io == "int8" else "")
        extra["int8"] = {"io": "float", "ops_int8": 0, "ops_int16": 0, "ops_float": floats, "notes": [note]}
        notes.append(note)
    elif int8_io is not None:
        from .int8 import quantize_graph

        # the 16x8 layers of the quantizer's fallback: their outputs carry int16 Q/DQ in the source
        int16 = {t.name for t in lw.g.tensors if t.data is None and t.onnx in lw.qparams16}
        info = quantize_graph(lw, io=int8_io, int16=int16)
        extra["int8"] = {"io": int8_io, **info}
        notes.extend(info.get("notes", []))
    data = write_flatbuffer(lw.g, {METADATA_KEY: _metadata(lw, source_sha256, extra)},
                            description="edgesdk onnx->tflite", signature=signature)
    ops: Dict[str, int] = {}
    for op in lw.g.ops:
        ops[op.code] = ops.get(op.code, 0) + 1
    return {"data": data, "ops": ops, "notes": notes, "tensors": len(lw.g.tensors), "folded": prep.folded,
            "metadata": extra}


def write_qdq_tflite(proto: Any, output: Path, *, io: str = "float",
                     input_shapes: Optional[Mapping[str, Sequence[int]]] = None, source_sha256: str = "",
                     io_layout: str = "onnx", converted: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Write a QDQ ONNX model (the quantizer's ``tflite`` scheme) as a full-integer ``.tflite``
    (atomically); returns the conversion record (ops, int8/float op counts, bytes). ``converted``: this
    same conversion, already made (the quantizer's guard judged those bytes), written as it is."""
    from ...atomic import atomic_write

    res = converted or onnx_to_tflite_bytes(proto, input_shapes, io_layout=io_layout, int8_io=io,
                                            source_sha256=source_sha256, all_float_ok=True)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(output, res["data"])
    return {"path": str(output), "bytes": len(res["data"]), "ops": res["ops"], "io": io,
            **{k: v for k, v in res["metadata"]["int8"].items() if k != "notes"}, "notes": res["notes"]}


def onnx_names(data: bytes) -> Dict[str, Any]:
    """The ``edgesdk.onnx`` metadata of a converted ``.tflite`` (bytes), or ``{}``."""
    from .tflgraph import read_metadata

    raw = read_metadata(data).get(METADATA_KEY)
    return json.loads(raw.decode()) if raw else {}


def activation_pairs(proto: Any) -> int:
    """How many QuantizeLinear nodes of ``proto`` quantize an activation (not an initializer): a QDQ
    model's own quantization, which ``--int8`` without ``--calib`` converts."""
    inits = {t.name for t in proto.graph.initializer}
    return sum(1 for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input and n.input[0] not in inits)


def _check_options(options: ConvertOptions) -> None:
    options.check(".tflite", _OPTIONS)
    io = str(options.extra.get("io", "float"))
    if io not in ("float", "int8"):
        raise InputError(f"option io={io!r}", "use io=float or io=int8")


def convert_to_tflite(source: Path, output: Path, options: ConvertOptions) -> ConvertResult:
    """The ``.tflite`` converter of :data:`sdk.targets.convert.CONVERTERS`."""
    from ...atomic import atomic_write
    from ...model import Model

    _check_options(options)
    t0 = time.perf_counter()
    m = Model.load(source)
    if m.format != "onnx":
        raise InputError(f"'{source}' is a {m.format} model; the .tflite converter reads ONNX")
    io_layout = str(options.extra.get("io_layout", "onnx"))
    signature = str(options.extra["signature"]) if options.extra.get("signature") else None
    notes: list = []
    details: Dict[str, Any] = {}
    sha256 = m.sha256   # the source's, also when the file is made from its specialized copy
    own = options.int8 and options.calib is None and activation_pairs(m.proto) > 0
    if options.input_values and (own or not options.int8):   # --int8 --calib: the quantizer resolves them
        m, notes, details["specialized"] = _specialized(m, options)
    if own:     # a QDQ source without --calib: its own scales
        pairs = activation_pairs(m.proto)
        notes.append(f"--int8 without --calib: the source's own quantization ({pairs} activation "
                     "QuantizeLinear pairs); its tensors without a pair stay float")
        details["quantize"] = {"source": "the model's Q/DQ", "activation_pairs": pairs}
        res = onnx_to_tflite_bytes(m.proto, options.input_shapes, io_layout=io_layout,
                                   int8_io=str(options.extra.get("io", "float")), source_sha256=sha256,
                                   signature=signature)
    elif options.int8:
        proto, qinfo = _quantized_proto(m, options)
        notes.extend(qinfo.pop("notes", []))
        details["quantize"] = qinfo
        res = onnx_to_tflite_bytes(proto, options.input_shapes, io_layout=io_layout,
                                   int8_io=str(options.extra.get("io", "float")), source_sha256=sha256,
                                   signature=signature)
    else:
        if options.extra.get("io") not in (None, "float"):
            raise InputError("option io=int8 needs --int8", "add --int8 --calib DIR")
        res = onnx_to_tflite_bytes(m.proto, options.input_shapes, io_layout=io_layout, source_sha256=sha256,
                                   signature=signature)
    notes.extend(res["notes"])
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(output, res["data"])
    details.update({"ops": res["ops"], "tensors": res["tensors"], "constants_folded": res["folded"],
                    "bytes": len(res["data"])})
    return ConvertResult(source=str(source), output=str(output), format="tflite-int8" if options.int8 else "tflite",
                         seconds=time.perf_counter() - t0, notes=notes, details=details)


def _specialized(m: Any, options: ConvertOptions) -> Any:
    """``m`` with the inputs ``--input-value`` gives made constants and the Ifs they (or the fixed
    shapes) decide replaced by their branch, as ``sdk convert -o flat.onnx`` writes it and checked
    against ``m`` the same way: ``(Model, notes, record)``."""
    from ..measure import as_values
    from ..onnx_flat import specialization_notes, specialize_checked

    values = as_values(options.input_values, m.inputs)
    spec, check = specialize_checked(m, values, {k: list(v) for k, v in options.input_shapes.items()})
    return m.derive(spec.proto), specialization_notes(spec, values), {**spec.to_dict(), "check": check}


convert_to_tflite.takes_input_values = True  # type: ignore[attr-defined]
#: --int8 without --calib converts a QDQ model at its own scales (the converter checks it has some)
convert_to_tflite.int8_from_qdq = True  # type: ignore[attr-defined]


def _quantized_proto(m: Any, options: ConvertOptions) -> Any:
    """The QDQ model that :func:`sdk.quantize.quantize` makes with the ``tflite`` scheme."""
    from ...quantize import quantize

    kw: Dict[str, Any] = {"scheme": "tflite", "input_shapes": options.input_shapes or None,
                          "speed_check": False, "budget": False}
    if "method" in options.extra:
        kw["method"] = str(options.extra["method"])
    if "calib_limit" in options.extra:
        kw["calib_limit"] = int(options.extra["calib_limit"])
    if options.calib is None:
        raise InputError("--int8 needs --calib: the data the INT8 ranges are calibrated on "
                         "(a model with Q/DQ pairs of its own converts without it)")
    if options.input_values:
        kw["input_values"] = options.input_values
    res = quantize(m, options.calib, **kw)
    info = {"method": res.report.get("method"), "layers": len(res.plan.layers), "notes": list(res.failures)}
    return res.model.proto, info
