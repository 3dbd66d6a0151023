"""Every shipped ``.cu`` compiles: with nvcc for Orin (sm_87), sm_75 and sm_90 (H100/H200) when nvcc is present, and
with NVRTC (the run-time path of the cuda-python backend) when libnvrtc loads. Neither needs a GPU."""
from __future__ import annotations

import subprocess

import pytest

from tests import tiers

from sdk.kernels.loader import COMPILE_OPTIONS, kernel_sources

SOURCES = kernel_sources()


def _nvcc():
    from sdk.targets.cuda.pycuda_backend import (
        find_nvcc,  # imports no pycuda at module level
    )

    return find_nvcc()


def test_kernel_sources_shipped():
    assert {p.name for p in SOURCES} >= {"preprocess.cu", "postprocess.cu"}


@tiers.needs("nvcc", _nvcc() is not None, "nvcc not found (no CUDA toolkit on this machine)")
@pytest.mark.parametrize("arch", ["sm_87", "sm_75", "sm_90"])
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles(src, arch, tmp_path):
    cmd = [_nvcc(), f"-arch={arch}", "-c", str(src), "-o", str(tmp_path / "k.o"), "-Werror", "all-warnings",
           *COMPILE_OPTIONS.get(src.name, [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def _nvrtc():
    """cuda-python's NVRTC module and None, or None and why it is not usable (the error, not swallowed)."""
    try:
        from sdk.targets.cuda.cudapython_backend import import_bindings

        _, nvrtc = import_bindings()
        nvrtc.nvrtcVersion()
        return nvrtc, None
    except Exception as exc:  # noqa: BLE001 - any failure to load is the reason the tier cannot run
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


NVRTC, WHY_NO_NVRTC = _nvrtc()
needs_nvrtc = tiers.needs("nvrtc", NVRTC is not None,
                          f"cuda-python's NVRTC is not usable here (cuda-python or libnvrtc missing): {WHY_NO_NVRTC}")


@needs_nvrtc
@pytest.mark.parametrize("cc", [(8, 7), (7, 5), (9, 0)])
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_nvrtc_compiles(src, cc):
    from sdk.targets.cuda.cudapython_backend import nvrtc_compile

    image = nvrtc_compile(NVRTC, src.read_text(), src.name, COMPILE_OPTIONS.get(src.name, []), cc)
    assert image[:4] == b"\x7fELF"  # a CUBIN for sm_XY


@needs_nvrtc
def test_nvrtc_compile_error_shows_log():
    from sdk.targets.cuda import CudaError
    from sdk.targets.cuda.cudapython_backend import nvrtc_compile

    with pytest.raises(CudaError, match="undefined"):
        nvrtc_compile(NVRTC, 'extern "C" __global__ void k() { undefined_thing = 1; }', "bad.cu", [], (8, 7))
