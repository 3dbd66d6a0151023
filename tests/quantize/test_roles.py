"""Output roles (issue 21, item 2): recognised from shape, values and graph hints; each judged by what
a task reads from it. Arrays only: the roles never read a model file."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.errors import InputError
from sdk.quantize.graph import output_hints
from sdk.quantize.roles import get_role, infer_roles, parse_output_roles


def _yolo(rng, n_boxes=6, anchors=400, classes=3, noise=0.0):
    """[1, 4 + C, A]: a few confident anchors at pixel boxes, the rest low scores."""
    pred = np.zeros((1, 4 + classes, anchors), np.float32)
    pred[0, 0] = rng.uniform(20, 300, anchors)
    pred[0, 1] = rng.uniform(20, 300, anchors)
    pred[0, 2:4] = rng.uniform(10, 40, (2, anchors))
    pred[0, 4:] = rng.uniform(0, 0.05, (classes, anchors))
    hot = rng.choice(anchors, n_boxes, replace=False)
    pred[0, 4 + rng.integers(classes, size=n_boxes), hot] = rng.uniform(0.5, 0.9, n_boxes)
    return pred


def test_roles_recognised_from_shapes_and_values():
    rng = np.random.default_rng(0)
    ref = [{"yolo": _yolo(rng), "yolo_t": _yolo(rng)[0].T[None].copy(),
            "raw": np.concatenate([rng.normal(0, 1, (1, 500, 4)), rng.uniform(0, 1, (1, 500, 2))], 2).astype(np.float32),
            "heads": rng.uniform(0, 0.3, (1, 700, 10)).astype(np.float32),
            "mask": rng.uniform(0, 1, (1, 1, 32, 32)).astype(np.float32),
            "logits": rng.normal(0, 3, (1, 10)).astype(np.float32),
            "emb": (lambda e: e / np.linalg.norm(e, axis=1, keepdims=True))(rng.normal(0, 1, (2, 64))).astype(np.float32),
            "ctc": rng.normal(0, 3, (20, 1, 50)).astype(np.float32),
            "feat": rng.normal(0, 1, (1, 16, 8, 8)).astype(np.float32),
            "probs": (lambda e: e / e.sum(1, keepdims=True))(rng.uniform(0, 1, (1, 10))).astype(np.float32),
            # a recognizer's softmax per position, more classes than positions (PP-OCRv4: [1, 40, 6625])
            "softmax_seq": (lambda e: e / e.sum(2, keepdims=True))(rng.uniform(0, 1, (1, 12, 400))).astype(np.float32)}
           for _ in range(3)]
    roles = infer_roles(list(ref[0]), ref)
    got = {k: r.name for k, r in roles.items()}
    assert got == {"yolo": "detections", "yolo_t": "detections", "raw": "detections", "heads": "cosine",
                   "mask": "mask", "logits": "values", "emb": "embedding", "ctc": "classes", "feat": "cosine",
                   "probs": "classes", "softmax_seq": "classes"}
    assert roles["yolo"].params == {"layout": "channels", "boxes": "xywh"}
    assert roles["yolo_t"].params["layout"] == "anchors"
    assert roles["raw"].params["boxes"] == "anchor"        # log sizes, grid offsets: each anchor its own box
    over = infer_roles(list(ref[0]), ref, overrides={"feat": "embedding", "yolo": "cosine", "heads": "scores"})
    assert over["feat"].name == "embedding" and over["yolo"].name == "cosine" and over["heads"].name == "scores"
    with pytest.raises(InputError, match="names no output"):
        infer_roles(list(ref[0]), ref, overrides={"nope": "mask"})


def test_a_yolox_head_before_its_decode_is_read_as_anchors_not_pixel_boxes():
    """ddddocr-det's raw head: grid offsets (-1.1..2.2) and log sizes, 99.7% of them >= 0. Read as
    pixel boxes most were no box, and FP32 scored against itself mAP 0.84: the default budget then
    failed with every layer in float."""
    rng = np.random.default_rng(3)
    ref = []
    for _ in range(3):
        pred = np.zeros((1, 3549, 6), np.float32)
        pred[0, :, :2] = rng.uniform(-1.1, 2.2, (3549, 2))
        pred[0, :, 2:4] = rng.uniform(0.0, 2.0, (3549, 2))
        pred[0, :10, 2] = -0.3                                  # a few log sizes under 0
        pred[0, :, 4] = rng.uniform(0, 1e-3, 3549)
        pred[0, rng.choice(3549, 20, replace=False), 4] = rng.uniform(0.5, 1.0, 20)   # objects
        pred[0, :, 5] = rng.uniform(0.02, 0.9, 3549)
        ref.append({"output": pred})
    outs = [r["output"] for r in ref]
    role = infer_roles(["output"], ref)["output"]            # no input image to place the anchors on
    assert role.name == "detections" and role.params == {"layout": "anchors", "boxes": "anchor"}
    assert role.score(outs, outs) == 1.0
    # a 416 x 416 input: 52x52 + 26x26 + 13x13 = 3549 cells, one anchor each: decoded as YOLOX does
    role = infer_roles(["output"], ref, size=(416, 416))["output"]
    assert role.params == {"layout": "anchors", "boxes": "grid", "levels": [[52, 52, 8], [26, 26, 16], [13, 13, 32]]}
    assert role.score(outs, outs) == 1.0
    from sdk.corpus.tasks import YoloXDetect
    task = YoloXDetect()
    for o in outs:   # the corpus task's decoder is the role's (at the role's threshold)
        assert len(task.decode([o], conf=0.3)) >= 5
        np.testing.assert_allclose(role.detections([o], 0.3)[0], task.decode([o], conf=0.3), rtol=1e-5, atol=1e-4)
    # a confident anchor's box moved by a cell: one box of the decoded set lost, not an anchor of 3549
    hot = int(np.argmax(outs[0][0, :, 4] * outs[0][0, :, 5]))
    moved = [o.copy() for o in outs]
    moved[0][0, hot, 0] += 3.0
    assert role.score(outs, moved) < 1.0


@pytest.mark.parametrize("name", ["nudenet-320n", "ddddocr-det", "layout-cdla"])
def test_corpus_detectors_roles_score_fp32_against_itself_as_one(name):
    """The role read from FP32's outputs, on three seeds' samples, scores FP32 against itself 1.0:
    a role that does not is a misread (ddddocr-det's raw head read as pixel boxes: 0.84)."""
    from sdk import corpus
    from sdk.corpus.tasks import run_reference
    from sdk.quantize.roles import image_size

    src = str(corpus.fetch([name])[name])
    out_names = [o.name for o in onnx.load(src, load_external_data=False).graph.output]
    for seed in (0, 1, 2):
        feeds = corpus.sample_inputs(name, 6, seed=seed)
        ref = [dict(zip(out_names, o)) for o in run_reference(src, feeds)]
        roles = infer_roles(out_names, ref, size=image_size(feeds[0]))
        for out, role in roles.items():
            assert role.name in ("detections", "heads"), (out, role.name)
            outs = [[r[n] for n in role.outputs] for r in ref] if role.name == "heads" \
                else [r[out] for r in ref]
            assert role.score(outs, outs) == 1.0, (seed, out, role.name, role.params)
            if name == "ddddocr-det":
                assert role.params["boxes"] == "grid"


def test_detections_role_reads_boxes_where_cosine_does_not():
    """One box of six moved by its own width: the whole tensor's cosine barely moves (the box
    columns dominate it), the detection role's mAP drops by about a sixth."""
    rng = np.random.default_rng(1)
    ref = [_yolo(rng) for _ in range(4)]
    cand = [r.copy() for r in ref]
    hot = int(np.argmax(cand[0][0, 4:].max(0)))
    cand[0][0, 0, hot] += 2.0 * cand[0][0, 2, hot]
    role = get_role("detections", layout="channels", boxes="xywh")
    assert role.score(ref, ref) == 1.0
    moved = role.score(ref, cand)
    assert moved < 0.97 <= role.min_score
    cos = get_role("cosine").score(ref, cand)
    assert cos > 0.999  # what the old default budget read


def test_mask_log_embedding_and_classes_roles():
    rng = np.random.default_rng(2)
    m = rng.uniform(0, 1, (1, 1, 16, 16))
    flipped = m.copy()
    flipped[0, 0, :4] = 1 - flipped[0, 0, :4]            # a quarter of the pixels cross 0.5 the other way
    assert get_role("mask").score([m], [m]) == 1.0 and get_role("mask").score([m], [flipped]) < 0.9
    db = rng.uniform(-80, 0, (1, 64, 100))
    log = get_role("log", db_per_unit=1.0)
    assert log.score([db], [db + 0.3]) >= log.min_score > log.score([db], [db + 0.6])
    ln = get_role("log", db_per_unit=10 / math.log(10))    # natural log: 0.5 dB is 0.115 units
    assert ln.score([db], [db + 0.1]) >= 0 > ln.score([db], [db + 0.13])
    e = rng.normal(0, 1, (4, 32))
    assert get_role("embedding").score([e], [e + 0.5 * rng.normal(0, 1, e.shape)]) < 0.99
    logits = rng.normal(0, 1, (8, 5))
    assert get_role("classes").score([logits], [logits[:, ::-1]]) < 0.5


def _text_map(bridged: bool = False, edge: float = 0.0) -> np.ndarray:
    """A DB-style text map ``[1, 1, 40, 120]``: two text lines of 20 x 50 and 20 x 60 px, 6 px apart,
    joined by a 1-px bridge (``bridged``), their right edges grown by ``edge`` columns."""
    m = np.zeros((1, 1, 40, 120), np.float32)
    m[0, 0, 10:30, 2:52 + int(edge)] = 0.9
    m[0, 0, 10:30, 58:118] = 0.9
    if bridged:
        m[0, 0, 20, 52:58] = 0.9
    return m


def test_mask_role_reads_regions_as_a_text_detector_does():
    """Pooled IoU barely moves when two text lines merge (2 boxes become 1: region F1 0), and the
    role fails; lines that only grow a column keep their boxes and hold."""
    mask = get_role("mask", threshold=0.5, regions=True)
    ref = [_text_map(), _text_map()]
    merged = [_text_map(bridged=True), _text_map()]
    iou = (2 * 20 * 110) / (2 * 20 * 110 + 6)
    # 3 of 4 reference boxes matched (the merged box still overlaps the longer line at IoU 0.52), 3 found
    assert iou > 0.99 and mask.score(ref, merged) == pytest.approx(2 * 3 / 7) and 2 * 3 / 7 < mask.min_score
    assert mask.score(ref, [_text_map(edge=1), _text_map(edge=1)]) >= mask.min_score
    assert get_role("mask").score(ref, merged) > 0.99           # a segment's mask: IoU alone


def test_mask_bootstrap_resamples_per_sample_counts():
    """The mask role's interval resamples each sample's counts (pixels, regions matched), found once:
    the score of a resampling is the pooled score of those samples."""
    from sdk.corpus.tasks import box_f1
    from sdk.quantize.roles import _regions

    mask = get_role("mask", threshold=0.5, regions=True)
    ref = [_text_map(), _text_map(), _text_map(edge=1)]
    cand = [_text_map(bridged=True), _text_map(edge=1), _text_map()]
    n, score_of = mask.resampler(ref, cand)
    for pick in ([0, 1, 2], [0, 0, 2], [1, 2, 2]):
        r, c = [ref[i] for i in pick], [cand[i] for i in pick]
        a, b = np.array(r) > 0.5, np.array(c) > 0.5
        pooled = min((a & b).sum() / (a | b).sum(), box_f1(sum((_regions(x) for x in a), []),
                                                          sum((_regions(x) for x in b), [])))
        assert score_of(np.array(pick)) == pytest.approx(pooled) == mask.score(r, c)
    assert n == 3 and mask.interval(ref, ref) == (1.0, 1.0)


def test_a_map_of_text_lines_is_read_by_regions_a_segment_by_iou():
    """Role inference: many small regions per map (text lines) -> regions; one large segment with
    specks around it (a person) -> IoU only (their count means nothing to its reader)."""
    lines = np.zeros((1, 1, 200, 200), np.float32)
    for k in range(6):
        lines[0, 0, 10 + 30 * k:25 + 30 * k, 20:90] = 0.9
    person = np.zeros((1, 1, 200, 200), np.float32)
    person[0, 0, 40:200, 60:140] = 0.95
    person[0, 0, 5:7, 5:7] = person[0, 0, 10:12, 180:182] = person[0, 0, 20:23, 30:33] = 0.8   # specks
    for x, regions in ((lines, True), (person, False)):
        (role,) = infer_roles(["m"], [{"m": x}, {"m": x}]).values()
        assert role.name == "mask" and role.params["regions"] is regions


def test_region_boxes_are_opencvs_connected_components():
    cv2 = pytest.importorskip("cv2")   # opencv-python-headless: installed with the corpus extra by .ci/run
    from sdk.quantize.roles import region_boxes

    rng = np.random.default_rng(5)
    for _ in range(25):
        m = rng.random(tuple(int(v) for v in rng.integers(2, 60, 2))) < rng.uniform(0.2, 0.6)
        count, _, stats, _ = cv2.connectedComponentsWithStats(m.astype(np.uint8), 8)
        want = sorted((x, y, x + w, y + h) for x, y, w, h in stats[1:, :4].tolist())
        assert sorted(map(tuple, region_boxes(m).tolist())) == want
    assert region_boxes(np.zeros((4, 4), bool)).shape == (0, 4)


def _one_hot_sequence(classes, n_classes=6, layout="TNC"):
    x = np.full((len(classes), n_classes), -5.0, np.float32)
    x[np.arange(len(classes)), classes] = 5.0
    return x[:, None, :] if layout == "TNC" else x[None]


@pytest.mark.parametrize("layout", ["TNC", "NTC"])
def test_ctc_like_sequences_are_judged_by_their_reading(layout):
    """A CTC output (blank 0 between characters): a flip the greedy reading merges away (a repeat
    turned blank) is no error; a changed or dropped character is. A sequence whose commonest class
    only pads its end (SLANet's structure tokens, with real repeats) keeps the per-position count."""
    role = get_role("classes")
    ref = [_one_hot_sequence([0, 3, 3, 0, 0, 4, 0, 5, 0, 0], layout=layout)]
    merged = [_one_hot_sequence([0, 3, 0, 0, 0, 4, 0, 5, 0, 0], layout=layout)]    # reads 3 4 5 still
    changed = [_one_hot_sequence([0, 3, 3, 0, 0, 2, 0, 5, 0, 0], layout=layout)]   # reads 3 2 5
    dropped = [_one_hot_sequence([0, 3, 3, 0, 0, 0, 0, 5, 0, 0], layout=layout)]   # reads 3 5
    assert role.score(ref, merged) == 1.0
    assert role.score(ref, changed) == pytest.approx(2 / 3) and role.score(ref, dropped) == pytest.approx(2 / 3)
    padded = [_one_hot_sequence([1, 2, 2, 2, 4, 5, 0, 0, 0, 0, 0, 0], layout=layout)]
    one_less = [_one_hot_sequence([1, 2, 2, 0, 4, 5, 0, 0, 0, 0, 0, 0], layout=layout)]  # a cell token lost
    assert role.score(padded, one_less) == pytest.approx(5 / 6)   # positions: the repeat is not merged away


def test_log_hint_from_the_graph_in_the_outputs_units():
    """10 log10(x) written as Log then Div(ln 10) then Mul(10): 1 dB per unit; a bare Log: 4.343."""
    nodes = [helper.make_node("Log", ["x"], ["l"]), helper.make_node("Div", ["l", "ln10"], ["l10"]),
             helper.make_node("Mul", ["l10", "ten"], ["db"]), helper.make_node("Log", ["x"], ["nat"]),
             helper.make_node("Relu", ["x"], ["other"])]
    inits = [numpy_helper.from_array(np.array(math.log(10), np.float32), "ln10"),
             numpy_helper.from_array(np.array(10, np.float32), "ten")]
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8]) for n in ("db", "nat", "other")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])], out, inits)
    hints = output_hints(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert hints["db"]["role"] == "log" and hints["db"]["db_per_unit"] == pytest.approx(1.0, rel=1e-6)
    assert hints["nat"]["db_per_unit"] == pytest.approx(10 / math.log(10), rel=1e-6)
    assert "other" not in hints
    ref = [{"db": np.zeros((1, 8), np.float32)}]
    assert infer_roles(["db"], ref, hints)["db"].name == "log"


def test_log_hint_through_a_clamp_at_the_values_own_max():
    """torchaudio's AmplitudeToDB with top_db (openWakeWord's front end): 10 log10, then
    clip(x, max(x) - 80): the bound comes from the value itself, the output stays in dB."""
    c = {"ln10": math.log(10), "ten": 10.0, "top": 80.0, "hi": 1e9}
    nodes = [helper.make_node("Log", ["x"], ["l"]), helper.make_node("Mul", ["l", "ten"], ["m"]),
             helper.make_node("Div", ["m", "ln10"], ["db"]), helper.make_node("ReduceMax", ["db"], ["mx"], keepdims=0),
             helper.make_node("Sub", ["mx", "top"], ["floor"]), helper.make_node("Clip", ["db", "floor", "hi"], ["out"]),
             helper.make_node("Max", ["db", "floor"], ["out2"])]
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in c.items()]
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "out2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])], out, inits)
    hints = output_hints(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert hints["out"] == {"role": "log", "db_per_unit": pytest.approx(1.0, rel=1e-6)}
    assert hints["out2"]["role"] == "log"


def test_corpus_log_mel_front_end_is_judged_in_db():
    """oww-melspectrogram (the issue's audio front end: cosine 0.997 at a mean error of 2.4 dB) is
    recognised as a log output, 1 dB per unit, from its own graph."""
    from sdk import corpus

    proto = onnx.load(str(corpus.fetch(["oww-melspectrogram"])["oww-melspectrogram"]))
    assert output_hints(proto) == {"output": {"role": "log", "db_per_unit": pytest.approx(1.0, rel=1e-5)}}


def test_output_role_option_parsing():
    assert parse_output_roles(["out=mask", "b=detections"]) == {"out": "mask", "b": "detections"}
    with pytest.raises(InputError, match="not NAME=ROLE"):
        parse_output_roles(["mask"])
    with pytest.raises(InputError, match="unknown output role"):
        parse_output_roles(["out=boxes!"])


@pytest.mark.parametrize("layout, shape", [("anchors", (1, 900, 6)), ("channels", (1, 6, 900))])
def test_anchor_detections_fast_path_is_box_map(layout, shape):
    """Anchors as their own boxes: the vectorised mAP equals the corpus's box_map on those boxes."""
    from sdk.corpus.tasks import box_map

    rng = np.random.default_rng(0)
    ref = [rng.uniform(0, 0.4, shape) for _ in range(3)]
    cand = [r + rng.normal(0, 0.05, shape) for r in ref]
    role = get_role("detections", layout=layout, boxes="anchor")
    low = role.detections(ref, role.CONF / 10)
    want = box_map(role.detections(ref, role.CONF), role.detections(cand, role.CONF / 10),
                   ignore=[d[d[:, 4] < role.CONF] for d in low])
    assert role.score(ref, cand) == pytest.approx(want, abs=1e-9) and 0.5 < want < 1.0


def test_an_output_shaped_like_an_input_beside_the_result_is_a_state():
    """silero-vad's stateN [2, 1, 128] looked like CTC logits [T, 1, C] and was judged by top-1
    agreement; an output with the (inferred) shape and type of one input, beside another output,
    is a recurrent state: judged by cosine. One output shaped like the input (image to image) is not."""
    def model(outputs):
        g = helper.make_graph(
            [helper.make_node("Relu", ["state"], ["stateN"]), helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)],
            "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                    helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, 128])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    assert output_hints(model(["y", "stateN"])) == {"stateN": {"role": "state", "input": "state"}}
    assert output_hints(model(["stateN"])) == {}
    ref = [{"y": np.array(1.0, np.float32), "stateN": np.random.default_rng(0).normal(size=(2, 1, 128))}]
    roles = infer_roles(["y", "stateN"], ref, output_hints(model(["y", "stateN"])))
    assert roles["stateN"].name == "state" and roles["stateN"].metric.startswith("cosine")
    assert infer_roles(["stateN"], ref)["stateN"].name == "classes"   # what the shape alone says


def test_values_role_reads_landmark_coordinates_where_top1_and_cosine_do_not():
    """[1, 63] pixel coordinates (MediaPipe's hand landmarks): INT8 noise of 3% of their range on
    every value keeps the cosine above 0.99 and the argmax, yet no point is within 2% any more."""
    from sdk.quantize.roles import Classes, Values

    rng = np.random.default_rng(1)
    ref = [rng.uniform(20, 200, (1, 63)).astype(np.float32) for _ in range(4)]
    spread = max(float(r.max()) for r in ref) - min(float(r.min()) for r in ref)
    bad = [r + np.float32(0.03 * spread) * np.sign(rng.normal(size=r.shape)).astype(np.float32) for r in ref]
    good = [r + np.float32(0.005 * spread) * rng.normal(size=r.shape).astype(np.float32) for r in ref]
    roles = infer_roles(["lm"], [{"lm": r} for r in ref])
    assert roles["lm"].name == "values"
    assert roles["lm"].score(ref, bad) < 0.05 < 0.95 <= roles["lm"].score(ref, good)
    assert Classes().score(ref, [r + 0.0 for r in ref]) == 1.0 and Values().score(ref, ref) == 1.0
    cos = sum(float((r * b).sum()) for r, b in zip(ref, bad)) / np.sqrt(
        sum(float((r * r).sum()) for r in ref) * sum(float((b * b).sum()) for b in bad))
    assert cos > 0.99


def test_wilson_interval_is_honest_at_every_row_agreeing():
    """16 of 16 rows agreeing: a bootstrap would say [1, 1]; Wilson's interval (90%) reaches 0.855,
    so 16 rows cannot establish a top-1 agreement of 0.99, while 1000 of 1000 can."""
    from sdk.quantize.roles import wilson_interval

    lo, hi = wilson_interval(16, 16)
    assert hi == 1.0 and lo == pytest.approx(0.855, abs=1e-3)
    assert wilson_interval(1000, 1000)[0] > 0.99
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.5 - 0.0819, abs=2e-3) and hi == pytest.approx(0.5 + 0.0819, abs=2e-3)
    assert wilson_interval(0, 0) == (1.0, 1.0)


