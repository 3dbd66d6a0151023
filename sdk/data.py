"""Input data for runs: seeded random feeds that match the specs, or real arrays from files.

A *feed* is ``{input_name: np.ndarray}``. Sources yield feeds one at a time, so large data sets are
streamed, never held in memory. Runs on the board too: Python 3.8, NumPy only.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from .errors import InputError
from .tensors import TensorSpec, check_input_names, format_shape

Feed = Dict[str, np.ndarray]

__all__ = ["Feed", "random_feed", "load_feeds", "iter_feeds", "check_feed"]


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


def load_feeds(path: Union[str, "os.PathLike[str]"], specs: Sequence[TensorSpec]) -> List[Feed]:
    """All feeds of one ``.npy``/``.npz`` file (see :func:`iter_feeds`), as a list."""
    return list(iter_feeds(path, specs))


def iter_feeds(path: Union[str, "os.PathLike[str]"], specs: Sequence[TensorSpec], batch_axis: bool = False) -> Iterator[Feed]:
    """Yield feeds from a ``.npy``/``.npz`` file, or every such file in a directory (sorted).

    - ``.npy``: one array for a single-input model.
    - ``.npz``: one array per input, keyed by input name (a single-input model also accepts any key).
    With ``batch_axis=True`` the arrays' first axis indexes samples and one feed is yielded per
    sample (each keeping a batch dim of 1). Arrays are memory-mapped where NumPy allows.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"data path '{p}' does not exist")
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".npy", ".npz"))
        if not files:
            raise InputError(f"data folder '{p}' holds no .npy or .npz files")
        for f in files:
            yield from iter_feeds(f, specs, batch_axis)
        return
    feed = _read_file(p, specs)
    if not batch_axis:
        check_feed(feed, specs, source=str(p))
        yield feed
        return
    counts = {len(a) for a in feed.values()}
    if len(counts) != 1:
        raise InputError(f"{p}: arrays have different sample counts {sorted(counts)}")
    for i in range(counts.pop()):
        one = {k: np.ascontiguousarray(a[i:i + 1]) for k, a in feed.items()}
        check_feed(one, specs, source=f"{p}[{i}]")
        yield one


def _read_file(p: Path, specs: Sequence[TensorSpec]) -> Feed:
    try:
        if p.suffix == ".npy":
            arr = np.load(p, mmap_mode="r", allow_pickle=False)
            if len(specs) != 1:
                raise InputError(
                    f"{p}: a .npy file holds one array, but the model has {len(specs)} inputs",
                    "save an .npz with one array per input name",
                )
            return {specs[0].name: np.asarray(arr)}
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as npz:
                data = {k: npz[k] for k in npz.files}
            if len(specs) == 1 and len(data) == 1:
                return {specs[0].name: next(iter(data.values()))}
            return data
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read data file '{p}': {exc}") from exc
    raise InputError(f"unsupported data file '{p}'", "use .npy or .npz")


def cycle(feeds: Iterable[Feed]) -> Iterator[Feed]:
    """Repeat a finite list of feeds forever (for benchmarking with real data)."""
    items = list(feeds)
    if not items:
        raise InputError("no input data")
    while True:
        yield from items
