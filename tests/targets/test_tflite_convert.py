"""ONNX -> TFLite (``sdk.targets.tflite.convert``): op by op against onnxruntime on the same inputs,
the layouts (transposes only at the boundaries), the ONNX names in the metadata, and an op or
attribute TFLite cannot express failing as one error before anything is written."""
from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.errors import ConversionError
from sdk.targets.convert import ConvertOptions, convert
from sdk.targets.tflite.convert import METADATA_KEY, onnx_names, onnx_to_tflite_bytes
from tests.clirun import run_cli

pytest.importorskip("ai_edge_litert")  # the tflite extra: installed by .ci/run (pip install -e .[all,test])

RNG = np.random.default_rng(0)


def _w(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes: List, inits: Dict[str, np.ndarray], x_shape: Sequence[int], outputs: Sequence[str],
           opset: int = 13, inputs: Optional[Dict[str, Sequence[int]]] = None) -> onnx.ModelProto:
    ins = inputs or {"x": x_shape}
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in ins.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # graph outputs declared with the shapes onnxruntime computes (onnx.checker wants one)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in i.shape], np.float32)
             for i in sess.get_inputs()}
    for o, v in zip(m.graph.output, sess.run(None, feeds)):
        o.CopyFrom(helper.make_tensor_value_info(o.name, TensorProto.FLOAT, list(v.shape)))
    return m


def _run_tflite(data: bytes, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], feeds[d["name"]].astype(d["dtype"]))
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def _check(m: onnx.ModelProto, feeds: Optional[Dict[str, np.ndarray]] = None, atol: float = 1e-4, **kw):
    if feeds is None:
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        feeds = {m.graph.input[0].name: RNG.standard_normal(shape).astype(np.float32)}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    res = onnx_to_tflite_bytes(m, **kw)
    got = _run_tflite(res["data"], feeds)
    for name, r in ref.items():
        y = got[name]
        assert y.shape == r.shape, (name, y.shape, r.shape)
        np.testing.assert_allclose(y, r, atol=atol, rtol=1e-4, err_msg=name)
        cos = float(np.dot(y.ravel(), r.ravel()) / (np.linalg.norm(y) * np.linalg.norm(r) + 1e-30))
        assert cos >= 0.9999 or np.abs(r).max() < 1e-6
    return res


def _conv_then(op_nodes: List, extra_inits: Optional[Dict[str, np.ndarray]] = None, out: str = "y",
               size: int = 8, channels: int = 4, opset: int = 13) -> onnx.ModelProto:
    """x[1,3,size,size] -> Conv 3x3 (NHWC inside from here) -> the nodes under test -> ``out``."""
    inits = {"w": _w(channels, 3, 3, 3), "b": _w(channels)}
    inits.update(extra_inits or {})
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv")] + op_nodes
    return _model(nodes, inits, [1, 3, size, size], [out], opset=opset)


def _node(op: str, ins: List[str], outs: Optional[List[str]] = None, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs or ["y"], name=op.lower(), **attrs)


# -- element-wise and activations -------------------------------------------------------------------
@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Abs", {}), ("Neg", {}),
    ("LeakyRelu", {"alpha": 0.1}), ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
    ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}), ("Elu", {}),
])
def test_unary(op, attrs):
    _check(_conv_then([_node(op, ["c"], **attrs)]))


def test_hard_swish():
    _check(_conv_then([_node("HardSwish", ["c"])], opset=14))


