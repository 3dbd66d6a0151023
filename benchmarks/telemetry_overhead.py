"""Cost of device telemetry (sampled with power during a run) on the latency the board agent measures.

The agent zipapp runs the example model (examples/digits, ~10 us per run: the worst case) through
``bench`` in a subprocess, as on a board, alternately with ``telemetry: false`` and with telemetry
at ``--rate-hz`` reading a SIMULATED Jetson tree (sdk.remote.agent.power.simulate: CPU/GPU/EMC
clocks, GPU load, thermal zones) plus /proc. No power sampler runs on either side, so the ratio is
the telemetry thread's alone. Each side's figure is the median over interleaved rounds of the
run's p50; printed ratio: telemetry / none (goal <= 1.05).

Usage: python benchmarks/telemetry_overhead.py [--rounds 5] [--seconds 1.0] [--rate-hz 5]
"""
from __future__ import annotations

import argparse
import statistics

from agentbench import base_request, run_interleaved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rate-hz", type=float, default=5.0)
    args = ap.parse_args()

    def sides(root):
        # power: a sensor the simulated Jetson does not have (no sampler thread on either side), so
        # the tree is the sysfs root the telemetry reads
        base = dict(base_request(args.seconds, 0.0), power={"sensors": ["rapl"], "sysfs_root": str(root)})
        return {"none": dict(base, telemetry=False), "telemetry": dict(base, telemetry={"rate_hz": args.rate_hz})}

    raw = run_interleaved(sides, args.rounds)
    for r in raw["telemetry"]:
        assert "gpu_load_pct" in r["telemetry"]["series"], "the simulated tree was not read"
    med = {k: statistics.median(r["latency_ms"]["p50"] for r in v) for k, v in raw.items()}
    samples = [r["telemetry"]["samples"] for r in raw["telemetry"]]
    print(f"p50 latency, median of {args.rounds} interleaved rounds: none {med['none'] * 1e3:.2f} us, "
          f"telemetry at {args.rate_hz:g} Hz {med['telemetry'] * 1e3:.2f} us "
          f"(samples per run: {statistics.median(samples):g})")
    print(f"ratio telemetry / none: {med['telemetry'] / med['none']:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
