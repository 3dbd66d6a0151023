"""What a board has: OS, Python, NumPy, runtimes, L4T/JetPack, CUDA, TensorRT, power mode, whether
clocks are locked, temperatures and power sensors.

Every file is read under ``root`` (``"/"`` on a board; a fake tree in tests), and every command
runs with a timeout; a fact that cannot be found is ``None``, never a guess. Runs on the board:
Python 3.8, standard library (NumPy for its version).
"""
from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from ...hostinfo import cpu_flags, host_info
from ...hostinfo import tensorrt_version as _tensorrt_version
from ...probe import dist_version
from .power.base import read_number, read_text, under

__all__ = ["device_facts", "parse_l4t_release", "jetpack_for_l4t", "parse_nvpmodel_query",
           "parse_nvpmodel_conf", "parse_nvcc_version", "temperatures", "clocks_locked", "power_mode"]

#: L4T release -> JetPack release (NVIDIA's release notes). Unknown point releases fall back to
#: the major line (``_JETPACK_LINE``).
_JETPACK = {
    "32.6.1": "4.6", "32.7.1": "4.6.1", "32.7.2": "4.6.2", "32.7.3": "4.6.3", "32.7.4": "4.6.4",
    "32.7.5": "4.6.5", "32.7.6": "4.6.6",
    "35.1.0": "5.0.2", "35.2.1": "5.1", "35.3.1": "5.1.1", "35.4.1": "5.1.2", "35.5.0": "5.1.3",
    "35.6.0": "5.1.4",
    "36.3.0": "6.0", "36.4.0": "6.1", "36.4.3": "6.2", "36.4.4": "6.2.1",
}
_JETPACK_LINE = {"32.7": "4.6.x", "32": "4.x", "35": "5.x", "36": "6.x", "38": "7.x", "39": "7.x"}

#: devfreq ``device/of_node/name`` of Jetson GPUs.
GPU_NODES = ("gv11b", "gp10b", "ga10b", "gb10b", "gpu")


def _run(cmd: List[str], timeout: float = 10.0) -> Optional[str]:
    """stdout of ``cmd`` when it exists and exits 0 within ``timeout`` s, else None."""
    exe = shutil.which(cmd[0]) if not os.path.isabs(cmd[0]) else (cmd[0] if os.access(cmd[0], os.X_OK) else None)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe] + cmd[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


# -- L4T / JetPack ------------------------------------------------------------------------------------
def parse_l4t_release(text: str) -> Optional[str]:
    """``# R35 (release), REVISION: 4.1, ...`` -> ``"35.4.1"``."""
    m = re.search(r"R(\d+)\s*\(\w+\),\s*REVISION:\s*([\d.]+)", text)
    return "%s.%s" % (m.group(1), m.group(2)) if m else None


def jetpack_for_l4t(l4t: Optional[str]) -> Optional[str]:
    """The JetPack release of an L4T release (``35.4.1`` -> ``5.1.2``); a line (``5.x``) for an
    unknown point release; None for None."""
    if not l4t:
        return None
    parts = l4t.split(".")
    if len(parts) == 2:
        parts.append("0")
    full = ".".join(parts[:3])
    if full in _JETPACK:
        return _JETPACK[full]
    return _JETPACK_LINE.get(".".join(parts[:2])) or _JETPACK_LINE.get(parts[0])


def l4t_version(root: str) -> Tuple[Optional[str], Optional[str]]:
    """(L4T release, where it came from): ``/etc/nv_tegra_release``, else dpkg's nvidia-l4t-core."""
    text = read_text(under(root, "/etc/nv_tegra_release"))
    if text:
        v = parse_l4t_release(text.splitlines()[0])
        if v:
            return v, "/etc/nv_tegra_release"
    if root in ("", "/"):
        out = _run(["dpkg-query", "--showformat=${Version}", "--show", "nvidia-l4t-core"])
        m = re.match(r"(\d+\.\d+(?:\.\d+)?)", out.strip()) if out else None
        if m:
            return m.group(1), "dpkg nvidia-l4t-core"
    return None, None


# -- CUDA / TensorRT ------------------------------------------------------------------------------------
def parse_nvcc_version(text: str) -> Optional[str]:
    """``Cuda compilation tools, release 12.2, V12.2.140`` -> ``"12.2.140"``."""
    m = re.search(r"\bV(\d+\.\d+(?:\.\d+)?)", text) or re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else None


def cuda_version(root: str) -> Optional[str]:
    text = read_text(under(root, "/usr/local/cuda/version.txt"))
    if text:
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
        if m:
            return m.group(1)
    text = read_text(under(root, "/usr/local/cuda/version.json"))
    if text:
        try:
            return str(json.loads(text)["cuda"]["version"])
        except (ValueError, KeyError, TypeError):
            pass
    if root in ("", "/"):
        for nvcc in ("nvcc", "/usr/local/cuda/bin/nvcc"):
            out = _run([nvcc, "--version"])
            if out and parse_nvcc_version(out):
                return parse_nvcc_version(out)
    return None


def cuda_driver(root: str, l4t: Optional[str]) -> Optional[str]:
    """The NVIDIA driver that lets CUDA run: the kernel module's version (``/proc/driver/nvidia/
    version``), ``"l4t"`` on Jetson (the driver is part of L4T), else None (no driver: a CUDA
    toolkit alone cannot run anything)."""
    text = read_text(under(root, "/proc/driver/nvidia/version"))
    if text:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text) or \
            re.search(r"(\d{3,}\.\d+(?:\.\d+)?)", text)
        return m.group(1) if m else "unknown version"
    if l4t:
        return "l4t"
    return None


