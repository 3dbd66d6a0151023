"""CUDA backend on NVIDIA's cuda-python (``cuda.bindings.driver`` / ``nvrtc``, or the older
``cuda.cuda`` / ``cuda.nvrtc`` names of cuda-python < 12.8). Kernels compile with NVRTC: no nvcc,
no headers needed. Works on a GPU host where pycuda is absent.

Runs on the board too: Python 3.8.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ...errors import MissingDependencyError, TargetUnavailableError
from .base import CudaBackend, CudaError, DeviceBuffer, Event, Kernel, Stream

__all__ = ["CudaPythonBackend", "import_bindings"]


def import_bindings() -> Tuple[Any, Any]:
    """(driver, nvrtc) modules of cuda-python, new names first."""
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError:
        try:
            from cuda import cuda as driver, nvrtc  # cuda-python < 12.8
        except ImportError as exc:
            raise MissingDependencyError("the cuda-python CUDA backend", "cuda-python",
                                         "pip install cuda-python") from exc
    return driver, nvrtc


class CudaPythonBackend(CudaBackend):
    name = "cuda-python"
    module = "cuda"
    install = "pip install cuda-python"

    def __init__(self, device: int = 0):
        super().__init__(device)
        self._cu, self._nvrtc = import_bindings()
        cu = self._cu
        try:
            self._check(cu.cuInit(0), "cuInit")
            self._dev = self._check(cu.cuDeviceGet(self.device), "cuDeviceGet")
            self._ctx = self._check(cu.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
            self._check(cu.cuCtxPushCurrent(self._ctx), "cuCtxPushCurrent")
        except CudaError as exc:
            raise TargetUnavailableError(f"cuda-python cannot open GPU {self.device}: {exc.message}") from exc
        self._pinned_ptrs: Dict[int, int] = {}

    # -- error handling -------------------------------------------------------------------------------
    def _check(self, result: Any, what: str) -> Any:
        """cuda-python returns (err, *values): raise on error, return the value(s)."""
        if not isinstance(result, tuple):
            result = (result,)
        err, rest = result[0], result[1:]
        if int(err) != 0:
            name = str(err)
            try:
                if isinstance(err, self._cu.CUresult):
                    e, text = self._cu.cuGetErrorName(err)
                    name = text.decode() if int(e) == 0 else name
                else:
                    name = self._nvrtc.nvrtcGetErrorString(err)[1].decode()
            except Exception:
                pass
            raise CudaError(f"{what} failed: {name}")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def _push_context(self) -> None:
        self._check(self._cu.cuCtxPushCurrent(self._ctx), "cuCtxPushCurrent")

    def _pop_context(self) -> None:
        self._check(self._cu.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def _close_impl(self) -> None:
        cu = self._cu
        for ptr in list(self._pinned_ptrs):
            cu.cuMemFreeHost(ptr)
        self._pinned_ptrs.clear()
        cu.cuCtxPopCurrent()
        cu.cuDevicePrimaryCtxRelease(self._dev)

    # -- memory -----------------------------------------------------------------------------------
    def _alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = self._check(self._cu.cuMemAlloc(nbytes), "cuMemAlloc")
        return DeviceBuffer(self, int(ptr), nbytes, handle=ptr)

    def _free(self, buf: DeviceBuffer) -> None:
        self._check(self._cu.cuMemFree(buf._handle), "cuMemFree")

    def _pinned(self, shape, dtype) -> np.ndarray:
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        ptr = int(self._check(self._cu.cuMemHostAlloc(nbytes, 0), "cuMemHostAlloc"))
        self._pinned_ptrs[ptr] = nbytes
        raw = (ctypes.c_ubyte * nbytes).from_address(ptr)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)

    def _register(self, arr: np.ndarray) -> Any:
        self._check(self._cu.cuMemHostRegister(int(arr.ctypes.data), int(arr.nbytes), 0), "cuMemHostRegister")
        return int(arr.ctypes.data)

    def _unregister(self, ptr: int) -> None:
        self._check(self._cu.cuMemHostUnregister(ptr), "cuMemHostUnregister")

    def _sh(self, stream: Optional[Stream]):
        return stream.obj if stream is not None else self._cu.CUstream(0)

    def _htod(self, dst: int, src: np.ndarray, stream: Optional[Stream]) -> None:
        cu = self._cu
        if stream is None:
            self._check(cu.cuMemcpyHtoD(cu.CUdeviceptr(dst), src.ctypes.data, src.nbytes), "cuMemcpyHtoD")
        else:
            self._check(cu.cuMemcpyHtoDAsync(cu.CUdeviceptr(dst), src.ctypes.data, src.nbytes, stream.obj),
                        "cuMemcpyHtoDAsync")

    def _dtoh(self, dst: np.ndarray, src: int, stream: Optional[Stream]) -> None:
        cu = self._cu
        if stream is None:
            self._check(cu.cuMemcpyDtoH(dst.ctypes.data, cu.CUdeviceptr(src), dst.nbytes), "cuMemcpyDtoH")
        else:
            self._check(cu.cuMemcpyDtoHAsync(dst.ctypes.data, cu.CUdeviceptr(src), dst.nbytes, stream.obj),
                        "cuMemcpyDtoHAsync")

    def _memset_d32(self, dst: int, value: int, count: int, stream: Optional[Stream]) -> None:
        cu = self._cu
        self._check(cu.cuMemsetD32Async(cu.CUdeviceptr(dst), value, count, self._sh(stream)), "cuMemsetD32Async")
        if stream is None:
            self._ctx_sync()

    # -- streams and events -----------------------------------------------------------------------
    def _stream(self) -> Stream:
        s = self._check(self._cu.cuStreamCreate(0), "cuStreamCreate")
        return Stream(self, s, int(s))

    def _stream_sync(self, stream: Stream) -> None:
        self._check(self._cu.cuStreamSynchronize(stream.obj), "cuStreamSynchronize")

    def _stream_wait(self, stream: Stream, event: Event) -> None:
        self._check(self._cu.cuStreamWaitEvent(stream.obj, event.obj, 0), "cuStreamWaitEvent")

    def _event(self) -> Event:
        return Event(self, self._check(self._cu.cuEventCreate(0), "cuEventCreate"))

    def _event_record(self, event: Event, stream: Optional[Stream]) -> None:
        self._check(self._cu.cuEventRecord(event.obj, self._sh(stream)), "cuEventRecord")

    def _event_sync(self, event: Event) -> None:
        self._check(self._cu.cuEventSynchronize(event.obj), "cuEventSynchronize")

    def _event_elapsed(self, start: Event, end: Event) -> float:
        return self._check(self._cu.cuEventElapsedTime(start.obj, end.obj), "cuEventElapsedTime")

    def _ctx_sync(self) -> None:
        self._check(self._cu.cuCtxSynchronize(), "cuCtxSynchronize")

    # -- kernels ---------------------------------------------------------------------------------
    def _compile(self, source: str, name: str, options: List[str]) -> Any:
        """NVRTC: a CUBIN for this GPU's sm_XY when NVRTC knows it, else PTX for compute_XY."""
        image = nvrtc_compile(self._nvrtc, source, name, options, self.compute_capability())
        buf = np.frombuffer(image + b"\0", dtype=np.uint8)
        module = self._check(self._cu.cuModuleLoadData(buf.ctypes.data), f"cuModuleLoadData({name})")
        return (module, buf)

    def _function(self, module: Any, name: str) -> Kernel:
        fn = self._check(self._cu.cuModuleGetFunction(module[0], name.encode()), f"cuModuleGetFunction({name})")
        return Kernel(self, name, fn, module)

    def _launch(self, kernel: Kernel, grid, block, args, stream: Optional[Stream], shared_bytes: int) -> None:
        holders = [np.array([a]) for a in args]  # each argument's bytes, kept alive for the call
        ptrs = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        self._check(self._cu.cuLaunchKernel(kernel.obj, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                            shared_bytes, self._sh(stream), ptrs.ctypes.data, 0),
                    f"launch of {kernel.name}")

    def _bind_launch(self, kernel: Kernel, grid, block, args, shared_bytes: int):
        holders = [np.array([a]) for a in args]  # each argument's bytes, alive as long as the launch
        ptrs = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        cu, fn, params, null = self._cu, kernel.obj, int(ptrs.ctypes.data), self._cu.CUstream(0)
        what = f"launch of {kernel.name}"

        def launch(stream: Optional[Stream] = None, _keep=(holders, ptrs)) -> None:
            err = cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
                                    stream.obj if stream is not None else null, params, 0)
            if int(err[0]) != 0:
                self._check(err, what)

        return launch


