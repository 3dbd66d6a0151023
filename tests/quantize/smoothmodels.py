"""Small LayerNorm -> MatMul models for the balancing tests (onnx.helper, seeded weights)."""
from __future__ import annotations

from pathlib import Path
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

T, C, N = 16, 32, 24
#: channels whose LayerNorm gamma is large: the activation outliers balancing moves into the weights
OUTLIERS = (3, 17)


def layernorm_matmul(path: Path, *, form: str = "written out", residual: bool = False, gemm: bool = False,
                     seed: int = 0, outlier_gain: float = 60.0) -> Path:
    """``x [1, T, C]`` (or ``[T, C]`` with ``gemm``) -> LayerNorm (``form``: ``written out`` or
    ``LayerNormalization``) -> MatMul/Gemm (W [C, N]) -> Relu -> MatMul (W2 [N, 8]) -> ``y``. The
    LayerNorm's gamma is ``outlier_gain`` on :data:`OUTLIERS` (tiny weights read them), 1 elsewhere.
    ``residual``: the LayerNorm's output also feeds an Add with ``x`` (a consumer no scale can follow)."""
    rng = np.random.default_rng(seed)
    gamma = np.ones(C, np.float32)
    gamma[list(OUTLIERS)] = outlier_gain
    beta = (rng.standard_normal(C) * 0.1).astype(np.float32)
    w = (rng.standard_normal((C, N)) / np.sqrt(C)).astype(np.float32)
    w[list(OUTLIERS)] *= 0.01
    w2 = (rng.standard_normal((N, 8)) / np.sqrt(N)).astype(np.float32)
    shape = [T, C] if gemm else [1, T, C]
    inits = [numpy_helper.from_array(a, n) for a, n in ((gamma, "ln_gamma"), (beta, "ln_beta"), (w, "fc1_w"),
                                                       (w2, "fc2_w"))]
    nodes = []
    if form == "LayerNormalization":
        nodes.append(helper.make_node("LayerNormalization", ["x", "ln_gamma", "ln_beta"], ["ln_out"], name="ln",
                                      axis=-1, epsilon=1e-5))
    else:
        inits += [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                  numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
        nodes += [helper.make_node("ReduceMean", ["x"], ["mu"], name="ln_mean", axes=[-1], keepdims=1),
                  helper.make_node("Sub", ["x", "mu"], ["xc"], name="ln_sub"),
                  helper.make_node("Pow", ["xc", "two"], ["sq"], name="ln_pow"),
                  helper.make_node("ReduceMean", ["sq"], ["var"], name="ln_var", axes=[-1], keepdims=1),
                  helper.make_node("Add", ["var", "eps"], ["vare"], name="ln_addeps"),
                  helper.make_node("Sqrt", ["vare"], ["std"], name="ln_sqrt"),
                  helper.make_node("Div", ["xc", "std"], ["xhat"], name="ln_div"),
                  helper.make_node("Mul", ["xhat", "ln_gamma"], ["xg"], name="ln_mul"),
                  helper.make_node("Add", ["xg", "ln_beta"], ["ln_out"], name="ln_add")]
    op = "Gemm" if gemm else "MatMul"
    nodes += [helper.make_node(op, ["ln_out", "fc1_w"], ["h"], name="fc1"),
              helper.make_node("Relu", ["h"], ["hr"], name="relu"),
              helper.make_node(op, ["hr", "fc2_w"], ["y0"], name="fc2")]
    if residual:
        inits.append(numpy_helper.from_array((rng.standard_normal((C, 8)) * 0.1).astype(np.float32), "res_w"))
        nodes += [helper.make_node("Add", ["ln_out", "x"], ["res"], name="residual"),
                  helper.make_node(op, ["res", "res_w"], ["y1"], name="fc_res"),
                  helper.make_node("Add", ["y0", "y1"], ["y"], name="sum")]
    else:
        nodes.append(helper.make_node("Identity", ["y0"], ["y"], name="out"))
    g = helper.make_graph(nodes, "ln_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-1] + [8])], inits)
    opset = 17 if form == "LayerNormalization" else 13
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def inputs(n: int, seed: int = 1, gemm: bool = False) -> np.ndarray:
    """``n`` samples ``[n, T, C]`` (or ``[n*T, C]`` rows stacked per sample with ``gemm``)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, T, C)).astype(np.float32)
    return x.reshape(n, T, C) if gemm else x


def save_inputs(path: Path, n: int, seed: int = 1, gemm: bool = False) -> Path:
    np.save(path, inputs(n, seed, gemm))
    return path
