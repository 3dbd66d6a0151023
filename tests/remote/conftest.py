"""Fixtures for the remote runner: a REAL OpenSSH server on loopback, a client HOME, a TCP proxy.

``sshd_factory()`` starts ``/usr/sbin/sshd -D -e -f <cfg>`` on a free port with its own host key
and authorized_keys in a temp folder. The client side gets its own HOME (``client_home``) with a
key pair, so ``~/.ssh/known_hosts`` and ``~/.ssh/config`` are temp files. Tests skip with a
reason when sshd or ssh-keygen is missing (``.ci/run`` installs openssh-server).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

import pytest

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
SSH_KEYGEN = shutil.which("ssh-keygen")
SFTP_SERVER = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                                "/usr/libexec/sftp-server") if os.path.exists(p)), None)

needs_sshd = pytest.mark.skipif(SSHD is None or SSH_KEYGEN is None,
                                reason="needs the OpenSSH server (sshd) and ssh-keygen: apt-get install openssh-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run([SSH_KEYGEN, "-q", "-t", kind, "-N", "", "-C", "edgesdk-test", "-f", str(path)], check=True)
    return path


@dataclass
class Sshd:
    """A running sshd: ``port``, ``host_key_pub`` (text of the server's public key line)."""

    port: int
    dir: Path
    proc: subprocess.Popen
    host_key: Path
    log: Path

    @property
    def host_key_pub(self) -> str:
        return self.host_key.with_suffix(".pub").read_text().split(" ")[:2]

    def known_hosts_line(self, host: str = "127.0.0.1") -> str:
        kind, b64 = self.host_key_pub
        return f"[{host}]:{self.port} {kind} {b64}\n"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {log.read_text() if log.exists() else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("sshd did not start listening")


@pytest.fixture(scope="session")
def client_key(tmp_path_factory) -> Path:
    """The client's private key (ed25519, no passphrase)."""
    if SSH_KEYGEN is None:
        pytest.skip("needs ssh-keygen: apt-get install openssh-client")
    return keygen(tmp_path_factory.mktemp("clientkey") / "id_ed25519")


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory, client_key):
    """Start sshd servers: ``sshd_factory(allow_tcp_forwarding=True) -> Sshd``."""
    if SSHD is None:
        pytest.skip("needs the OpenSSH server (sshd): apt-get install openssh-server")
    os.makedirs("/run/sshd", exist_ok=True)   # privilege separation folder sshd insists on
    started: List[Sshd] = []

    def start(authorized: Optional[Path] = None) -> Sshd:
        d = tmp_path_factory.mktemp("sshd")
        host_key = keygen(d / "host_ed25519")
        auth = d / "authorized_keys"
        shutil.copy(authorized or client_key.with_suffix(".pub"), auth)
        port = free_port()
        cfg = d / "sshd_config"
        cfg.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"AuthorizedKeysFile {auth}",
            "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "PidFile none", "PermitRootLogin yes", "AllowTcpForwarding yes",
            "AllowAgentForwarding no", "X11Forwarding no", "PrintMotd no", "LogLevel ERROR", "MaxStartups 64:30:128",
            "MaxSessions 64", f"Subsystem sftp {SFTP_SERVER or 'internal-sftp'}",
            # bash sources ~/.bashrc for ssh commands only when SHLVL < 2: keep a heavy one out
            "SetEnv SHLVL=1", ""]))
        log = d / "sshd.log"
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        srv = Sshd(port=port, dir=d, proc=proc, host_key=host_key, log=log)
        started.append(srv)
        _wait_listening(port, proc, log)
        return srv

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def sshd(sshd_factory) -> Sshd:
    return sshd_factory()


@pytest.fixture
def client_home(tmp_path, monkeypatch, client_key) -> Path:
    """A HOME for the client: ``~/.ssh/id_ed25519`` is the test key; no ssh-agent; empty known_hosts."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    shutil.copy(client_key, home / ".ssh" / "id_ed25519")
    shutil.copy(client_key.with_suffix(".pub"), home / ".ssh" / "id_ed25519.pub")
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("EDGESDK_BOARDS_PATH", raising=False)
    return home


def trust(home: Path, srv: Sshd, host: str = "127.0.0.1", port: Optional[int] = None) -> None:
    """Record ``srv``'s host key in ``home``'s known_hosts (as ssh would after 'yes'); ``port``:
    the port the client dials when it is not sshd's own (a proxy in front of it)."""
    line = srv.known_hosts_line(host)
    if port is not None:
        line = line.replace(f":{srv.port} ", f":{port} ")
    with open(home / ".ssh" / "known_hosts", "a") as fh:
        fh.write(line)


@pytest.fixture
def board_profile(tmp_path, client_home, sshd, monkeypatch) -> Callable[..., str]:
    """Write a profile for a board on ``sshd`` into a folder on EDGESDK_BOARDS_PATH; returns its name."""
    boards = tmp_path / "boards"
    boards.mkdir(exist_ok=True)
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    count = {"n": 0}

    def make(name: Optional[str] = None, *, port: Optional[int] = None, host: str = "127.0.0.1",
             workdir: Optional[Path] = None, extra: str = "", srv: Optional[Sshd] = None, user: Optional[str] = None) -> str:
        count["n"] += 1
        name = name or f"loop{count['n']}"
        srv = srv or sshd
        wd = workdir or (tmp_path / f"board-{name}")
        lines = [f'name = "{name}"', f'description = "sshd on loopback ({name})"', "", "[connection]",
                 f'host = "{host}"']
        if port is not None or host == "127.0.0.1":
            lines.append(f"port = {port or srv.port}")
        if user:
            lines.append(f'user = "{user}"')
        # the board's Python: this interpreter (it has numpy and onnxruntime), not whatever python3 is on PATH
        lines += [f'workdir = "{wd}"', f'python = "{sys.executable}"', extra, ""]
        (boards / f"{name}.toml").write_text("\n".join(lines))
        return name

    return make


class DropProxy:
    """A TCP proxy on loopback to ``port`` that cuts a connection (both ways) once ``drop_after``
    bytes went client -> server (None: never); only the first ``cut`` connections (None: all).
    Counts connections."""

    def __init__(self, port: int, drop_after: Optional[int] = None, cut: Optional[int] = None):
        self.target = port
        self.drop_after = drop_after
        self.cut = cut
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            server = socket.create_connection(("127.0.0.1", self.target))
            cut = self.cut is None or self.connections <= self.cut
            budget = {"left": self.drop_after if cut else None}
            threading.Thread(target=self._pipe, args=(client, server, budget), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, None), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, budget) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if budget is not None and budget["left"] is not None:
                    if len(data) >= budget["left"]:
                        dst.sendall(data[:budget["left"]])
                        break
                    budget["left"] -= len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()