_NVRTC_INVALID_OPTION = 5


def nvrtc_compile(nvrtc: Any, source: str, name: str, options: List[str], compute_capability: Tuple[int, int]) -> bytes:
    """Compile ``source`` with NVRTC (the ``nvrtc`` module of cuda-python) for a GPU of
    ``compute_capability``: a CUBIN for ``sm_XY``, or PTX for ``compute_XY`` when this NVRTC does
    not know the GPU (the driver then JIT-compiles it). Needs no GPU. Raises :class:`CudaError`
    with the compiler log."""
    major, minor = compute_capability

    def check(result, what):
        if int(result[0]) != 0:
            raise CudaError(f"{what} failed: {nvrtc.nvrtcGetErrorString(result[0])[1].decode()}")
        return result[1] if len(result) > 1 else None

    for arch, binary in ((f"sm_{major}{minor}", True), (f"compute_{major}{minor}", False)):
        prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
        try:
            opts = [o.encode() for o in options] + [f"--gpu-architecture={arch}".encode()]
            result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            code = int(result[0])
            if code == _NVRTC_INVALID_OPTION and binary:
                continue  # this NVRTC predates the GPU: fall back to PTX
            if code != 0:
                size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
                log = b" " * size
                check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
                text = log.decode(errors="replace").rstrip("\0 \n")
                raise CudaError(f"NVRTC could not compile {name} for {arch} ({' '.join(options)}): "
                                f"{nvrtc.nvrtcGetErrorString(result[0])[1].decode()}\n{text}")
            get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if binary
                             else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
            size = check(get_size(prog), "nvrtc size query")
            image = b" " * size
            check(get(prog, image), "nvrtc image query")
            return image if binary else image.rstrip(b"\0")
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
    raise CudaError(f"NVRTC does not accept the options {options} for {name}")
