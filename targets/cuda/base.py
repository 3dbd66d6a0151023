"""The CUDA layer's contract: what every backend (pycuda, cuda-python) provides.

Small on purpose: device memory, pinned host memory, streams, events, run-time compilation of a
``.cu`` source and kernel launch. Pointers are plain ints; kernel arguments are NumPy scalars
(``np.int32``, ``np.float32``, ...) or :class:`DeviceBuffer` (passed as its pointer).
Runs on the board too: Python 3.8, NumPy and the backend's package only.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, ClassVar, List, Optional, Sequence, Tuple, Union

import numpy as np

from ...errors import InputError, TargetError

__all__ = ["CudaBackend", "DeviceBuffer", "Stream", "Event", "Kernel", "CudaError", "kernel_args"]


class CudaError(TargetError):
    """A CUDA driver, NVRTC or compiler call failed (message names the CUDA error)."""


class DeviceBuffer:
    """``nbytes`` of device memory at ``ptr`` (an int). Freed by :meth:`free` or its backend's close."""

    def __init__(self, backend: "CudaBackend", ptr: int, nbytes: int, handle: Any = None):
        self.backend = backend
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self._handle = handle

    def free(self) -> None:
        if self._handle is not None:
            self.backend._on_this_thread()
            self.backend._free(self)
            self._handle = None

    def __int__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"<DeviceBuffer 0x{self.ptr:x} {self.nbytes} B>"


class Stream:
    """A CUDA stream; ``handle`` is the ``cudaStream_t`` as an int (what TensorRT takes)."""

    def __init__(self, backend: "CudaBackend", obj: Any, handle: int):
        self.backend = backend
        self.obj = obj
        self.handle = int(handle)

    def synchronize(self) -> None:
        self.backend._on_this_thread()
        self.backend._stream_sync(self)

    def wait(self, event: "Event") -> None:
        """Work enqueued on this stream after this call waits for ``event`` (recorded on any stream)."""
        self.backend._on_this_thread()
        self.backend._stream_wait(self, event)


class Event:
    """A CUDA event: ``record(stream)``, ``synchronize()``, ``elapsed_ms(later_event)``."""

    def __init__(self, backend: "CudaBackend", obj: Any):
        self.backend = backend
        self.obj = obj

    def record(self, stream: Optional[Stream] = None) -> "Event":
        self.backend._on_this_thread()
        self.backend._event_record(self, stream)
        return self

    def synchronize(self) -> None:
        self.backend._on_this_thread()
        self.backend._event_sync(self)

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        self.backend._on_this_thread()
        return float(self.backend._event_elapsed(self, end))


class Kernel:
    """A compiled ``extern "C"`` kernel: ``kernel(grid, block, args, stream=, shared_bytes=)``."""

    def __init__(self, backend: "CudaBackend", name: str, obj: Any, module: Any = None):
        self.backend = backend
        self.name = name
        self.obj = obj
        self._module = module  # keep the module alive

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
                 stream: Optional[Stream] = None, shared_bytes: int = 0) -> None:
        self.backend.launch(self, grid, block, args, stream=stream, shared_bytes=shared_bytes)


Arg = Union[np.generic, DeviceBuffer]


def kernel_args(args: Sequence[Arg]) -> List[np.generic]:
    """Kernel arguments as NumPy scalars: buffers become ``np.uint64`` pointers. A bare Python
    int or float is refused (its C type would be a guess)."""
    out: List[np.generic] = []
    for i, a in enumerate(args):
        if isinstance(a, DeviceBuffer):
            out.append(np.uint64(a.ptr))
        elif isinstance(a, np.generic):
            out.append(a)
        else:
            raise InputError(f"kernel argument {i} is a {type(a).__name__}: pass a NumPy scalar "
                             "(np.int32, np.float32, np.uint64 for pointers) or a DeviceBuffer")
    return out


def _dims(v: Sequence[int]) -> Tuple[int, int, int]:
    v = tuple(int(x) for x in v) + (1, 1, 1)
    return v[0], v[1], v[2]


class _ThreadBinding:
    """A backend's context pushed on one thread other than the opening one; popped when that
    thread ends (its thread-local storage is cleared on that thread), so pycuda's per-thread
    context stack is empty when the thread exits (pycuda aborts the process otherwise)."""

    def __init__(self, backend: "CudaBackend"):
        backend._push_context()
        self._pop: Optional[Callable[[], None]] = backend._pop_context

    def __del__(self) -> None:
        pop, self._pop = self._pop, None
        if pop is not None:
            try:
                pop()
            except Exception:  # noqa: BLE001 - the thread is ending; nothing to report to
                pass


