"""`sdk validate` on a board reached over a REAL OpenSSH server on loopback (the remote runner's
sshd fixture): a passing spec, a failing one with the failing check named, and a fleet where the
SSH board's link drops mid-run while the `local` board goes on."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.remote.sshd import DropProxy, needs_sshd, trust

pytestmark = [needs_sshd, pytest.mark.ssh]

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, name: str) -> Path:
    text = (ROOT / "examples" / "digits" / name).read_text()
    p = tmp_path / name
    p.write_text(text.replace("runs = 100", "runs = 20").replace("min_seconds = 0.5", "min_seconds = 0.05"))
    return p


def _sdk(*args):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))


def test_validate_over_ssh_pass_and_fail(board_profile, client_home, sshd, example_model, example_eval, tmp_path):
    trust(client_home, sshd)
    name, other = board_profile(), board_profile()  # a fleet of two SSH boards: validated side by side
    proc = _sdk("validate", example_model, "--board", name, "--board", other, "--data", example_eval,
                "--limit", "100", "--spec", _spec(tmp_path, "spec.toml"), "--json", tmp_path / "r.json", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    boards = json.loads((tmp_path / "r.json").read_text())["boards"]
    assert [b["board"] for b in boards] == [name, other]
    for board in boards:
        assert board["verdict"] == "pass" and board["compare"]["logits"]["cosine"] > 0.9999
        assert board["facts"]["board"]["host"] == "127.0.0.1"
    proc = _sdk("validate", example_model, "--board", name, "--data", example_eval, "--limit", "100",
                "--spec", _spec(tmp_path, "spec_fail.toml"), "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAIL {name}: latency.p99" in proc.stdout


class _OneLinkProxy(DropProxy):
    """The remote runner's DropProxy, but the board is gone for good once its link is cut: the
    proxy takes one connection only, so reconnect attempts are refused."""

    def _accept(self) -> None:
        try:
            client, _ = self.sock.accept()
        except OSError:
            return
        self.connections += 1
        self.sock.close()
        server = socket.create_connection(("127.0.0.1", self.target))
        threading.Thread(target=self._pipe, args=(client, server, {"left": self.drop_after}), daemon=True).start()
        threading.Thread(target=self._pipe, args=(server, client, None), daemon=True).start()


def test_ssh_board_dropping_mid_run(board_profile, client_home, sshd, example_model, example_eval, tmp_path):
    """The SSH link is cut for good after the agent upload and the device facts, while the
    inputs are on their way (a byte budget on the client -> board direction): that board's
    checks fail with the cause, the facts it gave are kept, and `local` still passes."""
    from sdk.remote import agent_zipapp

    budget = agent_zipapp().stat().st_size + 60_000  # agent + facts + model fit; the 115 kB of inputs do not
    proxy = _OneLinkProxy(sshd.port, drop_after=budget)
    try:
        trust(client_home, sshd, port=proxy.port)
        name = board_profile("cut", port=proxy.port)
        proc = _sdk("validate", example_model, "--board", name, "--board", "local", "--data", example_eval,
                    "--spec", _spec(tmp_path, "spec.toml"), "--json", tmp_path / "r.json", "-q")
    finally:
        proxy.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cut, local = json.loads((tmp_path / "r.json").read_text())["boards"]
    assert cut["verdict"] == "fail" and local["verdict"] == "pass", cut["error"]
    assert cut["failed_stage"] == "infer", cut["error"]
    assert cut["facts"]["python"], "facts gathered before the drop are kept"
    checks = {c["name"]: c for c in cut["checks"]}
    assert checks["board.run"]["verdict"] == "fail"
    assert checks["latency.p99"]["verdict"] == "fail" and checks["latency.p99"]["reason"].startswith("board failed during infer")
    assert checks["runtime.onnxruntime"]["verdict"] == "pass"
    assert f"FAIL {name}: the board failed during infer" in proc.stdout