def test_sqrt_and_clip_variants():
    _check(_conv_then([_node("Abs", ["c"], ["a"]), _node("Sqrt", ["a"])]))
    for lo, hi in ((0.0, 6.0), (-1.0, 1.0), (0.0, 1.0), (-0.5, 0.7)):
        m = _conv_then([_node("Clip", ["c", "lo", "hi"])], {"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)})
        _check(m)
    _check(_conv_then([_node("Clip", ["c", "lo"])], {"lo": np.array(0.2, np.float32)}))


def test_silu_and_prelu():
    _check(_conv_then([_node("Sigmoid", ["c"], ["s"]), _node("Mul", ["c", "s"])]))
    _check(_conv_then([_node("PRelu", ["c", "slope"])], {"slope": _w(4, 1, 1)}))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("other", ["channel", "scalar", "full", "activation"])
def test_binary_broadcasts_in_nhwc(op, other):
    if other == "activation":
        inits = {"w2": _w(4, 3, 1, 1)}
        nodes = [helper.make_node("Conv", ["x", "w2"], ["d"], name="conv2"), _node("Abs", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["f"], name="one"), _node(op, ["c", "f"])]
        inits["one"] = np.array(1.0, np.float32)
    else:
        shape = {"channel": (4, 1, 1), "scalar": (), "full": (1, 4, 8, 8)}[other]
        const = (np.abs(_w(*shape)) + 0.5).astype(np.float32)
        inits = {"k": const}
        nodes = [_node(op, ["c", "k"])]
    _check(_conv_then(nodes, inits))


def test_batchnorm_folds_into_conv_or_stands_alone():
    bn = {"g": np.abs(_w(4)) + 0.5, "be": _w(4), "mu": _w(4), "var": np.abs(_w(4)) + 0.1}
    res = _check(_conv_then([_node("BatchNormalization", ["c", "g", "be", "mu", "var"])], bn))
    assert res["ops"] == {"CONV_2D": 1, "TRANSPOSE": 2}  # folded into the conv's weights
    res = _check(_conv_then([_node("Relu", ["c"], ["r"]), _node("BatchNormalization", ["r", "g", "be", "mu", "var"])], bn))
    assert res["ops"]["MUL"] == 1 and res["ops"]["ADD"] == 1



def test_scalar_affines_fold_into_the_convs_around_them():
    """PP-LCNetV3's unit (Conv -> x*s+a -> hard-swish written out -> x*s2+a2 -> 1x1 Conv): the first
    affine goes into the conv before it, the second into the unpadded conv after it
    (:mod:`sdk.formats.onnx_rewrite`), the hard-swish is one HARD_SWISH: no MUL or ADD is left."""
    one = lambda v: np.asarray([v], np.float32)  # noqa: E731
    inits = {"s": one(1.7), "a": one(-0.4), "three": one(3.0), "six": one(6.0), "zero": np.asarray(0.0, np.float32),
             "sixf": np.asarray(6.0, np.float32), "s2": one(0.8), "a2": one(0.25), "w2": _w(6, 4, 1, 1)}
    m = _conv_then([_node("Mul", ["c", "s"], ["ms"]), _node("Add", ["ms", "a"], ["z"]),
                    helper.make_node("Add", ["z", "three"], ["p"], name="p"),
                    helper.make_node("Clip", ["p", "zero", "sixf"], ["cl"], name="cl"),
                    helper.make_node("Mul", ["z", "cl"], ["m"], name="m"), helper.make_node("Div", ["m", "six"], ["h"], name="h"),
                    helper.make_node("Mul", ["h", "s2"], ["h2"], name="h2"),
                    helper.make_node("Add", ["h2", "a2"], ["h3"], name="h3"),
                    helper.make_node("Conv", ["h3", "w2"], ["y"], name="conv2")], inits)
    res = _check(m)
    assert res["ops"] == {"CONV_2D": 2, "HARD_SWISH": 1, "TRANSPOSE": 2}, res["ops"]

# -- convolutions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("k,stride,pads,dil", [
    (3, 1, [1, 1, 1, 1], 1), (3, 2, [1, 1, 1, 1], 1), (3, 2, [0, 0, 1, 1], 1), (1, 1, [0, 0, 0, 0], 1),
    (5, 2, [2, 2, 2, 2], 1), (3, 1, [2, 2, 2, 2], 2), (3, 1, [0, 1, 2, 1], 1),
])
def test_conv_padding_and_strides(k, stride, pads, dil):
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads, strides=[stride, stride],
                                 dilations=[dil, dil])], {"w": _w(6, 3, k, k), "b": _w(6)}, [1, 3, 9, 10], ["y"])
    _check(m)


def test_conv_auto_pad_same_upper():
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])],
               {"w": _w(5, 3, 3, 3)}, [1, 3, 8, 8], ["y"])
    res = _check(m)
    assert "PAD" not in res["ops"]  # TFLite's SAME is ONNX's SAME_UPPER


@pytest.mark.parametrize("mult", [1, 2])
def test_depthwise_conv(mult):
    m = _conv_then([helper.make_node("Conv", ["c", "dw", "db"], ["y"], group=4, pads=[1, 1, 1, 1], name="dw")],
                   {"dw": _w(4 * mult, 1, 3, 3), "db": _w(4 * mult)})
    res = _check(m)
    assert res["ops"]["DEPTHWISE_CONV_2D"] == 1


def test_grouped_conv():
    m = _conv_then([helper.make_node("Conv", ["c", "gw"], ["y"], group=2, name="grouped")], {"gw": _w(6, 2, 1, 1)})
    _check(m)


@pytest.mark.parametrize("k,stride,pads,dil,auto", [
    (3, 1, [1, 1], 1, None), (400, 160, [0, 0], 1, None), (5, 2, [2, 1], 1, None), (3, 1, [2, 2], 2, None),
    (4, 2, None, 1, "SAME_UPPER"), (3, 1, None, 1, "VALID"),
])
def test_conv1d_as_a_1xk_conv2d(k, stride, pads, dil, auto):
    """A 1-D Conv (an STFT written as Conv, a Whisper/wav2vec front end) converts as TFLite's own
    Conv1D does: [N, L, C] inside, reshaped to [N, 1, L, C] around one CONV_2D, then a ReLU and a
    second 1-D Conv reading the first one's [N, L, C] directly (no TRANSPOSE between them)."""
    attrs = {"strides": [stride], "dilations": [dil]}
    attrs.update({"auto_pad": auto} if auto else {"pads": pads})
    length = 1200 if k == 400 else 40
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1d", **attrs),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1], name="conv1d_b")]
    m = _model(nodes, {"w": _w(6, 2, k), "b": _w(6), "w2": _w(5, 6, 3)}, [1, 2, length], ["y"])
    res = _check(m)
    assert res["ops"]["CONV_2D"] == 2 and res["ops"].get("TRANSPOSE", 0) <= 2   # the two boundaries only


