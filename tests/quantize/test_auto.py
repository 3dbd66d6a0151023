"""The ``auto`` method, warnings, and calibration batches that follow the data's memory and shapes."""
from __future__ import annotations

import warnings

import numpy as np

from sdk.quantize.calibrate import AdaptiveBatches
from sdk.quantize.methods import AUTO_CANDIDATES, compute_range, expected_error
from sdk.quantize.stats import TensorStats


def _stats(x: np.ndarray) -> TensorStats:
    st = TensorStats("t")
    st.update(x.reshape(1, -1), channel_axis=None)
    return st


def test_auto_has_the_least_expected_error():
    rng = np.random.default_rng(0)
    cases = {
        "gaussian with outliers": np.concatenate([rng.standard_normal(100000), [40.0, -35.0]]),
        "relu6": np.clip(rng.standard_normal(100000) * 3, 0, 6),
        "uniform": rng.uniform(-1, 1, 100000),
        "heavy tail": rng.standard_t(2, 100000),
    }
    for name, x in cases.items():
        st = _stats(x.astype(np.float32))
        for symmetric in (False, True):
            auto = compute_range(st, "auto", symmetric)
            e_auto = expected_error(st, auto, symmetric)
            for method, params in AUTO_CANDIDATES:
                other = compute_range(st, method, symmetric, **params)
                assert e_auto <= expected_error(st, other, symmetric) * (1 + 1e-9), (name, method)
    # a saturating activation keeps its bound
    relu6 = _stats(np.clip(rng.standard_normal(100000) * 3, 0, 6).astype(np.float32))
    assert compute_range(relu6, "auto", False)[1] == 6.0


def test_no_warning_leaks_from_methods():
    rng = np.random.default_rng(1)
    sparse = np.zeros(100000, np.float32)
    sparse[rng.integers(0, 100000, 50)] = rng.standard_normal(50).astype(np.float32) * 100
    st = _stats(np.concatenate([sparse, rng.standard_normal(1000).astype(np.float32)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for m in ("entropy", "auto", "mse", "percentile", "minmax"):
            for symmetric in (False, True):
                compute_range(st, m, symmetric)


def test_adaptive_batches_follow_memory_and_shapes():
    def samples():
        for shape in [(1, 3, 8, 8)] * 5 + [(1, 3, 16, 16)] * 3:
            yield {"x": np.zeros(shape, np.float32)}, None

    b = AdaptiveBatches(samples(), max_size=4)
    sizes = []
    for feed, _, n in b:
        sizes.append((feed["x"].shape, n))
        b.observe(1024 * n, n)  # small activations: the batch may grow to max_size
    assert sizes[0] == ((1, 3, 8, 8), 1)
    assert all(shape[0] == n for shape, n in sizes)  # never two shapes in one batch
    assert sum(n for _, n in sizes) == 8 and max(n for _, n in sizes) == 4
    big = AdaptiveBatches(samples(), max_size=8)
    for _, _, n in big:
        big.observe(1 << 30, n)  # 1 GB per sample: one sample at a time
        assert n == 1
