"""Board jobs die with their controller (issue 27, class 2).

A real `sdk push`, `sdk validate` and a fleet push run the REAL board agent (a long bench: 600 s
minimum) on a board over a real sshd on loopback and on the ``local`` board; the `sdk` process
then gets SIGINT, SIGTERM, SIGHUP or SIGKILL. Within 5 s no process of the board job may be left
(found by the board's workdir in /proc), and the exit code says which signal it was (128 + N;
-9 for SIGKILL, which nobody can handle: there the agent's watchdog sees its stdin close).
Each case prints ``signal-table <command> <signal> <seconds>`` (the note's table)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.remote.sshd import needs_sshd, trust
from tests.security.helpers import local_board, seconds_until_gone, start, wait_for

GONE_WITHIN_S = 5.0
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
LONG = ["--runs", "100", "--min-seconds", "600", "--idle-seconds", "0", "--input-shape", "image=1x1x8x8"]
EXPECTED_RC = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGKILL: -9}
LAST_LINE = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)", signal.SIGHUP: "hangup (SIGHUP)"}


def _stop(proc: subprocess.Popen, sig: int, marker: str, what: str) -> float:
    time.sleep(1.0)                         # the agent is in its measured loop
    t0 = time.monotonic()
    proc.send_signal(sig)
    gone = seconds_until_gone(marker)
    took = gone if gone == float("inf") else time.monotonic() - t0
    try:
        _out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    print(f"signal-table {what} {signal.Signals(sig).name} {took:.2f}")
    assert took < GONE_WITHIN_S, f"{what}: board processes left {took} s after {signal.Signals(sig).name}"
    assert proc.returncode == EXPECTED_RC[sig], (proc.returncode, err)
    if sig in LAST_LINE:
        assert "Traceback" not in err and err.strip().splitlines()[-1] == LAST_LINE[sig], err
    return took


def _ssh_board(board_profile, tmp_path: Path, name: str) -> tuple:
    wd = tmp_path / f"sigwd-{name}"
    return board_profile(name, workdir=wd), str(wd)


@needs_sshd
@pytest.mark.ssh
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_push_on_an_ssh_board(sig, client_home, sshd, board_profile, tmp_path, example_model):
    trust(client_home, sshd)
    name, wd = _ssh_board(board_profile, tmp_path, "sigpush")
    proc = start("push", example_model, "-b", name, *LONG)
    wait_for(wd, 1, proc)
    _stop(proc, sig, wd, "push(ssh)")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_validate_on_the_local_board(sig, tmp_path, monkeypatch, example_model):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    wd = tmp_path / "sigwd-val"
    local_board(boards, "sigval", wd)
    data = tmp_path / "inputs.npy"
    np.save(data, np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    spec = tmp_path / "spec.toml"
    spec.write_text("[run]\nruns = 100\nmin_seconds = 600\n")
    proc = start("validate", example_model, "-b", "sigval", "--data", data, "--spec", spec, "--quiet")
    wait_for(str(wd), 1, proc, timeout_s=180)
    _stop(proc, sig, str(wd), "validate(local)")


@needs_sshd
@pytest.mark.ssh
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_fleet_of_an_ssh_and_a_local_board(sig, client_home, sshd, board_profile, tmp_path, example_model):
    trust(client_home, sshd)
    marker = str(tmp_path / "sigwd-")
    ssh_name, _ = _ssh_board(board_profile, tmp_path, "sigfleet")
    local_board(Path(os.environ["EDGESDK_BOARDS_PATH"]), "sighere", tmp_path / "sigwd-here")
    proc = start("push", example_model, "-b", ssh_name, "-b", "sighere", *LONG)
    wait_for(marker, 2, proc, timeout_s=180)
    _stop(proc, sig, marker, "fleet(ssh+local)")


def test_the_agent_alone_stops_when_its_stdin_closes(tmp_path, example_model):
    """The watchdog by itself: the agent run directly, its controller's end of stdin closed."""
    import json

    from sdk.remote.board import agent_zipapp

    req = {"model_path": str(example_model), "runs": 10, "min_seconds": 600, "idle_seconds": 0,
           "input_shapes": {"image": [1, 1, 8, 8]}, "workdir": str(tmp_path / "agentwd"), "power": False,
           "telemetry": False}
    proc = subprocess.Popen([sys.executable, str(agent_zipapp()), "bench", "--request", "-", "--watch"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    proc.stdin.write(json.dumps(req).encode() + b"\n")
    proc.stdin.flush()
    time.sleep(3.0)
    assert proc.poll() is None, proc.communicate()
    t0 = time.monotonic()
    proc.stdin.close()
    proc.wait(10)
    took = time.monotonic() - t0
    err = proc.stderr.read().decode()
    assert took < GONE_WITHIN_S and proc.returncode == 143, (took, proc.returncode, err[-2000:])
    assert "the controller closed stdin" in err
