from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.quantize import qmodels


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Each test gets its own calibration cache folder."""
    monkeypatch.setenv("EDGESDK_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def qdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("qmodels")


@pytest.fixture(scope="session")
def residual_model(qdir) -> Path:
    return qmodels.residual_net(qdir / "residual.onnx")


@pytest.fixture(scope="session")
def residual_calib(qdir) -> Path:
    p = qdir / "residual_calib.npz"
    np.savez(p, x=qmodels.make_data(48, (3, 12, 12), seed=1))
    return p


@pytest.fixture(scope="session")
def residual_eval(qdir) -> Path:
    p = qdir / "residual_eval.npz"
    np.savez(p, x=qmodels.make_data(32, (3, 12, 12), seed=2))
    return p


@pytest.fixture(scope="session")
def bn_model(qdir) -> Path:
    return qmodels.bn_convt_net(qdir / "bn_convt.onnx")


@pytest.fixture(scope="session")
def bn_calib(qdir) -> Path:
    p = qdir / "bn_calib.npz"
    np.savez(p, x=qmodels.make_data(16, (3, 8, 8), seed=3))
    return p
