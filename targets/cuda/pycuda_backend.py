"""CUDA backend on pycuda (the usual choice on JetPack). Kernels compile with pycuda's
``SourceModule`` (nvcc: found on PATH or in /usr/local/cuda/bin).

Runs on the board too: Python 3.8.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import struct
from typing import Any, List, Optional

import numpy as np

from ...errors import MissingDependencyError, TargetUnavailableError
from .base import CudaBackend, CudaError, DeviceBuffer, Event, Kernel, Stream

__all__ = ["PyCudaBackend"]


def _import():
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        raise MissingDependencyError("the pycuda CUDA backend", "pycuda", "pip install pycuda") from exc
    return drv


def _driver_library() -> Any:
    """The CUDA driver library through ctypes (for the calls pycuda gets wrong)."""
    from .probe import probe_gpu

    return ctypes.CDLL(probe_gpu().library or "libcuda.so.1")


def find_nvcc() -> Optional[str]:
    """Path of ``nvcc``: on PATH, else the usual CUDA install places; None when absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if os.path.exists(p):
            return p
    return None


def _nvcc() -> str:
    found = find_nvcc()
    if found:
        return found
    raise CudaError("pycuda compiles kernels with nvcc, which is not on PATH",
                    "add /usr/local/cuda/bin to PATH, or use the cuda-python backend (NVRTC)")


