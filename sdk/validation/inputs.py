"""Validation inputs: every sample of the data in memory (samples along axis 0), the labels, and
for image folders the decoded images (so the robustness sweep can corrupt pixels, not tensors).

Data: a ``.npy``/``.npz`` file or folder (``sdk.sources.ArraySource``), or an image folder read
through the shared :class:`~sdk.preprocess.PreprocessSpec`. Labels (``--labels``): a ``.npy`` of
class ids, an ``.npz`` (``y``/``labels``/``label`` or its only array), or a text/CSV file: one
label per line, or ``filename,label`` rows (header optional) matched to image files by name.
Without ``--labels``, labels stored in the data ``.npz`` (``y``) or an image folder's ``labels.csv``
are used.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ..errors import InputError

__all__ = ["Dataset", "load_dataset", "read_labels"]


@dataclass
class Dataset:
    """``arrays``: input name -> array with every sample along axis 0. ``labels``: int class ids
    (one per sample) or None. ``names``: one id per sample (file name or ``file[i]``). ``images``:
    the decoded HWC uint8 images for image folders (None for arrays); ``prepare`` turns a list of
    such images into the model input batch."""

    arrays: Dict[str, np.ndarray]
    labels: Optional[np.ndarray]
    names: List[str]
    source: str
    kind: str
    labels_source: Optional[str] = None
    images: Optional[List[np.ndarray]] = None
    preprocess: Any = None
    warnings: List[str] = field(default_factory=list)
    #: ``arrays`` have an extra leading sample axis (``[n, *input_shape]``, one feed per sample):
    #: inputs whose first axis is not a batch (a state ``[2, N, 128]``, a scalar rate) are held so.
    stacked: bool = False
    #: Values of inputs that are not data (``--input-value``), the same in every sample.
    values: Dict[str, np.ndarray] = field(default_factory=dict)
    #: Recurrent state carried across samples (``--carry``, ``{output: input}``): every runner runs
    #: the samples in order, each fed the state the one before left.
    carry: Dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def prepare(self, images: Sequence[np.ndarray]) -> np.ndarray:
        from ..preprocess import preprocess

        return np.concatenate([preprocess(img, self.preprocess) for img in images], axis=0)

    def describe(self) -> Dict[str, Any]:
        out = {"source": self.source, "kind": self.kind, "samples": len(self),
               "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in self.arrays.items()},
               "labels": self.labels_source, "warnings": list(self.warnings)}
        if self.preprocess is not None:
            out["preprocess"] = self.preprocess.to_dict()
        if self.carry:
            out["carry"] = dict(self.carry)
        return out

    def save_npz(self, path: Union[str, os.PathLike], arrays: Optional[Dict[str, np.ndarray]] = None) -> Path:
        """Same data, same bytes (:func:`sdk.data.save_npz`): boards cache it once."""
        from ..data import save_npz

        return save_npz(path, arrays if arrays is not None else self.arrays)


def load_dataset(data: Union[str, os.PathLike], specs: Sequence[Any], labels: Optional[Union[str, os.PathLike]] = None,
                 preprocess: Any = None, limit: Optional[int] = None, values: Optional[Mapping[str, Any]] = None,
                 sample_axes: Optional[Mapping[str, Optional[int]]] = None) -> Dataset:
    """Read every sample of ``data`` for the model inputs ``specs``; attach ``labels`` (a file) or
    the labels stored in the data. Raises :class:`InputError` for missing data, or labels whose
    count or file names do not match the samples."""
    from ..sources import ArraySource, ImageFolderSource, open_source

    p = Path(data)
    if not p.exists():
        raise InputError(f"data path '{p}' does not exist", "give a folder of images, or a .npy/.npz file or folder")
    source = open_source(p, specs, preprocess, limit=limit, values=values, sample_axes=sample_axes)
    if isinstance(source, ImageFolderSource):
        ds = _load_images(source)
    else:
        ds = _load_arrays(source, stacked=stack_needed(specs, values, sample_axes))
        ds.values = dict(values or {})
        if isinstance(source, ArraySource) and labels is None and ds.labels is not None:
            ds.labels_source = f"{p} (stored labels)"
    if len(ds) == 0:
        raise InputError(f"data '{p}' holds no samples")
    if labels is None and ds.kind == "images" and (p / "labels.csv").is_file():
        labels = p / "labels.csv"  # an image folder may carry its labels
    if labels is not None:
        ds.labels = read_labels(labels, ds)
        ds.labels_source = str(labels)
    return ds


def stack_needed(specs: Sequence[Any], values: Optional[Mapping[str, Any]] = None,
                 sample_axes: Optional[Mapping[str, Any]] = None) -> bool:
    """Whether samples must be held stacked (``[n, *input_shape]``): an input has a value, a
    declared sample axis other than 0, no batch-like first axis (a scalar, a static first dim > 1)."""
    if values or any(v != 0 for v in (sample_axes or {}).values()):
        return True
    for s in specs:
        if not s.shape:
            return True
        d = s.shape[0]
        if isinstance(d, int) and d > 1:
            return True
    return False


def _load_arrays(source: Any, stacked: bool = False) -> Dataset:
    parts: Dict[str, List[np.ndarray]] = {}
    ys: List[Any] = []
    names: List[str] = []
    for i, (feed, y) in enumerate(source.samples()):
        for k, v in feed.items():
            parts.setdefault(k, []).append(v)
        ys.append(y)
        names.append(f"sample {i}")
    arrays = {k: (np.stack(v) if stacked else np.concatenate(v, axis=0)) for k, v in parts.items()}
    labels = None
    if ys and all(y is not None for y in ys):
        labels = np.asarray([np.asarray(y).reshape(-1)[0] for y in ys]).astype(np.int64)
    return Dataset(arrays=arrays, labels=labels, names=names, source=str(source.path), kind="arrays", stacked=stacked)


def _load_images(source: Any) -> Dataset:
    import cv2

    from ..preprocess import preprocess

    images: List[np.ndarray] = []
    names: List[str] = []
    batch: List[np.ndarray] = []
    warnings: List[str] = []
    for f in source.files:
        try:
            img = cv2.imdecode(np.fromfile(str(f), dtype=np.uint8), cv2.IMREAD_COLOR)
        except (OSError, cv2.error):      # e.g. over OpenCV's pixel limit (CV_IO_MAX_IMAGE_PIXELS)
            img = None
        if img is None or img.size == 0:
            warnings.append(f"skipped '{f}': not a decodable image")
            continue
        images.append(img)
        names.append(str(f.relative_to(source.folder)))
        batch.append(preprocess(img, source.spec))
    if not images:
        raise InputError(f"no usable image in '{source.folder}'")
    return Dataset(arrays={source.input_name: np.concatenate(batch, axis=0)}, labels=None, names=names,
                   source=str(source.folder), kind="images", images=images, preprocess=source.spec,
                   warnings=warnings)


def read_labels(path: Union[str, os.PathLike], ds: Dataset) -> np.ndarray:
    """Labels for the samples of ``ds`` from ``path`` (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"labels file '{p}' does not exist")
    if p.suffix in (".npy", ".npz"):
        return _check_count(_as_ids(_read_label_array(p).reshape(-1), p), ds, p)
    rows = _read_text_rows(p)
    if rows and all(len(r) >= 2 for r in rows):
        by_name = {r[0]: r[1] for r in rows}
        if ds.kind == "images":
            missing = [n for n in ds.names if n not in by_name and Path(n).name not in by_name]
            if missing:
                raise InputError(f"labels file '{p}' has no label for {len(missing)} of {len(ds)} images, "
                                 f"e.g. '{missing[0]}'", "write one 'filename,label' row per image")
            return _as_ids(np.asarray([by_name.get(n, by_name.get(Path(n).name)) for n in ds.names]), p)
        return _check_count(_as_ids(np.asarray([r[1] for r in rows]), p), ds, p)
    if ds.kind == "images":
        raise InputError(f"labels file '{p}' must have 'filename,label' rows for an image folder")
    return _check_count(_as_ids(np.asarray([r[0] for r in rows]), p), ds, p)


