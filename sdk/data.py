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

__all__ = ["Feed", "random_feed", "load_feeds", "iter_feeds", "check_feed", "save_npz", "parse_input_values",
           "with_values", "values_to_json", "values_from_json"]


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
    values: Optional[Mapping[str, np.ndarray]] = None,
) -> Feed:
    """One feed of seeded random data matching ``specs`` (standard normal for floats, a small
    integer range for ints). ``shapes`` fixes dynamic dims; a dynamic dim left without a value
    raises :class:`InputError` naming the input. ``values`` (:func:`parse_input_values`) gives
    inputs that are not data their value (a sample rate, a state); they are not drawn."""
    shapes = dict(shapes or {})
    values = dict(values or {})
    check_input_names(shapes, specs)
    check_input_names(values, specs)
    rng = np.random.default_rng(seed)
    return {s.name: (values[s.name] if s.name in values else
                     _rng_array(rng, s.resolve(shapes.get(s.name)), np.dtype(s.dtype))) for s in specs}


def with_values(feed: Mapping[str, np.ndarray], values: Optional[Mapping[str, np.ndarray]]) -> Feed:
    """``feed`` with the ``values`` of inputs that are not data added (a value replaces nothing
    the data holds: an input both in the data and in ``values`` takes the data's array)."""
    out = dict(feed)
    for k, v in (values or {}).items():
        out.setdefault(k, v)
    return out


def _value_array(text: str, spec: TensorSpec, where: str) -> np.ndarray:
    import json

    dtype = np.dtype(spec.dtype)

    def scalar(x: str) -> Any:
        x = x.strip()
        if x.lower() in ("true", "false"):
            return x.lower() == "true"
        return float(x) if dtype.kind == "f" or any(c in x for c in ".eE") and not x.startswith("0x") else int(x, 0)

    try:
        if text.startswith("["):
            arr = np.asarray(json.loads(text))
        else:
            parts = [scalar(x) for x in text.split(",")]
            arr = np.asarray(parts[0] if len(parts) == 1 else parts)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{where}: '{text}' is not a {spec.dtype} value",
                         "write a number (sr=16000), a list (1,2,3) or a JSON array ([[1,2],[3,4]])") from exc
    if arr.dtype.kind == "f" and dtype.kind in "iu" and not np.all(arr == np.round(arr)):
        raise InputError(f"{where}: '{text}' is not an integer; input '{spec.name}' is {spec.dtype}")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise InputError(f"{where}: '{text}' does not fit input '{spec.name}' ({spec.dtype})")
    arr = arr.astype(dtype)
    rank = len(spec.shape)
    if arr.ndim < rank and arr.size == 1:
        arr = arr.reshape((1,) * rank)          # a scalar for a [1] or [1, 1] input
    elif arr.ndim < rank:
        arr = arr.reshape((1,) * (rank - arr.ndim) + arr.shape)
    if arr.ndim != rank or any(isinstance(d, int) and d >= 0 and d != g for d, g in zip(spec.shape, arr.shape)):
        raise InputError(f"{where}: the value has shape {format_shape(arr.shape)}, input '{spec.name}' "
                         f"expects {format_shape(spec.shape)}")
    return arr


def parse_input_values(items: Optional[Iterable[str]], specs: Sequence[TensorSpec]) -> Dict[str, np.ndarray]:
    """``["sr=16000", "mask=1,0,1"]`` -> ``{name: array}`` typed by the model: the input's dtype,
    reshaped to its rank (``16000`` for a scalar input, ``[[16000]]`` for a ``[1, 1]`` one).
    Values are numbers, comma lists or JSON arrays; :class:`InputError` names a bad one."""
    by_name = {s.name: s for s in specs}
    out: Dict[str, np.ndarray] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise InputError(f"bad --input-value '{item}'", "write NAME=VALUE, e.g. sr=16000")
        if name not in by_name:
            raise InputError(f"--input-value: '{name}' is not a model input",
                             f"model inputs: {', '.join(by_name) or 'none'}")
        out[name] = _value_array(text.strip(), by_name[name], f"--input-value {name}")
    return out


def values_to_json(values: Optional[Mapping[str, np.ndarray]]) -> Dict[str, Any]:
    """Input values as JSON for the board agent: ``{name: {dtype, shape, data}}``."""
    return {k: {"dtype": str(np.asarray(v).dtype), "shape": list(np.asarray(v).shape),
                "data": np.asarray(v).ravel().tolist()} for k, v in (values or {}).items()}


def values_from_json(doc: Any) -> Dict[str, np.ndarray]:
    """The inverse of :func:`values_to_json`; :class:`InputError` for a malformed entry."""
    out: Dict[str, np.ndarray] = {}
    if not doc:
        return out
    if not isinstance(doc, Mapping):
        raise InputError("input_values must map input names to {dtype, shape, data}")
    for k, v in doc.items():
        try:
            out[str(k)] = np.asarray(v["data"], dtype=np.dtype(v["dtype"])).reshape(tuple(v["shape"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"input_values[{k!r}] is not {{dtype, shape, data}}: {exc}") from exc
    return out


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
