"""``sdk check`` run time per corpus ONNX model (issue 24's goal: <= 2 s without building anything).

Times :func:`sdk.check` in this process from the model's path (load, validate, checker, report), the
median of ``--rounds`` calls per model and target, and prints the goal's verdict per row. The CLI
adds its own start-up (Python, typer) on top; that is printed once, from ``sdk --version``.

Usage: python benchmarks/check_time.py [--targets tensorrt@10.3,tensorrt@8.6] [--rounds 3] [--models a,b]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL_S = 2.0


def main() -> None:
    import sdk
    from sdk import corpus

    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="tensorrt@10.3,tensorrt@8.6")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="")
    args = ap.parse_args()
    names = [n for n in (args.models.split(",") if args.models else corpus.names()) if corpus.get(n).format == "onnx"]
    paths = corpus.fetch(names)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sdk", "--version"], capture_output=True, check=True)
    print(f"CLI start-up (sdk --version): {time.perf_counter() - t0:.2f} s")
    print(f"{'model':24} {'target':14} {'MB':>6} {'nodes':>6} {'median s':>9}  goal <= {GOAL_S} s")
    worst = 0.0
    for name in names:
        path = Path(paths[name])
        for target in args.targets.split(","):
            secs = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                report = sdk.check(str(path), target)
                secs.append(time.perf_counter() - t)
            med = statistics.median(secs)
            worst = max(worst, med)
            print(f"{name:24} {target:14} {path.stat().st_size / 1e6:6.1f} {len(report.nodes):6d} {med:9.2f}  "
                  f"{'ok' if med <= GOAL_S else 'OVER'}")
    print(f"worst median: {worst:.2f} s ({'meets' if worst <= GOAL_S else 'misses'} the {GOAL_S} s goal)")


if __name__ == "__main__":
    main()
