"""The pipeline glue steps (sdk.kernels.pipelines.glue), each against a reference: the corpus
tasks' decoders on real model outputs, the CPU NMS reference, NumPy references of the OpenCV paths,
and hand-computed cases. GPU variants run where a GPU is (the `cuda` fixture skips elsewhere)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sdk import corpus
from sdk.errors import ConfigError, InputError, UnknownNameError
from sdk.kernels.pipelines import GLUE, Frame, build_step
from sdk.kernels.pipelines import glue as g
from sdk.preprocess import PreprocessSpec

cv2 = pytest.importorskip("cv2")   # a dependency of edgesdk[vision], which the test install has


def _fetched(*names):
    missing = [n for n in names if not corpus.is_fetched(n)]
    if missing or not corpus.is_fetched():
        corpus.fetch(list(names))
    return [corpus.path(n) for n in names]


def _session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


# -- the registry ----------------------------------------------------------------------------------------
def test_registry_names_and_unknown_step():
    assert set(GLUE.names()) >= {"preprocess", "db_boxes", "yolo_boxes", "picodet_boxes", "crop_boxes",
                                 "crop_quads", "resize_pad", "crop_resize", "batch", "ctc_greedy", "topk"}
    with pytest.raises(UnknownNameError) as e:
        build_step("ctc_gredy")
    assert "ctc_greedy" in str(e.value) + str(getattr(e.value, "hint", ""))
    with pytest.raises(ConfigError, match="unknown option"):
        build_step("db_boxes", {"treshold": 0.3})


def test_user_glue_file_function(tmp_path):
    f = tmp_path / "myglue.py"
    f.write_text("def upper(frame, suffix=''):\n    for it in frame.items:\n        it['text'] = it['text'].upper() + suffix\n")
    step = build_step(f"{f}:upper", {"suffix": "!"})
    fr = Frame("x.png", np.zeros((4, 4, 3), np.uint8))
    fr.items = [{"text": "ab"}]
    step(fr)
    assert fr.items == [{"text": "AB!"}]
    with pytest.raises(InputError, match="no function 'nope'"):
        build_step(f"{f}:nope")
    bad = tmp_path / "bad.py"
    bad.write_text("import not_a_module_anywhere\n")
    with pytest.raises(InputError, match="failed to import"):
        build_step(f"{bad}:f")


# -- db_boxes: rectangles drawn into a probability map, against the analytic unclip --------------------------
def test_db_boxes_finds_drawn_rectangles_and_unclips_them():
    prob = np.zeros((200, 300), np.float32)
    prob[20:40, 30:130] = 0.9                       # 100 x 20 axis-aligned
    rect = ((200.0, 130.0), (80.0, 16.0), 30.0)      # rotated 30 degrees
    cv2.fillPoly(prob, [np.round(cv2.boxPoints(rect)).astype(np.int32)], 0.8)
    step = build_step("db_boxes", {"use_dilation": False, "unclip_ratio": 1.5})
    quads, scores = step.boxes_in_input(prob[None, None])
    assert len(quads) == 2 and (scores > 0.75).all()
    got = sorted(sorted((float(np.linalg.norm(q[0] - q[1])), float(np.linalg.norm(q[1] - q[2])))) for q in quads)
    # reference: the minimum-area rectangle of each region's pixel centres, grown by d = A * r / L on each side
    want = []
    for region in (prob[20:40, 30:130] > 0, None):
        if region is None:
            mask = (prob > 0.3).astype(np.uint8)
            mask[20:40, 30:130] = 0
            pts = np.argwhere(mask)[:, ::-1].astype(np.float32)
        else:
            pts = (np.argwhere(region)[:, ::-1] + [30, 20]).astype(np.float32)
        (_c, (w, h), _a) = cv2.minAreaRect(pts)
        d = w * h * 1.5 / (2 * (w + h))
        want.append(sorted((w + 2 * d, h + 2 * d)))
    assert np.allclose(got, sorted(want), atol=1.0)


def test_unclip_rect_and_order_quad():
    (c, (w, h), a) = g.unclip_rect(((5.0, 5.0), (10.0, 4.0), 0.0), 2.0)
    d = 10 * 4 * 2.0 / 28
    assert (w, h) == pytest.approx((10 + 2 * d, 4 + 2 * d)) and c == (5.0, 5.0) and a == 0.0
    q = g.order_quad(np.array([[10, 10], [0, 0], [0, 10], [10, 0]], np.float32))
    assert q.tolist() == [[0, 0], [10, 0], [10, 10], [0, 10]]


def test_db_boxes_on_the_real_detector_against_connected_components():
    (det,) = _fetched("ppocr-v4-det")
    feed = corpus.sample_inputs("ppocr-v4-det", 1)[0]
    prob = _session(det).run(None, feed)[0]
    # every region kept, not grown: the quads' bounds are the 8-connected regions' boxes
    quads, _ = build_step("db_boxes", {"unclip_ratio": 0.0, "use_dilation": False, "box_thresh": 0.0,
                                       "min_size": 0}).boxes_in_input(prob)
    count, _, stats, _ = cv2.connectedComponentsWithStats((prob[0, 0] > 0.3).astype(np.uint8), connectivity=8)
    ref = np.asarray([[x, y, x + w, y + h] for x, y, w, h in stats[1:count, :4]], np.float32)
    ref = ref[(ref[:, 2] - ref[:, 0] > 2) & (ref[:, 3] - ref[:, 1] > 2)]   # specks have no 2-pixel contour
    mine = np.concatenate([quads.min(1), quads.max(1)], 1)
    assert len(ref) >= 3 and len(mine) == len(ref)
    from sdk.kernels.pipelines.metrics import match_items
    pairs = match_items([{"box": list(b)} for b in ref], [{"box": list(b)} for b in mine], iou=0.7)
    assert len(pairs) == len(ref)


def test_the_corpus_text_detector_metric_reads_the_pipelines_boxes():
    """The corpus's db-text-detect task scores the boxes the db_boxes step gives (rapidocr's
    post-processing): a speck of a few pixels in one map is no box, a line whose mean probability
    falls just under 0.5 is still found (ranked by score), a line lost is a box missed."""
    from sdk.corpus.tasks import TASKS

    (det,) = _fetched("ppocr-v4-det")
    prob = _session(det).run(None, corpus.sample_inputs("ppocr-v4-det", 1)[0])[0]
    task = TASKS["db-text-detect"]
    quads, scores = build_step("db_boxes").boxes_in_input(prob)
    boxes = task.decode([prob])
    assert len(boxes) == len(quads) >= 3
    assert np.allclose(boxes[:, :4], np.concatenate([quads.min(1), quads.max(1)], 1)) and np.allclose(boxes[:, 4], scores)
    specks = prob.copy()
    specks[0, 0, :2, :2] = 0.9                      # a 2 x 2 speck in a corner FP32 leaves empty
    assert prob[0, 0, :6, :6].max() < 0.3
    assert task.agreement([[prob]], [[specks]]) == 1.0
    k = int(np.argmax(scores))
    x0, y0, x1, y1 = (int(v) for v in boxes[k, :4])
    dim = prob.copy()
    region = dim[0, 0, y0:y1 + 1, x0:x1 + 1]
    region[region > 0.3] = 0.45                     # one line's probability just under the box threshold:
    assert task.agreement([[prob]], [[dim]]) == 1.0  # still found, ranked last, nothing false above it
    region[:] = 0.0                                 # the line lost: a box missed
    assert task.agreement([[prob]], [[dim]]) < 1.0 - 0.5 / len(boxes)


# -- crops ---------------------------------------------------------------------------------------------------
def test_crop_quads_opencv_matches_the_numpy_reference():
    img = corpus.images.photos_bgr()[0] if corpus.is_fetched() else None
    if img is None:
        corpus.fetch([])
        img = corpus.images.photos_bgr()[0]
    quad = g.order_quad(cv2.boxPoints(((200.0, 150.0), (120.0, 40.0), 20.0)))
    step = build_step("crop_quads")
    got = step.crop(img, quad)
    ref = g.perspective_crop_reference(img, quad)
    assert got.shape == ref.shape
    assert np.abs(got.astype(int) - ref.astype(int)).mean() < 2.0
    # a tall quad is turned 90 degrees (vertical text)
    tall = np.array([[10, 10], [30, 10], [30, 110], [10, 110]], np.float32)
    assert step.crop(img, tall).shape[:2] == (20, 100)


def test_crop_boxes_expands_and_drops_tiny_boxes():
    img = np.arange(100 * 100 * 3, dtype=np.uint8).reshape(100, 100, 3)
    fr = Frame("a", img)
    fr.boxes = np.array([[10, 10, 30, 20], [50, 50, 50.5, 50.5]], np.float32)
    fr.scores = np.array([0.9, 0.8], np.float32)
    fr.classes = np.array([1, 2], np.int32)
    fr.set_items_from_boxes(["a", "b", "c"])
    build_step("crop_boxes", {"expand": 0.1, "min_size": 3})(fr)
    assert len(fr.crops) == 1 and fr.crops[0].shape == (12, 24, 3) and fr.items[0]["class_label"] == "b"
    assert np.array_equal(fr.crops[0], img[9:21, 8:32])


def test_resize_pad_against_a_numpy_reference():
    crop = np.random.default_rng(0).integers(0, 256, (30, 90, 3), dtype=np.uint8)
    step = build_step("resize_pad", {"height": 48, "width": 320, "mean": 127.5, "std": 127.5})
    out = step.one(crop)
    assert out.shape == (1, 3, 48, 320) and out.dtype == np.float32
    tw = math.ceil(48 * 90 / 30)
    ref = (g.resize_bilinear(crop, 48, tw)[..., ::-1] - 127.5) / 127.5
    assert np.abs(out[0].transpose(1, 2, 0)[:, :tw] - ref).max() < 0.05   # OpenCV vs NumPy rounding
    assert (out[0, :, :, tw:] == 0).all()
    wide = build_step("resize_pad", {"height": 48, "width": 320, "grow": True}).one(
        np.zeros((20, 400, 3), np.uint8))
    assert wide.shape == (1, 3, 48, 960)
    centred = build_step("resize_pad", {"height": 10, "width": 40, "align": "center", "pad_value": -1}).one(
        np.full((10, 10, 3), 255, np.uint8))
    assert (centred[0, 0, :, :15] == -1).all() and (centred[0, 0, :, 15:25] == 1).all()


def test_batch_chunks_and_pads_to_the_widest():
    fr = Frame("a", np.zeros((2, 2, 3), np.uint8))
    fr.crops = [np.ones((1, 3, 4, w), np.float32) for w in (5, 7, 6, 5, 5)]
    build_step("batch", {"max_batch": 2, "pad_value": -1})(fr)
    assert [b.shape for b in fr.feed] == [(2, 3, 4, 7), (2, 3, 4, 6), (1, 3, 4, 5)]
    assert (fr.feed[0][0, :, :, 5:] == -1).all() and (fr.feed[0][1] == 1).all()
    fr.crops = []
    build_step("batch")(fr)
    assert fr.feed == []


# -- decoders ------------------------------------------------------------------------------------------------
def test_ctc_greedy_by_hand_and_against_the_corpus_decoder():
    step = build_step("ctc_greedy", {"characters": list("abc")})
    p = np.zeros((1, 7, 5), np.float32)
    for t, c in enumerate([1, 1, 0, 1, 2, 2, 4]):       # a a _ a b b <space>
        p[0, t, c] = 1.0
    assert step.decode(p) == [("aab ", 1.0)]
    from sdk.corpus.tasks import TASKS

    (rec,) = _fetched("ppocr-v4-rec")
    sess = _session(rec)
    chars = sess.get_modelmeta().custom_metadata_map["character"].splitlines()
    real = build_step("ctc_greedy", {"characters": chars})
    for feed in corpus.sample_inputs("ppocr-v4-rec", 3):
        out = sess.run(None, feed)[0]
        ref_idx = TASKS["ppocr-recognize"].decode([out])
        text, score = real.decode(out)[0]
        assert text == "".join(real.table[i] for i in ref_idx) and 0 < score <= 1


def test_topk_against_argsort():
    s = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    step = build_step("topk", {"k": 2, "labels": ["0", "90", "180", "270"], "softmax": True})
    tops = step.top(s)
    order = np.argsort(-s, 1)[:, :2]
    assert [[c for c, _ in t] for t in tops] == order.tolist()
    e = np.exp(s - s.max(1, keepdims=True))
    assert tops[0][0][1] == pytest.approx(float((e / e.sum(1, keepdims=True))[0, order[0, 0]]), rel=1e-5)
    fr = Frame("a", np.zeros((2, 2, 3), np.uint8))
    fr.outputs = [s]
    step(fr)
    assert len(fr.items) == 6 and fr.items[0]["label"] == ["0", "90", "180", "270"][order[0, 0]]


# -- detectors' boxes ----------------------------------------------------------------------------------------
def test_yolo_boxes_equal_the_cpu_reference_and_map_back_to_the_source():
    from sdk.kernels.reference import PostprocessSpec, scale_boxes, synthetic_yolo_output, yolo_postprocess

    pred = synthetic_yolo_output(2000, 3, True, seed=3)[None]
    spec = PreprocessSpec(size=(640, 640), resize="letterbox")
    fr = Frame("a", np.zeros((480, 720, 3), np.uint8))
    fr.geometry = {"spec": spec, "src_hw": (480, 720)}
    fr.outputs = [pred]
    build_step("yolo_boxes", {"objectness": True, "transposed": False, "device": "cpu"})(fr)
    ref = yolo_postprocess(pred, PostprocessSpec(has_objectness=True))
    assert np.array_equal(fr.classes, ref.classes) and np.array_equal(fr.scores, ref.scores)
    assert np.allclose(fr.boxes, scale_boxes(ref.boxes, spec, (480, 720)))
    assert len(fr.items) == len(ref)


def test_picodet_boxes_equal_the_corpus_decoder_on_the_real_layout_model():
    from sdk.corpus.tasks import TASKS

    (lay,) = _fetched("layout-cdla")
    feed = corpus.sample_inputs("layout-cdla", 3)[2]
    outs = _session(lay).run(None, feed)
    ref = TASKS["picodet-detect"].decode(outs)              # [x1, y1, x2, y2, score, class], NMS'd
    fr = Frame("a", np.zeros((800, 608, 3), np.uint8))
    fr.geometry = {"spec": PreprocessSpec(size=(800, 608)), "src_hw": (800, 608)}
    fr.outputs = outs
    build_step("picodet_boxes", {"device": "cpu"})(fr)
    assert len(ref) >= 3 and len(fr.boxes) == len(ref)
    order = np.argsort(-ref[:, 4], kind="stable")
    assert np.allclose(fr.boxes, np.clip(ref[order, :4], 0, [608, 800, 608, 800]), atol=1e-3)
    assert fr.classes.tolist() == ref[order, 5].astype(int).tolist()


# -- on a GPU: the CUDA steps equal their CPU references --------------------------------------------------------
def test_gpu_preprocess_and_nms_steps_equal_the_cpu_ones(cuda):
    from sdk.kernels.reference import synthetic_yolo_output

    img = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    opts = {"size": [320, 320], "resize": "letterbox"}
    cpu, gpu = build_step("preprocess", dict(opts, device="cpu")), build_step("preprocess", dict(opts, device="cuda"))
    assert gpu.device.startswith("cuda")
    a, b = Frame("a", img), Frame("a", img)
    cpu(a)
    gpu(b)
    assert np.abs(a.feed - b.feed).max() < 2.0 / 255
    pred = synthetic_yolo_output(4000, 5, True, seed=1)[None]
    c, d = Frame("a", img), Frame("a", img)
    c.outputs = d.outputs = [pred]
    build_step("yolo_boxes", {"device": "cpu", "objectness": True, "transposed": False})(c)
    step = build_step("yolo_boxes", {"device": "cuda", "objectness": True, "transposed": False})
    step(d)
    assert step.device.startswith("cuda")
    assert np.array_equal(c.classes, d.classes) and np.allclose(c.boxes, d.boxes)
    gpu.close()
    step.close()
