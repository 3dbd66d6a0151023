"""Re-push of an unchanged model: no upload, one round trip (goal), against the first push.

Runs a real sshd on loopback. Each round pushes a fresh copy (new workdir) and then re-pushes
the same file; it counts round trips (commands + SFTP sessions) and times both. Prints medians.

    python benchmarks/push_repush.py [--rounds 10] [--mb 20]
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
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--mb", type=float, default=20)
    args = ap.parse_args()
    from sdk.remote import Board

    with Loopback() as lb:
        port = lb.sshd()
        model = lb.dir / "model.onnx"
        model.write_bytes(os.urandom(int(args.mb * 1e6)))
        first_s, again_s, first_trips, again_trips, sent_again, bare_s = [], [], [], [], [], []
        with Board(lb.profile("b", port)) as board:
            board.transport.run("true")   # connect outside the timed part
            for i in range(args.rounds):
                board.profile.connection.workdir = str(lb.dir / f"wd{i}")
                t0, n0 = time.perf_counter(), board.round_trips
                board.push(model)
                t1, n1 = time.perf_counter(), board.round_trips
                again = board.push(model)
                t2, n2 = time.perf_counter(), board.round_trips
                first_s.append(t1 - t0)
                again_s.append(t2 - t1)
                first_trips.append(n1 - n0)
                again_trips.append(n2 - n1)
                sent_again.append(again.bytes_sent)
                t3 = time.perf_counter()
                board.transport.run("true")
                bare_s.append(time.perf_counter() - t3)
        print(f"model {args.mb:g} MB, {args.rounds} rounds, medians")
        print(f"first push: {median(first_s) * 1e3:8.1f} ms, {median(first_trips):.0f} round trips")
        print(f"re-push:    {median(again_s) * 1e3:8.1f} ms, {median(again_trips):.0f} round trips, "
              f"{max(sent_again)} bytes sent (goal: 0 bytes, 1 round trip)")
        print(f"one bare command (`true`) on the same connection: {median(bare_s) * 1e3:8.1f} ms "
              "(the floor of one round trip: the board's shell start-up)")
        print(f"ratio re-push / first push: {median(again_s) / median(first_s):.3f}; "
              f"re-push / bare command: {median(again_s) / median(bare_s):.2f}")


if __name__ == "__main__":
    main()
