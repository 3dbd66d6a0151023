"""The ONNX specialize pass (sdk/formats/onnx_specialize.py): Ifs decided by input values and by
static shapes are inlined, the result passes onnx.checker and computes what the original computes
(onnxruntime, same inputs), and the MAC counter counts the graph that runs. Hand counts: the
nested-If model in tests/controlflow.py and the real silero-vad from the corpus."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk import corpus
from sdk.errors import InputError
from sdk.formats.onnx_specialize import NUMPY_OPS, _reference, eval_node, specialize
from sdk.model import Model
from tests.controlflow import nested_if_model


def _ort(proto_or_path, feeds):
    import onnxruntime as ort

    src = proto_or_path.SerializeToString() if isinstance(proto_or_path, onnx.ModelProto) else str(proto_or_path)
    s = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    names = {i.name for i in s.get_inputs()}
    return s.run(None, {k: v for k, v in feeds.items() if k in names})


def _ifs(graph):
    return [n for n in graph.node if n.op_type == "If"]


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    return nested_if_model(tmp_path_factory.mktemp("spec") / "nested.onnx")


# hand counts from the model's docstring: then 32*n + (inner then 16 | inner else 48*n), else 8*n
@pytest.mark.parametrize("rows,sr,macs,inner", [(1, 16000, 32 + 16, "then"), (3, 16000, 96 + 144, "else"),
                                                (1, 8000, 8, None), (3, 8000, 24, None)])
def test_nested_ifs_resolve_by_value_then_by_shape(nested, rows, sr, macs, inner):
    proto = onnx.load(str(nested))
    spec = specialize(proto, {"sr": sr}, {"x": [rows, 4]})
    onnx.checker.check_model(spec.proto, full_check=True)
    assert not _ifs(spec.proto.graph) and spec.complete and not spec.unresolved
    outer = "then" if sr == 16000 else "else"
    got = {r.node: (r.branch, r.kind, r.by) for r in spec.resolved}
    assert got["If_rate"] == (outer, "value", [f"sr={sr}"]) and got["If_gain"] == (outer, "value", [f"sr={sr}"])
    if inner:
        assert got["If_batch1"] == (inner, "shape", [f"the shape of 'h' [{rows}, 8]"])
    else:
        assert "If_batch1" not in got           # it sat in the branch not taken
    assert [vi.name for vi in spec.proto.graph.input] == ["x"]   # sr is a constant now
    # names stay single-assignment: If_gain's 't' and If_batch1's 't' both moved up, one renamed
    outs = [o for n in spec.proto.graph.node for o in n.output]
    assert len(outs) == len(set(outs))
    feeds = {"x": np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32),
             "sr": np.array(sr, np.int64)}
    for a, b in zip(_ort(nested, feeds), _ort(spec.proto, feeds)):
        assert a.shape == b.shape and float(np.max(np.abs(a - b))) <= 1e-6
    info = Model.load(nested).with_input_shapes({"x": (rows, 4)}).inspect(input_values={"sr": str(sr)})
    assert info["macs"] == macs and not info["macs_partial"]
    assert {r["node"]: r["kind"] for r in info["ifs_resolved"]}["If_rate"] == "value"
    assert info["ifs_unresolved"] == []


def test_without_the_value_the_ifs_stay_and_say_why(nested):
    proto = onnx.load(str(nested))
    spec = specialize(proto, {}, {"x": [1, 4]})
    assert spec.resolved == [] and {u.node for u in spec.unresolved} == {"If_rate", "If_gain"}
    assert all("'sr' is fed at run time" in u.why and "--input-value sr=" in u.why for u in spec.unresolved)
    assert {u.node: u.nested for u in spec.unresolved} == {"If_rate": 1, "If_gain": 0}
    feeds = {"x": np.ones((1, 4), np.float32), "sr": np.array(16000, np.int64)}
    for a, b in zip(_ort(nested, feeds), _ort(spec.proto, feeds)):
        assert float(np.max(np.abs(a - b))) <= 1e-6
    info = Model.load(nested).with_input_shapes({"x": (1, 4)}).inspect()
    assert info["macs_partial"] or any("larger If branch" in n for n in info["macs_notes"])
    assert [u["node"] for u in info["ifs_unresolved"]] == ["If_rate", "If_gain"]
    assert any("If_rate: not resolved" in n for n in info["macs_notes"])


def _cond_model(const_elems: int):
    """``If(ReduceSum(c) > 0)`` over a constant ``c`` of ``const_elems`` ones, and a second If
    whose condition comes from the data (``ReduceSum(x) > 0``)."""
    c = numpy_helper.from_array(np.ones(const_elems, np.float32), "c")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")

    def branch(name, k):
        k_t = numpy_helper.from_array(np.array(k, np.float32), f"k_{name}")
        return helper.make_graph([helper.make_node("Mul", ["x", f"k_{name}"], [f"o_{name}"])], name, [],
                                 [helper.make_tensor_value_info(f"o_{name}", TensorProto.FLOAT, [1, 2])], [k_t])

    nodes = [helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["pos"]),
             helper.make_node("If", ["pos"], ["y"], then_branch=branch("a", 2.0), else_branch=branch("b", 3.0),
                              name="If_const"),
             helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0), helper.make_node("Greater", ["sx", "zero"], ["px"]),
             helper.make_node("If", ["px"], ["z"], then_branch=branch("c", 4.0), else_branch=branch("d", 5.0),
                              name="If_data")]
    g = helper.make_graph(nodes, "cond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2])], [c, zero])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m


def test_size_cap_and_data_conditions():
    small = specialize(_cond_model(8))
    assert [(r.node, r.branch, r.kind) for r in small.resolved] == [("If_const", "then", "constant")]
    assert [u.node for u in small.unresolved] == ["If_data"]
    assert "input 'x' is fed at run time" in small.unresolved[0].why
    big = specialize(_cond_model(100))               # 100 elements: over the default cap of 64
    assert {u.node for u in big.unresolved} == {"If_const", "If_data"}
    assert "'c' has 100 elements (more than 64)" in [u.why for u in big.unresolved if u.node == "If_const"][0]
    raised = specialize(_cond_model(100), max_elements=128)
    assert [r.node for r in raised.resolved] == ["If_const"]
    feeds = {"x": np.array([[1.0, -3.0]], np.float32)}
    for a, b in zip(_ort(_cond_model(100), feeds), _ort(raised.proto, feeds)):
        assert float(np.max(np.abs(a - b))) == 0.0


def test_bad_names_and_shapes_are_input_errors(nested):
    proto = onnx.load(str(nested))
    with pytest.raises(InputError, match="'rate' is not an input"):
        specialize(proto, {"rate": 1})
    with pytest.raises(InputError, match="rank 2, not 3"):
        specialize(proto, {}, {"x": [1, 4, 1]})
    with pytest.raises(InputError, match="has 4 where"):
        specialize(proto, {}, {"x": [1, 5]})


# the NumPy evaluator agrees with ONNX's reference implementation on the shape-arithmetic ops
@pytest.mark.parametrize("op,args,attrs,opset", [
    ("Slice", [np.arange(10), np.array([8]), np.array([1]), np.array([0]), np.array([-3])], {}, 13),
    ("Slice", [np.arange(6).reshape(2, 3), np.array([-2]), np.array([2 ** 62]), np.array([1])], {}, 13),
    ("Div", [np.array([-7, 7, -6], np.int64), np.array([2, -2, 4], np.int64)], {}, 13),
    ("Unsqueeze", [np.array([3, 4]), np.array([0, -1])], {}, 13),
    ("Unsqueeze", [np.array([3, 4])], {"axes": [0]}, 11),
    ("Squeeze", [np.ones((1, 3, 1)), np.array([-1])], {}, 13),
    ("Gather", [np.array([2, 1, 128]), np.array(-1)], {"axis": 0}, 13),
    ("Concat", [np.array([1]), np.array([2, 3])], {"axis": 0}, 13),
    ("Range", [np.array(0), np.array(7), np.array(3)], {}, 13),
    ("Cast", [np.array([0, 2])], {"to": TensorProto.BOOL}, 13),
    ("Reshape", [np.arange(6), np.array([0, -1])], {}, 13),
])
def test_numpy_ops_match_the_reference(op, args, attrs, opset):
    assert op in NUMPY_OPS
    node = helper.make_node(op, [f"i{k}" for k in range(len(args))], ["o"], **attrs)
    ours = eval_node(node, args, opset)[0]
    ref = _reference(node, args, opset)[0]
    assert ours.shape == ref.shape and np.array_equal(ours, ref) and ours.dtype == ref.dtype


# -- the real silero-vad --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def silero():
    if not corpus.is_fetched("silero-vad"):
        corpus.fetch(["silero-vad"], with_photos=False)
    return corpus.path("silero-vad")


SHAPES = {"input": (1, 576), "state": (2, 1, 128)}


def test_silero_specialized_runs_like_the_original(silero):
    spec = specialize(onnx.load(str(silero)), {"sr": 16000}, SHAPES)
    onnx.checker.check_model(spec.proto, full_check=True)
    assert spec.complete and not _ifs(spec.proto.graph)
    kinds = [r.kind for r in spec.resolved]
    assert spec.resolved[0].node == "If_0" and spec.resolved[0].by == ["sr=16000"]
    assert kinds.count("value") == 1 and kinds.count("shape") == 6
    assert sum(n.op_type == "LSTM" for n in spec.proto.graph.node) == 1   # the other LSTM: a branch not taken
    feeds = corpus.sample_inputs("silero-vad", 4)
    for f in feeds:
        for a, b in zip(_ort(silero, f), _ort(spec.proto, f)):
            assert a.shape == b.shape and float(np.max(np.abs(a - b))) <= 1e-6


def test_silero_macs_hand_count(silero):
    m = Model.load(silero).with_input_shapes(SHAPES)
    info = m.inspect(input_values={"sr": "16000"})
    # 576 samples padded by 64 to 640; STFT Conv [258, 1, 256] stride 128 -> 4 frames
    stft = 258 * 4 * 256
    encoder = (128 * 4 * 129 * 3      # [128, 129, 3], stride 1: 4 frames
               + 64 * 2 * 128 * 3     # [64, 128, 3], stride 2: 2 frames
               + 64 * 1 * 64 * 3      # [64, 64, 3], stride 2: 1 frame
               + 128 * 1 * 64 * 3)    # [128, 64, 3], stride 1
    lstm = 1 * 1 * 1 * (4 * 128) * (128 + 128)   # dirs x seq x batch x gates*hidden x (input + hidden)
    head = 1 * 1 * 128                 # Conv [1, 128, 1] on [1, 128, 1]
    assert stft + encoder + lstm + head == 679_552
    assert info["macs"] == 679_552 and not info["macs_partial"] and info["macs_unknown_nodes"] == 0
    assert {r["kind"] for r in info["ifs_resolved"]} == {"value", "shape"} and info["ifs_unresolved"] == []
    assert any("If_0: the then branch, the one sr=16000 chooses" in n for n in info["macs_notes"])
    # sr=8000, 256 + 32 context samples padded by 32 to 320: STFT [130, 1, 128] stride 64 -> 4 frames,
    # the first encoder Conv takes 65 bins; the rest as above
    k8 = Model.load(silero).with_input_shapes({"input": (1, 288), "state": (2, 1, 128)})
    info8 = k8.inspect(input_values={"sr": "8000"})
    macs8 = 130 * 4 * 128 + 128 * 4 * 65 * 3 + 64 * 2 * 128 * 3 + 64 * 1 * 64 * 3 + 128 * 1 * 64 * 3 + lstm + head
    assert info8["macs"] == macs8 == 383_616 and not info8["macs_partial"]
    plain = m.inspect()                                # without the value: honestly partial, and why
    assert plain["macs_partial"] and plain["ifs_unresolved"][0]["node"] == "If_0"
    assert "'sr'" in plain["ifs_unresolved"][0]["why"]


def test_an_output_declared_with_the_wrong_rank_takes_the_computed_shape():
    """ddddocr-ocr declares its output [1, seqlen] but computes rank 3 (a Reshape target built from
    Shape): once the target is a constant, the checker's strict inference would disagree."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Concat", ["s", "one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    g = helper.make_graph(nodes, "rank", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])], [one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    spec = specialize(m, {}, {"x": [2, 3]})
    onnx.checker.check_model(spec.proto, full_check=True)
    dims = [d.dim_value for d in spec.proto.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 1] and spec.folded >= 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(_ort(spec.proto, {"x": x})[0], x.reshape(2, 3, 1))