def test_classes_interval_counts_rows_and_ctc_characters():
    rng = np.random.default_rng(5)
    logits = rng.normal(0, 1, (16, 5))
    role = get_role("classes")
    assert role.units([logits], [logits]) == (16, 16) and role.interval([logits], [logits])[0] < role.min_score
    many = [rng.normal(0, 1, (1000, 5))]
    assert role.interval(many, many)[0] >= role.min_score
    ref = [_one_hot_sequence([0, 3, 3, 0, 0, 4, 0, 5, 0, 0])]
    changed = [_one_hot_sequence([0, 3, 3, 0, 0, 2, 0, 5, 0, 0])]          # reads 3 2 5 for 3 4 5
    assert role.units(ref, changed) == (2, 3) and role.score(ref, changed) == pytest.approx(2 / 3)


def test_pooled_roles_take_a_seeded_bootstrap_over_the_samples():
    """A mask IoU pooled over samples: the interval holds the score, is the same on every call, and
    is wide where the samples disagree (a few bad ones) and narrow where they agree."""
    rng = np.random.default_rng(7)
    masks = [rng.uniform(0, 1, (1, 1, 32, 32)) for _ in range(16)]
    bad = [m.copy() for m in masks]
    for m in bad[:3]:
        m[0, 0, :16] = 1 - m[0, 0, :16]                    # three samples lose half their mask
    role = get_role("mask")
    score = role.score(masks, bad)
    lo, hi = role.interval(masks, bad)
    assert lo <= score <= hi and (lo, hi) == role.interval(masks, bad) and hi - lo > 0.05
    near = [m + 0.001 for m in masks]
    lo2, hi2 = role.interval(masks, near)
    assert lo2 >= role.min_score and hi2 - lo2 < 0.01
    assert role.interval(masks[:1], bad[:1]) == (role.score(masks[:1], bad[:1]),) * 2


