"""A TFLite graph under construction and its flatbuffer writer.

:class:`TFLGraph` holds tensors (shape, dtype, constant data, quantization) and builtin operators
(name such as ``CONV_2D``, input/output tensor indices, the options table's name and fields) of one
subgraph. :func:`write_flatbuffer` packs it with the ``flatbuffers`` package and TFLite's schema
bindings (``schema_py_generated.py`` as shipped in the ``ai-edge-litert`` wheel), with constant
buffers 16-byte aligned, the metadata entries given (name -> bytes), and the operator-code versions
and ``min_runtime_version`` entry that TFLite's converter would write (:mod:`.opversion`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...errors import MissingDependencyError

__all__ = ["TFLGraph", "TFLTensor", "TFLOp", "Quant", "schema", "write_flatbuffer"]

_DTYPES = {"float32": "FLOAT32", "float16": "FLOAT16", "int32": "INT32", "uint8": "UINT8", "int64": "INT64",
           "bool": "BOOL", "int16": "INT16", "int8": "INT8"}


def schema() -> Any:
    """TFLite's generated flatbuffer bindings (from the ``ai-edge-litert`` wheel)."""
    try:
        from ai_edge_litert import schema_py_generated as fb
    except ImportError as exc:
        raise MissingDependencyError("writing .tflite files", "ai-edge-litert",
                                     "pip install 'edgesdk[tflite]'") from exc
    return fb


