"""Bounded by default (issue 27, class 5): small inputs that ask for unbounded work.

A compressed ``.npz`` member that inflates far past its size (a real zip of zeros), a FIFO named
``b.npy`` in a data folder, ``--runs 10**12``, a pickled ``.npy`` as labels, and a PNG whose header
declares 60000x60000 pixels (over OpenCV's limit). Each is refused from its headers with one
``error:`` line (exit 2) or skipped with one ``warning:`` line, never hangs, never inflates."""
from __future__ import annotations

import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.security.helpers import error_lines, local_board, sdk

SHAPE = ["--input-shape", "image=1x1x8x8"]


def inflating_npz(path: Path, mib: int) -> Path:
    """``image`` declared [mib * 2**18, 1, 1, 1] float32: ``mib`` MiB of zeros, deflated to ~1/1000."""
    n = mib * (1 << 18)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("image.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n, 1, 1, 1)})
            zero = bytes(1 << 20)
            for _ in range(mib):
                f.write(zero)
    return path


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    return inflating_npz(tmp_path_factory.mktemp("bomb") / "bomb.npz", 160)


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setenv("EDGESDK_MAX_INFLATED_MB", "32")


def _refused(proc, what="inflates") -> None:
    errs = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(errs) == 1 and what in errs[0], proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "unexpected" not in proc.stderr


def test_bench_refuses_an_inflating_npz(bomb, small_cap, example_model):
    _refused(sdk("bench", example_model, "--data", bomb, "--runs", "5", "--min-seconds", "0", timeout=120))


def test_validate_refuses_an_inflating_npz(bomb, small_cap, example_model):
    _refused(sdk("validate", example_model, "-b", "host:onnxruntime", "--data", bomb, "--quiet", timeout=120))


def test_quantize_refuses_an_inflating_npz(bomb, small_cap, example_model, tmp_path):
    _refused(sdk("quantize", example_model, "--calib", bomb, "-o", tmp_path / "q.onnx", timeout=120))
    assert not (tmp_path / "q.onnx").exists()


def test_robustness_refuses_an_inflating_npz(bomb, small_cap, example_model):
    _refused(sdk("robustness", example_model, "--data", bomb, timeout=120))


def test_the_agent_refuses_an_inflating_npz(bomb, small_cap, example_model, tmp_path):
    from sdk.errors import InputError
    from sdk.remote.agent.commands import infer

    with pytest.raises(InputError, match="inflates"):
        infer({"model_path": str(example_model), "inputs_npz": str(bomb), "outputs_npz": str(tmp_path / "o.npz")})


def test_a_board_run_refuses_an_inflating_npz(bomb, small_cap, example_model, tmp_path, monkeypatch):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_board(boards, "here", tmp_path / "wd")
    _refused(sdk("validate", example_model, "-b", "here", "--data", bomb, "--quiet", timeout=120))


def test_a_fifo_in_a_data_folder_is_skipped_with_a_warning(tmp_path, example_model):
    folder = tmp_path / "data"
    folder.mkdir()
    np.save(folder / "a.npy", np.zeros((4, 1, 8, 8), np.float32))
    os.mkfifo(folder / "b.npy")
    proc = sdk("bench", example_model, "--data", folder, "--runs", "5", "--min-seconds", "0", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if "b.npy" in ln] == \
        [f"warning: skipped '{folder / 'b.npy'}': not a regular file"], proc.stderr


def test_a_fifo_given_as_the_data_file_is_refused(tmp_path, example_model):
    os.mkfifo(tmp_path / "x.npy")
    _refused(sdk("bench", example_model, "--data", tmp_path / "x.npy", "--runs", "5", timeout=60), "not a regular file")


def test_runs_are_bounded(example_model):
    _refused(sdk("bench", example_model, *SHAPE, "--runs", str(10 ** 12), timeout=60), "runs and warmup must be <=")


def test_pickled_labels_are_refused_in_one_line(tmp_path, example_model):
    labels = tmp_path / "labels.npy"
    np.save(labels, np.array([{"a": 1}] * 4, dtype=object), allow_pickle=True)
    data = tmp_path / "x.npy"
    np.save(data, np.zeros((4, 1, 8, 8), np.float32))
    _refused(sdk("validate", example_model, "-b", "host:onnxruntime", "--data", data, "--labels", labels, "--quiet"),
             "pickle")


def _png_header_only(path: Path, w: int, h: int) -> Path:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def test_an_image_over_the_pixel_limit_is_skipped_like_an_undecodable_one(tmp_path):
    import cv2

    from sdk.preprocess import PreprocessSpec
    from sdk.tensors import TensorSpec
    from sdk.validation.inputs import load_dataset

    folder = tmp_path / "imgs"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), np.full((16, 16, 3), 128, np.uint8))
    _png_header_only(folder / "huge.png", 60000, 60000)
    ds = load_dataset(folder, [TensorSpec("image", (1, 3, 8, 8), "float32")], preprocess=PreprocessSpec(size=(8, 8)))
    assert ds.names == ["a.png"]
    assert ds.warnings == [f"skipped '{folder / 'huge.png'}': not a decodable image"]