@pytest.mark.parametrize("group", [3, 6])
def test_conv1d_depthwise_and_grouped(group):
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], group=group, pads=[1, 1], name="g1d")],
               {"w": _w(6, 6 // group, 3)}, [1, 6, 20], ["y"])
    res = _check(m)
    assert res["ops"].get("DEPTHWISE_CONV_2D", 0) == (1 if group == 6 else 0)


def test_clip_with_a_computed_bound():
    """AmplitudeToDB's top_db clamp (openWakeWord's front end): clip(x, max(x) - 80, 1e9), a bound
    the graph computes (a scalar, as ONNX requires), as MAXIMUM with it then MINIMUM."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0, name="rmax"),
             helper.make_node("Sub", ["mx", "top"], ["floor"], name="floor"),
             helper.make_node("Clip", ["x", "floor", "hi"], ["y"], name="clamp"),
             helper.make_node("Clip", ["x", "", "mx"], ["y2"], name="clamp_hi"),
             helper.make_node("Clip", ["x", "floor", "inf"], ["y3"], name="clamp_inf")]
    m = _model(nodes, {"top": np.array(1.5, np.float32), "hi": np.array(1e9, np.float32),
                       "inf": np.array(np.inf, np.float32)}, [1, 4, 10], ["y", "y2", "y3"])
    res = _check(m)
    # max=inf clamps nothing: no MINIMUM with an inf constant (the int8 pass made it NaN)
    assert res["ops"]["MAXIMUM"] == 2 and res["ops"]["MINIMUM"] == 2


def test_conv3d_is_refused_naming_the_attribute():
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="c3d")], {"w": _w(2, 1, 2, 2, 2)}, [1, 1, 4, 4, 4], ["y"])
    with pytest.raises(ConversionError, match=r"node 'c3d' \(Conv\), attribute kernel_shape: 3-D convolution"):
        onnx_to_tflite_bytes(m)


@pytest.mark.parametrize("stride,pads,out_pad", [(2, [0, 0, 0, 0], [0, 0]), (2, [1, 1, 1, 1], [1, 1]), (1, [1, 1, 1, 1], [0, 0])])
def test_conv_transpose(stride, pads, out_pad):
    m = _conv_then([helper.make_node("ConvTranspose", ["c", "tw", "tb"], ["y"], strides=[stride, stride], pads=pads,
                                     output_padding=out_pad, name="convt")], {"tw": _w(4, 5, 3, 3), "tb": _w(5)})
    _check(m)


@pytest.mark.parametrize("k,c_out,relu", [(2, 5, False), (2, 1, True), (4, 3, False)])
def test_conv_transpose_with_kernel_equal_to_stride_is_a_conv_and_depth_to_space(k, c_out, relu):
    """Kernel k, stride k, no padding: the output blocks do not overlap, so a 1x1 CONV_2D to k*k*C
    channels and DEPTH_TO_SPACE compute it (XNNPACK runs these faster, int8 most of all); a Relu
    after it stays fused into the CONV_2D."""
    tail = [helper.make_node("Relu", ["t"], ["y"], name="relu")] if relu else []
    m = _conv_then([helper.make_node("ConvTranspose", ["c", "tw", "tb"], ["t" if relu else "y"], strides=[k, k],
                                     name="convt"), *tail], {"tw": _w(4, c_out, k, k), "tb": _w(c_out)})
    res = _check(m)
    assert "TRANSPOSE_CONV" not in res["ops"] and res["ops"]["DEPTH_TO_SPACE"] == 1 and "RELU" not in res["ops"]
    names = onnx_names(res["data"])["tensors"]
    assert all(not t.endswith("/blocks") for t in names)     # the blocks are no ONNX value: not in the map


# -- pools, reductions, resize ------------------------------------------------------------------------
@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("GlobalAveragePool", {}), ("GlobalMaxPool", {}),
])
def test_pools(op, attrs):
    _check(_conv_then([_node(op, ["c"], **attrs)]))


@pytest.mark.parametrize("axes,keep", [([2, 3], 1), ([1], 1), ([1], 0), ([3], 0)])
def test_reduce_mean(axes, keep):
    _check(_conv_then([_node("ReduceMean", ["c"], axes=axes, keepdims=keep)]))


@pytest.mark.parametrize("mode,ctm,nearest", [
    ("nearest", "asymmetric", "floor"), ("linear", "half_pixel", None), ("linear", "align_corners", None),
    ("linear", "asymmetric", None), ("linear", "pytorch_half_pixel", None), ("nearest", "half_pixel", "round_prefer_ceil"),
])
def test_resize(mode, ctm, nearest):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest:
        attrs["nearest_mode"] = nearest
    m = _conv_then([_node("Resize", ["c", "", "scales"], **attrs)], {"scales": np.array([1, 1, 2, 2], np.float32)})
    _check(m)


# -- shape ops --------------------------------------------------------------------------------------------
def test_concat_split_slice_pad_in_nhwc():
    nodes = [_node("Relu", ["c"], ["r"]), helper.make_node("Concat", ["c", "r"], ["cat"], axis=1, name="cat"),
             helper.make_node("Split", ["cat", "sp"], ["s1", "s2"], axis=1, name="split"),
             helper.make_node("Slice", ["s1", "st", "en", "ax", "steps"], ["sl"], name="slice"),
             helper.make_node("Pad", ["sl", "pads"], ["y"], name="pad")]
    inits = {"sp": np.array([3, 5], np.int64), "st": np.array([0, 1], np.int64), "en": np.array([8, 100], np.int64),
             "ax": np.array([2, 3], np.int64), "steps": np.array([2, 2], np.int64),
             "pads": np.array([0, 0, 1, 0, 0, 0, 2, 1], np.int64)}
    res = _check(_conv_then(nodes, inits))
    assert res["ops"]["TRANSPOSE"] == 2  # the layout-following ops add none


def test_slice_negative_step_and_focus():
    nodes = [helper.make_node("Slice", ["c", "st", "en", "ax", "steps"], ["y"], name="rev")]
    inits = {"st": np.array([-1], np.int64), "en": np.array([-100], np.int64), "ax": np.array([3], np.int64),
             "steps": np.array([-1], np.int64)}
    _check(_conv_then(nodes, inits))
    # YOLOX's focus: four strided slices of the input, concatenated on channels
    sl = []
    inits = {}
    for k, (a, b) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
        inits[f"s{k}"] = np.array([a, b], np.int64)
        inits[f"e{k}"] = np.array([1000, 1000], np.int64)
        sl.append(helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "ax", "st2"], [f"f{k}"], name=f"f{k}"))
    inits.update({"ax": np.array([2, 3], np.int64), "st2": np.array([2, 2], np.int64), "w": _w(4, 12, 1, 1)})
    m = _model(sl + [helper.make_node("Concat", [f"f{k}" for k in range(4)], ["cat"], axis=1, name="cat"),
                     helper.make_node("Conv", ["cat", "w"], ["y"], name="conv")], inits, [1, 3, 8, 8], ["y"])
    _check(m)


def test_reshape_flatten_transpose_squeeze_need_the_onnx_layout():
    nodes = [helper.make_node("Reshape", ["c", "shape"], ["rs"], name="rs"),
             helper.make_node("Transpose", ["rs"], ["tr"], perm=[0, 2, 1], name="tr"),
             helper.make_node("Unsqueeze", ["tr", "ax0"], ["un"], name="un"),
             helper.make_node("Squeeze", ["un", "ax0"], ["sq"], name="sq"),
             helper.make_node("Flatten", ["sq"], ["y"], axis=1, name="fl")]
    inits = {"shape": np.array([1, 4, 64], np.int64), "ax0": np.array([0], np.int64)}
    _check(_conv_then(nodes, inits))


def test_transpose_nchw_to_nhwc_at_the_end_costs_nothing():
    m = _conv_then([helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1], name="tr")])
    res = _check(m)
    assert res["ops"] == {"TRANSPOSE": 1, "CONV_2D": 1}  # only the input's


@pytest.mark.parametrize("axis", [1, -1, 2])
def test_softmax_on_any_axis(axis):
    _check(_conv_then([_node("Softmax", ["c"], axis=axis)]))


def test_softmax_opset11_last_axis():
    m = _model([helper.make_node("Gemm", ["x", "w"], ["g"], transB=1, name="fc"),
                helper.make_node("Softmax", ["g"], ["y"], axis=1, name="sm")], {"w": _w(5, 6)}, [2, 6], ["y"], opset=11)
    _check(m)


def test_gemm_matmul_gather():
    m = _model([helper.make_node("Gemm", ["x", "w", "bias"], ["g"], transB=1, alpha=0.5, beta=2.0, name="fc"),
                helper.make_node("MatMul", ["g", "w2"], ["mm"], name="mm"),
                helper.make_node("Gather", ["mm", "idx"], ["y"], axis=1, name="ga")],
               {"w": _w(5, 6), "bias": _w(5), "w2": _w(5, 7), "idx": np.array([0, 3, -1], np.int64)}, [2, 6], ["y"])
    res = _check(m)
    assert res["ops"]["FULLY_CONNECTED"] == 2


def test_matmul_of_two_activations_and_rank3():
    m = _model([helper.make_node("MatMul", ["a", "b"], ["m"], name="bmm"),
                helper.make_node("MatMul", ["m", "w"], ["y"], name="fc3")], {"w": _w(5, 3)}, [],
               ["y"], inputs={"a": [2, 4, 6], "b": [2, 6, 5]})
    feeds = {"a": RNG.standard_normal((2, 4, 6)).astype(np.float32), "b": RNG.standard_normal((2, 6, 5)).astype(np.float32)}
    _check(m, feeds)


def test_constant_subgraphs_fold_away():
    """A Shape -> Gather -> Concat -> Reshape chain (PyTorch's flatten) is folded before lowering."""
    nodes = [helper.make_node("Shape", ["c"], ["sh"], name="shape"),
             helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0, name="g0"),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="u0"),
             helper.make_node("Concat", ["n1", "minus1"], ["shape2"], axis=0, name="cat"),
             helper.make_node("Reshape", ["c", "shape2"], ["y"], name="rs")]
    inits = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    res = _check(_conv_then(nodes, inits))
    assert res["folded"] >= 4 and set(res["ops"]) == {"TRANSPOSE", "CONV_2D", "RESHAPE"}


# -- layouts and names ------------------------------------------------------------------------------------
def test_transposes_only_at_the_boundaries_and_nhwc_io():
    nodes = [_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r"], ["a"], name="add"),
             helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="pool")]
    m = _conv_then(nodes, {"w2": _w(4, 4, 3, 3)})
    res = _check(m)
    assert res["ops"]["TRANSPOSE"] == 2
    assert res["ops"]["CONV_2D"] == 2 and "RELU" not in res["ops"]  # Relu fused into the first conv
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    nhwc = onnx_to_tflite_bytes(m, io_layout="nhwc")
    assert "TRANSPOSE" not in nhwc["ops"]
    got = _run_tflite(nhwc["data"], {"x": x.transpose(0, 2, 3, 1)})["y"]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1), atol=1e-4)
    meta = onnx_names(nhwc["data"])
    assert meta["inputs"]["x"] == {"onnx": "x", "perm": [0, 2, 3, 1]}
    assert meta["outputs"]["y"] == {"onnx": "y", "perm": [0, 2, 3, 1]}


