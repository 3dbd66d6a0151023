"""CPU references of the kernels: NMS against a brute-force implementation, the kernel's host
arithmetic (emulated in NumPy) against the preprocessing references, bilinear semantics against
OpenCV."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from sdk.errors import InputError
from sdk.kernels.preprocess import emulate, launch_params
from sdk.kernels.reference import (
    PostprocessSpec,
    box_iou,
    scale_boxes,
    yolo_postprocess,
)
from sdk.preprocess import PreprocessSpec, _resize_bilinear, preprocess_reference


# -- post-processing -------------------------------------------------------------------------------
def _brute_force(pred: np.ndarray, spec: PostprocessSpec):
    """Straightforward per-row / per-pair Python version of the documented semantics."""
    rows = pred.T if spec.transposed else pred
    first = 5 if spec.has_objectness else 4
    cands = []
    for i, r in enumerate(rows):
        cls = [np.float32(v) for v in r[first:]]
        c = max(range(len(cls)), key=lambda k: (cls[k], -k))
        s = np.float32(np.float32(r[4]) * cls[c]) if spec.has_objectness else cls[c]
        if s > np.float32(spec.score_threshold):
            cx, cy, w, h = (np.float32(v) for v in r[:4])
            hw, hh = np.float32(w * np.float32(0.5)), np.float32(h * np.float32(0.5))
            box = [np.float32(cx - hw), np.float32(cy - hh), np.float32(cx + hw), np.float32(cy + hh)]
            cands.append((-float(s), i, s, c, box))
    cands.sort(key=lambda t: (t[0], t[1]))
    cands = cands[: spec.max_candidates]

    def iou(a, b):
        z = np.float32(0)
        iw = max(np.float32(min(a[2], b[2]) - max(a[0], b[0])), z)
        ih = max(np.float32(min(a[3], b[3]) - max(a[1], b[1])), z)
        inter = np.float32(iw * ih)
        aa = np.float32(max(np.float32(a[2] - a[0]), z) * max(np.float32(a[3] - a[1]), z))
        ab = np.float32(max(np.float32(b[2] - b[0]), z) * max(np.float32(b[3] - b[1]), z))
        u = np.float32(np.float32(aa + ab) - inter)
        return np.float32(inter / u) if u > 0 else z

    kept = []
    for cand in cands:
        if len(kept) >= spec.max_detections:
            break
        if all(k[3] != cand[3] or not iou(k[4], cand[4]) > np.float32(spec.iou_threshold) for k in kept):
            kept.append(cand)
    return [k[1] for k in kept], [k[2] for k in kept], [k[3] for k in kept]


def _random_pred(rng, n, classes, obj=True, clustered=True):
    fields = 4 + int(obj) + classes
    pred = np.empty((n, fields), dtype=np.float32)
    centres = rng.uniform(0, 640, size=(max(1, n // 8), 2))
    pick = rng.integers(0, len(centres), n)
    pred[:, :2] = centres[pick] + rng.normal(0, 6 if clustered else 200, size=(n, 2))
    pred[:, 2:4] = rng.uniform(8, 120, size=(n, 2))
    pred[:, 4:] = rng.uniform(0, 1, size=(n, fields - 4))
    # exact ties in scores, to pin down the (score desc, row asc) order
    pred[n // 3: n // 3 + 5, 4:] = 0.9
    return pred


@pytest.mark.parametrize("n,classes,obj,transposed", [(50, 3, True, False), (300, 5, True, False),
                                                      (200, 2, False, True), (600, 1, False, False)])
def test_nms_matches_brute_force(n, classes, obj, transposed):
    rng = np.random.default_rng(n + classes)
    pred = _random_pred(rng, n, classes, obj)
    spec = PostprocessSpec(score_threshold=0.3, iou_threshold=0.5, max_detections=40, max_candidates=250,
                           has_objectness=obj, transposed=transposed)
    arg = pred.T.copy() if transposed else pred
    det = yolo_postprocess(arg, spec)
    rows, scores, classes_ = _brute_force(arg, spec)
    assert det.rows.tolist() == rows
    assert det.scores.tolist() == [float(s) for s in scores]
    assert det.classes.tolist() == classes_
    assert len(det) <= spec.max_detections


def test_nms_is_class_aware_and_caps():
    # two identical boxes of different classes both survive; same class: one survives
    pred = np.array([[100, 100, 50, 50, 0.9, 0.1],
                     [100, 100, 50, 50, 0.1, 0.8],
                     [101, 100, 50, 50, 0.85, 0.1],
                     [400, 400, 30, 30, 0.7, 0.0]], dtype=np.float32)
    spec = PostprocessSpec(score_threshold=0.5, iou_threshold=0.5, has_objectness=False)
    det = yolo_postprocess(pred, spec)
    assert det.rows.tolist() == [0, 1, 3]
    assert det.classes.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(det.boxes[0], [75, 75, 125, 125])
    capped = yolo_postprocess(pred, PostprocessSpec(score_threshold=0.5, has_objectness=False, max_detections=2))
    assert capped.rows.tolist() == [0, 1]
    none = yolo_postprocess(pred, PostprocessSpec(score_threshold=0.99, has_objectness=False))
    assert len(none) == 0 and none.boxes.shape == (0, 4)


def test_box_iou_values():
    a = np.array([0, 0, 10, 10], np.float32)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30], [3, 3, 3, 3]], np.float32)
    np.testing.assert_allclose(box_iou(a, b), [1.0, 50 / 150, 0.0, 0.0], rtol=1e-6)


def test_postprocess_spec_errors():
    with pytest.raises(InputError):
        PostprocessSpec(iou_threshold=1.5)
    with pytest.raises(InputError, match="too few"):
        yolo_postprocess(np.zeros((10, 5), np.float32), PostprocessSpec(has_objectness=True))
    with pytest.raises(InputError, match="expected a prediction"):
        yolo_postprocess(np.zeros((2, 10, 9), np.float32))


def test_scale_boxes_undoes_letterbox():
    spec = PreprocessSpec(size=(640, 640), resize="letterbox")
    scale, nh, nw, top, left = spec.letterbox_geometry(1080, 1920)
    src = np.array([[100.0, 200.0, 500.0, 700.0]], np.float32)
    model_px = np.array([[100 * nw / 1920 + left, 200 * nh / 1080 + top, 500 * nw / 1920 + left,
                          700 * nh / 1080 + top]], np.float32)
    np.testing.assert_allclose(scale_boxes(model_px, spec, (1080, 1920)), src, atol=1e-3)
    stretch = PreprocessSpec(size=(320, 480))
    np.testing.assert_allclose(scale_boxes(np.array([[48, 32, 96, 64]], np.float32), stretch, (640, 960)),
                               [[96, 64, 192, 128]])


# -- preprocessing: the kernel's arithmetic vs the references ---------------------------------------------
SPECS = [dict(resize=r, layout=l, dtype=d, input_order=o)
         for r, l, d, o in itertools.product(("resize", "letterbox"), ("NCHW", "NHWC"), ("float32", "float16"),
                                             ("BGR", "RGB"))]


@pytest.mark.parametrize("kw", SPECS, ids=lambda kw: "-".join(kw.values()))
@pytest.mark.parametrize("src", [(37, 53), (300, 200), (64, 64)])
def test_kernel_emulation_matches_reference(kw, src):
    rng = np.random.default_rng(sum(src))
    img = rng.integers(0, 256, size=src + (3,), dtype=np.uint8)
    spec = PreprocessSpec(size=(48, 80), mean=(123.7, 116.3, 103.5), std=(58.4, 57.1, 57.4), pad_value=114, **kw)
    got, want = emulate(img, spec), preprocess_reference(img, spec)
    assert got.shape == want.shape == spec.output_shape() and got.dtype == want.dtype
    tol = 2e-3 if spec.dtype == "float16" else 1e-4
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=tol, rtol=tol)


def test_launch_params_letterbox_geometry():
    spec = PreprocessSpec(size=(640, 640), resize="letterbox")
    p = launch_params(spec, 1080, 1920)
    _, nh, nw, top, left = spec.letterbox_geometry(1080, 1920)
    assert (p["region_h"], p["region_w"], p["top"], p["left"]) == (nh, nw, top, left) == (360, 640, 140, 0)
    assert p["scale_y"] == np.float32(1080 / 360) and p["out_nchw"] == 1 and p["swap_rb"] == 1
    with pytest.raises(InputError, match="float32 or float16"):
        launch_params(PreprocessSpec(size=(8, 8), dtype="uint8"), 4, 4)


@pytest.mark.parametrize("src,dst", [((37, 53), (64, 48)), ((480, 640), (120, 160)), ((100, 100), (33, 77)),
                                     ((1080, 1920), (640, 640)), ((5, 7), (5, 7))])
def test_bilinear_matches_opencv_inter_linear(src, dst):
    """Half-pixel centres and edge clamping as cv2.INTER_LINEAR (float input: no fixed point)."""
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(1)
    img = rng.uniform(0, 255, size=src + (3,)).astype(np.float32)
    ours = _resize_bilinear(img, *dst)
    theirs = cv2.resize(img, (dst[1], dst[0]), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_allclose(ours, theirs, atol=2e-3)
