"""The post-processing kernels' algorithm (block compaction, stable 4-pass radix sort on score keys,
64-bit IoU masks over 64x64 tiles and their greedy walk), emulated stage by stage in NumPy by
``sdk.kernels.postprocess.emulate``, gives exactly the CPU reference's detections. No GPU needed:
this pins down the algorithm; the GPU tests and scripts/gpu_check.py pin the CUDA code to it."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.kernels.postprocess import _nms_mask, emulate, score_keys
from tests import tiers
from tests.kernels.cases import tied_scores
from sdk.kernels.reference import (
    PostprocessSpec,
    synthetic_yolo_output,
    yolo_postprocess,
)


def _same(a, b) -> None:
    assert len(a) == len(b)
    for f in ("boxes", "scores", "classes", "rows"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


@pytest.mark.parametrize("n,classes,obj,transposed", [(100, 3, True, False), (1000, 1, False, False),
                                                      (8400, 80, False, True), (5000, 20, True, True),
                                                      (25200, 80, True, False), (257, 2, False, False),
                                                      (63, 4, True, False), (1, 1, False, False)])
def test_emulation_equals_reference(n, classes, obj, transposed):
    pred = synthetic_yolo_output(n, classes, obj, seed=n + classes)
    if transposed:
        pred = np.ascontiguousarray(pred.T)
    spec = PostprocessSpec(has_objectness=obj, transposed=transposed)
    _same(emulate(pred, spec), yolo_postprocess(pred, spec))


@pytest.mark.parametrize("kw", [dict(max_candidates=1), dict(max_candidates=64), dict(max_candidates=65),
                                dict(max_candidates=130, max_detections=7), dict(max_detections=1),
                                dict(iou_threshold=0.0), dict(iou_threshold=1.0), dict(score_threshold=0.99),
                                dict(score_threshold=-1.0, max_candidates=700)])
def test_emulation_edge_settings(kw):
    pred = synthetic_yolo_output(3000, 5, True, seed=7)
    spec = PostprocessSpec(has_objectness=True, **kw)
    _same(emulate(pred, spec), yolo_postprocess(pred, spec))


def test_ties_and_signed_zero_keep_row_order():
    """Equal scores (including 0.0 and -0.0, which compare equal) rank by row, as the reference."""
    pred, spec = tied_scores()
    _same(emulate(pred, spec), yolo_postprocess(pred, spec))


def test_score_keys_order_descending():
    s = np.array([1.0, -1.0, 0.0, -0.0, 3.5, -7.0, 1e-30, -1e-30, np.inf, -np.inf], np.float32)
    k = score_keys(s)
    order = np.argsort(k, kind="stable")
    assert list(s[order]) == sorted(s, key=lambda v: -v)
    assert k[2] == k[3]  # 0.0 and -0.0


def test_mask_bits_are_iou_over_threshold_same_class_later_only():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10], [50, 50, 60, 60]], np.float32)
    classes = np.array([0, 0, 1, 0], np.int32)
    mask = _nms_mask(boxes, classes, np.arange(4, dtype=np.int32), 0.5)
    assert mask.shape == (4, 1)
    assert [int(m) for m in mask[:, 0]] == [0b10, 0, 0, 0]  # 0 suppresses 1 (same class); 2 is class 1


def test_no_candidates():
    pred = synthetic_yolo_output(500, 3, False, seed=1)
    spec = PostprocessSpec(has_objectness=False, score_threshold=2.0)
    assert len(emulate(pred, spec)) == 0 == len(yolo_postprocess(pred, spec))


@pytest.mark.parametrize("thr", [0.05, 0.25])
def test_emulation_equals_reference_on_a_real_detector(thr):
    """NudeNet's YOLOv8n on the corpus photos: real scores, real overlapping boxes."""
    from tests.kernels.realdata import nudenet_outputs

    outs = nudenet_outputs()
    if outs is None:
        tiers.require_or_skip("corpus", "corpus model nudenet-320n is not fetched (python scripts/fetch_corpus.py)")
    spec = PostprocessSpec(has_objectness=False, transposed=True, score_threshold=thr)
    kept = 0
    for pred in outs:
        want = yolo_postprocess(pred, spec)
        _same(emulate(pred, spec), want)
        kept += len(want)
    assert kept > 0  # the photos do hold detections
