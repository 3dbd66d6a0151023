"""One way to hash a file: hex sha256, read in 1 MiB blocks (models, engines, corpus files, uploads)."""
from __future__ import annotations

import hashlib
import os
from typing import Union

__all__ = ["file_sha256"]


def file_sha256(path: Union[str, "os.PathLike[str]"]) -> str:
    """Hex sha256 of the file at ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
