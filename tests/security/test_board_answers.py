"""A board's answer is bounded and validated (issue 27, class 3).

A hostile or broken board (a stand-in for its Python: a real process printing what a broken agent
would) prints hundreds of MB, non-finite latencies (``NaN``, ``Infinity`` tokens, ``1e999``), or
strings with terminal escapes. The host reads at most ``max_answer_mb`` (default 64 MiB), rejects
non-finite numbers with one error naming the board, never writes ``NaN`` into ``--json``, and no
escape byte from the board reaches the terminal."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.remote.sshd import needs_sshd, trust
from tests.security.helpers import error_lines, local_board, sdk, sdk_with_rss

PUSH = ["--runs", "20", "--min-seconds", "0", "--idle-seconds", "0", "--input-shape", "image=1x1x8x8"]


@pytest.fixture(scope="module")
def real_answer(tmp_path_factory, example_model) -> dict:
    """What the real agent answers to a bench request (the shape a hostile board imitates)."""
    from sdk.remote.board import agent_zipapp

    req = {"model_path": str(example_model), "runs": 20, "min_seconds": 0, "idle_seconds": 0,
           "input_shapes": {"image": [1, 1, 8, 8]}, "power": False, "telemetry": False}
    out = subprocess.run([sys.executable, str(agent_zipapp()), "bench", "--request", "-"], input=json.dumps(req),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def fake_board(tmp_path: Path, name: str, script: str, monkeypatch, extra: str = "") -> str:
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    py = tmp_path / f"{name}.sh"
    py.write_text("#!/bin/sh\n" + script)
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return local_board(boards, name, tmp_path / f"{name}-wd", python=str(py), extra=extra)


def _answer_file(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "answer.json"
    f.write_text(text)
    return f


def test_an_endless_answer_is_cut_at_the_cap_with_a_short_error(tmp_path, monkeypatch, example_model):
    """300 MB of output: the host stops reading at 64 MiB; the error line is short and names the board."""
    name = fake_board(tmp_path, "flood", "cat > /dev/null & head -c 300000000 /dev/zero | tr '\\0' x\n", monkeypatch)
    proc, rss = sdk_with_rss("push", example_model, "-b", name, *PUSH, timeout=300)
    assert proc.returncode != 0
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and errs[0].startswith("error: board 'flood'") or errs[0].startswith("error: flood"), \
        proc.stderr[:2000]
    assert "exceeded 64 MiB" in errs[0] and len(errs[0]) < 600, errs[0][:2000]
    assert len(proc.stderr) < 5000 and len(proc.stdout) < 5000
    print(f"host max RSS with a 300 MB answer: {rss:.0f} MB")
    assert rss < 1000, rss


@needs_sshd
@pytest.mark.ssh
def test_an_endless_answer_over_ssh_is_cut_at_a_configured_cap(client_home, sshd, board_profile, tmp_path,
                                                               example_model):
    trust(client_home, sshd)
    name = board_profile("floodssh", extra="max_answer_mb = 2")
    prof = Path(os.environ["EDGESDK_BOARDS_PATH"]) / f"{name}.toml"
    py = tmp_path / "flood.sh"
    py.write_text("#!/bin/sh\ncat > /dev/null & head -c 50000000 /dev/zero | tr '\\0' x\n")
    py.chmod(0o755)
    prof.write_text(prof.read_text().replace(f'python = "{sys.executable}"', f'python = "{py}"'))
    proc = sdk("push", example_model, "-b", name, *PUSH)
    errs = error_lines(proc.stderr)
    assert proc.returncode != 0 and len(errs) == 1 and "exceeded 2 MiB" in errs[0] and len(errs[0]) < 600, \
        proc.stderr[:2000]


@pytest.mark.parametrize("poison", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_latencies_are_refused_naming_the_board(poison, tmp_path, monkeypatch, example_model,
                                                           real_answer):
    doc = json.loads(json.dumps(real_answer))
    doc["latency_ms"]["p50"] = "@POISON@"
    doc["latency_ms"]["min"] = "@POISON@"
    answer = _answer_file(tmp_path, json.dumps(doc).replace('"@POISON@"', poison))
    name = fake_board(tmp_path, "nanboard", f"cat '{answer}'\n", monkeypatch)
    out = tmp_path / "out.json"
    proc = sdk("push", example_model, "-b", name, *PUSH, "--json", out)
    errs = error_lines(proc.stderr)
    assert proc.returncode != 0 and len(errs) == 1, proc.stdout + proc.stderr
    assert "nanboard" in errs[0] and "non-finite" in errs[0] and "Traceback" not in proc.stderr, errs
    assert "unexpected" not in errs[0]
    if out.exists():
        text = out.read_text()
        assert "NaN" not in text and "Infinity" not in text
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in --json"))


def test_empty_samples_with_nan_stats_never_crash(tmp_path, monkeypatch, example_model, real_answer):
    doc = json.loads(json.dumps(real_answer))
    doc["samples_ms"] = []
    for k in list(doc["latency_ms"]):
        if isinstance(doc["latency_ms"][k], float):
            doc["latency_ms"][k] = "@NAN@"
    answer = _answer_file(tmp_path, json.dumps(doc).replace('"@NAN@"', "NaN"))
    name = fake_board(tmp_path, "emptyboard", f"cat '{answer}'\n", monkeypatch)
    proc = sdk("push", example_model, "-b", name, *PUSH, "--json", "-")
    assert proc.returncode != 0 and "min() arg" not in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
    assert "NaN" not in proc.stdout


ESC = "\\u001b[2J\\u001b]0;pwned\\u0007\\u009b31m"


def test_escape_sequences_in_a_board_error_never_reach_the_terminal(tmp_path, monkeypatch, example_model):
    body = '{"error": {"type": "InputError", "message": "boom ' + ESC + ' [red]x[/red]", "hint": "' + ESC + '"}}'
    answer = _answer_file(tmp_path, body)
    name = fake_board(tmp_path, "escboard", f"cat '{answer}'; exit 2\n", monkeypatch)
    proc = sdk("push", example_model, "-b", name, *PUSH)
    assert proc.returncode == 2, proc.stderr
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in proc.stderr and ch not in proc.stdout
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and "escboard" in errs[0] and "boom" in errs[0] and "\\x1b[2J" in errs[0], errs


def test_escape_sequences_in_a_board_result_never_reach_the_terminal(tmp_path, monkeypatch, example_model,
                                                                    real_answer):
    doc = json.loads(json.dumps(real_answer))
    doc["target"] = "onnxruntime@@"
    doc["runtime"]["name"] = "onnxruntime@@"
    doc["device"]["hostname"] = "board@@"
    answer = _answer_file(tmp_path, json.dumps(doc).replace("@@", ESC))
    name = fake_board(tmp_path, "escresult", f"cat '{answer}'\n", monkeypatch)
    proc = sdk("push", example_model, "-b", name, *PUSH)
    assert proc.returncode == 0, proc.stderr
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in proc.stderr and ch not in proc.stdout, repr(proc.stdout[:3000])
