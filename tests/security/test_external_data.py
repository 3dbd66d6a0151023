"""External data travels (issue 27, class 7).

The shipped digits CNN saved the way every model over 2 GB is (``m.onnx`` + ``m.onnx.data``,
``onnx.save_model(save_as_external_data=True)``) is pushed to a board over a real sshd and run
there, and validated on the local board: the data file is uploaded (content-addressed, into the
model's folder on the board) and the board loads it. A location outside the model's folder is
refused before anything is sent."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.remote.sshd import needs_sshd, trust
from tests.security.helpers import error_lines, local_board, sdk


@pytest.fixture(scope="module")
def external_model(tmp_path_factory, example_model) -> Path:
    import onnx

    folder = tmp_path_factory.mktemp("extdata")
    m = onnx.load(str(example_model))
    path = folder / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    assert (folder / "m.onnx.data").stat().st_size > 1000 and path.stat().st_size < 10_000
    return path


@needs_sshd
@pytest.mark.ssh
def test_push_uploads_the_external_data_and_the_board_runs_it(client_home, sshd, board_profile, tmp_path,
                                                               external_model):
    trust(client_home, sshd)
    wd = tmp_path / "extwd"
    name = board_profile("ext", workdir=wd)
    out = tmp_path / "r.json"
    proc = sdk("push", external_model, "-b", name, "--runs", "20", "--min-seconds", "0", "--idle-seconds", "0",
               "--input-shape", "image=1x1x8x8", "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    doc = doc[0] if isinstance(doc, list) else doc
    assert doc["latency_ms"]["count"] >= 20
    pushed = sorted(p.relative_to(wd / "models").as_posix() for p in (wd / "models").rglob("*") if p.is_file())
    assert len(pushed) == 2 and {Path(p).name for p in pushed} == {"m.onnx", "m.onnx.data"}, pushed
    data = next(p for p in (wd / "models").rglob("m.onnx.data"))
    assert data.read_bytes() == (external_model.parent / "m.onnx.data").read_bytes()
    again = sdk("push", external_model, "-b", name, "--runs", "20", "--min-seconds", "0", "--idle-seconds", "0",
                "--input-shape", "image=1x1x8x8", "--json", out)
    assert again.returncode == 0, again.stderr
    tr = json.loads(out.read_text())
    tr = tr[0] if isinstance(tr, list) else tr
    assert tr["transfer"]["skipped"] is True and tr["transfer"]["bytes_sent"] == 0


def test_validate_on_a_board_runs_a_model_with_external_data(tmp_path, monkeypatch, external_model):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_board(boards, "here", tmp_path / "wd")
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    spec = tmp_path / "spec.toml"
    spec.write_text("[run]\nruns = 10\nmin_seconds = 0\n[budgets]\nmin_cosine = 0.999\n")
    proc = sdk("validate", external_model, "-b", "here", "--data", data, "--spec", spec, "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GO" in proc.stdout


def test_external_data_outside_the_models_folder_is_refused(tmp_path, monkeypatch, example_model):
    import onnx

    inner = tmp_path / "model"
    inner.mkdir()
    m = onnx.load(str(example_model))
    onnx.save_model(m, str(tmp_path / "escape.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.data", size_threshold=0)
    (tmp_path / "escape.onnx").rename(inner / "escape.onnx")      # its data now lies in the parent folder
    mp = onnx.load(str(inner / "escape.onnx"), load_external_data=False)
    for t in mp.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../w.data"
    onnx.save_model(mp, str(inner / "escape.onnx"))
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_board(boards, "here", tmp_path / "wd")
    proc = sdk("push", inner / "escape.onnx", "-b", "here", "--runs", "5", "--min-seconds", "0", "--idle-seconds", "0",
               "--input-shape", "image=1x1x8x8")
    errs = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(errs) == 1 and "outside" in errs[0], proc.stderr
    assert not (tmp_path / "wd" / "models").exists() or not any((tmp_path / "wd" / "models").rglob("*.data"))
