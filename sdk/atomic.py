"""Atomic file writes: a reader sees the old file or the new one, never half of one, and a failed
write leaves nothing behind (the temporary file is removed).

    atomic_write("result.json", text)                  # str (UTF-8) or bytes
    with atomic_path("stats.npz") as tmp:              # for writers that want a path or a file
        np.savez(tmp, **arrays)                        # renamed over stats.npz on success

Runs on the board too (bundled in the agent zipapp): Python 3.8, standard library only.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

__all__ = ["atomic_write", "atomic_path"]

PathLike = Union[str, "os.PathLike[str]"]


@contextmanager
def atomic_path(path: PathLike, suffix: str = "", mode: Optional[int] = None) -> Iterator[Path]:
    """A temporary path next to ``path`` (same file system, so the rename is atomic; ``suffix`` for
    writers that insist on one, e.g. ``.npz``) that replaces ``path`` when the block ends without
    an error; it is removed in every case (an exception, Ctrl-C, and SIGTERM where the CLI turns
    it into one). Parent folders are created; ``mode``: chmod before the rename.

    Never written through a link: the temporary file lives in a fresh private folder
    (``mkdtemp``: mode 0700, a name nobody could plant beforehand), so a link planted in a shared
    folder is never opened; the rename replaces a link at ``path`` itself instead of following it."""
    dst = Path(path)
    dst.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".%s." % dst.name, suffix=".tmp", dir=str(dst.parent)))
    tmp = folder / (dst.name + suffix)
    try:
        yield tmp
        if mode is not None:
            os.chmod(str(tmp), mode)
        os.replace(str(tmp), str(dst))
    finally:
        shutil.rmtree(str(folder), ignore_errors=True)


def atomic_write(path: PathLike, data: Union[str, bytes], mode: Optional[int] = None,
                 encoding: str = "utf-8") -> Path:
    """Write ``data`` (text in ``encoding``, or bytes) to ``path`` atomically; returns the path."""
    with atomic_path(path, mode=mode) as tmp:
        tmp.write_bytes(data.encode(encoding) if isinstance(data, str) else data)
    return Path(path)
