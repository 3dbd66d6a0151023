"""What ONNX Runtime actually runs: the CPU session's optimized graph (saved through
``SessionOptions.optimized_model_filepath``), counted. A QDQ model pays only where ORT fused the Q/DQ
into int8 kernels; a Conv/MatMul/Gemm left in float with DequantizeLinear around it runs slower
than plain FP32."""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from typing import Any, Dict, List

__all__ = ["ort_optimized_graph", "fusion_report", "INT8_KERNELS", "FLOAT_WEIGHTED"]

#: int8 kernels of ONNX Runtime's CPU provider for Conv/MatMul/Gemm (any domain, NHWC forms included)
INT8_KERNELS = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm",
                          "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "NhwcQLinearConv"})
FLOAT_WEIGHTED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "FusedConv", "FusedGemm", "FusedMatMul"})
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: int8 data movers ORT's optimizer puts between a QuantizeLinear and the kernel it feeds
_LAYOUT = frozenset({"Transpose", "Reshape"})


def ort_optimized_graph(model: Any, threads: int = 1) -> Any:
    """The graph ONNX Runtime's CPU session runs for ``model`` (ModelProto, bytes or path), all
    optimizations on, as a ModelProto."""
    import onnx
    import onnxruntime as ort

    src = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    with tempfile.TemporaryDirectory(prefix="edgesdk-opt-") as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = threads
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(src, sess_options=so, providers=["CPUExecutionProvider"])
        return onnx.load(so.optimized_model_filepath)


class _Graph:
    """Producer / consumer maps of an optimized graph, and the questions the report asks of it."""

    def __init__(self, g: Any):
        self.g = g
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers: Dict[str, List[Any]] = {}
        for n in g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)

    @staticmethod
    def int8_op(n: Any) -> bool:
        return n is not None and (n.op_type in INT8_KERNELS or n.op_type.startswith("QLinear"))

    def fed_by_dq(self, n: Any) -> bool:
        return any(self.producer.get(i) is not None and self.producer[i].op_type == "DequantizeLinear"
                   for i in n.input[:2])

    def feeds_q(self, n: Any) -> bool:
        return any(c.op_type == "QuantizeLinear" for o in n.output for c in self.consumers.get(o, []))

    def dq_serves_int8(self, n: Any) -> bool:
        """A DequantizeLinear input of ``n`` reads the output of an int8 kernel."""
        for i in n.input[:2]:
            dq = self.producer.get(i)
            if dq is not None and dq.op_type == "DequantizeLinear" and self.int8_op(self.producer.get(dq.input[0])):
                return True
        return False

    def q_serves_int8(self, n: Any) -> bool:
        """A QuantizeLinear after ``n`` feeds an int8 kernel (directly, or through the Transpose that
        ORT's NHWC layout pass puts before a QLinearConv)."""
        return any(q.op_type == "QuantizeLinear" and self._reaches_int8(q.output[0])
                   for o in n.output for q in self.consumers.get(o, []))

    def _reaches_int8(self, tensor: str, depth: int = 3) -> bool:
        for c in self.consumers.get(tensor, []):
            if self.int8_op(c) or (depth and c.op_type in _LAYOUT and self._reaches_int8(c.output[0], depth - 1)):
                return True
        return False


def fusion_report(model: Any) -> Dict[str, Any]:
    """Counts of the optimized graph: ``int8_kernels`` (Conv/MatMul/Gemm running in int8),
    ``float_weighted`` (Conv/MatMul/Gemm left in float), ``float_with_dq_input`` (those fed by a
    DequantizeLinear: a quantized op that did not fuse), ``stray_qdq_ops`` (ops without an int8 kernel
    with a DequantizeLinear before and a QuantizeLinear after them that serve no int8 kernel: pure
    overhead), ``float_between_int8`` (float ops such as HardSwish between two int8 kernels: the Q/DQ
    there are those kernels' own) and the op histogram."""
    gr = _Graph(ort_optimized_graph(model).graph)
    nodes = list(gr.g.node)
    ops = Counter(n.op_type for n in nodes)
    float_w = [n for n in nodes if n.op_type in FLOAT_WEIGHTED]
    around = [n for n in nodes if n.op_type not in _QDQ and not gr.int8_op(n) and gr.fed_by_dq(n) and gr.feeds_q(n)]
    return {"int8_kernels": sum(v for k, v in ops.items() if k in INT8_KERNELS), "float_weighted": len(float_w),
            "float_with_dq_input": sum(1 for n in float_w if gr.fed_by_dq(n)),
            "float_between_int8": [n.name for n in around if gr.dq_serves_int8(n) and gr.q_serves_int8(n)],
            "stray_qdq_ops": [n.name for n in around if not (gr.dq_serves_int8(n) or gr.q_serves_int8(n))],
            "ops": dict(sorted(ops.items()))}
