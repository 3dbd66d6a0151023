"""The NumPy twins of db_boxes' OpenCV calls (sdk.kernels.pipelines.contours), each against OpenCV on
random bitmaps and drawn rotated rectangles, and the db_boxes step with the NumPy path against the
OpenCV path on the real PP-OCRv4 detector's probability map."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from sdk import corpus
from sdk.kernels.pipelines import build_step
from sdk.kernels.pipelines import contours as C
from sdk.kernels.pipelines import glue as g

cv2 = pytest.importorskip("cv2")   # the reference; a dependency of edgesdk[vision], which the test install has


def _random_bitmaps(seed, n, max_side=48):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        h, w = int(rng.integers(1, max_side)), int(rng.integers(1, max_side))
        yield (rng.random((h, w)) < rng.uniform(0.2, 0.8)).astype(np.uint8)


def _drawn_rectangles(seed, n, size=(120, 160)):
    """A bitmap with ``n`` filled rotated rectangles (some overlapping) and the rectangles."""
    rng = np.random.default_rng(seed)
    img = np.zeros(size, np.uint8)
    rects = []
    for _ in range(n):
        rect = ((float(rng.uniform(20, size[1] - 20)), float(rng.uniform(20, size[0] - 20))),
                (float(rng.uniform(6, 50)), float(rng.uniform(4, 16))), float(rng.uniform(-90, 90)))
        cv2.fillPoly(img, [np.round(cv2.boxPoints(rect)).astype(np.int32)], 1)
        rects.append(rect)
    return img, rects


def _hull_set(points):
    return set(map(tuple, cv2.convexHull(np.asarray(points, np.int32).reshape(-1, 1, 2)).reshape(-1, 2).tolist()))


def test_dilate2x2_equals_opencv():
    for bitmap in _random_bitmaps(0, 60):
        assert np.array_equal(C.dilate2x2(bitmap), cv2.dilate(bitmap, np.ones((2, 2), np.uint8)))


def test_region_points_are_opencvs_contours_in_order_with_the_same_hulls():
    cases = list(_random_bitmaps(1, 80)) + [_drawn_rectangles(s, 6)[0] for s in range(6)]
    ring = np.zeros((40, 50), np.uint8)
    ring[5:35, 5:45] = 1
    ring[12:28, 15:30] = 0                       # a hole, which RETR_LIST also returns
    ring[0:3, 0:50] = 1                          # touches the image's edge
    cases.append(ring)
    holes = 0
    for bitmap in cases:
        theirs, hierarchy = cv2.findContours(bitmap * 255, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
        listed, _ = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        mine = C.region_points(bitmap)
        assert len(mine) == len(listed) == len(theirs)
        for a, b in zip(listed, mine):           # same order: the hull of the k-th is the same
            assert _hull_set(a) == set(map(tuple, C.convex_hull(b).astype(int).tolist()))
        if hierarchy is not None:
            holes += int((hierarchy[0][:, 3] >= 0).sum())
    assert holes > 20                            # the cases do exercise holes


def test_convex_hull_equals_opencvs():
    rng = np.random.default_rng(2)
    for _ in range(100):
        pts = rng.integers(0, 60, (int(rng.integers(3, 60)), 2))
        assert _hull_set(pts) == set(map(tuple, C.convex_hull(pts).astype(int).tolist()))


def test_min_area_rect_against_opencv():
    rng = np.random.default_rng(3)
    for _ in range(200):                          # random clouds: the same (minimum) area
        pts = rng.integers(0, 80, (int(rng.integers(1, 40)), 2)).astype(np.int32)
        (_, (tw, th), _), (_, (mw, mh), ma) = cv2.minAreaRect(pts), C.min_area_rect(pts)
        assert mw * mh == pytest.approx(tw * th, rel=1e-4, abs=1e-3)
        assert -90.0 <= ma < 0.0
    for seed in range(40):                        # a drawn rotated rectangle's pixels: the same rectangle
        img, _ = _drawn_rectangles(100 + seed, 1)
        pts = np.argwhere(img)[:, ::-1].astype(np.int32)
        theirs, mine = cv2.minAreaRect(pts), C.min_area_rect(pts)
        assert np.abs(g.order_quad(cv2.boxPoints(theirs)) - g.order_quad(C.box_points(mine))).max() < 1e-3
        assert min(mine[1]) == pytest.approx(min(theirs[1]), abs=1e-3)
    # blobs (blurred noise above a threshold): the same rectangle, but where two of equal area fit,
    # OpenCV's float32 calipers may take the other one (measured: 1 of these 474 contours)
    same = ties = 0
    for _ in range(20):
        blur = cv2.GaussianBlur(rng.random((120, 160)).astype(np.float32), (0, 0), 3)
        bitmap = (blur > np.quantile(blur, 0.5)).astype(np.uint8)
        for c, p in zip(cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)[0],
                        C.region_points(bitmap)):
            theirs, mine = cv2.minAreaRect(c), C.min_area_rect(p)
            if np.abs(g.order_quad(cv2.boxPoints(theirs)) - g.order_quad(C.box_points(mine))).max() < 1e-2:
                same += 1
            else:
                assert mine[1][0] * mine[1][1] == pytest.approx(theirs[1][0] * theirs[1][1], rel=1e-5)
                ties += 1
    assert same >= 300 and ties <= 0.01 * same
    # degenerate: one point, a segment
    assert C.min_area_rect(np.array([[3, 4]])) == ((3.0, 4.0), (0.0, 0.0), -90.0)
    (c, (w, h), _) = C.min_area_rect(np.array([[0, 0], [4, 4], [2, 2]]))
    assert c == pytest.approx((2.0, 2.0)) and sorted((w, h)) == pytest.approx([0.0, 32 ** 0.5])


def test_box_points_equals_opencv():
    rng = np.random.default_rng(4)
    for _ in range(100):
        rect = ((float(rng.uniform(0, 100)), float(rng.uniform(0, 100))),
                (float(rng.uniform(0, 50)), float(rng.uniform(0, 50))), float(rng.uniform(-90, 0)))
        assert np.abs(C.box_points(rect) - cv2.boxPoints(rect)).max() < 1e-3


def test_fill_quad_mask_equals_opencv_fillpoly():
    rng = np.random.default_rng(5)
    for _ in range(400):
        rect = ((float(rng.uniform(5, 35)), float(rng.uniform(5, 35))),
                (float(rng.uniform(0, 30)), float(rng.uniform(0, 15))), float(rng.uniform(-90, 0)))
        quad = g.order_quad(cv2.boxPoints(rect))
        x0, y0 = np.floor(quad.min(0)).astype(int)
        pts = (quad - np.array([x0, y0], np.float32)).astype(np.int32)     # as db_boxes makes them
        shape = (int(np.ceil(quad[:, 1].max())) - y0 + 1, int(np.ceil(quad[:, 0].max())) - x0 + 1)
        theirs = np.zeros(shape, np.uint8)
        cv2.fillPoly(theirs, [pts], 1)
        assert np.array_equal(C.fill_quad_mask(shape, pts), theirs), pts.tolist()
    # quads near a 20 x 20 map's edge, the box clipped to the map as db_boxes does (OpenCV clips the edges)
    for _ in range(400):
        rect = ((float(rng.uniform(-5, 25)), float(rng.uniform(-5, 25))),
                (float(rng.uniform(2, 30)), float(rng.uniform(2, 15))), float(rng.uniform(-90, 0)))
        quad = g.order_quad(cv2.boxPoints(rect))
        x0, x1 = (int(np.clip(f(quad[:, 0]), 0, 19)) for f in (lambda v: np.floor(v.min()), lambda v: np.ceil(v.max())))
        y0, y1 = (int(np.clip(f(quad[:, 1]), 0, 19)) for f in (lambda v: np.floor(v.min()), lambda v: np.ceil(v.max())))
        pts = (quad - np.array([x0, y0], np.float32)).astype(np.int32)
        theirs = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
        cv2.fillPoly(theirs, [pts], 1)
        assert np.array_equal(C.fill_quad_mask(theirs.shape, pts), theirs), pts.tolist()
    # a quad partly outside the mask, and degenerate ones
    for pts in ([[-3, 2], [6, -2], [9, 5], [0, 9]], [[2, 2], [2, 2], [2, 2], [2, 2]], [[0, 0], [7, 3], [7, 3], [0, 0]]):
        theirs = np.zeros((8, 8), np.uint8)
        cv2.fillPoly(theirs, [np.array(pts, np.int32)], 1)
        assert np.array_equal(C.fill_quad_mask((8, 8), np.array(pts, np.int32)), theirs), pts


# -- the db_boxes step: NumPy path vs OpenCV path ---------------------------------------------------------------
def _numpy_step(monkeypatch, options):
    with monkeypatch.context() as m:
        m.setattr(g, "_cv2", lambda: None)
        step = build_step("db_boxes", options)
    assert step.device == "cpu (NumPy)"
    return step


def _real_probability_map():
    import onnxruntime as ort

    if not corpus.is_fetched("ppocr-v4-det") or not corpus.is_fetched():
        corpus.fetch(["ppocr-v4-det"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(corpus.path("ppocr-v4-det")), so, providers=["CPUExecutionProvider"])
    return sess.run(None, corpus.sample_inputs("ppocr-v4-det", 1)[0])[0]


def _assert_same_boxes(a, b, corner_px=1.5, score=0.01):
    (qa, sa), (qb, sb) = a, b
    assert len(qa) == len(qb)
    for q, s in zip(qa, sa):                      # each OpenCV quad has a NumPy quad at its place
        k = int(np.argmin(np.abs(qb - q).max((1, 2))))
        assert np.abs(qb[k] - q).max() <= corner_px and abs(float(sb[k]) - float(s)) <= score


@pytest.mark.parametrize("options", [{}, {"use_dilation": False},
                                     {"unclip_ratio": 0.0, "use_dilation": False, "box_thresh": 0.0, "min_size": 0}])
def test_db_boxes_numpy_path_matches_opencv_on_the_real_detector(monkeypatch, options):
    prob = _real_probability_map()
    with_cv2 = build_step("db_boxes", options)
    assert with_cv2.device == "cpu (OpenCV contours + NumPy)"
    theirs = with_cv2.boxes_in_input(prob)
    mine = _numpy_step(monkeypatch, options).boxes_in_input(prob)
    assert len(theirs[0]) >= 3
    _assert_same_boxes(theirs, mine)


def test_db_boxes_numpy_path_matches_opencv_on_drawn_rectangles(monkeypatch):
    rng = np.random.default_rng(6)
    for seed in range(5):
        img, _ = _drawn_rectangles(200 + seed, 5, size=(240, 320))
        prob = np.clip(img * 0.85 + rng.normal(0, 0.05, img.shape), 0, 1).astype(np.float32)
        theirs = build_step("db_boxes").boxes_in_input(prob[None, None])
        mine = _numpy_step(monkeypatch, {}).boxes_in_input(prob[None, None])
        assert len(theirs[0]) >= 1
        _assert_same_boxes(theirs, mine)


def test_db_boxes_runs_with_opencv_unimportable(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)   # `import cv2` raises ImportError, as on a bare board
    step = build_step("db_boxes", {"use_dilation": False, "unclip_ratio": 1.5})
    assert step.device == "cpu (NumPy)"
    prob = np.zeros((200, 300), np.float32)
    prob[20:40, 30:130] = 0.9                        # 100 x 20 pixels: centres span 99 x 19
    quads, scores = step.boxes_in_input(prob[None, None])
    assert len(quads) == 1 and scores[0] == pytest.approx(0.9, abs=1e-6)
    w, h = 99.0, 19.0
    d = w * h * 1.5 / (2 * (w + h))
    got = sorted((float(np.linalg.norm(quads[0][0] - quads[0][1])), float(np.linalg.norm(quads[0][1] - quads[0][2]))))
    assert got == pytest.approx(sorted((w + 2 * d, h + 2 * d)), abs=1e-3)