def cuda_facts(root: str, l4t: Optional[str]) -> Dict[str, Any]:
    """``cuda`` (the toolkit's version, only where a driver can run it), ``cuda_toolkit``,
    ``cuda_driver`` and, for a toolkit without a driver, ``cuda_note``."""
    toolkit = cuda_version(root)
    driver = cuda_driver(root, l4t)
    out: Dict[str, Any] = {"cuda": toolkit if driver else None, "cuda_toolkit": toolkit, "cuda_driver": driver}
    if toolkit and not driver:
        out["cuda_note"] = "toolkit only, no driver: CUDA %s is installed but no NVIDIA driver is loaded" % toolkit
    return out


def tensorrt_version() -> Optional[str]:
    """TensorRT's version on this board (pip metadata, the module, then dpkg): :func:`sdk.hostinfo.tensorrt_version`."""
    return _tensorrt_version(import_module=True, dpkg=True)


def runtimes() -> Dict[str, Any]:
    """Versions of the inference runtimes and CUDA bindings installed (metadata only), and the
    SDK targets available here (from the target registry)."""
    versions = {}
    for dist in ("numpy", "onnxruntime", "onnxruntime-gpu", "tflite-runtime", "ai-edge-litert", "tensorflow",
                 "pycuda", "cuda-python", "cuda-bindings"):
        v = dist_version(dist)
        if v:
            versions[dist] = v
    trt = tensorrt_version()
    if trt:
        versions["tensorrt"] = trt
    targets: Dict[str, Any] = {}
    try:
        from ...targets.registry import target_class, target_names
    except ImportError as exc:  # no numpy: the targets cannot load, the facts still can
        return {"versions": versions, "targets": targets, "targets_error": str(exc)}
    for name in target_names():
        try:
            avail = target_class(name).availability()
            targets[name] = {"available": avail.available, "version": avail.version, "reason": avail.reason}
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not hide the others
            targets[name] = {"available": False, "version": None, "reason": str(exc)}
    return {"versions": versions, "targets": targets}


