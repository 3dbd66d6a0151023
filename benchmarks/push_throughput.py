"""Upload throughput of ``sdk.remote`` (pipelined SFTP) side by side with OpenSSH ``scp``.

Same file, same sshd, same client key, interleaved rounds (ours, scp, stock paramiko put, ...)
so machine noise hits all alike; prints each side's median MB/s and the ratio ours / scp
(goal on plain loopback >= 0.7x, where paramiko's Python packet layer is the limit).

``--netns`` runs the server in a network namespace behind a veth pair shaped with
``tc ... rate 1gbit`` (a board's gigabit Ethernet; goal >= 0.9x scp). Needs root and iproute2.

    python benchmarks/push_throughput.py [--mb 128] [--rounds 5] [--netns]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from push_common import Loopback, median  # noqa: E402

NS = "edgesdk-bench"


@contextmanager
def shaped_link(rate: str = "1gbit"):
    """A netns with a veth pair 10.77.0.1 (host) <-> 10.77.0.2 (ns), both ends shaped to ``rate``."""
    def sh(*cmd, check=True):
        subprocess.run(cmd, check=check, capture_output=True)

    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "netns", "add", NS)
    try:
        sh("ip", "link", "add", "eb-host", "type", "veth", "peer", "name", "eb-ns")
        sh("ip", "link", "set", "eb-ns", "netns", NS)
        sh("ip", "addr", "add", "10.77.0.1/24", "dev", "eb-host")
        sh("ip", "link", "set", "eb-host", "up")
        sh("ip", "netns", "exec", NS, "ip", "addr", "add", "10.77.0.2/24", "dev", "eb-ns")
        sh("ip", "netns", "exec", NS, "ip", "link", "set", "eb-ns", "up")
        sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        sh("tc", "qdisc", "add", "dev", "eb-host", "root", "tbf", "rate", rate, "burst", "256kb", "latency", "5ms")
        sh("ip", "netns", "exec", NS, "tc", "qdisc", "add", "dev", "eb-ns", "root", "tbf", "rate", rate,
           "burst", "256kb", "latency", "5ms")
        yield "10.77.0.2"
    finally:
        sh("ip", "link", "del", "eb-host", check=False)
        sh("ip", "netns", "del", NS, check=False)


def run(args, host: str, netns=None) -> None:
    from sdk.remote.ssh import SSHConnection, resolve_host
    from sdk.remote.transport import SSHTransport

    with Loopback() as lb:
        port = lb.sshd(listen=host, netns=netns)
        src = lb.dir / "model.bin"
        src.write_bytes(os.urandom(int(args.mb * 1e6)))
        dest = lb.dir / "dest"
        dest.mkdir()
        mb = src.stat().st_size / 1e6
        rates = {"sdk.remote put": [], "scp": [], "paramiko SFTPClient.put": []}
        for _ in range(args.rounds):
            # every side pays its connection set-up (key exchange, auth) inside the timed part, as scp does
            t = time.perf_counter()
            with SSHTransport(SSHConnection(resolve_host(host, port=port), board="bench")) as tr:
                tr.put(src, str(dest / "ours.bin"))
            rates["sdk.remote put"].append(mb / (time.perf_counter() - t))
            t = time.perf_counter()
            subprocess.run(lb.scp_argv(port) + [str(src), f"{host}:{dest}/scp.bin"], check=True)
            rates["scp"].append(mb / (time.perf_counter() - t))
            if not args.no_stock:
                t = time.perf_counter()
                # stock paramiko: its default cipher order (aes128-ctr + hmac-sha2-256), 2 MiB window
                import paramiko

                c = paramiko.SSHClient()
                c.load_host_keys(str(lb.home / ".ssh" / "known_hosts"))
                c.connect(host, port=port, key_filename=str(lb.key), allow_agent=False, look_for_keys=False)
                c.open_sftp().put(str(src), str(dest / "stock.bin"))
                c.close()
                rates["paramiko SFTPClient.put"].append(mb / (time.perf_counter() - t))
        where = f"netns link shaped to {args.rate}" if netns else "plain loopback"
        print(f"{where}: {mb:.0f} MB file, {args.rounds} interleaved rounds (each incl. connect), medians")
        for name, xs in rates.items():
            if xs:
                print(f"  {name:26s} {median(xs):7.1f} MB/s")
        print(f"  ratio sdk.remote / scp: {median(rates['sdk.remote put']) / median(rates['scp']):.2f} "
              f"(goal >= {0.9 if netns else 0.7})")
        if rates["paramiko SFTPClient.put"]:
            print(f"  ratio stock paramiko put / scp: "
                  f"{median(rates['paramiko SFTPClient.put']) / median(rates['scp']):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--netns", action="store_true", help="also measure over a veth pair shaped to --rate")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--no-stock", action="store_true", help="skip stock paramiko SFTPClient.put")
    args = ap.parse_args()
    run(args, "127.0.0.1")
    if args.netns:
        with shaped_link(args.rate) as host:
            run(args, host, netns=NS)


if __name__ == "__main__":
    main()
