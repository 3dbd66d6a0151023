"""A float ``.tflite`` file read back into a :class:`~.tflgraph.TFLGraph` (primary subgraph): the
tensors with their constant data, the operators with their options, custom operators kept byte
for byte, and float16 / int8 weights behind a DEQUANTIZE folded into float32 constants, so that the
int8 pass (:mod:`.int8`) can rewrite the graph the same way it rewrites a converted ONNX model.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from ...errors import ModelFormatError
from .tflgraph import TFLGraph, TFLOp, schema

__all__ = ["read_tflite"]

_NP = {"FLOAT32": "float32", "FLOAT16": "float16", "INT32": "int32", "UINT8": "uint8", "INT64": "int64",
       "BOOL": "bool", "INT16": "int16", "INT8": "int8"}


def _names(enum: Any) -> Dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_") and isinstance(v, int)}


def read_tflite(data: bytes) -> Tuple[TFLGraph, Dict[str, Any]]:
    """``(graph, info)``; raises :class:`ModelFormatError` for a file with several subgraphs (control
    flow) or tensor types the rewrite does not handle."""
    fb = schema()
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAs(data, 0))
    if not m.subgraphs or len(m.subgraphs) != 1:
        raise ModelFormatError(f"the model has {len(m.subgraphs or [])} subgraphs (control flow such as WHILE); "
                               "only single-graph .tflite models quantize",
                               "quantize its ONNX source instead: sdk quantize model.onnx --target tflite -o m.tflite")
    ops_names, opt_names, types = _names(fb.BuiltinOperator), _names(fb.BuiltinOptions), _names(fb.TensorType)
    sub = m.subgraphs[0]
    g = TFLGraph()
    for t in sub.tensors:
        dtype = _NP.get(types.get(t.type, ""), None)
        if dtype is None:
            raise ModelFormatError(f"tensor '{t.name.decode()}' has type {types.get(t.type, t.type)}")
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        buf = m.buffers[t.buffer] if t.buffer < len(m.buffers) else None
        arr = None
        if buf is not None and buf.data is not None and len(buf.data):
            arr = np.frombuffer(bytes(np.asarray(buf.data, np.uint8)), dtype).reshape(shape)
        idx = g.add_tensor(t.name.decode() if t.name else f"t{len(g.tensors)}", shape, dtype, arr)
        g.tensors[idx].onnx = g.tensors[idx].name if arr is None else ""
        q = t.quantization
        if q is not None and q.scale is not None and len(q.scale):
            from .tflgraph import Quant

            g.tensors[idx].quant = Quant(np.asarray(q.scale, np.float32), np.asarray(q.zeroPoint, np.int64),
                                         int(q.quantizedDimension))
        g.tensors[idx].variable = bool(t.isVariable)
    for o in sub.operators:
        oc = m.operatorCodes[o.opcodeIndex]
        code = ops_names[max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))]
        options: Dict[str, Any] = {}
        otype = None
        if o.builtinOptions is not None:
            otype = opt_names[o.builtinOptionsType]
            options = {k: v for k, v in vars(o.builtinOptions).items()}
        op = TFLOp(code, [int(i) for i in o.inputs], [int(i) for i in o.outputs], otype, options)
        if code == "CUSTOM":
            op.custom_code = oc.customCode.decode() if oc.customCode else ""
            op.custom_options = bytes(np.asarray(o.customOptions, np.uint8)) if o.customOptions is not None else b""
        g.ops.append(op)
    g.inputs = [int(i) for i in sub.inputs]
    g.outputs = [int(i) for i in sub.outputs]
    customs = sorted({op.custom_code or "" for op in g.ops if op.code == "CUSTOM"})
    folded = _fold_dequantize(g)
    rewritten = _builtin_transpose_conv(g)
    g.prune()
    return g, {"dequantize_folded": folded, "custom_ops": customs, "custom_ops_as_builtin": rewritten}


def _builtin_transpose_conv(g: TFLGraph) -> int:
    """MediaPipe's ``Convolution2DTransposeBias`` custom op (options: int32 padding 1=SAME 2=VALID,
    stride w, stride h; inputs: input, filter [O, kh, kw, I], bias) -> the builtin TRANSPOSE_CONV
    with its bias input, which the builtin kernels (and so the calibration run) and int8 have."""
    n = 0
    for op in g.ops:
        if op.code != "CUSTOM" or op.custom_code != "Convolution2DTransposeBias" or len(op.custom_options or b"") < 12:
            continue
        pad, sw, sh = (int(v) for v in np.frombuffer((op.custom_options or b"")[:12], np.int32))
        if pad not in (1, 2):
            continue
        x, w, b = op.inputs[:3]
        shape = g.const(g.tensors[op.outputs[0]].name + "/output_shape",
                        np.array(g.tensors[op.outputs[0]].shape, np.int32), "int32")
        op.code, op.custom_code, op.custom_options = "TRANSPOSE_CONV", None, None
        op.inputs = [shape, w, x, b]
        op.options_type = "TransposeConvOptions"
        op.options = {"padding": 0 if pad == 1 else 1, "strideW": sw, "strideH": sh, "fusedActivationFunction": 0}
        n += 1
    return n


def _fold_dequantize(g: TFLGraph) -> int:
    """DEQUANTIZE of a constant (float16 or quantized weights) -> a float32 constant in its place."""
    folded = 0
    keep: List[TFLOp] = []
    for op in g.ops:
        src = g.tensors[op.inputs[0]] if op.inputs else None
        if op.code == "DEQUANTIZE" and src is not None and src.data is not None:
            arr = src.data.astype(np.float32)
            if src.quant is not None and src.dtype in ("int8", "uint8", "int16"):
                q = src.quant
                shape = [1] * arr.ndim
                if q.scale.size > 1:
                    shape[q.axis] = -1
                arr = (arr - q.zero_point.reshape(shape)) * q.scale.reshape(shape)
            out = g.tensors[op.outputs[0]]
            out.data, out.dtype, out.onnx = np.ascontiguousarray(arr, np.float32), "float32", ""
            out.half = src.dtype == "float16"
            folded += 1
            continue
        keep.append(op)
    g.ops = keep
    return folded
