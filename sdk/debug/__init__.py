"""Why a model breaks: layer-by-layer comparison against the FP32 model (:func:`diff`) and the
smallest failing subgraph (:func:`reduce`). ``sdk.check`` (what a target runs, before a build) lives
with the targets, in :mod:`sdk.targets.capability`.

    import sdk.debug
    report = sdk.debug.diff("model.onnx", "model_int8.onnx", feeds)
    print(report.first_divergence, report.ranked()[:5])
    result = sdk.debug.reduce("model.onnx", "error:not a registered@onnxruntime", out_dir="min/")
    result = sdk.debug.reduce("model_int8.onnx", "diff:20@onnxruntime", feed, reference="model.onnx")
"""
from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "diff": "sdk.debug.layerdiff",
    "DiffConfig": "sdk.debug.layerdiff",
    "DiffReport": "sdk.debug.layerdiff",
    "LayerDiff": "sdk.debug.layerdiff",
    "reduce": "sdk.debug.reducer",
    "ReduceResult": "sdk.debug.reducer",
    "parse_check": "sdk.debug.reducer",
    "Subgraph": "sdk.debug.subgraph",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
