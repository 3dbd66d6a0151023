"""Finding, compiling and caching the ``.cu`` kernels for a CUDA backend.

Runs on the board too: Python 3.8.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from ..errors import InputError

__all__ = ["KERNEL_DIR", "COMPILE_OPTIONS", "kernel_sources", "kernel_source", "load_kernels"]

KERNEL_DIR = Path(__file__).resolve().parent

#: Compiler options per source (the same for nvcc and NVRTC). ``--fmad=false`` keeps the
#: post-processing arithmetic bit-identical to the NumPy reference.
COMPILE_OPTIONS: Dict[str, List[str]] = {
    "preprocess.cu": [],
    "postprocess.cu": ["--fmad=false"],
    "crops.cu": ["--fmad=false"],
}


def kernel_sources() -> List[Path]:
    """Every ``.cu`` file shipped in :mod:`sdk.kernels`."""
    return sorted(KERNEL_DIR.glob("*.cu"))


def kernel_source(name: str) -> str:
    path = KERNEL_DIR / name
    if not path.is_file():
        raise InputError(f"no kernel source '{name}'", f"known: {', '.join(p.name for p in kernel_sources())}")
    return path.read_text(encoding="utf-8")


def load_kernels(backend: Any, source: str, names: List[str]) -> Dict[str, Any]:
    """Compile ``source`` (a file name in :data:`KERNEL_DIR`) once per backend and return its
    kernels by name."""
    cache = backend.__dict__.setdefault("_edgesdk_modules", {})
    module = cache.get(source)
    if module is None:
        module = backend.compile(kernel_source(source), name=source, options=COMPILE_OPTIONS.get(source, []))
        cache[source] = module
    return {n: backend.function(module, n) for n in names}
