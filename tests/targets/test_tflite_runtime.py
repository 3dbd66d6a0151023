"""Runtime choice: LiteRT, then tflite_runtime, then tensorflow.lite; a broken or missing runtime
is one clear line with the fix.

The broken runtime is SIMULATED: a stand-in ``tflite_runtime`` package (with its dist-info, version
2.14.0) fails the way the real tflite-runtime 2.14 wheel fails under NumPy 2 — it imports, then
the first Interpreter prints NumPy's 1.x banner and raises SystemError caused by ImportError caused
by ``AttributeError: _ARRAY_API not found`` (checked against the real wheel by hand).
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

import sdk.formats.tflite as fmt
from sdk.errors import MissingDependencyError, TargetUnavailableError
from sdk.model import Model
from sdk.targets.tflite import TFLiteTarget
from tests import tiers
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent.parent / "data"

_BROKEN_INTERPRETER = '''
"""SIMULATED tflite-runtime 2.14 under NumPy 2 (see the test module's docstring)."""
import enum
import sys


class OpResolverType(enum.Enum):
    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


def load_delegate(library, options=None):
    raise ValueError("Failed to load delegate from " + library)


class Interpreter:
    def __init__(self, model_path=None, model_content=None, **kwargs):
        sys.stderr.write("\\nA module that was compiled using NumPy 1.x cannot be run in\\n"
                         "NumPy 2.0.0 as it may crash. To support both 1.x and 2.x\\n"
                         "versions of NumPy, modules must be compiled with NumPy 2.0.\\n")
        try:
            try:
                raise AttributeError("_ARRAY_API not found")
            except AttributeError as exc:
                raise ImportError("numpy.core.multiarray failed to import") from exc
        except ImportError as exc:
            raise SystemError("<built-in method CreateWrapperFromBuffer of PyCapsule object at 0x7f0> "
                              "returned a result with an exception set") from exc
'''


@pytest.fixture
def broken_tflite_runtime(tmp_path, monkeypatch):
    """Put the stand-in ``tflite_runtime`` 2.14.0 on the path; yield its candidate."""
    pkg = tmp_path / "tflite_runtime"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "2.14.0"\n')
    (pkg / "interpreter.py").write_text(_BROKEN_INTERPRETER)
    info = tmp_path / "tflite_runtime-2.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tflite-runtime\nVersion: 2.14.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(fmt, "_runtimes", {})
    yield next(c for c in fmt.RUNTIMES if c.name == "tflite_runtime")
    for name in [m for m in sys.modules if m == "tflite_runtime" or m.startswith("tflite_runtime.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def test_order_is_litert_then_tflite_runtime_then_tensorflow():
    assert [c.name for c in fmt.RUNTIMES] == ["ai_edge_litert", "tflite_runtime", "tensorflow"]


def test_only_runtime_broken_says_so_with_the_fix(broken_tflite_runtime, monkeypatch):
    monkeypatch.setattr(fmt, "RUNTIMES", (broken_tflite_runtime,))
    cheap = TFLiteTarget.availability()
    assert cheap.available and cheap.version == "2.14.0"  # metadata only: it cannot tell
    deep = TFLiteTarget.availability(deep=True)
    assert not deep.available
    assert "tflite-runtime 2.14.0 is installed but does not work" in deep.reason
    assert "NumPy 1.x" in deep.reason and "_ARRAY_API not found" in deep.reason
    assert "pip install 'edgesdk[tflite]'" in deep.reason
    with pytest.raises(TargetUnavailableError, match="_ARRAY_API"):
        fmt.load_runtime()


@pytest.mark.parametrize("cmd", [["bench", DATA / "digits_float.tflite", "-t", "tflite"],
                                 ["inspect", DATA / "digits_float.tflite"]], ids=["bench", "inspect"])
def test_cli_broken_runtime_is_one_line(broken_tflite_runtime, monkeypatch, capsys, cmd):
    monkeypatch.setattr(fmt, "RUNTIMES", (broken_tflite_runtime,))
    code, out, err = run_cli(cmd, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ")  # NumPy's banner is swallowed
    assert "_ARRAY_API not found" in err and "pip install 'edgesdk[tflite]'" in err


def test_cli_targets_shows_the_broken_runtime(broken_tflite_runtime, monkeypatch, capsys):
    monkeypatch.setattr(fmt, "RUNTIMES", (broken_tflite_runtime,))
    code, out, err = run_cli(["targets", "--json"], capsys)
    assert code == 0
    row = next(r for r in json.loads(out) if r["name"] == "tflite")
    assert row["available"] is False and row["version"] == "2.14.0" and "NumPy 1.x" in row["reason"]


def test_broken_runtime_is_skipped_for_the_next_one(broken_tflite_runtime, monkeypatch):
    if not TFLiteTarget.availability(deep=True).available:
        tiers.require_or_skip("tflite", "no working TFLite runtime to fall back to")
    litert = next(c for c in fmt.RUNTIMES if c.name == "ai_edge_litert")
    monkeypatch.setattr(fmt, "RUNTIMES", (broken_tflite_runtime, litert))
    monkeypatch.setattr(fmt, "_runtimes", {})
    deep = TFLiteTarget.availability(deep=True)
    assert deep.available and deep.details["runtime"] == "ai_edge_litert"
    assert any("tflite-runtime 2.14.0" in s for s in deep.details["skipped"])
    assert Model.load(DATA / "digits_int8.tflite").inputs[0].dtype == "int8"


def test_no_runtime_installed(monkeypatch, tmp_path):
    monkeypatch.setattr(fmt, "RUNTIMES", (fmt.RuntimeCandidate("nope", "edgesdk_no_such_module", "x", ("x",)),))
    monkeypatch.setattr(fmt, "_runtimes", {})
    avail = TFLiteTarget.availability(deep=True)
    assert not avail.available and "no TFLite runtime is installed" in avail.reason
    with pytest.raises(MissingDependencyError, match=r"pip install 'edgesdk\[tflite\]'"):
        Model.load(DATA / "digits_float.tflite")


def test_runtime_option_picks_one_and_checks_the_name():
    from sdk.errors import InputError
    from sdk.targets import get_target

    if not TFLiteTarget.availability(deep=True).available:
        tiers.require_or_skip("tflite", "no working TFLite runtime")
    art = get_target("tflite", runtime="ai_edge_litert").prepare(DATA / "digits_float.tflite")
    assert art.metadata["runtime"] == "ai_edge_litert"
    with pytest.raises(InputError, match="unknown TFLite runtime 'litert'"):
        get_target("tflite", runtime="litert").prepare(DATA / "digits_float.tflite")
