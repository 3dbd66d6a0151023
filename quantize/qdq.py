"""QDQ emission: a :class:`~sdk.quantize.schemes.base.QuantPlan` plus activation ranges in, a
QDQ ONNX model out; and the per-tensor quantization parameters as JSON (for TFLite converters).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import QuantizationError
from .graph import GraphIndex
from .schemes.base import QParams, QuantPlan, Scheme

__all__ = ["activation_qparams", "quantize_weight", "resolve_ranges", "emit_qdq", "check_quantized", "export_ranges"]

Range = Tuple[float, float]

_QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def activation_qparams(r: Range, symmetric: bool, dtype: str) -> QParams:
    """Scale and zero point of an activation range. Symmetric: int8 in [-127, 127], zp 0, scale
    ``amax / 127``. Asymmetric: the range (holding 0) spread over the dtype's 256 levels."""
    lo, hi = min(float(r[0]), 0.0), max(float(r[1]), 0.0)
    if symmetric:
        amax = max(abs(lo), abs(hi))
        scale = amax / 127.0 if amax > 0 else 1.0
        return QParams(np.float32(scale), 0, "int8")
    qmin, qmax = _QRANGE[dtype]
    scale = (hi - lo) / float(qmax - qmin) if hi > lo else 1.0
    zp = int(round(qmin - lo / scale))
    zp = max(qmin, min(qmax, zp))
    return QParams(np.float32(scale), zp, dtype)


