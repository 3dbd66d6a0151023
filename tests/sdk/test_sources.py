"""Data sources: image folders, .npy/.npz (streamed), iterables; errors on bad input."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from sdk.errors import ConfigError, InputError
from sdk.preprocess import PreprocessSpec
from sdk.sources import (ArraySource, ImageFolderSource, IterableSource, batched, open_source,
                         parse_preprocess)
from sdk.tensors import TensorSpec

SPEC = [TensorSpec("x", ("N", 3, 4, 4), "float32")]


def _arr(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3, 4, 4)).astype(np.float32)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_rows_and_labels(tmp_path, compressed):
    x, y = _arr(5), np.arange(5)
    p = tmp_path / "d.npz"
    (np.savez_compressed if compressed else np.savez)(p, x=x, y=y)
    src = open_source(p, SPEC)
    assert isinstance(src, ArraySource) and len(src) == 5 and src.has_labels
    got = list(src.samples())
    assert len(got) == 5
    for i, (feed, label) in enumerate(got):
        assert feed["x"].shape == (1, 3, 4, 4)
        np.testing.assert_array_equal(feed["x"][0], x[i])
        assert int(label) == i


def test_npy_and_folder(tmp_path):
    np.save(tmp_path / "a.npy", _arr(2, 1))
    np.savez(tmp_path / "b.npz", x=_arr(3, 2))
    src = open_source(tmp_path, SPEC)
    feeds = list(src)
    assert len(feeds) == 5 and len(src) == 5
    np.testing.assert_array_equal(feeds[2]["x"][0], _arr(3, 2)[0])
    assert len(list(open_source(tmp_path, SPEC, limit=3))) == 3


def test_npz_named_inputs_and_errors(tmp_path):
    specs = [TensorSpec("a", ("N", 2), "float32"), TensorSpec("b", ("N", 2), "float32")]
    p = tmp_path / "two.npz"
    np.savez(p, a=np.ones((3, 2), np.float32), b=np.zeros((3, 2), np.float32))
    assert len(list(open_source(p, specs))) == 3
    np.savez(p, a=np.ones((3, 2), np.float32))
    with pytest.raises(InputError, match="no array for model input"):
        open_source(p, specs)
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.ones((2, 3, 4, 4), np.float64))
    with pytest.raises(InputError, match="dtype float64, the model expects float32"):
        list(open_source(bad, SPEC))
    np.savez(bad, x=np.ones((2, 3, 5, 4), np.float32))
    with pytest.raises(InputError, match=r"shape \[1,3,5,4\]"):
        list(open_source(bad, SPEC))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="cannot read"):
        open_source(tmp_path / "junk.npz", SPEC)


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        open_source(tmp_path / "nope", SPEC)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="is empty"):
        open_source(tmp_path / "empty", SPEC)
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text("hi")
    with pytest.raises(InputError, match="holds no images"):
        open_source(tmp_path / "txt", SPEC, PreprocessSpec(size=(4, 4)))


def test_npz_is_streamed_not_loaded(tmp_path):
    """Reading one sample of a 48 MB .npz allocates about one sample, not the file."""
    p = tmp_path / "big.npz"
    np.savez(p, x=np.zeros((1000, 3, 64, 64), np.float32))
    src = open_source(p, [TensorSpec("x", ("N", 3, 64, 64), "float32")])
    tracemalloc.start()
    n = 0
    for _ in src:
        n += 1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 1000
    assert peak < 4 * 2 ** 20, peak  # one sample is 48 kB


def test_image_folder_skips_undecodable(tmp_path):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is not installed")
    rng = np.random.default_rng(0)
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"img{i}.png"), rng.integers(0, 255, (10, 12, 3), dtype=np.uint8))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    spec = PreprocessSpec(size=(4, 4))
    src = open_source(tmp_path, SPEC, spec)
    assert isinstance(src, ImageFolderSource) and len(src) == 4
    feeds = list(src)
    assert len(feeds) == 3 and src.skipped == 1 and "broken.jpg" in src.warnings[0]
    assert feeds[0]["x"].shape == (1, 3, 4, 4) and feeds[0]["x"].dtype == np.float32
    assert src.fingerprint() == open_source(tmp_path, SPEC, spec).fingerprint()


def test_image_folder_none_usable(tmp_path):
    pytest.importorskip("cv2", reason="opencv-python-headless is not installed")
    (tmp_path / "a.png").write_bytes(b"garbage")
    (tmp_path / "b.jpg").write_bytes(b"")
    with pytest.raises(InputError, match="no usable image"):
        list(open_source(tmp_path, SPEC, PreprocessSpec(size=(4, 4))))


def test_image_folder_preprocess_from_model_shape(tmp_path):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is not installed")
    cv2.imwrite(str(tmp_path / "a.png"), np.full((6, 6, 3), 255, np.uint8))
    spec = [TensorSpec("img", (1, 3, 8, 8), "float32")]
    feed = next(iter(open_source(tmp_path, spec)))
    assert feed["img"].shape == (1, 3, 8, 8)
    np.testing.assert_allclose(feed["img"], 1.0)


def test_iterable_source_splits_batches_and_labels():
    data = [({"x": _arr(3)}, np.array([1, 2, 3])), ({"x": _arr(1)}, 7)]
    src = IterableSource(data, SPEC)
    got = list(src.samples())
    assert [int(y) for _, y in got] == [1, 2, 3, 7]
    assert all(f["x"].shape == (1, 3, 4, 4) for f, _ in got)
    with pytest.raises(InputError, match="not a dict"):
        list(IterableSource([np.ones(3)], SPEC))
    assert len(list(open_source(iter([{"x": _arr(2)}]), SPEC))) == 2


def test_batched():
    samples = [({"x": _arr(1, i)}, i) for i in range(5)]
    out = list(batched(samples, 2))
    assert [n for _, _, n in out] == [2, 2, 1]
    assert out[0][0]["x"].shape == (2, 3, 4, 4) and out[0][1] == [0, 1]


def test_parse_preprocess(tmp_path):
    spec = parse_preprocess(["size=224x200", "mean=123.7,116.3,103.5", "std=58.4", "layout=nhwc"])
    assert spec.size == (224, 200) and spec.layout == "NHWC" and spec.std == (58.4,) * 3
    toml = tmp_path / "p.toml"
    toml.write_text('[preprocess]\nsize = [32, 32]\nresize = "letterbox"\n')
    spec = parse_preprocess([str(toml), "color=BGR"])
    assert spec.resize == "letterbox" and spec.color == "BGR" and spec.size == (32, 32)
    assert parse_preprocess(None) is None
    with pytest.raises(ConfigError, match="unknown preprocess key"):
        parse_preprocess(["size=4x4", "colour=RGB"])
    with pytest.raises(ConfigError, match="does not exist"):
        parse_preprocess(["missing.toml"])
