"""The quantizer's inputs from the hardening issue, each as a user meets it through `sdk quantize`:
a corrupt --stats file, all-zero calibration data, an unwritable --stats with --no-cache, and
--limit with undecodable images in the folder (real files, real decoder)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "digits" / "digits_cnn.onnx"
SHAPE = ("--input-shape", "image=1x1x8x8")


def sdk(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_a_corrupt_stats_file_is_recalibrated_and_replaced_with_a_warning(tmp_path):
    stats = tmp_path / "stats.npz"
    stats.write_bytes(b"PK\x03\x04 not a zip")
    data = tmp_path / "calib.npy"
    np.save(data, np.random.default_rng(0).random((16, 1, 8, 8), dtype=np.float32))
    proc = sdk("quantize", MODEL, "--calib", data, "-o", tmp_path / "q.onnx", *SHAPE, "--stats", stats,
               "--report", tmp_path / "r.json", "--no-speed-check")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "ignored unreadable calibration statistics" in proc.stdout
    assert np.load(stats).files                       # replaced by readable statistics
    again = sdk("quantize", MODEL, "--calib", data, "-o", tmp_path / "q2.onnx", *SHAPE, "--stats", stats,
                "--report", tmp_path / "r2.json", "--no-speed-check")
    assert again.returncode == 0 and json.loads((tmp_path / "r2.json").read_text())["calibration"]["reused_statistics"]


def test_all_zero_calibration_data_is_warned(tmp_path):
    data = tmp_path / "zeros.npy"
    np.save(data, np.zeros((16, 1, 8, 8), np.float32))
    proc = sdk("quantize", MODEL, "--calib", data, "-o", tmp_path / "q.onnx", *SHAPE, "--no-cache",
               "--report", tmp_path / "r.json", "--no-speed-check")
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads((tmp_path / "r.json").read_text())["warnings"]
    assert any("calibration input 'image' is constant (0)" in w for w in warnings), warnings
    assert "constant (0)" in proc.stdout


def test_an_unwritable_stats_path_with_no_cache_fails_before_any_work(tmp_path):
    data = tmp_path / "calib.npy"
    np.save(data, np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    proc = sdk("quantize", MODEL, "--calib", data, "-o", tmp_path / "q.onnx", *SHAPE, "--no-cache",
               "--stats", "/proc/stats.npz")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --stats: cannot write in '/proc'"), proc.stderr
    assert not (tmp_path / "q.onnx").exists()


def test_limit_counts_decoded_images_not_files(tmp_path):
    cv2 = pytest.importorskip("cv2", reason="needs OpenCV (pip install edgesdk[images])")
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for i in range(2):                              # sorted first: undecodable
        (imgs / f"a_broken{i}.png").write_bytes(b"\x89PNG garbage")
    rng = np.random.default_rng(0)
    for i in range(12):
        ok, buf = cv2.imencode(".png", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        (imgs / f"b_good{i:02d}.png").write_bytes(buf.tobytes())
    from sdk.sources import open_source, parse_preprocess
    from sdk.tensors import TensorSpec

    # the quantizer's calibration source (a 3-channel 8x8 input: the digits model is gray)
    source = open_source(str(imgs), [TensorSpec("image", (1, 3, 8, 8), "float32")], parse_preprocess(["size=8x8"]),
                         limit=1)
    got = list(source.samples())
    assert len(got) == 1 and source.skipped == 2 and len(source) == 1
    source = open_source(str(imgs), [TensorSpec("image", (1, 3, 8, 8), "float32")], parse_preprocess(["size=8x8"]),
                         limit=5)
    assert len(list(source.samples())) == 5 and source.skipped == 2
