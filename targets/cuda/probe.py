"""Is there an NVIDIA GPU and driver here? Asked of the driver library itself (``libcuda``) through
ctypes: no Python CUDA package is imported, so the probe works with pycuda, cuda-python or neither.

Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

__all__ = ["GpuDevice", "GpuProbe", "probe_gpu", "driver_library_path"]

_LIB_NAMES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")
_CUDA_ERROR_NAMES = {
    3: "CUDA_ERROR_NOT_INITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY (the CUDA toolkit's stub, not a driver)",
    35: "CUDA_ERROR_INSUFFICIENT_DRIVER (the driver is older than this CUDA)", 100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE", 999: "CUDA_ERROR_UNKNOWN", 304: "CUDA_ERROR_OPERATING_SYSTEM",
    712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
}
_ATTR_CC_MAJOR, _ATTR_CC_MINOR, _ATTR_INTEGRATED = 75, 76, 18


@dataclass(frozen=True)
class GpuDevice:
    """One CUDA device: ``name``, compute capability ``(major, minor)``, ``integrated`` (Jetson),
    total memory in MiB."""

    index: int
    name: str
    compute_capability: Tuple[int, int]
    integrated: bool = False
    memory_mib: int = 0

    @property
    def sm(self) -> str:
        """``"sm_87"`` style architecture name."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


@dataclass(frozen=True)
class GpuProbe:
    """What :func:`probe_gpu` found: ``available`` and why not (``reason``), the driver's CUDA
    version (e.g. ``"12.2"``) and the devices."""

    available: bool
    reason: Optional[str] = None
    driver_version: Optional[str] = None
    devices: List[GpuDevice] = field(default_factory=list)
    library: Optional[str] = None


def driver_library_path() -> Optional[str]:
    """Where ``libcuda`` is, without loading it (None when not found)."""
    found = ctypes.util.find_library("cuda")
    if found:
        return found
    for d in ("/usr/lib/aarch64-linux-gnu/tegra", "/usr/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
              "/usr/lib64", "/usr/local/cuda/compat", "/usr/lib/wsl/lib"):
        p = os.path.join(d, "libcuda.so.1")
        if os.path.exists(p):
            return p
    return None


_lock = threading.Lock()
_cached: Optional[GpuProbe] = None


def probe_gpu(refresh: bool = False) -> GpuProbe:
    """Load ``libcuda``, call ``cuInit`` and list the devices. Cached after the first call.

    Never raises: ``available`` is False with a ``reason`` naming what is missing (no driver
    library, the toolkit's stub library, no device, a driver too old).
    """
    global _cached
    with _lock:
        if _cached is None or refresh:
            _cached = _probe()
        return _cached


def _err(code: int) -> str:
    return f"{_CUDA_ERROR_NAMES.get(code, 'CUresult')} ({code})"


def _probe() -> GpuProbe:
    lib = None
    tried = []
    for name in _LIB_NAMES + tuple(p for p in (driver_library_path(),) if p):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            tried.append(str(exc))
    if lib is None:
        return GpuProbe(False, reason="no NVIDIA driver: libcuda.so.1 cannot be loaded (no NVIDIA GPU, or its "
                                      "driver is not installed)")
    libname = getattr(lib, "_name", None)
    try:
        rc = lib.cuInit(0)
        if rc != 0:
            why = "no CUDA device found" if rc == 100 else f"cuInit failed: {_err(rc)}"
            return GpuProbe(False, reason=f"{why}; driver library {libname}", library=libname)
        ver = ctypes.c_int(0)
        lib.cuDriverGetVersion(ctypes.byref(ver))
        driver = f"{ver.value // 1000}.{(ver.value % 1000) // 10}"
        count = ctypes.c_int(0)
        rc = lib.cuDeviceGetCount(ctypes.byref(count))
        if rc != 0 or count.value == 0:
            return GpuProbe(False, reason="no CUDA device found", driver_version=driver, library=libname)
        devices = []
        for i in range(count.value):
            dev = ctypes.c_int(0)
            lib.cuDeviceGet(ctypes.byref(dev), i)
            buf = ctypes.create_string_buffer(256)
            lib.cuDeviceGetName(buf, 256, dev)
            major, minor, integ = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
            lib.cuDeviceGetAttribute(ctypes.byref(major), _ATTR_CC_MAJOR, dev)
            lib.cuDeviceGetAttribute(ctypes.byref(minor), _ATTR_CC_MINOR, dev)
            lib.cuDeviceGetAttribute(ctypes.byref(integ), _ATTR_INTEGRATED, dev)
            mem = ctypes.c_size_t(0)
            total = getattr(lib, "cuDeviceTotalMem_v2", None) or getattr(lib, "cuDeviceTotalMem", None)
            if total is not None:
                total(ctypes.byref(mem), dev)
            devices.append(GpuDevice(i, buf.value.decode(errors="replace"), (major.value, minor.value),
                                     bool(integ.value), int(mem.value) // (1 << 20)))
        return GpuProbe(True, driver_version=driver, devices=devices, library=libname)
    except (AttributeError, OSError) as exc:
        return GpuProbe(False, reason=f"the driver library {libname} is not usable: {exc}", library=libname)
