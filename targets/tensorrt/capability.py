"""``sdk check --target tensorrt[@VERSION] [--dla]``: TensorRT's ONNX parser and the DLA, node by node,
from the published tables (:mod:`.onnx_ops` for the parser; the DLA rules below), without TensorRT.

DLA rules: TensorRT developer guide, "Working with DLA" / "DLA Supported Layers and Restrictions":
the per-layer limits of the 8.x guide (kernel, pad, stride, dilation ranges; the layers DLA has;
Softmax on Orin only; Slice and Softmax FP16 only; explicit Q/DQ not run on DLA) and the general
limits the current page (docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/
dla-layer-restrictions.html) keeps: batch <= 4096, non-batch dims <= 8192, no dynamic dims.
ONNX ops map to the layer the parser makes (Conv -> convolution, BatchNormalization -> scale,
Add/Sub/Mul/Max/Min -> elementwise, Clip(0, 6) -> clipped ReLU, ...). DLA runs FP16 and INT8
only; a layer it cannot run falls back to the GPU (GPU fallback on). Orin-only layers: Softmax.
TensorRT 11.0-11.3 have no DLA, and the 11.3 guide names 10.7 as the last release with DLA.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...errors import InputError
from ..capability import CapabilityChecker, NodeVerdict
from .onnx_ops import ParserTable, dtype_supported, parser_table

__all__ = ["TensorRTChecker", "DLA_SOURCE"]

DLA_SOURCE = ("TensorRT developer guide, 'DLA Supported Layers and Restrictions' "
              "(8.x guide's layer limits; general limits as on docs.nvidia.com/deeplearning/tensorrt/latest/"
              "inference-library/dla-layer-restrictions.html)")

_STANDARD_DOMAINS = ("", "ai.onnx")
_NO_LAYER = ("Constant", "Identity", "Dropout")  # folded or removed by the parser: no layer of their own


def _version(text: Optional[str]) -> Tuple[int, int]:
    if text is None:
        return (10, 3)  # JetPack 6's TensorRT
    parts = text.split(".")
    try:
        major = int(parts[0])
        minor = int(parts[1]) if len(parts) > 1 and parts[1] != "x" else {8: 6, 10: 3, 11: 0}.get(major, 0)
    except ValueError as exc:
        raise InputError(f"bad TensorRT version '{text}'", "write e.g. tensorrt@8.6, tensorrt@10.3, tensorrt@11") from exc
    return major, minor


class _Graph:
    """What the rules need of an ONNX graph: dtypes and shapes (after shape inference), constants,
    node attributes."""

    def __init__(self, proto: Any):
        import onnx
        from onnx import helper

        from ...formats.onnx import weightless

        try:
            inferred = onnx.shape_inference.infer_shapes(weightless(proto)).graph
        except Exception:  # a graph shape inference cannot follow: check with what the file says
            inferred = proto.graph
        g = proto.graph
        self.graph = g
        self.dtype: Dict[str, str] = {}
        self.shape: Dict[str, List[Optional[int]]] = {}
        for vi in list(inferred.input) + list(inferred.value_info) + list(inferred.output):
            tt = vi.type.tensor_type
            if tt.elem_type:
                self.dtype[vi.name] = onnx.TensorProto.DataType.Name(tt.elem_type)
            if tt.HasField("shape"):
                self.shape[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        self.const: Dict[str, Any] = {}
        for init in g.initializer:
            self.const[init.name] = init
            self.dtype.setdefault(init.name, onnx.TensorProto.DataType.Name(init.data_type))
            self.shape.setdefault(init.name, list(init.dims))
        for n in g.node:
            if n.op_type == "Constant" and n.output:
                self.const[n.output[0]] = n
        self._attr = helper.get_attribute_value

    def attr(self, node: Any, name: str, default: Any = None) -> Any:
        for a in node.attribute:
            if a.name == name:
                v = self._attr(a)
                return v.decode() if isinstance(v, bytes) else v
        return default

    def array(self, name: str) -> Optional[Any]:
        """The value of a constant input (initializer or Constant node), else None."""
        from onnx import numpy_helper

        src = self.const.get(name)
        if src is None:
            return None
        if hasattr(src, "dims"):
            return numpy_helper.to_array(src)
        for a in src.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
        return None

    def rank(self, name: str) -> Optional[int]:
        s = self.shape.get(name)
        return None if s is None else len(s)


Rule = Callable[[Any, _Graph, ParserTable], Optional[str]]


def _rank_in(ranks: Sequence[int], what: str) -> Rule:
    def rule(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
        r = g.rank(node.input[0]) if node.input else None
        if r is not None and r not in ranks:
            return f"{what} only (input rank {r})"
        return None
    return rule


def _const_input(index: int, what: str) -> Rule:
    def rule(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
        if len(node.input) > index and node.input[index] and node.input[index] not in g.const:
            return f"`{what}` must be a constant (an initializer) for the parser"
        return None
    return rule


def _zero_point(index: int) -> Rule:
    def rule(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
        if len(node.input) > index and node.input[index]:
            zp = g.array(node.input[index])
            if zp is None:
                return "the zero point must be a constant"
            if (zp != 0).any():
                return "the zero point must be 0 (TensorRT quantizes symmetrically)"
        return None
    return rule


def _no_second_output(what: str) -> Rule:
    def rule(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
        return f"the `{what}` output is unsupported" if len(node.output) > 1 and node.output[1] else None
    return rule


def _unit_dilations(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
    if table.version.startswith("8."):
        return None
    d = g.attr(node, "dilations")
    return "`dilations` must be empty or all ones" if d and any(int(x) != 1 for x in d) else None


_RESIZE_COORDS = ("half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners")
_RESIZE_NEAREST = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def _resize(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
    mode = g.attr(node, "mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"resize mode '{mode}' is unsupported (nearest, linear)"
    coord = g.attr(node, "coordinate_transformation_mode", "half_pixel")
    if coord not in _RESIZE_COORDS:
        return f"coordinate_transformation_mode '{coord}' is unsupported ({', '.join(_RESIZE_COORDS)})"
    if mode == "nearest" and g.attr(node, "nearest_mode", "round_prefer_floor") not in _RESIZE_NEAREST:
        return f"nearest_mode '{g.attr(node, 'nearest_mode')}' is unsupported"
    if not table.version.startswith("8.") and g.attr(node, "antialias", 0):
        return "antialiasing is unsupported"
    return None


def _reduce_axes(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
    if table.version in ("10.2-10.x", "11.x") and len(node.input) > 1 and node.input[1] and node.input[1] not in g.const:
        return "`axes` must be an initializer"
    return None


def _topk(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
    if table.version.startswith("8."):
        return None
    if g.attr(node, "sorted", 1) != 1:
        return "`sorted` must be 1"
    k = g.array(node.input[1]) if len(node.input) > 1 else None
    if k is not None and int(k.reshape(-1)[0]) >= 3840:
        return f"K={int(k.reshape(-1)[0])}: K must be less than 3840"
    return None


def _scatter_nd(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
    red = g.attr(node, "reduction", "none")
    return f"reduction '{red}' is unsupported (only none)" if red != "none" and not table.version.startswith("8.") else None


def _einsum(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
    eq = str(g.attr(node, "equation", ""))
    return "ellipsis (...) in the equation is unsupported" if table.version.startswith("8.") and "..." in eq else None


def _only_in_8(rule: Rule) -> Rule:
    def wrapped(node: Any, g: _Graph, table: ParserTable) -> Optional[str]:
        return rule(node, g, table) if table.version.startswith("8.") else None
    return wrapped


_POOL_RANK = _rank_in((4, 5), "2D or 3D pooling")
#: op -> the parser restrictions checked before a build (the table's "Restrictions" column)
PARSER_RULES: Dict[str, List[Rule]] = {
    "AveragePool": [_POOL_RANK, _unit_dilations],
    "MaxPool": [_POOL_RANK, _no_second_output("Indices"), _unit_dilations],
    "LpPool": [_unit_dilations],
    "QuantizeLinear": [_zero_point(2)],
    "DequantizeLinear": [_zero_point(2)],
    "Resize": [_resize],
    "CumSum": [_const_input(1, "axis")],
    "Slice": [_only_in_8(_const_input(3, "axes"))],
    "Squeeze": [_const_input(1, "axes")],
    "Unsqueeze": [_const_input(1, "axes")],
    "TopK": [_topk],
    "ScatterND": [_scatter_nd],
    "Einsum": [_einsum],
    "LayerNormalization": [lambda n, g, t: "only the first output `Y` is supported"
                           if any(o for o in list(n.output)[1:]) else None],
    **{op: [_reduce_axes] for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                                     "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")},
}


def _remedies(op: str, domain: str) -> List[str]:
    """What to do about a node the parser cannot turn into a TensorRT layer."""
    out = [f"a plugin: the parser looks up a TensorRT plugin registered under the op's name '{op}' "
           "(an IPluginV2DynamicExt/IPluginV3 creator); load its library before the build"]
    out.append("run that part elsewhere: cut the model around the node (sdk debug reduce writes the subgraph) "
               "and run it on onnxruntime, the rest on TensorRT")
    return out


# -- DLA ---------------------------------------------------------------------------------------

def _ints(v: Any, n: int, default: int) -> List[int]:
    return [int(x) for x in v] if v else [default] * n


def _dla_conv(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    if g.rank(node.input[0]) != 4:
        return "2 spatial dims (4D input) only"
    w = g.shape.get(node.input[1]) if len(node.input) > 1 else None
    if node.input[1] not in g.const:
        return "weights must be constant"
    k = [int(x or 0) for x in (g.attr(node, "kernel_shape") or (w[2:] if w else []))]
    if any(not 1 <= x <= 32 for x in k):
        return f"kernel {k}: each dim must be in [1, 32]"
    pads = _ints(g.attr(node, "pads"), 4, 0)
    if any(not 0 <= p <= 31 for p in pads):
        return f"pads {pads}: must be in [0, 31]"
    if k and any(p >= k[i % 2] for i, p in enumerate(pads)):
        return f"pads {pads} must be smaller than the kernel {k}"
    strides = _ints(g.attr(node, "strides"), 2, 1)
    if any(not 1 <= s <= 8 for s in strides):
        return f"strides {strides}: must be in [1, 8]"
    dil = _ints(g.attr(node, "dilations"), 2, 1)
    if any(not 1 <= d <= 32 for d in dil):
        return f"dilations {dil}: must be in [1, 32]"
    if w and w[0] is not None and not 1 <= int(w[0]) <= 8192:
        return f"{w[0]} output maps: must be in [1, 8192]"
    groups = int(g.attr(node, "group", 1))
    if not 1 <= groups <= 8192:
        return f"groups {groups}: must be in [1, 8192]"
    return None


def _dla_deconv(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    if g.rank(node.input[0]) != 4:
        return "2 spatial dims (4D input) only"
    w = g.shape.get(node.input[1]) if len(node.input) > 1 else None
    k = [int(x or 0) for x in (g.attr(node, "kernel_shape") or (w[2:] if w else []))]
    wide = len(k) == 2 and ((k[0] == 1 and k[1] in (64, 96, 128)) or (k[1] == 1 and k[0] in (64, 96, 128)))
    if any(not 1 <= x <= 32 for x in k) and not wide:
        return f"kernel {k}: each dim must be in [1, 32] (or 1x64/96/128)"
    strides = _ints(g.attr(node, "strides"), 2, 1)
    if len(k) == 2 and k[0] == k[1] and 23 <= k[0] <= 32 or (strides[0] == strides[1] and 23 <= strides[0] <= 32):
        return "square kernels and strides in [23, 32] are disabled on DLA"
    if any(int(p) != 0 for p in _ints(g.attr(node, "pads"), 4, 0)):
        return "padding must be 0"
    if int(g.attr(node, "group", 1)) != 1:
        return "grouped deconvolution must have group 1"
    if any(d != 1 for d in _ints(g.attr(node, "dilations"), 2, 1)):
        return "dilated deconvolution must have dilation 1"
    return None


def _dla_pool(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    if g.rank(node.input[0]) != 4:
        return "2 spatial dims (4D input) only"
    if node.op_type.startswith("Global"):
        s = g.shape.get(node.input[0]) or []
        hw = s[2:4]
        if len(hw) != 2 or any(d is None for d in hw):
            return "global pooling over dynamic H, W"
        k = [int(d) for d in hw]  # type: ignore[arg-type]
        strides, pads = [1, 1], [0, 0, 0, 0]
    else:
        k = _ints(g.attr(node, "kernel_shape"), 2, 1)
        strides = _ints(g.attr(node, "strides"), 2, 1)
        pads = _ints(g.attr(node, "pads"), 4, 0)
    if any(not 1 <= x <= 8 for x in k):
        return f"window {k}: each dim must be in [1, 8]"
    if any(not 0 <= p <= 7 for p in pads):
        return f"pads {pads}: must be in [0, 7]"
    if any(not 1 <= s <= 16 for s in strides):
        return f"strides {strides}: must be in [1, 16]"
    return None


def _dla_4d(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    out = node.output[0]
    r = g.rank(out)
    if r is not None and r != 4:
        return f"2 spatial dims (4D tensors) only, this one has rank {r}"
    return None


def _dla_leaky(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    return _dla_4d(node, g, soc, prec) or ("a negative slope is unsupported" if float(g.attr(node, "alpha", 0.01)) < 0 else None)


def _dla_clip(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    bad = _dla_4d(node, g, soc, prec)
    if bad:
        return bad
    lo = g.array(node.input[1]) if len(node.input) > 1 and node.input[1] else g.attr(node, "min")
    hi = g.array(node.input[2]) if len(node.input) > 2 and node.input[2] else g.attr(node, "max")
    if lo is None or hi is None:
        return "only a clipped ReLU (Clip with constant min 0 and max in [1, 127])"
    lo_f, hi_f = float(lo if not hasattr(lo, "reshape") else lo.reshape(-1)[0]), float(hi if not hasattr(hi, "reshape") else hi.reshape(-1)[0])
    if lo_f != 0.0 or not 1.0 <= hi_f <= 127.0:
        return f"Clip({lo_f:g}, {hi_f:g}): only a clipped ReLU with min 0 and max in [1, 127]"
    return None


def _dla_prelu(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    if node.input[1] not in g.const:
        return "slopes must be a build-time constant"
    if g.rank(node.input[1]) != g.rank(node.input[0]):
        return "slopes must have the rank of the input"
    return None


def _dla_concat(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    r = g.rank(node.output[0])
    axis = int(g.attr(node, "axis", 1))
    if r is not None and axis < 0:
        axis += r
    if r != 4:
        return f"4D tensors only (rank {r})"
    if axis != 1:
        return f"concatenation only along the channel axis (this one: axis {axis})"
    if len([i for i in node.input if i]) < 2:
        return "at least two inputs"
    return None


def _dla_resize(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    i, o = g.shape.get(node.input[0]), g.shape.get(node.output[0])
    if not i or not o or len(i) != 4 or len(o) != 4 or any(d is None for d in i + o):
        return "4 static scales (4D, static shapes) only"
    scales = [o[k] / i[k] for k in range(4)]  # type: ignore[operator]
    if scales[0] != 1 or scales[1] != 1:
        return "batch and channel scales must be 1"
    hi = 32 if g.attr(node, "mode", "nearest") == "nearest" else 4
    if any(s != int(s) or not 1 <= s <= hi for s in scales[2:]):
        return f"H, W scales {scales[2:]}: integers in [1, {hi}] for this mode"
    return None


def _dla_slice(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    if prec == "int8":
        return "Slice runs in FP16 only on DLA"
    if g.rank(node.input[0]) != 4:
        return "4D inputs only"
    params = node.input[1:] if node.op_type == "Slice" else node.input[1:2]
    if any(p and p not in g.const for p in params):
        return "static slicing only (constant starts/ends/axes/steps)"
    return None


def _dla_softmax(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    if soc != "orin":
        return "Softmax runs on Orin's DLA only, not Xavier's"
    if prec == "int8":
        return "Softmax runs in FP16 only on DLA"
    return None


def _dla_lrn(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    size = int(g.attr(node, "size", 0))
    return None if size in (3, 5, 7, 9) else f"window {size}: 3, 5, 7 or 9 only"


def _dla_qdq(node: Any, g: _Graph, soc: str, prec: str) -> Optional[str]:
    return "explicit Q/DQ nodes are not run on DLA (DLA INT8 takes calibrated ranges)"


DlaRule = Callable[[Any, _Graph, str, str], Optional[str]]
#: ONNX op -> the DLA layer rule; ops not listed have no DLA layer and fall back to the GPU
DLA_RULES: Dict[str, DlaRule] = {
    "Conv": _dla_conv, "Gemm": _dla_4d, "ConvTranspose": _dla_deconv,
    "MaxPool": _dla_pool, "AveragePool": _dla_pool, "GlobalAveragePool": _dla_pool, "GlobalMaxPool": _dla_pool,
    "Relu": _dla_4d, "Sigmoid": _dla_4d, "Tanh": _dla_4d, "LeakyRelu": _dla_leaky, "Clip": _dla_clip,
    "PRelu": _dla_prelu,
    "Add": _dla_4d, "Sub": _dla_4d, "Mul": _dla_4d, "Max": _dla_4d, "Min": _dla_4d,
    "BatchNormalization": _dla_4d, "LRN": _dla_lrn, "Concat": _dla_concat, "Resize": _dla_resize,
    "Abs": _dla_4d, "Slice": _dla_slice, "Split": _dla_slice, "Softmax": _dla_softmax,
    "QuantizeLinear": _dla_qdq, "DequantizeLinear": _dla_qdq,
}


def _dla_general(node: Any, g: _Graph) -> Optional[str]:
    for name in list(node.input[:1]) + list(node.output[:1]):
        s = g.shape.get(name)
        if s is None:
            continue
        if any(d is None for d in s):
            return "dynamic dims: DLA needs static shapes (give --input-shape)"
        if len(s) >= 1 and s[0] is not None and s[0] > 4096:
            return f"batch {s[0]} > 4096"
        if any(d is not None and d > 8192 for d in s[1:]):
            return f"a non-batch dim of {s} is > 8192"
    return None


class TensorRTChecker(CapabilityChecker):
    """TensorRT's ONNX parser (and the DLA with ``dla=True``) node by node, from the tables."""

    name = "tensorrt"
    formats = ("onnx",)
    options = ("dla", "soc", "precision", "input_shapes")

    def __init__(self, version: Optional[str] = None, **options: Any) -> None:
        super().__init__(version, **options)
        self.trt_version = _version(version)
        self.table = parser_table(self.trt_version)
        self.dla = bool(self.opts.get("dla"))
        self.soc = str(self.opts.get("soc") or "orin").lower()
        if self.soc not in ("orin", "xavier"):
            raise InputError(f"unknown DLA SoC '{self.soc}'", "give --soc orin or --soc xavier")
        self.precision = str(self.opts.get("precision") or ("fp16" if self.dla else "fp32")).lower()
        if self.precision not in ("fp32", "fp16", "int8"):
            raise InputError(f"unknown precision '{self.precision}'", "give fp32, fp16 or int8")
        if self.dla:
            major, minor = self.trt_version
            if major >= 11 or (major == 10 and minor > 7):
                raise InputError(f"TensorRT {major}.{minor} has no DLA (the TensorRT 11.3 guide: 10.7 was the last "
                                 "release that supported DLA; 11.0-11.3 have none)",
                                 "check against tensorrt@8.6 (JetPack 5) or tensorrt@10.3 (JetPack 6)")
            if self.precision == "fp32":
                raise InputError("DLA runs FP16 and INT8 only", "give --precision fp16 or int8")

    def version_label(self) -> str:
        return "%d.%d" % self.trt_version

    def devices(self) -> Tuple[str, str]:
        return ("DLA (%s)" % self.soc.capitalize(), "GPU") if self.dla else ("GPU", "-")

    def source(self) -> str:
        return self.table.cite() + ("; " + DLA_SOURCE if self.dla else "")

    def _check_impl(self, model: Any) -> Tuple[List[NodeVerdict], List[str]]:
        shapes = self.opts.get("input_shapes")
        if shapes:
            model = model.with_input_shapes(shapes)
        proto = model.proto
        notes: List[str] = []
        opset = next((o.version for o in proto.opset_import if o.domain in _STANDARD_DOMAINS), None)
        if opset is not None and not self.table.min_opset <= opset <= self.table.max_opset:
            notes.append(f"opset {opset} is outside the parser's range {self.table.min_opset}-{self.table.max_opset} "
                         f"(sdk can convert: Model.with_opset)")
        has_qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node)
        if self.trt_version[0] >= 11 and self.precision == "int8" and not has_qdq:
            notes.append("TensorRT 11 builds INT8 only from Q/DQ nodes: run sdk quantize --target tensorrt first")
        if self.table.assumed:
            notes.append(f"TensorRT {self.version_label()}: no parser table of its own was published; "
                         f"checked against {self.table.source}")
        g = _Graph(proto)
        out = [self._node(n, g) for n in proto.graph.node]
        return out, notes

    def _node(self, node: Any, g: _Graph) -> NodeVerdict:
        name = node.name or (node.output[0] if node.output else node.op_type)
        op = node.op_type
        label = op if node.domain in _STANDARD_DOMAINS else f"{node.domain}:{op}"
        tv = "TensorRT " + self.version_label()
        if node.domain not in _STANDARD_DOMAINS:
            return NodeVerdict(name, label, "fails", "-", f"custom op of domain '{node.domain}': {tv}'s parser has "
                               "no layer for it", _remedies(op, node.domain))
        entry = self.table.lookup(op)
        if entry is None:
            return NodeVerdict(name, label, "fails", "-", f"not in {tv}'s ONNX operator table", _remedies(op, ""))
        supported, types = entry
        if not supported:
            return NodeVerdict(name, label, "fails", "-", f"{tv}'s ONNX parser does not support {op}", _remedies(op, ""))
        first = next((i for i in node.input if i), None)
        dtype = g.dtype.get(first) if first else None
        if op in ("ConstantOfShape", "EyeLike", "Range") and node.output:
            dtype = g.dtype.get(node.output[0], dtype)
        lenient = self.table.version.startswith("8.") and dtype in ("INT32", "INT64")  # 8.6: "limited support"
        if (dtype and types and not lenient and op not in ("Cast", "Shape", "Size")
                and not dtype_supported(self.table, types, dtype)):
            return NodeVerdict(name, label, "fails", "-",
                               f"input type {dtype} is not among {tv}'s types for {op} ({', '.join(types)})",
                               ["cast the input to a supported type before this node (or export in that type)"])
        for rule in PARSER_RULES.get(op, ()):
            why = rule(node, g, self.table)
            if why:
                return NodeVerdict(name, label, "fails", "-", f"{tv}: {why}", _remedies(op, ""))
        if op in _NO_LAYER:
            return NodeVerdict(name, label, "runs", "-", "no layer of its own (folded by the parser)")
        if not self.dla:
            return NodeVerdict(name, label, "runs", "GPU")
        rule_dla = DLA_RULES.get(op)
        if rule_dla is None:
            return NodeVerdict(name, label, "fallback", "GPU", f"no DLA layer for {op}")
        why = _dla_general(node, g) or rule_dla(node, g, self.soc, self.precision)
        if why:
            return NodeVerdict(name, label, "fallback", "GPU", f"DLA: {why}")
        return NodeVerdict(name, label, "runs", "DLA")