def test_metadata_maps_tensors_back_to_onnx_names():
    m = _conv_then([_node("Relu", ["c"], ["r"]), _node("Sigmoid", ["r"])])
    res = onnx_to_tflite_bytes(m, source_sha256="abc")
    meta = onnx_names(res["data"])
    assert meta["schema"] == "edgesdk.tflite-onnx/1" and meta["source_sha256"] == "abc"
    onnx_of = {k: v["onnx"] for k, v in meta["tensors"].items()}
    assert onnx_of["x"] == "x" and onnx_of["y"] == "y" and onnx_of["r"] == "r"   # conv+relu fused: named r
    assert meta["tensors"]["r"]["perm"] == [0, 2, 3, 1]
    assert {"x/nhwc", "y"} <= set(onnx_of) and onnx_of["x/nhwc"] == "x"
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=res["data"])
    assert {t["name"] for t in it.get_tensor_details()} >= {"x", "r", "y"}


def test_input_shapes_fix_dynamic_dims():
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")], {"w": _w(4, 3, 3, 3)},
               ["N", 3, "H", "W"], ["y"])
    with pytest.raises(ConversionError, match=r"input 'x' has dynamic dims.*--input-shape x="):
        onnx_to_tflite_bytes(m)
    x = RNG.standard_normal((1, 3, 6, 10)).astype(np.float32)
    _check(m, {"x": x}, input_shapes={"x": (1, 3, 6, 10)})
    batch_only = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], {}, ["N", 3, 4, 4], ["y"])
    assert "dynamic batch fixed to 1" in onnx_to_tflite_bytes(batch_only)["notes"][0]


