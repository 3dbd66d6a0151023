"""Execution provider names: short names users type -> onnxruntime's provider names."""
from __future__ import annotations

from typing import Dict, List, Sequence

from ...errors import InputError, TargetUnavailableError

PROVIDERS: Dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "nnapi": "NnapiExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "dml": "DmlExecutionProvider",
    "acl": "ACLExecutionProvider",
}
#: Providers that do not run a model on this machine (Azure: calls a cloud endpoint): never listed
#: as what the target runs on.
NOT_LOCAL = ("AzureExecutionProvider",)

_INSTALL = {
    "cuda": "pip install onnxruntime-gpu",
    "tensorrt": "pip install onnxruntime-gpu (and TensorRT)",
    "openvino": "pip install onnxruntime-openvino",
    "qnn": "pip install onnxruntime-qnn",
    "dml": "pip install onnxruntime-directml",
}


def full_name(name: str) -> str:
    key = name.strip()
    if key.lower() in PROVIDERS:
        return PROVIDERS[key.lower()]
    if key in PROVIDERS.values():
        return key
    raise InputError(f"unknown execution provider '{name}'", f"known: {', '.join(PROVIDERS)}")


def short_name(full: str) -> str:
    for k, v in PROVIDERS.items():
        if v == full:
            return k
    return full


def resolve(requested: Sequence[str], available: Sequence[str]) -> List[str]:
    """Full provider names in priority order, CPU appended as the fallback; raises
    :class:`TargetUnavailableError` for one this onnxruntime build lacks."""
    out: List[str] = []
    for name in requested:
        full = full_name(name)
        if full not in available:
            short = short_name(full)
            raise TargetUnavailableError(
                f"execution provider '{short}' is not in this onnxruntime build "
                f"(it has: {', '.join(short_name(a) for a in available)})",
                _INSTALL.get(short, "install an onnxruntime build with that provider"),
            )
        if full not in out:
            out.append(full)
    if "CPUExecutionProvider" not in out:
        out.append("CPUExecutionProvider")
    return out
