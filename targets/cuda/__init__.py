"""A small internal CUDA layer: device memory, pinned host memory, streams, events, kernel launch.

Two backends behind one contract (:class:`CudaBackend`), chosen through a registry:
``pycuda`` (the usual choice on JetPack) and ``cuda-python`` (NVIDIA's bindings, NVRTC for
kernels). Nothing heavy is imported until a backend is created; :func:`probe_gpu` asks the driver
(``libcuda``) directly through ctypes, so "is there a GPU" needs neither package::

    from sdk.targets.cuda import get_backend
    with get_backend() as cuda:            # "auto": pycuda, else cuda-python
        buf = cuda.to_device(x)
        stream = cuda.stream()

Runs on the board too: Python 3.8.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Type, Union

from ...errors import InputError, MissingDependencyError, TargetUnavailableError
from ...probe import module_installed
from ...registry import Registry
from .base import CudaBackend, CudaError, DeviceBuffer, Event, Kernel, Stream
from .probe import GpuDevice, GpuProbe, probe_gpu

__all__ = [
    "CudaBackend", "CudaError", "DeviceBuffer", "Event", "Kernel", "Stream",
    "GpuDevice", "GpuProbe", "probe_gpu",
    "register_backend", "backend_names", "installed_backends", "get_backend", "require_gpu",
]

#: name -> CudaBackend subclass (``"module:Class"`` until first use); order = preference for "auto".
BACKENDS: "Registry[Type[CudaBackend]]" = Registry(
    "CUDA backend",
    {
        "pycuda": "sdk.targets.cuda.pycuda_backend:PyCudaBackend",
        "cuda-python": "sdk.targets.cuda.cudapython_backend:CudaPythonBackend",
    },
    entry_points="edgesdk.cuda_backends", known_label="known", reserved=("auto",),
)
#: name -> modules of which one must be findable for the backend to count as installed.
_PROBE_MODULES: Dict[str, Tuple[str, ...]] = {
    "pycuda": ("pycuda",),
    "cuda-python": ("cuda.bindings", "cuda.cuda"),
}
_INSTALL = "pip install cuda-python (or pycuda)"


def register_backend(name: str, backend: Union[str, Type[CudaBackend]], probe_modules: Tuple[str, ...] = ()) -> None:
    """Add a backend (a CudaBackend subclass or ``"module:Class"``)."""
    BACKENDS.register(name, backend)
    _PROBE_MODULES[name] = tuple(probe_modules)


def backend_names() -> List[str]:
    return BACKENDS.names()


def _installed(name: str) -> bool:
    mods = _PROBE_MODULES.get(name, ())
    return not mods or any(module_installed(m) for m in mods)


def installed_backends() -> List[str]:
    """Backends whose package is installed (checked with find_spec; nothing imported)."""
    return [n for n in BACKENDS.names() if _installed(n)]


def require_gpu(device: int = 0) -> GpuDevice:
    """The device ``device`` or :class:`TargetUnavailableError` saying why there is none."""
    probe = probe_gpu()
    if not probe.available:
        raise TargetUnavailableError(f"no usable NVIDIA GPU: {probe.reason}",
                                     "run on a machine with an NVIDIA GPU and its driver (e.g. a Jetson)")
    if not 0 <= device < len(probe.devices):
        raise InputError(f"GPU {device} does not exist", f"this machine has {len(probe.devices)} GPU(s)")
    return probe.devices[device]


def get_backend(name: Optional[str] = "auto", device: int = 0) -> CudaBackend:
    """Open a CUDA backend on ``device`` (its primary context). ``name``: ``"auto"`` (first
    installed of :func:`backend_names`), ``"pycuda"`` or ``"cuda-python"``.

    Raises :class:`TargetUnavailableError` when there is no GPU/driver, :class:`MissingDependencyError`
    when no backend package is installed, :class:`InputError` for an unknown name.
    """
    if name not in ("auto", None):
        name = BACKENDS.canonical(name)
    require_gpu(device)
    if name in ("auto", None):
        names = installed_backends()
        if not names:
            raise MissingDependencyError("CUDA buffers and kernels", "pycuda or cuda-python", _INSTALL)
        name = names[0]
    elif not _installed(name):
        raise MissingDependencyError(f"the {name} CUDA backend", name, f"pip install {name}")
    return BACKENDS.load(name)(device)
