"""Input values, non-batch inputs, control-flow inputs and honest MAC counts on small real ONNX
models whose counts are worked out by hand (tests/controlflow.py)."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import InputError
from sdk.model import Model
from sdk.tensors import TensorSpec
from tests.controlflow import bilstm_model, if_rate_model, loop_model, loop_with_if_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("controlflow")
    return {"if": if_rate_model(d / "if.onnx"), "loop": loop_model(d / "loop.onnx"),
            "loop_cond": loop_model(d / "loop_cond.onnx", trips=3, cond_from_counter=True),
            "loop_input": loop_model(d / "loop_input.onnx", m_from_input=True),
            "bilstm": bilstm_model(d / "bilstm.onnx")}


# -- values ----------------------------------------------------------------------------------------------
def test_input_values_are_typed_by_the_model():
    from sdk.data import parse_input_values, random_feed

    specs = [TensorSpec("sr", (), "int64"), TensorSpec("m", (1, 3), "float32"), TensorSpec("x", ("n", 2), "float32")]
    v = parse_input_values(["sr=16000", "m=1,2,3"], specs)
    assert v["sr"].dtype == np.int64 and v["sr"].shape == () and int(v["sr"]) == 16000
    assert v["m"].shape == (1, 3) and v["m"].dtype == np.float32
    feed = random_feed(specs, {"x": (1, 2)}, values=v)
    assert int(feed["sr"]) == 16000 and feed["x"].shape == (1, 2)
    for bad, word in (("sr=1.5", "integer"), ("sr=abc", "sr"), ("q=1", "not a model input"), ("m=1,2", "[1,3]"),
                      ("sr", "NAME=VALUE")):
        with pytest.raises(InputError, match=word.replace("[", r"\[")):
            parse_input_values([bad], specs)


def test_values_cross_to_the_agent_and_back():
    from sdk.data import values_from_json, values_to_json

    v = {"sr": np.array(8000, np.int64), "m": np.ones((1, 2), np.float16)}
    back = values_from_json(values_to_json(v))
    assert back["sr"].dtype == np.int64 and back["sr"].shape == () and back["m"].dtype == np.float16


# -- control flow named --------------------------------------------------------------------------------
def test_control_inputs_name_the_if_rate_and_the_loop_bound(models):
    (ctl,) = Model.load(models["if"]).control_inputs()
    assert ctl == {"input": "sr", "role": "chooses an If branch", "node": "If_rate", "kind": "value"}
    (ctl,) = Model.load(models["loop_input"]).control_inputs()
    assert ctl["input"] == "n" and ctl["role"].startswith("bounds a Loop") and ctl["kind"] == "value"
    assert Model.load(models["loop"]).control_inputs() == []       # constant trip count: no input steers it


def test_benchmark_refuses_a_random_branch_value_and_runs_with_one(models):
    from sdk.targets import benchmark

    with pytest.raises(InputError, match=r"input 'sr' chooses an If branch.*--input-value sr="):
        benchmark(models["if"], input_shapes={"x": (1, 4), "state": (2, 1, 3)}, runs=2, min_seconds=0, warmup=0)
    res = benchmark(models["if"], input_shapes={"x": (1, 4), "state": (2, 1, 3)}, input_values=["sr=16000"],
                    runs=2, min_seconds=0, warmup=0)
    sr = next(i for i in res.inputs if i["name"] == "sr")
    assert sr["value"] == 16000 and sr["shape"] == []


def test_carry_feeds_the_state_back(models):
    from sdk.targets import get_target
    from sdk.targets.measure import benchmark_session

    tgt = get_target("onnxruntime")
    with tgt.open(tgt.prepare(Model.load(models["if"]))) as session:
        seen = []
        run = session.run

        def spy(feed):
            seen.append(float(np.asarray(feed["state"]).ravel()[0]))
            return run(feed)

        session.run = spy  # the carrying loop calls session.run with the carried state
        benchmark_session(session, input_shapes={"x": (1, 4), "state": (2, 1, 3)},
                          input_values={"sr": np.array(16000, np.int64)}, carry={"stateN": "state"},
                          warmup=0, runs=4, min_seconds=0)
    assert seen[1:4] == pytest.approx([seen[0] + 1, seen[0] + 2, seen[0] + 3])   # stateN = state + 1, fed back


# -- data with inputs that have no sample axis ------------------------------------------------------------
def test_npz_with_a_state_and_a_rate_reads_one_feed_per_sample(models, tmp_path):
    from sdk.sources import ArraySource, open_source

    specs = Model.load(models["if"]).inputs
    p = tmp_path / "d.npz"
    np.savez(p, x=np.ones((3, 4), np.float32), state=np.zeros((2, 1, 3), np.float32))
    with pytest.raises(InputError):  # today's rule: every array split along its first axis
        list(ArraySource(p, specs))
    feeds = list(ArraySource(p, specs, values={"sr": np.array(16000, np.int64)}, sample_axes={"state": None}))
    assert len(feeds) == 3 and all(f["x"].shape == (1, 4) and f["state"].shape == (2, 1, 3) for f in feeds)
    assert all(int(f["sr"]) == 16000 for f in feeds)
    # the Python API: one dict with 3 samples of x and one state
    api = list(open_source({"x": np.ones((3, 4), np.float32), "state": np.zeros((2, 1, 3), np.float32)}, specs,
                           values={"sr": np.array(8000, np.int64)}, sample_axes={"state": None}))
    assert len(api) == 3 and api[0]["state"].shape == (2, 1, 3) and int(api[0]["sr"]) == 8000
    # samples along another axis: state [2, 3 samples, 3] split along axis 1
    np.savez(p, x=np.ones((3, 4), np.float32), state=np.zeros((2, 3, 3), np.float32))
    feeds = list(ArraySource(p, specs, values={"sr": np.array(16000, np.int64)}, sample_axes={"state": 1}))
    assert len(feeds) == 3 and feeds[0]["state"].shape == (2, 1, 3)


def test_random_dataset_with_a_scalar_input_does_not_crash(models):
    """`sdk validate ... --input-shape` crashed: zero-dimensional arrays cannot be concatenated."""
    from sdk.validation.run import random_dataset

    m = Model.load(models["if"])
    ds = random_dataset(m.inputs, {"x": (1, 4), "state": (2, 1, 3)}, samples=3,
                        input_values={"sr": np.array(16000, np.int64)})
    assert ds.stacked and ds.arrays["sr"].shape == (3,) and ds.arrays["state"].shape == (3, 2, 1, 3)


# -- MAC counts, against the hand counts of tests/controlflow.py --------------------------------------------
def test_bidirectional_lstm_macs_hand_count(models):
    info = Model.load(models["bilstm"]).inspect()
    assert info["macs"] == 2 * 7 * 1 * (4 * 3) * (5 + 3) == 1344 and not info["macs_partial"]


def test_if_counts_the_larger_branch_labelled_or_the_chosen_one(models):
    m = Model.load(models["if"]).with_input_shapes({"x": (1, 4), "state": (2, 1, 3)})
    info = m.inspect()
    assert info["macs"] == 32 and not info["macs_partial"]          # max(then 32, else 8)
    assert any("larger If branch" in n and "then 32" in n and "else 8" in n for n in info["macs_notes"])
    assert m.inspect(input_values={"sr": "8000"})["macs"] == 8       # the branch sr=8000 takes
    assert m.inspect(input_values={"sr": "16000"})["macs"] == 32


def test_loop_macs_body_times_static_trip_count(models):
    info = Model.load(models["loop"]).inspect()
    assert info["macs"] == 16 + 16 * 5 == 96 and not info["macs_partial"]
    assert any("x 5 iterations" in n for n in info["macs_notes"])
    info = Model.load(models["loop_cond"]).inspect()               # M = 100, ends on i + 1 < 3
    assert info["macs"] == 16 + 16 * 3 and not info["macs_partial"]
    info = Model.load(models["loop_input"]).inspect()              # M from an input: partial, with why
    assert info["macs_partial"] and info["macs"] == 16
    assert any("Loop body not counted" in n and "run time" in n for n in info["macs_notes"])


def test_if_inside_a_loop_body_counts_its_larger_branch_per_iteration(tmp_path):
    """tests/controlflow.py's loop_with_if_model: 4 iterations of an If (then 16, else 32 MACs) on
    the outer input ``mode``: 32 x 4 = 128, labelled as the larger branch, and ``mode`` is named as
    the input that chooses it."""
    info = Model.load(loop_with_if_model(tmp_path / "loop_if.onnx")).inspect()
    assert info["macs"] == 128 and not info["macs_partial"], info
    assert "the_loop/body_if: the larger If branch is counted (then 16, else 32)" in info["macs_notes"]
    assert "the_loop: Loop body 32 MACs x 4 iterations (the constant trip count M)" in info["macs_notes"]
    assert [(c["input"], c["node"]) for c in info["control_inputs"]] == [("mode", "body_if")]


def test_roofline_takes_the_same_loop_count(models):
    from sdk.roofline import graph_costs

    costs = graph_costs(Model.load(models["loop"]))
    loop = costs.nodes["the_loop"]
    assert loop.exact and loop.macs == 16 * 5 and loop.flops == 2 * 16 * 5


def test_profile_trace_loop_row_does_not_count_its_body_twice():
    """ORT's trace lists a Loop's kernel event spanning its body's node events: summed, the body
    counted twice (150% of the run). The Loop row keeps its own time; the body nodes are rows."""
    from sdk.targets.profiling import parse_ort_trace

    def node(name, op, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1000},
              node("first", "MatMul", 10, 90),
              node("the_loop", "Loop", 100, 800),
              node("body_mm", "MatMul", 110, 300), node("body_add", "Add", 420, 400),
              node("if_in_body", "If", 830, 60), node("inner", "MatMul", 835, 50)]
    trace = parse_ort_trace(events)
    by = {l.name: l for l in trace.layers}
    assert by["the_loop"].time_ms == pytest.approx((800 - 300 - 400 - 60) / 1e3)
    assert by["the_loop"].extra["body_ms"] == pytest.approx(0.76)
    assert by["if_in_body"].time_ms == pytest.approx(0.010)
    assert sum(l.time_ms for l in trace.layers) == pytest.approx(0.89)   # 90 + 800 us, nothing twice
    assert trace.kernel_ms[0] == pytest.approx(0.89)


def test_data_that_steers_a_loop_is_noted_not_refused(tmp_path):
    """bench's random input drove a Loop model to another iteration count than real data, with no note."""
    from sdk.targets import benchmark
    from tests.controlflow import loop_data_model

    p = loop_data_model(tmp_path / "loop_data.onnx")
    (ctl,) = Model.load(p).control_inputs()
    assert ctl["input"] == "x" and ctl["kind"] == "data" and "Loop" in ctl["role"]
    res = benchmark(p, runs=2, min_seconds=0, warmup=0)
    (note,) = res.settings["notes"]
    assert "input 'x'" in note and "--data" in note
    assert "notes" not in benchmark(p, data={"x": np.ones((1, 4), np.float32)}, runs=2, min_seconds=0,
                                    warmup=0).settings


