"""Fleets from an Ansible inventory at ``--forks 16``: 1, 16 and 64 boards, wall time per board and
memory per concurrent board (goal: per-board time for 16 boards <= 1.5x one board's).

Each "board" is a host of a YAML inventory read by ansible-core (``sdk.remote.inventory``),
spread over ``--servers`` real sshd servers on loopback, run by ``run_fleet(max_workers=forks)`` as
``sdk push --inventory`` does. A board's job: connect (key exchange, auth, strict host key), push
``--mb`` of model (a fresh workdir each run, so it is really uploaded), then the board's own work,
stood in for by ``sleep --board-seconds`` on the board (real boards bring their own CPU; here all
"boards" share this host's cores; ``--agent`` runs the real agent's ``facts`` instead, and says so).
Each configuration runs in a fresh process (its memory peak is its own); rounds interleave them.

    python benchmarks/fleet_inventory.py [--boards 1 16 64] [--forks 16] [--rounds 3] [--mb 2]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from push_common import Loopback, median  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(args: Any) -> None:
    """One configuration: parse the inventory, run the fleet, print JSON."""
    from sdk.remote import run_fleet
    from sdk.remote.inventory import inventory_boards

    profiles = inventory_boards(args.inventory, args.limit)
    model = Path(args.model)
    peak = {"mb": rss_mb()}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak["mb"] = max(peak["mb"], rss_mb())

    def job(board: Any) -> Any:
        board.push(model)
        if args.agent:
            return board.check()
        return board.transport.run(["sleep", str(args.board_seconds)], check=True)

    import gc

    gc.collect()
    base = rss_mb()
    threading.Thread(target=sample, daemon=True).start()
    t = time.perf_counter()
    results = run_fleet(profiles, job, max_workers=args.forks)
    wall = time.perf_counter() - t
    stop.set()
    failed = [f"{r.board}: {r.error}" for r in results if not r.ok]
    print(json.dumps({"boards": len(results), "wall_s": wall, "per_board_s": [r.seconds for r in results],
                      "base_mb": base, "peak_mb": max(peak["mb"], rss_mb()),
                      "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "failed": failed}))


def write_inventory(lb: Loopback, ports: List[int], n: int, run: int) -> Path:
    hosts = {f"b{i:03d}": {"ansible_port": ports[i % len(ports)],
                           "edgesdk_workdir": str(lb.dir / f"run{run}" / f"b{i:03d}")} for i in range(n)}
    inv = {"all": {"vars": {"ansible_host": "127.0.0.1", "ansible_python_interpreter": sys.executable,
                            "edgesdk_board": "loop"},
                   "children": {"lab": {"hosts": hosts}}}}
    path = lb.dir / f"inventory-{run}.yml"
    path.write_text(json.dumps(inv, indent=1))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--forks", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--mb", type=float, default=2)
    ap.add_argument("--board-seconds", type=float, default=1.0)
    ap.add_argument("--agent", action="store_true", help="run the real agent's facts instead of sleep")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inventory", help=argparse.SUPPRESS)
    ap.add_argument("--limit", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    with Loopback() as lb:
        ports = [lb.sshd() for _ in range(args.servers)]
        lb.profile("loop", ports[0])
        model = lb.dir / "model.onnx"
        model.write_bytes(os.urandom(int(args.mb * 1e6)))
        runs: Dict[int, List[Dict[str, Any]]] = {n: [] for n in args.boards}
        counter = 0
        for _ in range(args.rounds):
            for n in args.boards:
                counter += 1
                inv = write_inventory(lb, ports, n, counter)
                cmd = [sys.executable, __file__, "--child", "--inventory", str(inv), "--limit", "lab",
                       "--model", str(model), "--forks", str(args.forks), "--board-seconds", str(args.board_seconds)]
                out = subprocess.run(cmd + (["--agent"] if args.agent else []), capture_output=True, text=True,
                                     timeout=1800)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-2000:])
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if r["failed"]:
                    raise SystemExit(f"{len(r['failed'])} boards failed: {r['failed'][0]}")
                runs[n].append(r)
        report(runs, args)


def report(runs: Dict[int, List[Dict[str, Any]]], args: Any) -> None:
    what = "agent facts" if args.agent else f"sleep {args.board_seconds:g} s (the board's own work, simulated)"
    print(f"board job: connect + push {args.mb:g} MB + {what}; --forks {args.forks}, {args.servers} sshd servers on "
          f"loopback, {os.cpu_count()} cores here; {args.rounds} rounds, medians")
    print(f"{'boards':>6} {'wall s':>8} {'per board s':>11} {'vs 1 board':>10} {'peak MB':>8} {'MB/concurrent':>13}")
    one = median([median(r["per_board_s"]) for r in runs[min(runs)]])
    base_peak = median([r["peak_mb"] - r["base_mb"] for r in runs[min(runs)]])
    for n, rs in sorted(runs.items()):
        per = median([median(r["per_board_s"]) for r in rs])
        conc = min(n, args.forks)
        grown = median([r["peak_mb"] - r["base_mb"] for r in rs])
        per_conc = (grown - base_peak) / (conc - 1) if conc > 1 else grown
        print(f"{n:>6} {median([r['wall_s'] for r in rs]):>8.2f} {per:>11.2f} {per / one:>10.2f} "
              f"{median([r['peak_mb'] for r in rs]):>8.0f} {per_conc:>13.1f}")
    print("per board s: median of the boards' own times (connect to done); vs 1 board: goal <= 1.5 at 16; "
          "MB/concurrent: the growth of the process's resident memory during the run beyond one board's, "
          "per additional concurrent board (the 1-board row: one board's own growth)")


if __name__ == "__main__":
    main()
