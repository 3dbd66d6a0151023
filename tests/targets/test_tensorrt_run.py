"""The TensorRT target end to end (marked ``tensorrt``: runs wherever TensorRT, a GPU and a CUDA
backend exist; skipped with the target's own availability reason elsewhere)."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import InputError, UnsupportedModelError
from sdk.targets import get_target, target_class

pytestmark = [pytest.mark.tensorrt, pytest.mark.gpu]

_AVAIL = target_class("tensorrt").availability(deep=True)
if not _AVAIL.available:
    pytestmark.append(pytest.mark.skip(reason=f"no TensorRT libraries on this machine: {_AVAIL.reason}"))

PROFILE = ["x=1x3x16x16:2x3x16x16:4x3x16x16"]


@pytest.fixture()
def target(tmp_path):
    return get_target("tensorrt", precision="fp32", cache_dir=str(tmp_path / "engines"), input_shapes=PROFILE)


def _ort(model, x):
    return get_target("onnxruntime").open(model).run({"x": x})


def test_build_run_and_cache(target, conv_model):
    art = target.prepare(conv_model)
    assert art.metadata["cache"]["hit"] is False and art.path.is_file()
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16), dtype=np.float32)
    with target.open(art) as sess:
        got = sess.run({"x": x})
        lat = sess.latency({"x": x}, warmup=2, min_runs=20, min_seconds=0.05)
    want = _ort(conv_model, x)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-4)
    assert lat.gpu_compute.count >= 20 and lat.end_to_end.p50_ms >= lat.gpu_compute.p50_ms * 0.5
    again = target.prepare(conv_model)
    assert again.metadata["cache"]["hit"] is True and again.path == art.path


def test_fp16_and_layer_profile(tmp_path, conv_model):
    t = get_target("tensorrt", precision="fp16", cache_dir=str(tmp_path), input_shapes=PROFILE, layer_profile=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16), dtype=np.float32)
    with t.open(t.prepare(conv_model)) as sess:
        got = sess.run({"x": x})
        lat = sess.latency({"x": x}, warmup=1, min_runs=5, min_seconds=0.0)
    want = _ort(conv_model, x)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=5e-2, atol=5e-2)
    assert lat.layers and all(l.count > 0 for l in lat.layers)


def test_shape_outside_profile(target, conv_model):
    with target.open(target.prepare(conv_model)) as sess:
        with pytest.raises(InputError, match="outside the engine's profile"):
            sess.run({"x": np.zeros((8, 3, 16, 16), np.float32)})


def test_dynamic_input_without_profile(tmp_path, conv_model):
    t = get_target("tensorrt", cache_dir=str(tmp_path))
    with pytest.raises(InputError, match="no optimisation profile"):
        t.prepare(conv_model)


def test_int8_without_qdq_or_cache(tmp_path, conv_model):
    t = get_target("tensorrt", precision="int8", cache_dir=str(tmp_path), input_shapes=PROFILE)
    with pytest.raises(InputError, match="no Q/DQ nodes and no calibration cache"):
        t.prepare(conv_model)


def test_odd_input_inside_the_profile_names_the_input_and_the_stride(tmp_path):
    """Conv stride 2 and a 2x2 pool joined by Concat: 63 x 63 is inside the profile, but the two maps
    are 32 and 31 wide; TensorRT's shape check fails and the error says H and W must be even."""
    from tests.sdk.test_onnx_diagnose import pyramid_model

    path = pyramid_model(tmp_path / "pyramid.onnx")
    t = get_target("tensorrt", precision="fp32", cache_dir=str(tmp_path / "engines"),
                   input_shapes=["x=1x3x32x32:1x3x64x64:1x3x96x96"])
    with t.open(t.prepare(path)) as sess:
        assert sess.run({"x": np.zeros((1, 3, 64, 64), np.float32)})["y"].shape == (1, 6, 32, 32)
        with pytest.raises(InputError, match=r"input 'x' has H x W 63 x 63.*multiples of 2"):
            sess.run({"x": np.zeros((1, 3, 63, 63), np.float32)})


def test_parser_error_names_the_node(tmp_path):
    from onnx import TensorProto, helper

    from sdk.model import Model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("FancyUnknownOp", ["x"], ["y"], name="my_weird_node", domain="com.example")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    t = get_target("tensorrt", cache_dir=str(tmp_path))
    with pytest.raises(UnsupportedModelError, match="TensorRT cannot parse the model.*(my_weird_node|FancyUnknownOp)"):
        t.prepare(Model(path))


def test_engine_from_another_version_is_refused(target, conv_model):
    from sdk.errors import BuildError

    art = target.prepare(conv_model)
    art.metadata["trt_version"] = "7.1.3"
    with pytest.raises(BuildError, match="built with TensorRT 7.1.3.*rebuild"):
        target.open(art)


def test_damaged_engine_is_rebuilt(target, conv_model):
    art = target.prepare(conv_model)
    art.path.write_bytes(b"not an engine")
    again = target.prepare(conv_model)
    assert again.metadata["cache"]["hit"] is False and "changed on disk" in again.metadata["cache"]["reason"]
    with target.open(again) as sess:
        assert sess.run({"x": np.zeros((1, 3, 16, 16), np.float32)})
