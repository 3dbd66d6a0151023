"""ORT format model handler (``.ort``, what ONNX Runtime Mobile loads): parse, validate, inputs,
outputs, opset and inspect, read straight from the flatbuffer with the schema bindings that the
onnxruntime package ships (``onnxruntime/tools/ort_format_model/ort_flatbuffers_py``; they need the
``flatbuffers`` package, a dependency of onnxruntime). Nothing here creates a session.

An ORT format file is the ``InferenceSession`` table of onnxruntime's ``ort.fbs`` with the file
identifier ``ORTM`` at bytes 4..8: the graph after the optimisations chosen at conversion (nodes may
be contrib ops such as ``com.microsoft.FusedConv``), its initializers, and optionally saved runtime
optimisations. ``sdk convert model.onnx -o model.ort`` writes one (``sdk.targets.onnxrt.ortformat``).

Runs on the board too: Python 3.8, NumPy and onnxruntime.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from ..errors import MissingDependencyError, ModelFormatError
from ..tensors import TensorSpec
from . import ModelFormat

if TYPE_CHECKING:
    from ..model import Model

__all__ = ["OrtFormat", "ORT_IDENTIFIER", "is_ort_bytes"]

#: The flatbuffer file identifier of ORT format models (bytes 4..8).
ORT_IDENTIFIER = b"ORTM"

#: onnx.TensorProto.DataType values -> NumPy dtype names (the ORT schema reuses ONNX's numbering).
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "str",
           9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
_ITEMSIZE = {"float32": 4, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "int32": 4, "int64": 8, "bool": 1,
             "float16": 2, "float64": 8, "uint32": 4, "uint64": 8, "bfloat16": 2}


def is_ort_bytes(head: bytes) -> bool:
    """Whether ``head`` (the first 8 bytes or more of a file) is an ORT format model."""
    return len(head) >= 8 and head[4:8] == ORT_IDENTIFIER


def _fbs() -> Any:
    """The ``ort_flatbuffers_py.fbs`` schema package shipped inside onnxruntime."""
    try:
        import onnxruntime.tools.ort_format_model  # noqa: F401 - puts ort_flatbuffers_py on sys.path
        import ort_flatbuffers_py.fbs as fbs  # type: ignore[import-not-found]
    except ImportError as exc:
        raise MissingDependencyError("reading ORT format (.ort) models", "onnxruntime (with flatbuffers)",
                                     "pip install onnxruntime") from exc
    return fbs


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


class OrtModel:
    """A parsed ORT format model: the flatbuffer's ``InferenceSession`` table and its bytes."""

    def __init__(self, data: bytes, root: Any):
        self.data = data
        self.root = root
        self.model = root.Model()
        self.graph = self.model.Graph()

    @property
    def ort_version(self) -> str:
        return _s(self.root.OrtVersion())

    def node_args(self) -> Dict[str, Any]:
        g = self.graph
        return {_s(g.NodeArgs(i).Name()): g.NodeArgs(i) for i in range(g.NodeArgsLength())}

    def nodes(self) -> Iterator[Any]:
        g = self.graph
        for i in range(g.NodesLength()):
            yield g.Nodes(i)