def quantize_weight(w: np.ndarray, axis: Optional[int], reduce_range: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantization of a weight: ``(q int8, scale float32)``; scale per channel along
    ``axis`` (None: one scale). Range [-127, 127], or [-63, 63] with ``reduce_range``."""
    qmax = 63.0 if reduce_range else 127.0
    w = np.asarray(w, np.float32)
    if axis is None:
        amax = np.array(np.abs(w).max() if w.size else 0.0, np.float32)
    else:
        amax = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    s = scale if axis is None else scale.reshape([-1 if i == axis else 1 for i in range(w.ndim)])
    q = np.clip(np.rint(w / s), -qmax, qmax).astype(np.int8)
    return q, scale


def resolve_ranges(plan: QuantPlan, ranges: Mapping[str, Range]) -> Dict[str, Range]:
    """The range of every tensor the plan quantizes, shared groups merged (union of ranges).
    Raises :class:`QuantizationError` when a tensor has no statistics."""
    parent: Dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for group in plan.shared:
        root = find(group[0])
        for t in group[1:]:
            r = find(t)
            if r != root:
                parent[r] = root
    needed = set(plan.activations) | {t for g in plan.shared for t in g}
    missing = sorted(t for t in needed if t not in ranges and t not in plan.fixed)
    if missing:
        raise QuantizationError(
            f"no calibration statistics for tensor(s) {', '.join(missing[:5])}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            "the statistics belong to another version of the model; calibrate again")
    union: Dict[str, Range] = {}
    for t in needed:
        if t in ranges:
            root = find(t)
            lo, hi = ranges[t]
            if root in union:
                union[root] = (min(union[root][0], lo), max(union[root][1], hi))
            else:
                union[root] = (lo, hi)
    return {t: union[find(t)] for t in needed if find(t) in union}


def _scalar(name: str, value, dtype) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


class _Emitter:
    """Builds the Q/DQ nodes and initializers of one plan on ``idx``'s graph; nodes are collected
    with the index of the node they go before and merged in :meth:`assemble`."""

    def __init__(self, idx: GraphIndex, scheme: Scheme) -> None:
        self.idx = idx
        self.scheme = scheme
        self.graph = idx.graph
        self.by_name = {n.name: n for n in self.graph.node}
        self.order = {n.name: i for i, n in enumerate(self.graph.node)}
        self.new_nodes: List[Tuple[int, Any]] = []  # (insert before node index, node)
        self.inits: List[Any] = []
        self.hand_over: List[Tuple[str, str]] = []   # (graph output, its dequantized value)

    def insert_pos(self, tensor: str) -> int:
        p = self.idx.producer.get(tensor)
        return self.order[p.name] + 1 if p is not None else 0

    def activations(self, plan: QuantPlan, resolved: Mapping[str, Range]) -> Dict[str, QParams]:
        qparams: Dict[str, QParams] = {}
        for t, consumers in plan.activations.items():
            if t in plan.int16:
                qp = _int16_qparams(resolved.get(t, (0.0, 0.0)), t in plan.fixed)
            elif t in plan.fixed:
                fixed_scale, fixed_zp = plan.fixed[t]
                qp = QParams(np.float32(fixed_scale), int(fixed_zp), self.scheme.activation_dtype)
            else:
                qp = activation_qparams(resolved[t], self.scheme.activation_symmetric, self.scheme.activation_dtype)
            qparams[t] = qp
            dq_out = dq8 = self._pair(t, t, qp, "")
            readers8 = plan.int8_readers.get(t, set())
            if readers8 or t in plan.int8_outputs:
                # int8 layers (and int8 outputs) after a 16x8 one read it requantized, as TFLite's QUANTIZE does
                fixed = plan.fixed.get(t)
                qp8 = QParams(np.float32(fixed[0]), int(fixed[1]), "int8") if fixed is not None else \
                    activation_qparams(resolved[t], False, "int8")
                dq8 = self._pair(t, dq_out, qp8, "_int8")
            for node, i in self.idx.consumers.get(t, []):
                if consumers is None or (node.name, i) in consumers:
                    node.input[i] = dq8 if (node.name, i) in readers8 else dq_out
            if t in plan.outputs and t in self.idx.producer:
                self.hand_over.append((t, dq8 if t in plan.int8_outputs else dq_out))
        return qparams

    def outputs(self) -> None:
        """The graph outputs the target hands over quantized take their dequantized value: the
        producer's tensor is renamed ``NAME`` + :data:`HANDED_SUFFIX` (onnxruntime's convention), the
        last DequantizeLinear writes ``NAME`` (:func:`fp32_named` undoes it)."""
        from ..formats.onnx import iter_nodes

        if not self.hand_over:
            return
        rename: Dict[str, str] = {}
        for t, dq in self.hand_over:
            rename[t], rename[dq] = t + HANDED_SUFFIX, t
        _rename_tensors(list(iter_nodes(self.graph)) + [n for _, n in self.new_nodes], rename)

    def _pair(self, t: str, src: str, qp: QParams, suffix: str) -> str:
        """A QuantizeLinear/DequantizeLinear pair on ``src`` (placed after ``t``'s producer); returns
        the dequantized name. int16 pairs are com.microsoft's (ONNX's own takes int16 from opset 21)."""
        from onnx import helper

        np_dtype = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16}[qp.dtype]
        domain = "com.microsoft" if qp.dtype == "int16" else ""
        s_name, z_name = f"{t}{suffix}_scale", f"{t}{suffix}_zero_point"
        self.inits += [_scalar(s_name, qp.scale, np.float32), _scalar(z_name, qp.zero_point, np_dtype)]
        q_out, dq_out = f"{t}{suffix}_quantized", f"{t}{suffix}_dequantized"
        pos = self.insert_pos(t)
        self.new_nodes.append((pos, helper.make_node("QuantizeLinear", [src, s_name, z_name], [q_out],
                                                     name=f"{t}{suffix}_QuantizeLinear", domain=domain)))
        self.new_nodes.append((pos, helper.make_node("DequantizeLinear", [q_out, s_name, z_name], [dq_out],
                                                     name=f"{t}{suffix}_DequantizeLinear", domain=domain)))
        return dq_out

    def weights(self, plan: QuantPlan) -> Dict[str, np.ndarray]:
        """Quantize the plan's weights (once per tensor and axis); returns tensor -> scale."""
        from onnx import helper, numpy_helper

        w_done: Dict[Tuple[str, Optional[int]], Tuple[str, np.ndarray]] = {}
        for wq in plan.weights:
            node = self.by_name[wq.node]
            key = (wq.tensor, wq.axis)
            if key not in w_done:
                q, scale = quantize_weight(self.idx.weight(wq.tensor), wq.axis, self.scheme.reduce_range)
                base = f"{wq.tensor}" + ("" if wq.axis is None else f"_c{wq.axis}")
                s_name, z_name = f"{base}_scale", f"{base}_zero_point"
                zp = np.zeros_like(scale, dtype=np.int8)
                self.inits += [numpy_helper.from_array(scale.astype(np.float32), s_name),
                               numpy_helper.from_array(zp, z_name)]
                attrs: Dict[str, Any] = {} if wq.axis is None else {"axis": wq.axis}
                dq_out = f"{base}_dequantized"
                if self.scheme.weight_qdq_pair:  # float weights -> Q -> DQ (TensorRT)
                    q_out = f"{base}_quantized"
                    self.new_nodes.append((0, helper.make_node("QuantizeLinear", [wq.tensor, s_name, z_name], [q_out],
                                                               name=f"{base}_QuantizeLinear", **attrs)))
                    src = q_out
                else:  # int8 initializer -> DQ (ONNX Runtime, TFLite)
                    src = f"{base}_int8"
                    self.inits.append(numpy_helper.from_array(q, src))
                self.new_nodes.append((0, helper.make_node("DequantizeLinear", [src, s_name, z_name], [dq_out],
                                                           name=f"{base}_DequantizeLinear", **attrs)))
                w_done[key] = (dq_out, scale)
            node.input[wq.index] = w_done[key][0]
        return {wq.tensor: w_done[(wq.tensor, wq.axis)][1] for wq in plan.weights}

    def biases(self, plan: QuantPlan, qparams: Mapping[str, QParams], w_scale: Mapping[str, np.ndarray]) -> None:
        """int32 biases with scale s_in * s_w."""
        from onnx import helper, numpy_helper

        for bq in plan.biases:
            node = self.by_name[bq.node]
            act_qp = qparams.get(bq.activation)
            if act_qp is None or bq.weight not in w_scale:
                continue
            b = self.idx.weight(bq.tensor).astype(np.float64)
            s = (float(act_qp.scale) * w_scale[bq.weight].astype(np.float64))
            s = np.broadcast_to(s, b.shape[-1:]) if s.ndim else s
            q = np.clip(np.rint(b / s), -(2 ** 31), 2 ** 31 - 1).astype(np.int32)
            base = f"{bq.tensor}_{bq.node}"
            s_name, z_name, q_name = f"{base}_scale", f"{base}_zero_point", f"{base}_int32"
            attrs: Dict[str, Any] = {"axis": 0} if np.ndim(s) and np.size(s) > 1 and b.ndim == 1 else {}
            scale_arr = np.asarray(s, np.float32)
            if not attrs and scale_arr.size > 1:  # per-tensor weights: one scale
                scale_arr = scale_arr.reshape(-1)[:1].reshape(())
            self.inits += [numpy_helper.from_array(q, q_name), numpy_helper.from_array(scale_arr, s_name),
                           numpy_helper.from_array(np.zeros(scale_arr.shape, np.int32), z_name)]
            self.new_nodes.append((0, helper.make_node("DequantizeLinear", [q_name, s_name, z_name],
                                                       [f"{base}_dequantized"], name=f"{base}_DequantizeLinear",
                                                       **attrs)))
            node.input[bq.index] = f"{base}_dequantized"

    def assemble(self) -> None:
        """Insert the new nodes in topological order and add the initializers."""
        nodes = list(self.graph.node)
        buckets: Dict[int, List[Any]] = {}
        for pos, n in self.new_nodes:
            buckets.setdefault(pos, []).append(n)
        merged: List[Any] = []
        for i in range(len(nodes) + 1):
            merged.extend(buckets.get(i, []))
            if i < len(nodes):
                merged.append(nodes[i])
        del self.graph.node[:]
        self.graph.node.extend(merged)
        self.graph.initializer.extend(self.inits)


