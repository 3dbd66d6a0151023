"""``sdk boards`` and ``sdk push`` as a user runs them (a subprocess), against a real sshd."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.remote.sshd import free_port, needs_sshd, trust


def sdk(*args):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True, timeout=180)


def test_boards_list_and_show(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("EDGESDK_BOARDS_PATH", raising=False)
    out = sdk("boards")
    assert out.returncode == 0 and "jetson-xavier-nx" in out.stdout and "raspberry-pi-5" in out.stdout
    shown = json.loads(sdk("boards", "show", "jetson-nx", "--json").stdout)
    assert shown["name"] == "jetson-xavier-nx" and shown["connection"]["host"]
    bad = sdk("boards", "show", "jetson-tx9")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown board 'jetson-tx9'")
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


@needs_sshd
@pytest.mark.ssh
def test_push_to_a_fleet_with_a_dead_board(client_home, sshd, board_profile, static_conv_model, tmp_path):
    trust(client_home, sshd)
    good = board_profile("good")
    dead = board_profile("dead", port=free_port())
    out = tmp_path / "results.json"
    proc = sdk("push", static_conv_model, "--board", good, "--board", dead, "--runs", "5", "--min-seconds", "0.05",
               "--idle-seconds", "0", "--json", out)
    assert proc.returncode == 1, proc.stderr
    assert "error: dead: connection refused by 127.0.0.1" in proc.stderr and "Traceback" not in proc.stderr
    assert "p90 ms" in proc.stdout and "good" in proc.stdout and "1 of 2 boards succeeded" in proc.stdout
    results = json.loads(out.read_text())
    assert [r["board"]["name"] for r in results] == ["good", "dead"]
    assert results[0]["latency_ms"]["count"] >= 5 and results[0]["transfer"]["skipped"] is False
    assert results[1]["error"]["type"] == "BoardConnectionError"
    again = sdk("push", static_conv_model, "--board", good, "--runs", "5", "--min-seconds", "0.05",
                "--idle-seconds", "0", "--json", "-")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["transfer"]["skipped"] is True


@needs_sshd
@pytest.mark.ssh
def test_unknown_host_needs_trust_new_host(client_home, sshd, board_profile, static_conv_model):
    name = board_profile("fresh")
    refused = sdk("boards", "check", name)
    assert refused.returncode == 2 and "fresh: unknown host key" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    facts = sdk("boards", "check", name, "--trust-new-host", "--json", "-")
    assert facts.returncode == 0, facts.stderr
    assert json.loads(facts.stdout)["python"]
    assert (client_home / ".ssh" / "known_hosts").read_text().startswith(f"[127.0.0.1]:{sshd.port} ")
    bad = sdk("push", static_conv_model, "--board", name, "--precision", "fp64")
    assert bad.returncode == 2 and bad.stderr.startswith("error: bad --precision 'fp64'")
