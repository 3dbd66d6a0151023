"""ONNX Loop -> TFLite WHILE (``targets/tflite/onnx_loop.py``) and the index ops a decoder loop
uses (ArgMax/ArgMin, OneHot, comparisons, Where, Range, ScatterElements), each against onnxruntime
on the same inputs; the forms of trip count and condition, a loop that runs zero times, constant
weights carried through the loop, and what cannot be written (scan outputs, an If in the body) as
one error before anything is written."""
from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.errors import ConversionError
from sdk.targets.tflite.convert import onnx_to_tflite_bytes
from tests import controlflow as cf
from tests.clirun import run_cli

pytest.importorskip("ai_edge_litert")  # the tflite extra: installed by .ci/run (pip install -e .[all,test])


def _litert(data: bytes, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.asarray(feeds[d["name"]]).astype(d["dtype"]))
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def _same_as_onnxruntime(path, feeds: Dict[str, np.ndarray], atol: float = 1e-6) -> Dict:
    m = onnx.load(str(path))
    res = onnx_to_tflite_bytes(m)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = _litert(res["data"], feeds)
    for name, r in ref.items():
        assert got[name].shape == r.shape, (name, got[name].shape, r.shape)
        np.testing.assert_allclose(got[name], r, atol=atol, rtol=1e-5, err_msg=name)
    return res


def _subgraphs(data: bytes):
    from ai_edge_litert import schema_py_generated as fb

    m = fb.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    return [(sg.name.decode(), [names[m.operatorCodes[op.opcodeIndex].builtinCode] for op in sg.operators])
            for sg in m.subgraphs]


X = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)


@pytest.mark.parametrize("kind, feeds", [
    ("constant trip count", {"x": X}),
    ("condition from the counter", {"x": X}),
    ("trip count from an input, 0", {"x": X, "n": np.array(0, np.int64)}),
    ("trip count from an input, 3", {"x": X, "n": np.array(3, np.int64)}),
    ("trip count from an input, 7", {"x": X, "n": np.array(7, np.int64)}),
])
def test_loop_trip_count_and_condition_forms(kind, feeds, tmp_path):
    path = cf.loop_model(tmp_path / "loop.onnx", trips=5, cond_from_counter=kind == "condition from the counter",
                         m_from_input="input" in kind)
    res = _same_as_onnxruntime(path, feeds)
    assert res["ops"]["WHILE"] == 1
    graphs = _subgraphs(res["data"])
    assert [g[0] for g in graphs] == ["main", "the_loop/body", "the_loop/cond"]
    assert "FULLY_CONNECTED" in graphs[1][1]       # the body's MatMul with its constant weight
    assert "LESS" in graphs[2][1]                    # M bounds each of these: the counter is checked


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_loop_the_data_skips_runs_zero_times(sign, tmp_path):
    """``sum(x) > 0`` starts the loop: 10 steps of ``h @ W/2`` or none."""
    path = cf.loop_data_model(tmp_path / "loop_data.onnx")
    _same_as_onnxruntime(path, {"x": X * sign})


def test_decoder_loop_as_paddle2onnx_writes_it(tmp_path):
    """SLANet's pattern: rows written by ScatterElements at a Range of the counter, ArgMax ->
    OneHot, weights carried through the loop unchanged (they become the body's constants: its
    MatMul is a FULLY_CONNECTED and the WHILE does not carry them)."""
    path = cf.decoder_loop_model(tmp_path / "decoder.onnx")
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((1, 4)).astype(np.float32)
        res = _same_as_onnxruntime(path, {"x": x})
    main, body, cond = _subgraphs(res["data"])
    assert "FULLY_CONNECTED" in body[1] and "BATCH_MATMUL" not in body[1]
    assert {"ARG_MAX", "ONE_HOT", "RANGE", "SELECT_V2", "LESS"} <= set(body[1])
    assert "LESS" not in cond[1]          # M = INT64_MAX bounds nothing: the body's condition alone
    from ai_edge_litert import schema_py_generated as fb

    m = fb.ModelT.InitFromPackedBuf(res["data"], 0)
    names = [t.name for sg in m.subgraphs for t in sg.tensors]
    assert len(names) == len(set(names))   # unique over the file: ai-edge-quantizer keys tensors by name
    # WHILE carries (iteration, cond, h, i, buf): the [4, 4] weight and the row limit are constants
    (wh,) = [op for op in m.subgraphs[0].operators if op.opcodeIndex == next(
        k for k, c in enumerate(m.operatorCodes) if c.builtinCode == fb.BuiltinOperator.WHILE)]
    assert len(wh.inputs) == 5


