"""``sdk validate --baseline`` / ``max_regression_pct`` and ``min_speedup_vs_fp32``, with the example
model on the host runner (real ONNX Runtime runs, real files)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from clirun import run_cli
from sdk.errors import ConfigError
from sdk.result import BenchResult, LatencyStats
from sdk.spec import parse_spec

BOARD = "host:onnxruntime"


def _spec(tmp_path: Path, budgets: str, run: str = "runs = 60\nmin_seconds = 0.1\n") -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(f"[run]\n{run}\n[budgets]\n{budgets}\n")
    return p


def _checks(doc):
    return {c["name"]: c for c in doc["boards"][0]["checks"]}


def test_spec_keys():
    spec = parse_spec({"run": {"early_stop_percentile": 99}, "budgets": {"max_regression_pct": 5,
                                                                          "min_speedup_vs_fp32": 1.5}})
    assert spec.budgets == {"max_regression_pct": 5.0, "min_speedup_vs_fp32": 1.5}
    with pytest.raises(ConfigError, match="early_stop_percentile"):
        parse_spec({"run": {"early_stop_percentile": 100}})


def test_speedup_vs_fp32_measures_the_fp32_model_beside_it(example_model, example_eval, tmp_path, capsys):
    """The FP32 original given as --reference-model is measured on the board too. Here it is the same
    file, so the speedup is about 1: a 0.5x floor passes, a 3x floor fails (INT8 that is not faster)."""
    out = tmp_path / "r.json"
    code, _, err = run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--reference-model",
                            example_model, "--spec", _spec(tmp_path, "min_speedup_vs_fp32 = 0.5"), "--json", out,
                            "--report", tmp_path / "r.html", "-q"], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    board = doc["boards"][0]
    chk = _checks(doc)["speedup.vs_fp32"]
    assert chk["verdict"] == "pass" and 0.5 < chk["measured"] < 2.0 and "FP32" in chk["reason"]
    assert board["speedup_vs_fp32"] == pytest.approx(board["benchmark_fp32"]["latency_ms"]["p50"]
                                                     / board["benchmark"]["latency_ms"]["p50"])
    assert board["benchmark_fp32"]["precision"]["requested"] == "fp32"
    html = (tmp_path / "r.html").read_text()
    assert "FP32 model (this model is" in html and "p50 95% CI" in html
    code, out_text, _ = run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--spec",
                                 _spec(tmp_path, "min_speedup_vs_fp32 = 3.0"), "-q"], capsys)
    assert code == 1 and "speedup.vs_fp32" in out_text


def test_baseline_is_looked_up_per_model_board_and_runtime(example_model, example_eval, tmp_path, capsys):
    first = tmp_path / "first.json"
    spec = _spec(tmp_path, "max_regression_pct = 5.0")
    code, _, err = run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--spec", spec,
                            "--json", first, "-q"], capsys)
    assert code == 0, err
    assert "latency.regression" in _checks(json.loads(first.read_text()))  # in the spec, but no baseline
    assert _checks(json.loads(first.read_text()))["latency.regression"]["verdict"] == "skip"
    second = tmp_path / "second.json"
    code, _, err = run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--spec", spec,
                            "--baseline", first, "--json", second, "-q"], capsys)
    chk = _checks(json.loads(second.read_text()))["latency.regression"]
    assert chk["verdict"] in ("pass", "skip") and "vs baseline" in chk["reason"], chk   # skip: a contended run
    if chk["verdict"] == "skip":
        assert "inconclusive" in chk["reason"]
    assert code == 0, err
    # without the spec key, --baseline alone checks at the default 5 %
    code, _, _ = run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--spec",
                          _spec(tmp_path, "p50_latency_ms = 1000.0"), "--baseline", first, "--json", second, "-q"], capsys)
    assert _checks(json.loads(second.read_text()))["latency.regression"]["limit"] == 5.0
    # a baseline of another board: nothing to compare with, said so
    other = json.loads(first.read_text())
    other["boards"][0]["board"] = "elsewhere"
    other["boards"][0]["benchmark"]["board"] = {"name": "elsewhere"}
    (tmp_path / "other.json").write_text(json.dumps(other))
    run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--spec", spec, "--baseline",
             tmp_path / "other.json", "--json", second, "-q"], capsys)
    chk = _checks(json.loads(second.read_text()))["latency.regression"]
    assert chk["verdict"] == "skip" and "holds no result of this model x board" in chk["reason"]


def test_a_board_slower_than_its_baseline_fails(example_model, example_eval, tmp_path):
    """The baseline is this board's own real result with every sample halved (a board that used to
    be twice as fast); the new run is then 100 % slower with intervals far apart."""
    from sdk.spec import load_spec
    from sdk.validation import validate

    spec = load_spec(_spec(tmp_path, "max_regression_pct = 5.0"))
    now = validate(example_model, [BOARD], example_eval, spec=spec, limit=50).boards[0].bench
    fast = copy.deepcopy(now)
    fast.stats = LatencyStats.from_samples([s / 2 for s in now.samples_ms], cpu_wait_pct=0.0)
    res = validate(example_model, [BOARD], example_eval, spec=spec, limit=50, baseline=[fast])
    chk = {c.name: c for c in res.boards[0].checks}["latency.regression"]
    if res.boards[0].bench.stats.noise.contended:   # other jobs held the CPUs: refused, with the reason
        assert chk.verdict == "skip" and "inconclusive" in chk.reason
    else:
        assert chk.verdict == "fail" and chk.measured > 50 and "intervals do not overlap" in chk.reason
        assert res.exit_code == 1
    assert isinstance(res.boards[0].baseline, BenchResult)
