"""Truncated and bit-flipped corpus models: every command answers with one ``error:`` line and
exit code 2, no traceback, and writes nothing (no output file, nothing pushed to the board)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.realmodels.tier import assert_one_error_line, model_params, record, require_corpus, sdk

pytestmark = pytest.mark.realmodels

COMMANDS = {
    "inspect": lambda m, f, out: ["inspect", f, "--json", out],
    "bench": lambda m, f, out: ["bench", f, *m.shape_flags, "--runs", "1", "--min-seconds", "0", "--json", out],
    "push": lambda m, f, out: ["push", f, "--board", "local", *m.shape_flags, "--runs", "1", "--min-seconds", "0",
                               "--idle-seconds", "0", "--json", out],
    "validate": lambda m, f, out: ["validate", f, "--board", "local", *m.shape_flags, "--limit", "1",
                                   "--json", out, "--report", out.with_suffix(".html")],
}


def damaged(data: bytes, how: str) -> bytes:
    """``truncated``: the first half of the file; ``bitflip``: bits flipped in the first bytes,
    where the format's header lives (ONNX: the first protobuf fields; TFLite: the root offset and
    the ``TFL3`` identifier), so the file is no longer that format's model."""
    if how == "truncated":
        return data[: len(data) // 2]
    b = bytearray(data)
    for i in (0, 1, 4, 5, 6, 7):
        b[i] ^= 0xA5
    return bytes(b)


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.mark.parametrize("how", ["truncated", "bitflip"])
@pytest.mark.parametrize("model", model_params())
def test_damaged_model(model, how, board_env, tmp_path):
    require_corpus()
    bad = tmp_path / "in" / model.path.name
    bad.parent.mkdir()
    bad.write_bytes(damaged(model.path.read_bytes(), how))
    board_dir = Path(board_env["EDGESDK_LOCAL_WORKDIR"])
    models_before = _listing(board_dir / "models")
    work = tmp_path / "cwd"
    work.mkdir()
    for name, argv in COMMANDS.items():
        out = tmp_path / "out" / f"{name}.json"
        proc = sdk(board_env, *argv(model, bad, out), cwd=work)
        line = assert_one_error_line(proc, 2)
        assert model.path.name in line or "model" in line, line
        assert not out.parent.exists() or not os.listdir(out.parent), f"{name} wrote {os.listdir(out.parent)}"
        assert _listing(work) == [], f"{name} left files behind: {_listing(work)}"
        assert _listing(board_dir / "models") == models_before, f"{name} pushed the damaged model"
    record(model.name, fuzz="pass")
