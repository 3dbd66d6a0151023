"""Front-door pieces that need no corpus: MACs that never crash, Constant weights, the data layout
rule, deterministic .npz, verdict lines, the board cache trim, CLI argument plumbing, CUDA facts.
(The same defects are also checked on real models in tests/realmodels.)"""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sdk.tensors import TensorSpec


def _matmul_unknown_rank(path):
    """MatMul whose left input comes out of a Reshape with a computed shape: rank unknown to
    shape inference (what made ``_node_macs`` index an empty shape)."""
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
              helper.make_tensor_value_info("s", TensorProto.INT64, ["k"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _constant_weights(path):
    """A Conv whose weight is a Constant node behind Identity and Cast (no initializers)."""
    wt = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "wt")
    nodes = [helper.make_node("Constant", [], ["w0"], value=wt),
             helper.make_node("Identity", ["w0"], ["w1"]),
             helper.make_node("Cast", ["w1"], ["w"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([1, -1], np.int64))),
             helper.make_node("Constant", [], ["scale"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "scale"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_macs_with_unknown_rank_are_partial(tmp_path):
    from sdk import Model

    info = Model.load(_matmul_unknown_rank(tmp_path / "m.onnx")).inspect()
    assert info["macs"] is None and info["macs_unknown_nodes"] == 1 and info["macs_partial"]


def test_constant_weights_are_parameters_and_feed_the_macs(tmp_path):
    from sdk import Model

    info = Model.load(_constant_weights(tmp_path / "c.onnx")).inspect()
    # the float weight tensor counts; the int64 shape and the rank-0 scale do not
    assert info["params"] == 8 * 3 * 3 * 3 == info["params_in_constants"] and info["param_bytes"] == 4 * 216
    assert info["macs"] == 8 * 8 * 8 * 27 and not info["macs_partial"]


def test_default_target_follows_the_format(tmp_path):
    from sdk.formats import default_target

    assert default_target("onnx") == "onnxruntime" and default_target("tflite") == "tflite"
    assert default_target(tmp_path / "x.tflite") == "tflite" and default_target(tmp_path / "x.onnx") == "onnxruntime"


# -- the data layout rule ------------------------------------------------------------------------------
def test_file_layout_rule():
    from sdk.sources import ROWS, STACKED, WHOLE, file_layout

    dyn = [TensorSpec("x", ("N", 3, 4, 4), "float32")]
    one = [TensorSpec("x", (1, 3, 4, 4), "float32")]
    four = [TensorSpec("x", (4, 3), "float32")]
    assert file_layout({"x": (10, 1, 3, 4, 4)}, one) == STACKED
    assert file_layout({"x": (10, 3, 4, 4)}, dyn) == ROWS == file_layout({"x": (10, 3, 4, 4)}, one)
    assert file_layout({"x": (4, 3)}, four) == WHOLE


def test_npz_keyed_x_with_labels_for_a_single_input(tmp_path):
    from sdk.sources import open_source

    p = tmp_path / "d.npz"
    np.savez(p, x=np.ones((3, 1, 2), np.float32), y=np.array([1, 0, 1]))
    src = open_source(p, [TensorSpec("image", ("N", 1, 2), "float32")])
    got = list(src.samples())
    assert len(got) == 3 and got[0][0]["image"].shape == (1, 1, 2) and [int(y) for _, y in got] == [1, 0, 1]


def test_save_npz_is_deterministic(tmp_path):
    from sdk.data import save_npz

    arrays = {"b": np.arange(6, dtype=np.int64), "a": np.ones((2, 3), np.float32)}
    save_npz(tmp_path / "1.npz", arrays)
    time.sleep(1.1)  # np.savez would stamp a new time into the zip
    save_npz(tmp_path / "2.npz", dict(reversed(list(arrays.items()))))
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("1.npz", "2.npz")]
    assert digest[0] == digest[1]
    with np.load(tmp_path / "1.npz") as z:
        assert z["a"].tolist() == arrays["a"].tolist() and z["b"].tolist() == list(range(6))
    assert sorted(os.listdir(tmp_path)) == ["1.npz", "2.npz"]


# -- verdict lines -----------------------------------------------------------------------------------------
def _result(checks, spec=True):
    from sdk.validation.checks import CheckResult
    from sdk.validation.run import BoardRun, ValidationResult

    run = BoardRun("b", checks=[CheckResult("board.run", "pass")] + [CheckResult(n, v, reason="no sensor")
                                                                     for n, v in checks])
    return ValidationResult([run], {}, {}, {}, {} if not spec else {"budgets": {}})


def test_summary_lines():
    from sdk.validation.run import strict_checks

    assert _result([]).summary_line().startswith("GO: the model ran on every board; no budget was checked")
    assert _result([("latency.p50", "pass")]).summary_line() == "GO: every check passed"
    r = _result([("latency.p50", "pass"), ("power.mean", "skip"), ("device.temperature", "skip")])
    assert r.summary_line() == "GO (2 budgets not verified: power, temperature)" and r.exit_code == 0
    r.boards[0].checks = strict_checks(r.boards[0].checks)
    assert r.exit_code == 1 and r.summary_line() == "NO-GO: 2 check(s) failed"
    assert "not verified (--strict): no sensor" in r.boards[0].checks[2].reason


# -- board cache ---------------------------------------------------------------------------------------------
def test_trim_cache_evicts_least_recently_used(tmp_path):
    from sdk.remote.agent.commands import trim_cache

    now = time.time()
    for i, name in enumerate(["old.npz", "mid.npz", "new.npz", "keep.npz", "up.npz.part"]):
        p = tmp_path / name
        p.write_bytes(b"x" * 100)
        os.utime(p, (now - 100 + i, now - 100 + (i if name != "keep.npz" else -50)))
    state = trim_cache(tmp_path, 250, keep=[tmp_path / "keep.npz"])
    # oldest first until under the cap; the file in use and an upload in progress stay
    assert sorted(os.listdir(tmp_path)) == ["keep.npz", "up.npz.part"]
    assert state["evicted"] == 3 and state["bytes"] == 200 and state["evicted_bytes"] == 300


# -- CLI plumbing ------------------------------------------------------------------------------------------
def test_preprocess_items_are_spread_and_usage_errors_are_one_line(capsys):
    from sdk.cli import _spread_key_values
    from tests.clirun import run_cli

    assert _spread_key_values(["bench", "m", "--preprocess", "size=2x2", "mean=1,1,1", "--runs", "3"]) == \
        ["bench", "m", "--preprocess", "size=2x2", "--preprocess", "mean=1,1,1", "--runs", "3"]
    assert _spread_key_values(["bench", "--preprocess=size=2x2", "std=2,2,2", "m"]) == \
        ["bench", "--preprocess=size=2x2", "--preprocess", "std=2,2,2", "m"]
    code, out, err = run_cli(["bench", "model.onnx", "--no-such-flag"], capsys)
    assert code == 2 and err.strip().splitlines() == ["error: No such option: --no-such-flag (see 'sdk bench --help')"]


def test_help_has_plain_metavars(capsys):
    from tests.clirun import run_cli

    code, out, _ = run_cli(["validate", "--help"], capsys)
    assert code == 0 and "<bool>" not in out and "<list[str]>" not in out and "--strict" in out


def test_cuda_toolkit_without_driver(tmp_path):
    from sdk.remote.agent.facts import cuda_facts

    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.json").write_text('{"cuda": {"version": "12.6.77"}}')
    facts = cuda_facts(str(tmp_path), None)
    assert facts["cuda"] is None and facts["cuda_toolkit"] == "12.6.77" and "toolkit only, no driver" in facts["cuda_note"]
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n")
    facts = cuda_facts(str(tmp_path), None)
    assert facts["cuda"] == "12.6.77" and facts["cuda_driver"] == "550.54.14" and "cuda_note" not in facts
    assert cuda_facts(str(tmp_path / "none"), "35.4.1")["cuda_driver"] == "l4t"


def test_runtime_info_lines_are_held_back(capfd):
    from sdk.formats.tflite import quiet_native_info

    with quiet_native_info():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\nWARNING: kept\n")
    err = capfd.readouterr().err
    assert "INFO: Created" not in err and "WARNING: kept" in err


def test_bench_reads_the_example_eval_npz_like_validate(capsys, example_model, example_eval):
    """``sdk bench digits_cnn.onnx --data eval.npz`` (arrays x, y) once failed with "no array for
    model input 'image'" while validate accepted the same file."""
    import json

    from tests.clirun import run_cli

    code, out, err = run_cli(["bench", example_model, "--data", example_eval, "--runs", "3", "--min-seconds", "0",
                              "--json", "-"], capsys)
    assert code == 0, err
    assert json.loads(out)["settings"]["data"] == str(example_eval)