# -- errors ---------------------------------------------------------------------------------------------
def test_unsupported_op_is_one_error_naming_node_and_op(tmp_path):
    m = _conv_then([helper.make_node("Einsum", ["c"], ["y"], equation="nchw->nhwc", name="my_einsum")], opset=13)
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    out = tmp_path / "m.tflite"
    with pytest.raises(ConversionError, match=r"node 'my_einsum' \(Einsum\)"):
        convert(src, out)
    assert not out.exists()


def test_unsupported_attribute_names_it(tmp_path):
    m = _conv_then([_node("Resize", ["c", "", "scales"], mode="cubic")], {"scales": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(ConversionError, match=r"node 'resize' \(Resize\), attribute mode: mode 'cubic'"):
        onnx_to_tflite_bytes(m)
    m = _conv_then([_node("MaxPool", ["c"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)])
    with pytest.raises(ConversionError, match=r"\(MaxPool\), attribute ceil_mode"):
        onnx_to_tflite_bytes(m)


def test_cli_convert_and_its_errors(tmp_path, capsys):
    m = _conv_then([_node("Relu", ["c"])])
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    out = tmp_path / "m.tflite"
    code, stdout, stderr = run_cli(["convert", src, "-o", out, "--json", tmp_path / "r.json"], capsys)
    assert code == 0, stderr
    assert f"wrote {out} (tflite" in " ".join(stdout.split())
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["format"] == "tflite" and rec["details"]["ops"] == {"TRANSPOSE": 2, "CONV_2D": 1}
    from sdk.targets.tflite.tflgraph import read_metadata

    assert METADATA_KEY in read_metadata(out.read_bytes())
    bad = tmp_path / "bad.onnx"
    onnx.save(_conv_then([helper.make_node("Einsum", ["c"], ["y"], equation="nchw->nhwc", name="e1")]), str(bad))
    code, _, stderr = run_cli(["convert", bad, "-o", tmp_path / "bad.tflite"], capsys)
    assert code == 2 and stderr.startswith("error: node 'e1' (Einsum)") and "Traceback" not in stderr
    assert not (tmp_path / "bad.tflite").exists()
    code, _, stderr = run_cli(["convert", src, "-o", tmp_path / "x.tflite", "--option", "io_layout=nchw"], capsys)
    assert code == 2 and "io_layout" in stderr
    code, _, stderr = run_cli(["convert", src, "-o", tmp_path / "x.tflite", "--option", "colour=red"], capsys)
    assert code == 2 and "unknown --option colour" in stderr


def test_convert_options_reach_the_converter(tmp_path):
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], {"w": _w(4, 3, 1, 1)}, ["N", 3, "H", "W"], ["y"])
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    res = convert(src, tmp_path / "m.tflite", ConvertOptions(input_shapes={"x": (1, 3, 5, 7)}))
    assert res.format == "tflite" and res.details["bytes"] == (tmp_path / "m.tflite").stat().st_size
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(tmp_path / "m.tflite"))
    assert list(it.get_input_details()[0]["shape"]) == [1, 3, 5, 7]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_unrolled_and_stateless(direction):
    d = 2 if direction == "bidirectional" else 1
    hidden, width, steps = 5, 4, 6
    m = _model([helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction=direction,
                                 name="lstm")],
               {"W": _w(d, 4 * hidden, width), "R": _w(d, 4 * hidden, hidden), "B": _w(d, 8 * hidden)},
               [steps, 1, width], ["y"])
    res = _check(m)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in res["ops"] and res["ops"]["FULLY_CONNECTED"] == d * steps
    # a second invocation on another input gives that input's result: no state carried over
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=res["data"])
    it.allocate_tensors()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):
        x = RNG.standard_normal((steps, 1, width)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), sess.run(None, {"x": x})[0],
                                   atol=1e-5)
    # every tensor an op writes is read (or is an output): with XNNPACK and every tensor kept, as
    # ai-edge-quantizer calibrates, each one has data (the zero-state step's forget gate was an unread
    # SPLIT output, without data under XNNPACK: ddddocr-ocr's file failed there)
    it = Interpreter(model_content=res["data"], experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    ops = it._get_ops_details()
    read = {i for op in ops for i in op["inputs"]} | {d["index"] for d in it.get_output_details()}
    assert [o for op in ops for o in op["outputs"] if o not in read] == []
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    for detail in it.get_tensor_details():
        it.get_tensor(detail["index"])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_carries_a_state_in_and_out(direction):
    """A streaming LSTM (silero-vad's): initial_h / initial_c are graph inputs and Y_h / Y_c graph
    outputs, fed back on the next call; the TFLite file tracks onnxruntime over the stream."""
    d = 2 if direction == "bidirectional" else 1
    hidden, width, steps = 5, 4, 3
    m = _model([helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=hidden,
                                 direction=direction, name="lstm")],
               {"W": _w(d, 4 * hidden, width), "R": _w(d, 4 * hidden, hidden), "B": _w(d, 8 * hidden)},
               [steps, 1, width], ["y", "yh", "yc"],
               inputs={"x": [steps, 1, width], "h0": [d, 1, hidden], "c0": [d, 1, hidden]})
    res = onnx_to_tflite_bytes(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    h = c = np.zeros((d, 1, hidden), np.float32)
    th, tc = h, c
    for _ in range(4):
        x = RNG.standard_normal((steps, 1, width)).astype(np.float32)
        y, h, c = sess.run(None, {"x": x, "h0": h, "c0": c})
        got = _run_tflite(res["data"], {"x": x, "h0": th, "c0": tc})
        th, tc = got["yh"], got["yc"]
        for name, ref in (("y", y), ("yh", h), ("yc", c)):
            np.testing.assert_allclose(got[name], ref, atol=1e-5, err_msg=name)


def test_lstm_constant_initial_state_and_a_bad_one():
    hidden = 3
    h0 = RNG.standard_normal((1, 1, hidden)).astype(np.float32)
    m = _model([helper.make_node("LSTM", ["x", "W", "R", "", "", "h0"], ["y"], hidden_size=hidden, name="lstm_h0")],
               {"W": _w(1, 4 * hidden, 2), "R": _w(1, 4 * hidden, hidden), "h0": h0}, [4, 1, 2], ["y"])
    _check(m, atol=1e-5)
    bad = _model([helper.make_node("LSTM", ["x", "W", "R", "", "", "h0"], ["y"], hidden_size=hidden, name="lstm_h0")],
                 {"W": _w(1, 4 * hidden, 2), "R": _w(1, 4 * hidden, hidden)}, [4, 1, 2], ["y"],
                 inputs={"x": [4, 1, 2], "h0": [1, 1, hidden]})
    bad.graph.input[1].type.tensor_type.shape.dim[2].dim_value = hidden + 1   # declared wrong after the model was made
    with pytest.raises(ConversionError, match=r"node 'lstm_h0' \(LSTM\), attribute initial_h: an initial state of shape"):
        onnx_to_tflite_bytes(bad)


def test_signature_only_when_asked(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    m = _conv_then([_node("Relu", ["c"])])
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    convert(src, tmp_path / "plain.tflite")
    assert Interpreter(model_path=str(tmp_path / "plain.tflite")).get_signature_list() == {}
    convert(src, tmp_path / "sig.tflite", ConvertOptions(extra={"signature": "serving_default"}))
    sigs = Interpreter(model_path=str(tmp_path / "sig.tflite")).get_signature_list()
    assert sigs == {"serving_default": {"inputs": ["x"], "outputs": ["y"]}}


def test_input_values_resolve_the_ifs_before_conversion(tmp_path):
    """``sdk convert model.onnx -o m.tflite --input-value sr=16000``: the If the rate decides is
    replaced by its branch (as ``-o flat.onnx`` writes it), the rate is no input of the file, and
    the outputs equal onnxruntime's on the original model with that rate."""
    from tests.controlflow import if_rate_model

    src = if_rate_model(tmp_path / "if_rate.onnx")
    shapes = {"x": (1, 4), "state": (2, 1, 3)}
    with pytest.raises(ConversionError, match=r"node 'If_rate' \(If\): control flow"):
        convert(src, tmp_path / "no.tflite", ConvertOptions(input_shapes=shapes))
    res = convert(src, tmp_path / "m.tflite", ConvertOptions(input_shapes=shapes, input_values=["sr=16000"]))
    assert any("sr=16000 chooses" in n for n in res.notes) and res.details["specialized"]["values"] == {"sr": 16000}
    feeds = {"x": RNG.standard_normal((1, 4)).astype(np.float32), "state": RNG.standard_normal((2, 1, 3)).astype(np.float32)}
    got = _run_tflite((tmp_path / "m.tflite").read_bytes(), feeds)
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    want = dict(zip(["y", "stateN"], sess.run(None, {**feeds, "sr": np.array(16000, np.int64)})))
    assert set(got) == {"y", "stateN"}
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-5, err_msg=k)


# -- transformer blocks: GELU written out, LayerNormalization, a QDQ source ----------------------------
def _gelu_nodes(variant: str, x: str = "h", out: str = "y") -> List:
    """The exact GELU as exporters write it, in the three orders the preparation recognises."""
    if variant == "div_half_then_x":          # PyTorch's: x / sqrt2, erf, +1, * 0.5, * x
        return [_node("Div", [x, "sqrt2"], ["t"]), _node("Erf", ["t"], ["e"]), _node("Add", ["e", "one"], ["a"]),
                helper.make_node("Mul", ["half", "a"], ["m"], name="m1"), helper.make_node("Mul", [x, "m"], [out], name="m2")]
    if variant == "mul_x_then_half":          # x * (1/sqrt2), erf, +1, * x, * 0.5
        return [_node("Mul", [x, "inv_sqrt2"], ["t"]), _node("Erf", ["t"], ["e"]), _node("Add", ["one", "e"], ["a"]),
                helper.make_node("Mul", ["a", x], ["m"], name="m1"), helper.make_node("Mul", ["m", "half"], [out], name="m2")]
    return [_node("Div", [x, "sqrt2"], ["t"]), _node("Erf", ["t"], ["e"]), _node("Add", ["e", "one"], ["a"]),  # (x*0.5)*(1+erf)
            helper.make_node("Mul", [x, "half"], ["xh"], name="xh"), helper.make_node("Mul", ["xh", "a"], [out], name="m1")]


GELU_CONSTS = {"sqrt2": np.array(np.sqrt(2), np.float32), "inv_sqrt2": np.array(np.sqrt(0.5), np.float32),
               "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)}


@pytest.mark.parametrize("variant", ["div_half_then_x", "mul_x_then_half", "x_half_first"])
def test_exact_gelu_written_out_becomes_tflite_gelu(variant):
    """TFLite has no Erf: x * 0.5 * (1 + Erf(x / sqrt 2)) becomes its GELU builtin (the Whisper
    encoder's form, which made smart-turn-v3 unconvertible), equal to onnxruntime's Erf chain."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc")] + _gelu_nodes(variant)
    m = _model(nodes, {"w": _w(16, 24), **GELU_CONSTS}, [1, 5, 16], ["y"])
    res = _check(m, atol=1e-5)
    assert res["ops"].get("GELU") == 1 and "DIV" not in res["ops"] and "MUL" not in res["ops"], res["ops"]
    assert any("1 exact GELU" in n for n in res["notes"])


def test_a_gelu_lookalike_is_not_fused():
    """x / 2 (not sqrt 2) through Erf is not a GELU: it stays, and Erf is the one error."""
    consts = {**GELU_CONSTS, "sqrt2": np.array(2.0, np.float32)}
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc")] + _gelu_nodes("div_half_then_x"),
               {"w": _w(16, 24), **consts}, [1, 5, 16], ["y"])
    with pytest.raises(ConversionError, match=r"\(Erf\): no TFLite builtin"):
        onnx_to_tflite_bytes(m)


@pytest.mark.parametrize("form", ["written out", "hardsigmoid"])
def test_hardswish_in_onnx_ops_becomes_one_hard_swish(form):
    """paddle2onnx's x * clip(x + 3, 0, 6) / 6 and x * HardSigmoid(x) (alpha 1/6, beta 0.5; PyTorch
    before opset 14, the quantizer's prepared graph) become one HARD_SWISH, equal to onnxruntime's."""
    n = helper.make_node
    if form == "written out":
        hs = [n("Add", ["h", "three"], ["p"], name="add3"), n("Clip", ["p", "zero", "six"], ["c"], name="clip"),
              n("Mul", ["h", "c"], ["m"], name="mul"), n("Div", ["m", "six"], ["y"], name="div6")]
    else:
        hs = [n("HardSigmoid", ["h"], ["s"], name="hsig", alpha=1.0 / 6.0, beta=0.5), n("Mul", ["h", "s"], ["y"], name="mul")]
    consts = {"w": _w(16, 24) * 8, "three": np.array(3.0, np.float32), "zero": np.array(0.0, np.float32),
              "six": np.array(6.0, np.float32)}
    m = _model([n("MatMul", ["x", "w"], ["h"], name="fc")] + hs, consts, [1, 5, 16], ["y"])
    res = _check(m, atol=1e-5)
    assert res["ops"].get("HARD_SWISH") == 1 and set(res["ops"]) == {"FULLY_CONNECTED", "HARD_SWISH"}, res["ops"]
    assert any("1 hard-swish(es)" in note for note in res["notes"])


def test_onnx_gelu_op_and_its_tanh_form():
    for approximate in ("none", "tanh"):
        m = _model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                    helper.make_node("Gelu", ["h"], ["y"], name="gelu", approximate=approximate)],
                   {"w": _w(16, 24)}, [1, 5, 16], ["y"], opset=20)
        assert _check(m, atol=1e-5)["ops"]["GELU"] == 1


def test_layer_normalization_over_the_last_axis():
    """LayerNormalization (opset 17) as TensorFlow writes a layer norm: MEAN, SUB, MUL, MEAN, ADD,
    RSQRT, MUL, MUL, ADD; equal to onnxruntime's; without a bias; over another axis one error."""
    ln = helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], name="ln", axis=-1, epsilon=1e-5)
    inits = {"w": _w(16, 24), "gamma": RNG.uniform(0.5, 1.5, 24).astype(np.float32), "beta": _w(24)}
    res = _check(_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), ln], inits, [1, 5, 16], ["y"],
                        opset=17), atol=1e-5)
    assert res["ops"]["RSQRT"] == 1 and res["ops"]["MEAN"] == 2
    no_bias = helper.make_node("LayerNormalization", ["h", "gamma"], ["y"], name="ln", axis=2)
    _check(_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), no_bias],
                  {k: v for k, v in inits.items() if k != "beta"}, [1, 5, 16], ["y"], opset=17), atol=1e-5)
    other = helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], name="ln_mid", axis=1)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), other],
               {**inits, "gamma": np.ones((5, 24), np.float32), "beta": np.zeros((5, 24), np.float32)},
               [1, 5, 16], ["y"], opset=17)
    with pytest.raises(ConversionError, match=r"node 'ln_mid' \(LayerNormalization\).*axis"):
        onnx_to_tflite_bytes(m)


