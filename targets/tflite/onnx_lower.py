"""ONNX nodes -> TFLite builtin operators (float), NCHW activations kept NHWC inside.

Every ONNX tensor has a *layout*: the permutation ``p`` such that the TFLite tensor holds
``onnx_value.transpose(p)`` (``None``: the ONNX layout itself). Convolutions, pools and resizes read
and write NHWC (``p = (0, 2, 3, 1)``); element-wise ops, Concat, Split, Slice, Pad, Softmax and the
reductions follow their inputs' layout (their axes remapped); Reshape, Flatten, MatMul and Gather
need the ONNX layout, so a TRANSPOSE is inserted only there (once per tensor and layout) and at the
graph boundaries. Constants are transposed when they are written, never at run time.

One handler per ONNX op type in :data:`HANDLERS`. A node that TFLite cannot express raises one
:class:`~sdk.errors.ConversionError` naming the node, its op and the attribute, before anything is
written. Activation Q/DQ pairs (a QDQ model) are read as the quantization of their tensor
(:attr:`Lowering.qparams`) and lowered as identities; the int8 pass (:mod:`.int8`) uses them. A QDQ
model written as a float file (``fake_quant``) keeps them as QUANTIZE -> DEQUANTIZE: the same
fake quantization the ONNX graph computes, so the file's outputs are the QDQ model's.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ConversionError
from .onnx_prep import Prepared
from .tflgraph import TFLGraph

__all__ = ["Lowering", "HANDLERS", "NHWC", "lower"]

Perm = Optional[Tuple[int, ...]]
NHWC: Tuple[int, ...] = (0, 2, 3, 1)
ACT = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4}
PAD_SAME, PAD_VALID = 0, 1


def _inv(p: Sequence[int]) -> Tuple[int, ...]:
    out = [0] * len(p)
    for i, v in enumerate(p):
        out[v] = i
    return tuple(out)


def _stored(shape: Sequence[int], perm: Perm) -> Tuple[int, ...]:
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


class Lowering:
    """The state of one conversion: the TFLite graph being built and each ONNX tensor's TFLite
    tensor and layout."""

    def __init__(self, prep: Prepared, io_layout: str = "onnx", fake_quant: bool = False,
                 root: Optional[TFLGraph] = None, name: str = "main"):
        self.p = prep
        self.fake_quant = fake_quant                     # Q/DQ as QUANTIZE/DEQUANTIZE, not identities
        self.g = TFLGraph(name)
        #: the model's main graph, which holds every subgraph (a Loop body's lowering adds its own there)
        self.root = root if root is not None else self.g
        #: int64 activations written int32 (a Loop body's counters and indices, as its constants are)
        self.int32_indices = root is not None
        self.vals: Dict[str, Tuple[int, Perm]] = {}
        self._cache: Dict[Tuple[str, Perm], int] = {}
        self.qparams: Dict[str, Tuple[float, int]] = {}   # ONNX activation -> (scale, zero point)
        self.io_layout = io_layout
        #: activations quantized to int16 (16x8) -> their (scale, 0); ``qparams`` holds their int8 copy
        self.qparams16: Dict[str, Tuple[float, int]] = {}
        self.node: Any = None

    # -- tensors ---------------------------------------------------------------------------------
    def fail(self, what: str, attribute: Optional[str] = None) -> ConversionError:
        n = self.node
        where = f"node '{n.name or n.output[0]}' ({n.op_type})" if n is not None else "the graph"
        attr = f", attribute {attribute}" if attribute else ""
        return ConversionError(f"{where}{attr}: {what}", "TFLite cannot express it; export the model without it")

    def shape(self, name: str) -> Tuple[int, ...]:
        return self.p.shapes[name]

    def is_const(self, name: str) -> bool:
        return name in self.p.consts

    def const(self, name: str) -> np.ndarray:
        return np.asarray(self.p.consts[name])

    def out(self, name: str, perm: Perm, dtype: Optional[str] = None) -> int:
        dt = dtype or self.p.dtypes.get(name, "float32")
        if dt == "int64" and self.int32_indices:
            dt = "int32"
        t = self.g.add_tensor(name, _stored(self.shape(name), perm), dt)
        self.vals[name] = (t, perm)
        self.tag(t, name, perm)
        return t

    def tag(self, t: int, onnx_name: str, perm: Perm) -> None:
        self.g.tensors[t].onnx = onnx_name
        self.g.tensors[t].perm = perm

    def alias(self, dst: str, src: str) -> None:
        self.vals[dst] = self.vals[src] if src in self.vals else self._const_val(src)

    def _const_val(self, name: str) -> Tuple[int, Perm]:
        arr = self.const(name)
        dt = "float32" if arr.dtype.kind == "f" else "int32" if arr.dtype == np.int64 else str(arr.dtype)
        t = self.g.add_tensor(name, arr.shape, dt, arr.astype(dt))
        self.vals[name] = (t, None)
        return t, None

    def layout(self, name: str) -> Perm:
        if self.is_const(name):
            return None
        return self.vals[name][1]

    def get(self, name: str, perm: Perm) -> int:
        """The TFLite tensor holding ``name`` in layout ``perm`` (a TRANSPOSE inserted once if needed;
        a constant is transposed at write time)."""
        if self.is_const(name):
            key = (name, perm)
            if key not in self._cache:
                arr = self.const(name)
                if perm is not None:
                    if arr.ndim < len(perm):
                        arr = arr.reshape((1,) * (len(perm) - arr.ndim) + arr.shape)
                    arr = arr.transpose(perm)
                dt = "float32" if arr.dtype.kind == "f" else "int32" if arr.dtype == np.int64 else str(arr.dtype)
                self._cache[key] = self.g.add_tensor(name if perm is None else f"{name}/nhwc", arr.shape, dt,
                                                     arr.astype(dt))
            return self._cache[key]
        t, cur = self.vals[name]
        if cur == perm or (cur is None and perm is not None and list(perm) == sorted(perm)):
            return t
        key = (name, perm)
        if key in self._cache:
            return self._cache[key]
        rank = len(self.shape(name))
        pc = cur if cur is not None else tuple(range(rank))
        pw = perm if perm is not None else tuple(range(rank))
        inv = _inv(pc)
        q = [inv[pw[i]] for i in range(rank)]
        suffix = "nhwc" if perm == NHWC else "onnx" if perm is None else "t"
        dst = self.g.add_tensor(f"{name}/{suffix}", _stored(self.shape(name), perm), self.g.tensors[t].dtype)
        self.g.add_op("TRANSPOSE", [t, self.g.const(f"{name}/perm", np.array(q, np.int32))], [dst],
                      "TransposeOptions", source=self.node.name if self.node is not None else "")
        self.tag(dst, name, perm)
        self._cache[key] = dst
        return dst

    def ints(self, arr: Any, name: str) -> int:
        return self.g.const(name, np.asarray(arr, np.int64).astype(np.int32), "int32")

    def op(self, code: str, inputs: Sequence[int], outputs: Sequence[int], options_type: Optional[str] = None,
           **options: Any) -> None:
        self.g.add_op(code, inputs, outputs, options_type, source=self.node.name, **options)

    def data_perm(self, names: Sequence[str]) -> Perm:
        """The layout a layout-following op uses: NHWC when some activation input is NHWC and all
        activation inputs have the output's rank, else the ONNX layout."""
        acts = [n for n in names if n and not self.is_const(n)]
        rank = len(self.shape(self.node.output[0]))
        if any(self.layout(n) == NHWC for n in acts) and all(len(self.shape(n)) == rank for n in acts) and rank == 4:
            return NHWC
        return None

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> TFLGraph:
        for name in self.p.inputs:
            shape = self.shape(name)
            perm: Perm = NHWC if (self.io_layout == "nhwc" and len(shape) == 4) else None
            t = self.out(name, perm, self.p.dtypes.get(name, "float32"))
            self.g.inputs.append(t)
        for node in self.p.nodes:
            self.node = node
            fn = HANDLERS.get(node.op_type)
            if fn is None or node.domain not in ("", "ai.onnx") and not (
                    node.domain == "com.microsoft" and node.op_type in _MS_QDQ):
                raise self.fail("no TFLite builtin operator for this op")
            fn(self, node)
        self.node = None
        for name in self.p.outputs:
            perm = NHWC if (self.io_layout == "nhwc" and len(self.shape(name)) == 4) else None
            t = self.get(name, perm)
            if self.g.tensors[t].name != name:
                # the graph output carries the ONNX name; the internal tensor gets a suffix
                other = self.g._names.get(name)
                if other is not None and other != t:
                    self.g.tensors[other].name = name + "/internal"
                    self.g._names[name + "/internal"] = other
                self.g.tensors[t].name = name
                self.g._names[name] = t
            src = self.g.tensors[self.vals[name][0]].onnx if name in self.vals else name
            for qp in (self.qparams, self.qparams16):   # a quantized output (a DequantizeLinear's): its pair's
                if src in qp and name not in qp:
                    qp[name] = qp[src]
            self.g.tensors[t].onnx = name   # an Identity's output (a flattened If's): the graph's name, not its source's
            self.g.outputs.append(t)
        fuse_activations(self.g)
        self.g.prune()
        return self.g


