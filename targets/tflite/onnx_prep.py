"""ONNX graph preparation for the TFLite converter: fixed input shapes, every constant subgraph
folded (weights in ``Constant`` nodes, ``Shape -> Gather -> Concat -> Reshape`` chains, ``Range``,
``ConstantOfShape``...), the exact float rewrites of :mod:`sdk.formats.onnx_rewrite` (scalar affines
folded into the Conv before or after them), BatchNormalization folded into the Conv before it, and a
static shape and dtype for every tensor.

Folding evaluates the constant subgraph once in onnxruntime (the graph's own kernels, so the values
are exactly what the model computes), with those tensors exposed as outputs and the inputs at zero.
Shapes come from ONNX shape inference on the folded graph, and from one more onnxruntime run for any
tensor inference leaves open.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from ...errors import ConversionError

__all__ = ["Prepared", "prepare"]

#: ops never folded even with constant inputs (their value is not a function of the inputs)
_NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}


@dataclass
class Prepared:
    """The folded graph: remaining nodes, constants (name -> array), shapes and numpy dtypes of every
    tensor, the graph inputs/outputs, and ``notes`` for the user."""

    proto: Any
    nodes: List[Any]
    consts: Dict[str, np.ndarray]
    shapes: Dict[str, Tuple[int, ...]]
    dtypes: Dict[str, str]
    inputs: List[str]
    outputs: List[str]
    opset: int
    notes: List[str] = field(default_factory=list)
    folded: int = 0


def _np_dtype(elem: int) -> str:
    from onnx import helper

    return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))


def _fix_inputs(proto: Any, shapes: Mapping[str, Sequence[int]], notes: List[str]) -> None:
    inits = {i.name for i in proto.graph.initializer}
    known = [i.name for i in proto.graph.input if i.name not in inits]
    for name in shapes:
        if name not in known:
            raise ConversionError(f"--input-shape names '{name}', which is not an input of the model",
                                  f"its inputs: {', '.join(known)}")
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if vi.name in shapes:
            want = list(shapes[vi.name])
            if len(want) != len(dims):
                raise ConversionError(f"--input-shape {vi.name}: {len(want)} dims given, the input has {len(dims)}")
            for d, v in zip(dims, want):
                d.ClearField("dim_param")
                d.dim_value = int(v)
            continue
        dynamic = [k for k, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value <= 0]
        if dynamic == [0] and len(dims) > 1:
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
            notes.append(f"input '{vi.name}': dynamic batch fixed to 1")
        elif dynamic:
            raise ConversionError(
                f"input '{vi.name}' has dynamic dims {[d.dim_param or '?' for d in dims]}: TFLite needs static shapes",
                f"fix them with --input-shape {vi.name}=" + "x".join(str(d.dim_value or 1) for d in dims))


def _session(proto: Any, outputs: Sequence[str]) -> Any:
    """An onnxruntime session of ``proto`` (our own copy: its outputs are swapped for the
    serialisation and put back) that returns ``outputs``."""
    import onnx
    import onnxruntime as ort

    saved = list(proto.graph.output)
    del proto.graph.output[:]
    proto.graph.output.extend(onnx.ValueInfoProto(name=name) for name in outputs)
    try:
        data = proto.SerializeToString()
    finally:
        del proto.graph.output[:]
        proto.graph.output.extend(saved)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _zero_feed(proto: Any, inits: Set[str]) -> Dict[str, np.ndarray]:
    feed = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feed[vi.name] = np.zeros(shape, _np_dtype(vi.type.tensor_type.elem_type))
    return feed


def _constant_nodes(nodes: Sequence[Any], consts: Set[str]) -> List[Any]:
    out = []
    for n in nodes:
        if n.op_type in _NOT_FOLDABLE or any(a.type in (5, 10) for a in n.attribute):   # a Loop: WHILE
            continue
        data = [i for i in n.input if i]
        if n.op_type == "Shape" or all(i in consts for i in data):
            out.append(n)
            consts.update(o for o in n.output if o)
    return out


def _live(nodes: Sequence[Any], outputs: Sequence[str]) -> List[Any]:
    """``nodes`` without those whose outputs nothing reads (a Slice kept only for its folded Shape)."""
    from ...formats.onnx_fold import subgraph_inputs

    need = set(outputs)
    keep: List[Any] = []
    for n in reversed(nodes):
        if any(o in need for o in n.output if o):
            keep.append(n)
            need.update(i for i in n.input if i)
            need.update(subgraph_inputs([n]))
    return keep[::-1]


def prepare(proto: Any, input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Prepared:
    """Fold and annotate ``proto`` (not modified) for lowering; raises :class:`ConversionError`."""
    import onnx
    from onnx import numpy_helper

    from ...formats.onnx_fold import fold_constants, subgraph_inputs
    from ...formats.onnx_rewrite import simplify

    notes: List[str] = []
    work = onnx.ModelProto()
    work.CopyFrom(proto)
    bad = next((n for n in work.graph.node if n.op_type in ("If", "Scan")), None)
    if bad is not None:     # a Loop becomes TFLite's WHILE (.onnx_loop)
        raise ConversionError(f"node '{bad.name}' ({bad.op_type}): control flow other than Loop is not converted to "
                              "TFLite", "an If decided by fixed inputs is removed by --input-value NAME=VALUE")
    _fix_inputs(work, input_shapes or {}, notes)
    work, _ = fold_constants(work)
    work, rewrites = simplify(work)     # the quantizer's exact float rewrites (affines folded)
    for what, n in rewrites.items():
        if what.startswith("affine"):
            notes.append(f"{n} scalar affine(s) folded into the "
                         + ("unpadded conv after them" if what.endswith("forward") else "layer before them"))
        elif what == "conv_transpose_folded":
            notes.append(f"{n} ConvTranspose(s) took the bias Add / BatchNormalization / per-channel ops after them")
    inits = {i.name for i in work.graph.initializer}
    consts: Dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in work.graph.initializer}
    names = set(consts)
    folded_nodes = _constant_nodes(work.graph.node, names)
    graph_out = [o.name for o in work.graph.output]
    wanted = [o for n in folded_nodes for o in n.output if o and o not in consts]
    if wanted:
        try:
            sess = _session(work, wanted)
            values = sess.run(wanted, _zero_feed(work, inits))
        except Exception as exc:  # onnxruntime's errors are plain RuntimeErrors
            raise ConversionError(f"the model's constant subgraph does not evaluate in onnxruntime: {exc}") from exc
        consts.update(dict(zip(wanted, values)))
    folded_set = {id(n) for n in folded_nodes}
    nodes = _live([n for n in work.graph.node if id(n) not in folded_set], graph_out)
    if any(o in consts for o in graph_out):
        c = next(o for o in graph_out if o in consts)
        raise ConversionError(f"graph output '{c}' is a constant: a TFLite graph output must be computed")
    # shapes: inference over the folded graph
    used = {i for n in nodes for i in n.input if i} | subgraph_inputs(nodes)
    g = onnx.ModelProto(ir_version=work.ir_version)
    g.opset_import.extend(work.opset_import)
    g.graph.name = work.graph.name
    g.graph.input.extend(i for i in work.graph.input if i.name not in inits)
    g.graph.output.extend(work.graph.output)
    g.graph.node.extend(nodes)
    for o in g.graph.output:  # declared output shapes may be stale or symbolic: infer them
        o.type.tensor_type.ClearField("shape")
    # shape inference over a light copy: big constants declared as inputs of their shape
    light = onnx.ModelProto(ir_version=g.ir_version)
    light.opset_import.extend(g.opset_import)
    light.graph.node.extend(nodes)
    light.graph.input.extend(g.graph.input)
    light.graph.output.extend(g.graph.output)
    for k in sorted(used & set(consts)):
        v = np.asarray(consts[k])
        if v.size <= 64:
            light.graph.initializer.append(numpy_helper.from_array(v, k))
        else:
            light.graph.input.append(onnx.helper.make_tensor_value_info(
                k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    g.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items() if k in used)
    shapes: Dict[str, Tuple[int, ...]] = {}
    dtypes: Dict[str, str] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception:  # inference is best effort; onnxruntime fills the rest
        inferred = light
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not tt.elem_type:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if all(d >= 0 for d in dims):
            shapes[vi.name] = tuple(dims)
            dtypes[vi.name] = _np_dtype(tt.elem_type)
    missing = [o for n in nodes for o in n.output if o and o not in shapes]
    if missing:
        try:
            sess = _session(g, missing)
            vals = sess.run(missing, _zero_feed(g, set()))
        except Exception as exc:
            raise ConversionError(f"the model does not run in onnxruntime at the fixed input shapes: {exc}") from exc
        for name, v in zip(missing, vals):
            shapes[name] = tuple(int(d) for d in v.shape)
            dtypes[name] = str(v.dtype)
    for k, v in consts.items():
        shapes[k] = tuple(int(d) for d in np.shape(v))
        dtypes[k] = str(np.asarray(v).dtype)
    opset = next((o.version for o in work.opset_import if o.domain in ("", "ai.onnx")), 13)
    inputs = [i.name for i in work.graph.input if i.name not in inits]
    prep = Prepared(g, nodes, consts, shapes, dtypes, inputs, graph_out, opset, notes, len(folded_nodes))
    _fold_batchnorm(prep)
    _fuse_gelu(prep)
    _fuse_hardswish(prep)
    return prep


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _fold_batchnorm(p: Prepared) -> None:
    """BatchNormalization after a Conv whose only reader it is becomes the Conv's weights and bias."""
    import onnx

    readers: Dict[str, int] = {}
    for n in p.nodes:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    producer = {o: n for n in p.nodes for o in n.output}
    drop = set()
    for bn in p.nodes:
        if bn.op_type != "BatchNormalization" or len(bn.output) > 1 and any(bn.output[1:]):
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or readers.get(bn.input[0], 0) != 1 or \
                bn.input[0] in p.outputs or conv.input[1] not in p.consts:
            continue
        if not all(x in p.consts for x in bn.input[1:5]):
            continue
        gamma, beta, mean, var = (p.consts[x].astype(np.float64) for x in bn.input[1:5])
        eps = float(_attr(bn, "epsilon", 1e-5))
        scale = gamma / np.sqrt(var + eps)
        w = p.consts[conv.input[1]].astype(np.float64)
        b = p.consts[conv.input[2]].astype(np.float64) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
        wname, bname = conv.name + "/weight_bn", conv.name + "/bias_bn"
        p.consts[wname] = (w * scale.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        p.consts[bname] = ((b - mean) * scale + beta).astype(np.float32)
        p.shapes[wname], p.shapes[bname] = p.consts[wname].shape, p.consts[bname].shape
        p.dtypes[wname] = p.dtypes[bname] = "float32"
        new = onnx.helper.make_node("Conv", [conv.input[0], wname, bname], [bn.output[0]], name=conv.name)
        new.attribute.extend(conv.attribute)
        conv.CopyFrom(new)
        drop.add(id(bn))
    p.nodes = [n for n in p.nodes if id(n) not in drop]


def _scalar(p: Prepared, name: str) -> Optional[float]:
    """The value of a one-element constant, else None."""
    v = p.consts.get(name)
    return float(np.asarray(v).reshape(-1)[0]) if v is not None and np.size(v) == 1 else None


def _near(v: Optional[float], want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-4 * abs(want)


def _other(node: Any, name: str) -> str:
    """The other input of a two-input node."""
    return node.input[1] if node.input[0] == name else node.input[0]


def _gelu_chain(p: Prepared, erf: Any, producer: Mapping[str, Any], only_reader: Any) -> Optional[Tuple[str, List[Any], str]]:
    """``(x, the chain's nodes, its output)`` when ``erf`` is the middle of an exact GELU, else None."""
    scaled = producer.get(erf.input[0])
    if scaled is None or only_reader(erf.input[0]) is not erf or scaled.op_type not in ("Div", "Mul"):
        return None
    x = scaled.input[0] if scaled.op_type == "Div" else next((i for i in scaled.input if i not in p.consts), "")
    c = _scalar(p, scaled.input[1] if scaled.op_type == "Div" else _other(scaled, x))
    if not x or not _near(c, math.sqrt(2.0) if scaled.op_type == "Div" else math.sqrt(0.5)):
        return None
    add = only_reader(erf.output[0])
    if add is None or add.op_type != "Add" or not _near(_scalar(p, _other(add, erf.output[0])), 1.0):
        return None
    m1 = only_reader(add.output[0])
    if m1 is None or m1.op_type != "Mul":
        return None
    f = _other(m1, add.output[0])
    if _near(_scalar(p, f), 0.5) or f == x:            # (1 + erf) * 0.5, then * x; or * x, then * 0.5
        m2 = only_reader(m1.output[0])
        if m2 is None or m2.op_type != "Mul":
            return None
        last = _other(m2, m1.output[0])
        if not (last == x if f != x else _near(_scalar(p, last), 0.5)):
            return None
        return x, [scaled, erf, add, m1, m2], m2.output[0]
    half = producer.get(f)                              # (x * 0.5) * (1 + erf)
    if half is None or half.op_type != "Mul" or only_reader(f) is not m1 or x not in half.input or \
            not _near(_scalar(p, _other(half, x)), 0.5):
        return None
    return x, [scaled, erf, add, m1, half], m1.output[0]


def _fuse_gelu(p: Prepared) -> None:
    """The exact GELU as exporters write it, ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` (the Muls in any
    order, ``x / sqrt(2)`` as Div or as Mul by 1/sqrt(2)), becomes one ONNX ``Gelu`` node (opset 20's
    op, approximate "none"), lowered to TFLite's GELU builtin: TFLite has no Erf."""
    import onnx

    readers: Dict[str, List[Any]] = {}
    for n in p.nodes:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    producer = {o: n for n in p.nodes for o in n.output}
    outputs = set(p.outputs)

    def only_reader(name: str) -> Optional[Any]:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in outputs else None

    drop: Dict[int, Any] = {}
    for erf in [n for n in p.nodes if n.op_type == "Erf"]:
        found = _gelu_chain(p, erf, producer, only_reader)
        if found is None or any(id(n) in drop for n in found[1]):
            continue
        x, chain, out = found
        gelu = onnx.helper.make_node("Gelu", [x], [out], name=f"{erf.name or out}/gelu", approximate="none")
        for n in chain:
            drop[id(n)] = gelu
    if not drop:
        return
    pos = {id(n): i for i, n in enumerate(p.nodes)}
    last: Dict[int, int] = {}
    for nid, g in drop.items():     # each Gelu where its chain's output stood (after its input)
        last[id(g)] = max(last.get(id(g), -1), pos[nid])
    nodes: List[Any] = []
    for i, n in enumerate(p.nodes):
        g = drop.get(id(n))
        if g is None:
            nodes.append(n)
        elif last[id(g)] == i:
            nodes.append(g)
    p.nodes = nodes
    p.notes.append(f"{len(last)} exact GELU(s) written as x * 0.5 * (1 + Erf(x / sqrt 2)) became TFLite's GELU")


def _fuse_hardswish(p: Prepared) -> None:
    """A hard-swish written out (``x * clip(x + 3, 0, 6) / 6``: paddle2onnx) or as ``x * HardSigmoid(x)``
    (PyTorch before opset 14, and the quantizer's prepared graph) becomes one ONNX ``HardSwish`` node,
    lowered to TFLite's HARD_SWISH: one op where there were four."""
    import onnx

    from ...formats.onnx_rewrite import hardswish_chains

    found = hardswish_chains(p.nodes, p.consts, p.outputs)
    if not found:
        return
    at = {id(chain[-1]): onnx.helper.make_node("HardSwish", [x], [chain[-1].output[0]],
                                                name=f"{chain[-1].name or chain[-1].output[0]}/hardswish")
          for x, chain in found}
    gone = {id(n) for _, chain in found for n in chain[:-1]}
    p.nodes = [at.get(id(n), n) for n in p.nodes if id(n) not in gone]
    p.notes.append(f"{len(found)} hard-swish(es) written out in ONNX ops became TFLite's HARD_SWISH")
