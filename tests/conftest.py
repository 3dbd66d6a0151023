"""Shared fixtures: small real ONNX models built with onnx.helper, and the example model."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import modelzoo

#: the test tiers (EDGESDK_REQUIRE) and the CI skip gate: tests/tiers.py
pytest_plugins = ["tests.tiers"]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def conv_model(models_dir) -> Path:
    """Conv net with a dynamic batch dim N: x[N,3,16,16] -> logits[N,10]."""
    return modelzoo.conv_net(models_dir / "conv.onnx")


@pytest.fixture(scope="session")
def static_conv_model(models_dir) -> Path:
    return modelzoo.conv_net(models_dir / "conv_static.onnx", batch=1)


@pytest.fixture(scope="session")
def two_input_model(models_dir) -> Path:
    return modelzoo.two_inputs(models_dir / "two.onnx")


@pytest.fixture(scope="session")
def fp16_model(models_dir) -> Path:
    return modelzoo.fp16_matmul(models_dir / "fp16.onnx")


@pytest.fixture(scope="session")
def tiny_model(models_dir) -> Path:
    return modelzoo.tiny_add(models_dir / "tiny.onnx")


@pytest.fixture(scope="session")
def example_model() -> Path:
    """The shipped example: a CNN trained on scikit-learn's digits (examples/digits/)."""
    path = ROOT / "examples" / "digits" / "digits_cnn.onnx"
    assert path.exists(), "examples/digits/digits_cnn.onnx is committed with the repo"
    return path


@pytest.fixture(scope="session")
def example_eval() -> Path:
    """Labelled evaluation set of the example model: eval.npz with 'x' (N,1,8,8) float32, 'y' (N,) int64."""
    return ROOT / "examples" / "digits" / "eval.npz"


def _cuda_backends():
    from sdk.targets.cuda import installed_backends

    return installed_backends() or ["none"]


@pytest.fixture(scope="module", params=_cuda_backends())
def cuda(request):
    """An open CUDA backend (each installed one in turn); skips with the probe's reason where
    there is no GPU, or no backend package."""
    from sdk.targets.cuda import get_backend, probe_gpu

    probe = probe_gpu()
    if not probe.available:
        pytest.skip(f"no GPU: {probe.reason}")
    if request.param == "none":
        pytest.skip("no CUDA backend installed (pip install cuda-python)")
    with get_backend(request.param) as backend:
        yield backend
