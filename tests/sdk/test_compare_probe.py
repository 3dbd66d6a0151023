"""The machine-speed probe and the paired (interleaved) comparison, on constructed timings.

Constructed runs are steady (same spread, no drift, no CPU wait), so every verdict below comes from
the probe or the paired logic alone, not from whatever the machine does this minute. The expected
verdicts are worked out by hand in each test's comment.
"""
from __future__ import annotations

import json

import pytest

from sdk.compare import (PROBE_NOISE_FLOOR_PCT, compare_paired, compare_results, load_result, probe_change)
from sdk.errors import InputError
from sdk.result import BenchResult, LatencyStats, SpeedProbe
from tests.clirun import run_cli


def _steady(median_ms: float, n: int = 400):
    """n samples in a steady pattern around ``median_ms`` (+-1 %, no drift between halves)."""
    pattern = [0.99, 1.0, 1.01, 1.0]
    return [median_ms * pattern[i % 4] for i in range(n)]


def _result(median_ms, probe_before=None, probe_after=None, *, khz=None, workload="numpy-exp-add-64k-x24/1",
            cpu_wait_pct=0.5, samples=None):
    probe = None
    if probe_before is not None:
        probe = SpeedProbe(tuple(probe_before), tuple(probe_after), workload, khz, None)
    stats = LatencyStats.from_samples(samples or _steady(median_ms), wall_s=median_ms * 0.4, cpu_wait_pct=cpu_wait_pct,
                                      probe=probe)
    return BenchResult(stats=stats, target="onnxruntime", runtime={"version": "1"}, model={"path": None, "sha256": "ab" * 32},
                       host={"cpu": "constructed", "cores": 2}, inputs=[],
                       settings={"warmup": 0, "min_runs": 400, "min_seconds": 0.0})


def test_probe_round_trips_through_json_and_schema():
    import jsonschema

    from sdk.result import schema_path

    r = _result(10.0, [1.0, 1.1, 0.9], [1.0, 1.02, 0.98], khz=2.0e6)
    doc = json.loads(json.dumps(r.to_dict()))
    jsonschema.validate(doc, json.load(open(schema_path())))
    noise = doc["latency_ms"]["noise"]
    assert noise["probe_ms"] == pytest.approx(1.0)          # median of the six repeats
    assert noise["probe"]["shift_pct"] == pytest.approx(0.0)  # before median 1.0, after median 1.0
    back = BenchResult.from_dict(doc)
    assert back.stats.noise.probe == r.stats.noise.probe
    # a corrupt probe is a malformed result, not a crash
    doc["latency_ms"]["noise"]["probe"]["after_ms"] = [float("nan")]
    with pytest.raises(InputError, match="probe.after_ms"):
        BenchResult.from_dict(doc)


def test_speed_moved_between_steady_runs_is_inconclusive_not_a_regression():
    # B is 16 % slower AND its probe is 16 % slower: the machine moved, not the model.
    a = _result(10.0, [1.0] * 7, [1.0] * 7)
    b = _result(11.6, [1.16] * 7, [1.16] * 7)
    assert not a.stats.noise.unsettled and not b.stats.noise.unsettled   # each run is steady on its own
    cmp = compare_results(a, b)
    assert cmp.probe.change_pct == pytest.approx(16.0)
    assert cmp.probe.moved and cmp.inconclusive and not cmp.regression and cmp.exit_code == 0
    assert any("speed differed between A and B" in r and "+16.0 %" in r for r in cmp.inconclusive_reasons)
    # --normalize: B x 1/1.16 is 10.0 ms again: judged, no change
    norm = compare_results(a, b, normalize=True)
    assert norm.normalized and not norm.inconclusive and not norm.regression
    assert norm.change("p50").b_ms == pytest.approx(10.0)
    assert any("probe-normalised" in w for w in norm.warnings)


