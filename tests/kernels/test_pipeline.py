"""The detection pipeline split on the real YOLOv8 detector (nudenet 320n) over real photos."""
from __future__ import annotations

import json

import pytest

from tests import tiers
from tests.clirun import run_cli
from tests.corpusfiles import corpus_file, photo_folder
from sdk.errors import InputError
from sdk.kernels.pipeline import STAGES, PipelineConfig, detect_pipeline


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return photo_folder(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def split(photos):
    res = detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(data=photos, input_size=(320, 320), frames=6,
                                                                    warmup=1, device="auto"))
    doc = res.to_dict(samples=True)
    from sdk.result import BenchResult

    assert BenchResult.from_dict(doc).to_dict(samples=True) == doc  # one codec, the optional sections survive
    assert doc["latency_ms"]["p50"] == pytest.approx(doc["stages_ms"]["end_to_end"]["p50"])
    return doc


def test_stages_add_up_per_frame(split, photos):
    sm, per = split["stages_ms"], split["pipeline"]["per_frame_ms"]
    assert set(sm) == set(STAGES) | {"end_to_end"}
    n = split["pipeline"]["frames"]
    assert n >= max(6, len(list(photos.iterdir()))) and all(len(v) == n for v in per.values())
    for i in range(n):  # the end-to-end time of a frame is its four stages
        assert sum(per[s][i] for s in STAGES) == pytest.approx(per["end_to_end"][i], rel=1e-6)
    assert all(sm[s]["mean"] > 0 for s in STAGES)
    assert sum(sm[s]["share"] for s in STAGES) == pytest.approx(1.0, rel=1e-6)
    assert sm["inference"]["mean"] > sm["postprocess"]["mean"]  # a CNN at 320x320 outweighs NMS on the CPU


def test_the_detector_finds_the_astronauts_face(split):
    by = {d["image"]: d for d in split["pipeline"]["detections"]}
    if "astronaut.png" not in by:
        tiers.require_or_skip("corpus", "the astronaut photo is not in this corpus")
    top = by["astronaut.png"]["top"][0]
    assert top["score"] > 0.5 and top["class"] == 1  # nudenet class 1: FACE_FEMALE (Eileen Collins)
    x1, y1, x2, y2 = top["box"]
    assert 0 <= x1 < x2 <= 512 and 0 <= y1 < y2 <= 512  # boxes mapped back to the 512x512 photo


def test_where_each_stage_ran_is_recorded(split):
    p = split["pipeline"]
    assert p["devices"]["decode"].startswith("cpu") and p["devices"]["inference"] == "onnxruntime"
    if p["devices"]["preprocess"].startswith("cpu"):
        assert p["why_not_cuda"]  # the reason the CUDA kernels did not run


def test_cuda_stages_refused_here_with_the_reason(photos):
    from sdk.kernels.pipeline import _cuda_reason

    why = _cuda_reason()
    if why is None:
        tiers.skip_has_gpu("the CUDA path runs in test_cuda_matches_cpu")
    with pytest.raises(InputError, match="cannot run here"):
        detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(data=photos, device="cuda", frames=1))


def test_cuda_matches_cpu(photos):  # pragma: no cover - needs a GPU
    from sdk.kernels.pipeline import _cuda_reason
    from sdk.targets.cuda.probe import probe_gpu

    why = _cuda_reason()
    if not probe_gpu().available:
        tiers.skip_no_gpu(f"the CUDA kernels cannot run here: {why}")
    if why is not None:
        tiers.require_or_skip("gpu-apis", f"the CUDA kernels cannot run here: {why}")
    cfg = dict(data=photos, input_size=(320, 320), frames=2, warmup=0)
    cpu = detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(device="cpu", **cfg)).pipeline
    gpu = detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(device="cuda", **cfg)).pipeline
    assert [d["count"] for d in gpu["detections"]] == [d["count"] for d in cpu["detections"]]


def test_bench_pipeline_cli(photos, tmp_path, capsys):
    out = tmp_path / "p.json"
    report = tmp_path / "p.html"
    code, stdout, err = run_cli(["bench", corpus_file("320n.onnx"), "--pipeline", "detect", "--data", photos,
                                 "--input-shape", "images=1x3x320x320", "--runs", "2", "--warmup", "0",
                                 "--json", out, "--report", report], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert set(doc["stages_ms"]) == set(STAGES) | {"end_to_end"} and "end_to_end" in stdout
    assert 'class="plot stacked"' in report.read_text()
    code, _, err = run_cli(["bench", corpus_file("320n.onnx"), "--pipeline", "track", "--data", photos], capsys)
    assert code == 2 and "known pipelines: detect" in err
    code, _, err = run_cli(["bench", corpus_file("320n.onnx"), "--pipeline", "detect", "--data", tmp_path / "none"], capsys)
    assert code == 2 and "does not exist" in err


@tiers.needs("gxx", __import__("shutil").which("g++") is not None, "g++ is needed to simulate the GPU on the CPU")
def test_cuda_stages_on_the_simulated_gpu(photos, tmp_path):
    """SIMULATED GPU (tests/kernels/simgpu.py: the real .cu kernels compiled for the CPU): the
    pipeline's CUDA path (preprocess.cu, postprocess.cu through their wrappers) finds what the CPU
    path finds on real photos."""
    import shutil

    from tests.kernels.simgpu import SimBackend

    two = tmp_path / "two"
    two.mkdir()
    for name in ("astronaut.png", "coffee.png"):
        shutil.copy(photos / name, two / name)
    cfg = dict(data=two, input_size=(320, 320), frames=2, warmup=0)
    cpu = detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(device="cpu", **cfg)).pipeline
    with SimBackend() as sim:
        gpu = detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(device="cuda", cuda_backend=sim, **cfg)).pipeline
    assert gpu["devices"]["preprocess"] == "cuda (sdk.kernels preprocess.cu on SimBackend)"
    assert gpu["why_not_cuda"] is None
    for g, c in zip(gpu["detections"], cpu["detections"]):
        assert g["image"] == c["image"] and g["count"] == c["count"]
        assert [t["class"] for t in g["top"]] == [t["class"] for t in c["top"]]
        for tg, tc in zip(g["top"], c["top"]):  # preprocessing rounds differently by a pixel level at most
            assert tg["score"] == pytest.approx(tc["score"], abs=0.02)