def test_scan_outputs_are_one_error_before_anything_is_written(tmp_path, capsys):
    path = cf.scan_output_loop_model(tmp_path / "scan.onnx")
    with pytest.raises(ConversionError, match=r"node 'scan_loop' \(Loop\), attribute body: 1 scan output"):
        onnx_to_tflite_bytes(onnx.load(str(path)))
    out = tmp_path / "scan.tflite"
    rc, _, err = run_cli(["convert", str(path), "-o", str(out)], capsys)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(lines) == 1 and "scan output" in lines[0] and "Traceback" not in err, err
    assert not out.exists()


def test_an_if_in_the_body_names_the_loop_and_the_if(tmp_path):
    path = cf.loop_with_if_model(tmp_path / "loop_if.onnx")
    with pytest.raises(ConversionError) as err:
        onnx_to_tflite_bytes(onnx.load(str(path)))
    assert err.value.message.startswith("node 'the_loop' (Loop), in its body: node 'body_if' (If)")
    assert "--input-value" in (err.value.hint or "")


# -- the index ops, outside a loop ------------------------------------------------------------------------
def _graph(nodes, inits: Dict[str, np.ndarray], outputs, x_shape=(3, 5)):
    g = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _check_ops(m, tmp_path, x):
    path = tmp_path / "ops.onnx"
    onnx.save(m, str(path))
    return _same_as_onnxruntime(path, {"x": x})


X35 = np.array([[0.5, -1.0, 2.0, 2.0, 0.0], [-3.0, 1.0, 0.25, -0.5, 1.5], [0.0, 0.0, -2.0, 4.0, 1.0]], np.float32)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(1, 0), (1, 1), (0, 1)])
def test_arg_extremes_and_one_hot(op, axis, keepdims, tmp_path):
    n = helper.make_node
    nodes = [n(op, ["x"], ["a"], axis=axis, keepdims=keepdims, name="arg"),
             n("Cast", ["a"], ["y"], to=TensorProto.FLOAT, name="as_float"),
             n("OneHot", ["a", "depth", "offon"], ["oh"], axis=-1, name="onehot")]
    res = _check_ops(_graph(nodes, {"depth": np.array([5], np.int64),
                                    "offon": np.array([-1.0, 3.0], np.float32)}, ["y", "oh"]), tmp_path, X35)
    assert res["ops"]["ARG_MAX" if op == "ArgMax" else "ARG_MIN"] == 1 and res["ops"]["ONE_HOT"] == 1


def test_comparisons_logic_and_where(tmp_path):
    n = helper.make_node
    nodes = [n("Less", ["x", "zero"], ["neg"], name="lt"), n("Greater", ["x", "one"], ["big"], name="gt"),
             n("Equal", ["x", "zero"], ["z"], name="eq"), n("LessOrEqual", ["x", "one"], ["le"], name="le"),
             n("GreaterOrEqual", ["x", "zero"], ["ge"], name="ge"),
             n("Or", ["neg", "big"], ["outside"], name="or"), n("Not", ["outside"], ["inside"], name="not"),
             n("And", ["inside", "le"], ["both"], name="and"),
             n("Where", ["inside", "x", "minus"], ["y"], name="where")]
    nodes += [n("Cast", [b], [f"{b}_f"], to=TensorProto.FLOAT, name=f"cast_{b}") for b in ("z", "both", "ge")]
    inits = {"zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32),
             "minus": np.full((3, 5), -7.0, np.float32)}
    _check_ops(_graph(nodes, inits, ["y", "z_f", "both_f", "ge_f"]), tmp_path, X35)


@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_at_computed_indices(axis, tmp_path):
    """``data[argmax] = 10 * max`` along the axis, and constant indices with a negative one."""
    n = helper.make_node
    nodes = [n("ArgMax", ["x"], ["at"], axis=axis, keepdims=1, name="at"),
             n("ReduceMax", ["x"], ["top"], axes=[axis], keepdims=1, name="top"),
             n("Mul", ["top", "ten"], ["upd"], name="upd"),
             n("ScatterElements", ["x", "at", "upd"], ["y"], axis=axis, name="scatter"),
             n("ScatterElements", ["x", "fixed", "upd"], ["y2"], axis=axis, name="scatter_fixed")]
    fixed = np.array([[-1], [0], [2]], np.int64) if axis == 1 else np.array([[0, -1, 1, 2, -3]], np.int64)
    res = _check_ops(_graph(nodes, {"ten": np.array(10.0, np.float32), "fixed": fixed}, ["y", "y2"]), tmp_path, X35)
    assert res["ops"]["SELECT_V2"] >= 2


