"""Cost of power sampling on the latency the board agent measures.

The agent zipapp runs the example model (examples/digits) through ``bench`` in a subprocess, as on
a board, alternately without power sampling and with the sampler thread reading a SIMULATED
Jetson INA3221 tree (sdk.remote.agent.power.simulate, JetPack 5 hwmon layout) at ``--rate-hz``.
Each side's figure is the median over rounds of the run's p50 latency (the mean is printed too,
but on a shared machine it follows other processes' load); printed ratio: sampling / no sampling
(goal <= 1.05: the sampler must not disturb what it measures). The example model runs in ~10 us,
so this is the worst case: a model that runs for milliseconds dilutes the sampler further.

Usage: python benchmarks/agent_power_overhead.py [--rounds 5] [--seconds 1.0] [--rate-hz 50]
"""
from __future__ import annotations

import argparse
import statistics

from agentbench import base_request, run_interleaved

from sdk.result import BenchResult


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rate-hz", type=float, default=50.0)
    args = ap.parse_args()
    base = base_request(args.seconds, 0.2)
    raw = run_interleaved(lambda root: {
        "off": dict(base, power=False),
        "on": dict(base, power={"sensors": ["ina3221-hwmon"], "sysfs_root": str(root), "rate_hz": args.rate_hz})},
        args.rounds)
    runs = {side: [BenchResult.from_dict(r, "the agent") for r in rs] for side, rs in raw.items()}
    med = {k: statistics.median(r.stats.p50_ms for r in v) for k, v in runs.items()}
    medm = {k: statistics.median(r.stats.mean_ms for r in v) for k, v in runs.items()}
    samples = [r.power.samples for r in runs["on"]]
    print(f"p50 latency   off {med['off'] * 1e3:.1f} us   on {med['on'] * 1e3:.1f} us   "
          f"ratio on/off {med['on'] / med['off']:.3f}")
    print(f"mean latency  off {medm['off'] * 1e3:.1f} us   on {medm['on'] * 1e3:.1f} us   "
          f"ratio on/off {medm['on'] / medm['off']:.3f}")
    print(f"power samples per run (median): {statistics.median(samples):.0f} at {args.rate_hz:g} Hz requested")


if __name__ == "__main__":
    main()
