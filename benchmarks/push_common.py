"""Shared set-up for the push benchmarks: real sshd servers on loopback and a client HOME.

Not a benchmark itself. ``Loopback()`` makes a temp folder with a client key, a HOME whose
``~/.ssh/known_hosts`` trusts every server it starts, and ``EDGESDK_BOARDS_PATH`` pointing at a
folder of generated board profiles. Needs ``sshd`` and ``ssh-keygen`` (openssh-server).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SFTP_SERVER = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server")
                    if os.path.exists(p)), "internal-sftp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


class Loopback:
    """Temp HOME + key + sshd servers; a context manager that stops everything on exit."""

    def __init__(self) -> None:
        if not os.path.exists(SSHD):
            raise SystemExit("these benchmarks need sshd: apt-get install openssh-server")
        self.dir = Path(tempfile.mkdtemp(prefix="edgesdk-bench-"))
        self.home = self.dir / "home"
        (self.home / ".ssh").mkdir(parents=True, mode=0o700)
        self.key = _keygen(self.home / ".ssh" / "id_ed25519")
        self.boards = self.dir / "boards"
        self.boards.mkdir()
        self.procs: List[subprocess.Popen] = []
        self._env = {k: os.environ.get(k) for k in ("HOME", "EDGESDK_BOARDS_PATH", "SSH_AUTH_SOCK")}
        os.environ["HOME"] = str(self.home)
        os.environ["EDGESDK_BOARDS_PATH"] = str(self.boards)
        os.environ.pop("SSH_AUTH_SOCK", None)
        os.makedirs("/run/sshd", exist_ok=True)

    def __enter__(self) -> "Loopback":
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        for k, v in self._env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.dir, ignore_errors=True)

    def sshd(self, listen: str = "127.0.0.1", netns: Optional[str] = None) -> int:
        """Start one sshd (trusted in known_hosts); returns its port."""
        d = Path(tempfile.mkdtemp(dir=self.dir, prefix="sshd-"))
        host_key = _keygen(d / "host_key")
        port = _free_port()
        (d / "cfg").write_text("\n".join([
            f"Port {port}", f"ListenAddress {listen}", f"HostKey {host_key}",
            f"AuthorizedKeysFile {self.key}.pub", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "PidFile none", "PermitRootLogin yes", "LogLevel ERROR",
            "MaxStartups 64:30:128", "MaxSessions 64", f"Subsystem sftp {SFTP_SERVER}",
            # bash sources ~/.bashrc for ssh commands only when SHLVL < 2: skip this host's heavy one
            "SetEnv SHLVL=1", ""]))
        cmd = [SSHD, "-D", "-e", "-f", str(d / "cfg")]
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd
        self.procs.append(subprocess.Popen(cmd, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((listen, port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        kind, b64 = host_key.with_suffix(".pub").read_text().split()[:2]
        with open(self.home / ".ssh" / "known_hosts", "a") as fh:
            fh.write(f"[{listen}]:{port} {kind} {b64}\n")
        return port

    def profile(self, name: str, port: int, host: str = "127.0.0.1", workdir: Optional[Path] = None) -> str:
        wd = workdir or (self.dir / f"board-{name}")
        (self.boards / f"{name}.toml").write_text(
            f'name = "{name}"\n[connection]\nhost = "{host}"\nport = {port}\nworkdir = "{wd}"\n'
            f'python = "{sys.executable}"\n')
        return name

    def scp_argv(self, port: int, host: str = "127.0.0.1") -> List[str]:
        return ["scp", "-q", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={self.home}/.ssh/known_hosts",
                "-i", str(self.key), "-P", str(port)]


def median(xs):
    import statistics

    return statistics.median(xs)
