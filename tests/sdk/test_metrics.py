from __future__ import annotations

import math

import numpy as np
import pytest

from sdk.errors import InputError
from sdk.metrics import compare_outputs, cosine_similarity, max_abs_error, snr_db, top1_agreement


def test_metrics_values():
    ref = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    assert cosine_similarity(ref, ref) == pytest.approx(1.0)
    assert snr_db(ref, ref) == math.inf
    noisy = ref + 0.1
    assert snr_db(ref, noisy) == pytest.approx(10 * math.log10(28 / 0.06))
    assert max_abs_error(ref, noisy) == pytest.approx(0.1)
    assert top1_agreement(ref, ref[:, ::-1]) == 0.0
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0


def test_compare_outputs():
    ref = {"logits": np.eye(3)}
    res = compare_outputs(ref, {"logits": np.eye(3) * 2})
    assert res["logits"]["top1_agreement"] == 1.0 and res["logits"]["cosine"] == pytest.approx(1.0)
    with pytest.raises(InputError, match="missing"):
        compare_outputs(ref, {})
    with pytest.raises(InputError, match="shapes"):
        compare_outputs(ref, {"logits": np.eye(2)})
