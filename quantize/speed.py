"""Host latency of FP32 vs INT8 models in ONNX Runtime (CPU), measured side by side: sessions built
once, rounds interleaved (A B C, A B C, ...), each round a few runs, the median of the rounds kept.
The speed-aware plan uses it to keep in float the op types whose int8 form measures slower."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

__all__ = ["latencies_ms", "session", "SLOWER_TOLERANCE"]

#: INT8 counts as slower than FP32 only beyond this fraction (the noise of interleaved medians here)
SLOWER_TOLERANCE = 0.03


def session(model: Any, threads: Optional[int] = None) -> Any:
    """An ONNX Runtime CPU session of ``model`` (a ModelProto, bytes or a path), full optimization."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    return ort.InferenceSession(src, sess_options=so, providers=["CPUExecutionProvider"])


def latencies_ms(models: Sequence[Any], feed: Mapping[str, np.ndarray], *, rounds: int = 7,
                 round_s: float = 0.04, threads: Optional[int] = None) -> List[float]:
    """Median latency (ms) of each model on ``feed``: every model warmed up, then ``rounds``
    interleaved rounds of about ``round_s`` seconds each (at least one run)."""
    sessions = [session(m, threads) if not hasattr(m, "run") else m for m in models]
    per_round: List[int] = []
    for s in sessions:  # warm-up, and how many runs fill a round
        s.run(None, dict(feed))
        t0 = time.perf_counter()
        s.run(None, dict(feed))
        one = max(time.perf_counter() - t0, 1e-5)
        per_round.append(max(1, int(round_s / one)))
    samples: Dict[int, List[float]] = {i: [] for i in range(len(sessions))}
    for _ in range(rounds):
        for i, s in enumerate(sessions):
            t0 = time.perf_counter()
            for _ in range(per_round[i]):
                s.run(None, dict(feed))
            samples[i].append((time.perf_counter() - t0) * 1000.0 / per_round[i])
    return [float(np.median(samples[i])) for i in range(len(sessions))]