def _int16_qparams(r: Range, fixed: bool) -> QParams:
    """int16 activation: symmetric, zero point 0, ``amax / 32767`` (TFLite's 16x8 spec); a fixed-range
    output (Logistic, Tanh, Softmax) at 1/32768."""
    amax = max(abs(float(r[0])), abs(float(r[1])))
    scale = 1.0 / 32768 if fixed else (amax / 32767.0 if amax > 0 else 1.0)
    return QParams(np.float32(scale), 0, "int16")


def emit_qdq(proto: Any, plan: QuantPlan, ranges: Mapping[str, Range], scheme: Scheme,
             types_of: Optional[GraphIndex] = None, check: bool = True) -> Tuple[Any, Dict[str, QParams]]:
    """A copy of ``proto`` with the plan's Q/DQ nodes; returns ``(model, activation qparams)``.
    ``types_of``: ``proto``'s index (its value types are reused, no shape inference); ``check``:
    run :func:`check_quantized` on the result."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    em = _Emitter(GraphIndex(out, types_of=types_of), scheme)
    qparams = em.activations(plan, resolve_ranges(plan, ranges))
    em.biases(plan, qparams, em.weights(plan))
    em.outputs()
    em.assemble()
    if plan.dynamic:
        _dynamic_lstms(out, plan.dynamic, scheme.reduce_range)
    if (plan.int16 or plan.dynamic) and not any(o.domain == "com.microsoft" for o in out.opset_import):
        out.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    _drop_dead_initializers(out)
    if check:
        check_quantized(out)
    return out, qparams


def _dynamic_lstms(proto: Any, names: Sequence[str], reduce_range: bool) -> None:
    """Each LSTM of ``names`` in ``proto`` as onnxruntime's com.microsoft DynamicQuantizeLSTM, same
    name, inputs, outputs and attributes: W ``[D, 4H, I]`` and R ``[D, 4H, H]`` become int8 ``[D, I, 4H]``
    and ``[D, H, 4H]``, symmetric, one scale per gate row (``W_scale`` ``[D, 4H]``, zero points 0),
    7-bit where the CPU needs ``reduce_range``. The activations are quantized at run time, per step.
    ddddocr-ocr's CRNN (bidirectional LSTM, 64 steps): 21.9 -> 4.5 ms for the LSTM-bearing INT8 model
    (1 thread; 13.9 ms with the LSTM float), its readings unchanged on 24 unseen captchas."""
    import onnx
    from onnx import numpy_helper

    wanted = set(names)
    inits = {t.name: t for t in proto.graph.initializer}
    nodes = []
    for node in proto.graph.node:
        if node.op_type != "LSTM" or node.name not in wanted:
            nodes.append(node)
            continue
        ins = list(node.input) + [""] * (8 - len(node.input))
        extra = []
        for tag, name in (("W", ins[1]), ("R", ins[2])):
            w = np.transpose(numpy_helper.to_array(inits[name]).astype(np.float32), (0, 2, 1))   # [D, in, 4H]
            per_direction = [quantize_weight(wd, 1, reduce_range) for wd in w]                  # scales [4H]
            q = np.stack([qd for qd, _ in per_direction])
            scale = np.stack([sd for _, sd in per_direction])                                   # [D, 4H]
            base = f"{node.name}_{tag}"
            proto.graph.initializer.extend([numpy_helper.from_array(q, f"{base}_quantized"),
                                            numpy_helper.from_array(scale, f"{base}_scale"),
                                            numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{base}_zero_point")])
            extra.append(base)
        w_base, r_base = extra
        new = onnx.helper.make_node(
            "DynamicQuantizeLSTM",
            [ins[0], f"{w_base}_quantized", f"{r_base}_quantized", ins[3], ins[4], ins[5], ins[6], ins[7],
             f"{w_base}_scale", f"{w_base}_zero_point", f"{r_base}_scale", f"{r_base}_zero_point"],
            list(node.output), name=node.name, domain="com.microsoft")
        new.attribute.extend(node.attribute)
        nodes.append(new)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)


def check_quantized(proto: Any) -> None:
    """ONNX's checker on a quantized model: :class:`QuantizationError` naming the first problem."""
    import onnx

    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise QuantizationError(f"the quantized graph is invalid: {first}") from exc


