"""The real kernels and their wrappers, run on a SIMULATED GPU (tests/kernels/simgpu.py: the .cu
compiled for the CPU with g++, CUDA threads as cooperative contexts, labelled as a simulation),
against the CPU references. Catches indexing, barrier and launch-argument mistakes in the CUDA C
on machines without a GPU; timing and the GPU's own arithmetic are checked on a GPU
(scripts/gpu_check.py)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests import tiers
from tests.kernels.cases import tied_scores
from sdk.kernels.reference import (
    PostprocessSpec,
    synthetic_yolo_output,
    yolo_postprocess,
)
from sdk.preprocess import PreprocessSpec, preprocess_reference

pytestmark = tiers.needs("gxx", shutil.which("g++") is not None, "g++ is needed to simulate the GPU on the CPU")


@pytest.fixture(scope="module")
def sim():
    from tests.kernels.simgpu import SimBackend

    with SimBackend() as backend:
        yield backend


def _same(a, b):
    assert a.rows.tolist() == b.rows.tolist()
    assert a.classes.tolist() == b.classes.tolist()
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.boxes, b.boxes)


@pytest.mark.parametrize("n,classes,obj,transposed,kw", [
    (100, 3, True, False, {}),
    (1000, 1, False, False, dict(max_candidates=300)),
    (2000, 20, True, True, dict(max_candidates=257, max_detections=40)),
    (3000, 10, False, False, dict(score_threshold=-1.0, max_candidates=640)),  # every row a candidate
    (700, 4, False, False, dict(max_candidates=64, iou_threshold=0.0)),
    (513, 2, True, False, dict(score_threshold=2.0)),  # no candidate at all
])
def test_postprocess_kernels_on_the_simulated_gpu(sim, n, classes, obj, transposed, kw):
    from sdk.kernels.postprocess import GpuYoloPostprocessor

    pred = synthetic_yolo_output(n, classes, obj, seed=n + classes)
    arg = np.ascontiguousarray(pred.T) if transposed else pred
    spec = PostprocessSpec(has_objectness=obj, transposed=transposed, **kw)
    with GpuYoloPostprocessor(spec, n, pred.shape[1], backend=sim) as post:
        got = post(arg)
        again = post(arg)  # launches reused, buffers not re-initialised by the host
    want = yolo_postprocess(arg, spec)
    _same(got, want)
    _same(again, want)


def test_postprocess_real_detector_outputs_on_the_simulated_gpu(sim):
    """NudeNet's YOLOv8n outputs on the corpus photos (transposed layout, 18 classes)."""
    from tests.kernels.realdata import nudenet_outputs

    from sdk.kernels.postprocess import GpuYoloPostprocessor

    outs = nudenet_outputs(n=2)
    if outs is None:
        tiers.require_or_skip("corpus", "corpus model nudenet-320n is not fetched (python scripts/fetch_corpus.py)")
    spec = PostprocessSpec(has_objectness=False, transposed=True, score_threshold=0.05, max_candidates=512)
    with GpuYoloPostprocessor(spec, outs[0].shape[1], outs[0].shape[0], backend=sim) as post:
        for pred in outs:
            _same(post(pred), yolo_postprocess(pred, spec))


def test_postprocess_ties_keep_row_order_on_the_simulated_gpu(sim):
    from sdk.kernels.postprocess import GpuYoloPostprocessor

    pred, spec = tied_scores()
    with GpuYoloPostprocessor(spec, len(pred), 6, backend=sim) as post:
        _same(post(pred), yolo_postprocess(pred, spec))


@pytest.mark.parametrize("src,size,mode,layout,dtype,bands", [
    ((37, 53), (64, 64), "letterbox", "NCHW", "float32", 1),
    ((120, 200), (64, 96), "resize", "NHWC", "float16", 1),
    ((108, 192), (64, 64), "letterbox", "NCHW", "float32", 3),
    ((90, 60), (48, 48), "letterbox", "NHWC", "float32", 4),
])
def test_preprocess_kernel_on_the_simulated_gpu(sim, src, size, mode, layout, dtype, bands):
    from sdk.kernels.preprocess import GpuPreprocessor

    img = np.random.default_rng(src[0]).integers(0, 256, size=src + (3,), dtype=np.uint8)
    spec = PreprocessSpec(size=size, resize=mode, layout=layout, dtype=dtype, mean=(123.675, 116.28, 103.53),
                          std=(58.395, 57.12, 57.375))
    with GpuPreprocessor(spec, backend=sim, bands=bands) as pre:
        got = pre(img)
        buf = pre.input_buffer(*src)
        np.copyto(buf, img)
        zero_copy = pre(buf)
    want = preprocess_reference(img, spec)
    tol = 4e-3 if dtype == "float16" else 1e-4
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=tol, rtol=tol)
    np.testing.assert_array_equal(zero_copy, got)


def test_gpu_check_script_on_the_simulated_gpu(sim, capsys):
    """scripts/gpu_check.py's checks and summary run end to end (small cases, simulated GPU)."""
    import hashlib
    import importlib.util
    from pathlib import Path

    from sdk.targets.cuda.probe import GpuDevice, GpuProbe

    path = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", path)
    gc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gc)
    pre = gc.check_preprocess(sim, runs=1, quick=True, srcs=[(37, 53)], sizes=[(32, 32)])
    post = gc.check_postprocess(sim, runs=1, quick=True, cases=[(300, 3, True, False), (500, 2, False, True)])
    assert (pre["cases"], pre["failed"]) == (4, 0) and (post["cases"], post["failed"]) == (4, 0)
    row = {"backend": "simulated", "error": None, "pre": pre, "post": post}
    twin = {"backend": "simulated-again", "error": None, "pre": {**pre, "digest": hashlib.sha256(b"other")},
            "post": post}
    gpu = GpuProbe(True, driver_version="sim", devices=[GpuDevice(0, "simulated GPU (CPU)", (9, 0))])
    assert gc.summary(gpu, [row], None, {"status": "ran", "rc": 0, "passed": 1}) == 0
    assert gc.summary(gpu, [row, twin], None, {"status": "ran", "rc": 0, "passed": 1}) == 1  # backends disagree
    out = capsys.readouterr().out
    assert "SUMMARY" in out and "DIFFERENT outputs" in out
