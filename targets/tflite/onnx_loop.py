"""ONNX ``Loop`` -> TFLite ``WHILE``: the body becomes a subgraph, the loop condition another.

TFLite's WHILE carries loop variables only: the condition subgraph reads them and returns one bool,
the body subgraph reads them and returns their next values. An ONNX Loop ``(M, cond, v...)`` with body
``(iteration, cond, v...) -> (cond, v..., scan outputs...)`` maps onto that with the variables
``(iteration, cond, v..., outer values)``:

- the condition is ``cond`` (and ``iteration < M`` when the trip count ``M`` is given and below 2^31);
- the body is the ONNX body, prepared and lowered as a graph of its own (:mod:`.onnx_prep`,
  :class:`.onnx_lower.Lowering`), with ``iteration + 1`` added;
- a variable the body passes through unchanged and whose initial value is a constant (paddle2onnx
  carries the decoder's weights this way) becomes a constant of the body, so its MatMuls get constant
  weights; outer-scope tensors the body reads are constants there too, or pass-through variables.

Scan outputs (values stacked over the iterations) have no WHILE equivalent and are refused. The
body's shapes are fixed by preparing it once at iteration 0: a body whose tensors change shape from
one iteration to the next is outside what this converter writes (its outputs would not match; the
converter's tests compare them with onnxruntime's on real inputs).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["lower_loop"]

#: a trip count at or above this bound is "no bound" (exporters write INT64_MAX or INT32_MAX)
_UNBOUNDED = 2 ** 31 - 1


def _attr_graph(node: Any) -> Any:
    return next(a.g for a in node.attribute if a.name == "body")


def _value_info(name: str, dtype: str, shape: Sequence[int]) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))


def _outer_reads(body: Any) -> List[str]:
    """Names the body reads that it neither defines nor takes as inputs: outer-scope values."""
    defined = {i.name for i in body.input} | {t.name for t in body.initializer}
    defined |= {o for n in body.node for o in n.output if o}
    seen: List[str] = []
    for n in body.node:
        for i in n.input:
            if i and i not in defined and i not in seen:
                seen.append(i)
    return seen


def _body_model(lw: Any, node: Any, body: Any, carried: List[Tuple[int, str]], consts: Dict[str, np.ndarray],
                refs: List[str]) -> Any:
    """The body as a model of its own: inputs (iteration, cond, the carried variables, the outer
    values read), its constants as initializers, outputs (cond, the carried variables' next values,
    the outer values passed through)."""
    import onnx
    from onnx import numpy_helper

    outer = lw.p
    it, cond = body.input[0], body.input[1]
    m = onnx.ModelProto(ir_version=outer.proto.ir_version)
    m.opset_import.extend(outer.proto.opset_import)
    g = m.graph
    g.name = f"{node.name or node.output[0]}/body"
    it_shape = [d.dim_value for d in it.type.tensor_type.shape.dim] if it.type.tensor_type.HasField("shape") else []
    cond_shape = list(lw.shape(node.input[1])) if node.input[1] else []
    g.input.extend([_value_info(it.name, "int64", [max(d, 1) for d in it_shape]),
                    _value_info(cond.name, "bool", cond_shape)])
    for k, init in carried:
        g.input.append(_value_info(body.input[k + 2].name, outer.dtypes[init], lw.shape(init)))
    for r in refs:
        g.input.append(_value_info(r, outer.dtypes[r], lw.shape(r)))
    g.initializer.extend(body.initializer)
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items())
    g.node.extend(body.node)
    g.output.append(onnx.ValueInfoProto(name=body.output[0].name))
    g.output.extend(onnx.ValueInfoProto(name=body.output[k + 1].name) for k, _ in carried)
    g.output.extend(onnx.ValueInfoProto(name=r) for r in refs)
    return m


def lower_loop(lw: Any, node: Any) -> None:
    """Lower ``node`` (an ONNX Loop) into ``lw``'s graph as one WHILE, adding its condition and body
    subgraphs to the model's main graph."""
    from ...errors import ConversionError
    from .onnx_lower import Lowering
    from .onnx_prep import prepare

    body = _attr_graph(node)
    n_vars = len(node.input) - 2
    if len(body.output) != n_vars + 1:
        raise lw.fail(f"{len(body.output) - n_vars - 1} scan output(s): TFLite's WHILE carries loop variables only",
                      "body")
    trip: Optional[int] = None
    trip_tensor: Optional[str] = None
    if node.input[0]:
        if lw.is_const(node.input[0]):
            m = int(lw.const(node.input[0]).reshape(-1)[0])
            trip = m if m < _UNBOUNDED else None
        else:
            trip_tensor = node.input[0]
    # carried variables: a constant the body passes through unchanged becomes the body's constant
    consts: Dict[str, np.ndarray] = {}
    carried: List[Tuple[int, str]] = []
    passthrough_const: Dict[int, str] = {}
    for k in range(n_vars):
        init = node.input[k + 2]
        name_in, name_out = body.input[k + 2].name, body.output[k + 1].name
        if name_in == name_out and lw.is_const(init):
            consts[name_in] = lw.const(init)
            passthrough_const[k] = init
        else:
            carried.append((k, init))
    refs: List[str] = []
    for r in _outer_reads(body):
        if lw.is_const(r):
            consts[r] = lw.const(r)
        else:
            refs.append(r)
    if trip_tensor is not None:
        refs.append(trip_tensor)
    base = node.name or node.output[0]
    proto = _body_model(lw, node, body, carried, consts, refs)
    try:
        sub = Lowering(prepare(proto), "onnx", lw.fake_quant, root=lw.root, name=f"{base}/body")
        sub.run()
    except ConversionError as exc:   # one line: the body's node, after the Loop's
        raise ConversionError(f"node '{base}' (Loop), in its body: {exc.message}", exc.hint) from exc
    bg = sub.g
    # the body's inputs are (iteration, cond, carried..., refs...); add iteration + 1 as its first output
    it_in = bg.inputs[0]
    it_dtype = bg.tensors[it_in].dtype
    nxt = bg.add_tensor(f"{base}/iteration_next", bg.tensors[it_in].shape, it_dtype)
    bg.add_op("ADD", [it_in, bg.const(f"{base}/one", np.ones((), it_dtype), it_dtype)], [nxt], "AddOptions",
              source=node.name, fusedActivationFunction=0, potScaleInt16=False)
    bg.outputs = [nxt] + bg.outputs
    root = lw.root
    root.subgraphs.append(bg)
    body_index = len(root.subgraphs)
    root.subgraphs.append(_condition(bg, base, node.name, trip, trip_tensor is not None))
    cond_index = len(root.subgraphs)
    # the WHILE in the outer graph
    it_shape = bg.tensors[it_in].shape
    ins = [lw.g.const(f"{base}/iteration0", np.zeros(it_shape), it_dtype)]
    if node.input[1]:
        ins.append(lw.get(node.input[1], None))
    else:
        ins.append(lw.g.const(f"{base}/cond0", np.ones(bg.tensors[bg.inputs[1]].shape, bool), "bool"))
    for _, init in carried:
        ins.append(_as_dtype(lw, init, bg.tensors[bg.inputs[len(ins)]].dtype))
    for r in refs:
        ins.append(_as_dtype(lw, r, bg.tensors[bg.inputs[len(ins)]].dtype))
    outs = [lw.g.add_tensor(f"{base}/iteration_final", it_shape, it_dtype),
            lw.g.add_tensor(f"{base}/cond_final", bg.tensors[bg.inputs[1]].shape, "bool")]
    for k, _ in carried:
        spec = bg.tensors[bg.inputs[len(outs)]]
        t = lw.out(node.output[k], None, spec.dtype) if node.output[k] else \
            lw.g.add_tensor(f"{base}/unused_{k}", spec.shape, spec.dtype)   # an output ONNX leaves unnamed
        outs.append(t)
    for r in refs:
        outs.append(lw.g.add_tensor(f"{r}/after_{base}", lw.shape(r), bg.tensors[bg.inputs[len(outs)]].dtype))
    lw.op("WHILE", ins, outs, "WhileOptions", condSubgraphIndex=cond_index, bodySubgraphIndex=body_index)
    for k, init in passthrough_const.items():
        if node.output[k]:
            lw.alias(node.output[k], init)