def test_a_qdq_source_keeps_its_fake_quantization_in_a_float_file():
    """A QDQ model converted without --int8: each activation Q/DQ pair becomes QUANTIZE -> DEQUANTIZE,
    so the float file computes what the QDQ model computes (before: identities, the quantization lost)."""
    s_x, s_h = np.array(0.05, np.float32), np.array(0.2, np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
             helper.make_node("MatMul", ["xd", "w"], ["h"], name="fc"),
             helper.make_node("QuantizeLinear", ["h", "sh", "zh"], ["hq"], name="qh"),
             helper.make_node("DequantizeLinear", ["hq", "sh", "zh"], ["y"], name="dqh")]
    inits = {"w": _w(16, 24), "sx": s_x, "zx": np.array(128, np.uint8), "sh": s_h, "zh": np.array(0, np.int8)}
    m = _model(nodes, inits, [1, 5, 16], ["y"])
    x = (RNG.standard_normal((1, 5, 16)) * 2).astype(np.float32)
    res = _check(m, {"x": x}, atol=float(s_h) * 1.01)        # at most one step where a tie rounds the other way
    assert res["ops"]["QUANTIZE"] == 2 and res["ops"]["DEQUANTIZE"] == 2
    assert any("2 activation QuantizeLinear/DequantizeLinear pair(s)" in n for n in res["notes"])
    got = _run_tflite(res["data"], {"x": x})["y"]
    assert np.allclose(np.round(got / s_h), got / s_h, atol=1e-3)   # the output is on the int8 grid


