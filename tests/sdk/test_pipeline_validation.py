"""Pipelines judged as one unit (sdk.validation.pipeline): the end-to-end metric against FP32 on
the host, budgets, and INT8 per stage calibrated on what the previous stage really feeds it."""
from __future__ import annotations

import pytest

from sdk.kernels.pipelines import Pipeline, PipelineSpec, RunConfig
from sdk.kernels.pipelines.metrics import end_to_end_metric
from sdk.validation.pipeline import quantize_pipeline, validate_pipeline
from tests import pipelinefiles as pf

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    return pf.documents(tmp_path_factory.mktemp("docs"))


def test_metrics_by_hand():
    ref = {"a": [{"box": [0, 0, 10, 10], "text": "hello", "class": 0, "label": "0"},
                 {"box": [20, 20, 30, 30], "text": "world", "class": 0, "label": "90"}]}
    same = end_to_end_metric("ocr", ref, ref)
    assert same["metric"] == 1.0 and same["box_recall"] == 1.0
    cand = {"a": [{"box": [0, 0, 10, 11], "text": "hallo", "class": 0, "label": "0"}]}
    ocr = end_to_end_metric("ocr", ref, cand)
    assert ocr["one_minus_cer"] == pytest.approx(1 - (1 + 5) / 10) and ocr["box_recall"] == 0.5
    assert ocr["box_precision"] == 1.0
    dc = end_to_end_metric("detect-classify", ref, cand)
    assert dc["label_agreement"] == 0.5
    moved = {"a": [{"box": [0, 0, 10, 10], "class": 1, "label": "0"}]}     # another detector class: no match
    assert end_to_end_metric("detect-classify", ref, moved)["label_agreement"] == 0.0


def test_validate_on_the_host_checks_budgets(docs):
    pf.fetch()
    v = validate_pipeline(pf.LAYOUT_SPEC, docs, config=RunConfig(frames=3, warmup=0),
                          budgets={"max_p50_ms": 1e9, "min_fps": 1e9, "max_energy_mj_per_frame": 1.0})
    by = {c["budget"]: c for c in v.checks}
    assert by["max_p50_ms"]["verdict"] == "pass" and by["min_fps"]["verdict"] == "fail"
    assert by["min_metric"]["verdict"] == "pass" and by["min_metric"]["measured"] == 1.0   # FP32 vs FP32
    assert by["max_energy_mj_per_frame"]["verdict"] == "skip" and by["max_energy_mj_per_frame"]["reason"]
    assert v.verdict == "NO-GO" and v.exit_code == 1 and v.summary == "failing: host: frames per second (serial)"
    strict = validate_pipeline(pf.LAYOUT_SPEC, docs, config=RunConfig(frames=1, warmup=0, overlapped=False),
                               budgets={"max_energy_mj_per_frame": 1.0, "min_metric": 0.5}, strict=True)
    assert [c["verdict"] for c in strict.checks if c["budget"] == "max_energy_mj_per_frame"] == ["fail"]
    doc = v.to_dict()
    assert doc["schema"] == "pipeline-validation" and doc["results"][0]["accuracy"]["metric"] == 1.0


def test_quantize_calibrates_a_stage_on_what_the_detector_feeds_it(docs, tmp_path):
    pf.fetch()
    spec = PipelineSpec.load(pf.LAYOUT_SPEC)
    fp32 = Pipeline(spec).run(docs, RunConfig(frames=1, warmup=0, overlapped=False))
    crops = sum(o["counts"]["orientation"] for o in fp32.outputs)
    q = quantize_pipeline(spec, docs, tmp_path / "q", stages=["orientation"], min_metric=0.5)
    layout, orient = q.stages
    assert layout == {"name": "layout", "quantized": False, "model": spec.stages[0].model, "reason": "not asked for"}
    assert orient["calib_feeds"] == crops                  # one calibration input per detected region
    assert orient["quantized"] == (orient["metric"] >= 0.5) and (tmp_path / "q" / "orientation.int8.onnx").is_file()
    assert q.metric == (orient["metric"] if orient["quantized"] else 1.0)
    written = PipelineSpec.load(q.spec_path)
    if orient["quantized"]:
        assert written.stages[1].model.endswith("orientation.int8.onnx")
        assert written.stages[1].reference_model == spec.stages[1].model and written.stages[1].precision == "int8"
        # the INT8 pipeline runs from its spec file, and its reference is the FP32 pipeline
        v = validate_pipeline(q.spec_path, docs, config=RunConfig(frames=1, warmup=0, overlapped=False))
        assert v.results[0].accuracy["metric"] == pytest.approx(orient["metric"])
    # a budget no INT8 model can meet keeps the stage in FP32 and says why
    strict = quantize_pipeline(spec, docs, tmp_path / "q2", stages=["orientation"], min_metric=1.01)
    assert not strict.stages[1]["quantized"] and "kept in FP32" in strict.stages[1]["reason"]
    assert PipelineSpec.load(strict.spec_path).stages[1].model == spec.stages[1].model
