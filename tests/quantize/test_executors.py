"""Shards of a calibration source (``quantize/executors.py``): what an executor that ships work to
other processes (Ray) reads must be the source's samples, each with its own file's values."""
from __future__ import annotations

import numpy as np

from sdk.quantize.executors import split_source
from sdk.sources import open_source
from sdk.tensors import TensorSpec


def test_array_shards_read_the_sources_samples_with_their_files_constants(tmp_path):
    """Three .npz files of 5 rows, each with its own ``state`` (no sample axis: one value for
    every row of that file): shards of 4 rows cut across files, and every row keeps its file's
    state (a shard that starts in the second file once paired it with the first file's)."""
    specs = [TensorSpec("x", (1, 2), "float32"), TensorSpec("state", (3,), "float32")]
    for k in range(3):
        x = (np.arange(5, dtype=np.float32) + 5 * k)[:, None, None] * np.ones((1, 1, 2), np.float32)
        np.savez(tmp_path / f"{k}.npz", x=x, state=np.full(3, 100 + k, np.float32))
    src = open_source(str(tmp_path), specs, sample_axes={"state": None})
    whole = [(float(f["x"].flat[0]), float(f["state"][0])) for f, _ in src.samples()]
    assert whole == [(i, 100 + i // 5) for i in range(15)]
    shards = split_source(src, 4)
    assert [s.count for s in shards] == [4, 4, 4, 3]
    assert [(float(f["x"].flat[0]), float(f["state"][0])) for s in shards for f, _ in s.samples()] == whole