def test_model_slowdown_with_a_steady_probe_is_a_regression():
    # B 20 % slower, probe 1 % apart (inside the 3 % floor): the model changed.
    a = _result(10.0, [1.0] * 7, [1.0] * 7)
    b = _result(12.0, [1.01] * 7, [1.01] * 7)
    cmp = compare_results(a, b)
    assert not cmp.probe.moved and not cmp.inconclusive
    assert cmp.regression and cmp.exit_code == 1
    # normalising changes nothing when the probe did not move
    assert compare_results(a, b, normalize=True).regression


def test_probe_noise_is_the_larger_shift_or_the_floor():
    # A's probe moved 10 % within its own run (before 1.0, after 1.1): a 6 % difference is inside that noise.
    a = _result(10.0, [1.0] * 7, [1.1] * 7)
    b = _result(10.0, [1.12] * 7, [1.12] * 7)
    p = probe_change(a, b)
    assert p.noise_pct == pytest.approx(abs(1.1 - 1.0) / 1.05 * 100.0, rel=1e-3)  # 9.52 %
    assert p.change_pct == pytest.approx((1.12 - 1.05) / 1.05 * 100.0, rel=1e-3)   # 6.67 %
    assert not p.moved
    quiet = probe_change(_result(10.0, [1.0] * 7, [1.0] * 7), _result(10.0, [1.02] * 7, [1.02] * 7))
    assert quiet.noise_pct == PROBE_NOISE_FLOOR_PCT and not quiet.moved


def test_other_clocks_or_workload_are_not_comparable():
    a = _result(10.0, [1.0] * 7, [1.0] * 7, khz=2.0e6)
    b = _result(14.0, [1.0] * 7, [1.0] * 7, khz=1.2e6)   # a board in another power mode
    cmp = compare_results(a, b)
    assert cmp.not_comparable and "other CPU clocks" in cmp.not_comparable
    assert cmp.inconclusive and not cmp.regression
    other = compare_results(a, _result(14.0, [1.0] * 7, [1.0] * 7, workload="other/1"))
    assert "other workloads" in other.not_comparable and not other.regression


def test_a_result_without_probe_is_judged_as_before_with_a_warning():
    a = _result(10.0)
    b = _result(12.0, [1.0] * 7, [1.0] * 7)
    cmp = compare_results(a, b)
    assert cmp.probe is None and cmp.regression
    assert any("A carry no speed probe" in w for w in cmp.warnings)


def test_baseline_check_reports_not_comparable():
    from types import SimpleNamespace

    from sdk.validation.checks import CHECKS

    base = _result(10.0, [1.0] * 7, [1.0] * 7, khz=2.0e6)
    throttled = _result(14.0, [1.0] * 7, [1.0] * 7, khz=1.2e6)
    fn = CHECKS.load("latency.regression").fn
    run = SimpleNamespace(bench=throttled, baseline=base, baseline_note=None)
    verdict = fn(run, None, 5.0)
    assert verdict[0] == "skip" and "not comparable" in verdict[2]
    moved = _result(14.0, [1.4] * 7, [1.4] * 7, khz=2.0e6)
    run = SimpleNamespace(bench=moved, baseline=base, baseline_note=None)
    verdict = fn(run, None, 5.0)
    assert verdict[0] == "skip" and "speed differed" in verdict[2]
    real = _result(14.0, [1.0] * 7, [1.0] * 7, khz=2.0e6)
    run = SimpleNamespace(bench=real, baseline=base, baseline_note=None)
    verdict = fn(run, None, 5.0)
    assert verdict[0] == "fail"



