"""The validation spec: parsing, unknown keys named with the allowed ones, version requirements."""
from __future__ import annotations

from pathlib import Path

import pytest

from sdk.errors import ConfigError, InputError
from sdk.spec import check_version, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]


def test_example_specs_load():
    spec = load_spec(ROOT / "examples" / "digits" / "spec.toml")
    assert spec.budgets["p99_latency_ms"] == 50.0
    assert spec.runtimes == {"onnxruntime": ">=1.16"}
    assert spec.robustness["severities"] == [1, 2]
    assert spec.target == "onnxruntime"
    assert spec.to_dict()["device"]["runtimes"] == {"onnxruntime": ">=1.16"}
    failing = load_spec(ROOT / "examples" / "digits" / "spec_fail.toml")
    assert failing.budgets["p99_latency_ms"] < 0.001


def test_unknown_key_names_key_and_allowed(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[budgets]\np99_latency = 5\n")
    with pytest.raises(ConfigError) as err:
        load_spec(p)
    text = str(err.value)
    assert "'p99_latency'" in text and "[budgets]" in text
    assert "p99_latency_ms" in text and "max_mean_power_w" in text  # the allowed keys are listed


def test_unknown_section_lists_sections():
    with pytest.raises(ConfigError, match=r"unknown section \[budget\].*allowed sections: budgets, device"):
        parse_spec({"budget": {"p50_latency_ms": 1}})


@pytest.mark.parametrize("data, match", [
    ({"budgets": {"p50_latency_ms": "fast"}}, "must be int or float"),
    ({"budgets": {"p50_latency_ms": True}}, "must be a number"),
    ({"budgets": {"p50_latency_ms": -1}}, ">= 0"),
    ({"device": {"clocks_locked": "yes"}}, "must be bool"),
    ({"device": {"runtimes": {"onnxruntime": "newest"}}}, "bad version requirement"),
    ({"robustness": {"corruptions": ["fog"]}}, "unknown corruption 'fog'"),
    ({"robustness": {"severities": [0, 9]}}, "severities"),
    ({"run": {"runs": 0}}, "runs must be >= 1"),
    ({"preprocess": {"size": [8, 8], "colour": "RGB"}}, "unknown preprocess key"),
    ({"budgets": 3}, "must be a table"),
])
def test_bad_values(data, match):
    with pytest.raises((ConfigError, InputError), match=match):
        parse_spec(data)


def test_bad_toml_and_missing_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[budgets\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(p)
    with pytest.raises(InputError, match="does not exist"):
        load_spec(tmp_path / "none.toml")


def test_preprocess_section():
    spec = parse_spec({"preprocess": {"size": [16, 16], "layout": "NCHW"}})
    assert spec.preprocess.size == (16, 16)


@pytest.mark.parametrize("version, req, ok", [
    ("1.17.3", ">=1.16", True), ("1.15.0", ">=1.16", False), ("1.17.3", ">=1.16,<2", True),
    ("2.0", ">=1.16,<2", False), ("8.6.1.6", "==8.6.1.6", True), ("8.6.1", "==8.6.*", True),
    ("8.5.3", "==8.6.*", False), ("1.17", "~=1.16", True), ("2.0", "~=1.16", False),
    ("5.1.2", "5.1.2", True), ("12.2.140", ">12.2", True), (None, ">=1", False), ("1.0rc1", ">=1.0", True),
])
def test_check_version(version, req, ok):
    assert check_version(version, req) is ok
