"""`sdk validate` on a board reached over a REAL OpenSSH server on loopback (the remote runner's
sshd fixture): a passing spec, a failing one with the failing check named, and a fleet where the
SSH board's link drops mid-run while the `local` board goes on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DropProxy, needs_sshd, trust

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
    name = board_profile()
    proc = _sdk("validate", example_model, "--board", name, "--data", example_eval, "--limit", "100",
                "--spec", _spec(tmp_path, "spec.toml"), "--json", tmp_path / "r.json", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    board = json.loads((tmp_path / "r.json").read_text())["boards"][0]
    assert board["board"] == name and board["verdict"] == "pass"
    assert board["compare"]["logits"]["cosine"] > 0.9999
    proc = _sdk("validate", example_model, "--board", name, "--data", example_eval, "--limit", "100",
                "--spec", _spec(tmp_path, "spec_fail.toml"), "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAIL {name}: latency.p99" in proc.stdout


def test_ssh_board_dropping_mid_run(board_profile, client_home, sshd, example_model, example_eval, tmp_path):
    """The link to the SSH board is cut (a TCP proxy drops every connection after a byte budget)
    once the run has started: that board's checks fail with the cause, `local` still passes."""
    proxy = DropProxy(sshd.port, drop_after=60_000)
    try:
        trust(client_home, sshd, port=proxy.port)
        name = board_profile("cut", port=proxy.port)
        proc = _sdk("validate", example_model, "--board", name, "--board", "local", "--data", example_eval,
                    "--limit", "100", "--spec", _spec(tmp_path, "spec.toml"), "--json", tmp_path / "r.json", "-q")
    finally:
        proxy.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cut, local = json.loads((tmp_path / "r.json").read_text())["boards"]
    print(cut["failed_stage"], cut["error"])
    assert cut["verdict"] == "fail" and cut["error"] and local["verdict"] == "pass"
    assert all(c["verdict"] == "fail" for c in cut["checks"] if c["reason"].startswith("board failed"))