# -- helpers for handlers --------------------------------------------------------------------------
def _spatial_padding(lw: Lowering, in_hw: Sequence[int], out_hw: Sequence[int], k: Sequence[int],
                     s: Sequence[int], d: Sequence[int], pads: Sequence[int]) -> Tuple[int, List[int]]:
    """``(TFLite padding, explicit pads [top, left, bottom, right] still to apply)``."""
    if not any(pads):
        return PAD_VALID, [0, 0, 0, 0]
    same = []
    for i in range(2):
        o = -(-in_hw[i] // s[i])
        total = max((o - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i], 0)
        same.append((total // 2, total - total // 2, o))
    if all(pads[i] == same[i][0] and pads[i + 2] == same[i][1] and out_hw[i] == same[i][2] for i in range(2)):
        return PAD_SAME, [0, 0, 0, 0]
    return PAD_VALID, list(pads)


def _pads_attr(lw: Lowering, node: Any, in_hw: Sequence[int], k: Sequence[int], s: Sequence[int],
               d: Sequence[int]) -> List[int]:
    auto = _attr(node, "auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = list(_attr(node, "pads", [0, 0, 0, 0]))
        return [0, 0, 0, 0] if auto == "VALID" else pads
    pads = [0, 0, 0, 0]
    for i in range(2):
        o = -(-in_hw[i] // s[i])
        total = max((o - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i], 0)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        pads[i], pads[i + 2] = lo, total - lo
    return pads


def _explicit_pad(lw: Lowering, x: int, name: str, pads: Sequence[int], value: float = 0.0) -> int:
    """PAD (or PADV2 with ``value``) of an NHWC tensor by ``[top, left, bottom, right]``."""
    n, h, w, c = lw.g.tensors[x].shape
    pad = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
    y = lw.g.add_tensor(f"{name}/pad", (n, h + pads[0] + pads[2], w + pads[1] + pads[3], c))
    lw.tag(y, "", NHWC)  # a padded copy holds no ONNX tensor
    if value == 0.0:
        lw.op("PAD", [x, lw.g.const(f"{name}/paddings", pad, "int32")], [y], "PadOptions")
    else:
        lw.op("PADV2", [x, lw.g.const(f"{name}/paddings", pad, "int32"),
                        lw.g.const(f"{name}/pad_value", np.array(value, np.float32))], [y], "PadV2Options")
    return y


#: the layout of a 1-D convolution's activations inside the file: ``[N, L, C]`` (ONNX ``[N, C, L]``)
NLC: Tuple[int, ...] = (0, 2, 1)


def _conv(lw: Lowering, node: Any) -> None:
    x, wname = node.input[0], node.input[1]
    if not lw.is_const(wname):
        raise lw.fail("the weights are not constant (TFLite's CONV_2D takes constant filters)", "W")
    w = lw.const(wname).astype(np.float32)
    if w.ndim == 3:
        return _conv1d(lw, node, w)
    if w.ndim != 4:
        raise lw.fail(f"{w.ndim - 2}-D convolution (1-D and 2-D convert)", "kernel_shape")
    o_ch, i_per_g, kh, kw = w.shape
    s = list(_attr(node, "strides", [1, 1]))
    d = list(_attr(node, "dilations", [1, 1]))
    in_shape = lw.shape(x)
    pads = _pads_attr(lw, node, in_shape[2:], (kh, kw), s, d)
    y = lw.out(node.output[0], NHWC)
    _emit_conv(lw, node, lw.get(x, NHWC), y, w, in_shape, lw.shape(node.output[0]), s, d, pads)


def _conv1d(lw: Lowering, node: Any, w: np.ndarray) -> None:
    """A 1-D Conv ``[N, C, L]`` as TFLite does it (TensorFlow's Conv1D lowers the same way): the
    activations held ``[N, L, C]``, reshaped to ``[N, 1, L, C]``, one CONV_2D (or DEPTHWISE) with a
    ``1 x K`` filter, reshaped back to ``[N, L', O]``."""
    x = node.input[0]
    (n, c, length), (_, o_ch, out_len) = lw.shape(x), lw.shape(node.output[0])
    s, d = [1] + list(_attr(node, "strides", [1])), [1] + list(_attr(node, "dilations", [1]))
    auto = _attr(node, "auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = [0, 0] if auto == "VALID" else list(_attr(node, "pads", [0, 0]))
    else:
        total = max((out_len - 1) * s[1] + (w.shape[2] - 1) * d[1] + 1 - length, 0)
        lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
        p = [lo, total - lo]
    base = node.name or node.output[0]
    x4 = lw.g.add_tensor(f"{base}/input_1xL", (n, 1, length, c))
    lw.tag(x4, "", NHWC)   # a reshaped copy holds no ONNX tensor
    lw.op("RESHAPE", [lw.get(x, NLC), lw.ints((n, 1, length, c), f"{base}/shape_1xL")], [x4], "ReshapeOptions",
          newShape=[n, 1, length, c])
    y4 = lw.g.add_tensor(f"{base}/output_1xL", (n, 1, out_len, o_ch))
    lw.tag(y4, node.output[0], None)   # the conv's own output: its quantization is the ONNX tensor's
    _emit_conv(lw, node, x4, y4, w[:, :, None, :], (n, c, 1, length), (n, o_ch, 1, out_len), s, d,
               [0, p[0], 0, p[1]])
    y = lw.out(node.output[0], NLC)
    lw.op("RESHAPE", [y4, lw.ints((n, out_len, o_ch), f"{base}/shape_L")], [y], "ReshapeOptions",
          newShape=[n, out_len, o_ch])


def _emit_conv(lw: Lowering, node: Any, xt: int, y: int, w: np.ndarray, in_shape: Sequence[int],
               out_shape: Sequence[int], s: Sequence[int], d: Sequence[int], pads: Sequence[int]) -> None:
    """CONV_2D / DEPTHWISE_CONV_2D of the NHWC tensor ``xt`` into ``y`` with the ONNX filter ``w``
    ``[O, I/group, kh, kw]`` and ``pads`` ``[top, left, bottom, right]``."""
    o_ch, i_per_g, kh, kw = w.shape
    group = int(_attr(node, "group", 1))
    padding, explicit = _spatial_padding(lw, in_shape[2:], out_shape[2:], (kh, kw), s, d, pads)
    if any(explicit):
        xt = _explicit_pad(lw, xt, node.name or node.output[0], explicit)
    b = lw.const(node.input[2]).astype(np.float32) if len(node.input) > 2 and node.input[2] else np.zeros(o_ch, np.float32)
    base = node.name or node.output[0]
    c_in = in_shape[1]
    if group == c_in and i_per_g == 1 and group != 1:
        wt = lw.g.const(f"{base}/filter", w.reshape(o_ch, kh, kw).transpose(1, 2, 0)[None])
        lw.op("DEPTHWISE_CONV_2D", [xt, wt, lw.g.const(f"{base}/bias", b)], [y], "DepthwiseConv2DOptions",
              padding=padding, strideW=s[1], strideH=s[0], depthMultiplier=o_ch // c_in, dilationWFactor=d[1],
              dilationHFactor=d[0], fusedActivationFunction=0)
    else:   # group 1, or grouped: CONV_2D with the per-group filter depth
        wt = lw.g.const(f"{base}/filter", w.transpose(0, 2, 3, 1))
        lw.op("CONV_2D", [xt, wt, lw.g.const(f"{base}/bias", b)], [y], "Conv2DOptions", padding=padding,
              strideW=s[1], strideH=s[0], dilationWFactor=d[1], dilationHFactor=d[0], fusedActivationFunction=0)


def _conv_transpose(lw: Lowering, node: Any) -> None:
    x, wname = node.input[0], node.input[1]
    if not lw.is_const(wname):
        raise lw.fail("the weights are not constant", "W")
    w = lw.const(wname).astype(np.float32)
    if w.ndim != 4 or int(_attr(node, "group", 1)) != 1:
        raise lw.fail("only 2-D ConvTranspose with group 1 converts", "group")
    if any(v != 1 for v in _attr(node, "dilations", [1, 1])):
        raise lw.fail("dilated ConvTranspose", "dilations")
    c_in, c_out, kh, kw = w.shape
    s = list(_attr(node, "strides", [1, 1]))
    n, _, h, wd = lw.shape(x)
    out = lw.shape(node.output[0])
    full = (n, (h - 1) * s[0] + kh, (wd - 1) * s[1] + kw, c_out)
    base = node.name or node.output[0]
    pads = list(_attr(node, "pads", [0, 0, 0, 0]))
    if _attr(node, "auto_pad", "NOTSET") not in ("NOTSET",):
        raise lw.fail("auto_pad", "auto_pad")
    xt = lw.get(x, NHWC)
    b = lw.const(node.input[2]).astype(np.float32) if len(node.input) > 2 and node.input[2] else np.zeros(c_out, np.float32)
    crop = (full[1], full[2]) != (out[2], out[3])
    y = lw.out(node.output[0], NHWC) if not crop else lw.g.add_tensor(f"{base}/full", full)
    lw.op("TRANSPOSE_CONV", [lw.ints(full, f"{base}/output_shape"),
                             lw.g.const(f"{base}/filter", w.transpose(1, 2, 3, 0)), xt,
                             lw.g.const(f"{base}/bias", b)], [y], "TransposeConvOptions",
          padding=PAD_VALID, strideW=s[1], strideH=s[0], fusedActivationFunction=0)
    if crop:
        lw.tag(y, node.output[0], NHWC)
        z = lw.out(node.output[0], NHWC)
        begin = [0, pads[0], pads[1], 0]
        end = [n, pads[0] + out[2], pads[1] + out[3], c_out]
        lw.op("STRIDED_SLICE", [y, lw.ints(begin, f"{base}/begin"), lw.ints(end, f"{base}/end"),
                                lw.ints([1, 1, 1, 1], f"{base}/strides")], [z], "StridedSliceOptions")


_BINARY = {"Add": ("ADD", "AddOptions"), "Sub": ("SUB", "SubOptions"), "Mul": ("MUL", "MulOptions"),
           "Div": ("DIV", "DivOptions"), "Max": ("MAXIMUM", "MaximumMinimumOptions"),
           "Min": ("MINIMUM", "MaximumMinimumOptions"), "Pow": ("POW", "PowOptions")}


def _binary(lw: Lowering, node: Any) -> None:
    a, b = node.input[0], node.input[1]
    code, opts = _BINARY[node.op_type]
    if node.op_type in ("Max", "Min") and len(node.input) != 2:
        raise lw.fail("Max/Min of more than two inputs")
    if node.op_type == "Div" and lw.is_const(b) and lw.const(b).dtype.kind == "f":
        # x / c -> x * (1/c): TFLite's int8 kernels have no DIV
        name = f"{node.name or node.output[0]}/reciprocal"
        lw.p.consts[name] = (1.0 / lw.const(b).astype(np.float64)).astype(np.float32)
        lw.p.shapes[name] = lw.p.consts[name].shape
        b, code, opts = name, "MUL", "MulOptions"
    perm = lw.data_perm([a, b])
    y = lw.out(node.output[0], perm)
    extra = {"fusedActivationFunction": 0} if code in ("ADD", "SUB", "MUL", "DIV") else {}
    if code in ("ADD", "SUB"):
        extra["potScaleInt16"] = False
    lw.op(code, [lw.get(a, perm), lw.get(b, perm)], [y], opts, **extra)


_UNARY = {"Relu": ("RELU", None), "Sigmoid": ("LOGISTIC", None), "Tanh": ("TANH", None), "Exp": ("EXP", "ExpOptions"),
          "Sqrt": ("SQRT", None), "HardSwish": ("HARD_SWISH", "HardSwishOptions"), "Abs": ("ABS", "AbsOptions"),
          "Neg": ("NEG", "NegOptions"), "Log": ("LOG", None), "Floor": ("FLOOR", None), "Elu": ("ELU", None),
          "Sin": ("SIN", None), "Cos": ("COS", "CosOptions"), "Reciprocal": (None, None), "Erf": (None, None)}


def _unary(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    code, opts = _UNARY[node.op_type]
    if code is None:
        raise lw.fail("no TFLite builtin operator for this op")
    if node.op_type == "Elu" and abs(float(_attr(node, "alpha", 1.0)) - 1.0) > 1e-6:
        raise lw.fail("alpha != 1", "alpha")
    perm = lw.layout(x)
    y = lw.out(node.output[0], perm)
    lw.op(code, [lw.get(x, perm)], [y], opts)


def _gelu(lw: Lowering, node: Any) -> None:
    """ONNX ``Gelu`` (opset 20, or the exact GELU the preparation found written out): TFLite GELU."""
    approximate = _attr(node, "approximate", "none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
    if approximate not in ("none", "tanh"):
        raise lw.fail(f"approximate={approximate!r}", "approximate")
    perm = lw.layout(node.input[0])
    y = lw.out(node.output[0], perm)
    lw.op("GELU", [lw.get(node.input[0], perm)], [y], "GeluOptions", approximate=approximate == "tanh")


def _layer_norm(lw: Lowering, node: Any) -> None:
    """ONNX ``LayerNormalization`` over the last axis, as TensorFlow's converter writes a layer norm:
    MEAN, SUB, MUL (the square), MEAN, ADD epsilon, RSQRT, MUL, then MUL by the scale and ADD the bias."""
    x = node.input[0]
    rank = len(lw.shape(x))
    if int(_attr(node, "axis", -1)) % rank != rank - 1:
        raise lw.fail("normalization over more than the last axis", "axis")
    if any(o for o in node.output[1:]):
        raise lw.fail("the Mean / InvStdDev outputs", "outputs")
    if not all(lw.is_const(i) for i in node.input[1:3] if i):
        raise lw.fail("a scale or bias that is not constant", "Scale")
    base = node.name or node.output[0]
    shape = lw.shape(x)
    row = tuple(shape[:-1]) + (1,)
    xt = lw.get(x, None)
    axes = lw.ints([rank - 1], f"{base}/axes")

    def t(name: str, shp: Tuple[int, ...]) -> int:
        return lw.g.add_tensor(f"{base}/{name}", shp)

    mean, centred, square, var, var_eps, inv, normed = (t("mean", row), t("centred", shape), t("square", shape),
                                                        t("var", row), t("var_eps", row), t("inv_std", row),
                                                        t("normed", shape))
    lw.op("MEAN", [xt, axes], [mean], "ReducerOptions", keepDims=True)
    lw.op("SUB", [xt, mean], [centred], "SubOptions", fusedActivationFunction=0, potScaleInt16=False)
    lw.op("MUL", [centred, centred], [square], "MulOptions", fusedActivationFunction=0)
    lw.op("MEAN", [square, axes], [var], "ReducerOptions", keepDims=True)
    eps = lw.g.const(f"{base}/epsilon", np.array(float(_attr(node, "epsilon", 1e-5)), np.float32))
    lw.op("ADD", [var, eps], [var_eps], "AddOptions", fusedActivationFunction=0, potScaleInt16=False)
    lw.op("RSQRT", [var_eps], [inv])
    scale = lw.const(node.input[1]).astype(np.float32)
    has_bias = len(node.input) > 2 and bool(node.input[2])
    scaled = t("scaled", shape) if has_bias else lw.out(node.output[0], None)
    lw.op("MUL", [centred, inv], [normed], "MulOptions", fusedActivationFunction=0)
    lw.op("MUL", [normed, lw.g.const(f"{base}/scale", scale)], [scaled], "MulOptions", fusedActivationFunction=0)
    if has_bias:
        y = lw.out(node.output[0], None)
        lw.op("ADD", [scaled, lw.g.const(f"{base}/bias", lw.const(node.input[2]).astype(np.float32))], [y],
              "AddOptions", fusedActivationFunction=0, potScaleInt16=False)


def _leaky(lw: Lowering, node: Any) -> None:
    perm = lw.layout(node.input[0])
    y = lw.out(node.output[0], perm)
    lw.op("LEAKY_RELU", [lw.get(node.input[0], perm)], [y], "LeakyReluOptions", alpha=float(_attr(node, "alpha", 0.01)))


def _prelu(lw: Lowering, node: Any) -> None:
    x, s = node.input[0], node.input[1]
    perm = lw.layout(x)
    y = lw.out(node.output[0], perm)
    if lw.is_const(s):
        arr = lw.const(s).astype(np.float32)
        rank = len(lw.shape(x))
        arr = arr.reshape((1,) * (rank - arr.ndim) + tuple(arr.shape))
        if perm is not None:
            arr = arr.transpose(perm)
        alpha = lw.g.const(f"{node.name or node.output[0]}/alpha", arr[0] if len(arr) == 1 else arr)
    else:
        alpha = lw.get(s, perm)
    lw.op("PRELU", [lw.get(x, perm), alpha], [y])


def _scalar_input(lw: Lowering, node: Any, index: int, attr: str, default: Optional[float]) -> Optional[float]:
    if len(node.input) > index and node.input[index]:
        if not lw.is_const(node.input[index]):
            raise lw.fail("a bound that is not constant", attr)
        return float(lw.const(node.input[index]).reshape(-1)[0])
    return _attr(node, attr, default)


def _computed_bound(lw: Lowering, node: Any, index: int) -> Optional[int]:
    """Clip's ``min``/``max`` input when the graph computes it (a scalar tensor: AmplitudeToDB's
    ``max(x) - top_db``): its TFLite tensor, for MAXIMUM/MINIMUM to broadcast; else None."""
    if len(node.input) > index and node.input[index] and not lw.is_const(node.input[index]):
        return lw.get(node.input[index], None)
    return None


def _clip(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    lo_t, hi_t = _computed_bound(lw, node, 1), _computed_bound(lw, node, 2)
    lo = None if lo_t is not None else _scalar_input(lw, node, 1, "min", None)
    hi = None if hi_t is not None else _scalar_input(lw, node, 2, "max", None)
    # an infinite bound clamps nothing (torch's clamp(min=...) exports max=inf): no op, and no inf
    # constant for the int8 pass to quantize
    lo = None if lo is not None and float(lo) < -3e38 else lo
    hi = None if hi is not None and float(hi) > 3e38 else hi
    perm = lw.layout(x)
    xt = lw.get(x, perm)
    named: Dict[Tuple[Optional[float], Optional[float]], str] = {
        (0.0, 6.0): "RELU6", (0.0, None): "RELU", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, 1.0): "RELU_0_TO_1"}
    key = (lo if lo is None else float(lo), hi if hi is None else float(hi))
    code = named.get(key) if lo_t is None and hi_t is None else None
    y = lw.out(node.output[0], perm)
    if code is not None:
        lw.op(code, [xt], [y])
        return
    cur = xt
    base = node.name or node.output[0]
    has_hi = hi is not None or hi_t is not None
    if lo is not None or lo_t is not None:
        nxt = y if not has_hi else lw.g.add_tensor(f"{base}/max", lw.g.tensors[xt].shape)
        lw.tag(nxt, node.output[0], perm)
        lw.op("MAXIMUM", [cur, lo_t if lo_t is not None else lw.g.const(f"{base}/lo", np.array(lo, np.float32))], [nxt])
        cur = nxt
    if has_hi:
        lw.op("MINIMUM", [cur, hi_t if hi_t is not None else lw.g.const(f"{base}/hi", np.array(hi, np.float32))], [y])
    if cur is xt and not has_hi:
        lw.vals[node.output[0]] = lw.vals[x]


def _hard_sigmoid(lw: Lowering, node: Any) -> None:
    """``max(0, min(1, a*x + b))`` as ``relu6(6a*x + 6b) / 6``: MUL, ADD with a fused RELU6, MUL --
    three ops that XNNPACK runs in float and in int8 alike."""
    x = node.input[0]
    alpha, beta = float(_attr(node, "alpha", 0.2)), float(_attr(node, "beta", 0.5))
    perm = lw.layout(x)
    base = node.name or node.output[0]
    shape = lw.g.tensors[lw.get(x, perm)].shape
    t1 = lw.g.add_tensor(f"{base}/scaled", shape)
    t2 = lw.g.add_tensor(f"{base}/relu6", shape)
    for t in (t1, t2):
        lw.tag(t, "", perm)
    lw.op("MUL", [lw.get(x, perm), lw.g.const(f"{base}/alpha6", np.array(6.0 * alpha, np.float32))], [t1],
          "MulOptions", fusedActivationFunction=0)
    lw.op("ADD", [t1, lw.g.const(f"{base}/beta6", np.array(6.0 * beta, np.float32))], [t2], "AddOptions",
          fusedActivationFunction=ACT["RELU6"])
    y = lw.out(node.output[0], perm)
    lw.op("MUL", [t2, lw.g.const(f"{base}/sixth", np.array(1.0 / 6.0, np.float32))], [y], "MulOptions",
          fusedActivationFunction=0)


def _softmax(lw: Lowering, node: Any, code: str = "SOFTMAX") -> None:
    x = node.input[0]
    rank = len(lw.shape(x))
    axis = int(_attr(node, "axis", -1 if lw.p.opset >= 13 else 1)) % rank
    if lw.p.opset < 13 and axis != rank - 1 and any(d != 1 for d in lw.shape(x)[axis + 1:]):
        raise lw.fail("opset < 13 Softmax over several trailing axes", "axis")
    perm = lw.layout(x)
    xt = lw.get(x, perm)
    stored_axis = axis if perm is None else perm.index(axis)
    opts = {"beta": 1.0} if code == "SOFTMAX" else {}
    otype = "SoftmaxOptions" if code == "SOFTMAX" else "LogSoftmaxOptions"
    if stored_axis == rank - 1:
        y = lw.out(node.output[0], perm)
        lw.op(code, [xt], [y], otype, **opts)
        return
    # move the axis last, softmax, and read the result in that layout
    base = perm if perm is not None else tuple(range(rank))
    order = [base[i] for i in range(rank) if base[i] != axis] + [axis]
    moved = lw.get(x, tuple(order))
    y = lw.out(node.output[0], tuple(order))
    lw.op(code, [moved], [y], otype, **opts)


def _log_softmax(lw: Lowering, node: Any) -> None:
    _softmax(lw, node, "LOG_SOFTMAX")


def _concat(lw: Lowering, node: Any) -> None:
    ins = [i for i in node.input if i and lw.shape(i) and 0 not in lw.shape(i)]
    rank = len(lw.shape(node.output[0]))
    axis = int(_attr(node, "axis", 0)) % rank
    perm = lw.data_perm(ins)
    stored_axis = axis if perm is None else perm.index(axis)
    y = lw.out(node.output[0], perm)
    lw.op("CONCATENATION", [lw.get(i, perm) for i in ins], [y], "ConcatenationOptions", axis=stored_axis,
          fusedActivationFunction=0)


def _split(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    rank = len(lw.shape(x))
    axis = int(_attr(node, "axis", 0)) % rank
    sizes = [lw.shape(o)[axis] for o in node.output]
    perm = lw.layout(x)
    stored_axis = axis if perm is None else perm.index(axis)
    outs = [lw.out(o, perm) for o in node.output]
    base = node.name or node.output[0]
    lw.op("SPLIT_V", [lw.get(x, perm), lw.ints(sizes, f"{base}/sizes"), lw.ints(np.array(stored_axis), f"{base}/axis")],
          outs, "SplitVOptions", numSplits=len(outs))


def _slice(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    shape = lw.shape(x)
    rank = len(shape)
    if lw.p.opset < 10:
        starts, ends = list(_attr(node, "starts")), list(_attr(node, "ends"))
        axes = list(_attr(node, "axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        for i in node.input[1:]:
            if i and not lw.is_const(i):
                raise lw.fail("starts/ends/axes/steps that are not constant", "starts")
        starts = [int(v) for v in lw.const(node.input[1]).reshape(-1)]
        ends = [int(v) for v in lw.const(node.input[2]).reshape(-1)]
        axes = [int(v) for v in lw.const(node.input[3]).reshape(-1)] if len(node.input) > 3 and node.input[3] \
            else list(range(len(starts)))
        steps = [int(v) for v in lw.const(node.input[4]).reshape(-1)] if len(node.input) > 4 and node.input[4] \
            else [1] * len(starts)
    begin, end, stride = [0] * rank, list(shape), [1] * rank
    end_mask = 0
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= rank
        dim = shape[a]
        if st > 0:
            s = min(max(s + dim if s < 0 else s, 0), dim)
            e = min(max(e + dim if e < 0 else e, 0), dim)
        else:
            s = min(max(s + dim if s < 0 else s, -1), dim - 1)
            e = min(max(e + dim if e < 0 else e, -1), dim - 1)
        begin[a], end[a], stride[a] = s, e, st
    perm = lw.layout(x)
    order = perm if perm is not None else tuple(range(rank))
    for k, a in enumerate(order):
        if stride[a] < 0 and end[a] < 0:
            end_mask |= 1 << k
    base = node.name or node.output[0]
    y = lw.out(node.output[0], perm)
    lw.op("STRIDED_SLICE", [lw.get(x, perm), lw.ints([begin[a] for a in order], f"{base}/begin"),
                            lw.ints([max(end[a], 0) if stride[a] < 0 and end[a] < 0 else end[a] for a in order],
                                    f"{base}/end"),
                            lw.ints([stride[a] for a in order], f"{base}/strides")], [y], "StridedSliceOptions",
          endMask=end_mask)


def _reshape(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    out_shape = lw.shape(node.output[0])
    if lw.shape(x) == out_shape and not lw.is_const(x):
        lw.vals[node.output[0]] = lw.vals[x]
        return
    y = lw.out(node.output[0], None)
    base = node.name or node.output[0]
    lw.op("RESHAPE", [lw.get(x, None), lw.ints(out_shape, f"{base}/shape")], [y], "ReshapeOptions",
          newShape=list(out_shape))


def _transpose(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    rank = len(lw.shape(x))
    p = list(_attr(node, "perm", list(range(rank))[::-1]))
    cur = lw.layout(x)
    pc = cur if cur is not None else tuple(range(rank))
    inv = _inv(pc)
    q = [inv[p[i]] for i in range(rank)]
    if q == list(range(rank)):
        lw.vals[node.output[0]] = (lw.vals[x][0], None)
        return
    y = lw.out(node.output[0], None)
    lw.op("TRANSPOSE", [lw.vals[x][0], lw.ints(q, f"{node.name or node.output[0]}/perm")], [y], "TransposeOptions")


def _pool(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    k = list(_attr(node, "kernel_shape"))
    if len(k) != 2:
        raise lw.fail(f"{len(k)}-D pooling (only 2-D converts)", "kernel_shape")
    s = list(_attr(node, "strides", [1, 1]))
    d = list(_attr(node, "dilations", [1, 1]))
    if any(v != 1 for v in d):
        raise lw.fail("dilated pooling", "dilations")
    in_shape, out_shape = lw.shape(x), lw.shape(node.output[0])
    pads = _pads_attr(lw, node, in_shape[2:], k, s, d)
    padding, explicit = _spatial_padding(lw, in_shape[2:], out_shape[2:], k, s, d, pads)
    is_max = node.op_type == "MaxPool"
    if len(node.output) > 1 and node.output[1]:
        raise lw.fail("the Indices output", "Indices")
    xt = lw.get(x, NHWC)
    if not is_max and int(_attr(node, "count_include_pad", 0)) and any(pads):
        padding, explicit = PAD_VALID, list(pads)  # TFLite's SAME leaves the padding out of the average
    if any(explicit):
        if not is_max and not int(_attr(node, "count_include_pad", 0)):
            raise lw.fail("asymmetric padding that TFLite's SAME does not match, with count_include_pad=0", "pads")
        xt = _explicit_pad(lw, xt, node.name or node.output[0], explicit, -3.4e38 if is_max else 0.0)
    n, h, w, _ = lw.g.tensors[xt].shape
    exp_h = (h - k[0]) // s[0] + 1 if padding == PAD_VALID else -(-h // s[0])
    exp_w = (w - k[1]) // s[1] + 1 if padding == PAD_VALID else -(-w // s[1])
    if (exp_h, exp_w) != tuple(out_shape[2:]):
        raise lw.fail(f"output {tuple(out_shape[2:])} that TFLite's pooling does not produce (ceil_mode?)", "ceil_mode")
    y = lw.out(node.output[0], NHWC)
    lw.op("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [xt], [y], "Pool2DOptions", padding=padding, strideW=s[1],
          strideH=s[0], filterWidth=k[1], filterHeight=k[0], fusedActivationFunction=0)


def _global_pool(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    rank = len(lw.shape(x))
    perm = lw.layout(x) if rank == 4 else None
    perm = NHWC if rank == 4 else perm
    axes = [perm.index(a) for a in range(2, rank)] if perm else list(range(2, rank))
    y = lw.out(node.output[0], perm)
    base = node.name or node.output[0]
    lw.op("MEAN" if node.op_type == "GlobalAveragePool" else "REDUCE_MAX",
          [lw.get(x, perm), lw.ints(axes, f"{base}/axes")], [y], "ReducerOptions", keepDims=True)


_REDUCE = {"ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN", "ReduceSum": "SUM",
           "ReduceProd": "REDUCE_PROD"}


def _reduce(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    rank = len(lw.shape(x))
    if len(node.input) > 1 and node.input[1]:
        if not lw.is_const(node.input[1]):
            raise lw.fail("axes that are not constant", "axes")
        axes = [int(v) % rank for v in lw.const(node.input[1]).reshape(-1)]
    else:
        axes = [int(v) % rank for v in _attr(node, "axes", list(range(rank)))]
    keep = bool(_attr(node, "keepdims", 1))
    perm = lw.layout(x) if keep else None
    stored = [perm.index(a) for a in axes] if perm else axes
    y = lw.out(node.output[0], perm)
    lw.op(_REDUCE[node.op_type], [lw.get(x, perm), lw.ints(stored, f"{node.name or node.output[0]}/axes")], [y],
          "ReducerOptions", keepDims=keep)


def _resize(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    in_shape, out_shape = lw.shape(x), lw.shape(node.output[0])
    if len(in_shape) != 4 or tuple(in_shape[:2]) != tuple(out_shape[:2]):
        raise lw.fail("resizing other than the two spatial axes of an NCHW tensor", "scales")
    mode = _attr(node, "mode", "nearest")
    ctm = _attr(node, "coordinate_transformation_mode", "half_pixel" if lw.p.opset >= 11 else "asymmetric")
    if lw.p.opset < 11:
        ctm = "asymmetric"
    align = ctm == "align_corners"
    half = ctm in ("half_pixel", "pytorch_half_pixel")
    if ctm not in ("align_corners", "half_pixel", "pytorch_half_pixel", "asymmetric"):
        raise lw.fail(f"coordinate_transformation_mode '{ctm}'", "coordinate_transformation_mode")
    base = node.name or node.output[0]
    size = lw.ints(list(out_shape[2:]), f"{base}/size")
    y = lw.out(node.output[0], NHWC)
    xt = lw.get(x, NHWC)
    if mode == "nearest":
        nm = _attr(node, "nearest_mode", "round_prefer_floor")
        ok = (ctm == "asymmetric" and nm == "floor") or (half and nm in ("round_prefer_ceil", "round_prefer_floor")) or \
            (align and nm in ("round_prefer_ceil", "round_prefer_floor"))
        if not ok:
            raise lw.fail(f"nearest_mode '{nm}' with coordinate_transformation_mode '{ctm}'", "nearest_mode")
        lw.op("RESIZE_NEAREST_NEIGHBOR", [xt, size], [y], "ResizeNearestNeighborOptions", alignCorners=align,
              halfPixelCenters=half)
    elif mode in ("linear", "bilinear"):
        lw.op("RESIZE_BILINEAR", [xt, size], [y], "ResizeBilinearOptions", alignCorners=align, halfPixelCenters=half)
    else:
        raise lw.fail(f"mode '{mode}'", "mode")


def _upsample(lw: Lowering, node: Any) -> None:
    _resize(lw, node)


def _pad(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    rank = len(lw.shape(x))
    mode = _attr(node, "mode", "constant")
    if len(node.input) > 1 and node.input[1]:
        if not lw.is_const(node.input[1]):
            raise lw.fail("pads that are not constant", "pads")
        pads = [int(v) for v in lw.const(node.input[1]).reshape(-1)]
    else:
        pads = list(_attr(node, "pads"))
    if len(node.input) > 3 and node.input[3]:
        raise lw.fail("the axes input", "axes")
    if any(v < 0 for v in pads):
        raise lw.fail("negative pads (cropping)", "pads")
    value = float(lw.const(node.input[2]).reshape(-1)[0]) if len(node.input) > 2 and node.input[2] else \
        float(_attr(node, "value", 0.0))
    perm = lw.layout(x)
    order = perm if perm is not None else tuple(range(rank))
    arr = np.array([[pads[a], pads[a + rank]] for a in order], np.int32)
    base = node.name or node.output[0]
    y = lw.out(node.output[0], perm)
    xt = lw.get(x, perm)
    if mode == "constant":
        if value == 0.0:
            lw.op("PAD", [xt, lw.g.const(f"{base}/paddings", arr, "int32")], [y], "PadOptions")
        else:
            lw.op("PADV2", [xt, lw.g.const(f"{base}/paddings", arr, "int32"),
                            lw.g.const(f"{base}/value", np.array(value, np.float32))], [y], "PadV2Options")
    elif mode == "reflect":
        lw.op("MIRROR_PAD", [xt, lw.g.const(f"{base}/paddings", arr, "int32")], [y], "MirrorPadOptions", mode=0)
    else:
        raise lw.fail(f"mode '{mode}'", "mode")


def _fully_connected(lw: Lowering, node: Any, a: str, w: np.ndarray, bias: Optional[np.ndarray]) -> None:
    """``y = a @ w.T + bias`` with ``w`` [units, in]: FULLY_CONNECTED (keeping ``a``'s leading dims)."""
    rank = len(lw.shape(a))
    base = node.name or node.output[0]
    y = lw.out(node.output[0], None)
    ins = [lw.get(a, None), lw.g.const(f"{base}/weights", w.astype(np.float32))]
    ins.append(lw.g.const(f"{base}/bias", bias.astype(np.float32)) if bias is not None else -1)
    lw.op("FULLY_CONNECTED", ins, [y], "FullyConnectedOptions", fusedActivationFunction=0, keepNumDims=rank > 2)


def _gemm(lw: Lowering, node: Any) -> None:
    a, b = node.input[0], node.input[1]
    alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
    if int(_attr(node, "transA", 0)):
        raise lw.fail("transA=1 on an activation", "transA")
    if not lw.is_const(b):
        raise lw.fail("a non-constant B", "B")
    w = lw.const(b).astype(np.float32)
    w = (w if int(_attr(node, "transB", 0)) else w.T) * alpha
    bias = None
    if len(node.input) > 2 and node.input[2]:
        if not lw.is_const(node.input[2]):
            raise lw.fail("a non-constant C", "C")
        c = lw.const(node.input[2]).astype(np.float32) * beta
        if c.size not in (1, w.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
            raise lw.fail("C that is not a per-unit bias", "C")
        bias = np.broadcast_to(c.reshape(-1), (w.shape[0],)).copy()
    _fully_connected(lw, node, a, w, bias)


def _matmul(lw: Lowering, node: Any) -> None:
    a, b = node.input[0], node.input[1]
    if lw.is_const(b) and lw.const(b).ndim == 2:
        _fully_connected(lw, node, a, lw.const(b).T, None)
        return
    y = lw.out(node.output[0], None)
    lw.op("BATCH_MATMUL", [lw.get(a, None), lw.get(b, None)], [y], "BatchMatMulOptions", adjX=False, adjY=False)


def _gather(lw: Lowering, node: Any) -> None:
    x, idx = node.input[0], node.input[1]
    rank = len(lw.shape(x))
    axis = int(_attr(node, "axis", 0)) % rank
    if lw.is_const(idx):
        ind = lw.const(idx).astype(np.int64)
        ind = np.where(ind < 0, ind + lw.shape(x)[axis], ind)
        it = lw.ints(ind, f"{node.name or node.output[0]}/indices")
    else:
        it = lw.get(idx, None)
    y = lw.out(node.output[0], None)
    lw.op("GATHER", [lw.get(x, None), it], [y], "GatherOptions", axis=axis, batchDims=0)


def _identity(lw: Lowering, node: Any) -> None:
    lw.alias(node.output[0], node.input[0])


def _cast(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    src, dst = lw.p.dtypes.get(x, "float32"), lw.p.dtypes.get(node.output[0], "float32")
    if src == dst:
        lw.alias(node.output[0], x)
        return
    perm = lw.layout(x)
    y = lw.out(node.output[0], perm, "int32" if dst == "int64" else dst)
    lw.op("CAST", [lw.get(x, perm)], [y], "CastOptions")


def _expand(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    shape = lw.shape(node.output[0])
    y = lw.out(node.output[0], None)
    lw.op("BROADCAST_TO", [lw.get(x, None), lw.ints(shape, f"{node.name or node.output[0]}/shape")], [y])


def _tile(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    if not lw.is_const(node.input[1]):
        raise lw.fail("repeats that are not constant", "repeats")
    perm = lw.layout(x)
    reps = lw.const(node.input[1]).reshape(-1)
    order = perm if perm is not None else tuple(range(len(reps)))
    y = lw.out(node.output[0], perm)
    lw.op("TILE", [lw.get(x, perm), lw.ints([reps[a] for a in order], f"{node.name or node.output[0]}/reps")], [y])


def _scalar_tensor(lw: Lowering, name: str, dtype: str) -> int:
    """``name`` (one element) as a scalar TFLite tensor of ``dtype`` (RANGE reads scalars of its
    output's type)."""
    if lw.is_const(name):
        return lw.g.const(f"{name}/scalar", lw.const(name).reshape(()), dtype)
    src = lw.get(name, None)
    if lw.shape(name) != ():
        t = lw.g.add_tensor(f"{name}/scalar", (), lw.g.tensors[src].dtype)
        lw.op("RESHAPE", [src, lw.ints(np.zeros(0, np.int64), f"{name}/scalar_shape")], [t], "ReshapeOptions",
              newShape=[])
        src = t
    if lw.g.tensors[src].dtype != dtype:
        t = lw.g.add_tensor(f"{name}/{dtype}", (), dtype)
        lw.op("CAST", [src], [t], "CastOptions")
        src = t
    return src


_COMPARE = {"Less": "LESS", "LessOrEqual": "LESS_EQUAL", "Greater": "GREATER", "GreaterOrEqual": "GREATER_EQUAL",
            "Equal": "EQUAL", "And": "LOGICAL_AND", "Or": "LOGICAL_OR"}


def _compare(lw: Lowering, node: Any) -> None:
    """Comparisons and logical And/Or: the TFLite op of the same name (bool output)."""
    a, b = node.input[0], node.input[1]
    perm = lw.data_perm([a, b])
    y = lw.out(node.output[0], perm, "bool")
    lw.op(_COMPARE[node.op_type], [lw.get(a, perm), lw.get(b, perm)], [y])


def _not(lw: Lowering, node: Any) -> None:
    perm = lw.layout(node.input[0])
    y = lw.out(node.output[0], perm, "bool")
    lw.op("LOGICAL_NOT", [lw.get(node.input[0], perm)], [y])


def _where(lw: Lowering, node: Any) -> None:
    perm = lw.data_perm(list(node.input))
    y = lw.out(node.output[0], perm)
    lw.op("SELECT_V2", [lw.get(i, perm) for i in node.input], [y])


def _arg_extreme(lw: Lowering, node: Any) -> None:
    """ArgMax/ArgMin: ARG_MAX/ARG_MIN over the axis (int32 indices), RESHAPE back for keepdims."""
    if int(_attr(node, "select_last_index", 0)):
        raise lw.fail("select_last_index=1 (TFLite returns the first extreme)", "select_last_index")
    x = node.input[0]
    rank = len(lw.shape(x))
    axis = int(_attr(node, "axis", 0)) % rank
    base = node.name or node.output[0]
    code, opts = ("ARG_MAX", "ArgMaxOptions") if node.op_type == "ArgMax" else ("ARG_MIN", "ArgMinOptions")
    out_shape = lw.shape(node.output[0])
    dt = "int32" if lw.int32_indices else "int64"
    reduced = tuple(d for k, d in enumerate(lw.shape(x)) if k != axis)
    if tuple(out_shape) == reduced:
        y = lw.out(node.output[0], None, dt)
    else:
        y = lw.g.add_tensor(f"{base}/reduced", reduced, dt)
    from .tflgraph import schema

    lw.op(code, [lw.get(x, None), lw.ints(np.array([axis]), f"{base}/axis")], [y], opts,
          outputType=getattr(schema().TensorType, dt.upper()))
    if tuple(out_shape) != reduced:
        z = lw.out(node.output[0], None, dt)
        lw.op("RESHAPE", [y, lw.ints(out_shape, f"{base}/shape")], [z], "ReshapeOptions", newShape=list(out_shape))


def _one_hot(lw: Lowering, node: Any) -> None:
    """OneHot: ONE_HOT with ``values`` = [off, on] (a negative index gives all-off where ONNX counts
    it from the end: the indices must be in [0, depth))."""
    idx, depth, values = node.input
    if not (lw.is_const(depth) and lw.is_const(values)):
        raise lw.fail("depth/values that are not constant", "depth")
    off, on = lw.const(values).reshape(-1)[:2]
    base = node.name or node.output[0]
    y = lw.out(node.output[0], None)
    dt = lw.g.tensors[y].dtype
    lw.op("ONE_HOT", [lw.get(idx, None), lw.ints(np.array(int(lw.const(depth).reshape(-1)[0])), f"{base}/depth"),
                      lw.g.const(f"{base}/on", np.array(on), dt), lw.g.const(f"{base}/off", np.array(off), dt)],
          [y], "OneHotOptions", axis=int(_attr(node, "axis", -1)))


def _range(lw: Lowering, node: Any) -> None:
    """Range with a start, limit or delta computed at run time (a Loop counter's): RANGE, whose
    output length is set when it runs."""
    y = lw.out(node.output[0], None)
    lw.op("RANGE", [_scalar_tensor(lw, i, lw.g.tensors[y].dtype) for i in node.input[:3]], [y])


def _scatter_elements(lw: Lowering, node: Any) -> None:
    """ScatterElements (reduction none) as a mask: ``hit[.., k, d, ..] = (indices[.., k, ..] == d)``
    along the axis, the updates summed where they hit and ``data`` kept elsewhere (ONNX leaves
    duplicate indices undefined). The indices must span data's other axes."""
    if str(_attr(node, "reduction", "none")) != "none":
        raise lw.fail("a reduction (add/mul/max/min)", "reduction")
    data, idx, upd = node.input[:3]
    shape, ishape = lw.shape(data), lw.shape(idx)
    rank = len(shape)
    axis = int(_attr(node, "axis", 0)) % rank
    if any(ishape[k] != shape[k] for k in range(rank) if k != axis):
        raise lw.fail(f"indices {list(ishape)} narrower than data {list(shape)} off the scatter axis", "axis")
    base = node.name or node.output[0]
    g = lw.g
    it = lw.get(idx, None)
    wrapped = g.add_tensor(f"{base}/indices", ishape, g.tensors[it].dtype)
    lw.op("FLOOR_MOD", [it, g.const(f"{base}/dim", np.array(shape[axis]), g.tensors[it].dtype)], [wrapped])
    spread = tuple(ishape[:axis + 1]) + (1,) + tuple(ishape[axis + 1:])
    col = g.add_tensor(f"{base}/indices_col", spread, g.tensors[it].dtype)
    lw.op("RESHAPE", [wrapped, lw.ints(spread, f"{base}/col_shape")], [col], "ReshapeOptions", newShape=list(spread))
    positions = np.arange(shape[axis]).reshape((1,) * (axis + 1) + (shape[axis],) + (1,) * (rank - axis - 1))
    mask_shape = tuple(ishape[:axis + 1]) + (shape[axis],) + tuple(ishape[axis + 1:])
    mask = g.add_tensor(f"{base}/hit", mask_shape, "bool")
    lw.op("EQUAL", [col, g.const(f"{base}/positions", positions, g.tensors[it].dtype)], [mask])
    ut = lw.get(upd, None)
    dt = g.tensors[ut].dtype
    ucol = g.add_tensor(f"{base}/updates_col", spread, dt)
    lw.op("RESHAPE", [ut, lw.ints(spread, f"{base}/col_shape2")], [ucol], "ReshapeOptions", newShape=list(spread))
    placed = g.add_tensor(f"{base}/placed", mask_shape, dt)
    lw.op("SELECT_V2", [mask, ucol, g.const(f"{base}/zero", np.zeros((), np.dtype(dt)), dt)], [placed])
    summed = g.add_tensor(f"{base}/summed", shape, dt)
    lw.op("SUM", [placed, lw.ints(np.array([axis]), f"{base}/axis")], [summed], "ReducerOptions", keepDims=False)
    hit = g.add_tensor(f"{base}/written", shape, "bool")
    lw.op("REDUCE_ANY", [mask, lw.ints(np.array([axis]), f"{base}/axis2")], [hit], "ReducerOptions", keepDims=False)
    y = lw.out(node.output[0], None)
    lw.op("SELECT_V2", [hit, summed, lw.get(data, None)], [y])


def _loop(lw: Lowering, node: Any) -> None:
    from .onnx_loop import lower_loop

    lower_loop(lw, node)


def _depth_space(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    if node.op_type == "DepthToSpace" and _attr(node, "mode", "DCR") != "DCR":
        raise lw.fail("mode CRD (TFLite's DEPTH_TO_SPACE is DCR)", "mode")
    y = lw.out(node.output[0], NHWC)
    code = "DEPTH_TO_SPACE" if node.op_type == "DepthToSpace" else "SPACE_TO_DEPTH"
    opts = "DepthToSpaceOptions" if code == "DEPTH_TO_SPACE" else "SpaceToDepthOptions"
    lw.op(code, [lw.get(x, NHWC)], [y], opts, blockSize=int(_attr(node, "blocksize")))


def _batchnorm(lw: Lowering, node: Any) -> None:
    x = node.input[0]
    if not all(lw.is_const(i) for i in node.input[1:5]):
        raise lw.fail("statistics that are not constant (training mode)", "mean")
    gamma, beta, mean, var = (lw.const(i).astype(np.float64) for i in node.input[1:5])
    scale = gamma / np.sqrt(var + float(_attr(node, "epsilon", 1e-5)))
    shift = beta - mean * scale
    rank = len(lw.shape(x))
    perm = lw.layout(x)
    base = node.name or node.output[0]
    shp = [1] * rank
    shp[1] = -1
    sc, sh = scale.reshape(shp).astype(np.float32), shift.reshape(shp).astype(np.float32)
    if perm is not None:
        sc, sh = sc.transpose(perm), sh.transpose(perm)
    mid = lw.g.add_tensor(f"{base}/scaled", _stored(lw.shape(x), perm))
    lw.tag(mid, "", perm)
    lw.op("MUL", [lw.get(x, perm), lw.g.const(f"{base}/scale", sc)], [mid], "MulOptions", fusedActivationFunction=0)
    y = lw.out(node.output[0], perm)
    lw.op("ADD", [mid, lw.g.const(f"{base}/shift", sh)], [y], "AddOptions", fusedActivationFunction=0)


def _squeeze_like(lw: Lowering, node: Any) -> None:
    _reshape(lw, node)


def _qdq(lw: Lowering, node: Any) -> None:
    """Activation QuantizeLinear / DequantizeLinear: the tensor's quantization, lowered as identity."""
    x = node.input[0]
    if len(node.input) < 2 or not lw.is_const(node.input[1]):
        raise lw.fail("a scale that is not constant", "y_scale")
    scale = lw.const(node.input[1]).reshape(-1)
    zp = lw.const(node.input[2]).reshape(-1) if len(node.input) > 2 and node.input[2] else np.zeros(1, np.int64)
    if scale.size != 1:
        raise lw.fail("per-axis quantization of an activation", "axis")
    if lw.fake_quant:
        _fake_quant(lw, node, float(scale[0]), int(zp[0]))
        return
    if node.op_type == "QuantizeLinear":
        zdt = _zero_point_dtype(lw, node)
        if zdt not in (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)):
            raise lw.fail(f"{zdt} quantization", "y_zero_point")
        root = lw.g.tensors[lw.vals[x][0]].onnx if x in lw.vals else x    # a DequantizeLinear's output: its source
        if zdt == np.int16:      # a 16x8 layer's output (the quantizer's tflite scheme)
            if int(zp[0]) != 0:
                raise lw.fail("int16 quantization with a zero point (TFLite's 16x8 is symmetric)", "y_zero_point")
            lw.qparams16[root] = (float(scale[0]), 0)
        else:
            z = int(zp[0]) - (128 if zdt == np.uint8 else 0)   # uint8 activations read as int8 (same levels)
            # on an int16 tensor's dequantized value: the int8 copy its int8 readers take
            lw.qparams.setdefault(root if root in lw.qparams16 else x, (float(scale[0]), z))
    lw.alias(node.output[0], x)
    lw.p.dtypes[node.output[0]] = "float32"


def _zero_point_dtype(lw: Lowering, node: Any) -> np.dtype:
    """A QuantizeLinear's integer type: its zero point's, uint8 when it has none (ONNX's default)."""
    return lw.const(node.input[2]).dtype if len(node.input) > 2 and node.input[2] else np.dtype(np.uint8)


def _fake_quant(lw: Lowering, node: Any, scale: float, zero_point: int) -> None:
    """QuantizeLinear -> QUANTIZE to its integer type; DequantizeLinear of that -> DEQUANTIZE (which
    reads the integer tensor's quantization: the pair's scale and zero point must agree)."""
    from .tflgraph import Quant

    x = node.input[0]
    perm = lw.layout(x)
    if node.op_type == "QuantizeLinear":
        zdt = _zero_point_dtype(lw, node)
        if zdt not in (np.dtype(np.int8), np.dtype(np.uint8)) and not (zdt == np.int16 and zero_point == 0):
            raise lw.fail(f"{zdt} quantization" + (" with a zero point" if zdt == np.int16 else ""), "y_zero_point")
        y = lw.out(node.output[0], perm, str(zdt))
        lw.g.tensors[y].quant = Quant.tensor(scale, zero_point)
        lw.op("QUANTIZE", [lw.get(x, perm)], [y])
        return
    q = lw.g.tensors[lw.get(x, perm)].quant
    if q is None or q.scale.size != 1 or abs(float(q.scale[0]) - scale) > 1e-6 * scale or \
            int(q.zero_point[0]) != zero_point:
        raise lw.fail("a DequantizeLinear whose scale or zero point is not its QuantizeLinear's", "x_scale")
    y = lw.out(node.output[0], perm, "float32")
    lw.op("DEQUANTIZE", [lw.get(x, perm)], [y])


def _lstm_checks(lw: Lowering, node: Any) -> None:
    ins = list(node.input) + [""] * (8 - len(node.input))
    _, w_name, r_name, _, seq, h0, c0, peep = ins[:8]
    for name, what in ((w_name, "W"), (r_name, "R")):
        if not lw.is_const(name):
            raise lw.fail("weights that are not constant", what)
    if seq:
        raise lw.fail("per-sample sequence lengths", "sequence_lens")
    if peep:
        raise lw.fail("peephole weights", "P")
    acts = _attr(node, "activations")
    if acts is not None and [a.decode() if isinstance(a, bytes) else a for a in acts] not in (
            ["Sigmoid", "Tanh", "Tanh"], ["Sigmoid", "Tanh", "Tanh"] * 2):
        raise lw.fail("activations other than Sigmoid/Tanh/Tanh", "activations")
    if _attr(node, "clip") is not None or int(_attr(node, "input_forget", 0)):
        raise lw.fail("clip / input_forget", "clip")
    if int(_attr(node, "layout", 0)):
        raise lw.fail("batch-major layout", "layout")
    dirs, four_h = lw.shape(w_name)[:2]
    for init, what in ((h0, "initial_h"), (c0, "initial_c")):
        if init and tuple(lw.shape(init))[::2] != (dirs, four_h // 4):
            raise lw.fail(f"an initial state of shape {list(lw.shape(init))} (wants [{dirs}, batch, {four_h // 4}])", what)


def _lstm(lw: Lowering, node: Any) -> None:
    """ONNX LSTM (forward, reverse or bidirectional, default activations) unrolled over its fixed
    sequence length: one FULLY_CONNECTED for the input projection of all steps, then per step the
    recurrent FULLY_CONNECTED, the gates (LOGISTIC/TANH) and the cell update (MUL/ADD). Stateless,
    unlike TFLite's fused LSTM ops whose state tensors persist between invocations, and every op
    runs in XNNPACK; ``Y`` is [T, directions, B, H] as in ONNX. A state carried between calls (a
    streaming model's ``initial_h``/``initial_c`` inputs and ``Y_h``/``Y_c`` outputs, silero-vad's)
    is an ordinary tensor in and out; a zero initial state costs nothing (the first step skips it)."""
    _lstm_checks(lw, node)
    x, w_name, r_name = node.input[0], node.input[1], node.input[2]
    b_name = node.input[3] if len(node.input) > 3 else ""
    W, R = lw.const(w_name).astype(np.float32), lw.const(r_name).astype(np.float32)
    dirs, four_h, _ = W.shape
    H = four_h // 4
    B = lw.const(b_name).astype(np.float32) if b_name else np.zeros((dirs, 8 * H), np.float32)
    T, batch, _ = lw.shape(x)
    xt = lw.get(x, None)
    base = node.name or node.output[0]
    direction = _attr(node, "direction", "forward")
    g = lw.g

    def t(name: str, shape: Tuple[int, ...]) -> int:
        return g.add_tensor(f"{base}/{name}", shape)

    ins = list(node.input) + [""] * (8 - len(node.input))
    h_init, c_init = _lstm_state_in(lw, ins[5], base, "h0", dirs, batch, H), _lstm_state_in(lw, ins[6], base, "c0", dirs, batch, H)
    outs: List[int] = []
    h_last: List[int] = []
    c_last: List[int] = []
    for d in range(dirs):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        xw = t(f"d{d}/xw", (T, batch, 4 * H))
        lw.op("FULLY_CONNECTED", [xt, g.const(f"{base}/d{d}/W", W[d]), g.const(f"{base}/d{d}/b", B[d, :4 * H] + B[d, 4 * H:])],
              [xw], "FullyConnectedOptions", fusedActivationFunction=0, keepNumDims=True)
        steps = [t(f"d{d}/xw{k}", (batch, 4 * H)) for k in range(T)]
        lw.op("UNPACK", [xw], steps, "UnpackOptions", num=T, axis=0)
        r_t = g.const(f"{base}/d{d}/R", R[d])
        axis1 = lw.ints(np.array(1), f"{base}/d{d}/gate_axis")
        h: Optional[int] = h_init[d] if h_init else None
        c: Optional[int] = c_init[d] if c_init else None
        hs: Dict[int, int] = {}
        for k in (range(T - 1, -1, -1) if reverse else range(T)):
            gates = steps[k]
            if h is not None:
                rec = t(f"d{d}/s{k}/rec", (batch, 4 * H))
                lw.op("FULLY_CONNECTED", [h, r_t, -1], [rec], "FullyConnectedOptions", fusedActivationFunction=0)
                summed = t(f"d{d}/s{k}/gates", (batch, 4 * H))
                lw.op("ADD", [gates, rec], [summed], "AddOptions", fusedActivationFunction=0)
                gates = summed
            # the gates in ONNX's order i, o, f, c; with no cell state yet the forget gate is not
            # computed (no tensor left unread either: ai-edge-quantizer reads every tensor, and
            # XNNPACK leaves an unread one without data)
            parts = {n: t(f"d{d}/s{k}/{n}", (batch, H)) for n in ("iofc" if c is not None else "ioc")}
            if c is not None:
                lw.op("SPLIT", [axis1, gates], [parts[n] for n in "iofc"], "SplitOptions", numSplits=4)
            else:
                io_ = t(f"d{d}/s{k}/io", (batch, 2 * H))
                for (lo, hi), dst in (((0, 2 * H), io_), ((3 * H, 4 * H), parts["c"])):
                    lw.op("STRIDED_SLICE", [gates, lw.ints([0, lo], f"{base}/d{d}/s{k}/begin{lo}"),
                                            lw.ints([batch, hi], f"{base}/d{d}/s{k}/end{lo}"),
                                            lw.ints([1, 1], f"{base}/d{d}/s{k}/strides{lo}")], [dst],
                          "StridedSliceOptions")
                lw.op("SPLIT", [axis1, io_], [parts["i"], parts["o"]], "SplitOptions", numSplits=2)
            acts = {n: t(f"d{d}/s{k}/{n}_act", (batch, H)) for n in "iof" if n in parts}
            for n, dst in acts.items():
                lw.op("LOGISTIC", [parts[n]], [dst])
            i_g, o_g = acts["i"], acts["o"]
            c_g = t(f"d{d}/s{k}/c_act", (batch, H))
            lw.op("TANH", [parts["c"]], [c_g])
            ic = t(f"d{d}/s{k}/ic", (batch, H))
            lw.op("MUL", [i_g, c_g], [ic], "MulOptions", fusedActivationFunction=0)
            if c is not None:
                fc_ = t(f"d{d}/s{k}/fc", (batch, H))
                lw.op("MUL", [acts["f"], c], [fc_], "MulOptions", fusedActivationFunction=0)
                c_new = t(f"d{d}/s{k}/cell", (batch, H))
                lw.op("ADD", [fc_, ic], [c_new], "AddOptions", fusedActivationFunction=0)
                c = c_new
            else:
                c = ic
            tc = t(f"d{d}/s{k}/tanh_cell", (batch, H))
            lw.op("TANH", [c], [tc])
            h = t(f"d{d}/s{k}/h", (batch, H))
            lw.op("MUL", [o_g, tc], [h], "MulOptions", fusedActivationFunction=0)
            hs[k] = h
        assert h is not None and c is not None   # T >= 1 steps ran
        h_last.append(h)
        c_last.append(c)
        y = t(f"d{d}/y", (T, 1, batch, H))
        packed = t(f"d{d}/y3", (T, batch, H))
        lw.op("PACK", [hs[k] for k in range(T)], [packed], "PackOptions", valuesCount=T, axis=0)
        lw.op("RESHAPE", [packed, lw.ints([T, 1, batch, H], f"{base}/d{d}/shape")], [y], "ReshapeOptions",
              newShape=[T, 1, batch, H])
        outs.append(y)
    out = lw.out(node.output[0], None)
    if len(outs) == 1:
        lw.g.ops[-1].outputs = [out]
    else:
        lw.op("CONCATENATION", outs, [out], "ConcatenationOptions", axis=1, fusedActivationFunction=0)
    used = {i for n in lw.p.nodes for i in n.input} | set(lw.p.outputs)
    for k, last in ((1, h_last), (2, c_last)):
        if len(node.output) > k and node.output[k] in used:   # Y_h / Y_c: [directions, B, H]
            lw.op("PACK", last, [lw.out(node.output[k], None)], "PackOptions", valuesCount=dirs, axis=0)


def _lstm_state_in(lw: Lowering, name: str, base: str, what: str, dirs: int, batch: int, H: int) -> Optional[List[int]]:
    """An LSTM's ``initial_h`` / ``initial_c`` ([directions, B, H]) as one [B, H] tensor per
    direction; None for an absent or all-zero constant state."""
    if not name or (lw.is_const(name) and not np.any(lw.const(name))):
        return None
    if lw.is_const(name):
        arr = lw.const(name).astype(np.float32)
        return [lw.g.const(f"{base}/{what}{d}", arr[d]) for d in range(dirs)]
    parts = [lw.g.add_tensor(f"{base}/{what}{d}", (batch, H)) for d in range(dirs)]
    lw.op("UNPACK", [lw.get(name, None)], parts, "UnpackOptions", num=dirs, axis=0)
    return parts


HandlerFn = Callable[[Lowering, Any], None]
#: the com.microsoft ops the converter reads: ONNX Runtime's Q/DQ, which take int16 before opset 21
_MS_QDQ = ("QuantizeLinear", "DequantizeLinear")
HANDLERS: Dict[str, HandlerFn] = {
    "Conv": _conv, "ConvTranspose": _conv_transpose,
    "Add": _binary, "Sub": _binary, "Mul": _binary, "Div": _binary, "Max": _binary, "Min": _binary, "Pow": _binary,
    "LeakyRelu": _leaky, "PRelu": _prelu, "Clip": _clip, "HardSigmoid": _hard_sigmoid,
    "Softmax": _softmax, "LogSoftmax": _log_softmax, "Concat": _concat, "Split": _split, "Slice": _slice,
    "Reshape": _reshape, "Flatten": _reshape, "Squeeze": _squeeze_like, "Unsqueeze": _squeeze_like,
    "Transpose": _transpose, "MaxPool": _pool, "AveragePool": _pool,
    "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool,
    "Resize": _resize, "Upsample": _upsample, "Pad": _pad, "Gemm": _gemm, "MatMul": _matmul, "Gather": _gather,
    "Identity": _identity, "Dropout": _identity, "Cast": _cast, "Expand": _expand, "Tile": _tile,
    "DepthToSpace": _depth_space, "SpaceToDepth": _depth_space, "BatchNormalization": _batchnorm,
    "QuantizeLinear": _qdq, "DequantizeLinear": _qdq, "LSTM": _lstm,
    "Gelu": _gelu, "LayerNormalization": _layer_norm,
    "Not": _not, "Where": _where, "ArgMax": _arg_extreme, "ArgMin": _arg_extreme, "OneHot": _one_hot,
    "Range": _range, "ScatterElements": _scatter_elements, "Loop": _loop,
}
HANDLERS.update({k: _compare for k in _COMPARE})
HANDLERS.update({k: _reduce for k in _REDUCE})
HANDLERS.update({k: _unary for k in _UNARY})


#: ops whose builtin kernels apply a fused activation (CONCATENATION has the slot, but its kernel
#: refuses any value but NONE: "params->activation != kTfLiteActNone" at prepare, without XNNPACK)
_FUSABLE = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "TRANSPOSE_CONV",
            "AVERAGE_POOL_2D", "MAX_POOL_2D"}
_FUSED = {"RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}


def fuse_activations(g: TFLGraph) -> int:
    """RELU / RELU6 / RELU_N1_TO_1 after an op with a fused activation slot, when that op's output
    has no other reader and is no graph output, become the op's ``fusedActivationFunction``."""
    producers = g.producers()
    consumers = g.consumers()
    dead = set()
    for i, op in enumerate(g.ops):
        if op.code not in _FUSED:
            continue
        src = producers.get(op.inputs[0])
        if src is None:
            continue
        prev = g.ops[src]
        if prev.code not in _FUSABLE or prev.options.get("fusedActivationFunction", 0) != 0 or \
                len(consumers.get(op.inputs[0], [])) != 1 or op.inputs[0] in g.outputs or src in dead:
            continue
        if "fusedActivationFunction" not in prev.options:
            continue
        prev.options["fusedActivationFunction"] = _FUSED[op.code]
        prev.outputs = [op.outputs[0]]
        dead.add(i)
    g.ops = [op for i, op in enumerate(g.ops) if i not in dead]
    return len(dead)


def lower(prep: Prepared, io_layout: str = "onnx", fake_quant: bool = False) -> Lowering:
    lw = Lowering(prep, io_layout, fake_quant)
    lw.run()
    return lw
