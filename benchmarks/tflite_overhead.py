"""Overhead of the ``tflite`` target's Session against calling the interpreter directly.

Both sides run the same committed model (tests/data/) with the same runtime and options, in one
process, interleaved in rounds; each side's figure is the median over rounds of the mean time
per call (us). Printed ratios (SDK / direct; goal <= 1.05):

- ``run``:    ``Session.run(feeds)`` vs ``set_tensor`` + ``invoke`` + ``get_tensor`` per output.
- ``runner``: the callable ``Session.runner(feeds)`` returns (what ``sdk bench`` times) vs
  ``set_tensor`` + ``invoke``.

Usage: python benchmarks/tflite_overhead.py [--rounds 41] [--calls 400] [--threads 1]
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

import numpy as np

from sdk.formats.tflite import load_runtime
from sdk.targets import get_target

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"


def _per_call_us(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def measure(model: Path, batch: int, rounds: int, calls: int, threads: int, quantized_io: str):
    rt = load_runtime()
    target = get_target("tflite", threads=threads, quantized_io=quantized_io)
    session = target.open(model)
    spec = session.inputs[0]
    rng = np.random.default_rng(0)
    x = rng.random((batch, 8, 8, 1), dtype=np.float32)
    if spec.dtype != "float32":  # raw integers
        x = rng.integers(-128, 127, size=(batch, 8, 8, 1)).astype(spec.dtype)
    feeds = {spec.name: x}

    interp = rt.Interpreter(model_path=str(model), num_threads=threads)
    i_det = interp.get_input_details()[0]
    o_idx = [d["index"] for d in interp.get_output_details()]
    interp.resize_tensor_input(i_det["index"], list(x.shape))
    interp.allocate_tensors()
    set_tensor, invoke, get_tensor, i_idx = interp.set_tensor, interp.invoke, interp.get_tensor, i_det["index"]

    def direct_run():
        set_tensor(i_idx, x)
        invoke()
        return [get_tensor(o) for o in o_idx]

    def direct_invoke():
        set_tensor(i_idx, x)
        invoke()

    sdk_run = functools.partial(session.run, feeds)  # like direct_run: one Python call, no extra frame
    sdk_runner = session.runner(feeds)
    sides = {"direct_run": direct_run, "sdk_run": sdk_run, "direct_invoke": direct_invoke, "sdk_runner": sdk_runner}
    for fn in sides.values():  # warm up
        _per_call_us(fn, max(1, calls // 10))
    times = {k: [] for k in sides}
    order = list(sides.items())
    for r in range(rounds):  # short interleaved chunks, order flipped each round: load hits both sides
        for k, fn in (order if r % 2 == 0 else order[::-1]):
            times[k].append(_per_call_us(fn, calls))
    session.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    rt = load_runtime()
    print(f"runtime: {rt.describe()}; threads={args.threads}; {args.rounds} rounds x {args.calls} calls; "
          f"median us per call")
    cases = [("digits_float.tflite", 1, "float"), ("digits_float.tflite", 32, "float"),
             ("digits_int8.tflite", 1, "raw"), ("digits_int8.tflite", 32, "raw")]
    print(f"{'model':<22}{'batch':>6}{'io':>6}{'direct run':>12}{'Session.run':>13}{'ratio':>8}"
          f"{'direct inv':>12}{'runner':>9}{'ratio':>8}")
    for name, batch, qio in cases:
        m = measure(DATA / name, batch, args.rounds, args.calls if batch == 1 else max(1, args.calls // 8),
                    args.threads, qio)
        print(f"{name:<22}{batch:>6}{qio:>6}{m['direct_run']:>12.2f}{m['sdk_run']:>13.2f}"
              f"{m['sdk_run'] / m['direct_run']:>8.3f}{m['direct_invoke']:>12.2f}{m['sdk_runner']:>9.2f}"
              f"{m['sdk_runner'] / m['direct_invoke']:>8.3f}")


if __name__ == "__main__":
    main()
