"""The test tiers and the CI skip gate (tests/tiers.py): a required tier that cannot run fails
naming it, and a CI run fails on a skip whose reason is not GPU/TensorRT absence. The gate is run
for real: a pytest session in a subprocess over a folder of small test files."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parent.parent

#: one file per case, run as its own session
CASES = {
    "test_other_skip.py": 'import pytest\n\ndef test_ok():\n    pass\n\n'
                          'def test_other():\n    pytest.skip("needs the frobnicator: apt-get install frob")\n',
    "test_gpu_skip.py": 'import pytest\nfrom tests import tiers\n\ndef test_ok():\n    pass\n\n'
                        'def test_gpu():\n    tiers.skip_no_gpu("no libcuda")\n\n'
                        'def test_fixture_style():\n    pytest.skip("no GPU: the probe says none")\n\n'
                        'def test_trt():\n    tiers.skip_no_tensorrt("libnvinfer not found")\n',
    "test_tier_mark.py": 'from tests import tiers\n\n'
                         'pytestmark = tiers.needs("ssh", False, "sshd is not on PATH")\n\n'
                         'def test_over_ssh():\n    pass\n',
    "test_tier_call.py": 'from tests import tiers\n\n'
                         'def test_tflite():\n    tiers.require_or_skip("tflite", "ai_edge_litert does not import")\n',
    "test_module_skip.py": 'import pytest\n\npytest.skip("a whole module for no hardware reason", allow_module_level=True)\n',
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("gate")
    (d / "conftest.py").write_text('pytest_plugins = ["tests.tiers"]\n')
    for name, text in CASES.items():
        (d / name).write_text(text)
    return d


def _session(suite: Path, files, **env):
    clean = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("EDGESDK_REQUIRE")}
    clean.update(PYTHONPATH=str(ROOT), **env)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files], cwd=suite,
                          capture_output=True, text=True, env=clean, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


# -- which tiers are required -----------------------------------------------------------------------------
def test_the_list_and_the_per_tier_switches(monkeypatch):
    for k in [k for k in os.environ if k.startswith("EDGESDK_REQUIRE")]:
        monkeypatch.delenv(k)
    assert tiers.required_tiers() == []
    monkeypatch.setenv("EDGESDK_REQUIRE", " tflite,ssh ,")
    assert tiers.required_tiers() == ["ssh", "tflite"]   # in TIERS order, spaces and empty names ignored
    monkeypatch.setenv("EDGESDK_REQUIRE_GPU_APIS", "1")    # the older per-tier switches still work
    monkeypatch.setenv("EDGESDK_REQUIRE_CORPUS", "1")
    assert tiers.required_tiers() == ["ssh", "tflite", "gpu-apis", "corpus"]
    monkeypatch.setenv("EDGESDK_REQUIRE_CORPUS", "0")
    assert not tiers.required("corpus")
    monkeypatch.setenv("EDGESDK_REQUIRE", "all")
    assert tiers.required_tiers() == list(tiers.TIERS)
    monkeypatch.setenv("EDGESDK_REQUIRE", "ssh,shh")
    with pytest.raises(pytest.UsageError, match="unknown tier.*shh"):
        tiers.required_tiers()
    with pytest.raises(KeyError, match="unknown test tier 'risc-v'"):
        tiers.required("risc-v")


def test_a_new_tier_is_one_line(monkeypatch):
    monkeypatch.setitem(tiers.TIERS, "arm", "an aarch64 board under qemu")
    monkeypatch.delenv("EDGESDK_REQUIRE", raising=False)
    monkeypatch.setenv("EDGESDK_REQUIRE_ARM", "1")
    assert tiers.required("arm")
    with pytest.raises(pytest.fail.Exception, match="tier 'arm' is required .*no qemu-aarch64.*aarch64 board"):
        tiers.require_or_skip("arm", "no qemu-aarch64")


def test_require_or_skip(monkeypatch):
    for k in [k for k in os.environ if k.startswith("EDGESDK_REQUIRE")]:
        monkeypatch.delenv(k)
    with pytest.raises(pytest.skip.Exception, match="tier 'ssh' cannot run here: no sshd"):
        tiers.require_or_skip("ssh", "no sshd")
    monkeypatch.setenv("EDGESDK_REQUIRE", "ssh")
    with pytest.raises(pytest.fail.Exception, match="tier 'ssh' is required \\(EDGESDK_REQUIRE\\) but cannot run: no sshd"):
        tiers.require_or_skip("ssh", "no sshd")


def test_which_reasons_ci_accepts():
    assert tiers.hardware_reason("no GPU on this machine: no libcuda")
    assert tiers.hardware_reason("no GPU: cuInit failed")
    assert tiers.hardware_reason("no TensorRT libraries on this machine: libnvinfer.so.10 not found")
    assert tiers.hardware_reason("this machine has a GPU: the CPU path runs elsewhere")
    for reason in ("no GPU APIs installed", "no GPUs", "tier 'ssh' cannot run here: no sshd",
                   "needs Ray: pip install 'edgesdk[ray]'", "TensorRT is not installed", "the CPUs were busy"):
        assert not tiers.hardware_reason(reason), reason


# -- the gate, in real sessions ---------------------------------------------------------------------------
def test_a_dev_run_lists_skips_and_passes(suite):
    rc, out = _session(suite, ["test_other_skip.py", "test_gpu_skip.py", "test_tier_mark.py", "test_module_skip.py"])
    assert rc == 0, out
    assert "skips (6, by reason)" in out
    assert "[NOT HARDWARE] needs the frobnicator: apt-get install frob" in out
    assert "[NOT HARDWARE] tier 'ssh' cannot run here: sshd is not on PATH" in out
    assert "[NOT HARDWARE] a whole module for no hardware reason" in out
    assert "[ok (hardware)] no GPU on this machine: no libcuda" in out
    assert "3 skip(s) for other reasons" in out and "CI skip gate FAILED" not in out


@pytest.mark.parametrize("env", [{"CI": "true"}, {"EDGESDK_REQUIRE": "nvcc"}])
def test_a_ci_run_fails_on_a_skip_that_is_not_hardware(suite, env):
    rc, out = _session(suite, ["test_other_skip.py"], **env)
    assert rc == 1, out
    assert "1 passed, 1 skipped, 1 skip-gate failed" in out
    assert "CI skip gate FAILED: 1 skip(s) whose reason is not 'no GPU / no TensorRT libraries" in out


def test_a_ci_run_passes_with_only_hardware_skips(suite):
    rc, out = _session(suite, ["test_gpu_skip.py"], CI="true")
    assert rc == 0, out
    assert "1 passed, 3 skipped" in out and "[ok (hardware)]" in out and "FAILED" not in out


@pytest.mark.parametrize("tier,file", [("ssh", "test_tier_mark.py"), ("tflite", "test_tier_call.py")])
def test_a_required_tier_that_cannot_run_fails_naming_it(suite, tier, file):
    rc, out = _session(suite, [file], EDGESDK_REQUIRE=tier)
    assert rc == 1, out
    assert f"tier '{tier}' is required (EDGESDK_REQUIRE) but cannot run" in out, out
    assert ("1 error" if file == "test_tier_mark.py" else "1 failed") in out, out   # a mark fails at setup
    rc, out = _session(suite, [file], **{f"EDGESDK_REQUIRE_{tier.upper()}": "1"})
    assert rc == 1 and f"tier '{tier}' is required" in out, out
    rc, out = _session(suite, [file])   # not required: a skip with the tier's name
    assert rc == 0 and f"tier '{tier}' cannot run here" in out, out


def test_an_unknown_tier_name_stops_the_run(suite):
    rc, out = _session(suite, ["test_gpu_skip.py"], EDGESDK_REQUIRE="ssh,tfilte")
    assert rc != 0 and "unknown tier(s) tfilte" in out, out


def test_every_test_file_skips_through_the_tiers():
    """No test skips on a plain skipif/skip for a tier's dependency: the names of those dependencies
    appear in a skip only through tests/tiers.py (a property of the source, so new files are held to it)."""
    import re

    offenders = []
    pattern = re.compile(r"pytest\.(skip|mark\.skipif)\(.*(sshd|ssh-keygen|TFLite|g\+\+|gcc|C compiler|Chromium|"
                         r"Python 3\.8|corpus|NVRTC|nvcc|tmpfs|bindings)", re.I)
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name in ("tiers.py", "test_tiers.py"):
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not offenders, "skip through tests.tiers (require_or_skip / needs):\n" + "\n".join(offenders)
