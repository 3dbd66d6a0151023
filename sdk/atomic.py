"""Atomic file writes: a reader sees the old file or the new one, never half of one, and a failed
write leaves nothing behind (the temporary file is removed).

    atomic_write("result.json", text)                  # str (UTF-8) or bytes
    with atomic_path("stats.npz") as tmp:              # for writers that want a path or a file
        np.savez(tmp, **arrays)                        # renamed over stats.npz on success

Runs on the board too (bundled in the agent zipapp): Python 3.8, standard library only.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

__all__ = ["atomic_write", "atomic_path"]

PathLike = Union[str, "os.PathLike[str]"]


@contextmanager
def atomic_path(path: PathLike, suffix: str = "", mode: Optional[int] = None) -> Iterator[Path]:
    """A temporary path next to ``path`` (same folder, so the rename is atomic; ``suffix`` for
    writers that insist on one, e.g. ``.npz``) that replaces ``path`` when the block ends without
    an error; it is removed in every case. Parent folders are created; ``mode``: chmod before the
    rename."""
    dst = Path(path)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(".%s.tmp%d-%d%s" % (dst.name, os.getpid(), threading.get_ident(), suffix))
    try:
        yield tmp
        if mode is not None:
            os.chmod(str(tmp), mode)
        os.replace(str(tmp), str(dst))
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write(path: PathLike, data: Union[str, bytes], mode: Optional[int] = None,
                 encoding: str = "utf-8") -> Path:
    """Write ``data`` (text in ``encoding``, or bytes) to ``path`` atomically; returns the path."""
    with atomic_path(path, mode=mode) as tmp:
        tmp.write_bytes(data.encode(encoding) if isinstance(data, str) else data)
    return Path(path)
