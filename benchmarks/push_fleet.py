"""Eight boards at once against one: wall time of ``run_fleet`` (goal: 8 boards <= 1.5x one board).

Each "board" is its own sshd on loopback with its own profile. A board's job is what ``sdk push``
does around the measurement: connect (key exchange, auth), push the model (a fresh workdir each
round, so it is really uploaded), then run a command on the board. The board's own compute is
stood in for by ``sleep --board-seconds`` (default 1 s), because here the eight "boards" share
this host's cores, while real boards each bring their own CPU. ``--agent`` runs the real agent's
``facts`` command instead (then the eight agents share this host's cores, and say so).
Rounds alternate (one board, eight boards, ...); prints medians and the ratio.

    python benchmarks/push_fleet.py [--boards 8] [--rounds 3] [--mb 5] [--board-seconds 1] [--agent]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from push_common import Loopback, median  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=5)
    ap.add_argument("--board-seconds", type=float, default=1.0)
    ap.add_argument("--agent", action="store_true", help="run the real agent's facts instead of sleep")
    args = ap.parse_args()
    from sdk.remote import run_fleet

    with Loopback() as lb:
        names = [lb.profile(f"b{i}", lb.sshd()) for i in range(args.boards)]
        model = lb.dir / "model.onnx"
        model.write_bytes(os.urandom(int(args.mb * 1e6)))
        counter = {"n": 0}

        def job(board):
            counter["n"] += 1
            board.profile.connection.workdir = str(lb.dir / f"wd-{board.name}-{counter['n']}")
            board.push(model)
            if args.agent:
                return board.check()
            return board.transport.run(["sleep", str(args.board_seconds)], check=True)

        if args.agent:
            run_fleet(names[:1], job)   # build the zipapp once, outside the timing
        one, many = [], []
        for _ in range(args.rounds):
            for subset, out in ((names[:1], one), (names, many)):
                t = time.perf_counter()
                results = run_fleet(subset, job, max_workers=args.boards)
                out.append(time.perf_counter() - t)
                failed = [r for r in results if not r.ok]
                if failed:
                    raise SystemExit(f"{failed[0].board}: {failed[0].error}")
        # the same job with OpenSSH's own clients (ssh, scp) in threads: what this host allows
        import shlex
        import subprocess
        from concurrent.futures import ThreadPoolExecutor

        ports = {n: int(next(ln for ln in (lb.boards / f"{n}.toml").read_text().splitlines()
                              if ln.startswith("port")).split("=")[1]) for n in names}

        def openssh_job(name):
            counter["n"] += 1
            wd = lb.dir / f"ref-{name}-{counter['n']}"
            base = lb.scp_argv(ports[name])
            ssh = ["ssh"] + [a if a != "-P" else "-p" for a in base[2:]] + ["127.0.0.1"]
            final = f"{wd}/models/x.onnx"
            subprocess.run(ssh + [f"mkdir -p {shlex.quote(str(wd))}/models; df -Pk {shlex.quote(str(wd))}"],
                           check=True, capture_output=True)
            subprocess.run(base + [str(model), f"127.0.0.1:{final}.part"], check=True)
            subprocess.run(ssh + [f"sha256sum < {final}.part; mv {final}.part {final}"], check=True, capture_output=True)
            subprocess.run(ssh + [f"sleep {args.board_seconds}"], check=True)

        ref_one, ref_many = [], []
        if not args.agent:
            for _ in range(args.rounds):
                for subset, out in ((names[:1], ref_one), (names, ref_many)):
                    t = time.perf_counter()
                    with ThreadPoolExecutor(len(subset)) as pool:
                        list(pool.map(openssh_job, subset))
                    out.append(time.perf_counter() - t)
        what = "agent facts" if args.agent else f"sleep {args.board_seconds:g} s"
        print(f"board job: connect + push {args.mb:g} MB + {what}; {args.rounds} rounds, medians")
        print(f"  1 board:  {median(one):.2f} s")
        print(f"  {args.boards} boards: {median(many):.2f} s")
        print(f"  ratio {args.boards} / 1: {median(many) / median(one):.2f} (goal <= 1.5)")
        if ref_one:
            print(f"reference, the same job with OpenSSH ssh + scp processes: 1 board {median(ref_one):.2f} s, "
                  f"{args.boards} boards {median(ref_many):.2f} s, ratio {median(ref_many) / median(ref_one):.2f}")


if __name__ == "__main__":
    main()
