"""Target registry: names -> Target classes, loaded lazily (one :class:`sdk.registry.Registry`).

Built-in targets are listed as import paths so that listing them imports no runtime. Third-party
targets register through the entry-point group ``edgesdk.targets`` (value ``module:Class``) or by
calling :func:`register_target`. Aliases (``ort``, ``trt``, ``litert``) are
:data:`sdk.registry.TARGET_ALIASES`, the same in every command.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Type, Union

from ..errors import TargetError, UnknownTargetError
from ..registry import TARGET_ALIASES, Registry

if TYPE_CHECKING:
    from .base import Target

__all__ = ["register_target", "get_target", "target_class", "target_names", "first_target_for", "ENTRY_POINT_GROUP",
           "TARGETS"]

ENTRY_POINT_GROUP = "edgesdk.targets"

#: The target family: name -> Target subclass (or ``"module:Class"`` until first use).
TARGETS: "Registry[Type[Target]]" = Registry(
    "target",
    {
        "onnxruntime": "sdk.targets.onnxrt:OnnxRuntimeTarget",
        "tensorrt": "sdk.targets.tensorrt:TensorRTTarget",
        "tflite": "sdk.targets.tflite:TFLiteTarget",
    },
    aliases=TARGET_ALIASES, entry_points=ENTRY_POINT_GROUP, error=UnknownTargetError, load_error=TargetError,
)


def register_target(name: str, target: Union[str, "Type[Target]"], *, replace: bool = False) -> None:
    """Register ``target`` (a Target subclass or ``"module:Class"``) under ``name``."""
    TARGETS.register(name, target, replace=replace)


def target_names() -> List[str]:
    """Every registered target name (built-in first, then plugins), available or not."""
    return TARGETS.names()


def target_class(name: str) -> "Type[Target]":
    """The Target class registered under ``name`` (or an alias); :class:`UnknownTargetError`
    lists the known names."""
    return TARGETS.load(name)


def first_target_for(names: Any, fmt: str) -> Optional[str]:
    """The first of the target ``names`` (a board profile's, in its order) that opens models of
    format ``fmt``, else None. A name not registered here is passed over (the board may still
    have that runtime)."""
    from ..errors import EdgeSDKError

    for name in names or ():
        try:
            if fmt in getattr(target_class(name), "model_formats", ("onnx",)):
                return str(name)
        except EdgeSDKError:
            continue
    return None


def get_target(name: str, **options: Any) -> "Target":
    """An instance of the target ``name`` configured with ``options``."""
    return target_class(name)(**options)
