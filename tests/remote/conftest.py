"""Fixtures for the remote runner: a REAL OpenSSH server on loopback, a client HOME, a TCP proxy.

``sshd_factory()`` starts ``/usr/sbin/sshd -D -e -f <cfg>`` on a free port with its own host key
and authorized_keys in a temp folder. The client side gets its own HOME (``client_home``) with a
key pair, so ``~/.ssh/known_hosts`` and ``~/.ssh/config`` are temp files. Tests skip with a
reason when sshd or ssh-keygen is missing (``.ci/run`` installs openssh-server).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import pytest

from tests import tiers
from tests.remote.sshd import SFTP_SERVER, SSH_KEYGEN, SSHD, WHY_NO_SSHD, Sshd, free_port, keygen, wait_listening


@pytest.fixture(scope="session")
def client_key(tmp_path_factory) -> Path:
    """The client's private key (ed25519, no passphrase)."""
    if SSH_KEYGEN is None:
        tiers.require_or_skip("ssh", "needs ssh-keygen: apt-get install openssh-client")
    return keygen(tmp_path_factory.mktemp("clientkey") / "id_ed25519")


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory, client_key):
    """Start sshd servers: ``sshd_factory(extra=["AuthenticationMethods ..."]) -> Sshd``; ``extra``
    lines come first in the config (sshd keeps the first value of a keyword)."""
    if SSHD is None:
        tiers.require_or_skip("ssh", WHY_NO_SSHD)
    os.makedirs("/run/sshd", exist_ok=True)   # privilege separation folder sshd insists on
    started: List[Sshd] = []

    def start(authorized: Optional[Path] = None, extra: Sequence[str] = ()) -> Sshd:
        d = tmp_path_factory.mktemp("sshd")
        host_key = keygen(d / "host_ed25519")
        auth = d / "authorized_keys"
        shutil.copy(authorized or client_key.with_suffix(".pub"), auth)
        port = free_port()
        cfg = d / "sshd_config"
        cfg.write_text("\n".join([
            *extra, f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"AuthorizedKeysFile {auth}",
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
        wait_listening(port, proc, log)
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
