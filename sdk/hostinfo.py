"""Facts about the machine a measurement ran on (CPU, cores, OS, runtime versions).

Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
from typing import Dict, FrozenSet, Iterable, Optional, Set, Tuple

from .probe import dist_version, module_installed

__all__ = ["host_info", "cpu_model", "cpu_flags", "tensorrt_version", "emulation", "TENSORRT_DISTS"]

#: Distributions that carry TensorRT's Python bindings or libraries (pip), newest names first.
TENSORRT_DISTS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11", "tensorrt-lean", "tensorrt-libs",
                  "tensorrt-cu13-libs", "tensorrt-cu12-libs", "tensorrt-cu13-bindings", "tensorrt-cu12-bindings",
                  "tensorrt-bindings", "nvidia-tensorrt")
#: Debian packages of JetPack / NVIDIA's apt repository that carry TensorRT.
_TENSORRT_DEBS = ("python3-libnvinfer", "tensorrt", "libnvinfer-bin")


def _deb_version(package: str) -> Optional[str]:
    try:
        out = subprocess.run(["dpkg-query", "--showformat=${Version}", "--show", package], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"(\d+(?:\.\d+)+)", out.strip())
    return m.group(1) if m else None


def tensorrt_version(import_module: bool = False, dpkg: bool = False) -> Optional[str]:
    """TensorRT's version here, or None: pip metadata of :data:`TENSORRT_DISTS` (cheap, nothing
    imported); then, when asked, ``tensorrt.__version__`` (``import_module``: JetPack's apt bindings
    carry no pip metadata; importing loads the libraries, seconds) and the Debian packages
    (``dpkg``). The one probe of the SDK: the target, the host facts and the board agent use it."""
    v = dist_version(*TENSORRT_DISTS)
    if v:
        return v
    if import_module and module_installed("tensorrt"):
        try:
            import tensorrt  # noqa: PLC0415 - heavy, only when asked

            return str(tensorrt.__version__)
        except Exception:  # noqa: BLE001 - a broken install is reported as unknown
            pass
    if dpkg:
        for deb in _TENSORRT_DEBS:
            v = _deb_version(deb)
            if v:
                return v
    return None


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


_ARCH = {"aarch64": "aarch64", "arm64": "aarch64", "x86_64": "x86_64", "amd64": "x86_64", "i686": "x86",
         "i386": "x86", "armv7l": "arm", "armv8l": "arm", "riscv64": "riscv64", "ppc64le": "ppc64le"}
_X86_VENDORS = ("GenuineIntel", "AuthenticAMD")


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def emulation(proc: str = "/proc") -> Optional[Dict[str, str]]:
    """How this process is emulated, or None when it runs natively (or nothing says otherwise).

    Under user-mode emulation (qemu-user through binfmt_misc, e.g. an arm64 userland on an x86-64
    machine) the process sees its own architecture in ``uname`` (``platform.machine()``), while
    the kernel's (``/proc/sys/kernel/arch``) and the CPU's (``/proc/cpuinfo``'s vendor) are the
    host's. Then every timing measures the emulator, never the board: results carry this dict
    (``host``/``device`` facts) and reports label them."""
    machine = platform.machine()
    mine = _ARCH.get(machine.lower(), machine.lower())
    kernel = (_read(os.path.join(proc, "sys/kernel/arch")) or "").strip()
    host = _ARCH.get(kernel.lower(), kernel.lower()) if kernel else ""
    evidence = ""
    if host and host != mine:
        evidence = f"{proc}/sys/kernel/arch is {kernel}"
    elif mine in ("aarch64", "arm"):
        cpuinfo = _read(os.path.join(proc, "cpuinfo")) or ""
        vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
        if vendor and vendor.group(1) in _X86_VENDORS:
            host = "x86_64"
            evidence = f"{proc}/cpuinfo names an x86 CPU ({vendor.group(1)})"
    if not evidence:
        return None
    return {"kind": "user-mode emulation (qemu-user)", "process_machine": machine, "kernel_machine": host,
            "evidence": evidence,
            "note": "timings measure the emulator on the host's CPU, not this board's speed"}


def cpu_flags() -> Tuple[str, FrozenSet[str]]:
    """This CPU's architecture (``platform.machine()``: ``x86_64``, ``aarch64``) and its feature
    flags as ``/proc/cpuinfo`` lists them: ``flags`` on x86, ``Features`` on ARM, the key of this
    process's architecture only (under qemu-user an aarch64 process reads the x86 host's cpuinfo:
    no flags, rather than the host's); empty elsewhere."""
    machine = platform.machine().lower()
    key = "Features" if machine.startswith(("aarch64", "arm")) else "flags"
    flags: Set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == key:
                    flags.update(value.split())
                    break
    except OSError:
        pass
    return machine, frozenset(flags)


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
        v = tensorrt_version() if dist == "tensorrt" else dist_version(dist)
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
        "emulation": emulation(),
    }
