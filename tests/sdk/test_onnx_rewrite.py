"""The exact float rewrites (``sdk/formats/onnx_rewrite.py``): a written-out hard-swish as
``x * HardSigmoid(x)``, a scalar affine folded into the Conv or BatchNormalization before it or into
the unpadded Conv after it, per-channel affines folded into the ConvTranspose before them; outputs
equal ONNX Runtime's on the original; chains they must not touch are left alone."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.formats.onnx_rewrite import (fold_affine_into_next_conv, fold_into_conv_transpose, fold_scalar_affine,
                                      fuse_hardswish, simplify)


def _run(proto, x):
    import onnxruntime as ort

    s = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _model(nodes, inits, outputs=("y",), opset=13):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, None, None, None]) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def _lcnet_block(clip_as_attrs=False, sixth="div", order="mul_first"):
    """paddle2onnx's PP-LCNetV3 unit: Conv -> BN -> x*s+a -> x*clip(x+3,0,6)/6 -> x*s2+a2 -> Conv."""
    rng = np.random.default_rng(0)
    inits = [_const("w1", rng.standard_normal((4, 4, 3, 3)) * 0.3), _const("b1", rng.standard_normal(4)),
             _const("bn_s", rng.uniform(0.5, 1.5, 4)), _const("bn_b", rng.standard_normal(4)),
             _const("bn_m", rng.standard_normal(4) * 0.1), _const("bn_v", rng.uniform(0.5, 2, 4)),
             _const("s", [1.7]), _const("a", [-0.4]), _const("three", [3.0]), _const("six", [6.0]),
             _const("zero", 0.0), _const("sixf", 6.0), _const("sixth", [1 / 6]),
             _const("s2", [0.8]), _const("a2", [0.25]), _const("w2", rng.standard_normal((4, 4, 1, 1)) * 0.3)]
    clip = (helper.make_node("Clip", ["p"], ["c"], min=0.0, max=6.0) if clip_as_attrs
            else helper.make_node("Clip", ["p", "zero", "sixf"], ["c"]))
    scale = (lambda i, o: helper.make_node("Div", [i, "six"], [o])) if sixth == "div" else \
        (lambda i, o: helper.make_node("Mul", ["sixth", i], [o]))
    hs = [helper.make_node("Mul", ["z", "c"], ["m"]), scale("m", "h")] if order == "mul_first" else \
        [scale("c", "m"), helper.make_node("Mul", ["m", "z"], ["h"])]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"]),
             helper.make_node("Mul", ["n", "s"], ["ms"]), helper.make_node("Add", ["ms", "a"], ["z"]),
             helper.make_node("Add", ["z", "three"], ["p"]), clip, *hs,
             helper.make_node("Mul", ["h", "s2"], ["h2"]), helper.make_node("Sub", ["h2", "a2"], ["h3"]),
             helper.make_node("Conv", ["h3", "w2"], ["y"])]
    return _model(nodes, inits, opset=10 if clip_as_attrs else 13)


@pytest.mark.parametrize("clip_as_attrs,sixth,order", [(False, "div", "mul_first"), (True, "div", "mul_first"),
                                                       (False, "mul", "scale_first")])
def test_lcnet_block_rewritten_and_equal(clip_as_attrs, sixth, order):
    m = _lcnet_block(clip_as_attrs, sixth, order)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32) * 3
    out, done = simplify(m)
    assert done == {"affine_folded": 1, "hardswish_fused": 1, "affine_folded_forward": 1}
    ops = [n.op_type for n in out.graph.node]
    # the affine went into the BN (folded into the conv later by the quantizer); the second one
    # follows the hard-swish's Mul, not a Conv or BN: it went into the 1x1 Conv after it, which
    # now reads the hard-swish
    assert ops == ["Conv", "BatchNormalization", "HardSigmoid", "Mul", "Conv"], ops
    assert out.graph.node[1].output[0] == "z" and out.graph.node[3].output[0] == "h"   # names kept
    assert out.graph.node[4].input[0] == "h" and out.graph.node[4].output[0] == "y"
    onnx.checker.check_model(out)
    np.testing.assert_allclose(_run(out, x)[0], _run(m, x)[0], rtol=1e-5, atol=1e-5)
    assert not {"s", "a", "three", "bn_s", "bn_b", "s2", "a2", "w2"} & {t.name for t in out.graph.initializer}


