"""ONNX Runtime target: ``build.py`` makes the artifact (session options, optional optimised
graph on disk), ``session.py`` runs it."""
from __future__ import annotations

from .target import OnnxRuntimeTarget

__all__ = ["OnnxRuntimeTarget"]
