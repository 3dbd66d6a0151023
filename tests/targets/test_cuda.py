"""The CUDA layer: the driver probe, the backend registry and its errors here; memory, streams,
events and kernel launch on a GPU (marked ``gpu``, skipped with the probe's reason elsewhere)."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from sdk.errors import InputError, TargetUnavailableError
from sdk.targets.cuda import (DeviceBuffer, backend_names, get_backend, installed_backends, probe_gpu,
                              require_gpu)
from sdk.targets.cuda.base import CudaBackend, Kernel, Stream, kernel_args

_PROBE = probe_gpu()


def test_probe_never_raises_and_explains():
    p = probe_gpu(refresh=True)
    assert isinstance(p.available, bool)
    if not p.available:
        assert p.reason and ("driver" in p.reason or "device" in p.reason or "cuInit" in p.reason)
    else:
        assert p.devices and p.devices[0].compute_capability >= (3, 0)


def test_backend_registry():
    assert backend_names()[:2] == ["pycuda", "cuda-python"]
    assert set(installed_backends()) <= set(backend_names())
    with pytest.raises(InputError, match="known: auto, pycuda, cuda-python"):
        get_backend("opencl")


@pytest.mark.skipif(_PROBE.available, reason="this machine has a GPU")
def test_no_gpu_errors_clearly():
    with pytest.raises(TargetUnavailableError, match="no usable NVIDIA GPU"):
        get_backend()
    with pytest.raises(TargetUnavailableError, match="no usable NVIDIA GPU"):
        require_gpu()


def test_kernel_args_types():
    class FakeBackend:  # DeviceBuffer only needs an owner to free through
        def _free(self, buf):
            pass

    buf = DeviceBuffer(FakeBackend(), 0x1000, 16, handle=None)
    out = kernel_args([buf, np.int32(3), np.float32(0.5)])
    assert out[0] == np.uint64(0x1000) and out[0].dtype == np.uint64
    assert out[1].dtype == np.int32 and out[2].dtype == np.float32
    with pytest.raises(InputError, match="NumPy scalar"):
        kernel_args([3])


class _ThreadRecorder(CudaBackend):
    """Records which thread pushed, used and popped the context (no GPU)."""

    name = "thread recorder (no GPU)"

    def __init__(self):
        super().__init__(0)
        self.log = []

    def _note(self, what):
        self.log.append((what, threading.get_ident()))

    def _push_context(self):
        self._note("push")

    def _pop_context(self):
        self._note("pop")

    def _alloc(self, nbytes):
        self._note("alloc")
        return DeviceBuffer(self, 0x1000, nbytes, handle=None)

    def _stream(self):
        return Stream(self, None, 0)

    def _stream_sync(self, stream):
        self._note("sync")

    def _launch(self, kernel, grid, block, args, stream, shared_bytes):
        self._note("launch")


def test_other_threads_get_the_context_and_give_it_back():
    """The first call on a thread other than the opening one pushes the context there; the
    thread's end pops it on that thread (pycuda aborts a process whose thread exits with a pushed
    context; without the push, a pipeline stage thread got "invalid device context" on the GPU)."""
    be = _ThreadRecorder()
    main = threading.get_ident()
    be.alloc(4)
    be.stream().synchronize()
    assert be.log == [("alloc", main), ("sync", main)]  # the opening thread pushes nothing more
    kern = Kernel(be, "k", None)
    launch = be.bind_launch(kern, (1,), (1,), [np.int32(1)])

    both = threading.Barrier(2)

    def work():
        both.wait()  # both alive at once: two distinct thread idents
        be.alloc(4)
        stream = be.stream()
        stream.synchronize()
        launch(stream)
        kern((1,), (1,), [np.int32(2)])

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in threads:  # joined: each thread's context is popped already, by that thread
        assert [w for w, tid in be.log if tid == t.ident] == ["push", "alloc", "sync", "launch", "launch", "pop"]
    be.log.clear()
    t = threading.Thread(target=launch)  # a bound launch as a thread's first call binds too
    t.start()
    t.join()
    assert [w for w, _ in be.log] == ["push", "launch", "pop"]
    be.close()
    be.log.clear()
    t = threading.Thread(target=lambda: be.stream().synchronize())  # closed: nothing to push
    t.start()
    t.join()
    assert [w for w, _ in be.log] == ["sync"]


def test_imports_stay_light():
    """Importing the CUDA layer, the TensorRT target and the kernels loads no heavy package."""
    code = ("import sys, sdk.targets.cuda, sdk.targets.tensorrt, sdk.targets.tensorrt.session, "
            "sdk.targets.tensorrt.build, sdk.targets.tensorrt.cache, sdk.kernels, sdk.kernels.reference, "
            "sdk.kernels.preprocess, sdk.kernels.postprocess, sdk.targets.cuda.pycuda_backend, "
            "sdk.targets.cuda.cudapython_backend\n"
            "heavy = [m for m in ('tensorrt', 'pycuda', 'cuda.bindings', 'cuda.cuda', 'cv2', 'onnx', 'onnxruntime') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# -- on a GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_copies_round_trip(cuda):
    x = np.arange(1000, dtype=np.float32)
    buf = cuda.to_device(x)
    y = np.empty_like(x)
    cuda.dtoh(y, buf)
    np.testing.assert_array_equal(x, y)
    pinned = cuda.pinned((10, 100), np.float32)
    stream = cuda.stream()
    pinned[...] = 7
    cuda.htod(buf, pinned, stream)
    cuda.dtoh(y, buf, stream)
    stream.synchronize()
    assert (y == 7).all()


@pytest.mark.gpu
def test_kernel_launch_and_events(cuda):
    src = 'extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {' \
          ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }'
    kern = cuda.function(cuda.compile(src, "axpy.cu"), "axpy")
    n = 100_000
    x, y = np.random.default_rng(0).random((2, n), dtype=np.float32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    stream = cuda.stream()
    start, end = cuda.event(), cuda.event()
    start.record(stream)
    kern(((n + 255) // 256,), (256,), [np.float32(2.0), dx, dy, np.int32(n)], stream=stream)
    end.record(stream)
    end.synchronize()
    assert start.elapsed_ms(end) >= 0.0
    out = np.empty_like(y)
    cuda.dtoh(out, dy)
    np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)
    cuda.memset_d32(dy, 0, n)
    cuda.dtoh(out, dy)
    assert not out.any()


@pytest.mark.gpu
def test_a_backend_works_from_other_threads(cuda):
    """Allocate, copy, launch and synchronise from threads that did not open the backend (the
    pipeline runner's stage threads do; they failed with "invalid device context")."""
    src = 'extern "C" __global__ void inc(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;' \
          ' if (i < n) y[i] += 1.0f; }'
    kern = cuda.function(cuda.compile(src, "inc.cu"), "inc")
    shared = cuda.to_device(np.zeros(64, np.float32))
    launch = cuda.bind_launch(kern, (1,), (64,), [shared, np.int32(64)])
    errors, results = [], []

    def work():
        try:
            x = np.arange(256, dtype=np.float32)
            buf = cuda.to_device(x)
            stream = cuda.stream()
            kern((1,), (256,), [buf, np.int32(256)], stream=stream)
            launch(stream)
            stream.synchronize()
            out = np.empty_like(x)
            cuda.dtoh(out, buf)
            results.append(bool((out == x + 1).all()))
            buf.free()
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [True] * 3
    y = np.empty(64, np.float32)
    cuda.dtoh(y, shared)
    assert (y == 3).all()


@pytest.mark.gpu
def test_compile_error_is_clear(cuda):
    from sdk.targets.cuda import CudaError

    with pytest.raises(CudaError, match="compile"):
        cuda.compile('extern "C" __global__ void k() { nope = 1; }', "bad.cu")