def test_detections_bootstrap_matches_once_and_scores_as_box_map():
    """The detections role resamples images whose boxes were decoded and matched once: a resampling
    of every image in order scores exactly as the role does."""
    rng = np.random.default_rng(11)
    ref = [_yolo(rng) for _ in range(12)]
    got = [r.copy() for r in ref]
    for g in got[:4]:
        g[0, 0] += 25.0                                     # four images' boxes shift by 25 px
    role = get_role("detections", layout="channels", boxes="xywh")
    n, score_of = role.resampler(ref, got)
    assert n == 12 and score_of(np.arange(12)) == pytest.approx(role.score(ref, got))
    lo, hi = role.interval(ref, got)
    assert lo < role.score(ref, got) < 1.0 and hi - lo > 0.05


def test_batched_outputs_are_resampled_per_sample():
    """The guard evaluates a dynamic-batch model 8 samples at a time: the bootstrap resamples the
    samples (split off each batch), not two batches, and the score does not change by the split."""
    from sdk.quantize.accuracy import _per_sample

    rng = np.random.default_rng(3)
    ref = [rng.uniform(0, 1, (8, 1, 16, 16)), rng.uniform(0, 1, (2, 1, 16, 16))]
    got = [r + rng.normal(0, 0.05, r.shape) for r in ref]
    split_ref, split_got = _per_sample(ref, [8, 2]), _per_sample(got, [8, 2])
    assert len(split_ref) == 10 and split_ref[9].shape == (1, 1, 16, 16)
    role = get_role("mask")
    assert role.score(split_ref, split_got) == role.score(ref, got)
    assert role.resampler(split_ref, split_got)[0] == 10
    assert _per_sample(ref[:1], [1]) == ref[:1]


