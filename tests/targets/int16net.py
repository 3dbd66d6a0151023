"""A small ONNX graph with one node per op that LiteRT runs as 16x8 (tests/targets/test_tflite_int16.py)."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.modelzoo import save_checked
R = np.random.default_rng(3)
def _w(*s, scale=0.3):
    return (R.standard_normal(s) * scale).astype(np.float32)


def net(path):
    inits = {"w1": _w(8, 3, 3, 3), "b1": _w(8), "dw": _w(8, 1, 3, 3), "db": _w(8), "w3": _w(8, 8, 1, 1),
             "wt": _w(8, 4, 3, 3), "bt": _w(4), "wf": _w(10, 4 * 4 * 4), "bf": _w(10),
             "shape": np.array([1, 4 * 4 * 4], np.int64), "c": _w(1, 8, 1, 1),
             "starts": np.array([0, 0], np.int64), "ends": np.array([12, 12], np.int64), "axes": np.array([2, 3], np.int64),
             "split": np.array([8, 8], np.int64), "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
             "scales": np.array([1, 1, 2, 2], np.float32), "rax": np.array([2, 3], np.int64), "pv": np.array(0.5, np.float32), "bshape": np.array([1, 8, 144], np.int64),
             "gidx": np.array([0, 2, 4, 6], np.int64), "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        N("Relu", ["c1"], ["r1"], name="relu1"),
        N("Conv", ["r1", "dw", "db"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dw"),
        N("Clip", ["c2", "lo", "hi"], ["r6"], name="relu6"),
        N("Conv", ["r1", "w3"], ["c3"], name="conv3"),
        N("Sigmoid", ["c3"], ["s3"], name="sig3"),
        N("Mul", ["r6", "s3"], ["m"], name="mul"),
        N("Add", ["m", "c"], ["a"], name="add"),
        N("Sub", ["a", "c3"], ["sb"], name="sub"),
        N("Tanh", ["sb"], ["th"], name="tanh"),
        N("LeakyRelu", ["sb"], ["lr"], alpha=0.1, name="leaky"),
        N("Max", ["th", "lr"], ["mx"], name="max"),
        N("Min", ["th", "lr"], ["mn"], name="min"),
        N("Concat", ["mx", "mn"], ["cat"], axis=1, name="cat"),
        N("Relu", ["cat"], ["catr"], name="relu_cat"),
        N("Split", ["catr", "split"], ["sp1", "sp2"], axis=1, name="split"),
        N("Clip", ["sp1", "lo", "hi"], ["sp16"], name="relu6_split"),
        N("Add", ["sp16", "sp2"], ["spa"], name="addsplit"),
        N("MaxPool", ["spa"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="maxpool"),
        N("AveragePool", ["spa"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], name="avgpool"),
        N("Add", ["p1", "p2"], ["p"], name="addpool"),
        N("Pad", ["p", "pads", "pv"], ["pdv"], name="padv2"),
        N("Pad", ["p", "pads"], ["pz"], name="pad"),
        N("Add", ["pdv", "pz"], ["pd"], name="addpad"),
        N("Resize", ["pd", "", "scales"], ["rs"], mode="nearest", name="resize_n"),
        N("Resize", ["pd", "", "scales"], ["rb"], mode="linear", coordinate_transformation_mode="half_pixel", name="resize_b"),
        N("Add", ["rs", "rb"], ["rsum"], name="addresize"),
        N("Slice", ["rsum", "starts", "ends", "axes"], ["sl"], name="slice"),
        # kernel 3 > stride 2 (overlapping blocks): it stays TRANSPOSE_CONV (kernel == stride does not)
        N("ConvTranspose", ["sl", "wt", "bt"], ["ct"], strides=[2, 2], pads=[0, 0, 1, 1], name="convt"),
        N("ReduceMean", ["ct"], ["rm"], axes=[2, 3], keepdims=1, name="mean"),
        N("Mul", ["ct", "rm"], ["ctm"], name="mulmean"),
        N("MaxPool", ["ctm"], ["q"], kernel_shape=[6, 6], strides=[6, 6], name="pool2"),
        N("Reshape", ["q", "shape"], ["flat"], name="flat"),
        N("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="fc"),
        N("Reshape", ["sl", "bshape"], ["seq"], name="seq"),
        N("Transpose", ["seq"], ["seqt"], perm=[0, 2, 1], name="seqt"),
        N("MatMul", ["seq", "seqt"], ["gram"], name="gram"),
        N("ReduceMax", ["gram"], ["gmax"], axes=[2], keepdims=0, name="rmax"),
        N("Gather", ["gmax", "gidx"], ["gsel"], axis=1, name="gather"),
        N("Concat", ["logits", "gsel"], ["all"], axis=1, name="cat_out"),
        N("Softmax", ["all"], ["prob"], axis=1, name="softmax"),
    ]
    g = helper.make_graph(nodes, "n16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 14]),
                           helper.make_tensor_value_info("all", TensorProto.FLOAT, [1, 14])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return save_checked(m, path)
