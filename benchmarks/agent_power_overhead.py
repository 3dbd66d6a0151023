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
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sdk.result import BenchResult
from sdk.remote.agent import build_zipapp
from sdk.remote.agent.power.simulate import SimulatedBoard

MODEL = Path(__file__).resolve().parent.parent / "examples" / "digits" / "digits_cnn.onnx"


def bench(pyz: Path, request: dict) -> dict:
    out = subprocess.run([sys.executable, str(pyz), "bench", "--request", "-"], input=json.dumps(request),
                         stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rate-hz", type=float, default=50.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pyz = build_zipapp(Path(tmp) / "agent")
        base = {"model_path": str(MODEL), "input_shapes": {"image": [1, 1, 8, 8]}, "runs": 200, "warmup": 50,
                "min_seconds": args.seconds, "target_options": {"threads": 1}, "idle_seconds": 0.2}
        sides = {"off": dict(base, power=False),
                 "on": dict(base, power={"sensors": ["ina3221-hwmon"], "sysfs_root": str(Path(tmp) / "board"),
                                         "rate_hz": args.rate_hz})}
        p50 = {"off": [], "on": []}
        mean = {"off": [], "on": []}
        samples = []
        with SimulatedBoard(Path(tmp) / "board", "jetson-jp5"):
            for _ in range(args.rounds):
                for side, req in sides.items():
                    r = BenchResult.from_dict(bench(pyz, req), "the agent")
                    p50[side].append(r.stats.p50_ms)
                    mean[side].append(r.stats.mean_ms)
                    if side == "on":
                        samples.append(r.power.samples)
    med = {k: statistics.median(v) for k, v in p50.items()}
    medm = {k: statistics.median(v) for k, v in mean.items()}
    print(f"p50 latency   off {med['off'] * 1e3:.1f} us   on {med['on'] * 1e3:.1f} us   "
          f"ratio on/off {med['on'] / med['off']:.3f}")
    print(f"mean latency  off {medm['off'] * 1e3:.1f} us   on {medm['on'] * 1e3:.1f} us   "
          f"ratio on/off {medm['on'] / medm['off']:.3f}")
    print(f"power samples per run (median): {statistics.median(samples):.0f} at {args.rate_hz:g} Hz requested")


if __name__ == "__main__":
    main()
