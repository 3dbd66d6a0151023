"""sdk.registry: one helper behind every pluggable family; the same aliases and the same unknown-name
error (with "did you mean") everywhere."""
from __future__ import annotations

import pytest

from sdk.errors import ConfigError, EdgeSDKError, InputError, UnknownNameError, UnknownTargetError
from sdk.registry import TARGET_ALIASES, Registry
from tests.clirun import run_cli


def _families():
    from sdk.formats import FORMATS
    from sdk.quantize.methods import METHODS
    from sdk.quantize.schemes import SCHEMES
    from sdk.remote.agent.power import SOURCES
    from sdk.robustness import CORRUPTIONS
    from sdk.targets.cuda import BACKENDS
    from sdk.targets.registry import TARGETS
    from sdk.validation.checks import CHECKS

    return [TARGETS, FORMATS, SCHEMES, METHODS, SOURCES, BACKENDS, CHECKS, CORRUPTIONS]


def test_every_family_is_a_registry_with_one_error_type():
    for reg in _families():
        assert isinstance(reg, Registry) and reg.names(), reg
        with pytest.raises(UnknownNameError, match=f"unknown {reg.family} 'no-such-name'"):
            reg.load("no-such-name")


def test_same_aliases_for_targets_and_schemes():
    from sdk.quantize.schemes import SCHEMES, get_scheme
    from sdk.targets import target_class

    for alias, name in TARGET_ALIASES.items():
        assert target_class(alias) is target_class(name)
        assert SCHEMES.canonical(alias) == name
        assert type(get_scheme(alias)) is type(get_scheme(name))


def test_did_you_mean():
    from sdk.targets import target_class

    with pytest.raises(UnknownTargetError) as exc:
        target_class("tensorrtt")
    err = exc.value
    assert isinstance(err, UnknownNameError) and isinstance(err, InputError)
    assert err.suggestion == "tensorrt" and "did you mean 'tensorrt'?" in str(err)
    assert "onnxruntime" in err.known


def test_registry_basics_lazy_entries_and_load_errors():
    reg: Registry = Registry("widget", {"json": "json:dumps", "broken": "sdk.no_such_module:x"},
                             aliases={"j": "json"}, load_error=ConfigError)
    assert reg.names() == ["json", "broken"] and "j" in reg and "yaml" not in reg
    import json

    assert reg.load("j") is json.dumps and reg["json"] is json.dumps and reg.get("yaml") is None
    with pytest.raises(ConfigError, match="widget 'broken' is registered as 'sdk.no_such_module:x', which cannot"):
        reg.load("broken")
    reg.register("fn", len)
    assert reg.load("fn") is len
    with pytest.raises(EdgeSDKError, match="already registered"):
        reg.register("fn", max, replace=False)
    saved = reg.snapshot()
    reg.decorator("extra")(min)
    assert "extra" in reg
    reg.restore(saved)
    assert "extra" not in reg


def test_entry_points_for_any_family(tmp_path, monkeypatch):
    """Plugins register in group ``edgesdk.<family>`` for every family, not only targets."""
    import importlib
    import sys

    dist = tmp_path / "corr_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: corr-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[edgesdk.widgets]\nsquare = corr_plugin_mod:square\n")
    (tmp_path / "corr_plugin_mod.py").write_text("def square(x):\n    return x * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    reg: Registry = Registry("widget", entry_points="edgesdk.widgets")
    assert reg.names() == ["square"] and reg.load("square")(3) == 9
    sys.modules.pop("corr_plugin_mod", None)


def test_cli_alias_and_unknown_target_are_the_same_in_bench_and_quantize(example_model, capsys, tmp_path):
    code, _, err = run_cli(["bench", example_model, "-t", "onnxrtt", "--runs", "1"], capsys)
    assert code != 0 and err.startswith("error: unknown target 'onnxrtt' (known targets: onnxruntime, ")
    assert "did you mean 'onnxrt'?" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = run_cli(["bench", example_model, "-t", "ort", "--input-shape", "image=1x1x8x8",
                              "--runs", "3", "--min-seconds", "0", "--warmup", "0"], capsys)
    assert code == 0, err