@dataclass
class Quant:
    """Quantization of a tensor: per-tensor (one scale) or per-axis (``axis`` set)."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0

    @classmethod
    def tensor(cls, scale: float, zero_point: int) -> "Quant":
        return cls(np.array([scale], np.float32), np.array([zero_point], np.int64))


@dataclass
class TFLTensor:
    name: str
    shape: Tuple[int, ...]
    dtype: str = "float32"
    data: Optional[np.ndarray] = None
    quant: Optional[Quant] = None
    variable: bool = False
    onnx: str = ""                         # the ONNX tensor it holds ("" for none)
    perm: Optional[Tuple[int, ...]] = None  # it holds that ONNX value transposed by perm
    shape_signature: Optional[Tuple[int, ...]] = None  # -1 for a dim set at run time
    half: bool = False                     # a float16 weight behind DEQUANTIZE in the file it was read from


@dataclass
class TFLOp:
    code: str                              # BuiltinOperator name: "CONV_2D"
    inputs: List[int]
    outputs: List[int]
    options_type: Optional[str] = None     # BuiltinOptions name: "Conv2DOptions"
    options: Dict[str, Any] = field(default_factory=dict)
    source: str = ""                       # the ONNX node it came from
    custom_code: Optional[str] = None      # code "CUSTOM": the custom op's name and its options bytes
    custom_options: Optional[bytes] = None


class TFLGraph:
    """One subgraph: tensors, operators, inputs and outputs (tensor indices). The main graph also
    holds the other subgraphs of the model (``subgraphs``: a WHILE's condition and body), written
    after it: ``subgraphs[k]`` is the model's subgraph ``k + 1``."""

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.tensors: List[TFLTensor] = []
        self.ops: List[TFLOp] = []
        self.inputs: List[int] = []
        self.outputs: List[int] = []
        self._names: Dict[str, int] = {}
        self.subgraphs: List["TFLGraph"] = []

    def unique(self, name: str) -> str:
        if name not in self._names:
            return name
        k = 1
        while f"{name}_{k}" in self._names:
            k += 1
        return f"{name}_{k}"

    def add_tensor(self, name: str, shape: Sequence[int], dtype: str = "float32",
                   data: Optional[np.ndarray] = None, quant: Optional[Quant] = None) -> int:
        name = self.unique(name)
        if data is not None:
            data = np.array(data, dtype=np.dtype(dtype), order="C")    # a 0-d value stays a scalar
            shape = data.shape
        self.tensors.append(TFLTensor(name, tuple(int(d) for d in shape), dtype, data, quant))
        self._names[name] = len(self.tensors) - 1
        return len(self.tensors) - 1

    def const(self, name: str, value: Any, dtype: Optional[str] = None) -> int:
        arr = np.asarray(value)
        dt = dtype or ("float32" if arr.dtype.kind == "f" else "int32" if arr.dtype.kind in "iu" else str(arr.dtype))
        return self.add_tensor(name, arr.shape, dt, arr.astype(dt))

    def add_op(self, code: str, inputs: Sequence[int], outputs: Sequence[int], options_type: Optional[str] = None,
               source: str = "", **options: Any) -> TFLOp:
        op = TFLOp(code, list(inputs), list(outputs), options_type, dict(options), source)
        self.ops.append(op)
        return op

    def producers(self) -> Dict[int, int]:
        return {t: i for i, op in enumerate(self.ops) for t in op.outputs}

    def consumers(self) -> Dict[int, List[int]]:
        out: Dict[int, List[int]] = {}
        for i, op in enumerate(self.ops):
            for t in op.inputs:
                if t >= 0:
                    out.setdefault(t, []).append(i)
        return out

    def prune(self) -> None:
        """Drop operators whose outputs nobody reads and tensors nobody uses (renumbering)."""
        live = set(self.outputs)
        keep: List[TFLOp] = []
        for op in reversed(self.ops):
            if any(t in live for t in op.outputs):
                keep.append(op)
                live.update(t for t in op.inputs if t >= 0)
        self.ops = keep[::-1]
        used = sorted(live | set(self.inputs) | {t for op in self.ops for t in op.outputs})
        remap = {old: new for new, old in enumerate(used)}
        self.tensors = [self.tensors[i] for i in used]
        self._names = {t.name: i for i, t in enumerate(self.tensors)}
        for op in self.ops:
            op.inputs = [remap[t] if t >= 0 else -1 for t in op.inputs]
            op.outputs = [remap[t] for t in op.outputs]
        self.inputs = [remap[t] for t in self.inputs]
        self.outputs = [remap[t] for t in self.outputs]


def _aligned_buffer_type(fb: Any) -> Any:
    class AlignedBuffer(fb.BufferT):
        """A buffer whose bytes start on a 16-byte boundary (what XNNPACK and mmap readers want)."""

        def Pack(self, builder: Any) -> Any:  # noqa: N802 - flatbuffers' name
            off = None
            if self.data is not None:
                raw = self.data.tobytes()
                builder.StartVector(1, len(raw), 16)
                builder.head = builder.head - len(raw)
                builder.Bytes[builder.head:builder.head + len(raw)] = raw
                off = builder.EndVector()     # the length StartVector was given (flatbuffers >= 2)
            fb.BufferStart(builder)
            if off is not None:
                fb.BufferAddData(builder, off)
            return fb.BufferEnd(builder)

    return AlignedBuffer


def _subgraph(fb: Any, Buf: Any, g: TFLGraph, buffers: List[Any], codes: Dict[str, int], operator_codes: List[Any],
              versions: Mapping[str, int]) -> Any:
    """One ``SubGraphT`` of ``g``; its constants appended to ``buffers``, new operator codes to
    ``operator_codes`` (``codes``: their index by key)."""
    sub = fb.SubGraphT()
    sub.name = g.name
    sub.tensors = []
    for t in g.tensors:
        tt = fb.TensorT()
        tt.name = t.name
        tt.shape = np.array(t.shape, np.int32)
        if t.shape_signature is not None:
            tt.shapeSignature = np.array(t.shape_signature, np.int32)
        tt.type = getattr(fb.TensorType, _DTYPES[t.dtype])
        tt.isVariable = t.variable
        if t.data is not None:
            b = Buf()
            b.data = np.frombuffer(np.ascontiguousarray(t.data).tobytes(), np.uint8)
            buffers.append(b)
            tt.buffer = len(buffers) - 1
        else:
            tt.buffer = 0
        if t.quant is not None:
            q = fb.QuantizationParametersT()
            q.scale = np.asarray(t.quant.scale, np.float32).reshape(-1)
            q.zeroPoint = np.asarray(t.quant.zero_point, np.int64).reshape(-1)
            q.quantizedDimension = int(t.quant.axis)
            tt.quantization = q
        sub.tensors.append(tt)
    sub.operators = []
    for op in g.ops:
        key = op.code if op.custom_code is None else f"CUSTOM:{op.custom_code}"
        if key not in codes:
            oc = fb.OperatorCodeT()
            code = getattr(fb.BuiltinOperator, op.code)
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, fb.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
            oc.version = 1 if op.custom_code is not None else versions.get(op.code, 1)
            if op.custom_code is not None:
                oc.customCode = op.custom_code
            codes[key] = len(operator_codes)
            operator_codes.append(oc)
        o = fb.OperatorT()
        o.opcodeIndex = codes[key]
        if op.custom_options is not None:
            o.customOptions = np.frombuffer(op.custom_options, np.uint8)
            o.customOptionsFormat = 0
        o.inputs = np.array(op.inputs, np.int32)
        o.outputs = np.array(op.outputs, np.int32)
        if op.options_type:
            opts = getattr(fb, op.options_type + "T")()
            for k, v in op.options.items():
                if not hasattr(opts, k):
                    raise AttributeError(f"{op.options_type} has no field {k}")
                setattr(opts, k, v)
            o.builtinOptionsType = getattr(fb.BuiltinOptions, op.options_type)
            o.builtinOptions = opts
        sub.operators.append(o)
    sub.inputs = np.array(g.inputs, np.int32)
    sub.outputs = np.array(g.outputs, np.int32)
    return sub


def write_flatbuffer(g: TFLGraph, metadata: Optional[Mapping[str, bytes]] = None,
                     description: str = "edgesdk", signature: Optional[str] = None) -> bytes:
    """The ``.tflite`` bytes of ``g`` (schema version 3) with ``metadata`` entries and, when
    ``signature`` names one, a SignatureDef over the graph's inputs/outputs (LiteRT lists a
    signature's outputs sorted by name, not in the graph's order, so none by default)."""
    import flatbuffers

    fb = schema()
    Buf = _aligned_buffer_type(fb)
    model = fb.ModelT()
    model.version = 3
    model.description = description
    buffers: List[Any] = [Buf()]
    codes: Dict[str, int] = {}
    model.operatorCodes = []
    from .opversion import MIN_RUNTIME_VERSION_KEY, code_versions, min_runtime_version, runtime_version_bytes

    graphs = [g] + list(g.subgraphs)
    versions: Dict[str, int] = {}
    for sg in graphs:
        for code, v in code_versions(sg).items():
            versions[code] = max(versions.get(code, 1), v)
    model.subgraphs = [_subgraph(fb, Buf, sg, buffers, codes, model.operatorCodes, versions) for sg in graphs]
    model.signatureDefs = []
    if signature:
        sig = fb.SignatureDefT()
        sig.signatureKey = signature
        sig.subgraphIndex = 0
        sig.inputs, sig.outputs = [], []
        for idx, dst in ((g.inputs, sig.inputs), (g.outputs, sig.outputs)):
            for i in idx:
                tm = fb.TensorMapT()
                tm.name, tm.tensorIndex = g.tensors[i].name, i
                dst.append(tm)
        model.signatureDefs = [sig]
    model.metadata = []
    entries = dict(metadata or {})
    runtime = min_runtime_version(versions)
    if runtime and MIN_RUNTIME_VERSION_KEY not in entries:
        entries[MIN_RUNTIME_VERSION_KEY] = runtime_version_bytes(runtime)
    for name, data in entries.items():
        b = Buf()
        b.data = np.frombuffer(bytes(data), np.uint8)
        buffers.append(b)
        md = fb.MetadataT()
        md.name = name
        md.buffer = len(buffers) - 1
        model.metadata.append(md)
    model.buffers = buffers
    total = sum(0 if b.data is None else len(b.data) for b in buffers)
    builder = flatbuffers.Builder(total + 1024 * 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def read_metadata(data: bytes) -> Dict[str, bytes]:
    """The metadata entries (name -> bytes) of a ``.tflite`` file's bytes."""
    fb = schema()
    m = fb.Model.GetRootAs(data, 0)
    out: Dict[str, bytes] = {}
    for i in range(m.MetadataLength()):
        md = m.Metadata(i)
        buf = m.Buffers(md.Buffer())
        name = md.Name().decode() if md.Name() else ""
        out[name] = buf.DataAsNumpy().tobytes() if buf.DataLength() else b""
    return out
