"""The fused crop kernel (``crops.cu``, the ``crop_resize`` glue step): its NumPy model on the
step's own arguments equals the CPU steps ``crop_quads`` + ``resize_pad`` without OpenCV, on drawn
rotated quads and on the real detector's quads of the corpus page; on a GPU the kernel equals the
model."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.kernels.crops import emulate
from sdk.kernels.pipelines.glue import build_step


def _numpy_steps(step):
    """The step's two CPU steps with OpenCV off (the NumPy references the kernel follows)."""
    step._crop._cv2 = None
    step._resize._cv2 = None
    return step


def _quads():
    """Text-line quads: upright, rotated by 7 degrees, a tall one (turned), one clipped at the edge."""
    def rect(cx, cy, w, h, deg):
        a = np.deg2rad(deg)
        c, s = np.cos(a), np.sin(a)
        pts = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
        return (pts @ np.array([[c, s], [-s, c]]) + [cx, cy]).astype(np.float32)
    return np.stack([rect(120, 40, 180, 30, 0), rect(200, 140, 220, 28, 7), rect(60, 150, 24, 120, 0),
                     rect(300, 10, 140, 40, -4)])


def _cpu(step, image, quads):
    from sdk.kernels.pipelines.glue import Frame

    frame = Frame("x", image)
    frame.quads = quads
    step(frame)
    return frame.crops


@pytest.mark.parametrize("options", [
    {"height": 48, "width": 320, "grow": True, "mean": 127.5, "std": 127.5},
    {"height": 32, "width": 100, "align": "center", "color": "BGR", "pad_value": -1.0, "layout": "NHWC",
     "mean": [100.0, 110.0, 120.0], "std": [50.0, 60.0, 70.0]},
])
def test_the_kernels_arithmetic_is_the_cpu_steps(options):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (200, 360, 3), dtype=np.uint8)
    step = _numpy_steps(build_step("crop_resize", dict(options, device="cpu")))
    quads = _quads()
    plan = step.plan(quads)
    assert plan.ints[2, 3] == 1 and plan.ints[0, 3] == 0           # the tall quad is turned, the others not
    got = plan.split(emulate(image, plan))
    want = _cpu(step, image, quads)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)


def test_on_the_real_detectors_quads_of_the_corpus_page():
    import cv2

    from sdk import corpus
    from sdk.kernels.pipelines.glue import Frame
    from tests.kernels.test_glue import _fetched, _session

    (det,) = _fetched("ppocr-v4-det")
    image = cv2.imread(str(next(p for p in corpus.photos() if p.name == "page.png")))
    frame = Frame("page", image)
    build_step("preprocess", {"size": [736, 736], "resize": "letterbox", "mean": [123.675, 116.28, 103.53],
                              "std": [58.395, 57.12, 57.375], "pad_value": 0, "device": "cpu"})(frame)
    frame.outputs = _session(det).run(None, {"x": frame.feed})
    build_step("db_boxes", {})(frame)
    assert len(frame.quads) >= 5
    step = _numpy_steps(build_step("crop_resize", {"height": 48, "width": 320, "grow": True, "mean": 127.5,
                                                   "std": 127.5, "device": "cpu"}))
    plan = step.plan(frame.quads)
    got = plan.split(emulate(image, plan))
    want = _cpu(step, image, frame.quads)
    assert len(got) == len(want) == len(frame.quads)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)


def test_crop_resize_needs_quads_and_checks_its_options():
    from sdk.errors import ConfigError, InputError
    from sdk.kernels.pipelines.glue import Frame

    with pytest.raises(ConfigError, match="crop_resize"):
        build_step("crop_resize", {"height": 48, "width": 320, "treshold": 1})
    step = build_step("crop_resize", {"height": 48, "width": 320, "device": "cpu"})
    assert step.device.startswith("cpu")
    with pytest.raises(InputError, match="needs quads"):
        step(Frame("x", np.zeros((8, 8, 3), np.uint8)))


def test_the_kernel_equals_its_model_on_a_gpu(cuda):
    from sdk.kernels.crops import GpuCropResizer

    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (200, 360, 3), dtype=np.uint8)
    step = build_step("crop_resize", {"height": 48, "width": 320, "grow": True, "mean": 127.5, "std": 127.5,
                                      "device": "cpu"})
    plan = step.plan(_quads())
    with GpuCropResizer(backend=cuda) as gpu:
        got = plan.split(gpu(image, plan))
    want = plan.split(emulate(image, plan))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    cuda = build_step("crop_resize", {"height": 48, "width": 320, "grow": True, "mean": 127.5, "std": 127.5,
                                      "device": "cuda"})
    assert cuda.device.startswith("cuda")
    cuda.close()
