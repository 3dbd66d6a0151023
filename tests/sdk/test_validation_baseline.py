"""``sdk validate --baseline`` / ``max_regression_pct`` and ``min_speedup_vs_fp32``, with the example
model on the host runner (real ONNX Runtime runs, real files)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.clirun import run_cli
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


@pytest.fixture(scope="module")
def int8_model(example_model, example_eval, tmp_path_factory) -> Path:
    """The example model quantized to INT8 (QDQ) by the SDK, calibrated on its own data."""
    from sdk.quantize import quantize

    out = tmp_path_factory.mktemp("int8") / "digits_int8.onnx"
    quantize(example_model, str(example_eval), output=out)
    return out


def _speedup_verdict(chk, doc, limit):
    board = doc["boards"][0]
    contended = [board[k]["latency_ms"]["noise"]["contended"] for k in ("benchmark", "benchmark_fp32")]
    if any(contended):   # other jobs held the CPUs: refused, with the reason
        assert chk["verdict"] == "skip" and "inconclusive" in chk["reason"], chk
        return "skip"
    assert chk["verdict"] == ("pass" if chk["measured"] >= limit else "fail"), chk
    return chk["verdict"]


def test_int8_is_measured_beside_its_fp32_original(int8_model, example_model, example_eval, tmp_path, capsys):
    """The FP32 original (--reference-model) is measured on the board too; the speedup is FP32 p50 /
    INT8 p50 and the report shows both rows."""
    from sdk.model import Model

    out = tmp_path / "r.json"
    code, _, err = run_cli(["validate", int8_model, "-b", BOARD, "--data", example_eval, "--reference-model",
                            example_model, "--spec", _spec(tmp_path, "min_speedup_vs_fp32 = 1.0"), "--json", out,
                            "--report", tmp_path / "r.html", "-q"], capsys)
    doc = json.loads(out.read_text())
    board = doc["boards"][0]
    chk = _checks(doc)["speedup.vs_fp32"]
    verdict = _speedup_verdict(chk, doc, 1.0)
    assert code == (1 if verdict == "fail" else 0), err
    assert board["benchmark_fp32"]["model"]["sha256"] == Model.load(example_model).sha256
    assert board["benchmark"]["model"]["sha256"] == Model.load(int8_model).sha256
    assert board["speedup_vs_fp32"] == pytest.approx(board["benchmark_fp32"]["latency_ms"]["p50"]
                                                     / board["benchmark"]["latency_ms"]["p50"])
    assert chk["measured"] == pytest.approx(board["speedup_vs_fp32"], rel=1e-3) and "FP32" in chk["reason"]
    assert board["benchmark_fp32"]["precision"]["requested"] == "fp32"
    html = (tmp_path / "r.html").read_text()
    assert "FP32 model (this model is" in html and "p50 95% CI" in html
    with capsys.disabled():
        print(f"\nINT8 digits vs FP32 on {BOARD}: p50 {board['benchmark']['latency_ms']['p50']:.4f} ms vs "
              f"{board['benchmark_fp32']['latency_ms']['p50']:.4f} ms, speedup {board['speedup_vs_fp32']:.2f}x, "
              f"check {verdict}")


def test_speedup_limits_pass_and_fail(example_model, example_eval, tmp_path, capsys):
    """The same file as both: a speedup of about 1 passes a 0.5x floor and fails a 3x floor."""
    for limit, want in ((0.5, "pass"), (3.0, "fail")):
        out = tmp_path / f"r{limit}.json"
        code, _, err = run_cli(["validate", example_model, "-b", BOARD, "--data", example_eval, "--spec",
                                _spec(tmp_path, f"min_speedup_vs_fp32 = {limit}"), "--json", out, "-q"], capsys)
        doc = json.loads(out.read_text())
        verdict = _speedup_verdict(_checks(doc)["speedup.vs_fp32"], doc, limit)
        assert verdict in (want, "skip") and code == (1 if verdict == "fail" else 0), err


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
                            "--baseline", first, "--json", second, "--report", tmp_path / "r.html", "-q"], capsys)
    chk = _checks(json.loads(second.read_text()))["latency.regression"]
    assert json.loads(second.read_text())["boards"][0]["baseline"]["model"]["sha256"] == \
        json.loads(first.read_text())["boards"][0]["benchmark"]["model"]["sha256"]
    assert "<td>baseline</td>" in (tmp_path / "r.html").read_text()
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
    from sdk.compare import compare_results

    if compare_results(fast, res.boards[0].bench).inconclusive:   # other jobs or a speed change: refused, with the reason
        assert chk.verdict == "skip" and "inconclusive" in chk.reason
    else:
        assert chk.verdict == "fail" and chk.measured > 50 and "intervals do not overlap" in chk.reason
        assert res.exit_code == 1
    assert isinstance(res.boards[0].baseline, BenchResult)
