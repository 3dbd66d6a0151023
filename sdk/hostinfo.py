"""Facts about the machine a measurement ran on (CPU, cores, OS, runtime versions).

Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import os
import platform
from typing import Dict, Iterable, Optional

from .probe import dist_version

__all__ = ["host_info", "cpu_model"]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, incl. ARM ``Hardware``/``Model``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            fields = {}
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "Hardware", "CPU part") and key not in fields:
                    fields[key] = value.strip()
        for key in ("model name", "Model", "Hardware"):
            if fields.get(key):
                return fields[key]
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_info(runtimes: Iterable[str] = ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "ai-edge-litert",
                                          "tflite-runtime", "tensorflow", "tensorrt", "pycuda", "cuda-python")) -> Dict[str, object]:
    """CPU model, logical cores (and those this process may use), OS, Python, and the versions
    of the named distributions that are installed (metadata only, nothing imported)."""
    try:
        usable: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    versions = {}
    for dist in runtimes:
        v = dist_version(dist)
        if v is not None:
            versions[dist] = v
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "machine": platform.machine(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "runtimes": versions,
    }