def _read_label_array(p: Path) -> np.ndarray:
    """The labels of an ``.npy``, or the ``y`` / ``labels`` / ``label`` (or only) array of an ``.npz``."""
    from ..sources import check_array_file

    check_array_file(p)        # a pickle, a forged or inflating member: one clear error, nothing loaded
    try:
        if p.suffix == ".npy":
            return np.asarray(np.load(p, allow_pickle=False))
        with np.load(p, allow_pickle=False) as npz:
            key = next((k for k in ("y", "labels", "label") if k in npz.files), None)
            if key is None and len(npz.files) == 1:
                key = npz.files[0]
            if key is None:
                raise InputError(f"labels file '{p}' has no 'y' or 'labels' array", f"arrays: {', '.join(npz.files)}")
            return np.asarray(npz[key])
    except (ValueError, OSError) as exc:
        raise InputError(f"cannot read labels file '{p}': {exc}") from exc


def _read_text_rows(p: Path) -> List[List[str]]:
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read labels file '{p}': {exc}") from exc
    rows = [[c.strip() for c in r] for r in csv.reader(text.splitlines()) if r and any(c.strip() for c in r)]
    if len(rows) > 1 and not _is_int(rows[0][-1]) and _is_int(rows[1][-1]):
        rows = rows[1:]  # a header line
    return rows


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def _as_ids(values: np.ndarray, p: Path) -> np.ndarray:
    try:
        ids = values.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"labels in '{p}' are not integer class ids") from exc
    if ids.size and (not np.all(np.isfinite(ids)) or not np.all(ids == np.round(ids))):
        raise InputError(f"labels in '{p}' are not integer class ids")
    return ids.astype(np.int64)


def _check_count(y: np.ndarray, ds: Dataset, p: Path) -> np.ndarray:
    if len(y) != len(ds):
        raise InputError(f"labels file '{p}' has {len(y)} labels for {len(ds)} samples of '{ds.source}'",
                         "give one label per sample, in the order of the data")
    return y
