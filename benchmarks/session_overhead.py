"""Overhead of ``Session.run`` against raw ``onnxruntime.InferenceSession.run`` on one tiny model.

Both sides run in this one process, interleaved in rounds (A, B, A, B, ...) so machine noise hits
both alike; each round times a block of calls and the script prints the median per-call time of
each side and their ratio. Goal: Session.run / raw <= 1.05.

    python benchmarks/session_overhead.py [--rounds 30] [--calls 2000]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np



def _modelzoo():
    """tests/modelzoo.py, loaded by path (putting tests/ on sys.path would shadow `sdk`)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "modelzoo.py"
    spec = importlib.util.spec_from_file_location("modelzoo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def per_call_us(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()

    import onnxruntime as ort

    from sdk import get_target

    modelzoo = _modelzoo()

    with tempfile.TemporaryDirectory() as tmp:
        path = modelzoo.tiny_add(Path(tmp) / "tiny.onnx")
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        raw = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        feeds = {"x": np.ones((1, 16), np.float32)}
        names = [o.name for o in raw.get_outputs()]
        session = get_target("onnxruntime", threads=1).open(path)
        sides = {
            "raw InferenceSession.run": lambda: raw.run(names, feeds),
            "sdk Session.run": lambda: session.run(feeds),
            "sdk Session.runner() (bench loop)": session.runner(feeds),
        }
        for fn in sides.values():
            per_call_us(fn, 200)  # warm-up
        times = {k: [] for k in sides}
        for _ in range(args.rounds):
            for name, fn in sides.items():
                times[name].append(per_call_us(fn, args.calls))
        session.close()

    base = statistics.median(times["raw InferenceSession.run"])
    print(f"tiny model (x[1,16] + 1), onnxruntime {ort.__version__}, {args.rounds} rounds x {args.calls} calls")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:36s} median {med:7.2f} us/call   ratio vs raw {med / base:5.3f}")
    for side, label in (("sdk Session.run", "Session.run"), ("sdk Session.runner() (bench loop)", "Session.runner()")):
        ratio = statistics.median(times[side]) / base
        print(f"{label} / raw = {ratio:.3f} (goal <= 1.05): {'OK' if ratio <= 1.05 else 'ABOVE GOAL'}")


if __name__ == "__main__":
    main()