def test_baseline_check_with_normalize_judges_on_probe_scaled_latency():
    """validate --normalize: B's p50 scaled by probe_A / probe_B. 14.0 ms with a probe 1.4x slower
    is 10.0 ms of the baseline's machine: a pass; 15.4 ms with the same probe is 11.0 ms: +10 %,
    a regression beyond 5 %. Without --normalize the first is skipped as inconclusive; the second
    is slower by more than the noise allows, so it fails there too."""
    from types import SimpleNamespace

    from sdk.validation.checks import CHECKS

    fn = CHECKS.load("latency.regression").fn
    base = _result(10.0, [1.0] * 7, [1.0] * 7, khz=2.0e6)
    same = _result(14.0, [1.4] * 7, [1.4] * 7, khz=2.0e6)
    slower = _result(15.4, [1.4] * 7, [1.4] * 7, khz=2.0e6)
    for bench, expect, change in ((same, "pass", 0.0), (slower, "fail", 10.0)):
        plain = fn(SimpleNamespace(bench=bench, baseline=base, baseline_note=None), None, 5.0)
        if bench is same:
            assert plain[0] == "skip", plain
        else:  # 15.4 / (1 + (40 + 3) / 100) = 10.77 ms: +7.7 % even if the machine was 43 % slower
            assert plain[0] == "fail" and "more than the noise allows (+7.7 %" in plain[2], plain
        got = fn(SimpleNamespace(bench=bench, baseline=base, baseline_note=None, baseline_normalize=True), None, 5.0)
        assert got[0] == expect and got[1] == pytest.approx(change, abs=0.05) and "probe-normalised" in got[2], got


def test_a_slowdown_larger_than_the_noise_is_signed():
    """Noise that makes a comparison inconclusive bounds what it can explain; beyond that bound the
    slowdown is a regression. Hand-worked: the allowance is the 5 % threshold plus both runs' drift,
    and B is divided by 1 + (max(0, probe change) + probe noise) / 100."""
    a = _result(10.0, [1.0] * 7, [1.0] * 7)
    # probe +16 %, noise 3 % (floor): B / 1.19. 11.6 ms -> 9.75 ms: inconclusive (the test above);
    # 16.0 ms -> 13.45 ms: +34.5 %, a regression although the machine moved
    big = compare_results(a, _result(16.0, [1.16] * 7, [1.16] * 7))
    assert big.probe.moved and big.inconclusive_reasons
    assert big.regression and not big.inconclusive and big.exit_code == 1
    assert big.beyond_noise.change_pct == pytest.approx((16.0 / 1.19 - 10.0) / 10.0 * 100.0, abs=0.2)
    assert big.threshold_pct == pytest.approx(5.0) and big.beyond_noise.change_pct > big.threshold_pct   # the plain threshold
    assert big.to_dict()["beyond_noise"]["verdict"] == "slower"
    # the machine faster during B (probe -20 %) and B 10 % slower: no allowance for the probe but
    # its 3 % noise, 11.0 / 1.03 = +6.8 %: signed
    faster_machine = compare_results(a, _result(11.0, [0.8] * 7, [0.8] * 7))
    assert faster_machine.probe.moved and faster_machine.regression
    # B contended: its slowdown may be the load, never signed however large
    loaded_b = compare_results(a, _result(30.0, [1.0] * 7, [1.0] * 7, cpu_wait_pct=50.0))
    assert loaded_b.contended == ["B"] and loaded_b.inconclusive and not loaded_b.regression
    # A contended: load only slowed A, so a 2x slower B is still a regression
    loaded_a = compare_results(_result(10.0, [1.0] * 7, [1.0] * 7, cpu_wait_pct=50.0), _result(20.0, [1.0] * 7, [1.0] * 7))
    assert loaded_a.contended == ["A"] and loaded_a.regression and loaded_a.beyond_noise is not None
    # runs that are not comparable (other clocks) are never signed
    other_clocks = compare_results(_result(10.0, [1.0] * 7, [1.0] * 7, khz=2.0e6), _result(30.0, [1.0] * 7, [1.0] * 7, khz=1.0e6))
    assert other_clocks.not_comparable and not other_clocks.regression


