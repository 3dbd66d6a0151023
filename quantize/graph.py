"""Graph helpers shared by calibration, the schemes and QDQ emission: who produces and consumes a
tensor, which tensors are float activations, already-quantized detection, BatchNorm folding."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from ..errors import QuantizationError

__all__ = ["GraphIndex", "check_not_quantized", "fold_batchnorm", "QUANTIZED_OPS"]

QUANTIZED_OPS = {
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger",
    "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul", "QGemm", "QLinearConcat", "QLinearAveragePool",
    "QLinearGlobalAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "DynamicQuantizeMatMul",
}
_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


class GraphIndex:
    """Producer / consumer maps, initializers and float activation tensors of a ModelProto's main
    graph (types from ONNX shape inference)."""

    def __init__(self, proto: Any, types_of: Optional["GraphIndex"] = None):
        """``types_of``: an index of a model with the same nodes and value types (a copy of it with
        other initializers, as bias correction makes): its types are taken, no shape inference."""
        import onnx

        from ..formats.onnx import weightless

        self.proto = proto
        g = proto.graph
        self.graph = g
        self.inits: Dict[str, Any] = {i.name: i for i in g.initializer}
        self.producer: Dict[str, Any] = {}
        self.consumers: Dict[str, List[Tuple[Any, int]]] = defaultdict(list)
        for node in g.node:
            for o in node.output:
                if o:
                    self.producer[o] = node
            for i, name in enumerate(node.input):
                if name:
                    self.consumers[name].append((node, i))
        self.graph_inputs = [vi.name for vi in g.input if vi.name not in self.inits]
        self.graph_outputs = [vi.name for vi in g.output]
        self.constants: Set[str] = {n.output[0] for n in g.node if n.op_type == "Constant" and n.output}
        self.elem_type: Dict[str, int] = {}
        self.shape: Dict[str, Optional[List[Any]]] = {}
        if types_of is not None:
            self.elem_type, self.shape = dict(types_of.elem_type), dict(types_of.shape)
            return
        try:
            inferred = onnx.shape_inference.infer_shapes(weightless(proto))   # the weights not serialized
        except Exception:  # inference failing leaves types unknown; calibration still works
            inferred = proto
        # weightless() declares the weights as inputs: those the model does not declare stay out, as
        # full inference leaves them (large Constants' outputs stay in: full inference types them)
        declared = {vi.name for vi in g.input}
        inputs = [vi for vi in inferred.graph.input if vi.name in declared or vi.name not in self.inits]
        for vi in inputs + list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            self.elem_type[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shape[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]

    def is_float(self, name: str) -> bool:
        return self.elem_type.get(name) in _FLOAT_TYPES

    def is_activation(self, name: str) -> bool:
        """A float tensor computed at run time (graph input or node output), not a constant."""
        return bool(name) and name not in self.inits and name not in self.constants and self.is_float(name)

    def activation_tensors(self) -> List[str]:
        """Graph inputs then node outputs, in graph order: every float run-time tensor."""
        out = [n for n in self.graph_inputs if self.is_activation(n)]
        seen = set(out)
        for node in self.graph.node:
            if node.op_type in ("Constant", "Shape", "Size"):
                continue
            for o in node.output:
                if o and o not in seen and self.is_activation(o):
                    out.append(o)
                    seen.add(o)
        return out

    def init_array(self, name: str) -> Optional[np.ndarray]:
        from onnx import numpy_helper

        t = self.inits.get(name)
        return None if t is None else numpy_helper.to_array(t)

    def weight(self, name: str) -> np.ndarray:
        """The initializer ``name`` as an array; :class:`QuantizationError` when there is none."""
        w = self.init_array(name)
        if w is None:
            from ..errors import QuantizationError

            raise QuantizationError(f"'{name}' is not an initializer of the graph")
        return w

    def single_consumer(self, name: str) -> Optional[Any]:
        cons = self.consumers.get(name, [])
        if len(cons) == 1 and name not in self.graph_outputs:
            return cons[0][0]
        return None

    def attr(self, node: Any, name: str, default: Any = None) -> Any:
        import onnx

        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default


def check_not_quantized(proto: Any, name: str) -> None:
    """Raise :class:`QuantizationError` when the model already holds quantized ops or int8 weights."""
    ops = sorted({n.op_type for n in proto.graph.node if n.op_type in QUANTIZED_OPS})
    if ops:
        raise QuantizationError(f"'{name}' is already quantized (it has {', '.join(ops)} nodes)",
                                "quantize the FP32 model instead")


def fold_batchnorm(proto: Any) -> Tuple[Any, int]:
    """A copy of ``proto`` with each Conv -> BatchNormalization pair (Conv output used only by the
    BN) folded into the Conv's weights and bias; the Conv takes the BN's output name, so tensor names
    calibrated on the original model stay valid. Returns ``(proto, folded_count)``."""
    import onnx
    from onnx import numpy_helper

    from ..formats.onnx import drop_unused_initializers

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    idx = GraphIndex(out)
    g = out.graph
    remove = []
    new_inits: Dict[str, Any] = {}
    folded = 0
    for node in list(g.node):
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in idx.inits:
            continue
        bn = idx.single_consumer(node.output[0])
        if bn is None or bn.op_type != "BatchNormalization" or len(bn.output) != 1 and any(bn.output[1:]):
            continue
        params = [idx.init_array(n) for n in bn.input[1:5]]
        if any(p is None for p in params):
            continue
        scale, bias, mean, var = (p.astype(np.float64) for p in params if p is not None)
        eps = float(idx.attr(bn, "epsilon", 1e-5))
        w = idx.weight(node.input[1]).astype(np.float64)
        b = idx.weight(node.input[2]).astype(np.float64) if len(node.input) > 2 and node.input[2] else np.zeros(w.shape[0])
        k = scale / np.sqrt(var + eps)
        w2 = (w * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        b2 = ((b - mean) * k + bias).astype(np.float32)
        wn, bnm = node.input[1] + "_bnfold", node.output[0] + "_bnfold_bias"
        new_inits[wn] = numpy_helper.from_array(w2, wn)
        new_inits[bnm] = numpy_helper.from_array(b2, bnm)
        x = node.input[0]
        del node.input[:]
        node.input.extend([x, wn, bnm])
        remove.append(bn)
        node.output[0] = bn.output[0]
        folded += 1
    if not folded:
        return out, 0
    for bn in remove:
        g.node.remove(bn)
    g.initializer.extend(new_inits.values())
    drop_unused_initializers(out.graph)
    return out, folded


#: ops an output may pass through after a Log and stay a log-scale value (times a constant)
_LOG_TAIL = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten", "Add", "Sub", "Mul", "Div",
             "Max", "Min", "Clip")


def output_hints(proto: Any) -> Dict[str, Dict[str, Any]]:
    """Role hints for :func:`sdk.quantize.roles.infer_roles` from the graph: an output computed by a
    ``Log`` (then reshaped, offset, clamped or scaled by constants) is ``{"role": "log",
    "db_per_unit": ...}``: 10 log10 (the scale 10 / ln 10) is 1 dB per unit, a bare ln 4.343."""
    import math

    from onnx import numpy_helper

    producer = {o: n for n in proto.graph.node for o in n.output}
    consts = {t.name: t for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "Constant" and n.attribute:
            consts[n.output[0]] = n.attribute[0].t
    hints: Dict[str, Dict[str, Any]] = {}
    for out in proto.graph.output:
        name, scale, node = out.name, 1.0, producer.get(out.name)
        for _ in range(12):
            if node is None or node.op_type == "Log" or node.op_type not in _LOG_TAIL:
                break
            data = [i for i in node.input if i and i not in consts]
            if node.op_type in ("Clip", "Max", "Min") and data:
                # a clamp keeps the units, whatever its bounds: Clip's data is input 0, and a bound
                # made from the value itself (AmplitudeToDB's top_db: clip(x, max(x) - 80)) is in them
                data = [node.input[0]] if node.op_type == "Clip" else data[:1]
            if len(data) != 1:
                node = None
                break
            if node.op_type in ("Mul", "Div"):
                c = [i for i in node.input if i in consts]
                vals = numpy_helper.to_array(consts[c[0]]) if c else None
                if vals is None or vals.size != 1 or float(vals) == 0:
                    node = None
                    break
                scale = scale * float(vals) if node.op_type == "Mul" else scale / float(vals)
            node = producer.get(data[0])
        if node is not None and node.op_type == "Log":
            hints[name] = {"role": "log", "db_per_unit": (10.0 / math.log(10.0)) / abs(scale)}
    for out, inp in recurrent_pairs(proto).items():
        hints.setdefault(out, {"role": "state", "input": inp})
    return hints


def recurrent_pairs(proto: Any) -> Dict[str, str]:
    """Outputs that have the shape (declared or inferred: at least 2 dims, every dim the same
    number or name) and element type of exactly one graph input that is not the first (the data),
    beside at least one other output: a recurrent state handed back with the result (``stateN``
    -> ``state``), ``{output: input}``. (An output shaped like the model's only or first input is
    image-to-image data, not a state.)"""
    def sig(vi: Any) -> Optional[Tuple[int, Tuple[Any, ...]]]:
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or len(tt.shape.dim) < 2:
            return None
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        return None if None in dims else (tt.elem_type, dims)

    pairs: Dict[str, str] = {}
    if len(proto.graph.output) < 2:
        return pairs
    inits = {t.name for t in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    by_sig: Dict[Any, List[str]] = {}
    for vi in inputs:
        s = sig(vi)
        if s is not None:
            by_sig.setdefault(s, []).append(vi.name)
    data = {inputs[0].name} if inputs else set()
    outputs = proto.graph.output
    if by_sig and any(sig(vi) is None for vi in outputs):   # unnamed dims: the shapes inference gives
        import onnx

        try:
            outputs = onnx.shape_inference.infer_shapes(proto).graph.output
        except Exception:  # noqa: BLE001 - inference is a refinement here; the declared shapes stand
            pass
    for vi in outputs:
        s = sig(vi)
        if s is not None and len(by_sig.get(s, [])) == 1 and by_sig[s][0] not in data:
            pairs[vi.name] = by_sig[s][0]
    return pairs
