"""Why an ONNX model failed on the shapes it was fed: the constraint its graph implies.

A runtime's failure message names a node at best (``Shape mismatch attempting to re-use buffer``,
``Invalid input shape: {400}``). :func:`explain_shapes` looks at the model instead and says what the
inputs must satisfy, where its shapes say so:

- a Conv or pooling window longer than the (padded) input along an axis: "needs at least N";
- inputs whose spatial dims are not multiples of the model's total stride (a detector that
  downsamples by 32 and concatenates feature maps): "must be multiples of 32".

Pure graph analysis (ONNX shape inference), no runtime. Returns None when nothing is derivable.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, Hashable, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

__all__ = ["explain_shapes", "explain_failure", "node_named", "flow_stride", "stride_sentence"]

_WINDOW_OPS = ("Conv", "MaxPool", "AveragePool", "LpPool")


def node_named(message: str) -> Optional[str]:
    """The node a runtime's message names: ONNX Runtime ``... node. Name:'X' Status Message``;
    TensorRT ``Error Code 7: Internal Error (/model.9/Concat: ...)`` (its layers carry the ONNX
    node names)."""
    m = (re.search(r"Name:\s*'([^']+)'", message) or re.search(r"node\s+'([^']+)'", message)
         or re.search(r"Error Code \d+:[^(]*\(([^:()\s]+):", message))
    return m.group(1) if m else None


_SHAPE_WORDS = re.compile(r"shape|dimension|broadcast|concat|size", re.I)


def explain_failure(model: Any, feeds: Mapping[str, Any], message: str) -> Optional[str]:
    """:func:`explain_shapes` for a runtime's failure ``message`` on the ONNX ``model`` (a path,
    bytes or a ModelProto) it ran, when the message is about shapes; None otherwise or when the
    model cannot be read (an explanation is a bonus: the runtime's own line stays)."""
    if model is None or not _SHAPE_WORDS.search(message):
        return None
    try:
        import onnx

        if isinstance(model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(model))
        elif isinstance(model, onnx.ModelProto):
            proto = model
        else:
            proto = onnx.load(str(model))
        return explain_shapes(proto, feeds, node_named(message))
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _attr_ints(node: Any, name: str) -> List[int]:
    for a in node.attribute:
        if a.name == name:
            return list(a.ints)
    return []


Step = Tuple[Sequence[Hashable], Sequence[Hashable], int, bool]


def flow_stride(steps: Iterable[Step], sources: Iterable[Hashable], is_map: Callable[[Hashable], bool]) -> int:
    """A model's total downsampling from its nodes in run order, each ``(inputs, outputs, stride,
    upsample)``: strides multiply along the data flow; a node joining feature maps (Concat, Add
    after an upsample) takes the finest of its inputs' strides (``is_map``: the tensor is a
    feature map; they line up spatially); an upsample halves it. Any format's adapter feeds it
    (ONNX here, TFLite in :mod:`sdk.targets.tflite.diagnose`). 1: no strided layer."""
    stride: Dict[Hashable, int] = {name: 1 for name in sources}
    best = 1
    for inputs, outputs, own, upsample in steps:
        maps = [stride[i] for i in inputs if i in stride and is_map(i)]
        s = min(maps) if maps else max([stride.get(i, 1) for i in inputs] or [1])
        s = max(1, s // 2) if upsample else s * max(1, own)
        for o in outputs:
            stride[o] = s
        best = max(best, s)
    return best


def stride_sentence(name: str, dims: Sequence[int], stride: int, node: Optional[str] = None) -> Optional[str]:
    """"input 'x' has H x W 63 x 63, but the model downsamples by 2 ...: multiples of 2, e.g. 64 x 64",
    or None when ``dims`` (H, W) fit ``stride``."""
    if stride <= 1 or not any(int(d) % stride for d in dims):
        return None
    ok = [((int(d) + stride - 1) // stride) * stride for d in dims]
    where = f" (node {node})" if node else ""
    return (f"input '{name}' has H x W {dims[0]} x {dims[1]}, but the model downsamples by {stride}"
            f"{where}: H and W must be multiples of {stride}, e.g. {ok[0]} x {ok[1]}")


def _total_stride(g: Any, known: Mapping[str, Sequence[Any]]) -> int:
    """:func:`flow_stride` of an ONNX graph (Conv/pool ``strides``; Resize/Upsample upsample)."""
    def steps() -> Iterator[Step]:
        for n in g.node:
            st = _attr_ints(n, "strides") if n.op_type in _WINDOW_OPS else []
            yield ([i for i in n.input if i], list(n.output), max(st) if st else 1,
                   n.op_type in ("Resize", "Upsample"))

    return flow_stride(steps(), [i.name for i in g.input], lambda t: len(known.get(str(t)) or [0, 0, 0]) >= 3)


def explain_shapes(proto: Any, feeds: Mapping[str, Any], node: Optional[str] = None) -> Optional[str]:
    """The constraint the model's graph puts on the fed shapes, as one sentence naming the input
    (and ``node``, the one the runtime named, where it is the one that fails); None when none is found."""
    import numpy as np
    import onnx

    shapes = {k: tuple(np.asarray(v).shape) for k, v in feeds.items()}
    g0 = proto.graph
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    inits = {i.name for i in g0.initializer}
    for vi in fixed.graph.input:
        if vi.name in shapes and vi.name not in inits:
            dims = vi.type.tensor_type.shape.dim
            if len(dims) == len(shapes[vi.name]):
                for d, v in zip(dims, shapes[vi.name]):
                    d.Clear()
                    d.dim_value = int(v)
    del fixed.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(fixed, data_prop=True).graph
    except Exception:  # noqa: BLE001 - inference may fail exactly because the shapes do not fit
        inferred = fixed.graph
    known: Dict[str, Sequence[Any]] = {}
    for vi in list(inferred.input) + list(inferred.value_info):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            known[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    data_inputs = [i.name for i in g0.input if i.name not in inits and i.name in shapes]
    # 1. a window longer than its padded input
    for n in inferred.node:
        if n.op_type not in _WINDOW_OPS or not n.input:
            continue
        x = known.get(n.input[0])
        if n.op_type == "Conv":
            w = known.get(n.input[1]) if len(n.input) > 1 else None
            kernel = list(w[2:]) if w else _attr_ints(n, "kernel_shape")
        else:
            kernel = _attr_ints(n, "kernel_shape")
        if not x or not kernel or any(k is None for k in kernel):
            continue
        pads = _attr_ints(n, "pads") or [0] * (2 * len(kernel))
        dil = _attr_ints(n, "dilations") or [1] * len(kernel)
        spatial = list(x[2:])
        for ax, (size, k) in enumerate(zip(spatial, kernel)):
            if size is None:
                continue
            reach = dil[ax] * (int(k) - 1) + 1
            padded = size + pads[ax] + pads[ax + len(kernel)]
            if padded < reach:
                need = reach - pads[ax] - pads[ax + len(kernel)]
                who = ", ".join(f"'{i}' {list(shapes[i])}" for i in data_inputs)
                return (f"{n.op_type} node '{n.name or n.output[0]}' has a window of {reach} along axis {ax + 2} but "
                        f"gets {size} there: input {who} is too short; it needs at least {need} there")
    # 2. spatial dims that are not multiples of the total stride
    stride = _total_stride(inferred, known)
    for name in data_inputs:
        s = shapes[name]
        if len(s) == 4:
            dims = s[2:] if s[1] <= 4 or s[3] > 4 else s[1:3]   # NCHW, else NHWC
            said = stride_sentence(name, dims, stride, f"'{node}'" if node else None)
            if said:
                return said
    return None