def test_interleaved_compare_takes_input_values(models, capsys):
    """`sdk compare A.onnx B.onnx` (and bench --against) with a branch-choosing input: refused
    without its value (one line naming it), run with it."""
    from tests.clirun import run_cli

    shapes = ["--input-shape", "x=1x4", "--input-shape", "state=2x1x3"]
    fast = ["--rounds", "6", "--round-seconds", "0.005"]
    code, _, err = run_cli(["compare", models["if"], models["if"], *shapes, *fast], capsys)
    assert code == 2 and "'sr'" in err and "--input-value sr=" in err and len(err.strip().splitlines()) == 1, err
    # with the value both run and are judged (exit 0 same, or 1 if this machine's noise says slower: never 2)
    code, out, err = run_cli(["compare", models["if"], models["if"], *shapes, *fast, "--input-value", "sr=16000"], capsys)
    assert code in (0, 1) and "error:" not in err and "B/A" in out, (code, out, err)
    code, out, err = run_cli(["bench", models["if"], "--against", models["if"], *shapes, "--input-value", "sr=8000"],
                             capsys)
    assert code in (0, 1) and "error:" not in err and "B/A" in out, (code, out, err)


def test_undecided_nested_ifs_count_the_larger_branch_of_each_scope(tmp_path):
    """nested_if_model at x=1x4 without sr: If_rate's then branch = 32 + max(16, 48) = 80 (its inner
    If's two branches both define `t`; ONNX Runtime's symbolic inference keyed their shapes by name
    and rewrote the else branch as the then branch, so the count said 16 and 16, and 48 in all)."""
    from tests.controlflow import nested_if_model

    m = Model.load(nested_if_model(tmp_path / "nested.onnx")).with_input_shapes({"x": [1, 4]})
    info = m.inspect()
    assert info["macs"] == 80 and info["macs_partial"] is False, info["macs_notes"]
    assert any("If_batch1" in n and "then 16, else 48" in n for n in info["macs_notes"]), info["macs_notes"]
