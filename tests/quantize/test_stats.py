"""Streaming statistics: streamed == batch, exact shard merges, file round trip, methods."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import InputError
from sdk.quantize.methods import _kl_threshold, compute_range, method_names
from sdk.quantize.stats import CalibrationStats, TensorStats


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    # ranges that grow batch after batch (forcing many bin doublings), zeros, negative tails
    out = [np.zeros(50, np.float32)]
    for s in (0.01, 0.5, 3.0, 0.2, 40.0, 7.0, 900.0):
        out.append((rng.standard_normal(2000) * s).astype(np.float32))
    out.append(np.maximum(rng.standard_normal(3000), 0).astype(np.float32))
    return out


def _stats(chunks, name="t"):
    t = TensorStats(name, track_channels=False)
    for c in chunks:
        t.update(c)
    return t


def test_streamed_histogram_equals_batch():
    chunks = _batches()
    streamed = _stats(chunks)
    batch = _stats([np.concatenate(chunks)])
    assert streamed.width == batch.width
    np.testing.assert_array_equal(streamed.hist, batch.hist)
    assert (streamed.min, streamed.max, streamed.count, streamed.zeros, streamed.at_min, streamed.at_max) == \
        (batch.min, batch.max, batch.count, batch.zeros, batch.at_min, batch.at_max)
    assert streamed.hist.sum() == sum(len(c) for c in chunks)
    for m in method_names():
        assert compute_range(streamed, m, True) == compute_range(batch, m, True)
        assert compute_range(streamed, m, False) == compute_range(batch, m, False)


@pytest.mark.parametrize("split", [1, 3, 5])
def test_shard_merge_is_exact(split):
    chunks = _batches(seed=split)
    whole = _stats(chunks)
    a, b = _stats(chunks[:split]), _stats(chunks[split:])
    merged = a.merge(b)
    np.testing.assert_array_equal(merged.hist, whole.hist)
    assert merged.width == whole.width and merged.min == whole.min and merged.max == whole.max
    # the other order gives the same answer
    merged2 = _stats(chunks[split:]).merge(_stats(chunks[:split]))
    np.testing.assert_array_equal(merged2.hist, whole.hist)


def test_histogram_bins_are_exact():
    """By hand: 2048 bins a side of a power-of-two width; |x| <= 1.0 with 1.0 itself inside the top
    bin needs 2048 x width > 1, so width = 2**-10 (2**-11 x 2048 = 1.0 would leave it on the edge),
    the edges run from -2 to 2, and x lands in bin floor(x * 1024) + 2048."""
    vals = np.array([0.0, 0.25, -0.25, 1.0, -1.0, 0.5])
    t = _stats([vals.astype(np.float32)])
    assert t.width == 2.0 ** -10 and t.nbins == 2048 and len(t.hist) == 4096
    assert t.hist.sum() == 6 and list(np.flatnonzero(t.hist)) == [1024, 1792, 2048, 2304, 2560, 3072]
    edges = t.edges()
    assert edges[0] == -2.0 and edges[-1] == 2.0
    np.testing.assert_array_equal(t.hist, np.histogram(vals, bins=edges)[0])   # numpy's binning agrees


def test_nonfinite_counted_and_left_out():
    t = _stats([np.array([1.0, np.nan, -np.inf, 2.0], np.float32)])
    assert t.nonfinite == 2 and t.count == 2 and t.max == 2.0


def test_calibration_stats_roundtrip(tmp_path):
    st = CalibrationStats.empty("abc", ["a", "b"], channel_names=["a"])
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    st.update({"a": x, "b": x * 2}, samples=4)
    st.save(tmp_path / "s.npz")
    back = CalibrationStats.load(tmp_path / "s.npz")
    assert back.model_sha256 == "abc" and back.samples == 4 and back.names == ["a", "b"]
    np.testing.assert_array_equal(back["a"].hist, st["a"].hist)
    np.testing.assert_allclose(back["a"].channel_mean(), x.mean(axis=(0, 2, 3)), rtol=1e-6)
    assert back["b"].channel_mean() is None


def _kl_reference(bins, nq=128):
    """TensorRT's entropy calibration, written plainly (pytorch-quantization's algorithm)."""
    best = None
    for i in range(nq, len(bins) + 1):
        space = np.linspace(0, i, num=nq + 1)
        dig = np.digitize(range(i), space) - 1
        dig[bins[:i] == 0] = -1
        q = np.zeros(i)
        for k in range(nq):
            sel = dig == k
            if sel.any():
                q[sel] = bins[:i][sel].sum() / sel.sum()
        p = bins[:i].astype(float)
        p[-1] += bins[i:].sum()
        P, Q = p / p.sum(), q / q.sum()
        mask = P > 0
        kl = np.inf if np.any(Q[mask] == 0) else float(np.sum(P[mask] * np.log(P[mask] / Q[mask])))
        if best is None or kl < best[0] - 1e-12:
            best = (kl, i)
    return best[1]


@pytest.mark.parametrize("seed", [0, 1])
def test_entropy_matches_reference(seed):
    x = np.abs(np.random.default_rng(seed).standard_t(4, 20000))
    h, _ = np.histogram(x, bins=300)
    assert _kl_threshold(h.astype(float), 128) == _kl_reference(h)


def test_methods_ranges():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100000).astype(np.float32)
    x[0] = 30.0  # one outlier
    t = _stats([x])
    mm = compute_range(t, "minmax", False)
    assert mm == (float(x.min()), 30.0)
    assert compute_range(t, "minmax", True) == (-30.0, 30.0)
    for m in ("percentile", "entropy"):
        lo, hi = compute_range(t, m, True)
        assert lo == -hi and 2.0 < hi < 10.0, (m, hi)   # clips the outlier
    lo, hi = compute_range(t, "mse", True)
    assert 2.0 < hi < 30.0  # one outlier costs (30 - t)^2 once; the rounding noise costs every value
    lo, hi = compute_range(_stats([np.maximum(x, 0)]), "mse", False)
    assert lo == 0.0 and hi > 0
    assert compute_range(t, "percentile", True, percentile=100.0)[1] >= 29.9
    with pytest.raises(InputError, match="unknown calibration method"):
        compute_range(t, "nope", True)
    with pytest.raises(InputError, match="no parameter"):
        compute_range(t, "minmax", True, percentile=3)


def test_all_zero_tensor():
    t = _stats([np.zeros(10, np.float32)])
    assert compute_range(t, "entropy", False) == (0.0, 0.0)
    t.merge(_stats([np.ones(4, np.float32)]))
    assert t.hist.sum() == 14 and t.max == 1.0


def test_entropy_keeps_a_saturation_bound():
    """ReLU6 outputs: a point mass at 6 is signal; entropy keeps the bound instead of clipping it."""
    rng = np.random.default_rng(0)
    x = np.clip(np.maximum(rng.standard_normal(200000) * 1.5, 0), 0, 6).astype(np.float32)
    x[:2000] = 6.0  # 1% saturated
    t = _stats([x[:50000], x[50000:]])
    assert t.at_max == int(np.sum(x == 6.0)) and t.zeros == int(np.sum(x == 0))
    assert compute_range(t, "entropy", False) == (0.0, 6.0)
    assert compute_range(t, "entropy", True) == (-6.0, 6.0)
    # a long tail without a point mass is clipped; the same tail ending in a point mass keeps its end
    y = np.maximum(rng.standard_normal(200000) * 1.5, 0).astype(np.float32)
    hi_tail = compute_range(_stats([y]), "entropy", False)[1]
    assert hi_tail < float(y.max())
    y[:300] = y.max()  # 0.3% of the non-zero values at the top
    assert compute_range(_stats([y]), "entropy", False)[1] == float(y.max())
