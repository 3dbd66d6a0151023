"""One result type, one codec, one schema: sdk.benchmark(), the host runner, a board and the agent."""
from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from tests import tiers

from sdk.bench import EarlyStop, measure_latency
from sdk.errors import ResultFormatError
from sdk.result import SCHEMA_VERSION, BenchResult, LatencyStats, schema_path
from sdk.stats import min_runs_for, quantile_ci


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(Path(schema_path()).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _valid(validator, doc):
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


# -- every producer gives the same class and valid JSON ------------------------------------------------
def test_benchmark_on_the_host_is_valid_and_round_trips(validator, example_model):
    from sdk import benchmark

    res = benchmark(example_model, "onnxruntime", input_shapes={"image": [1, 1, 8, 8]}, runs=40, min_seconds=0,
                    warmup=2)
    assert type(res) is BenchResult
    doc = res.to_dict(samples=True)
    assert doc["schema_version"] == SCHEMA_VERSION
    _valid(validator, doc)
    assert doc["power"]["mean_w"] is None and "host" in doc["power"]["reason"]
    again = BenchResult.from_dict(json.loads(json.dumps(doc)))
    assert again.to_dict(samples=True) == doc
    assert res.stats.ci("p50")[0] <= res.stats.p50_ms <= res.stats.ci("p50")[1]
    assert res.stats.ci("p99") is None  # 40 runs are too few for a p99 interval


def test_agent_output_is_valid(validator, tmp_path, example_model):
    """What the zipapp agent prints (Python subprocess, its own copy of sdk.result)."""
    import subprocess

    from sdk.remote.agent import build_zipapp

    pyz = build_zipapp(tmp_path)
    req = {"model_path": str(example_model), "input_shapes": {"image": [1, 1, 8, 8]}, "runs": 400, "warmup": 2,
           "min_seconds": 0, "idle_seconds": 0, "power": False, "samples": True, "max_samples": 50,
           "early_stop": {"percentile": 99}}
    out = subprocess.run([sys.executable, str(pyz), "bench", "--request", "-"], input=json.dumps(req),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    _valid(validator, doc)
    assert doc["latency_ms"]["ci95"]["p99"] is not None and doc["settings"]["early_stop"]["min_runs"] == 368
    assert doc["power"]["reason"] == "power sampling was not requested" and len(doc["samples_ms"]) <= 50


# -- malformed JSON: one clear error that names where it came from -------------------------------------
def test_malformed_results_name_the_source_and_key(example_model):
    from sdk import benchmark

    doc = benchmark(example_model, input_shapes={"image": [1, 1, 8, 8]}, runs=5, min_seconds=0, warmup=0).to_dict()
    bad = json.loads(json.dumps(doc))
    del bad["latency_ms"]["p50"]
    with pytest.raises(ResultFormatError, match=r"^board 'nx': malformed bench result: latency_ms.p50 is missing"):
        BenchResult.from_dict(bad, "board 'nx'")
    bad = dict(doc, latency_ms=dict(doc["latency_ms"], ci95={"p50": [1.0], "p90": None, "p99": None}))
    with pytest.raises(ResultFormatError, match=r"latency_ms.ci95.p50 must be \[lo, hi\]"):
        BenchResult.from_dict(bad, "x.json")
    with pytest.raises(ResultFormatError, match="newer than this edgesdk"):
        BenchResult.from_dict(dict(doc, schema_version=SCHEMA_VERSION + 1), "x.json")
    with pytest.raises(ResultFormatError, match="not valid JSON"):
        BenchResult.from_json("{latency", "board 'nx'")
    with pytest.raises(ResultFormatError, match="must be an object"):
        BenchResult.from_dict([1, 2], "x.json")


# -- statistics ------------------------------------------------------------------------------------------
def test_minimum_runs_for_an_interval():
    assert [min_runs_for(p) for p in (50, 90, 99)] == [6, 36, 368]
    for pct in (50.0, 90.0, 99.0):
        n = min_runs_for(pct)
        assert quantile_ci(list(range(n)), pct) is not None and quantile_ci(list(range(n - 1)), pct) is None


def test_intervals_cover_the_true_percentile_95_percent_of_the_time():
    """Exponential samples (a long right tail like latency): the true p-quantile is -ln(1-p)."""
    rng = random.Random(7)
    trials, n = 300, 600
    for pct in (50.0, 90.0, 99.0):
        truth = -math.log(1 - pct / 100)
        hits = 0
        for _ in range(trials):
            ci = quantile_ci(sorted(rng.expovariate(1.0) for _ in range(n)), pct)
            hits += ci[0] <= truth <= ci[1]
        assert 0.92 <= hits / trials <= 0.995, (pct, hits / trials)


def test_noise_warnings():
    rng = random.Random(1)
    steady = LatencyStats.from_samples([10 + rng.gauss(0, 0.05) for _ in range(500)])
    assert not steady.noise.unstable and steady.noise.warnings == ()
    drifting = LatencyStats.from_samples([10 + rng.gauss(0, 0.05) for _ in range(250)]
                                         + [12 + rng.gauss(0, 0.05) for _ in range(250)])
    assert drifting.noise.unstable and any("first and second half" in w for w in drifting.noise.warnings)
    spiky = LatencyStats.from_samples([10.0 if i % 3 else 40.0 for i in range(300)])
    assert any("std is" in w for w in spiky.noise.warnings)
    few = LatencyStats.from_samples([1.0, 1.1, 1.2])
    assert few.ci("p50") is None and any("too few runs" in w for w in few.noise.warnings)


def test_early_stop_waits_for_the_tail_percentile():
    run = measure_latency(lambda: None, warmup=0, min_runs=10, min_seconds=0, early_stop=EarlyStop(99.0))
    assert run.stats.count == 368 and run.stats.ci("p99") is not None
    # a narrow interval is asked: keeps going, but max_runs still bounds it
    noisy = iter(range(10**9))
    run = measure_latency(lambda: time.sleep(0.0002 * (next(noisy) % 7 == 0)), warmup=0, min_runs=10,
                          min_seconds=0, max_runs=500, early_stop=EarlyStop(99.0, max_ci_width_pct=0.001))
    assert run.stats.count == 500
    assert EarlyStop(90.0).satisfied([1.0] * 36) and not EarlyStop(90.0).satisfied([1.0] * 35)


def test_bench_cli_early_stop_and_intervals(example_model, capsys):
    from tests.clirun import run_cli

    code, out, err = run_cli(["bench", example_model, "--input-shape", "image=1x1x8x8", "--runs", "5", "--warmup", "1",
                              "--min-seconds", "0", "--early-stop", "90", "--json", "-"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["latency_ms"]["count"] >= 36 and doc["latency_ms"]["ci95"]["p90"] is not None
    assert doc["settings"]["early_stop"] == {"percentile": 90.0, "max_ci_width_pct": None, "min_runs": 36}
    code, out, err = run_cli(["bench", example_model, "--input-shape", "image=1x1x8x8", "--runs", "5", "--warmup", "1",
                              "--min-seconds", "0"], capsys)
    assert code == 0 and "95% CI" in out and "n/a (< 368 runs)" in out
    code, _, err = run_cli(["bench", example_model, "--max-ci-width", "2"], capsys)
    assert code == 2 and err.startswith("error: --max-ci-width needs --early-stop")


def test_every_optional_section_is_a_field_and_in_the_schema():
    """What adding a section (stages_ms, telemetry, ...) takes: a BenchResult field defaulting to
    None, an OPTIONAL_SECTIONS entry, a schema property. Absent while None, read back when present."""
    import dataclasses

    from sdk.result import OPTIONAL_SECTIONS

    schema = json.loads(Path(schema_path()).read_text())
    fields = {f.name: f for f in dataclasses.fields(BenchResult)}
    stats = LatencyStats.from_samples([1.0, 2.0, 3.0])
    bare = BenchResult(stats=stats, target="t", runtime={}, model={"path": None, "sha256": "0" * 64}, host={},
                       inputs=[], settings={"warmup": 0, "min_runs": 1, "min_seconds": 0})
    for key in OPTIONAL_SECTIONS:
        assert key in fields and fields[key].default is None, key
        assert key in schema["properties"], key
        assert key not in bare.to_dict()
    full = dataclasses.replace(bare, board={"name": "b"}, transfer={"skipped": True})
    again = BenchResult.from_dict(full.to_dict())
    assert again.board == {"name": "b"} and again.transfer == {"skipped": True} and again.device is None


def test_result_module_runs_on_python38_without_numpy(tmp_path):
    """The board agent bundles sdk.result and sdk.stats: a bare Python 3.8 (no NumPy) reads and
    writes results and computes intervals with them."""
    import os
    import shutil
    import subprocess

    py38 = os.environ.get("EDGESDK_TEST_PY38") or shutil.which("python3.8")
    probe = subprocess.run([py38, "-c", "pass"], capture_output=True, timeout=60) if py38 else None
    if probe is None or probe.returncode != 0:
        tiers.require_or_skip("py38", "no Python 3.8 runs here (set EDGESDK_TEST_PY38 to one)")
    root = Path(__file__).resolve().parents[2]
    code = ("import json, sys\nfrom sdk.result import BenchResult, LatencyStats\n"
            "s = LatencyStats.from_samples([1.0 + (i % 7) * 0.01 for i in range(400)])\n"
            "r = BenchResult(stats=s, target='t', runtime={}, model={'path': None, 'sha256': '0' * 64}, host={},\n"
            "                inputs=[], settings={'warmup': 0, 'min_runs': 1, 'min_seconds': 0})\n"
            "d = BenchResult.from_dict(json.loads(json.dumps(r.to_dict()))).to_dict()\n"
            "print(json.dumps([sys.version_info[:2], d['latency_ms']['ci95']['p99'], 'numpy' in sys.modules]))\n")
    out = subprocess.run([py38, "-c", code], cwd=str(root), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    version, p99_ci, numpy_loaded = json.loads(out.stdout)
    assert version == [3, 8] and p99_ci is not None and numpy_loaded is False
