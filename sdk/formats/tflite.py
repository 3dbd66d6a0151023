"""TFLite model handler: parse, validate, inputs/outputs and inspect, through the runtime's
Interpreter (tensors, shapes, dtypes, quantisation parameters, op list, parameters, MACs).

It also holds the TFLite runtime lookup that the ``tflite`` target shares (core floor, so both
the handler and the target can use it): LiteRT (``ai_edge_litert``), then ``tflite_runtime``,
then ``tensorflow.lite``, each imported only when first needed. A runtime that is installed but
cannot be imported (``tflite-runtime`` 2.14 under NumPy 2: ``_ARRAY_API not found``) is reported
in one line with the fix, and the next one is tried.

Input and output names are the model's signature names when it has a signature (``image``,
``output_0``), else the tensor names. Runs on the board too: Python 3.8, NumPy and the runtime.
"""
from __future__ import annotations

import contextlib
import io
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from ..errors import MissingDependencyError, ModelFormatError, TargetUnavailableError, first_line
from ..probe import dist_version, module_installed
from ..tensors import TensorSpec
from ..tensors import num_elements as _prod
from . import ModelFormat

if TYPE_CHECKING:
    from ..model import Model

__all__ = ["TFLiteFormat", "TFLiteRuntime", "RUNTIMES", "INSTALL_HINT", "find_runtimes", "load_runtime",
           "signature_ports", "default_signature", "quiet_native_info"]

INSTALL_HINT = "pip install 'edgesdk[tflite]' (pulls ai-edge-litert, which works with NumPy 2)"


@dataclass(frozen=True)
class RuntimeCandidate:
    """One TFLite runtime package: ``module`` holds ``Interpreter``, ``load_delegate`` and
    ``OpResolverType``; ``top`` is probed without importing; ``dists`` give the version."""

    name: str
    top: str
    module: str
    dists: Tuple[str, ...]


#: The runtimes, in the order they are tried.
RUNTIMES: Tuple[RuntimeCandidate, ...] = (
    RuntimeCandidate("ai_edge_litert", "ai_edge_litert", "ai_edge_litert.interpreter",
                     ("ai-edge-litert", "ai-edge-litert-nightly")),
    RuntimeCandidate("tflite_runtime", "tflite_runtime", "tflite_runtime.interpreter",
                     ("tflite-runtime", "tflite-runtime-nightly")),
    RuntimeCandidate("tensorflow", "tensorflow", "tensorflow.lite.python.interpreter",
                     ("tensorflow", "tensorflow-cpu", "tensorflow-aarch64", "tensorflow-intel",
                      "tensorflow-macos", "tf-nightly")),
)


@dataclass
class TFLiteRuntime:
    """An imported TFLite runtime: its ``Interpreter``, ``load_delegate`` and ``OpResolverType``."""

    name: str
    version: Optional[str]
    module: Any
    skipped: List[str] = field(default_factory=list)

    @property
    def Interpreter(self) -> Any:  # noqa: N802 - the runtime's class name
        return self.module.Interpreter

    @property
    def load_delegate(self) -> Any:
        return self.module.load_delegate

    def resolver(self, default_delegates: bool) -> Optional[Any]:
        """The op resolver: builtin kernels with or without the default delegate (XNNPACK); None
        for old runtimes (before TF 2.5) that cannot choose."""
        kinds = getattr(self.module, "OpResolverType", None)
        if kinds is None:
            return None
        return kinds.AUTO if default_delegates else kinds.BUILTIN_WITHOUT_DEFAULT_DELEGATES

    def resolver_kwargs(self, default_delegates: bool) -> Dict[str, Any]:
        """``{"experimental_op_resolver_type": ...}`` where the runtime supports it, else ``{}``."""
        kind = self.resolver(default_delegates)
        return {} if kind is None else {"experimental_op_resolver_type": kind}

    def describe(self) -> str:
        return f"{self.name} {self.version or ''}".strip()


_runtimes: Dict[str, TFLiteRuntime] = {}

#: Lines the TFLite runtimes write to the process's stderr (fd 2, from C++) that say nothing a
#: user needs: ``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.``
_NATIVE_NOISE = ("INFO: Created TensorFlow Lite", "INFO: Initialized TensorFlow Lite runtime")


