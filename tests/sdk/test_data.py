from __future__ import annotations

import numpy as np
import pytest

from sdk.data import check_feed, iter_feeds, load_feeds, random_feed
from sdk.errors import InputError
from sdk.tensors import TensorSpec

SPECS = [TensorSpec("a", ("N", 3), "float32"), TensorSpec("b", (2,), "int64")]


def test_random_feed_seeded_and_shaped():
    f1 = random_feed(SPECS, {"a": (4, 3)}, seed=1)
    f2 = random_feed(SPECS, {"a": (4, 3)}, seed=1)
    assert f1["a"].shape == (4, 3) and f1["a"].dtype == np.float32
    assert f1["b"].dtype == np.int64
    np.testing.assert_array_equal(f1["a"], f2["a"])
    assert not np.array_equal(f1["a"], random_feed(SPECS, {"a": (4, 3)}, seed=2)["a"])


def test_random_feed_needs_dynamic_dims():
    with pytest.raises(InputError, match="dynamic"):
        random_feed(SPECS)


def test_npz_roundtrip(tmp_path):
    # "b" has no batch axis: the file is one feed as it is
    p = tmp_path / "in.npz"
    np.savez(p, a=np.ones((2, 3), np.float32), b=np.arange(2))
    feeds = load_feeds(p, SPECS)
    assert len(feeds) == 1 and feeds[0]["b"].tolist() == [0, 1]
    # an extra first axis: one feed per sample
    np.savez(p, a=np.ones((5, 2, 3), np.float32), b=np.tile(np.arange(2), (5, 1)))
    feeds = load_feeds(p, SPECS)
    assert len(feeds) == 5 and feeds[4]["a"].shape == (2, 3) and feeds[4]["b"].tolist() == [0, 1]


def test_npz_wrong_dtype(tmp_path):
    p = tmp_path / "in.npz"
    np.savez(p, a=np.ones((2, 3), np.float64), b=np.arange(2))
    with pytest.raises(InputError, match="'a' has dtype float64, the model expects float32"):
        load_feeds(p, SPECS)


def test_npz_missing_and_extra(tmp_path):
    p = tmp_path / "in.npz"
    np.savez(p, a=np.ones((2, 3), np.float32))
    with pytest.raises(InputError, match="no array for model input 'b'"):
        load_feeds(p, SPECS)
    np.savez(p, a=np.ones((2, 3), np.float32), b=np.arange(2), c=np.ones(1))
    with pytest.raises(InputError, match="'c' is not a model input"):
        load_feeds(p, SPECS)


def test_npy_single_input_and_batch_axis(tmp_path):
    spec = [TensorSpec("x", (1, 4), "float32")]
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    feeds = list(iter_feeds(tmp_path / "x.npy", spec))  # rows of the batch axis
    assert len(feeds) == 3 and feeds[2]["x"].shape == (1, 4) and feeds[2]["x"][0, 0] == 8
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(3, 1, 4))
    feeds = list(iter_feeds(tmp_path / "x.npy", spec))  # an extra sample axis
    assert len(feeds) == 3 and feeds[1]["x"].shape == (1, 4) and feeds[1]["x"][0, 0] == 4
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(3, 4, 1))
    with pytest.raises(InputError, match="shape"):
        load_feeds(tmp_path / "x.npy", spec)


def test_folder_and_missing(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_feeds(tmp_path / "none", SPECS)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="no images"):
        load_feeds(tmp_path, SPECS)


def test_corrupt_file(tmp_path):
    p = tmp_path / "bad.npz"
    p.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(InputError, match="cannot read"):
        load_feeds(p, SPECS)


def test_check_feed_shape():
    with pytest.raises(InputError, match=r"shape \[2,4\]"):
        check_feed({"a": np.ones((2, 4), np.float32), "b": np.ones(2, np.int64)}, SPECS)
