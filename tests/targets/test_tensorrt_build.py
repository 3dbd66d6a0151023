"""TensorRT target pieces that need no GPU: build-config translation (options over board-profile
defaults), optimisation profiles, device checks, calibration caches, engine cache keys and the
reasons it gives for a rebuild, and how the target reports itself where TensorRT is missing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sdk.errors import ConfigError, InputError, TargetUnavailableError
from sdk.targets import get_target, target_class, target_names
from sdk.targets.tensorrt.build import (BuildConfig, build_config, check_device_support, has_qdq, int8_supported,
                                         plan_profiles)
from sdk.targets.tensorrt.cache import EngineCache, EngineKey
from sdk.targets.tensorrt.calib import (CalibrationCache, check_cache_version, read_calibration_cache,
                                         trt_version_code, version_from_code, write_calibration_cache)
from sdk.tensors import TensorSpec

ORIN = ("Orin", (8, 7))
NANO = ("NVIDIA Tegra X1", (5, 3))


# -- build config -----------------------------------------------------------------------------------
def test_options_override_board_defaults():
    board_runtime = {"targets": ["tensorrt", "onnxruntime"], "precision": "fp16", "dla_core": 0}
    cfg = build_config({"precision": None, "workspace_mib": 512}, board_runtime)
    assert cfg.precision == "fp16" and cfg.dla_core == 0 and cfg.workspace_mib == 512 and cfg.gpu_fallback
    cfg = build_config({"precision": "int8", "dla_core": "none"}, board_runtime)
    assert cfg.precision == "int8" and cfg.dla_core is None
    assert build_config({}).precision == "fp32"
    assert build_config({"precision": "float16"}).precision == "fp16"


def test_build_config_profiles_from_cli_and_dicts():
    cfg = build_config({"input_shapes": ["x=1x3x320x320:1x3x640x640:1x3x960x960"]})
    assert cfg.profiles == {"x": ((1, 3, 320, 320), (1, 3, 640, 640), (1, 3, 960, 960))}
    cfg = build_config({"input_shapes": {"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]], "y": (1, 10)}})
    assert cfg.profiles["x"][2] == (4, 3, 8, 8) and cfg.profiles["y"] == ((1, 10),) * 3
    assert build_config({"input_shapes": "x=1x4"}).profiles == {"x": ((1, 4),) * 3}


@pytest.mark.parametrize("opts,err,match", [
    ({"precision": "int4"}, InputError, "unknown TensorRT precision"),
    ({"dla_core": 0, "precision": "fp32"}, InputError, "DLA runs fp16 or int8"),
    ({"workspace_mib": 0}, InputError, "workspace_mib"),
    ({"optimization_level": 9}, InputError, "0-5"),
    ({"turbo": True}, ConfigError, "unknown TensorRT build option"),
    ({"input_shapes": ["x=4x3:1x3:8x3"]}, InputError, "min <= opt <= max"),
])
def test_build_config_rejects(opts, err, match):
    with pytest.raises(err, match=match):
        build_config(opts)


def test_key_parts_ignore_what_does_not_change_the_engine():
    a = build_config({"precision": "fp16", "timing_cache": "/tmp/a", "workspace_mib": 64})
    b = build_config({"precision": "fp16", "timing_cache": "/tmp/b", "workspace_mib": 128})
    assert a.key_parts() == b.key_parts()
    assert a.key_parts() != build_config({"precision": "fp32"}).key_parts()


# -- profiles ---------------------------------------------------------------------------------------
INPUTS = [TensorSpec("images", ("N", 3, None, None), "float32"), TensorSpec("scale", (1, 2), "float32")]


def test_plan_profiles_dynamic_input_needs_one():
    with pytest.raises(InputError, match=r"input 'images' has a dynamic shape.*no optimisation profile") as exc:
        plan_profiles(INPUTS, {})
    assert "--input-shape images=" in str(exc.value)
    prof = ((1, 3, 320, 320), (1, 3, 640, 640), (4, 3, 960, 960))
    assert plan_profiles(INPUTS, {"images": prof}) == {"images": prof}
    assert plan_profiles(INPUTS, {"images": prof, "scale": ((1, 2),) * 3}) == {"images": prof}


@pytest.mark.parametrize("profiles,match", [
    ({"img": ((1, 3, 8, 8),) * 3}, "not a model input"),
    ({"images": ((1, 3, 8),) * 3}, "rank"),
    ({"images": ((1, 4, 8, 8),) * 3}, "fixes it to 3"),
    ({"images": ((1, 3, 8, 8),) * 3, "scale": ((1, 3),) * 3}, "fixes it to 2"),
])
def test_plan_profiles_errors(profiles, match):
    with pytest.raises(InputError, match=match):
        plan_profiles(INPUTS, profiles)


# -- device support ----------------------------------------------------------------------------------
def test_device_support():
    assert int8_supported((8, 7)) and int8_supported((6, 1)) and int8_supported((7, 2))
    assert not int8_supported((5, 3)) and not int8_supported((6, 2))
    with pytest.raises(InputError, match="int8 needs a GPU with compute capability") as exc:
        check_device_support(BuildConfig(precision="int8"), *NANO)
    assert "fp16" in str(exc.value)
    assert check_device_support(BuildConfig(precision="int8"), *ORIN) == []
    with pytest.raises(InputError, match="DLA core 2 .* DLA cores 0..1"):
        check_device_support(BuildConfig(precision="fp16", dla_core=2), *ORIN, num_dla_cores=2)
    with pytest.raises(InputError, match="no DLA cores"):
        check_device_support(BuildConfig(precision="fp16", dla_core=0), *NANO)
    assert check_device_support(BuildConfig(precision="fp16"), "GTX 1080", (6, 1))  # a warning: slow fp16


# -- calibration caches ------------------------------------------------------------------------------
def test_calibration_cache_round_trip(tmp_path):
    text = "TRT-8510-EntropyCalibration2\nimages: 3c010a14\nconv1_out: 3d4ccccd\n/model/Add_output_0: 3f800000\n"
    cache = CalibrationCache.from_text(text)
    assert cache.version == 8510 and cache.algorithm == "EntropyCalibration2"
    assert cache.scales["conv1_out"] == pytest.approx(0.05, rel=1e-6)
    assert cache.scales["/model/Add_output_0"] == 1.0
    assert cache.trt_version == (8, 5)
    path = write_calibration_cache(tmp_path / "calib.cache", cache)
    assert path.read_text() == text
    again = read_calibration_cache(path)
    assert again.scales == cache.scales and again.to_text() == text
    scales = {"x": np.float32(0.0123), "y": np.float32(1e-8)}
    c2 = CalibrationCache(trt_version_code("8.6.1"), "MinMaxCalibration", {k: float(v) for k, v in scales.items()})
    back = CalibrationCache.from_text(c2.to_text())
    assert {k: np.float32(v) for k, v in back.scales.items()} == scales


@pytest.mark.parametrize("text,match", [("", "empty"), ("hello\nx: 00000000", "not a TensorRT header"),
                                        ("TRT-8510-EntropyCalibration2\nx: 12", "8 hex digits")])
def test_calibration_cache_errors(text, match):
    with pytest.raises(InputError, match=match):
        CalibrationCache.from_text(text)


def test_calibration_cache_version_check():
    assert trt_version_code("8.5.2.2") == 8502 and trt_version_code("10.3.0") == 100300
    assert version_from_code(8601) == (8, 6) and version_from_code(100300) == (10, 3)
    cache = CalibrationCache(8510, "EntropyCalibration2")
    check_cache_version(cache, "8.5.2.2")
    with pytest.raises(InputError, match=r"written by TensorRT 8.5, this is TensorRT 8.6.1.*recalibrate"):
        check_cache_version(cache, "8.6.1")


# -- engine cache -----------------------------------------------------------------------------------
def _key(**kw):
    base = dict(model_sha256="ab" * 32, trt_version="8.5.2.2", gpu_name="Orin", compute_capability=(8, 7),
                request=build_config({"precision": "fp16"}).key_parts())
    base.update(kw)
    return EngineKey(**base)


def test_engine_key_depends_on_everything_that_matters():
    k = _key()
    assert k.digest() == _key().digest()
    for other in (_key(model_sha256="cd" * 32), _key(trt_version="8.6.1"), _key(gpu_name="Xavier"),
                  _key(compute_capability=(7, 2)), _key(request=build_config({"precision": "int8"}).key_parts()),
                  _key(request=build_config({"precision": "fp16", "dla_core": 0}).key_parts()),
                  _key(request=build_config({"precision": "fp16", "input_shapes": ["x=1x3"]}).key_parts())):
        assert other.digest() != k.digest()
    assert EngineKey.from_dict(json.loads(json.dumps(k.to_dict()))) == k


def test_engine_cache_hit_and_rebuild_reasons(tmp_path):
    cache = EngineCache(tmp_path)
    k = _key()
    miss = cache.lookup(k)
    assert not miss.hit and "no cached engine" in miss.reason
    path = cache.store(k, b"engine-bytes", {"int8_mode": None})
    hit = cache.lookup(k)
    assert hit.hit and hit.path == path and hit.meta["engine_sha256"]
    # another TensorRT on the same board: rebuilt, and the reason says why
    newer = cache.lookup(_key(trt_version="8.6.1"))
    assert not newer.hit and "TensorRT 8.5.2.2, this is TensorRT 8.6.1" in newer.reason
    other_gpu = cache.lookup(_key(gpu_name="Xavier", compute_capability=(7, 2)))
    assert not other_gpu.hit and "GPU Orin (sm_87), this is Xavier (sm_72)" in other_gpu.reason
    # a different request is simply a miss
    assert "no cached engine" in cache.lookup(_key(request={"precision": "fp32"})).reason
    # a damaged file is rebuilt
    path.write_bytes(b"truncated")
    assert "changed on disk" in cache.lookup(k).reason
    cache.invalidate(k)
    assert not cache.lookup(k).hit


def test_has_qdq_detects_explicit_quantization(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
    zp = helper.make_tensor("z", TensorProto.INT8, [], [0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    qdq = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [scale, zp]))
    plain = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    assert has_qdq(qdq.SerializeToString()) and not has_qdq(plain.SerializeToString())


# -- the target where TensorRT is missing ---------------------------------------------------------------
def _trt_installed():
    from sdk.probe import module_installed

    return module_installed("tensorrt")


def test_target_is_registered():
    assert "tensorrt" in target_names()
    assert target_class("tensorrt").name == "tensorrt"


@pytest.mark.skipif(_trt_installed(), reason="this machine has TensorRT: the not-installed path does not apply")
def test_unavailable_with_a_clear_reason(conv_model):
    cls = target_class("tensorrt")
    for deep in (False, True):
        avail = cls.availability(deep=deep)
        assert not avail.available and "tensorrt Python package is not installed" in avail.reason
    target = get_target("tensorrt", precision="fp16")
    with pytest.raises(TargetUnavailableError, match="target 'tensorrt' is not available.*JetPack"):
        target.prepare(conv_model)


def test_target_build_config_translation():
    target = get_target("tensorrt", precision="fp16", board_defaults={"precision": "int8", "dla_core": 1,
                                                                     "targets": ["tensorrt"]})
    cfg = target.build_config(input_shapes=["x=1x3x16x16:2x3x16x16:4x3x16x16"])
    assert cfg.precision == "fp16" and cfg.dla_core == 1 and cfg.profiles["x"][1] == (2, 3, 16, 16)
    with pytest.raises(InputError, match="has no option"):
        get_target("tensorrt", turbo=True)
