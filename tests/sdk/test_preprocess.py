"""``sdk.preprocess``: the fast OpenCV path equals the NumPy reference (and the usual OpenCV chain),
for every layout, dtype, colour order and resize mode; the spec's validation and round trip."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from sdk.errors import ConfigError, InputError
from sdk.preprocess import PreprocessSpec, preprocess, preprocess_reference

MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)
CASES = list(itertools.product(("resize", "letterbox"), ("NCHW", "NHWC"), ("float32", "float16", "uint8"),
                               ("BGR", "RGB")))


@pytest.mark.parametrize("resize,layout,dtype,order", CASES)
@pytest.mark.parametrize("src", [(37, 53), (480, 640), (100, 100), (64, 48)])
def test_fast_path_matches_reference(resize, layout, dtype, order, src):
    pytest.importorskip("cv2")
    rng = np.random.default_rng(src[0])
    img = rng.integers(0, 256, size=src + (3,), dtype=np.uint8)
    spec = PreprocessSpec(size=(64, 48), resize=resize, layout=layout, dtype=dtype, input_order=order,
                          mean=MEAN if dtype != "uint8" else (0, 0, 0),
                          std=STD if dtype != "uint8" else (1, 1, 1))
    got, want = preprocess(img, spec), preprocess_reference(img, spec)
    assert got.shape == want.shape == spec.output_shape() and got.dtype == want.dtype
    # the fast path rounds resized pixels to uint8 (as OpenCV does): within one level / std
    level = 1.0 / min(spec.std)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=level * 1.01 + 2e-3)


def test_letterbox_padding_and_geometry():
    pytest.importorskip("cv2")
    img = np.full((100, 200, 3), 255, np.uint8)
    spec = PreprocessSpec(size=(64, 64), resize="letterbox", pad_value=114, std=(1, 1, 1), mean=(0, 0, 0),
                          layout="NHWC")
    scale, nh, nw, top, left = spec.letterbox_geometry(100, 200)
    assert (nh, nw, top, left) == (32, 64, 16, 0)
    out = preprocess(img, spec)[0]
    assert (out[:top] == 114).all() and (out[top + nh:] == 114).all() and (out[top:top + nh] == 255).all()


def test_matches_usual_opencv_chain():
    cv2 = pytest.importorskip("cv2")
    img = np.random.default_rng(3).integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)
    spec = PreprocessSpec(size=(640, 640), mean=MEAN, std=STD)
    r = cv2.cvtColor(cv2.resize(img, (640, 640), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
    chain = ((r.astype(np.float32) - np.float32(MEAN)) / np.float32(STD)).transpose(2, 0, 1)[None]
    np.testing.assert_allclose(preprocess(img, spec), chain, atol=1e-5)


def test_out_buffer_and_independent_results():
    pytest.importorskip("cv2")
    spec = PreprocessSpec(size=(32, 32))
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 256, size=(50, 70, 3), dtype=np.uint8) for _ in range(2))
    ra = preprocess(a, spec)
    rb = preprocess(b, spec)
    assert not np.shares_memory(ra, rb)
    np.testing.assert_array_equal(ra, preprocess(a, spec))  # reused scratch buffers leak nothing
    out = np.empty(spec.output_shape(), np.float32)
    assert preprocess(a, spec, out=out) is out
    np.testing.assert_array_equal(out, ra)
    with pytest.raises(InputError, match="out= must be"):
        preprocess(a, spec, out=np.empty((1, 32, 32, 3), np.float32))


def test_same_size_image_passes_through():
    pytest.importorskip("cv2")
    img = np.random.default_rng(1).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    spec = PreprocessSpec(size=(32, 32), std=(1, 1, 1), input_order="RGB", layout="NHWC")
    np.testing.assert_array_equal(preprocess(img, spec)[0], img.astype(np.float32))


@pytest.mark.parametrize("bad", [np.zeros((10, 10), np.uint8), np.zeros((10, 10, 4), np.uint8),
                                 np.zeros((10, 10, 3), np.float32), [[1, 2, 3]]])
def test_bad_images(bad):
    with pytest.raises(InputError):
        preprocess(bad, PreprocessSpec(size=(8, 8)))


@pytest.mark.parametrize("kw,match", [(dict(size=(0, 8)), "size"), (dict(size=(8, 8), resize="crop"), "resize"),
                                      (dict(size=(8, 8), dtype="int4"), "dtype"),
                                      (dict(size=(8, 8), std=(1, 0, 1)), "std"),
                                      (dict(size=(8, 8), mean=(1, 2)), "3 values")])
def test_spec_validation(kw, match):
    with pytest.raises(ConfigError, match=match):
        PreprocessSpec(**kw)


def test_spec_round_trip():
    spec = PreprocessSpec(size=(320, 480), resize="letterbox", mean=(1, 2, 3), std=(4, 5, 6), layout="nhwc",
                          dtype="float16", pad_value=0)
    assert PreprocessSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="unknown preprocess key"):
        PreprocessSpec.from_dict({"size": [8, 8], "scale": 2})
