"""Target registry: names -> Target classes, loaded lazily.

Built-in targets are listed as import paths so that listing them imports no runtime. Third-party
targets register through the entry-point group ``edgesdk.targets`` (value ``module:Class``) or by
calling :func:`register_target`.
"""
from __future__ import annotations

import importlib
from typing import Dict, List, Type, Union

from ..errors import TargetError, UnknownTargetError

__all__ = ["register_target", "get_target", "target_class", "target_names", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "edgesdk.targets"

_BUILTIN: Dict[str, str] = {
    "onnxruntime": "sdk.targets.onnxrt:OnnxRuntimeTarget",
    "tensorrt": "sdk.targets.tensorrt:TensorRTTarget",
    "tflite": "sdk.targets.tflite:TFLiteTarget",
}
_ALIASES: Dict[str, str] = {"ort": "onnxruntime", "onnxrt": "onnxruntime"}
_registry: Dict[str, Union[str, type]] = dict(_BUILTIN)
_entry_points_loaded = False


def register_target(name: str, target: Union[str, type], *, replace: bool = False) -> None:
    """Register ``target`` (a Target subclass or ``"module:Class"``) under ``name``."""
    if name in _registry and not replace and _registry[name] != target:
        raise TargetError(f"a target named '{name}' is already registered")
    _registry[name] = target


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    try:
        from importlib.metadata import entry_points
    except ImportError:  # pragma: no cover - Python < 3.8
        return
    try:
        eps = entry_points()
        group = eps.select(group=ENTRY_POINT_GROUP) if hasattr(eps, "select") else eps.get(ENTRY_POINT_GROUP, [])
    except Exception:  # a broken distribution's metadata must not break the registry
        return
    for ep in group:
        _registry.setdefault(ep.name, ep.value)


def target_names() -> List[str]:
    """Every registered target name (built-in first, then plugins), available or not."""
    _load_entry_points()
    return list(_registry)


def target_class(name: str) -> Type:
    """The Target class registered under ``name``; :class:`UnknownTargetError` lists known names."""
    _load_entry_points()
    key = _ALIASES.get(name, name)
    if key not in _registry:
        raise UnknownTargetError(f"unknown target '{name}'", f"known targets: {', '.join(target_names())}")
    entry = _registry[key]
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise TargetError(f"target '{name}' is registered as '{entry}', which cannot be loaded: {exc}") from exc
        _registry[key] = cls
        entry = cls
    return entry


def get_target(name: str, **options) -> "object":
    """An instance of the target ``name`` configured with ``options``."""
    return target_class(name)(**options)
