"""Why a TFLite model failed on the shapes it was fed: the node, and the constraint its graph implies.

LiteRT says ``Given shapes, [1,32,32,3] and [1,31,31,3], are not broadcastable.Node number 2 (ADD)
failed to prepare.``, or, with XNNPACK, only ``XNNPack delegate failed to reshape runtimeNode
number 3 (TfLiteXNNPackDelegate) failed to prepare.``: a node number, no tensor name, no input.
:func:`explain_failure` turns that into

- the node: its number, op and output tensor's name, with the shapes its inputs got (for a delegate's
  failure, the node the builtin kernels stop at, from an interpreter made without delegates);
- the constraint, where the graph says one: a window longer than its input (VALID padding), or
  spatial dims that are not multiples of the model's total stride
  (:func:`sdk.formats.onnx_diagnose.flow_stride` over the file's CONV_2D / pool strides).

Runs on the board too (Python 3.8, NumPy, the TFLite runtime): the graph is read from the
interpreter's own tensor and op lists; the strides need the flatbuffer schema, and without it only
the node is named.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

__all__ = ["Failure", "explain_failure", "parse_failure"]

_FAILED = re.compile(r"Node number (\d+) \(([^)]+)\) failed to (prepare|invoke)")
_WHERE = re.compile(r"^\s*(?:[\w./-]+\.(?:cc|h|cpp):\d+\s+)")   # "tflite/kernels/conv.cc:396 "
#: op -> (stride options, filter size options or None for a weights tensor, padding option)
_WINDOW = {"CONV_2D": ("strideH", "strideW", None), "DEPTHWISE_CONV_2D": ("strideH", "strideW", None),
           "MAX_POOL_2D": ("strideH", "strideW", ("filterHeight", "filterWidth")),
           "AVERAGE_POOL_2D": ("strideH", "strideW", ("filterHeight", "filterWidth")),
           "L2_POOL_2D": ("strideH", "strideW", ("filterHeight", "filterWidth"))}
_UPSAMPLE = ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "TRANSPOSE_CONV", "DEPTH_TO_SPACE")
_VALID = 1   # tflite Padding.VALID


@dataclass(frozen=True)
class Failure:
    """A parsed LiteRT failure: node ``index``, its ``op``, the ``phase`` (prepare / invoke) and the
    kernel's own ``reason`` (the text before "Node number", its source location dropped)."""

    index: int
    op: str
    phase: str
    reason: str

    @property
    def delegate(self) -> bool:
        return "delegate" in self.op.lower()


def parse_failure(message: str) -> Optional[Failure]:
    """The last ``Node number N (OP) failed to ...`` of a LiteRT message, or None."""
    found = list(_FAILED.finditer(message))
    if not found:
        return None
    m = found[-1]
    before = message[:m.start()]
    prev = list(_FAILED.finditer(before))
    reason = before[prev[-1].end():] if prev else before
    reason = _WHERE.sub("", reason.strip().splitlines()[-1] if reason.strip() else "").strip().rstrip(".")
    return Failure(int(m.group(1)), m.group(2), m.group(3), reason)


def _shape(d: Mapping[str, Any]) -> List[int]:
    return [int(x) for x in d.get("shape", [])]


class _Plan:
    """An interpreter's node list and tensors, as LiteRT reports them after a (failed) allocation;
    ``consts``: the tensors no op writes that are not graph inputs (weights, shape vectors)."""

    def __init__(self, interp: Any, inputs: Sequence[int]):
        self.ops = {int(o["index"]): o for o in interp._get_ops_details()}
        self.tensors = {int(t["index"]): t for t in interp.get_tensor_details()}
        written = {int(t) for o in self.ops.values() for t in o["outputs"]}
        self.consts = {i for i in self.tensors if i not in written and i not in set(inputs)}

    def name(self, t: int) -> str:
        d = self.tensors.get(int(t))
        return str(d["name"]) if d is not None else f"#{t}"

    def node(self, index: int, shapes: bool = True) -> str:
        """"node 2 (ADD, output 'sum') (its inputs got [1,32,32,3], [1,31,31,3])"."""
        op = self.ops.get(index)
        if op is None:
            return f"node {index}"
        outs = [int(t) for t in op["outputs"] if int(t) >= 0]
        label = f", output '{self.name(outs[0])}'" if outs else ""
        acts = [int(t) for t in op["inputs"] if int(t) >= 0 and int(t) in self.tensors and int(t) not in self.consts]
        got = f" (its inputs got {', '.join(_fmt(_shape(self.tensors[t])) for t in acts)})" if acts and shapes else ""
        return f"node {index} ({op['op_name']}{label}){got}"


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def _steps(graph: Any) -> List[Tuple[List[int], List[int], int, bool]]:
    steps = []
    for op in graph.ops:
        own = 1
        if op.code in _WINDOW:
            sh, sw, _ = _WINDOW[op.code]
            own = max(int(op.options.get(sh) or 1), int(op.options.get(sw) or 1))
        ins = [i for i in op.inputs if i >= 0 and graph.tensors[i].data is None]
        steps.append((ins, list(op.outputs), own, op.code in _UPSAMPLE))
    return steps