class CudaBackend:
    """Base of a CUDA backend bound to one device's primary context (shared with TensorRT).

    A context manager: the context is retained and made current on creation, released by
    :meth:`close`. Any thread may use the backend: the first call on another thread makes the
    context current there (popped when that thread ends). Subclasses implement the
    ``_``-prefixed primitives.
    """

    name: ClassVar[str] = ""
    #: Module whose presence (find_spec, no import) says the backend is installed.
    module: ClassVar[str] = ""
    install: ClassVar[str] = ""

    def __init__(self, device: int = 0):
        self.device = int(device)
        self._closed = False
        self._buffers: List[DeviceBuffer] = []
        self._pinned_ranges: List[Tuple[int, int]] = []  # (start, end) of pinned/registered host memory
        self._registered: dict = {}  # host pointer -> backend handle of a registration
        self._threads = threading.local()
        self._threads.bound = True  # the opening thread: the subclass makes the context current

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "CudaBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for b in self._buffers:
            try:
                b.free()
            except Exception:  # freeing during teardown must not mask the real error
                pass
        self._buffers = []
        for ptr in list(self._registered):
            try:
                self._unregister(ptr)
            except Exception:
                pass
        self._registered = {}
        self._pinned_ranges = []
        self._close_impl()

    # -- public API ----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        """Device memory of ``nbytes`` (at least 1 byte is allocated)."""
        self._on_this_thread()
        buf = self._alloc(max(1, int(nbytes)))
        self._buffers.append(buf)
        return buf

    def to_device(self, arr: np.ndarray, stream: Optional[Stream] = None) -> DeviceBuffer:
        """A new device buffer holding ``arr``'s bytes (synchronous unless ``stream``)."""
        arr = np.ascontiguousarray(arr)
        buf = self.alloc(arr.nbytes)
        self.htod(buf, arr, stream)
        if stream is None:
            self.synchronize()
        return buf

    def pinned(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A page-locked host array (fast, asynchronous copies)."""
        self._on_this_thread()
        arr = self._pinned(tuple(int(s) for s in shape), np.dtype(dtype))
        self._pinned_ranges.append((int(arr.ctypes.data), int(arr.ctypes.data) + int(arr.nbytes)))
        return arr

    def register_host(self, arr: np.ndarray) -> np.ndarray:
        """Page-lock an existing C-contiguous host array in place (``cuMemHostRegister``), so copies
        from it are direct DMA, like from :meth:`pinned` memory; returns ``arr``. Undone by
        :meth:`unregister_host` or :meth:`close`. The array must stay alive while registered."""
        if not arr.flags.c_contiguous or arr.nbytes == 0:
            raise InputError("register_host needs a non-empty C-contiguous array")
        ptr = int(arr.ctypes.data)
        if ptr not in self._registered:
            self._on_this_thread()
            self._registered[ptr] = self._register(arr)
            self._pinned_ranges.append((ptr, ptr + int(arr.nbytes)))
        return arr

    def unregister_host(self, arr: np.ndarray) -> None:
        """Undo :meth:`register_host`."""
        ptr = int(arr.ctypes.data)
        if ptr in self._registered:
            self._on_this_thread()
            self._unregister(ptr)
            del self._registered[ptr]
            self._pinned_ranges = [r for r in self._pinned_ranges if r[0] != ptr]

    def is_pinned(self, arr: np.ndarray) -> bool:
        """True when ``arr``'s bytes lie in memory from :meth:`pinned` or :meth:`register_host`."""
        start = int(arr.ctypes.data)
        end = start + int(arr.nbytes)
        return any(lo <= start and end <= hi for lo, hi in self._pinned_ranges)

    def htod(self, dst: Union[DeviceBuffer, int], src: np.ndarray, stream: Optional[Stream] = None) -> None:
        """Copy ``src`` (C-contiguous) to device pointer ``dst``; asynchronous on ``stream``."""
        self._on_this_thread()
        if not src.flags.c_contiguous:
            raise InputError("htod needs a C-contiguous array")
        self._htod(int(dst), src, stream)

    def dtoh(self, dst: np.ndarray, src: Union[DeviceBuffer, int], stream: Optional[Stream] = None) -> None:
        """Copy device pointer ``src`` into ``dst`` (C-contiguous, ``dst.nbytes`` bytes)."""
        self._on_this_thread()
        if not dst.flags.c_contiguous:
            raise InputError("dtoh needs a C-contiguous array")
        self._dtoh(dst, int(src), stream)

    def memset_d32(self, dst: Union[DeviceBuffer, int], value: int, count: int, stream: Optional[Stream] = None) -> None:
        """Set ``count`` 32-bit words at ``dst`` to ``value``."""
        self._on_this_thread()
        self._memset_d32(int(dst), int(value), int(count), stream)

    def stream(self) -> Stream:
        self._on_this_thread()
        return self._stream()

    def event(self) -> Event:
        self._on_this_thread()
        return self._event()

    def synchronize(self) -> None:
        """Wait for all work on the device."""
        self._on_this_thread()
        self._ctx_sync()

    def compile(self, source: str, name: str = "kernel.cu", options: Sequence[str] = ()) -> Any:
        """Compile CUDA C ``source`` for this device; returns a module for :meth:`function`.
        Compile errors raise :class:`CudaError` with the compiler log."""
        self._on_this_thread()
        return self._compile(source, name, list(options))

    def function(self, module: Any, name: str) -> Kernel:
        self._on_this_thread()
        return self._function(module, name)

    def launch(self, kernel: Kernel, grid: Sequence[int], block: Sequence[int], args: Sequence[Arg],
               stream: Optional[Stream] = None, shared_bytes: int = 0) -> None:
        self._on_this_thread()
        self._launch(kernel, _dims(grid), _dims(block), kernel_args(args), stream, int(shared_bytes))

    def bind_launch(self, kernel: Kernel, grid: Sequence[int], block: Sequence[int], args: Sequence[Arg],
                    shared_bytes: int = 0) -> Callable[[Optional[Stream]], None]:
        """A launch with its arguments checked and packed once: the returned ``launch(stream)``
        enqueues ``kernel`` with exactly these arguments (the fast path for kernels launched every
        frame with the same buffers; a backend makes it one driver call)."""
        bound = self._bind_launch(kernel, _dims(grid), _dims(block), kernel_args(args), int(shared_bytes))
        threads = self._threads

        def launch(stream: Optional[Stream] = None) -> None:
            if not getattr(threads, "bound", False):
                self._on_this_thread()
            bound(stream)

        return launch

    def _on_this_thread(self) -> None:
        """Make the context current on the calling thread, once per thread (see the class doc)."""
        if not getattr(self._threads, "bound", False) and not self._closed:
            self._threads.bound = _ThreadBinding(self)

    def compute_capability(self) -> Tuple[int, int]:
        from .probe import probe_gpu

        devs = probe_gpu().devices
        return devs[self.device].compute_capability if self.device < len(devs) else (0, 0)

    # -- for subclasses ------------------------------------------------------------------------------
    def _close_impl(self) -> None: ...
    def _push_context(self) -> None: ...  # make the context current on this thread (a new thread)
    def _pop_context(self) -> None: ...  # undo _push_context on this thread
    def _alloc(self, nbytes: int) -> DeviceBuffer: raise NotImplementedError
    def _free(self, buf: DeviceBuffer) -> None: raise NotImplementedError
    def _pinned(self, shape, dtype) -> np.ndarray: raise NotImplementedError
    def _register(self, arr: np.ndarray) -> Any: raise NotImplementedError
    def _unregister(self, ptr: int) -> None: raise NotImplementedError
    def _htod(self, dst: int, src: np.ndarray, stream: Optional[Stream]) -> None: raise NotImplementedError
    def _dtoh(self, dst: np.ndarray, src: int, stream: Optional[Stream]) -> None: raise NotImplementedError
    def _memset_d32(self, dst: int, value: int, count: int, stream: Optional[Stream]) -> None: raise NotImplementedError
    def _stream(self) -> Stream: raise NotImplementedError
    def _stream_sync(self, stream: Stream) -> None: raise NotImplementedError
    def _stream_wait(self, stream: Stream, event: Event) -> None: raise NotImplementedError
    def _event(self) -> Event: raise NotImplementedError
    def _event_record(self, event: Event, stream: Optional[Stream]) -> None: raise NotImplementedError
    def _event_sync(self, event: Event) -> None: raise NotImplementedError
    def _event_elapsed(self, start: Event, end: Event) -> float: raise NotImplementedError
    def _ctx_sync(self) -> None: raise NotImplementedError
    def _compile(self, source: str, name: str, options: List[str]) -> Any: raise NotImplementedError
    def _function(self, module: Any, name: str) -> Kernel: raise NotImplementedError
    def _launch(self, kernel: Kernel, grid, block, args: List[np.generic], stream: Optional[Stream],
                shared_bytes: int) -> None: raise NotImplementedError

    def _bind_launch(self, kernel: Kernel, grid, block, args: List[np.generic],
                     shared_bytes: int) -> Callable[[Optional[Stream]], None]:
        def launch(stream: Optional[Stream] = None) -> None:
            self._launch(kernel, grid, block, args, stream, shared_bytes)

        return launch