def test_an_unsettled_run_is_never_signed_beyond_the_noise():
    # A's halves at 10 and 11 ms: its median drifted ~9.5 % of its p50, so A is unsettled. Its speed
    # moved by an amount no figure of the runs bounds, so even a 2x slower B stays inconclusive.
    pattern = [0.99, 1.0, 1.01, 1.0]
    drifting = [10.0 * pattern[i % 4] for i in range(200)] + [11.0 * pattern[i % 4] for i in range(200)]
    a = _result(10.5, [1.0] * 7, [1.0] * 7, samples=drifting)
    assert a.stats.noise.unsettled and a.stats.noise.drift_pct == pytest.approx(1.0 / a.stats.p50_ms * 100.0, abs=1e-4)
    for b_ms in (12.0, 21.0):
        cmp = compare_results(a, _result(b_ms, [1.0] * 7, [1.0] * 7))
        assert cmp.unsettled == ["A"] and cmp.inconclusive and not cmp.regression and cmp.beyond_noise is None


def test_compare_cli_says_why_a_noisy_slowdown_is_still_a_regression(tmp_path, capsys):
    a = _result(10.0, [1.0] * 7, [1.0] * 7)
    b = _result(16.0, [1.16] * 7, [1.16] * 7)
    (tmp_path / "a.json").write_text(json.dumps(a.to_dict()))
    (tmp_path / "b.json").write_text(json.dumps(b.to_dict()))
    code, out, _ = run_cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys)
    assert code == 1 and "REGRESSION" in out and "more than the noise allows" in out and "speed differed" in out


def test_paired_verdicts_on_constructed_rounds():
    # 21 rounds; the machine's speed swings by 40 % across them, but A and B swing together.
    swing = [1.0 + 0.4 * ((i * 7) % 21) / 20 for i in range(21)]
    a = [10.0 * s for s in swing]
    b_same = [x * (1.0 + (0.004 if i % 2 else -0.004)) for i, x in enumerate(a)]
    b_slow = [x * (1.05 + (0.004 if i % 2 else -0.004)) for i, x in enumerate(a)]
    same = compare_paired(a, b_same)
    assert same.verdict == "same" and not same.regression
    slow = compare_paired(a, b_slow)
    # every ratio is 1.046 or 1.054: the median 1.046..1.054, its interval above 1, beyond 2 %
    assert slow.regression and slow.exit_code == 1
    assert 4.5 < slow.change_pct < 5.5 and slow.change_ci_pct[0] > 0
    fast = compare_paired(b_slow, a)
    assert fast.verdict == "faster"
    # a 5 % change under a 10 % threshold is not a regression, though significant
    assert not compare_paired(a, b_slow, threshold_pct=10.0).regression
    # the same rounds judged unpaired (separate medians) would be lost in the 40 % swing
    with pytest.raises(InputError):
        compare_paired(a, b_slow[:-1])
    assert compare_paired(a[:5], b_slow[:5]).verdict == "uncertain"   # too few rounds for an interval


def test_compare_two_models_cli_runs_interleaved(example_model, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    code, stdout, stderr = run_cli(["compare", example_model, example_model, "--input-shape", "image=1x1x8x8",
                                    "--rounds", "7", "--round-seconds", "0.01", "--json", out], capsys)
    doc = json.loads(out.read_text())
    assert doc["mode"] == "interleaved" and doc["rounds"] == 7 and len(doc["b_round_ms"]) == 7
    assert code == (1 if doc["regression"] else 0)
    assert "interleaved rounds" in stdout
    code, _, stderr = run_cli(["compare", example_model, out], capsys)
    assert code == 2 and "two result files or two models" in stderr


def test_bench_run_carries_the_probe(example_model, tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, stderr = run_cli(["bench", example_model, "--input-shape", "image=1x1x8x8", "--runs", "20",
                               "--min-seconds", "0", "--json", out], capsys)
    assert code == 0, stderr
    r = load_result(out)
    assert r.stats.noise.probe is not None and len(r.stats.noise.probe.before_ms) == 7
    assert r.stats.noise.probe_ms > 0


def test_validate_normalize_needs_a_baseline(example_model, capsys):
    code, _, err = run_cli(["validate", example_model, "--board", "host:onnxruntime", "--normalize", "-q"], capsys)
    assert code == 2 and err.strip() == "error: --normalize needs --baseline FILE (give the earlier results to compare with)"