HANDED_SUFFIX = "_QuantizeLinear_Input"


def fp32_named(proto: Any) -> Any:
    """``proto`` (a QDQ model) with its quantized graph outputs (:meth:`_Emitter.outputs`) named as in
    FP32 again: the producer writes ``NAME``, the last DequantizeLinear ``NAME_handed_over`` (read by
    nothing); for tools that pair the QDQ model's tensors with FP32's by name. ``proto`` itself
    when it hands nothing over."""
    import onnx

    from ..formats.onnx import iter_nodes

    outs = {o.name for o in proto.graph.output}
    rename = {}
    for node in proto.graph.node:
        for o in node.output:
            if o.endswith(HANDED_SUFFIX) and o[:-len(HANDED_SUFFIX)] in outs:
                t = o[:-len(HANDED_SUFFIX)]
                rename[o], rename[t] = t, f"{t}_handed_over"
    if not rename:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    _rename_tensors(iter_nodes(out.graph), rename)
    return out


def _rename_tensors(nodes: Any, rename: Mapping[str, str]) -> None:
    """Every input and output of ``nodes`` named in ``rename`` takes its new name."""
    for node in nodes:
        for seq in (node.input, node.output):
            for k, name in enumerate(seq):
                if name in rename:
                    seq[k] = rename[name]


