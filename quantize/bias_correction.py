"""Bias correction: remove the mean output shift that weight quantization causes.

For a layer ``y = W x + b`` with quantized weights ``Wq``, the expected output moves by
``(Wq - W) E[x]``. The per-channel means ``E[x]`` of every Conv/Gemm input are collected during the
one calibration pass (no extra inference), and the shift is subtracted from the float bias before
it is quantized. This matters most for depthwise convolutions (few taps per channel).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from .graph import GraphIndex
from .qdq import quantize_weight
from .schemes.base import QuantPlan
from .stats import CalibrationStats

__all__ = ["correct_biases"]


def correct_biases(proto: Any, plan: QuantPlan, stats: CalibrationStats, reduce_range: bool = False,
                   idx: Optional[GraphIndex] = None, memo: Optional[Dict[Any, Any]] = None) -> Tuple[Any, int]:
    """A copy of ``proto`` whose Conv/Gemm biases absorb the weight quantization shift; returns
    ``(proto, corrected_layers)``. Layers without input channel means are left as they are.
    ``idx``: ``proto``'s index (its types are reused); ``memo``: a dict kept across calls on the same
    ``proto`` and statistics, holding each layer's corrected bias (a fallback search builds many plans)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    idx = GraphIndex(out, types_of=idx)
    by_name = {n.name: n for n in out.graph.node}
    new_inits: Dict[str, Any] = {}
    memo = {} if memo is None else memo
    count = 0
    for wq in plan.weights:
        node = by_name.get(wq.node)
        if node is None or node.op_type not in ("Conv", "Gemm") or wq.index != 1:
            continue
        key = (wq.node, wq.tensor, wq.axis, reduce_range)
        if key not in memo:
            memo[key] = _corrected_bias(idx, node, wq, stats, reduce_range)
        if memo[key] is None:
            continue
        name, tensor = memo[key]
        new_inits[name] = tensor
        if len(node.input) > 2:
            node.input[2] = name
        else:
            node.input.append(name)
        count += 1
    out.graph.initializer.extend(new_inits.values())
    return out, count


def _corrected_bias(idx: GraphIndex, node: Any, wq: Any, stats: CalibrationStats, reduce_range: bool
                    ) -> Optional[Tuple[str, Any]]:
    """``(initializer name, TensorProto)`` of ``node``'s corrected bias, or None (left as it is)."""
    from onnx import numpy_helper

    x = node.input[0]
    mean = stats[x].channel_mean() if x in stats else None
    if mean is None:
        return None
    w = idx.weight(wq.tensor).astype(np.float32)
    q, scale = quantize_weight(w, wq.axis, reduce_range)
    s = scale if wq.axis is None else scale.reshape([-1 if i == wq.axis else 1 for i in range(w.ndim)])
    err = q.astype(np.float64) * s - w.astype(np.float64)
    delta = _shift(idx, node, err, mean)
    if delta is None:
        return None
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in idx.inits:
            return None
        b = idx.weight(node.input[2]).astype(np.float64)
    else:
        b = np.zeros(delta.shape, np.float64)
    if node.op_type == "Gemm":
        alpha, beta = float(idx.attr(node, "alpha", 1.0)), float(idx.attr(node, "beta", 1.0))
        if beta == 0 or b.shape[-1:] != delta.shape:
            return None
        new_b = (b - alpha * delta / beta).astype(np.float32)
    else:
        new_b = (b - delta).astype(np.float32)
    name = f"{node.name}_bias_corrected"
    return name, numpy_helper.from_array(new_b.reshape(b.shape) if b.shape else new_b, name)


def _shift(idx: GraphIndex, node: Any, err: np.ndarray, mean: np.ndarray):
    if node.op_type == "Conv":
        cout, cin_g = err.shape[0], err.shape[1]
        groups = int(idx.attr(node, "group", 1))
        if cin_g * groups != len(mean) or cout % groups:
            return None
        e = err.reshape(cout, cin_g, -1).sum(axis=2)                    # [Cout, Cin/g]
        m = mean.reshape(groups, cin_g)[np.arange(cout) // (cout // groups)]  # [Cout, Cin/g]
        return (e * m).sum(axis=1)
    if node.op_type == "Gemm":
        if int(idx.attr(node, "transA", 0)):
            return None
        if int(idx.attr(node, "transB", 0)):
            return err @ mean if err.shape[1] == len(mean) else None
        return mean @ err if err.shape[0] == len(mean) else None
    return None
