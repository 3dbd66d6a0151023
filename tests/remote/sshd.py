"""Helpers for the remote runner tests: a REAL OpenSSH server on loopback (:class:`Sshd`,
started by the ``sshd_factory`` fixture of ``tests/remote/conftest.py``), host-key trust for a
client HOME, free ports, key generation and a TCP proxy that cuts connections (:class:`DropProxy`).
Tests import them from here (``from tests.remote.sshd import trust``), never from a conftest.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tests import tiers


def _sshd() -> Optional[str]:
    """The sshd binary: ``EDGESDK_TEST_SSHD`` when set (None unless it is an executable file), else the system's."""
    override = os.environ.get("EDGESDK_TEST_SSHD")
    if override is not None:
        return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    return shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


SSHD = _sshd()
SSH_KEYGEN = shutil.which("ssh-keygen")
SFTP_SERVER = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                                "/usr/libexec/sftp-server") if os.path.exists(p)), None)

WHY_NO_SSHD = ("needs the OpenSSH server (sshd) and ssh-keygen: apt-get install openssh-server openssh-client"
               + (f" (EDGESDK_TEST_SSHD={os.environ['EDGESDK_TEST_SSHD']} is not an executable)"
                  if os.environ.get("EDGESDK_TEST_SSHD") is not None and SSHD is None else ""))
needs_sshd = tiers.needs("ssh", SSHD is not None and SSH_KEYGEN is not None, WHY_NO_SSHD)


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


def wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 10.0, name: str = "sshd") -> None:
    """Return once ``proc`` (a server started by a test) accepts connections on 127.0.0.1:``port``;
    RuntimeError with the tail of its ``log`` when it exits first or does not listen in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: {log.read_text()[-2000:] if log.exists() else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not start listening")


def trust(home: Path, srv: Sshd, host: str = "127.0.0.1", port: Optional[int] = None) -> None:
    """Record ``srv``'s host key in ``home``'s known_hosts (as ssh would after 'yes'); ``port``:
    the port the client dials when it is not sshd's own (a proxy in front of it)."""
    line = srv.known_hosts_line(host)
    if port is not None:
        line = line.replace(f":{srv.port} ", f":{port} ")
    with open(home / ".ssh" / "known_hosts", "a") as fh:
        fh.write(line)


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
