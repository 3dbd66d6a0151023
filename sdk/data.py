"""Input data for runs: seeded random feeds that match the specs, or real arrays from files.

A *feed* is ``{input_name: np.ndarray}``. Sources yield feeds one at a time, so large data sets are
streamed, never held in memory. Runs on the board too: Python 3.8, NumPy only.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from .atomic import atomic_path
from .errors import InputError
from .tensors import TensorSpec, check_input_names, format_shape

Feed = Dict[str, np.ndarray]

__all__ = ["Feed", "random_feed", "load_feeds", "iter_feeds", "check_feed", "save_npz"]


def _rng_array(rng: np.random.Generator, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -128), min(info.max, 127)
        return rng.integers(lo, hi + 1, size=shape, dtype=dtype)
    return rng.standard_normal(size=shape, dtype=np.float32).astype(dtype, copy=False)


def random_feed(
    specs: Sequence[TensorSpec],
    shapes: Optional[Mapping[str, Sequence[int]]] = None,
    seed: int = 0,
) -> Feed:
    """One feed of seeded random data matching ``specs`` (standard normal for floats, a small
    integer range for ints). ``shapes`` fixes dynamic dims; a dynamic dim left without a value
    raises :class:`InputError` naming the input."""
    shapes = dict(shapes or {})
    check_input_names(shapes, specs)
    rng = np.random.default_rng(seed)
    return {s.name: _rng_array(rng, s.resolve(shapes.get(s.name)), np.dtype(s.dtype)) for s in specs}


def check_feed(feed: Mapping[str, np.ndarray], specs: Sequence[TensorSpec], source: str = "input") -> None:
    """Raise :class:`InputError` naming the first input that is missing, extra, or has the
    wrong dtype or a shape that contradicts the spec's static dims."""
    names = [s.name for s in specs]
    for s in specs:
        if s.name not in feed:
            raise InputError(f"{source}: no array for model input '{s.name}'", f"model inputs: {', '.join(names)}")
        arr = feed[s.name]
        if np.dtype(arr.dtype) != np.dtype(s.dtype):
            raise InputError(
                f"{source}: '{s.name}' has dtype {arr.dtype}, the model expects {s.dtype}",
                f"save it as {s.dtype}",
            )
        if len(arr.shape) != len(s.shape) or any(
            isinstance(w, int) and w >= 0 and w != g for w, g in zip(s.shape, arr.shape)
        ):
            raise InputError(
                f"{source}: '{s.name}' has shape {format_shape(arr.shape)}, the model expects {format_shape(s.shape)}"
            )
    for name in feed:
        if name not in names:
            raise InputError(f"{source}: '{name}' is not a model input", f"model inputs: {', '.join(names)}")


def load_feeds(path: Union[str, "os.PathLike[str]"], specs: Sequence[TensorSpec], preprocess: Any = None) -> List[Feed]:
    """All feeds of ``path`` (see :func:`iter_feeds`), as a list."""
    return list(iter_feeds(path, specs, preprocess))


def iter_feeds(path: Union[str, "os.PathLike[str]"], specs: Sequence[TensorSpec], preprocess: Any = None) -> Iterator[Feed]:
    """Yield the feeds of ``path`` through the one data reader, :func:`sdk.sources.open_source`:

    - ``.npy``: one array, for a single-input model;
    - ``.npz``: one array per input name (a single-input model also accepts ``x`` or its only
      array), with optional labels under ``y`` (ignored here);
    - a folder of ``.npy``/``.npz`` files (sorted), or a folder of images (with ``preprocess``, a
      :class:`~sdk.preprocess.PreprocessSpec`; without it, derived from a static image input).

    Samples lie along an extra first axis (``[n, *input_shape]``) or along the input's batch axis
    (one feed per row when that dim is dynamic or 1); otherwise the file is one feed. Arrays are
    read row by row, never the whole data set at once.
    """
    from .sources import open_source

    yield from open_source(path, specs, preprocess)


def save_npz(path: Union[str, "os.PathLike[str]"], arrays: Mapping[str, np.ndarray]) -> Path:
    """Write ``arrays`` as an uncompressed ``.npz`` whose bytes depend only on the arrays (fixed
    zip timestamps, sorted names), atomically. Equal data gives equal files, so the board cache,
    which is content-addressed, stores it once across batches and runs."""
    import zipfile

    p = Path(path)
    with atomic_path(p) as tmp, zipfile.ZipFile(str(tmp), "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arrays[name]), allow_pickle=False)
    return p


def cycle(feeds: Iterable[Feed]) -> Iterator[Feed]:
    """Repeat a finite list of feeds forever (for benchmarking with real data)."""
    items = list(feeds)
    if not items:
        raise InputError("no input data")
    while True:
        yield from items
