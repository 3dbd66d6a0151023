"""Board profiles: packaged TOML files, user overrides, strict keys."""
from __future__ import annotations

import pytest

from sdk.errors import ConfigError, UnknownBoardError
from sdk.remote.profiles import get_profile, list_profiles, load_profile, profile_dirs

PACKAGED = ["jetson-agx-orin", "jetson-nano", "jetson-orin-nano", "jetson-orin-nx", "jetson-xavier-nx", "local",
            "raspberry-pi-5"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EDGESDK_BOARDS_PATH", raising=False)


def test_packaged_profiles_load():
    profiles = list_profiles()
    assert list(profiles) == PACKAGED
    nx = get_profile("jetson-nx")
    assert nx.name == "jetson-xavier-nx"
    assert nx.runtime.targets[0] == "tensorrt" and nx.runtime.precision == "fp16"
    assert nx.power.sensors and nx.hardware.gpu_arch
    assert get_profile("local").connection.is_local
    for prof in profiles.values():
        assert prof.description and prof.connection.workdir


def test_user_profiles_override_packaged(tmp_path, monkeypatch):
    user = tmp_path / "home" / ".config" / "edgesdk" / "boards"
    user.mkdir(parents=True)
    (user / "jetson-nano.toml").write_text('name = "jetson-nano"\n[connection]\nhost = "10.0.0.5"\nuser = "me"\n')
    first = tmp_path / "first"
    first.mkdir()
    (first / "mine.toml").write_text('description = "from the path"\naliases = ["jetson-nx"]\n'
                                     '[connection]\nhost = "nx.lab"\n[power]\nsensors = ["tegrastats"]\n'
                                     'sysfs_root = "/tmp/fake"\n')
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", f"{tmp_path / 'missing'}:{first}")
    assert profile_dirs()[1] == first
    assert get_profile("jetson-nano").connection.host == "10.0.0.5"
    mine = get_profile("mine")                    # the name defaults to the file's stem
    assert mine.power.sysfs_root == "/tmp/fake"
    assert get_profile("jetson-nx").name == "mine"   # a user alias wins over a packaged one
    assert "mine" in list_profiles()


@pytest.mark.parametrize("text, words", [
    ('name = "x"\n[connection]\nhots = "a"\n', ["connection.hots", "host", "workdir"]),
    ('name = "x"\ncolour = "red"\n', ["colour", "aliases", "connection"]),
    ('name = "x"\n[gpu]\narch = "a"\n', ["gpu", "hardware"]),
    ('name = "x"\n[connection]\npassword = "hunter2"\n', ["password", "never"]),
    ('name = "x"\n[connection]\nport = "22"\n', ["connection.port", "int"]),
    ('name = "x"\n[connection]\nport = 70000\n', ["70000"]),
    ('name = "x"\n[runtime]\nprecision = "fp8"\n', ["fp8", "fp16"]),
    ('name = "x"\n[runtime]\ntargets = "tensorrt"\n', ["runtime.targets", "list"]),
    ('name = "x"\n[hardware]\nmemory_gb = true\n', ["hardware.memory_gb"]),
    ('name = "x"\n[connection\n', ["not valid TOML"]),
    ('name = "x"\n[runtime.tensorrtt]\ndla_core = 0\n', ["[runtime.tensorrtt]", "tensorrt", "onnxruntime"]),
])
def test_bad_profiles_name_the_problem(tmp_path, text, words):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_profile(f)
    for w in words:
        assert w in str(exc.value)


def test_unknown_board_lists_known_ones():
    with pytest.raises(UnknownBoardError) as exc:
        get_profile("jetson-tx9")
    assert "jetson-tx9" in str(exc.value) and "jetson-xavier-nx" in str(exc.value)


def test_profile_path_is_accepted(tmp_path):
    f = tmp_path / "lab.toml"
    f.write_text('[connection]\nhost = "lab"\nport = 2222\n[hardware]\npeak_tops = 40\nmemory_gb = 7.5\n')
    prof = get_profile(str(f))
    assert prof.name == "lab" and prof.connection.port == 2222 and prof.hardware.memory_gb == 7.5


def test_runtime_target_tables_are_default_options(tmp_path):
    f = tmp_path / "nx.toml"
    f.write_text('[connection]\nhost = "nx.lab"\n[runtime]\ntargets = ["tensorrt"]\n[runtime.tensorrt]\ndla_core = 1\nworkspace_mib = 512\n')
    rt = load_profile(f).runtime
    assert rt.options == {"tensorrt": {"dla_core": 1, "workspace_mib": 512}}
    assert rt.target_options("tensorrt", {"workspace_mib": 2048}) == {"dla_core": 1, "workspace_mib": 2048}
    assert rt.target_options("onnxruntime") == {}


def test_packaged_target_options_are_options_of_those_targets():
    from sdk.targets import target_class

    for prof in list_profiles().values():
        for target, opts in prof.runtime.options.items():
            target_class(target)(**opts)  # an unknown option raises InputError naming it


def test_runtime_tables_and_lookups_take_the_target_aliases(tmp_path):
    """`trt`, `ort`, `litert` mean the same in a profile as on the command line."""
    f = tmp_path / "nx.toml"
    f.write_text('[connection]\nhost = "nx.lab"\n[runtime]\ntargets = ["tensorrt"]\n[runtime.trt]\ndla_core = 1\n')
    rt = load_profile(f).runtime
    assert rt.options == {"tensorrt": {"dla_core": 1}}
    assert rt.target_options("trt") == rt.target_options("tensorrt") == {"dla_core": 1}
