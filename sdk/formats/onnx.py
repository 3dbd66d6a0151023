"""ONNX model handler: parse, validate, inspect (ops, params, MACs), simplify, fix shapes, opset."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..errors import InputError, InvalidModelError, MissingDependencyError, ModelError, ModelFormatError, first_line
from ..tensors import TensorSpec, check_input_names, format_shape
from ..tensors import num_elements as _prod
from . import ModelFormat

if TYPE_CHECKING:
    from ..model import Model


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a base dependency
        raise MissingDependencyError("ONNX models", "onnx", "pip install edgesdk") from exc
    return onnx


def onnx_dtype_to_numpy(elem_type: int) -> str:
    onnx = _onnx()
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError):
        return str(onnx.TensorProto.DataType.Name(elem_type)).lower()


def _value_info_spec(vi: Any) -> TensorSpec:
    t = vi.type.tensor_type
    dims: List[Any] = []
    if t.HasField("shape"):
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
    return TensorSpec(vi.name, tuple(dims), onnx_dtype_to_numpy(t.elem_type))


def iter_nodes(graph: Any) -> Iterator[Any]:
    """Every node of ``graph``, including those in subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.g is not None and attr.HasField("g"):
                yield from iter_nodes(attr.g)
            for g in attr.graphs:
                yield from iter_nodes(g)


def drop_unused_initializers(graph: Any) -> None:
    """Remove the initializers no node reads (If/Loop bodies read outer names too) and no graph
    output names, and their graph inputs."""
    used = {i for n in iter_nodes(graph) for i in n.input} | {o.name for o in graph.output}
    removed = {t.name for t in graph.initializer if t.name not in used}
    if removed:
        keep = [t for t in graph.initializer if t.name not in removed]
        del graph.initializer[:]
        graph.initializer.extend(keep)
        gin = [vi for vi in graph.input if vi.name not in removed]
        del graph.input[:]
        graph.input.extend(gin)


def weightless(proto: Any, max_elements: int = 64) -> Any:
    """A copy of ``proto`` for shape inference: every initializer, and every top-level ``Constant``
    tensor, of more than ``max_elements`` values becomes a graph input of its type and shape
    (shape-defining constants are small and stay). onnx's inference serializes the whole model in
    and out; without the weights that is the graph alone (a 54 MB recognizer: 0.64 s -> a few ms).
    Other nodes, functions and opsets are the model's."""
    onnx = _onnx()
    light = onnx.ModelProto(ir_version=proto.ir_version)
    light.opset_import.extend(proto.opset_import)
    light.functions.extend(proto.functions)
    g, lg = proto.graph, light.graph
    lg.name = g.name
    lg.input.extend(g.input)
    lg.output.extend(g.output)
    lg.value_info.extend(g.value_info)
    declared = {i.name for i in g.input}

    def big(t: Any) -> bool:
        count = 1
        for d in t.dims:
            count *= int(d)
        return count > max_elements

    for node in g.node:
        value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and value is not None and big(value):
            lg.input.append(onnx.helper.make_tensor_value_info(node.output[0], value.data_type, list(value.dims)))
        else:
            lg.node.append(node)
    for init in g.initializer:
        if not big(init):
            lg.initializer.append(init)
        elif init.name not in declared:
            lg.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return light