def _ort_qdq(tmp_path, m: onnx.ModelProto, x_shape: Sequence[int]) -> onnx.ModelProto:
    """``m`` quantized by onnxruntime's own ``quantize_static`` (QDQ, uint8 activations, per-channel
    int8 weights, MatMuls only, as transformer models are often shipped: smart-turn-v3's form)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.data = iter([{"x": rng.standard_normal(x_shape).astype(np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.data, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(m, str(src))
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    return onnx.load(str(dst))


def test_a_qdq_source_converts_to_int8_at_its_own_scales(tmp_path, capsys):
    """``sdk convert qdq.onnx --int8`` without --calib: a model quantized elsewhere (onnxruntime's
    quantize_static) is written full-integer at its own scales. A tensor the source leaves float
    (the bias Add after a quantized MatMul) stays float: the writer gave it an int8 range of its own,
    which took smart-turn-v3's file from 0.98 to 0.90 task agreement with its QDQ model. A float
    model's --int8 without --calib is still one line."""
    from sdk.targets.tflite.reader import read_tflite

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["mm1"], name="fc1"),
             helper.make_node("Add", ["mm1", "b1"], ["h"], name="bias1")] + _gelu_nodes("div_half_then_x", "h", "g") + \
        [helper.make_node("MatMul", ["g", "w2"], ["mm2"], name="fc2"),
         helper.make_node("Add", ["mm2", "b2"], ["y"], name="bias2")]
    inits = {"w1": _w(16, 32), "b1": _w(32, scale=2.0), "w2": _w(32, 8), "b2": _w(8), **GELU_CONSTS}
    f = _model(nodes, inits, [1, 5, 16], ["y"])
    q = _ort_qdq(tmp_path, f, (1, 5, 16))
    quantized = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert "mm1" in quantized and "h" not in quantized, sorted(quantized)     # the source's choice
    onnx.save(q, str(tmp_path / "q.onnx"))
    out = tmp_path / "q8.tflite"
    code, stdout, stderr = run_cli(["convert", tmp_path / "q.onnx", "--int8", "-o", out], capsys)
    assert code == 0, stderr
    assert "the source's own quantization" in stdout and "tflite-int8" in stdout
    g, _ = read_tflite(out.read_bytes())
    by_onnx = {t.onnx: t for t in g.tensors if t.onnx}
    dtypes = {g.tensors[op.outputs[0]].dtype for op in g.ops if op.code == "FULLY_CONNECTED"}
    assert dtypes == {"int8"} and by_onnx["h"].dtype == "float32", (dtypes, by_onnx["h"].dtype)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])
    xs = np.random.default_rng(2).standard_normal((8, 1, 5, 16)).astype(np.float32)
    want = np.stack([sess.run(None, {"x": x})[0] for x in xs]).ravel()
    got = np.stack([_run_tflite(out.read_bytes(), {"x": x})["y"] for x in xs]).ravel()
    cos = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos > 0.999, cos
    onnx.save(f, str(tmp_path / "f.onnx"))
    code, _, stderr = run_cli(["convert", tmp_path / "f.onnx", "--int8", "-o", tmp_path / "f8.tflite"], capsys)
    assert code == 2 and "--int8 needs --calib" in stderr and not (tmp_path / "f8.tflite").exists()
