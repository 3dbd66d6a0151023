from __future__ import annotations

import pytest

from sdk.errors import InputError, TargetError, UnknownTargetError
from sdk.targets import Target, get_target, register_target, target_class, target_names
from sdk.targets import registry
from sdk.targets.base import Availability


@pytest.fixture(autouse=True)
def _restore_registry():
    """Registrations made by a test stay in that test."""
    saved = registry.TARGETS.snapshot()
    yield
    registry.TARGETS.restore(saved)


def test_builtin_listed_and_unknown_names_known():
    assert "onnxruntime" in target_names()
    with pytest.raises(UnknownTargetError, match="known targets: .*onnxruntime"):
        target_class("nosuch")


def test_alias():
    assert target_class("ort") is target_class("onnxruntime")


def test_unknown_option_lists_known():
    with pytest.raises(InputError, match="has no option 'thread'.*threads"):
        get_target("onnxruntime", thread=2)


class _Echo(Target):
    name = "echo-test"
    default_options = {"gain": 1}

    @classmethod
    def _probe(cls, deep):
        return Availability(True, version="0")


def test_register_custom_target():
    register_target("echo-test", _Echo)
    assert isinstance(get_target("echo-test", gain=2), _Echo)
    with pytest.raises(TargetError, match="already registered"):
        register_target("echo-test", "somewhere:Else")


def test_broken_registration_is_an_error_not_a_crash():
    register_target("broken-test", "sdk.does_not_exist:Nothing", replace=True)
    with pytest.raises(TargetError, match="cannot be loaded"):
        target_class("broken-test")


def test_entry_point_group(tmp_path, monkeypatch):
    """A distribution declaring an `edgesdk.targets` entry point shows up in the registry."""
    import importlib
    import sys

    dist = tmp_path / "plugin_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[edgesdk.targets]\nplugin-echo = plugin_mod:PluginTarget\n")
    (tmp_path / "plugin_mod.py").write_text(
        "from sdk.targets import Target\nfrom sdk.targets.base import Availability\n"
        "class PluginTarget(Target):\n    name = 'plugin-echo'\n"
        "    @classmethod\n    def _probe(cls, deep):\n        return Availability(True, version='9')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry.TARGETS, "_entry_points_loaded", False)
    assert "plugin-echo" in registry.target_names()
    assert registry.target_class("plugin-echo").runtime_version() == "9"
    sys.modules.pop("plugin_mod", None)
    importlib.invalidate_caches()