# -- power mode, clocks, temperatures ------------------------------------------------------------------
def parse_nvpmodel_query(text: str) -> Optional[Dict[str, Any]]:
    """``NV Power Mode: MAXN`` then the mode number -> ``{"name": "MAXN", "id": 0}``."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for i, line in enumerate(lines):
        m = re.match(r"NV Power Mode:\s*(.+)$", line)
        if m:
            mode_id = int(lines[i + 1]) if i + 1 < len(lines) and lines[i + 1].isdigit() else None
            return {"name": m.group(1).strip(), "id": mode_id}
    return None


def parse_nvpmodel_conf(text: str) -> Tuple[Dict[int, str], Optional[int]]:
    """Mode names by id (``< POWER_MODEL ID=2 NAME=10W >``) and the default id (``PM_CONFIG DEFAULT=``)."""
    names = {int(i): n for i, n in re.findall(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)", text)}
    m = re.search(r"PM_CONFIG\s+DEFAULT=(\d+)", text)
    return names, (int(m.group(1)) if m else None)


def power_mode(root: str) -> Optional[Dict[str, Any]]:
    """The nvpmodel power mode: ``nvpmodel -q``, else ``/var/lib/nvpmodel/status`` with names
    from ``/etc/nvpmodel.conf`` (no root needed)."""
    if root in ("", "/"):
        out = _run(["nvpmodel", "-q"])
        parsed = parse_nvpmodel_query(out) if out else None
        if parsed:
            parsed["source"] = "nvpmodel -q"
            return parsed
    status = read_text(under(root, "/var/lib/nvpmodel/status"))
    conf = read_text(under(root, "/etc/nvpmodel.conf")) or ""
    names, default = parse_nvpmodel_conf(conf)
    m = re.search(r"pmode:(\d+)", status or "")
    if m:
        mode_id = int(m.group(1))
        return {"name": names.get(mode_id), "id": mode_id, "source": "/var/lib/nvpmodel/status", "default_id": default}
    if default is not None:
        return {"name": names.get(default), "id": default, "source": "/etc/nvpmodel.conf default", "default_id": default}
    return None


def _cpu_list(text: str) -> List[int]:
    cpus: List[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-")
            cpus.extend(range(int(a), int(b) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def clocks_locked(root: str) -> Dict[str, Any]:
    """Whether clocks are pinned like ``jetson_clocks`` does: every online CPU's
    scaling_min_freq == scaling_max_freq, the GPU devfreq min == max, EMC rate == max rate.
    Each part is True/False, or None when it cannot be read; ``locked`` is their conjunction
    (None when nothing could be read)."""
    cpu: Optional[bool] = None
    online = read_text(under(root, "/sys/devices/system/cpu/online"))
    if online:
        states = []
        for c in _cpu_list(online):
            base = under(root, "/sys/devices/system/cpu/cpu%d/cpufreq/" % c)
            lo, hi = read_number(base + "scaling_min_freq"), read_number(base + "scaling_max_freq")
            if lo is not None and hi is not None:
                states.append(lo == hi)
        cpu = all(states) if states else None
    gpu: Optional[bool] = None
    gpu_node = None
    for node in sorted(glob.glob(under(root, "/sys/class/devfreq/*"))):
        of_name = read_text(os.path.join(node, "device", "of_node", "name"))
        if of_name in GPU_NODES:
            lo, hi = read_number(os.path.join(node, "min_freq")), read_number(os.path.join(node, "max_freq"))
            if lo is not None and hi is not None:
                gpu, gpu_node = lo == hi, os.path.basename(node)
                break
    emc: Optional[bool] = None
    for rate, max_rate in (("/sys/kernel/debug/bpmp/debug/clk/emc/rate", "/sys/kernel/debug/bpmp/debug/clk/emc/max_rate"),
                           ("/sys/kernel/debug/clk/emc/clk_rate", "/sys/kernel/debug/clk/emc/clk_max_rate")):
        cur, top = read_number(under(root, rate)), read_number(under(root, max_rate))
        if cur is not None and top is not None:
            emc = cur == top
            break
    parts = [p for p in (cpu, gpu, emc) if p is not None]
    return {"locked": all(parts) if parts else None, "cpu": cpu, "gpu": gpu, "gpu_devfreq": gpu_node, "emc": emc,
            "emc_note": None if emc is not None else "EMC rate not readable (debugfs needs root)"}


def temperatures(root: str = "/") -> Dict[str, float]:
    """``{zone type: degrees C}`` from ``/sys/class/thermal/thermal_zone*/{type,temp}`` (milli-C)."""
    out: Dict[str, float] = {}
    zones = glob.glob(under(root, "/sys/class/thermal/thermal_zone*"))
    for zone in sorted(zones, key=lambda z: int(re.sub(r"\D", "", os.path.basename(z)) or 0)):
        milli = read_number(os.path.join(zone, "temp"))
        if milli is None:
            continue
        name = read_text(os.path.join(zone, "type")) or os.path.basename(zone)
        if name in out:
            name = "%s:%s" % (name, os.path.basename(zone))
        out[name] = milli / 1e3
    return out


def device_facts(root: Optional[str] = None, sensors: Optional[List[str]] = None) -> Dict[str, Any]:
    """Everything ``sdk boards check`` shows, as one JSON-ready dict. ``root`` prefixes every
    file path (tests); ``sensors`` limits the power sources probed (default: all)."""
    from .power import probe_all

    root = root or "/"
    l4t, l4t_source = l4t_version(root)
    try:
        import numpy

        numpy_version: Optional[str] = numpy.__version__
    except ImportError:
        numpy_version = None
    info = host_info(runtimes=())
    facts: Dict[str, Any] = {
        "hostname": info["hostname"],
        "os": info["os"],
        "machine": info["machine"],
        "emulation": info["emulation"],
        "cpu": info["cpu"],
        "cpu_flags": sorted(cpu_flags()[1]),   # /proc/cpuinfo's flags (x86) or Features (ARM)
        "cores": info["cores"],
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "numpy": numpy_version,
        "runtimes": runtimes(),
        "l4t": l4t,
        "l4t_source": l4t_source,
        "jetpack": jetpack_for_l4t(l4t),
        "tensorrt": tensorrt_version(),
        "power_mode": power_mode(root),
        "clocks": clocks_locked(root),
        "temperatures_c": temperatures(root),
        "power_sensors": probe_all(root, sensors),
    }
    facts.update(cuda_facts(root, l4t))
    return facts