def _drop_dead_initializers(proto: Any) -> None:
    from ..formats.onnx import iter_nodes

    # If/Loop bodies read outer names too
    used = {i for n in iter_nodes(proto.graph) for i in n.input} | {o.name for o in proto.graph.output}
    keep = [t for t in proto.graph.initializer if t.name in used]
    if len(keep) != len(proto.graph.initializer):
        dead = {t.name for t in proto.graph.initializer} - {t.name for t in keep}
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(keep)
        gin = [vi for vi in proto.graph.input if vi.name not in dead]
        del proto.graph.input[:]
        proto.graph.input.extend(gin)


def export_ranges(plan: QuantPlan, ranges: Mapping[str, Range], qparams: Mapping[str, QParams],
                  proto: Any, scheme: Scheme, all_ranges: Optional[Mapping[str, Range]] = None) -> Dict[str, Any]:
    """JSON-ready quantization parameters: every quantized activation (min, max, scale, zero_point,
    dtype, fixed/shared), every quantized weight (per-axis scales, ONNX axis and the TFLite axis),
    and, when ``all_ranges`` is given, the calibrated range of every other activation too."""
    idx = GraphIndex(proto)
    resolved = resolve_ranges(plan, ranges)
    acts: Dict[str, Any] = {}
    shared_of = {t: i for i, grp in enumerate(plan.shared) for t in grp}
    for t, qp in qparams.items():
        lo, hi = resolved.get(t, (None, None))
        acts[t] = {"min": lo, "max": hi, "scale": float(qp.scale), "zero_point": int(qp.zero_point),
                   "dtype": qp.dtype, "fixed": t in plan.fixed, "shared_group": shared_of.get(t)}
    for t, r in (all_ranges or {}).items():
        if t not in acts and all(math.isfinite(v) for v in r):
            qp = activation_qparams(r, scheme.activation_symmetric, scheme.activation_dtype)
            acts[t] = {"min": r[0], "max": r[1], "scale": float(qp.scale), "zero_point": int(qp.zero_point),
                       "dtype": qp.dtype, "fixed": False, "shared_group": None, "quantized_in_graph": False}
    weights: Dict[str, Any] = {}
    by_name = {n.name: n for n in idx.graph.node}
    for wq in plan.weights:
        node = by_name[wq.node]
        _, scale = quantize_weight(idx.weight(wq.tensor), wq.axis, scheme.reduce_range)
        depthwise = node.op_type == "Conv" and int(idx.attr(node, "group", 1)) > 1 \
            and idx.inits[wq.tensor].dims[1] == 1
        tfl_axis = None if wq.axis is None else (3 if depthwise else 0)
        weights[wq.tensor] = {"node": wq.node, "op": "DepthwiseConv" if depthwise else node.op_type,
                              "axis": wq.axis, "tflite_axis": tfl_axis, "scale": np.atleast_1d(scale).tolist(),
                              "zero_point": 0, "dtype": "int8"}
    return {"scheme": scheme.name, "options": scheme.options(), "activations": acts, "weights": weights,
            "biases": {b.tensor: {"node": b.node, "dtype": "int32", "scale": "input_scale * weight_scale"}
                       for b in plan.biases}}