def _pico(rng, size=(64, 48), strides=(8, 16), classes=3, bins=8, hot=3):
    """A PicoDet-style output set for a ``size`` image: per stride a score head [1, A, C] (a few
    confident anchors) and a DFL distance head [1, A, 4 * bins] (logits peaked at 1-3 bins)."""
    out = {}
    for k, s in enumerate(strides):
        a = math.ceil(size[0] / s) * math.ceil(size[1] / s)
        sc = rng.uniform(0, 0.05, (1, a, classes)).astype(np.float32)
        idx = rng.choice(a, hot, replace=False)
        sc[0, idx, rng.integers(classes, size=hot)] = rng.uniform(0.6, 0.9, hot)
        d = rng.normal(0, 0.5, (1, a, 4, bins)).astype(np.float32)
        d[0, np.arange(a)[:, None], np.arange(4)[None], rng.integers(1, 4, (a, 4))] += 6.0
        out[f"score{k}"], out[f"dist{k}"] = sc, d.reshape(1, a, 4 * bins)
    return out


def test_detector_heads_are_one_role_placed_on_the_input_grid():
    """PicoDet/GFL heads (score + DFL distances per stride): one ``heads`` role over all of them when
    the input image's size places every level on a stride's grid; each head on its own otherwise.
    Judged on the decoded boxes: moving the distance logits of the hot anchors (the boxes) breaks
    it, noise in the cold anchors' scores does not; the accuracy core scores it once and budgets
    the other heads with it."""
    from sdk.quantize.accuracy import Budget, judge_by_role

    rng = np.random.default_rng(3)
    ref = [_pico(rng) for _ in range(4)]
    names = ["score0", "score1", "dist0", "dist1"]
    roles = infer_roles(names, ref, size=(64, 48))
    assert {r.name for r in roles.values()} == {"heads"} and len({id(r) for r in roles.values()}) == 1
    role = roles["score0"]
    assert role.outputs == ("score0", "score1", "dist0", "dist1")
    assert role.params["levels"] == [[8, 6, 8], [4, 3, 16]]
    assert {k: r.name for k, r in infer_roles(names, ref).items()} == \
        {"score0": "cosine", "score1": "cosine", "dist0": "cosine", "dist1": "cosine"}   # no size: no grid
    assert infer_roles(names, ref, size=(72, 48))["score0"].name == "cosine"          # no stride fits
    assert infer_roles(names, ref, size=(64, 48), overrides={"score0": "scores"})["score0"].name == "scores"

    def rows(outs):
        return [[o[n] for n in role.outputs] for o in outs]

    calm = []
    for o in ref:
        c = {k: v.copy() for k, v in o.items()}
        for k in ("score0", "score1"):
            cold = c[k] < 0.1
            c[k][cold] = np.clip(c[k][cold] + rng.normal(0, 0.02, int(cold.sum())), 0, 0.1)
        calm.append(c)
    assert role.score(rows(ref), rows(ref)) == 1.0
    assert role.score(rows(ref), rows(calm)) == 1.0
    moved = []
    for o in ref:
        c = {k: v.copy() for k, v in o.items()}
        for k in ("score0", "score1"):
            hot = np.nonzero(c[k][0].max(1) > 0.5)[0]
            d = c["dist" + k[-1]][0].reshape(len(c[k][0]), 4, -1)
            d[hot] = np.roll(d[hot], 3, axis=2)          # each side 3 bins further: another box
        moved.append(c)
    assert role.score(rows(ref), rows(moved)) < 0.5
    # the accuracy core: one score, on the first head; the rest judged with it
    out = {n: {"cosine": 0.5} for n in names}
    pairs = judge_by_role(roles, {n: ([o[n] for o in ref], [o[n] for o in moved]) for n in names}, out)
    assert list(pairs) == ["score0"] and out["score0"]["role_score"] < 0.5
    assert out["dist1"] == {"cosine": 0.5, "role": "heads", "judged_with": "score0"}
    assert not Budget(min_cosine=0.99, by_role=True).holds({"outputs": out})
    out = {n: {"cosine": 0.5} for n in names}   # low cosines, same boxes: the heads hold
    judge_by_role(roles, {n: ([o[n] for o in ref], [o[n] for o in calm]) for n in names}, out)
    assert Budget(min_cosine=0.99, by_role=True).holds({"outputs": out})
    with pytest.raises(InputError, match="heads role needs"):
        get_role("heads")