class OnnxFormat(ModelFormat):
    name = "onnx"

    # -- parse / validate -----------------------------------------------------------------------------
    def parse(self, model: "Model") -> Any:
        onnx = _onnx()
        from google.protobuf.message import DecodeError

        where = f"'{model.name}'"
        try:
            if model._data is not None:
                proto = onnx.load_from_string(model._data)
            else:
                proto = onnx.load(str(model.path))
        except (DecodeError, RuntimeError, ValueError, UnicodeDecodeError) as exc:
            raise ModelFormatError(
                f"{where} is not a readable ONNX model (truncated or another format): "
                f"{(str(exc).splitlines() or [type(exc).__name__])[0].rstrip(': ')}"
            ) from exc
        except OSError as exc:
            raise ModelFormatError(f"cannot read {where}: {exc}") from exc
        except onnx.checker.ValidationError as exc:     # external data missing, or outside the model's folder
            raise ModelFormatError(f"{where}: its external data cannot be loaded: {str(exc).splitlines()[0]}",
                                   "keep the data files next to the model, inside its folder") from exc
        if proto.ir_version == 0 or (not proto.graph.node and not proto.graph.output):
            raise ModelFormatError(
                f"{where} is not an ONNX model (no IR version or empty graph); the file may be truncated"
            )
        return proto

    def serialize(self, model: "Model") -> bytes:
        return bytes(model.proto.SerializeToString())

    def external_files(self, path: Path) -> List[Tuple[str, Path]]:
        """The external data files of the model at ``path`` (read without loading the data):
        each ``location`` must name a regular file inside the model's folder."""
        onnx = _onnx()
        from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception:  # noqa: BLE001 - not readable: it loads nothing else (parse() says why, if asked)
            return []
        folder = path.resolve().parent
        out: Dict[str, Path] = {}
        for tensor in _get_all_tensors(proto):
            if not uses_external_data(tensor):
                continue
            location = ExternalDataInfo(tensor).location
            target = (folder / location).resolve()
            if Path(location).is_absolute() or ".." in Path(location).parts or folder not in target.parents:
                raise ModelFormatError(f"'{path.name}': external data '{location}' lies outside the model's folder",
                                       "keep the data files next to the model, inside its folder")
            if not target.is_file():
                raise ModelFormatError(f"'{path.name}': its external data file '{location}' does not exist "
                                       "(or is not a regular file)", "keep the data files next to the model")
            out[Path(location).as_posix()] = target
        return sorted(out.items())

    def validate(self, model: "Model") -> None:
        onnx = _onnx()
        proto = model.proto
        try:
            # a proto just parsed from its file: the checker reads the file itself (no Python-side
            # ByteSize and serialization: 0.8 s of a 54 MB model; also the only way past 2 GB)
            if model._proto_from_file:
                onnx.checker.check_model(str(model.path))
            else:
                onnx.checker.check_model(proto)
        except onnx.checker.ValidationError as exc:
            first = first_line(exc)
            raise InvalidModelError(f"'{model.name}' is not a valid ONNX graph: {first}") from exc

    # -- specs ------------------------------------------------------------------------------------------
    def inputs(self, model: "Model") -> List[TensorSpec]:
        g = model.proto.graph
        inits = {i.name for i in g.initializer}
        return [_value_info_spec(vi) for vi in g.input if vi.name not in inits]

    def outputs(self, model: "Model") -> List[TensorSpec]:
        return [_value_info_spec(vi) for vi in model.proto.graph.output]

    def opset(self, model: "Model") -> Optional[int]:
        for imp in model.proto.opset_import:
            if imp.domain in ("", "ai.onnx"):
                return int(imp.version)
        return None

    # -- inspect ----------------------------------------------------------------------------------------
    def inspect(self, model: "Model") -> Dict[str, Any]:
        proto = model.proto
        g = proto.graph
        ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in iter_nodes(g))
        params, param_bytes = _initializer_params(g)
        const_params, const_bytes = constant_params(g)
        count, spec = self._macs(proto, {})
        return {
            "inputs": [s.to_dict() for s in self.inputs(model)],
            "outputs": [s.to_dict() for s in self.outputs(model)],
            "opset": self.opset(model),
            "opset_imports": {imp.domain or "ai.onnx": int(imp.version) for imp in proto.opset_import},
            "ir_version": int(proto.ir_version),
            "producer": " ".join(x for x in (proto.producer_name, proto.producer_version) if x) or None,
            "nodes": sum(ops.values()),
            "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "params": int(params + const_params),
            "param_bytes": int(param_bytes + const_bytes),
            "params_in_constants": int(const_params),
            "macs": count.macs,
            "macs_unknown_nodes": count.unknown_nodes,
            "macs_partial": count.partial,
            "macs_notes": count.uncounted + count.notes,
            "control_inputs": self.control_inputs(model),
            **_if_record(spec),
        }

    def mac_count(self, model: "Model", values: Mapping[str, Any]) -> Dict[str, Any]:
        c, spec = self._macs(model.proto, dict(values))
        return {"macs": c.macs, "macs_unknown_nodes": c.unknown_nodes, "macs_partial": c.partial,
                "macs_notes": c.uncounted + c.notes, **_if_record(spec)}

    @staticmethod
    def _macs(proto: Any, values: Dict[str, Any]) -> Tuple[Any, Any]:
        """The MAC count, of the graph specialized for ``values`` and the declared input shapes when
        the top-level graph has an ``If`` (or values are given), with the specialization (or None)."""
        from .onnx_macs import specialized_macs

        if not values and not any(n.op_type == "If" for n in proto.graph.node):
            return count_macs(proto), None
        return specialized_macs(proto, values)

    def control_inputs(self, model: "Model") -> List[Dict[str, Any]]:
        from .onnx_control import control_inputs

        return control_inputs(model.proto, {s.name: s for s in self.inputs(model)})

    # -- transforms -------------------------------------------------------------------------------------
    def simplify(self, model: "Model") -> "Model":
        try:
            import onnxsim
        except ImportError as exc:
            raise MissingDependencyError("Model.simplify()", "onnxsim", "pip install 'edgesdk[simplify]'") from exc
        try:
            simplified, ok = onnxsim.simplify(model.proto)
        except Exception as exc:  # onnxsim raises plain RuntimeError/ValueError from C++
            raise ModelError(f"onnxsim could not simplify '{model.name}': {str(exc).splitlines()[0]}") from exc
        if not ok:
            raise ModelError(f"onnxsim's check failed for the simplified '{model.name}'; the original is unchanged")
        return model.derive(simplified)

    def with_input_shapes(self, model: "Model", shapes: Mapping[str, Sequence[int]]) -> "Model":
        onnx = _onnx()
        specs = self.inputs(model)
        check_input_names(shapes, specs)
        proto = onnx.ModelProto()
        proto.CopyFrom(model.proto)
        by_name = {vi.name: vi for vi in proto.graph.input}
        for spec in specs:
            if spec.name not in shapes:
                continue
            shape = spec.resolve(shapes[spec.name])  # checks rank and static dims
            dims = by_name[spec.name].type.tensor_type.shape.dim
            for d, v in zip(dims, shape):
                d.Clear()
                d.dim_value = int(v)
        # Stale symbolic shapes on intermediates and outputs would survive inference: drop them.
        del proto.graph.value_info[:]
        for out in proto.graph.output:
            tt = out.type.tensor_type
            if tt.HasField("shape"):  # keep the rank (IR < 7 checkers require a shape on outputs)
                for d in tt.shape.dim:
                    if not d.HasField("dim_value"):
                        d.Clear()
        try:
            proto = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
        except (onnx.shape_inference.InferenceError, RuntimeError) as exc:
            raise InputError(
                f"the shapes {', '.join(f'{k}={format_shape(v)}' for k, v in shapes.items())} "
                f"do not fit '{model.name}': {str(exc).strip().splitlines()[0]}"
            ) from exc
        return model.derive(proto)

    def fold_constants(self, model: "Model") -> "Model":
        from .onnx_fold import fold_constants

        proto, folded = fold_constants(model.proto)
        return model.derive(proto) if folded else model

    def with_opset(self, model: "Model", opset: int) -> "Model":
        onnx = _onnx()
        from onnx import version_converter

        current = self.opset(model)
        if current == opset:
            return model
        src = onnx.ModelProto()
        src.CopyFrom(model.proto)
        del src.graph.value_info[:]  # stale inferred shapes trip the converter ("Field 'shape' ... missing")
        try:
            converted = version_converter.convert_version(src, int(opset))
            onnx.checker.check_model(converted)
        except Exception as exc:  # the converter raises bare RuntimeError/ValidationError from C++
            raise ModelError(
                f"cannot convert '{model.name}' from opset {current} to {opset}: {str(exc).strip().splitlines()[0]}"
            ) from exc
        return model.derive(converted)


