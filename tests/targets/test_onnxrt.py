"""The onnxruntime target on real models."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from sdk import Model, benchmark, get_target
from sdk.errors import BuildError, InferenceError, InputError, TargetUnavailableError
from sdk.targets import target_class


def test_availability_cheap_and_deep():
    cls = target_class("onnxruntime")
    assert cls.is_available()
    deep = cls.availability(deep=True)
    assert deep.version == ort.__version__
    assert "cpu" in deep.details["providers"]


def test_session_matches_raw_ort(conv_model):
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16), dtype=np.float32)
    ref = ort.InferenceSession(str(conv_model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with get_target("onnxruntime", threads=1).open(conv_model) as s:
        assert [i.name for i in s.inputs] == ["x"] and s.outputs[0].shape == ("N", 10)
        out = s.run({"x": x})
    np.testing.assert_allclose(out["logits"], ref, rtol=1e-5, atol=1e-6)
    assert s.closed


def test_multi_input_and_fp16(two_input_model, fp16_model):
    with get_target("onnxruntime").open(two_input_model) as s:
        out = s.run({"a": np.full((2, 3), 2, np.float32), "b": np.full((2, 3), 3, np.int64)})
    assert out["out"].tolist() == [[6.0] * 3] * 2
    with get_target("onnxruntime").open(fp16_model) as s:
        y = s.run({"x": np.ones((3, 8), np.float16)})["y"]
    assert y.dtype == np.float16 and y.shape == (3, 4)


def test_bad_feeds_are_named(conv_model):
    with get_target("onnxruntime").open(conv_model) as s:
        with pytest.raises(InputError, match="'x' has dtype float64"):
            s.run({"x": np.ones((1, 3, 16, 16))})
        with pytest.raises(InputError, match="no array for model input 'x'"):
            s.run({})
        with pytest.raises(InputError, match="shape"):
            s.run({"x": np.ones((1, 3, 8, 8), np.float32)})
    with pytest.raises(InferenceError, match="closed"):
        s.run({"x": np.ones((1, 3, 16, 16), np.float32)})


def test_unknown_and_missing_provider(conv_model):
    with pytest.raises(InputError, match="unknown execution provider 'warp'"):
        get_target("onnxruntime", providers=["warp"]).prepare(conv_model)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(TargetUnavailableError, match="'cuda' is not in this onnxruntime build.*onnxruntime-gpu"):
            get_target("onnxruntime", providers=["cuda"]).prepare(conv_model)


def test_graph_optimization_and_save(conv_model, tmp_path):
    out = tmp_path / "opt" / "conv.opt.onnx"
    t = get_target("onnxruntime", graph_optimization="basic", save_optimized=str(out))
    art = t.prepare(conv_model)
    assert out.exists() and art.metadata["optimized_model"] == str(out)
    Model.load(out)  # the saved graph is itself a valid model
    with pytest.raises(InputError, match="graph optimisation level"):
        get_target("onnxruntime", graph_optimization="max").open(conv_model)


def test_runtime_rejects_model(tmp_path):
    from onnx import TensorProto, helper

    # Valid for the checker, but the op has no implementation in onnxruntime.
    g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    p = tmp_path / "custom.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(BuildError, match="onnxruntime could not create a session.*NoSuchOp"):
        get_target("onnxruntime").open(p)


def test_in_memory_model(conv_model):
    m = Model.load(conv_model).with_input_shapes({"x": [1, 3, 16, 16]})
    with get_target("onnxruntime").open(m) as s:
        assert s.inputs[0].shape == (1, 3, 16, 16)


def test_io_binding_runner(static_conv_model):
    x = np.ones((1, 3, 16, 16), np.float32)
    with get_target("onnxruntime", io_binding=True).open(static_conv_model) as s:
        run = s.runner({"x": x})
        for _ in range(3):
            run()
        assert s.run({"x": x})["logits"].shape == (1, 10)


def test_benchmark_result(example_model, example_eval, tmp_path):
    res = benchmark(example_model, "onnxruntime", input_shapes={"image": [1, 1, 8, 8]}, runs=30, min_seconds=0.05,
                    warmup=2)
    d = res.to_dict()
    assert d["latency_ms"]["count"] >= 30 and d["throughput_ips"] > 0
    assert d["target"] == "onnxruntime" and d["model"]["sha256"] == Model.load(example_model).sha256
    assert d["host"]["cores"] >= 1 and "onnxruntime" in d["host"]["runtimes"]
    assert d["inputs"][0]["shape"] == [1, 1, 8, 8]
    # real data from an .npz (one array for a single-input model)
    x = np.load(example_eval)["x"][:4]
    np.save(tmp_path / "x.npy", x)
    res = benchmark(example_model, "onnxruntime", data=tmp_path / "x.npy", runs=10, min_seconds=0, warmup=1)
    assert res.stats.count == 10 and res.settings["data"].endswith("x.npy")
