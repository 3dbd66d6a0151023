"""GPU kernels against their CPU references on random inputs of many sizes (marked ``gpu``;
skipped with the probe's reason where no GPU is found). Each installed CUDA backend is tried."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests import tiers

from sdk.kernels.reference import (
    PostprocessSpec,
    synthetic_yolo_output,
    yolo_postprocess,
)
from sdk.preprocess import PreprocessSpec, preprocess_reference

pytestmark = pytest.mark.gpu


PRE_CASES = list(itertools.product([(37, 53), (480, 640), (1080, 1920), (720, 1280), (3, 5)],
                                   [(64, 64), (320, 320), (640, 640), (384, 640)],
                                   ["resize", "letterbox"]))


@pytest.mark.parametrize("src,size,resize", PRE_CASES)
def test_preprocess_kernel_matches_reference(cuda, src, size, resize):
    from sdk.kernels.preprocess import GpuPreprocessor

    rng = np.random.default_rng(src[0] * 7 + size[1])
    img = rng.integers(0, 256, size=src + (3,), dtype=np.uint8)
    for layout, dtype in (("NCHW", "float32"), ("NHWC", "float16")):
        spec = PreprocessSpec(size=size, resize=resize, layout=layout, dtype=dtype,
                              mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))
        with GpuPreprocessor(spec, backend=cuda) as pre:
            got = pre(img)
        want = preprocess_reference(img, spec)
        assert got.shape == want.shape and got.dtype == want.dtype
        tol = 4e-3 if dtype == "float16" else 1e-4
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=tol, rtol=tol)


@pytest.mark.parametrize("n,classes,obj,transposed", [(100, 3, True, False), (8400, 80, False, True),
                                                      (25200, 80, True, False), (1000, 1, False, False),
                                                      (5000, 20, True, True)])
def test_postprocess_kernels_match_reference(cuda, n, classes, obj, transposed):
    from sdk.kernels.postprocess import GpuYoloPostprocessor

    pred = synthetic_yolo_output(n, classes, obj, seed=n)
    fields = pred.shape[1]
    arg = np.ascontiguousarray(pred.T) if transposed else pred
    for thr in (0.05, 0.3):
        spec = PostprocessSpec(score_threshold=thr, iou_threshold=0.45, max_detections=300,
                               max_candidates=2048, has_objectness=obj, transposed=transposed)
        with GpuYoloPostprocessor(spec, n, fields, backend=cuda) as post:
            got = post(arg)
        want = yolo_postprocess(arg, spec)
        assert got.rows.tolist() == want.rows.tolist()
        assert got.classes.tolist() == want.classes.tolist()
        np.testing.assert_array_equal(got.scores, want.scores)
        np.testing.assert_array_equal(got.boxes, want.boxes)


@pytest.mark.parametrize("kw", [dict(max_candidates=64), dict(max_candidates=65, max_detections=5),
                                dict(score_threshold=-1.0, max_candidates=4096), dict(iou_threshold=0.0)])
def test_postprocess_edge_settings_and_raw_pointer(cuda, kw):
    """Tile edges (64/65 candidates), every row a candidate, IoU 0; and a raw device address as the
    prediction (what a TensorRT output binding is) with the launches reused across calls."""
    from sdk.kernels.postprocess import GpuYoloPostprocessor

    pred = synthetic_yolo_output(50000, 10, False, seed=5)
    spec = PostprocessSpec(has_objectness=False, **kw)
    want = yolo_postprocess(pred, spec)
    with GpuYoloPostprocessor(spec, pred.shape[0], pred.shape[1], backend=cuda) as post:
        dev = cuda.to_device(pred)
        for _ in range(2):
            post.launch(int(dev.ptr))
            got = post.fetch()
            assert got.rows.tolist() == want.rows.tolist()
            np.testing.assert_array_equal(got.boxes, want.boxes)


@pytest.mark.parametrize("bands", [1, 3, 4])
def test_preprocess_zero_copy_registered_and_banded_are_identical(cuda, bands):
    """From a pageable frame, from the pinned input buffer, from registered memory, in one launch or
    in bands overlapped with the upload: the same output, twice in a row (buffers reused)."""
    from sdk.kernels.preprocess import GpuPreprocessor

    spec = PreprocessSpec(size=(640, 640), resize="letterbox", mean=(123.675, 116.28, 103.53),
                          std=(58.395, 57.12, 57.375))
    with GpuPreprocessor(spec, backend=cuda, bands=bands) as pre:
        for seed in (0, 1):
            frame = np.random.default_rng(seed).integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)
            want = preprocess_reference(frame, spec)
            np.testing.assert_allclose(pre(frame), want, atol=1e-4, rtol=1e-4)
            buf = pre.input_buffer(1080, 1920)
            np.copyto(buf, frame)
            np.testing.assert_allclose(pre(buf), want, atol=1e-4, rtol=1e-4)
            own = np.array(frame)
            cuda.register_host(own)
            try:
                np.testing.assert_allclose(pre(own), want, atol=1e-4, rtol=1e-4)
            finally:
                cuda.unregister_host(own)


def test_postprocess_real_detector_outputs(cuda):
    """NudeNet's YOLOv8n outputs on the corpus photos (transposed layout, 18 classes)."""
    from tests.kernels.realdata import nudenet_outputs

    from sdk.kernels.postprocess import GpuYoloPostprocessor

    outs = nudenet_outputs()
    if outs is None:
        tiers.require_or_skip("corpus", "corpus model nudenet-320n is not fetched (python scripts/fetch_corpus.py)")
    for thr in (0.05, 0.25):
        spec = PostprocessSpec(has_objectness=False, transposed=True, score_threshold=thr)
        with GpuYoloPostprocessor(spec, outs[0].shape[1], outs[0].shape[0], backend=cuda) as post:
            for pred in outs:
                got, want = post(pred), yolo_postprocess(pred, spec)
                assert got.rows.tolist() == want.rows.tolist()
                np.testing.assert_array_equal(got.boxes, want.boxes)