class PyCudaBackend(CudaBackend):
    name = "pycuda"
    module = "pycuda"
    install = "pip install pycuda"

    def __init__(self, device: int = 0):
        super().__init__(device)
        drv = self._drv = _import()
        self._host_allocs: List[Any] = []
        try:
            drv.init()
            self._ctx = drv.Device(self.device).retain_primary_context()
            self._ctx.push()
        except drv.Error as exc:
            raise TargetUnavailableError(f"pycuda cannot open GPU {self.device}: {exc}") from exc

    def _close_impl(self) -> None:
        """Free the pinned host memory this backend allocated, then pop and detach the context, so
        no context is left on pycuda's stack (pycuda aborts the process at exit otherwise)."""
        ctx, self._ctx = self._ctx, None
        if ctx is None:
            return
        for host in self._host_allocs:
            try:
                host.base.free()
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
        self._host_allocs = []
        for step in (self._drv.Context.synchronize, ctx.pop, ctx.detach):
            try:
                step()
            except Exception:  # noqa: BLE001 - a failed step must not keep the others from running
                pass

    def _push_context(self) -> None:
        self._call("context push", self._ctx.push)

    def _pop_context(self) -> None:
        self._call("context pop", self._drv.Context.pop)

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except self._drv.Error as exc:
            raise CudaError(f"CUDA {what} failed: {exc}") from exc

    def _alloc(self, nbytes: int) -> DeviceBuffer:
        a = self._call("allocation", self._drv.mem_alloc, nbytes)
        return DeviceBuffer(self, int(a), nbytes, handle=a)

    def _free(self, buf: DeviceBuffer) -> None:
        buf._handle.free()

    def _pinned(self, shape, dtype) -> np.ndarray:
        arr = self._call("pinned allocation", self._drv.pagelocked_empty, shape, dtype)
        self._host_allocs.append(arr)
        return arr

    def _register(self, arr: np.ndarray) -> Any:
        # Straight to the driver: pycuda's register_host_memory registers the memory, then sets the
        # base of an array that already has one and raises SystemError ("Cannot set the NumPy array
        # 'base' dependency more than once": pycuda 2026.1, NumPy 2.5, on an H200), leaking the
        # registration. The memory is registered in pycuda's context (current on this thread).
        lib = _driver_library()
        self._driver_call("cuMemHostRegister", lib.cuMemHostRegister_v2, ctypes.c_void_p(int(arr.ctypes.data)),
                          ctypes.c_size_t(int(arr.nbytes)), ctypes.c_uint(0))
        return lib

    def _unregister(self, ptr: int) -> None:
        lib = self._registered[ptr]
        self._driver_call("cuMemHostUnregister", lib.cuMemHostUnregister, ctypes.c_void_p(ptr))

    def _driver_call(self, what: str, fn, *args) -> None:
        rc = int(fn(*args))
        if rc != 0:
            from .probe import _err

            raise CudaError(f"CUDA {what} failed: {_err(rc)}")

    def _htod(self, dst: int, src: np.ndarray, stream: Optional[Stream]) -> None:
        if stream is None:
            self._call("copy to device", self._drv.memcpy_htod, dst, src)
        else:
            self._call("copy to device", self._drv.memcpy_htod_async, dst, src, stream.obj)

    def _dtoh(self, dst: np.ndarray, src: int, stream: Optional[Stream]) -> None:
        if stream is None:
            self._call("copy to host", self._drv.memcpy_dtoh, dst, src)
        else:
            self._call("copy to host", self._drv.memcpy_dtoh_async, dst, src, stream.obj)

    def _memset_d32(self, dst: int, value: int, count: int, stream: Optional[Stream]) -> None:
        if stream is None:
            self._call("memset", self._drv.memset_d32, dst, value, count)
        else:
            self._call("memset", self._drv.memset_d32_async, dst, value, count, stream.obj)

    def _stream(self) -> Stream:
        s = self._call("stream creation", self._drv.Stream)
        return Stream(self, s, s.handle)

    def _stream_sync(self, stream: Stream) -> None:
        self._call("stream synchronize", stream.obj.synchronize)

    def _stream_wait(self, stream: Stream, event: Event) -> None:
        self._call("stream wait", stream.obj.wait_for_event, event.obj)

    def _event(self) -> Event:
        return Event(self, self._call("event creation", self._drv.Event))

    def _event_record(self, event: Event, stream: Optional[Stream]) -> None:
        self._call("event record", event.obj.record, stream.obj if stream is not None else None)

    def _event_sync(self, event: Event) -> None:
        self._call("event synchronize", event.obj.synchronize)

    def _event_elapsed(self, start: Event, end: Event) -> float:
        return self._call("event timing", end.obj.time_since, start.obj)

    def _ctx_sync(self) -> None:
        self._call("synchronize", self._drv.Context.synchronize)

    def _compile(self, source: str, name: str, options: List[str]) -> Any:
        from pycuda.compiler import SourceModule
        from pycuda.driver import CompileError  # pycuda.compiler raises it, pycuda.driver defines it

        try:
            return SourceModule(source, nvcc=_nvcc(), options=options, no_extern_c=True)
        except CompileError as exc:
            raise CudaError(f"nvcc could not compile {name}: {exc}") from exc
        except self._drv.Error as exc:
            raise CudaError(f"CUDA could not load {name}: {exc}") from exc

    def _function(self, module: Any, name: str) -> Kernel:
        return Kernel(self, name, self._call(f"lookup of kernel {name}", module.get_function, name), module)

    def _bind_launch(self, kernel: Kernel, grid, block, args, shared_bytes: int):
        """Arguments packed once (as pycuda's prepared calls do) and handed to the function's
        launcher; pycuda without ``Function._launch_kernel`` gets a prepared call."""
        fn = kernel.obj
        fmt = "".join(a.dtype.char for a in args)
        g = grid[:2] if grid[2] == 1 else grid
        raw = getattr(fn, "_launch_kernel", None)
        what = f"launch of {kernel.name}"
        if raw is None:
            fn.prepare(fmt)
            values = [a.item() for a in args]

            def launch(stream: Optional[Stream] = None) -> None:
                self._call(what, fn.prepared_async_call, g, block, stream.obj if stream is not None else None, *values)

            return launch
        buf = struct.pack(fmt, *[a.item() for a in args])

        def launch_packed(stream: Optional[Stream] = None) -> None:
            self._call(what, raw, g, block, buf, shared_bytes, stream.obj if stream is not None else None)

        return launch_packed

    def _launch(self, kernel: Kernel, grid, block, args, stream: Optional[Stream], shared_bytes: int) -> None:
        self._call(f"launch of {kernel.name}", kernel.obj, *args, grid=grid[:2] if grid[2] == 1 else grid,
                   block=block, shared=shared_bytes, stream=stream.obj if stream is not None else None)
