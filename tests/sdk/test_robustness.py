"""Corruptions (seeded, reproducible, dtype/range kept) and the sweep with a real ONNX model."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import ConfigError, InputError
from sdk.robustness import (CORRUPTIONS, corrupt, corrupt_batch, from_hwc, parse_corruptions, parse_severities,
                            sweep, to_hwc)

RANDOM = ("noise", "rotate", "occlusion")  # corruptions that draw random numbers


@pytest.fixture(scope="module")
def photo():
    """A smooth colour image with edges (gradients plus a bright square), uint8 HWC."""
    y, x = np.mgrid[0:48, 0:64]
    img = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.float32)
    img[12:30, 20:44] = 240
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_uint8_shape_dtype_and_reproducible(photo, name):
    a = corrupt(photo, name, 3, seed=7)
    b = corrupt(photo, name, 3, seed=7)
    assert a.shape == photo.shape and a.dtype == np.uint8
    assert np.array_equal(a, b), "same seed, same result"
    assert not np.array_equal(a, photo), "a corruption changes the image"
    if name in RANDOM:
        assert not np.array_equal(a, corrupt(photo, name, 3, seed=8)), "another seed, another draw"


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_severity_increases_damage(photo, name):
    def damage(sev):
        return float(np.mean([np.abs(corrupt(photo, name, sev, seed=s).astype(float) - photo).mean() for s in range(3)]))

    assert damage(5) > damage(1)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_float_images_keep_range_and_dtype(name):
    rng = np.random.default_rng(0)
    img = (rng.random((8, 8, 1)) * 16).astype(np.float32)  # digits-like: 0..16
    out = corrupt(img, name, 4, seed=1, value_range=(0.0, 16.0))
    assert out.dtype == np.float32 and out.shape == img.shape
    assert out.min() >= 0.0 and out.max() <= 16.0


def test_index_enters_the_seed_and_subsets_are_stable(photo):
    imgs = [photo, photo[::-1].copy(), photo[:, ::-1].copy()]
    full = corrupt_batch(imgs, "noise", 2, seed=3)
    assert np.array_equal(full[1], corrupt(imgs[1], "noise", 2, seed=3, index=1))
    assert not np.array_equal(corrupt(photo, "noise", 2, seed=3, index=0), corrupt(photo, "noise", 2, seed=3, index=1))


def test_jpeg_quality_orders_error(photo):
    errs = [np.abs(corrupt(photo, "jpeg", s).astype(float) - photo).mean() for s in (1, 3, 5)]
    assert errs[0] < errs[1] < errs[2]
    gray = photo[..., :1].copy()
    assert corrupt(gray, "jpeg", 2).shape == gray.shape


def test_parse_helpers():
    assert parse_severities("1-5") == [1, 2, 3, 4, 5]
    assert parse_severities("1,3,5") == [1, 3, 5]
    assert parse_severities("2-3,5") == [2, 3, 5]
    assert parse_severities([3, 1]) == [1, 3]
    for bad in ("0-2", "6", "x", "", [7]):
        with pytest.raises(InputError):
            parse_severities(bad)
    assert parse_corruptions("blur, noise") == ["blur", "noise"]
    assert parse_corruptions(None) == list(CORRUPTIONS)
    with pytest.raises(ConfigError, match="unknown corruption 'fog'.*blur"):
        parse_corruptions("blur,fog")
    with pytest.raises(InputError):
        corrupt(np.zeros((4, 4), np.uint8), "blur", 1)
    with pytest.raises(InputError):
        corrupt(np.zeros((4, 4, 3), np.int32), "blur", 1)


def test_layout_round_trip():
    x = np.arange(2 * 1 * 8 * 8, dtype=np.float32).reshape(2, 1, 8, 8)
    hwc, layout = to_hwc(x)
    assert layout == "NCHW" and hwc.shape == (2, 8, 8, 1)
    assert np.array_equal(from_hwc(hwc, layout), x)
    y = np.zeros((2, 16, 16, 3), np.uint8)
    assert to_hwc(y)[1] == "NHWC"


def test_sweep_with_the_example_model(example_model, example_eval):
    """Real ONNX Runtime on the digits CNN: drift grows with severity, top-1 drops, reproducible."""
    from sdk.validation import HostRunner

    data = np.load(example_eval)
    x, y = data["x"][:120], data["y"][:120]
    calls = []
    with HostRunner("onnxruntime") as runner:
        def infer(batch):
            calls.append(len(batch))
            return runner.run_arrays(example_model, {"image": batch})

        hwc, layout = to_hwc(x)
        kwargs = dict(prepare=lambda imgs: from_hwc(np.stack(imgs), layout), labels=y,
                      corruptions=["noise", "contrast"], severities="1,5", seed=0, value_range=(0.0, 1.0))
        res = sweep(infer, list(hwc), **kwargs)
        again = sweep(infer, list(hwc), **kwargs)
    assert len(calls) == 2, "all variants go to the model in one call per sweep"
    assert res.to_dict() == again.to_dict()
    assert [(r["corruption"], r["severity"]) for r in res.rows] == [("noise", 1), ("noise", 5), ("contrast", 1), ("contrast", 5)]
    rows = {(r["corruption"], r["severity"]): r for r in res.rows}
    assert res.clean["top1"] > 0.9
    for c in ("noise", "contrast"):
        assert rows[(c, 5)]["cosine"] < rows[(c, 1)]["cosine"]
        assert rows[(c, 5)]["top1_drop"] > rows[(c, 1)]["top1_drop"]
    assert res.worst("top1_drop")["severity"] == 5
    assert res.worst("top1_drop", severities=[1])["severity"] == 1
    with pytest.raises(InputError, match="labels"):
        sweep(infer, list(hwc), labels=y[:5], corruptions=["noise"], severities=[1])


def _gain_model(path):
    """``image [N, 3, 8, 8]`` times ``gain`` (a float scalar input that is not data), then the
    per-channel mean: ``y [N, 3]`` (its value is gain x the channel means, so a wrong gain shows)."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Mul", ["image", "gain"], ["scaled"]),
         helper.make_node("ReduceMean", ["scaled"], ["y"], axes=[2, 3], keepdims=0)],
        "gain", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 8, 8]),
                 helper.make_tensor_value_info("gain", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("board", [None, "local"])
def test_sweep_of_a_model_with_an_input_value(tmp_path, board, monkeypatch):
    """The image input is corrupted, the value input goes with every sample unchanged (host and
    the local board's agent); without --input-value the sweep says which option to give."""
    from sdk.validation import run_robustness

    if board:
        monkeypatch.setenv("HOME", str(tmp_path))   # the local board's workdir under this test's HOME
    model = _gain_model(tmp_path / "gain.onnx")
    rng = np.random.default_rng(0)
    data = tmp_path / "images.npy"
    np.save(data, rng.uniform(0, 1, size=(6, 3, 8, 8)).astype(np.float32))
    with pytest.raises(InputError, match="--input-value"):
        run_robustness(model, data, board=board, corruptions="noise", severities="1")
    out = run_robustness(model, data, board=board, corruptions="noise,brightness", severities="1,5",
                         input_values=["gain=2"])
    rows = out["robustness"]["rows"]
    assert len(rows) == 4 and out["verdict"] == "pass"
    cos = {(r["corruption"], r["severity"]): r["cosine"] for r in rows}
    assert cos[("noise", 5)] < cos[("noise", 1)] <= 1.0          # more noise, more drift
    assert out["data"]["samples"] == 6


def test_robustness_cli_takes_input_values(tmp_path, capsys):
    import json

    from tests.clirun import run_cli

    model = _gain_model(tmp_path / "gain.onnx")
    data = tmp_path / "images.npy"
    np.save(data, np.random.default_rng(1).uniform(0, 1, size=(4, 3, 8, 8)).astype(np.float32))
    code, _, err = run_cli(["robustness", model, "--data", data, "--corruptions", "blur", "--severities", "2",
                            "--input-value", "gain=0.5", "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    rows = json.loads((tmp_path / "r.json").read_text())["robustness"]["rows"]
    assert [(r["corruption"], r["severity"]) for r in rows] == [("blur", 2)]