def test_hardswish_as_one_op_for_a_target_with_the_kernel():
    """``hardswish_op``: both forms (written out; x * HardSigmoid(x), as PyTorch exports before opset
    14) become one HardSwish with the chain's output name, equal to the original on onnxruntime."""
    m = onnx.version_converter.convert_version(_lcnet_block(), 14)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32) * 3
    out, done = simplify(m, hardswish_op=True)
    assert done == {"affine_folded": 1, "hardswish_op": 1, "affine_folded_forward": 1}
    ops = [n.op_type for n in out.graph.node]
    assert ops == ["Conv", "BatchNormalization", "HardSwish", "Conv"], ops
    assert out.graph.node[2].output[0] == "h"
    np.testing.assert_allclose(_run(out, x)[0], _run(m, x)[0], rtol=1e-5, atol=1e-5)
    hsig, n = fuse_hardswish(m)                          # the x * HardSigmoid(x) form ...
    assert n == 1
    again, n = fuse_hardswish(hsig, as_op=True)          # ... also becomes one HardSwish
    assert n == 1 and [o.op_type for o in again.graph.node].count("HardSwish") == 1
    assert "HardSigmoid" not in [o.op_type for o in again.graph.node]
    np.testing.assert_allclose(_run(again, x)[0], _run(m, x)[0], rtol=1e-5, atol=1e-5)


def test_affine_after_conv_folds_into_weights_and_bias():
    rng = np.random.default_rng(2)
    m = _model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["k", "c"], ["d"]),
                helper.make_node("Div", ["d", "two"], ["e"]), helper.make_node("Add", ["e", "a"], ["y"])],
               [_const("w", rng.standard_normal((3, 4, 1, 1))), _const("k", [3.0]), _const("two", [2.0]),
                _const("a", [0.5])])
    out, n = fold_scalar_affine(m)
    assert n == 1 and [x.op_type for x in out.graph.node] == ["Conv"] and out.graph.node[0].output[0] == "y"
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x)[0], _run(m, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("group,kernel", [(1, 1), (1, 3), (2, 1), (4, 3)])
def test_affine_before_an_unpadded_conv_folds_into_it(group, kernel):
    """``conv(x * s + a)`` (Mul, Div, Add, Sub by one-element constants) becomes ``conv'(x)`` with
    ``s W`` and ``B + a sum(W)``: plain, grouped and depthwise, with and without a bias."""
    rng = np.random.default_rng(5)
    for bias in (True, False):
        w = _const("w", rng.standard_normal((4, 4 // group, kernel, kernel)))
        inits = [w, _const("k", [1.7]), _const("two", [2.0]), _const("a", [0.3]), _const("c", [-0.9])]
        conv_in = ["e", "w"] + (["b"] if bias else [])
        inits += [_const("b", rng.standard_normal(4))] if bias else []
        m = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["k", "r"], ["p"]),
                    helper.make_node("Div", ["p", "two"], ["q"]), helper.make_node("Add", ["q", "a"], ["d"]),
                    helper.make_node("Sub", ["d", "c"], ["e"]),
                    helper.make_node("Conv", conv_in, ["y"], group=group, strides=[2, 2])], inits)
        out, n = fold_affine_into_next_conv(m)
        assert n == 1 and [x.op_type for x in out.graph.node] == ["Relu", "Conv"]
        assert out.graph.node[1].input[0] == "r" and out.graph.node[1].output[0] == "y"
        x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
        np.testing.assert_allclose(_run(out, x)[0], _run(m, x)[0], rtol=1e-5, atol=1e-5)


def test_what_the_fold_into_the_next_conv_leaves():
    """A padded Conv (zeros would pad ``x * s + a``, not ``x``), an affine another node also reads,
    a per-channel Mul, two convs reading the affine: nothing is folded forward."""
    rng = np.random.default_rng(6)
    w = _const("w", rng.standard_normal((4, 4, 3, 3)))
    w1 = _const("w1", rng.standard_normal((4, 4, 1, 1)))
    cases = [
        ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "s"], ["m"]),
          helper.make_node("Conv", ["m", "w"], ["y"], pads=[1, 1, 1, 1])], [w, _const("s", [2.0])], ("y",)),
        ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "s"], ["m"]),
          helper.make_node("Conv", ["m", "w"], ["y"], auto_pad="SAME_UPPER")], [w, _const("s", [2.0])], ("y",)),
        ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "s"], ["m"]),
          helper.make_node("Conv", ["m", "w1"], ["y"]), helper.make_node("Relu", ["m"], ["z"])],
         [w1, _const("s", [2.0])], ("y", "z")),
        ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "pc"], ["m"]),
          helper.make_node("Conv", ["m", "w1"], ["y"])], [w1, _const("pc", rng.standard_normal((1, 4, 1, 1)))], ("y",)),
        ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "s"], ["m"]),
          helper.make_node("Conv", ["m", "w1"], ["y"]), helper.make_node("Conv", ["m", "w1"], ["z"])],
         [w1, _const("s", [2.0])], ("y", "z")),
    ]
    for nodes, inits, outputs in cases:
        m = _model(nodes, inits, outputs)
        out, n = fold_affine_into_next_conv(m)
        assert n == 0 and [x.op_type for x in out.graph.node] == [x.op_type for x in nodes]
        assert simplify(m)[1] == {}