def test_detections_are_judged_at_each_common_score_threshold():
    """A reader keeps boxes at its own threshold, which the arrays do not say: 39 of 40 boxes of a
    class at 0.3 found and the only one above 0.4 (score 0.6) lost reads mAP 40/41 at 0.25 (class 0's
    AP 39/40 over 40 boxes, class 1's 1.0 over one), 0.0 at 0.4 and 0.5; the role counts the lowest
    (layout-cdla's INT8 .tflite, as a plain class mean: 0.991 at 0.25, its own threshold 0.4 reads 0.916)."""
    def head(scores):        # [1, A, 4 + 2]: pixel boxes on a row, class 0 or 1
        a = np.zeros((1, len(scores), 6), np.float32)
        for i, (cls, s) in enumerate(scores):
            a[0, i, :4] = [30 + 40 * i, 40, 24, 24]
            a[0, i, 4 + cls] = s
        return a

    ref = [head([(0, 0.3)] * 39 + [(0, 0.6), (1, 0.3)])]
    lost = [head([(0, 0.3)] * 39 + [(0, 0.01), (1, 0.3)])]
    role = get_role("detections", layout="anchors", boxes="xywh")
    assert role.THRESHOLDS == (0.25, 0.4, 0.5) and role.score(ref, ref) == 1.0
    assert role.score(ref, lost) == 0.0 < role.min_score
    role.THRESHOLDS = (0.25,)                        # the one threshold the role used to judge at
    assert role.score(ref, lost) == pytest.approx((40 * 39 / 40 + 1) / 41) and 40 / 41 >= role.min_score
    n, score_of = get_role("detections", layout="anchors", boxes="xywh").resampler(ref * 3, lost * 3)
    assert n == 3 and score_of(np.array([0, 1, 2])) == 0.0


