"""``sdk.validation``: image folders through the shared PreprocessSpec, labels files, the board
protocol for static-batch models, fleets of runners, and no-spec runs."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import InputError
from sdk.validation import HostRunner, load_dataset, validate


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """Twelve real PNG files (decoded by OpenCV) with a labels.csv, for a 3-channel 16x16 model."""
    cv2 = pytest.importorskip("cv2", reason="image folders need opencv-python-headless (the vision extra)")
    d = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    rows = ["filename,label"]
    for i in range(12):
        img = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
        cv2.imwrite(str(d / f"img_{i:02d}.png"), img)
        rows.append(f"img_{i:02d}.png,{i % 10}")
    (d / "labels.csv").write_text("\n".join(rows) + "\n")
    return d


def test_image_folder_with_labels_csv(conv_model, image_folder):
    from sdk.model import Model
    from sdk.preprocess import PreprocessSpec

    ds = load_dataset(image_folder, Model.load(conv_model).inputs, preprocess=PreprocessSpec(size=(16, 16)))
    assert ds.kind == "images" and len(ds) == 12 and ds.arrays["x"].shape == (12, 3, 16, 16)
    assert list(ds.labels[:3]) == [0, 1, 2] and ds.labels_source.endswith("labels.csv")
    assert len(ds.images) == 12 and ds.images[0].dtype == np.uint8


def test_image_folder_labels_missing_a_file(conv_model, image_folder, tmp_path):
    from sdk.model import Model
    from sdk.preprocess import PreprocessSpec

    (tmp_path / "l.csv").write_text("img_00.png,1\nimg_01.png,2\n")
    with pytest.raises(InputError, match="no label for 10 of 12 images, e.g. 'img_02.png'"):
        load_dataset(image_folder, Model.load(conv_model).inputs, labels=tmp_path / "l.csv",
                     preprocess=PreprocessSpec(size=(16, 16)))
    (tmp_path / "bad.csv").write_text("img_00.png,cat\n")
    with pytest.raises(InputError, match="not integer class ids|no label"):
        load_dataset(image_folder, Model.load(conv_model).inputs, labels=tmp_path / "bad.csv",
                     preprocess=PreprocessSpec(size=(16, 16)))


def test_validate_images_with_robustness_on_pixels(conv_model, image_folder):
    from sdk.spec import parse_spec

    spec = parse_spec({"run": {"runs": 10, "min_seconds": 0.0}, "preprocess": {"size": [16, 16]},
                       "budgets": {"min_cosine": 0.999},
                       "robustness": {"corruptions": ["jpeg", "occlusion"], "severities": [3]}})
    result = validate(conv_model, ["host:onnxruntime"], image_folder, spec=spec)
    board = result.boards[0]
    assert result.verdict == "pass", result.failed_checks()
    assert board.accuracy["samples"] == 12 and board.accuracy["top1_drop"] == 0.0
    rows = board.robustness["rows"]
    assert [r["corruption"] for r in rows] == ["jpeg", "occlusion"] and all(r["cosine"] < 1.0 for r in rows)
    assert result.data["kind"] == "images" and result.data["preprocess"]["size"] == [16, 16]


def test_static_batch_model_on_the_local_board(static_conv_model, tmp_path):
    """A model with a fixed batch of 1 goes to the board one sample per feed (an extra leading axis)."""
    x = np.random.default_rng(1).standard_normal((7, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    result = validate(static_conv_model, ["local", "host:onnxruntime"], tmp_path / "x.npz",
                      spec=None)
    assert [b.verdict for b in result.boards] == ["pass", "pass"], [b.error for b in result.boards]
    for b in result.boards:
        assert b.compare["logits"]["cosine"] > 0.99999
        assert [c.name for c in b.checks] == ["board.run"]  # no spec: only the run itself is checked
        assert b.accuracy == {"reason": "no labels given (--labels)"}


class _Unplugged(HostRunner):
    """A runner whose device goes away after answering `check` (what a board does when its cable
    is pulled): the failure is raised at the lowest level, the rest of the pipeline is real."""

    def infer(self, *args, **kwargs):
        from sdk.errors import BoardConnectionError

        raise BoardConnectionError("connection reset by peer", board=self.name)


def test_fleet_with_runner_objects(example_model, example_eval):
    from sdk.spec import parse_spec

    spec = parse_spec({"run": {"runs": 10, "min_seconds": 0.0}, "budgets": {"p99_latency_ms": 1000.0}})
    result = validate(example_model, [HostRunner(name="a"), _Unplugged(name="b")], example_eval, spec=spec, limit=50)
    a, b = result.boards
    assert a.verdict == "pass" and b.verdict == "fail" and result.exit_code == 1
    assert b.failed_stage == "infer" and "connection reset" in b.error
    assert result.failed_checks() == ["b: board.run", "b: latency.p99"]
    assert result.summary_rows()[1]["error"].startswith("b: connection reset")