@contextlib.contextmanager
def quiet_native_info() -> Iterator[None]:
    """Hold back the runtime's ``INFO:`` lines that C++ writes straight to fd 2 while the block
    runs; every other line (warnings, errors) is written to stderr afterwards, unchanged."""
    import os
    import sys
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real fd 2 (embedded, some notebooks)
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = [ln for ln in sink.read().decode("utf-8", "replace").splitlines(True)
                    if not ln.startswith(_NATIVE_NOISE)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def find_runtimes() -> List[Tuple[RuntimeCandidate, Optional[str]]]:
    """The installed runtime packages in priority order with their versions (no imports)."""
    out = []
    for cand in RUNTIMES:
        if module_installed(cand.top):
            out.append((cand, dist_version(*cand.dists)))
    return out


def _why_broken(exc: BaseException, stderr_text: str) -> str:
    chain: List[str] = []
    cur: Optional[BaseException] = exc
    while cur is not None and len(chain) < 8:
        chain.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    text = " ".join(chain) + " " + stderr_text
    if "_ARRAY_API" in text or "compiled using NumPy 1.x" in text or "multiarray failed to import" in text:
        try:
            import numpy

            have = numpy.__version__
        except Exception:  # pragma: no cover - numpy is a hard dependency
            have = "2.x"
        return f"it was built for NumPy 1.x and this is NumPy {have} (_ARRAY_API not found)"
    first = first_line(exc)
    return first


def _import(cand: RuntimeCandidate) -> Any:
    import importlib

    sink = io.StringIO()  # NumPy prints a long banner to stderr when a 1.x-built module loads
    try:
        with contextlib.redirect_stderr(sink):
            return importlib.import_module(cand.module)
    except Exception as exc:  # a broken native module raises ImportError, AttributeError, ...
        raise _Broken(_why_broken(exc, sink.getvalue())) from exc


class _Broken(Exception):
    pass


# A 648-byte model (y = x + x, x float32 [2]) made by TensorFlow's converter. Some broken installs
# import fine and fail only when the first interpreter runs (tflite-runtime 2.14 under NumPy 2
# raises SystemError from ``_ARRAY_API not found`` in ``CreateWrapperFromBuffer``), so a runtime is
# accepted only after it ran this.
_SMOKE_MODEL_B64 = (
    "HAAAAFRGTDMUACAAHAAYABQAEAAMAAAACAAEABQAAAAcAAAAHAAAAHQAAAAkAQAANAEAAEQCAAADAAAAAAAAAAIAAAA0AAAA"
    "BAAAANz///8EAAAABAAAABMAAABDT05WRVJTSU9OX01FVEFEQVRBAAgADAAIAAQACAAAAAMAAAAEAAAAEwAAAG1pbl9ydW50"
    "aW1lX3ZlcnNpb24ABQAAAKwAAACkAAAAnAAAAHwAAAAEAAAAkv///wQAAABgAAAAEAAAAAAAAAAIAA4ACAAEAAgAAAAQAAAA"
    "JAAAAAAABgAIAAQABgAAAAQAAAAAAAAADAAYABQAEAAMAAQADAAAAMg+N9phhh8TAwAAAAIAAAAEAAAABgAAADIuMjEuMAAA"
    "AAAGAAgABAAGAAAABAAAABAAAAAxLjUuMAAAAAAAAAAAAAAAxP7//8j+///M/v//DwAAAE1MSVIgQ29udmVydGVkLgABAAAA"
    "FAAAAAAADgAYABQAEAAMAAgABAAOAAAAFAAAABwAAABcAAAAYAAAAGQAAAAEAAAAbWFpbgAAAAABAAAAFAAAAAAADgAUAAAA"
    "EAAMAAsABAAOAAAAEAAAAAAAAAsMAAAAEAAAAEz///8BAAAAAQAAAAIAAAAAAAAAAAAAAAEAAAABAAAAAQAAAAAAAAACAAAA"
    "VAAAAAQAAADK////AAAAARAAAAAQAAAAAgAAABgAAACY////CAAAAElkZW50aXR5AAAAAAEAAAACAAAAAAAWABgAFAAAABAA"
    "DAAIAAAAAAAAAAcAFgAAAAAAAAEQAAAAEAAAAAEAAAAQAAAA5P///wEAAAB4AAAAAQAAAAIAAAABAAAACAAAAAQABAAEAAAA"
)


def _smoke(module: Any) -> None:
    import base64

    import numpy as np

    sink = io.StringIO()
    try:
        with contextlib.redirect_stderr(sink):
            kinds = getattr(module, "OpResolverType", None)  # no XNNPACK: quiet and enough here
            kwargs = {"experimental_op_resolver_type": kinds.BUILTIN_WITHOUT_DEFAULT_DELEGATES} if kinds else {}
            interp = module.Interpreter(model_content=base64.b64decode(_SMOKE_MODEL_B64), **kwargs)
            interp.allocate_tensors()
            index = interp.get_input_details()[0]["index"]
            interp.set_tensor(index, np.array([1.0, 2.0], np.float32))
            interp.invoke()
            out = interp.get_tensor(interp.get_output_details()[0]["index"])
    except Exception as exc:
        raise _Broken(_why_broken(exc, sink.getvalue())) from exc
    if [float(v) for v in out] != [2.0, 4.0]:
        raise _Broken(f"it computes 1+1 as {float(out[0])}")


def load_runtime(prefer: Optional[str] = None) -> TFLiteRuntime:
    """Import the first working TFLite runtime (``prefer``: only that one, by name).

    Raises :class:`MissingDependencyError` when none is installed and
    :class:`TargetUnavailableError` when the installed ones are broken, in one line with the fix.
    """
    key = prefer or ""
    if key in _runtimes:
        return _runtimes[key]
    names = [c.name for c in RUNTIMES]
    if prefer is not None and prefer not in names:
        from ..errors import InputError

        raise InputError(f"unknown TFLite runtime '{prefer}'", f"known: {', '.join(names)}")
    installed = [(c, v) for c, v in find_runtimes() if prefer is None or c.name == prefer]
    if not installed:
        if prefer is not None:
            raise TargetUnavailableError(f"the TFLite runtime '{prefer}' is not installed", INSTALL_HINT)
        raise MissingDependencyError("TFLite models", "ai-edge-litert", "pip install 'edgesdk[tflite]'")
    broken: List[str] = []
    for cand, version in installed:
        try:
            module = _import(cand)
            _smoke(module)
        except _Broken as exc:
            broken.append(f"{cand.dists[0]} {version or ''}".strip() + f" is installed but does not work: {exc}")
            continue
        version = getattr(module, "__version__", None) or version
        if version is None and cand.name == "tensorflow":
            version = dist_version(*cand.dists)
        rt = TFLiteRuntime(cand.name, version, module, skipped=broken)
        _runtimes[key] = rt
        return rt
    raise TargetUnavailableError("; ".join(broken), INSTALL_HINT)


# -- signatures and ports ------------------------------------------------------------------------
def default_signature(interp: Any) -> Optional[str]:
    """``serving_default`` when the model has it, else its first signature, else None."""
    sigs = interp.get_signature_list()
    if not sigs:
        return None
    return "serving_default" if "serving_default" in sigs else next(iter(sigs))


def signature_ports(interp: Any, signature: Optional[str]) -> Tuple[List[Tuple[str, Dict[str, Any]]],
                                                                    List[Tuple[str, Dict[str, Any]]], bool]:
    """``(inputs, outputs, primary)``: ``(name, tensor details)`` pairs of ``signature`` (the
    signature's names) or of the primary subgraph (tensor names) when ``signature`` is None.
    ``primary`` is True when the ports live on the primary subgraph, so that ``set_tensor`` /
    ``invoke`` reach them (else a SignatureRunner must run them)."""
    prim_in = interp.get_input_details()
    prim_out = interp.get_output_details()
    if signature is None:
        return [(d["name"], d) for d in prim_in], [(d["name"], d) for d in prim_out], True
    sigs = interp.get_signature_list()
    if signature not in sigs:
        from ..errors import InputError

        raise InputError(f"the model has no signature '{signature}'",
                         f"its signatures: {', '.join(sigs) or 'none'}")
    runner = interp.get_signature_runner(signature)
    in_details = runner.get_input_details()
    out_details = runner.get_output_details()
    ins = [(n, in_details[n]) for n in sigs[signature]["inputs"]]
    outs = [(n, out_details[n]) for n in sigs[signature]["outputs"]]
    prim = {(d["index"], d["name"]) for d in prim_in} | {(d["index"], d["name"]) for d in prim_out}
    primary = all((d["index"], d["name"]) in prim for _, d in ins + outs)
    return ins, outs, primary


def _np_dtype(dtype: Any) -> str:
    import numpy as np

    return str(np.dtype(dtype).name)


def tensor_quantization(details: Dict[str, Any]) -> Optional[Tuple[float, int]]:
    """``(scale, zero_point)`` of a per-tensor quantized tensor, else None."""
    scale, zp = details.get("quantization") or (0.0, 0)
    if not scale:
        return None
    return float(scale), int(zp)


def spec_from_details(name: str, details: Dict[str, Any]) -> TensorSpec:
    """A TensorSpec from interpreter tensor details: ``-1`` dims of the shape signature -> None."""
    sig = details.get("shape_signature")
    shape = sig if sig is not None and len(sig) == len(details["shape"]) else details["shape"]
    dims = tuple(None if int(d) < 0 else int(d) for d in shape)
    return TensorSpec(name, dims, _np_dtype(details["dtype"]), quantization=tensor_quantization(details))


# -- the handler ------------------------------------------------------------------------------------
class TFLiteFormat(ModelFormat):
    """``.tflite`` flatbuffers. ``Model.proto`` is the file's bytes; the runtime's Interpreter
    (built without delegates, tensors not allocated) answers everything else."""

    default_target = "tflite"

    name = "tflite"

    def parse(self, model: "Model") -> Any:
        data = model.to_bytes()
        if len(data) < 8 or data[4:8] != b"TFL3":
            raise ModelFormatError(f"'{model.name}' is not a TFLite flatbuffer (no TFL3 identifier)")
        return data

    def serialize(self, model: "Model") -> bytes:
        return bytes(model.proto)

    def interpreter(self, model: "Model") -> Any:
        """A cached Interpreter of ``model`` without default delegates (for reading, not running)."""
        if "tflite_interpreter" not in model._cache:
            data = model.proto  # checks the identifier first
            rt = load_runtime()
            try:
                interp = rt.Interpreter(model_content=data, **rt.resolver_kwargs(False))
            except (ValueError, RuntimeError) as exc:
                first = first_line(exc)
                raise ModelFormatError(
                    f"'{model.name}' is not a readable TFLite model (truncated or corrupt): {first}") from exc
            model._cache["tflite_interpreter"] = interp
            model._cache["tflite_runtime"] = rt.describe()
        return model._cache["tflite_interpreter"]

    def validate(self, model: "Model") -> None:
        self.interpreter(model)

    def _ports(self, model: "Model") -> Tuple[List[Tuple[str, Dict[str, Any]]], List[Tuple[str, Dict[str, Any]]], bool]:
        interp = self.interpreter(model)
        return signature_ports(interp, default_signature(interp))

    def inputs(self, model: "Model") -> List[TensorSpec]:
        ins, _, _ = self._ports(model)
        return [spec_from_details(n, d) for n, d in ins]

    def outputs(self, model: "Model") -> List[TensorSpec]:
        _, outs, _ = self._ports(model)
        return [spec_from_details(n, d) for n, d in outs]

    def inspect(self, model: "Model") -> Dict[str, Any]:
        """Inputs, outputs, signatures, op histogram and list (primary subgraph), every tensor
        with shape, dtype and quantisation, parameter count/bytes (constant tensors) and MACs
        (Conv2D, DepthwiseConv2D, FullyConnected, TransposeConv, BatchMatMul at the model's
        default shapes: dynamic dims at 1)."""
        interp = self.interpreter(model)
        ops_details = interp._get_ops_details()  # the runtimes' (shared) op-details accessor
        tensors = {int(t["index"]): t for t in interp.get_tensor_details()}
        const = _constant_tensors(ops_details, {int(d["index"]) for d in interp.get_input_details()})
        params, param_bytes = _param_counts(const, tensors)
        ops = Counter(op["op_name"] for op in ops_details)
        macs, unknown = _macs(ops_details, tensors)
        sigs = interp.get_signature_list()
        others = _other_subgraph_ops(bytes(model.proto)) if getattr(interp, "num_subgraphs", lambda: 1)() > 1 else {}
        notes = [f"{sum(sum(c.values()) for c in others.values())} op(s) in {len(others)} other subgraph(s) "
                 "(WHILE / IF bodies) not counted"] if others else []
        return {
            "inputs": [s.to_dict() for s in self.inputs(model)],
            "outputs": [s.to_dict() for s in self.outputs(model)],
            "runtime": model._cache.get("tflite_runtime"),
            "signatures": {k: {"inputs": list(v["inputs"]), "outputs": list(v["outputs"])} for k, v in sigs.items()},
            "subgraphs": int(interp.num_subgraphs()) if hasattr(interp, "num_subgraphs") else None,
            "nodes": len(ops_details),
            "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "op_list": [op["op_name"] for op in ops_details],
            "params": int(params),
            "param_bytes": int(param_bytes),
            "macs": macs,
            "macs_unknown_nodes": unknown,
            "macs_partial": bool(unknown or others),
            "macs_notes": notes,
            "subgraph_ops": others,
            "params_in_constants": 0,
            "quantized": any(_np_dtype(tensors[i]["dtype"]) in ("int8", "uint8", "int16")
                             for i in const if i in tensors),
            "tensors": [_tensor_dict(t) for _, t in sorted(tensors.items())],
        }


def _other_subgraph_ops(data: bytes) -> Dict[str, Dict[str, int]]:
    """Op histogram of each subgraph after the primary one (control-flow bodies), by subgraph name,
    read from the flatbuffer ({} where the runtime ships no schema bindings)."""
    try:
        from ai_edge_litert import schema_py_generated as fb
    except ImportError:
        return {}
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    m = fb.Model.GetRootAs(data, 0)
    out: Dict[str, Dict[str, int]] = {}
    for i in range(1, m.SubgraphsLength()):
        sg = m.Subgraphs(i)
        ops: "Counter[str]" = Counter()
        for j in range(sg.OperatorsLength()):
            oc = m.OperatorCodes(sg.Operators(j).OpcodeIndex())
            ops[names.get(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()), "?")] += 1
        out[(sg.Name() or b"").decode() or f"subgraph {i}"] = dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def _constant_tensors(ops_details: Sequence[Dict[str, Any]], graph_inputs: Set[int]) -> Set[int]:
    """Tensors that ops read but no op produces and that are not graph inputs: the weights."""
    produced = {int(i) for op in ops_details for i in op["outputs"]}
    return {int(i) for op in ops_details for i in op["inputs"]
            if int(i) >= 0 and int(i) not in produced and int(i) not in graph_inputs}


