"""Fixtures and the summary table of the real-model tier (helpers: :mod:`tests.realmodels.tier`)."""
from __future__ import annotations

import os
from typing import Dict

import pytest

from tests.realmodels.tier import ROOT, TABLE


@pytest.fixture(scope="session")
def board_env(tmp_path_factory) -> Dict[str, str]:
    """Environment for ``sdk`` subprocesses: a ``local`` profile whose workdir is a temp folder
    (the shared ``~/.cache/edgesdk/local-board`` stays untouched), PYTHONPATH of this checkout."""
    root = tmp_path_factory.mktemp("realmodels-boards")
    boards = root / "profiles"
    boards.mkdir()
    workdir = root / "local-board"
    text = (ROOT / "boards" / "local.toml").read_text()
    text = text.replace('workdir = "~/.cache/edgesdk/local-board"', f'workdir = "{workdir}"')
    assert str(workdir) in text, "boards/local.toml names its workdir"
    (boards / "local.toml").write_text(text)
    env = dict(os.environ)
    env["EDGESDK_BOARDS_PATH"] = str(boards)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["COLUMNS"] = "200"
    env["EDGESDK_LOCAL_WORKDIR"] = str(workdir)
    return env


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not TABLE:
        return
    cols = ["inspect", "bench", "profile", "push local", "validate local", "quantize", "int8 metric", "fuzz",
            "params", "MACs", "p50 ms"]
    tr = terminalreporter
    tr.section("real-model corpus")
    tr.write_line(" | ".join(["model".ljust(28)] + [c.rjust(14) for c in cols]))
    for name in sorted(TABLE):
        row = TABLE[name]
        cells = []
        for c in cols:
            v = row.get(c, "-")
            if isinstance(v, int) and c in ("params", "MACs"):
                v = f"{v:,}"
            elif isinstance(v, float):
                v = f"{v:.2f}"
            cells.append(str(v).rjust(14))
        tr.write_line(" | ".join([name.ljust(28)] + cells))