def _conv_transpose_model(after, inits_after, kernel=2, bias=True, outputs=("y",)):
    rng = np.random.default_rng(8)
    inits = [_const("wt", rng.standard_normal((4, 3, kernel, kernel)) * 0.5)] + inits_after
    ins = ["x", "wt"] + (["bt"] if bias else [])
    inits += [_const("bt", rng.standard_normal(3))] if bias else []
    return _model([helper.make_node("ConvTranspose", ins, ["t"], strides=[2, 2]), *after], inits, outputs)


@pytest.mark.parametrize("bias", [True, False])
def test_bias_add_and_batchnorm_fold_into_the_conv_transpose(bias):
    """paddle2onnx's ConvTranspose -> Add(bias) -> BatchNormalization (DB text detectors' head), and a
    per-channel Mul and a scalar Sub after it: one ConvTranspose, same outputs."""
    rng = np.random.default_rng(9)
    after = [helper.make_node("Add", ["t", "cb"], ["u"]),
             helper.make_node("BatchNormalization", ["u", "g", "be", "mu", "var"], ["v"], epsilon=1e-3),
             helper.make_node("Mul", ["v", "pc"], ["w"]), helper.make_node("Sub", ["w", "one"], ["y"])]
    inits = [_const("cb", rng.standard_normal((3, 1, 1))), _const("g", rng.uniform(0.5, 1.5, 3)),
             _const("be", rng.standard_normal(3)), _const("mu", rng.standard_normal(3) * 0.1),
             _const("var", rng.uniform(0.5, 2, 3)), _const("pc", rng.standard_normal((1, 3, 1, 1))),
             _const("one", [1.0])]
    m = _conv_transpose_model(after, inits, bias=bias)
    out, n = fold_into_conv_transpose(m)
    assert n == 1 and [x.op_type for x in out.graph.node] == ["ConvTranspose"] and out.graph.node[0].output[0] == "y"
    assert simplify(m)[1] == {"conv_transpose_folded": 1}
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x)[0], _run(m, x)[0], rtol=1e-5, atol=1e-5)


def test_what_the_conv_transpose_fold_leaves():
    """An Add of a (C,) constant (it broadcasts over the width, not the channels), a constant on the
    left of a Sub, an output another node also reads, a grouped ConvTranspose: nothing is folded."""
    rng = np.random.default_rng(10)
    cases = [
        ([helper.make_node("Add", ["t", "row"], ["y"])], [_const("row", rng.standard_normal(3))], ("y",)),
        ([helper.make_node("Sub", ["k", "t"], ["y"])], [_const("k", [1.0])], ("y",)),
        ([helper.make_node("Add", ["t", "cb"], ["y"]), helper.make_node("Relu", ["t"], ["z"])],
         [_const("cb", rng.standard_normal((1, 3, 1, 1)))], ("y", "z")),
    ]
    for after, inits, outputs in cases:
        m = _conv_transpose_model(after, inits, outputs=outputs)
        out, n = fold_into_conv_transpose(m)
        assert n == 0 and [x.op_type for x in out.graph.node] == ["ConvTranspose"] + [x.op_type for x in after]
    g2 = helper.make_graph([helper.make_node("ConvTranspose", ["x", "wg"], ["t"], strides=[2, 2], group=2),
                            helper.make_node("Add", ["t", "cb"], ["y"])], "g",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, None, None])],
                           [_const("wg", rng.standard_normal((4, 1, 2, 2))), _const("cb", rng.standard_normal((1, 2, 1, 1)))])
    assert fold_into_conv_transpose(helper.make_model(g2))[1] == 0