def _scalar(g: Any, t: int, name: str, source: str) -> int:
    """A RESHAPE of the one-element tensor ``t`` to a scalar (LESS and WHILE's result want one)."""
    out = g.add_tensor(name, (), g.tensors[t].dtype)
    g.add_op("RESHAPE", [t, g.const(f"{name}/shape", np.zeros(0, np.int32), "int32")], [out], "ReshapeOptions",
             source=source, newShape=[])
    return out


def _condition(bg: Any, base: str, source: str, trip: Optional[int], trip_is_last: bool) -> Any:
    """The WHILE's condition subgraph over the body's inputs: ``cond``, and ``iteration < M`` when
    the trip count is the constant ``trip`` or the last loop variable (``trip_is_last``)."""
    cg = type(bg)(f"{base}/cond")
    # names unique across the file (ai-edge-quantizer keys tensors by name over every subgraph)
    cg.inputs = [cg.add_tensor(f"{base}/cond/{bg.tensors[t].name}", bg.tensors[t].shape, bg.tensors[t].dtype)
                 for t in bg.inputs]
    go = _scalar(cg, cg.inputs[1], f"{base}/cond_scalar", source)
    if trip is not None or trip_is_last:
        it_dtype = cg.tensors[cg.inputs[0]].dtype
        it = _scalar(cg, cg.inputs[0], f"{base}/iteration_scalar", source)
        bound = cg.const(f"{base}/trip_count", np.array(trip), it_dtype) if trip is not None else \
            _scalar(cg, cg.inputs[-1], f"{base}/trip_count", source)   # int32, as the body's counter
        below = cg.add_tensor(f"{base}/below_trip_count", (), "bool")
        cg.add_op("LESS", [it, bound], [below], source=source)
        both = cg.add_tensor(f"{base}/continue", (), "bool")
        cg.add_op("LOGICAL_AND", [go, below], [both], source=source)
        go = both
    cg.outputs = [go]
    return cg


def _as_dtype(lw: Any, name: str, dtype: str) -> int:
    """``name``'s tensor in ``dtype`` (an int64 outer value read by the body's int32 counters)."""
    t = lw.get(name, None)
    if lw.g.tensors[t].dtype == dtype:
        return t
    cast = lw.g.add_tensor(f"{name}/{dtype}", lw.g.tensors[t].shape, dtype)
    lw.op("CAST", [t], [cast], "CastOptions")
    return cast