# -- parameters ------------------------------------------------------------------------------------------
_FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _tensor_count_bytes(tensor: Any) -> "tuple[int, int]":
    onnx = _onnx()
    n = _prod(tensor.dims)
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return n, 0
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        itemsize = 0
    return n, n * itemsize


def _initializer_params(graph: Any) -> "tuple[int, int]":
    params = param_bytes = 0
    for init in graph.initializer:
        n, b = _tensor_count_bytes(init)
        params += n
        param_bytes += b
    return params, param_bytes


def constant_params(graph: Any) -> "tuple[int, int]":
    """Elements and bytes of the float tensors of rank >= 1 held in ``Constant`` nodes (of the
    graph and its subgraphs). paddle2onnx and some tf2onnx/torch exports store every weight this
    way (no initializers); scalars and integer shape constants are not parameters."""
    params = param_bytes = 0
    for node in iter_nodes(graph):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.HasField("t"):
                t = attr.t
                if t.data_type in _FLOAT_TYPES and len(t.dims) >= 1:
                    n, b = _tensor_count_bytes(t)
                    params += n
                    param_bytes += b
            elif attr.name == "value_floats" and len(attr.floats):
                params += len(attr.floats)
                param_bytes += 4 * len(attr.floats)
    return params, param_bytes


# -- MACs ------------------------------------------------------------------------------------------------
def _if_record(spec: Any) -> Dict[str, Any]:
    """``ifs_resolved`` (node, branch, what decided it: ``kind`` value / shape / constant) and
    ``ifs_unresolved`` (node, why) of a specialization; empty lists without one."""
    d = spec.to_dict() if spec is not None else {"resolved": [], "unresolved": []}
    return {"ifs_resolved": d["resolved"], "ifs_unresolved": d["unresolved"]}


from .onnx_macs import MAC_OPS as _MAC_OPS  # noqa: E402,F401 - re-exported for the roofline
from .onnx_macs import count_macs as count_macs  # noqa: E402
from .onnx_macs import node_macs as node_macs  # noqa: E402


def _static_shape(shapes: Dict[str, List[Any]], name: str, rank: Optional[int] = None,
                  min_rank: int = 1) -> Optional[List[int]]:
    """The shape of ``name`` when every dim is known and its rank fits, else None."""
    from .onnx_macs import _static

    return _static(shapes, name, rank, min_rank)


def estimate_macs(proto: Any) -> "tuple[Optional[int], int]":
    """``(macs, unknown)`` of :func:`~sdk.formats.onnx_macs.count_macs` (``unknown``: MAC nodes
    whose shapes are not concrete). Never raises."""
    c = count_macs(proto)
    return c.macs, c.unknown_nodes
