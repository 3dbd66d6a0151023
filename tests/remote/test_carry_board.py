"""A streaming model's recurrent state carried across runs (``--carry OUTPUT=INPUT``) on a board:
``sdk push`` and the board agent's bench, the agent's ``infer`` (samples in order, each fed the
state the one before left), and ``sdk validate``, on the reference and on the board alike.

The model (``tests/controlflow.py``'s ``if_rate_model``) computes ``stateN = state + 1``: after k
carried runs from a zero state every element of the state is k, so each check reads the count."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from sdk.remote import Board
from tests import controlflow

SHAPES = ["--input-shape", "x=1x4", "--input-shape", "state=2x1x3", "--input-value", "sr=16000"]


@pytest.fixture
def if_model(tmp_path):
    return controlflow.if_rate_model(tmp_path / "if_rate.onnx")


def _sdk(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def _stream(tmp_path, n=5):
    """``n`` samples of x, one zero initial state (no sample axis), as `--sample-axis state=none` reads it."""
    p = tmp_path / "stream.npz"
    np.savez(p, x=np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32),
             state=np.zeros((2, 1, 3), np.float32))
    return p


def test_board_infer_carries_the_state_from_sample_to_sample(client_home, if_model, tmp_path):
    """Without carry each sample starts from its own zero state (stateN = 1 everywhere); with it
    sample i leaves i + 1, on the real agent of the local board."""
    n = 4
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.ones((n, 1, 4), np.float32), state=np.zeros((n, 2, 1, 3), np.float32),
             sr=np.full((n,), 16000, np.int64))
    with Board("local") as board:
        plain = board.infer(if_model, feeds)
        carried = board.infer(if_model, feeds, carry={"stateN": "state"})
    assert plain["stateN"].shape == (n, 2, 1, 3) and np.all(plain["stateN"] == 1)
    assert [float(s.max()) for s in carried["stateN"]] == [1.0, 2.0, 3.0, 4.0]
    assert np.allclose(carried["y"], plain["y"])      # the data path is unchanged


def test_push_carries_the_state_on_the_board_and_says_so(client_home, if_model, tmp_path):
    out = tmp_path / "push.json"
    proc = _sdk("push", if_model, "-b", "local", *SHAPES, "--carry", "stateN=state", "--runs", "5",
                "--min-seconds", "0", "--warmup", "1", "--idle-seconds", "0", "--json", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())[0]
    assert doc["settings"]["carry"] == {"stateN": "state"} and doc["latency_ms"]["count"] >= 5


@pytest.mark.parametrize("carry,why", [("state=stateN", "'state' is not a model output"),
                                       ("stateN=x2", "'x2' is not a model input"),
                                       ("stateN", "bad --carry 'stateN'")])
def test_a_bad_carry_is_refused_before_any_board_work(client_home, if_model, carry, why):
    for cmd in ("push", "validate"):
        proc = _sdk(cmd, if_model, "-b", "local", *SHAPES, "--carry", carry)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and why in lines[0], (cmd, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr


def test_validate_carries_the_state_on_the_reference_and_the_board(client_home, if_model, tmp_path):
    """With --carry the data's one initial state starts the stream on the reference and on the
    board, the timed runs carry it too (settings), and the board's outputs equal the reference's."""
    data = _stream(tmp_path)
    common = ["validate", if_model, "-b", "local", "--data", data, "--sample-axis", "state=none",
              "--input-value", "sr=16000", "-q"]
    proc = _sdk(*common, "--carry", "stateN=state", "--json", tmp_path / "carried.json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads((tmp_path / "carried.json").read_text())
    assert doc["data"]["carry"] == {"stateN": "state"}
    board = doc["boards"][0]
    assert board["verdict"] == "pass" and board["benchmark"]["settings"]["carry"] == {"stateN": "state"}
    assert board["compare"]["stateN"]["max_abs_error"] == 0.0 and board["compare"]["y"]["max_abs_error"] < 1e-5


def test_the_host_reference_runs_samples_in_order_with_the_state_carried(if_model):
    """What validate's reference (and a host:TARGET board) computes with --carry: sample i leaves i + 1."""
    from sdk.validation.runners import HostRunner

    n = 5
    arrays = {"x": np.ones((n, 1, 4), np.float32), "state": np.zeros((n, 2, 1, 3), np.float32),
              "sr": np.full((n,), 16000, np.int64)}
    with HostRunner("onnxruntime") as ref:
        carried = ref.run_arrays(if_model, arrays, stacked=True, carry={"stateN": "state"})
        plain = ref.run_arrays(if_model, arrays, stacked=True)
    assert [float(s.max()) for s in carried["stateN"]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert np.all(plain["stateN"] == 1)
