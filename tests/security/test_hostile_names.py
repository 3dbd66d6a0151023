"""Every string from a model, a file or a board is inert (issue 27, class 4).

A real ONNX model (a Conv + Relu classifier built with onnx.helper, run by ONNX Runtime) whose
graph, input, output and node names carry ESC sequences (clear screen, an OSC title), BEL, a C1
CSI, a right-to-left override and rich markup (``[red]``, ``[link=file:///etc]``), saved under a
file name with markup. Every command that prints a name prints it inert: no control byte on
stdout or stderr, the markup shown as written, and the JUnit and HTML reports well-formed."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests.security.helpers import local_board, sdk

HOSTILE = "x\x1b[2J\x1b]0;pwned\x07\x9b31m[red]R[/red][link=file:///etc]L[/link]\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _inert(text: str) -> None:
    for ch in RAW:
        assert ch not in text, f"raw {ch!r} reached the terminal: {text[:3000]!r}"


@pytest.fixture(scope="module")
def hostile_model(tmp_path_factory) -> Path:
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = helper.make_tensor("w" + HOSTILE, TensorProto.FLOAT, [4, 1, 3, 3], rng.standard_normal(36).astype(np.float32))
    b = helper.make_tensor("b" + HOSTILE, TensorProto.FLOAT, [4], np.zeros(4, np.float32))
    inp, out = "in" + HOSTILE, "out" + HOSTILE
    nodes = [helper.make_node("Conv", [inp, w.name, b.name], ["c" + HOSTILE], name="conv" + HOSTILE, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c" + HOSTILE], ["r" + HOSTILE], name="relu" + HOSTILE),
             helper.make_node("Flatten", ["r" + HOSTILE], [out], name="flat" + HOSTILE)]
    graph = helper.make_graph(nodes, "graph" + HOSTILE,
                              [helper.make_tensor_value_info(inp, TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 256])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="p" + HOSTILE)
    model.ir_version = 8
    folder = tmp_path_factory.mktemp("hostile")
    path = folder / "m[bold]odel.onnx"
    onnx.save(model, str(path))
    return path


def test_inspect(hostile_model):
    proc = sdk("inspect", hostile_model)
    assert proc.returncode == 0, proc.stderr
    _inert(proc.stdout + proc.stderr)
    assert "[red]R[/red]" in proc.stdout and "[link=file:///etc]" in proc.stdout    # shown, not interpreted
    assert "\\x1b[2J" in proc.stdout                                                 # visible escape


def test_bench(hostile_model):
    proc = sdk("bench", hostile_model, "--runs", "10", "--min-seconds", "0")
    assert proc.returncode == 0, proc.stderr
    _inert(proc.stdout + proc.stderr)


def test_bench_with_a_wrong_input_name_error(hostile_model):
    proc = sdk("bench", hostile_model, "--input-shape", "nope=1x1x8x8", "--runs", "5", "--min-seconds", "0")
    assert proc.returncode == 2
    _inert(proc.stdout + proc.stderr)
    assert proc.stderr.startswith("error:") and "[red]R[/red]" in proc.stderr


def test_profile(hostile_model):
    proc = sdk("profile", hostile_model, "--runs", "5")
    assert proc.returncode == 0, proc.stderr
    _inert(proc.stdout + proc.stderr)


def test_push_and_validate_with_reports(hostile_model, tmp_path, monkeypatch):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_board(boards, "here", tmp_path / "wd")
    proc = sdk("push", hostile_model, "-b", "here", "--runs", "10", "--min-seconds", "0", "--idle-seconds", "0")
    assert proc.returncode == 0, proc.stderr
    _inert(proc.stdout + proc.stderr)
    spec = tmp_path / "spec.toml"
    spec.write_text("[run]\nruns = 10\nmin_seconds = 0\n[budgets]\nmin_cosine = 1.5\n")   # fails: names printed
    junit, html, js = tmp_path / "j.xml", tmp_path / "r.html", tmp_path / "r.json"
    proc = sdk("validate", hostile_model, "-b", "here", "--spec", spec, "--junit", junit, "--report", html,
               "--json", js)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _inert(proc.stdout + proc.stderr)
    assert "[red]R[/red]" in proc.stdout                   # the failing check's output name, as written
    root = ET.parse(junit).getroot()                        # well-formed XML
    failures = [f.get("message") for f in root.iter("failure")]
    assert any("worst output 'out" in m and "\\x1b[2J" in m for m in failures), failures
    for ch in RAW[:3]:
        assert ch not in junit.read_text()
    assert "\x1b" not in html.read_text()
    json.loads(js.read_text())


def test_quantize_report(hostile_model, tmp_path):
    data = tmp_path / "calib.npy"
    np.save(data, np.random.default_rng(1).random((8, 1, 8, 8), dtype=np.float32))
    out = tmp_path / "q.onnx"
    proc = sdk("quantize", hostile_model, "--calib", data, "-o", out)
    assert proc.returncode in (0, 1), proc.stderr
    _inert(proc.stdout + proc.stderr)


def test_junit_writer_drops_what_xml_cannot_hold():
    from sdk.reports.junit import validation_junit

    doc = {"model": {"name": HOSTILE + "\x00\x01"}, "seconds": 1.0,
           "boards": [{"board": "b" + HOSTILE, "seconds": 1.0, "error": "e\x00" + HOSTILE,
                       "checks": [{"name": "accuracy.cosine[" + HOSTILE + "\x0c]", "verdict": "fail",
                                   "measured": 0.5, "limit": 0.9, "op": ">=", "reason": "r\x1b\x00"}]}]}
    text = validation_junit(doc)
    root = ET.fromstring(text.encode())
    assert root.find(".//failure") is not None and "\\x00" in text