class OrtFormat(ModelFormat):
    name = "ort"
    default_target = "onnxruntime"

    # -- parse / validate -----------------------------------------------------------------------------
    def parse(self, model: "Model") -> Any:
        where = f"'{model.name}'"
        try:
            data = model._data if model._data is not None else model.path.read_bytes()  # type: ignore[union-attr]
        except OSError as exc:
            raise ModelFormatError(f"cannot read {where}: {exc}") from exc
        if not is_ort_bytes(data[:8]):
            raise ModelFormatError(f"{where} is not an ORT format model (no 'ORTM' identifier)",
                                   "convert an ONNX model with: sdk convert model.onnx -o model.ort")
        fbs = _fbs()
        try:
            root = fbs.InferenceSession.InferenceSession.GetRootAs(data, 0)
            parsed = OrtModel(data, root)
            if parsed.model is None or parsed.graph is None:
                raise ValueError("no model or graph table")
            parsed.graph.NodesLength()
            parsed.node_args()
        except Exception as exc:  # noqa: BLE001 - a corrupt flatbuffer fails with any error
            raise ModelFormatError(f"{where} is a truncated or corrupt ORT format model: {exc}") from exc
        return parsed

    def serialize(self, model: "Model") -> bytes:
        return bytes(model.proto.data)

    def validate(self, model: "Model") -> None:
        parsed = model.proto
        names = parsed.node_args()
        for spec_name in self._port_names(parsed, "Inputs") + self._port_names(parsed, "Outputs"):
            if spec_name not in names:
                raise ModelFormatError(f"'{model.name}': graph port '{spec_name}' has no value info (corrupt file)")

    # -- specs ------------------------------------------------------------------------------------------
    @staticmethod
    def _port_names(parsed: OrtModel, which: str) -> List[str]:
        g = parsed.graph
        return [_s(getattr(g, which)(i)) for i in range(getattr(g, which + "Length")())]

    @staticmethod
    def _spec(name: str, arg: Any) -> TensorSpec:
        if arg is None or arg.Type() is None:
            return TensorSpec(name, (), "unknown")
        fbs = _fbs()
        ti = arg.Type()
        if ti.ValueType() != fbs.TypeInfoValue.TypeInfoValue.tensor_type:
            return TensorSpec(name, (), "non-tensor")
        tt = fbs.TensorTypeAndShape.TensorTypeAndShape()
        tt.Init(ti.Value().Bytes, ti.Value().Pos)
        dims: List[Any] = []
        shape = tt.Shape()
        if shape is not None:
            for i in range(shape.DimLength()):
                value = shape.Dim(i).Value()
                if value is None:
                    dims.append(None)
                elif value.DimType() == fbs.DimensionValueType.DimensionValueType.PARAM:
                    dims.append(_s(value.DimParam()) or None)
                elif value.DimType() == fbs.DimensionValueType.DimensionValueType.VALUE:
                    dims.append(int(value.DimValue()))
                else:
                    dims.append(None)
        return TensorSpec(name, tuple(dims), _DTYPES.get(int(tt.ElemType()), f"onnx-type-{tt.ElemType()}"))

    def _ports(self, model: "Model", which: str) -> List[TensorSpec]:
        parsed = model.proto
        args = parsed.node_args()
        inits = {name for name, _ in _initializers(parsed)}
        return [self._spec(n, args.get(n)) for n in self._port_names(parsed, which) if n not in inits]

    def inputs(self, model: "Model") -> List[TensorSpec]:
        return self._ports(model, "Inputs")

    def outputs(self, model: "Model") -> List[TensorSpec]:
        return self._ports(model, "Outputs")

    def opset(self, model: "Model") -> Optional[int]:
        return opset_imports(model.proto).get("ai.onnx")

    # -- inspect ----------------------------------------------------------------------------------------
    def inspect(self, model: "Model") -> Dict[str, Any]:
        parsed = model.proto
        ops = Counter(op_name(n) for n in parsed.nodes())
        params = param_bytes = 0
        for _, tensor in _initializers(parsed):
            n, b = _tensor_count_bytes(tensor)
            params += n
            param_bytes += b
        m = parsed.model
        ro = parsed.graph.RuntimeOptimizations()
        return {
            "inputs": [s.to_dict() for s in self.inputs(model)],
            "outputs": [s.to_dict() for s in self.outputs(model)],
            "opset": self.opset(model),
            "opset_imports": opset_imports(parsed),
            "ir_version": int(m.IrVersion()),
            "producer": " ".join(x for x in (_s(m.ProducerName()), _s(m.ProducerVersion())) if x) or None,
            "ort_version": parsed.ort_version or None,
            "runtime_optimizations": bool(ro is not None and ro.RecordsLength() > 0),
            "nodes": sum(ops.values()),
            "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "params": int(params),
            "param_bytes": int(param_bytes),
            "params_in_constants": 0,
            "macs": None,
            "macs_unknown_nodes": 0,
            "macs_partial": False,
            "macs_note": "not estimated for ORT format models (inspect the source .onnx)",
        }


def op_name(node: Any) -> str:
    """``Conv`` for the default domain, ``com.microsoft.FusedConv`` otherwise (as ONNX inspect names them)."""
    domain = _s(node.Domain())
    op = _s(node.OpType())
    return op if domain in ("", "ai.onnx") else f"{domain}.{op}"


def opset_imports(parsed: OrtModel) -> Dict[str, int]:
    m = parsed.model
    out: Dict[str, int] = {}
    for i in range(m.OpsetImportLength()):
        imp = m.OpsetImport(i)
        out[_s(imp.Domain()) or "ai.onnx"] = int(imp.Version())
    return out


def _initializers(parsed: OrtModel) -> List[Tuple[str, Any]]:
    g = parsed.graph
    return [(_s(g.Initializers(i).Name()), g.Initializers(i)) for i in range(g.InitializersLength())]


def _tensor_count_bytes(tensor: Any) -> Tuple[int, int]:
    n = 1
    for i in range(tensor.DimsLength()):
        n *= int(tensor.Dims(i))
    dtype = _DTYPES.get(int(tensor.DataType()), "")
    raw = int(tensor.RawDataLength())
    return n, raw if raw else n * _ITEMSIZE.get(dtype, 0)
