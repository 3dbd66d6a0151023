"""Nothing mixed, nothing left (issue 27, class 6).

Two `sdk quantize` runs at once writing the same ``-o``, ``--stats`` and ``--report`` from
different calibration data, three rounds: the files on disk always form one set (the report
names the model's and the statistics' sha256 and both match the files). SIGTERM, like Ctrl-C,
removes the temporary file of a write in progress. `sdk validate` on a board leaves no
``edgesdk-push-*`` folder in ``$TMPDIR``."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.security.helpers import local_board, sdk, start


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_two_quantize_runs_on_the_same_outputs_leave_one_set(tmp_path, example_model):
    rng = np.random.default_rng(0)
    datas = []
    for i, scale in enumerate((1.0, 50.0)):
        d = tmp_path / f"calib{i}.npy"
        np.save(d, (rng.random((16, 1, 8, 8)) * scale).astype(np.float32))
        datas.append(d)
    out, stats, report = tmp_path / "q.onnx", tmp_path / "q.stats.npz", tmp_path / "q.json"
    env = dict(os.environ, EDGESDK_CACHE_DIR=str(tmp_path / "cache"))
    for _round in range(3):
        procs = [subprocess.Popen([sys.executable, "-m", "sdk", "quantize", str(example_model), "--calib", str(d),
                                   "-o", str(out), "--stats", str(stats), "--report", str(report)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for d in datas]
        for p in procs:
            _o, e = p.communicate(timeout=300)
            assert p.returncode in (0, 1), e
        rep = json.loads(report.read_text())
        assert rep["outputs"]["model_sha256"] == _sha(out)
        assert rep["calibration"]["statistics_file"] == {"path": str(stats), "sha256": _sha(stats)}
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
        assert leftovers == [], leftovers


def test_sigterm_removes_the_temporary_file_of_a_write_in_progress(tmp_path):
    code = f"""
import os, signal, sys
from sdk.cli import _install_sigint
from sdk.atomic import atomic_path
_install_sigint()
try:
    with atomic_path({str(tmp_path / 'q.onnx')!r}) as tmp:
        tmp.write_bytes(b"partial" * 1000)
        os.kill(os.getpid(), signal.SIGTERM)
        tmp.write_bytes(b"never")
except KeyboardInterrupt:
    sys.exit(143)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 143, proc.stderr
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_sigterm_during_quantize_exits_143_and_leaves_nothing(tmp_path, example_model):
    data = tmp_path / "calib.npy"
    np.save(data, np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32))
    outdir = tmp_path / "out"
    outdir.mkdir()
    proc = start("quantize", example_model, "--calib", data, "-o", outdir / "q.onnx", "--stats", outdir / "s.npz",
                 env=dict(os.environ, EDGESDK_CACHE_DIR=str(tmp_path / "cache")))
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    if proc.returncode == 143:
        assert err.strip().splitlines()[-1] == "terminated (SIGTERM)", err
        assert not any(p.name.startswith(".") for p in outdir.iterdir()), list(outdir.iterdir())
    else:       # it finished before the signal: still nothing left over
        assert proc.returncode in (0, 1), err
        assert sorted(p.name for p in outdir.iterdir()) == ["q.onnx", "s.npz"]


def test_validate_on_a_board_leaves_no_temporary_folder(tmp_path, monkeypatch, example_model):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_board(boards, "here", tmp_path / "wd")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    spec = tmp_path / "spec.toml"
    spec.write_text("[run]\nruns = 10\nmin_seconds = 0\n")
    proc = sdk("validate", example_model, "-b", "here", "--data", data, "--spec", spec, "--quiet",
               env=dict(os.environ, TMPDIR=str(tmpdir)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    left = [p.name for p in tmpdir.iterdir() if p.name.startswith("edgesdk-")]
    assert left == [], left