def _param_counts(const: Set[int], tensors: Mapping[int, Dict[str, Any]]) -> Tuple[int, int]:
    """``(parameters, bytes)`` of the constant tensors."""
    params = param_bytes = 0
    for i in const:
        t = tensors.get(i)
        if t is not None:
            n = _prod(t["shape"])
            params += n
            param_bytes += n * _itemsize(t["dtype"])
    return params, param_bytes


def _tensor_dict(t: Dict[str, Any]) -> Dict[str, Any]:
    q = t.get("quantization_parameters") or {}
    scales = [float(s) for s in q.get("scales", [])]
    out: Dict[str, Any] = {"index": int(t["index"]), "name": t["name"], "shape": [int(d) for d in t["shape"]],
                           "dtype": _np_dtype(t["dtype"])}
    sig = t.get("shape_signature")
    if sig is not None and list(sig) != list(t["shape"]):
        out["shape_signature"] = [int(d) for d in sig]
    if scales:
        out["quantization"] = {"scales": scales, "zero_points": [int(z) for z in q.get("zero_points", [])],
                               "axis": int(q.get("quantized_dimension", 0))}
    return out


def _itemsize(dtype: Any) -> int:
    import numpy as np

    return int(np.dtype(dtype).itemsize)


def _macs(ops_details: Sequence[Dict[str, Any]], tensors: Dict[int, Dict[str, Any]]) -> Tuple[Optional[int], int]:
    """Multiply-accumulates of the matmul-like ops from the tensor shapes the interpreter holds."""

    def shape(i: int) -> List[int]:
        t = tensors.get(int(i))
        if t is None:
            raise TypeError("no tensor %d" % i)  # counted as unknown below
        return [int(d) for d in t["shape"]]

    total = counted = unknown = 0
    for op in ops_details:
        name = op["op_name"]
        if name not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL", "CONV_3D"):
            continue
        ins = [int(i) for i in op["inputs"]]
        outs = [int(i) for i in op["outputs"]]
        macs: Optional[int] = None
        try:
            y = shape(outs[0])
            if name in ("CONV_2D", "CONV_3D"):
                w = shape(ins[1])  # [O, kh, kw, I] (Conv3D: [kd, kh, kw, I, O])
                if name == "CONV_2D":
                    macs = _prod(y) * _prod(w[1:])
                else:
                    macs = _prod(y) * _prod(w[:-1])
            elif name == "DEPTHWISE_CONV_2D":
                w = shape(ins[1])  # [1, kh, kw, C*m]
                macs = _prod(y) * w[1] * w[2]
            elif name == "FULLY_CONNECTED":
                w = shape(ins[1])  # [units, in]
                macs = _prod(y) * w[-1]
            elif name == "TRANSPOSE_CONV":
                w, x = shape(ins[1]), shape(ins[2])  # inputs: output_shape, weights [O,kh,kw,I], input
                macs = _prod(x) * w[0] * w[1] * w[2]
            elif name == "BATCH_MATMUL":
                a = shape(ins[0])
                macs = _prod(y) * a[-1]
        except (TypeError, IndexError, KeyError, ValueError):
            macs = None
        if macs is None or macs < 0:
            unknown += 1
        else:
            total += macs
            counted += 1
    return (total if counted else None), unknown
