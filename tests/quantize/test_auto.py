"""The ``auto`` method, warnings, and calibration batches that follow the data's memory and shapes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from sdk.quantize.calibrate import AdaptiveBatches
from sdk.quantize.methods import AUTO_CANDIDATES, compute_range
from sdk.quantize.stats import TensorStats


def _stats(x: np.ndarray) -> TensorStats:
    st = TensorStats("t")
    st.update(x.reshape(1, -1), channel_axis=None)
    return st


def _qdq_mse(x: np.ndarray, r, symmetric: bool) -> float:
    """The real mean squared error of INT8 quantize-dequantize of ``x`` with range ``r``, computed
    on the values themselves (not from the histogram model ``expected_error`` uses):
    asymmetric uint8 with a rounded zero point, or symmetric int8 in [-127, 127]."""
    lo, hi = float(r[0]), float(r[1])
    x = x.astype(np.float64)
    if symmetric:
        scale = max(abs(lo), abs(hi)) / 127
        deq = np.clip(np.round(x / scale), -127, 127) * scale
    else:
        scale = (hi - lo) / 255
        zp = np.round(-lo / scale)
        deq = (np.clip(np.round(x / scale) + zp, 0, 255) - zp) * scale
    return float(np.mean(np.square(deq - x)))


def test_auto_has_the_least_real_error():
    """auto picks by the histogram's error model; checked here against the real quantize-dequantize
    error of each candidate on the data (5 % slack: the model bins the values), plus what each
    distribution must get by hand: outliers clipped, a ReLU6 bound kept, a uniform range whole."""
    rng = np.random.default_rng(0)
    cases = {
        "gaussian with outliers": np.concatenate([rng.standard_normal(100000), [40.0, -35.0]]),
        "relu6": np.clip(rng.standard_normal(100000) * 3, 0, 6),
        "uniform": rng.uniform(-1, 1, 100000),
        "heavy tail": rng.standard_t(2, 100000),
    }
    for name, x in cases.items():
        x = x.astype(np.float32)
        st = _stats(x)
        for symmetric in (False, True):
            auto = compute_range(st, "auto", symmetric)
            best = min(_qdq_mse(x, compute_range(st, m, symmetric, **p), symmetric) for m, p in AUTO_CANDIDATES)
            assert _qdq_mse(x, auto, symmetric) <= best * 1.05, (name, symmetric, auto)
    outliers = _stats(cases["gaussian with outliers"].astype(np.float32))
    lo, hi = compute_range(outliers, "auto", False)
    assert hi < 40.0 and lo > -35.0 and hi > 4.0          # the two outliers are clipped, the bulk (|x| < 4.5) is not
    relu6 = _stats(cases["relu6"].astype(np.float32))
    assert compute_range(relu6, "auto", False) == (0.0, 6.0)  # a saturating activation keeps its bound
    lo, hi = compute_range(_stats(cases["uniform"].astype(np.float32)), "auto", False)
    assert lo == pytest.approx(-1.0, abs=0.01) and hi == pytest.approx(1.0, abs=0.01)   # nothing to clip


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