def test_scatter_elements_reduction_is_refused(tmp_path):
    n = helper.make_node
    nodes = [n("ArgMax", ["x"], ["at"], axis=1, keepdims=1, name="at"),
             n("ReduceMax", ["x"], ["top"], axes=[1], keepdims=1, name="top"),
             n("ScatterElements", ["x", "at", "top"], ["y"], axis=1, reduction="add", name="scatter_add")]
    m = _graph(nodes, {}, ["y"])
    m.opset_import[0].version = 16
    with pytest.raises(ConversionError, match=r"node 'scatter_add' \(ScatterElements\), attribute reduction"):
        onnx_to_tflite_bytes(m)


def test_a_tflite_with_a_while_does_not_quantize_as_a_source_and_says_what_to_do(tmp_path, capsys):
    path = cf.loop_model(tmp_path / "loop.onnx", trips=3)
    tfl = tmp_path / "loop.tflite"
    tfl.write_bytes(onnx_to_tflite_bytes(onnx.load(str(path)))["data"])
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(4):
        np.savez(calib / f"{i}.npz", x=np.full((1, 4), i, np.float32))
    out = tmp_path / "q.tflite"
    rc, _, err = run_cli(["quantize", str(tfl), "--calib", str(calib), "-o", str(out)], capsys)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(lines) == 1 and "3 subgraphs" in lines[0] and "model.onnx --target tflite" in lines[0], err
    assert not out.exists()


def test_inspect_lists_the_ops_of_the_loop_subgraphs(tmp_path, capsys):
    from sdk.model import Model

    path = cf.decoder_loop_model(tmp_path / "decoder.onnx")
    tfl = tmp_path / "decoder.tflite"
    tfl.write_bytes(onnx_to_tflite_bytes(onnx.load(str(path)))["data"])
    info = Model.load(tfl).inspect()
    assert info["subgraphs"] == 3 and info["ops"] == {"FULLY_CONNECTED": 1, "WHILE": 1}
    body = info["subgraph_ops"]["decoder/body"]
    assert body["ONE_HOT"] == 1 and body["RANGE"] == 1 and info["subgraph_ops"]["decoder/cond"] == {"RESHAPE": 1}
    assert info["macs_partial"] and "not counted" in info["macs_notes"][0]
    rc, out, _ = run_cli(["inspect", str(tfl)], capsys)
    assert rc == 0 and "subgraph 'decoder/body':" in out and "control flow not counted" in out


def test_bench_says_the_delegated_count_is_the_main_graphs(tmp_path, capsys):
    """LiteRT's Python API lists the main subgraph's nodes only: the delegated count of a file with
    a WHILE says so (2 other subgraphs, not counted), in the artifact and in `sdk bench`'s line."""
    from sdk.targets import get_target

    path = cf.decoder_loop_model(tmp_path / "decoder.onnx")
    tfl = tmp_path / "decoder.tflite"
    tfl.write_bytes(onnx_to_tflite_bytes(onnx.load(str(path)))["data"])
    delegated = get_target("tflite").prepare(str(tfl)).metadata["delegated"]
    assert delegated["other_subgraphs"] == 2 and delegated["of"] == 2, delegated    # FULLY_CONNECTED, WHILE
    rc, out, err = run_cli(["bench", str(tfl), "--target", "tflite", "--runs", "3", "--warmup", "1", "--min-seconds", "0"], capsys)
    assert rc == 0, err
    assert "of the main graph; its 2 other subgraphs (loop bodies) are not listed by the runtime" in " ".join(out.split())


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.FLOAT])
def test_range_with_a_bound_known_only_at_run_time(dtype, tmp_path):
    """``Range(0, max(x), 1)`` outside a loop: RANGE sizes its output when it runs; its constant
    start and step are written in the output's type (int64 stays int64 there)."""
    np_dtype = np.int64 if dtype == TensorProto.INT64 else np.float32
    n = helper.make_node
    nodes = [n("ReduceMax", ["x"], ["top"], keepdims=0, name="top"), n("Cast", ["top"], ["limit"], to=dtype, name="c"),
             n("Range", ["start", "limit", "step"], ["r"], name="range"),
             n("Cast", ["r"], ["y"], to=TensorProto.FLOAT, name="out")]
    m = _graph(nodes, {"start": np.array(0, np_dtype), "step": np.array(1, np_dtype)}, ["y"], x_shape=(4,))
    path = tmp_path / "range.onnx"
    onnx.save(m, str(path))
    for x in (np.array([1, 5, 3, 2], np.float32), np.array([0, 2, 1, 0], np.float32)):
        res = _same_as_onnxruntime(path, {"x": x})
    assert res["ops"]["RANGE"] == 1