def _graph(model_bytes: Optional[bytes]) -> Any:
    if not model_bytes:
        return None
    try:
        from .reader import read_tflite

        return read_tflite(model_bytes)[0]
    except Exception:  # noqa: BLE001 - no schema on the board, several subgraphs: no strides, node only
        return None


def _window_sentence(plan: _Plan, index: int, graph: Any, feeds: Mapping[str, Tuple[int, ...]]) -> Optional[str]:
    """A VALID-padded window longer than what the failing node's input got."""
    op = plan.ops.get(index)
    if op is None or op["op_name"] not in _WINDOW or graph is None or not len(op["inputs"]) or not len(op["outputs"]):
        return None
    out = plan.name(int(op["outputs"][0]))   # the file's op by its output (the reader folds and prunes ops)
    gop = next((o for o in graph.ops if o.outputs and graph.tensors[o.outputs[0]].name == out), None)
    if gop is None or int(gop.options.get("padding", 0)) != _VALID:
        return None
    x = _shape(plan.tensors[int(op["inputs"][0])])
    sizes = gop.options.get
    _, _, filt = _WINDOW[op["op_name"]]
    if filt is not None:
        kernel = [int(sizes(filt[0]) or 1), int(sizes(filt[1]) or 1)]
    else:
        w = _shape(plan.tensors[int(op["inputs"][1])])
        kernel = w[1:3]
    if len(x) != 4 or len(kernel) != 2:
        return None
    for ax, (got, k) in enumerate(zip(x[1:3], kernel)):
        if got < k:
            who = ", ".join(f"'{n}' {_fmt(s)}" for n, s in feeds.items())
            return (f"{plan.node(index, shapes=False)} has a window of {k} along {'HW'[ax]} but gets {got} there "
                    f"(VALID padding): input {who} is too small for it")
    return None


def explain_failure(message: str, interp: Any, feeds: Mapping[str, Tuple[int, ...]],
                    input_index: Mapping[str, int], model_bytes: Optional[bytes] = None,
                    builtin_interp: Any = None) -> Tuple[Optional[str], Optional[str]]:
    """``(what failed, the constraint)`` for a LiteRT ``message`` from ``interp`` fed ``feeds``
    (input name -> shape; ``input_index`` their tensor indices). ``builtin_interp``: a fresh
    interpreter of the same model without delegates, used when a delegate's node failed to name
    the node inside it. Either part is None when it cannot be said."""
    from ...formats.onnx_diagnose import flow_stride, stride_sentence

    failure = parse_failure(message)
    if failure is None:
        return None, None
    inputs = list(input_index.values())
    plan = _Plan(interp, inputs)
    if failure.delegate and builtin_interp is not None:
        try:
            for name, shape in feeds.items():
                if name in input_index:
                    builtin_interp.resize_tensor_input(input_index[name], [int(d) for d in shape])
            builtin_interp.allocate_tensors()
        except (RuntimeError, ValueError) as exc:
            inner = parse_failure(str(exc))
            if inner is not None:
                failure, plan = inner, _Plan(builtin_interp, inputs)
        else:
            what = (f"the XNNPACK delegate (node {failure.index}) cannot reshape to these inputs, which the "
                    "builtin kernels take: run with -o xnnpack=false")
            return what, None
    reason = f": {failure.reason}" if failure.reason else ""
    what = f"{plan.node(failure.index)} failed to {failure.phase}{reason}"
    graph = _graph(model_bytes)
    said = _window_sentence(plan, failure.index, graph, feeds)
    if said is None and graph is not None:
        stride = flow_stride(_steps(graph), graph.inputs, lambda t: isinstance(t, int) and len(graph.tensors[t].shape) == 4)
        node = f"{failure.index}, {plan.ops[failure.index]['op_name']}" if failure.index in plan.ops else None
        for name, shape in feeds.items():
            if len(shape) == 4:
                said = stride_sentence(name, shape[1:3], stride, node)   # TFLite images are NHWC
                if said:
                    break
    return what, said
