"""TFLite / LiteRT target: ``build.py`` turns options and a ``.tflite`` model into an allocated
interpreter (threads, XNNPACK, external delegates), ``session.py`` runs it, ``target.py`` ties
them to the Target contract."""
from __future__ import annotations

from .target import TFLiteTarget

__all__ = ["TFLiteTarget"]
