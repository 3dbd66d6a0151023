"""Post-processing inputs shared by the NumPy emulation and the simulated-GPU tests."""
from __future__ import annotations

from typing import Tuple

import numpy as np

from sdk.kernels.reference import PostprocessSpec


def tied_scores(n: int = 900) -> Tuple[np.ndarray, PostprocessSpec]:
    """Rows whose scores tie (0.0 and -0.0 among them, which compare equal): the order must follow
    the rows, as in the reference."""
    rng = np.random.default_rng(3)
    pred = np.zeros((n, 6), np.float32)
    pred[:, :2] = rng.uniform(0, 64, (n, 2))
    pred[:, 2:4] = 8
    pred[:, 4] = rng.choice(np.array([0.5, 0.25, 0.0, -0.0], np.float32), n)
    pred[:, 5] = rng.choice(np.array([0.5, -0.0, 0.0], np.float32), n)
    return pred, PostprocessSpec(has_objectness=False, score_threshold=-0.5, max_candidates=500)
