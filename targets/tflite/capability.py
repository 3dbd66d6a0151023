"""``sdk check MODEL.tflite --target tflite``: which nodes LiteRT's XNNPACK delegate takes, which run
on the builtin CPU kernels, and which cannot run at all, read from LiteRT's own interpreter.

Two interpreters are made (nothing is run): one with the default delegate (XNNPACK), whose node
list ends with the ``DELEGATE`` nodes that replaced the partitions XNNPACK took (a partition is every
node between a delegate node's inputs and its outputs), and one with the builtin kernels only, which
names a node the builtin kernels cannot prepare (e.g. MediaPipe's ``Convolution2DTransposeBias``
custom op, which only XNNPACK runs).
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Set, Tuple

from ..capability import CapabilityChecker, NodeVerdict

__all__ = ["TFLiteChecker", "delegated_nodes"]


def delegated_nodes(ops: List[Dict[str, Any]]) -> Tuple[Set[int], int]:
    """``(indices of the nodes a delegate took, number of delegate nodes)`` from
    ``Interpreter._get_ops_details()`` after the delegate was applied."""
    producer: Dict[int, Dict[str, Any]] = {}
    for op in ops:
        if op["op_name"] != "DELEGATE":
            for t in op["outputs"]:
                producer[int(t)] = op
    taken: Set[int] = set()
    delegates = [op for op in ops if op["op_name"] == "DELEGATE"]
    for d in delegates:
        boundary = {int(t) for t in d["inputs"]}
        stack = [int(t) for t in d["outputs"]]
        seen: Set[int] = set()
        while stack:
            t = stack.pop()
            if t in seen or t in boundary:
                continue
            seen.add(t)
            p = producer.get(t)
            if p is None or p["index"] in taken:
                continue
            taken.add(p["index"])
            stack.extend(int(x) for x in p["inputs"] if int(x) >= 0)
    return taken, len(delegates)


_UNPREPARED = re.compile(r"Node number (\d+) \(([^)]+)\) failed to prepare")


class TFLiteChecker(CapabilityChecker):
    """LiteRT (ai-edge-litert, tflite_runtime or tensorflow.lite) with its XNNPACK delegate."""

    name = "tflite"
    formats = ("tflite",)
    options = ("threads",)

    def __init__(self, version: Optional[str] = None, **options: Any) -> None:
        super().__init__(version, **options)
        self._runtime_version = "?"

    def version_label(self) -> str:
        return self._runtime_version

    def devices(self) -> Tuple[str, str]:
        return ("XNNPACK", "CPU builtin kernels")

    def source(self) -> str:
        return "LiteRT's execution plan (the interpreter's node list after the XNNPACK delegate was applied)"

    def _check_impl(self, model: Any) -> Tuple[List[NodeVerdict], List[str]]:
        from ...formats.tflite import load_runtime, quiet_native_info

        rt = load_runtime()
        self._runtime_version = rt.describe()
        notes: List[str] = []
        content = model.to_bytes()
        with quiet_native_info():
            plain = rt.Interpreter(model_content=content, **rt.resolver_kwargs(False))
            unprepared: Dict[int, str] = {}
            try:
                plain.allocate_tensors()
            except (RuntimeError, ValueError) as exc:
                for idx, op in _UNPREPARED.findall(str(exc)):
                    unprepared[int(idx)] = op
                if not unprepared:
                    notes.append(f"the builtin kernels refuse the model: {str(exc).splitlines()[0]}")
            ops = plain._get_ops_details()
            delegated: Set[int] = set()
            xnn_error: Optional[str] = None
            try:
                with_xnn = rt.Interpreter(model_content=content, **rt.resolver_kwargs(True))
                with_xnn.allocate_tensors()
                delegated, n_delegates = delegated_nodes(with_xnn._get_ops_details())
                if n_delegates > 1:
                    notes.append(f"XNNPACK took {n_delegates} partitions: every boundary between them costs a copy")
            except (RuntimeError, ValueError) as exc:
                xnn_error = str(exc).splitlines()[0]
                notes.append(f"the interpreter with XNNPACK refuses the model: {xnn_error}")
        names = {int(d["index"]): d["name"] for d in plain.get_tensor_details()}
        out: List[NodeVerdict] = []
        for op in ops:
            idx = int(op["index"])
            outs = [int(t) for t in op["outputs"]]
            label = names.get(outs[0], f"#{idx}") if outs else f"#{idx}"
            node = f"#{idx} {label}"
            kind = op["op_name"]
            if idx in delegated:
                reason = "runs only through XNNPACK: the builtin kernels cannot prepare it" if idx in unprepared else ""
                out.append(NodeVerdict(node, kind, "runs", "XNNPACK", reason))
            elif idx in unprepared or xnn_error is not None and idx in unprepared:
                out.append(NodeVerdict(node, kind, "fails", "-",
                                       f"neither XNNPACK nor the builtin kernels run {kind}",
                                       ["register the custom op's kernel with the interpreter "
                                        "(custom_op_registerers)", "run that part elsewhere (sdk debug reduce "
                                        "writes the subgraph)"]))
            else:
                out.append(NodeVerdict(node, kind, "fallback", "CPU", "XNNPACK did not take it "
                                       "(not in a delegated partition of LiteRT's execution plan)"))
        return out, notes