def test_what_is_not_exact_or_not_alone_is_left():
    """A per-channel Mul, a constant on the left of a Sub, a tensor another node also reads, a
    graph output in the middle of a chain, a Clip to 5: nothing is rewritten."""
    rng = np.random.default_rng(3)
    w = _const("w", rng.standard_normal((4, 4, 1, 1)))
    cases = [
        ([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "pc"], ["y"])],
         [w, _const("pc", rng.standard_normal((1, 4, 1, 1)))], ("y",)),
        ([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sub", ["a", "c"], ["y"])],
         [w, _const("a", [1.0])], ("y",)),
        ([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "s"], ["y"]),
          helper.make_node("Relu", ["c"], ["r"])], [w, _const("s", [2.0])], ("y", "r")),
        ([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "s"], ["y"])],
         [w, _const("s", [2.0])], ("y", "c")),
        ([helper.make_node("Add", ["x", "three"], ["p"]), helper.make_node("Clip", ["p", "zero", "five"], ["c"]),
          helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])],
         [_const("three", [3.0]), _const("zero", 0.0), _const("five", 5.0), _const("six", [6.0])], ("y",)),
    ]
    for nodes, inits, outputs in cases:
        m = _model(nodes, inits, outputs)
        out, done = simplify(m)
        assert done == {} and out is m, [n.op_type for n in nodes]
        assert fuse_hardswish(m)[1] == 0


def test_quantize_reports_and_says_the_rewrites(tmp_path, capsys):
    """The quantizer prepares the model with the rewrites: the report counts them, the CLI says so,
    and the INT8 model keeps FP32's output within INT8 error."""
    from tests.clirun import run_cli

    m = _lcnet_block()
    path = tmp_path / "lcnet.onnx"
    onnx.save(m, path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(4).standard_normal((24, 1, 4, 6, 6)).astype(np.float32))
    rc, out, err = run_cli(["quantize", str(path), "--calib", str(calib), "-o", str(tmp_path / "q.onnx"),
                            "--no-speed-check", "--report", str(tmp_path / "r.json")], capsys)
    assert rc == 0, err
    text = " ".join(out.split())
    assert "float graph rewritten (exact; FP32 is judged with it, INT8 timed against it and the model as given): 1 scalar affines folded into the " \
           "layer before, 1 written-out hard-swish as x*HardSigmoid(x), 1 scalar affines folded into the " \
           "unpadded conv after" in text, out
    import json

    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["model"]["float_rewrites"] == {"affine_folded": 1, "hardswish_fused": 1, "affine_folded_forward": 1}


#: corpus models and the rewrites each takes (PP-LCNetV3: 28 affines after a conv, 24/28 hard-swishes,
#: 10/12 affines before an unpadded conv; ppocr-v4-det's head: 2 ConvTransposes with a bias Add, one
#: also with a BatchNormalization; layout-cdla: hard-swishes only)
CORPUS_REWRITES = {
    "ppocr-v4-det": {"affine_folded": 28, "conv_transpose_folded": 2, "hardswish_fused": 24,
                     "affine_folded_forward": 10},
    "ppocr-v4-rec": {"affine_folded": 28, "hardswish_fused": 28, "affine_folded_forward": 12},
    "layout-cdla": {"hardswish_fused": 94},
}


@pytest.mark.parametrize("name", sorted(CORPUS_REWRITES))
def test_corpus_models_rewritten_and_equal(name):
    """The real exports: each rewrite found as many times as the model holds the pattern, and the
    rewritten graph's outputs equal onnxruntime's on the file as shipped (two corpus inputs)."""
    import onnxruntime as ort

    from sdk import corpus

    path = corpus.fetch([name])[name]
    m = onnx.load(str(path))
    out, done = simplify(m)
    assert done == CORPUS_REWRITES[name]
    assert len(out.graph.node) < len(m.graph.node)
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in corpus.sample_inputs(name, 2, seed=4):
        for want, got in zip(a.run(None, feed), b.run(None, feed)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