@pytest.mark.parametrize("boxes", ["xywh", "anchor"])
def test_a_score_at_the_threshold_is_not_a_detection(boxes):
    """Detectors keep a score above their threshold (ultralytics' ``> conf_thres``, PicoDet's
    ``probs > score_threshold``): an FP32 box scoring exactly 0.25 is nothing any reader keeps, so
    losing it costs nothing; one float32 step above, losing it reads 0."""
    def head(score):
        a = np.zeros((1, 1, 6), np.float32)
        a[0, 0, :4] = [40, 40, 24, 24]
        a[0, 0, 4] = score
        return [a]

    role = get_role("detections", layout="anchors", boxes=boxes)
    above = float(np.nextafter(np.float32(0.25), np.float32(1)))
    assert role.score(head(0.25), head(0.01)) == 1.0
    assert role.score(head(above), head(0.01)) == 0.0
    assert len(role.detections(head(0.25), 0.25)[0]) == 0 and len(role.detections(head(above), 0.25)[0]) == 1

def test_anchor_detections_of_other_shapes_are_matched_as_boxes():
    """Anchor by anchor needs arrays of one shape; otherwise each anchor is matched as its own box
    (never the role calling itself back)."""
    role = get_role("scores")                       # [N, A, C], each anchor its own box
    ref = np.zeros((1, 6, 3), np.float32)
    ref[0, [1, 4], 0] = 0.9
    longer = np.concatenate([ref, np.zeros((1, 2, 3), np.float32)], 1)
    assert role.score([ref], [longer]) == 1.0 and role.interval([ref], [longer]) == (1.0, 1.0)
    longer[0, 4, 0] = 0.0
    assert role.score([ref], [longer]) < role.min_score
