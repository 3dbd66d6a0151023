"""Data sources for calibration, evaluation, benchmarks and validation.

A source yields *samples*: ``(feed, label)`` where ``feed`` is ``{input_name: array}`` with a batch
dim of 1 and ``label`` is None or a NumPy scalar/array. Sources stream: they read one sample at a
time (images decoded one by one, ``.npy`` memory-mapped, ``.npz`` members read row by row), so the
data set never has to fit in memory.

Kinds, picked by :func:`open_source`:

- an image folder (``.jpg .jpeg .png .bmp .webp .tif .tiff``) with a
  :class:`~sdk.preprocess.PreprocessSpec`; images that fail to decode are skipped and counted, and
  a folder with none usable is an error;
- ``.npy`` / ``.npz`` files, or a folder of them (first axis = samples); an ``.npz`` may hold labels
  under ``y`` (or ``labels``);
- any Python iterable of feeds ``{input_name: array}`` (or of ``(feed, label)`` pairs).

Runs on the board too: Python 3.8, NumPy (OpenCV for images).
"""
from __future__ import annotations

import hashlib
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .data import check_feed
from .errors import ConfigError, InputError, MissingDependencyError
from .tensors import TensorSpec, format_shape

__all__ = [
    "Sample",
    "Source",
    "ImageFolderSource",
    "ArraySource",
    "IterableSource",
    "open_source",
    "batched",
    "parse_preprocess",
    "IMAGE_SUFFIXES",
    "LABEL_KEYS",
    "file_layout",
    "parse_sample_axes",
]

Feed = Dict[str, np.ndarray]
Sample = Tuple[Feed, Optional[np.ndarray]]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
#: The most one compressed ``.npz`` member may inflate to (MiB; ``EDGESDK_MAX_INFLATED_MB``): a
#: small file declaring GBs of zeros is refused from its headers before anything is read.
MAX_INFLATED_MB = 1024
LABEL_KEYS = ("y", "labels", "label")


class Source:
    """Base class: iterate ``samples()`` for ``(feed, label)`` pairs, or the source itself for feeds.

    ``skipped`` counts samples dropped while iterating (undecodable images), ``warnings`` holds
    one line per problem. ``fingerprint()`` identifies the data for caches (None when unknown).
    """

    description = "data"

    def __init__(self, specs: Sequence[TensorSpec], check: bool = True):
        self.specs = list(specs)
        self.check = check
        self.skipped = 0
        self.warnings: List[str] = []

    def samples(self) -> Iterator[Sample]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Feed]:
        for feed, _ in self.samples():
            yield feed

    def __len__(self) -> int:  # pragma: no cover - subclasses that know their size override
        raise TypeError(f"{type(self).__name__} does not know its length")

    def length(self) -> Optional[int]:
        """Number of samples when known without reading the data, else None."""
        try:
            return len(self)
        except TypeError:
            return None

    def fingerprint(self) -> Optional[str]:
        return None

    @property
    def has_labels(self) -> bool:
        return False

    def _checked(self, feed: Feed, where: str) -> Feed:
        if self.check:
            check_feed(feed, self.specs, source=where)
        return feed


# -- image folders ------------------------------------------------------------------------------------
class ImageFolderSource(Source):
    """Images of a folder (recursively, sorted), each decoded with OpenCV and turned into the model
    input by :func:`sdk.preprocess.preprocess`. Undecodable files are skipped and counted."""

    description = "image folder"

    def __init__(self, folder: Union[str, "os.PathLike[str]"], spec: Any, specs: Sequence[TensorSpec],
                 input_name: Optional[str] = None, check: bool = True, limit: Optional[int] = None):
        super().__init__(specs, check)
        self.folder = Path(folder)
        self.spec = spec
        if input_name is None:
            if len(self.specs) != 1:
                raise InputError(f"an image folder feeds one input, but the model has {len(self.specs)}",
                                 "give the input name, or use .npz files with one array per input")
            input_name = self.specs[0].name
        self.input_name = input_name
        self.files = _image_files(self.folder)
        self.limit = limit          # counts decoded images: undecodable files do not use it up

    def __len__(self) -> int:
        return len(self.files) if self.limit is None else min(self.limit, len(self.files))

    def fingerprint(self) -> Optional[str]:
        h = hashlib.sha256(repr(sorted(self.spec.to_dict().items())).encode())
        h.update(f"limit={self.limit}\n".encode())
        for f in self.files:
            st = f.stat()
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def samples(self) -> Iterator[Sample]:
        from .preprocess import preprocess

        cv2 = _cv2("reading an image folder")
        self.skipped = 0
        self.warnings = []
        used = 0
        for f in self.files:
            if self.limit is not None and used >= self.limit:
                break
            img = None
            try:
                img = cv2.imdecode(np.fromfile(str(f), dtype=np.uint8), cv2.IMREAD_COLOR)
            except (OSError, cv2.error):
                img = None
            if img is None or img.size == 0:
                self.skipped += 1
                self.warnings.append(f"skipped '{f}': not a decodable image")
                continue
            used += 1
            feed = {self.input_name: preprocess(img, self.spec)}
            yield self._checked(feed, str(f)), None
        if used == 0:
            raise InputError(f"no usable image in '{self.folder}': all {len(self.files)} files failed to decode")


def _image_files(folder: Path) -> List[Path]:
    if not folder.exists():
        raise InputError(f"data folder '{folder}' does not exist")
    if not folder.is_dir():
        raise InputError(f"'{folder}' is not a folder")
    try:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    except OSError as exc:
        raise InputError(f"cannot read data folder '{folder}': {exc}") from exc
    if not files:
        raise InputError(f"data folder '{folder}' holds no images ({' '.join(IMAGE_SUFFIXES)}) and no .npy/.npz files")
    return files


def _cv2(feature: str) -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise MissingDependencyError(feature, "opencv-python-headless", "pip install 'edgesdk[vision]'") from exc
    return cv2


# -- arrays -------------------------------------------------------------------------------------------
class _NpyRows:
    """Row-by-row reader of one array stored as ``.npy`` (a file, or a member of an ``.npz`` zip)."""

    def __init__(self, path: Path, member: Optional[str] = None):
        self.path, self.member = path, member
        with self._open() as f:
            self.shape, self.fortran, self.dtype, self.offset = _read_npy_header(f, self.where)
        if self.dtype.hasobject:
            raise InputError(f"{self.where}: object arrays are not supported")

    @property
    def where(self) -> str:
        return f"{self.path}[{self.member}]" if self.member else str(self.path)

    def _open(self) -> Any:
        if self.member is None:
            return open(self.path, "rb")
        zf = zipfile.ZipFile(self.path)
        try:
            return _ZipMember(zf, zf.open(self.member + ".npy"))
        except KeyError:
            zf.close()
            raise

    def __len__(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    def whole(self) -> np.ndarray:
        """The whole array."""
        if self.member is None:
            return np.array(np.load(self.path, mmap_mode="r", allow_pickle=False))
        return _load_member(self.path, self.member)

    def rows(self) -> Iterator[np.ndarray]:
        """Each row (first-axis slice) with a leading dim of 1 (a 0-d/1-d array yields itself once)."""
        if len(self.shape) == 0:
            with self._open() as f:
                _read_npy_header(f, self.where)
                yield np.frombuffer(f.read(self.dtype.itemsize), self.dtype).reshape(())
            return
        if self.fortran:  # rare: read the whole array once (NumPy can't stream Fortran order)
            arr = np.load(self.path, mmap_mode="r") if self.member is None else _load_member(self.path, self.member)
            for i in range(len(arr)):
                yield np.ascontiguousarray(arr[i:i + 1])
            return
        row_shape = tuple(self.shape[1:])
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * self.dtype.itemsize
        with self._open() as f:
            _read_npy_header(f, self.where)
            for i in range(len(self)):
                buf = f.read(row_bytes)
                if len(buf) != row_bytes:
                    raise InputError(f"{self.where}: truncated at row {i} of {len(self)}")
                yield np.frombuffer(buf, self.dtype).reshape((1,) + row_shape).copy()


class _ZipMember:
    def __init__(self, zf: zipfile.ZipFile, member: Any) -> None:
        self.zf, self.member = zf, member

    def read(self, n: int = -1) -> bytes:
        try:
            return bytes(self.member.read(n))
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:   # a bad CRC or stream, seen only when read
            raise InputError(f"{self.zf.filename}[{self.member.name}]: corrupt ({exc})", "save the arrays again") from exc

    def __enter__(self) -> "_ZipMember":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.member.close()
        self.zf.close()


def _load_member(path: Path, member: str) -> np.ndarray:
    with np.load(path, allow_pickle=False) as npz:
        arr: np.ndarray = npz[member]
        return arr


def _max_inflated_bytes() -> int:
    try:
        return int(float(os.environ.get("EDGESDK_MAX_INFLATED_MB", MAX_INFLATED_MB)) * (1 << 20))
    except ValueError:
        return MAX_INFLATED_MB << 20


def check_array_file(path: Union[str, "os.PathLike[str]"]) -> None:
    """Refuse, from the headers alone, an array file that is not what it says: not a regular file
    (a FIFO would block the reader), an ``.npz`` member that inflates past ``MAX_INFLATED_MB`` or
    whose ``.npy`` header declares more bytes than the member holds, a ``.npy`` declaring more than
    the file holds, or an object (pickle) array. Every reader calls it before loading: bench,
    validate, quantize, robustness, the board agent and the host reading a board's outputs."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"'{p}' is not a regular file (a folder, a pipe, a socket or a device)",
                         "give a .npy/.npz file")
    if p.suffix == ".npz" or zipfile.is_zipfile(str(p)):
        cap = _max_inflated_bytes()
        try:
            with zipfile.ZipFile(str(p)) as zf:
                for info in zf.infolist():
                    where = f"{p}[{info.filename}]"
                    if info.compress_type != zipfile.ZIP_STORED and info.file_size > cap:
                        raise InputError(f"{where} inflates to {info.file_size / (1 << 20):.0f} MiB from "
                                         f"{info.compress_size / (1 << 20):.1f} MiB, over the "
                                         f"{cap >> 20} MiB limit", "set EDGESDK_MAX_INFLATED_MB to allow it")
                    if info.filename.endswith(".npy"):
                        with zf.open(info) as f:
                            _check_declared(f, where, info.file_size)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise InputError(f"cannot read data file '{p}': {exc}") from exc
    elif p.suffix == ".npy":
        with open(str(p), "rb") as f:
            _check_declared(f, str(p), p.stat().st_size)


def npz_shapes(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Tuple[int, ...]]:
    """The shape of each array of an ``.npz`` file, from the ``.npy`` headers alone (nothing loaded)."""
    shapes: Dict[str, Tuple[int, ...]] = {}
    with zipfile.ZipFile(str(path)) as zf:
        for info in zf.infolist():
            if info.filename.endswith(".npy"):
                with zf.open(info) as f:
                    shapes[info.filename[:-4]] = tuple(_read_npy_header(f, f"{path}[{info.filename}]")[0])
    return shapes


def _check_declared(f: Any, where: str, size: int) -> None:
    shape, _fortran, dtype, _ = _read_npy_header(f, where)
    if dtype.hasobject:
        raise InputError(f"{where} holds Python objects (a pickle), which are never loaded",
                         "save plain numeric arrays (np.save with a numeric dtype)")
    declared = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape else dtype.itemsize
    if declared > size:
        raise InputError(f"{where} declares {format_shape(shape)} {dtype} ({declared / (1 << 20):.1f} MiB) but "
                         f"holds {size / (1 << 20):.1f} MiB: truncated or forged", "save the array again")


def _read_npy_header(f: Any, where: str) -> Tuple[Tuple[int, ...], bool, np.dtype, Optional[int]]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise InputError(f"cannot read '{where}': {exc}") from exc
    return shape, fortran, np.dtype(dtype), None


#: How the arrays of one file map to samples (see :class:`ArraySource`).
STACKED, ROWS, WHOLE = "stacked", "rows", "whole"


class _AxisRows:
    """An array whose samples lie along ``axis`` (not the first): read whole, rows along that axis."""

    def __init__(self, rows: Any, axis: int):
        arr = rows.whole()
        if not -arr.ndim <= axis < arr.ndim:
            raise InputError(f"{rows.where}: sample axis {axis} is outside its {arr.ndim} dims")
        self.axis = axis % arr.ndim
        self.where = rows.where
        self._arr = np.moveaxis(arr, self.axis, 0)
        self.shape = tuple(self._arr.shape)
        self.dtype = arr.dtype

    def __len__(self) -> int:
        return int(self.shape[0])

    def whole(self) -> np.ndarray:
        return np.moveaxis(self._arr, 0, self.axis)

    def rows(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield np.ascontiguousarray(self._arr[i:i + 1])


def _moved(spec: TensorSpec, axis: int) -> TensorSpec:
    """``spec`` with its sample ``axis`` first and dynamic (how :class:`_AxisRows` holds it)."""
    dims = list(spec.shape)
    rest = [d for j, d in enumerate(dims) if j != axis % max(1, len(dims))]
    return TensorSpec(spec.name, tuple([None] + rest), spec.dtype)


def parse_sample_axes(items: Optional[Iterable[str]], specs: Sequence[TensorSpec]) -> Dict[str, Optional[int]]:
    """``["state=none", "x=1"]`` -> ``{"state": None, "x": 1}``: which axis of each ``--data`` array
    holds the samples (``none``: the array is one value used by every sample, such as a rate or
    the initial state of a carried input). Unnamed inputs keep the default (the first axis, or an
    extra leading one)."""
    names = [s.name for s in specs]
    out: Dict[str, Optional[int]] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        name, text = name.strip(), text.strip().lower()
        if not sep or not name:
            raise InputError(f"bad --sample-axis '{item}'", "write NAME=AXIS or NAME=none, e.g. state=none")
        if name not in names:
            raise InputError(f"--sample-axis: '{name}' is not a model input", f"model inputs: {', '.join(names)}")
        if text in ("none", "-", ""):
            out[name] = None
            continue
        try:
            out[name] = int(text)
        except ValueError:
            raise InputError(f"bad --sample-axis '{item}'", "the axis is an integer or none") from None
    return out


def _batch_like(spec: TensorSpec) -> bool:
    """The input's first dim is a batch axis a sample of 1 fits: dynamic, or static 1."""
    if not spec.shape:
        return True
    d = spec.shape[0]
    return not (isinstance(d, int) and d >= 0) or d == 1


def file_layout(shapes: Mapping[str, Sequence[int]], specs: Sequence[TensorSpec]) -> str:
    """How one file's arrays (``name -> shape``) hold samples for the inputs ``specs``:

    - ``stacked``: every array has one more dim than its input: ``a[i]`` is sample ``i``;
    - ``rows``: every array has its input's rank and every input's first dim is dynamic or 1:
      ``a[i:i+1]`` is sample ``i`` (a batch of 1);
    - ``whole``: the arrays are one feed as they are (inputs without a batch axis, static batch > 1).
    """
    by_name = {s.name: s for s in specs}
    ranks = {k: len(by_name[k].shape) for k in shapes if k in by_name}
    if ranks and all(len(shapes[k]) == r + 1 for k, r in ranks.items()):
        return STACKED   # also a scalar input (a rate) given as one value per sample
    if not ranks or any(r == 0 for r in ranks.values()):
        return ROWS
    if all(len(shapes[k]) == r for k, r in ranks.items()):
        return ROWS if all(_batch_like(by_name[k]) for k in ranks) else WHOLE
    return ROWS  # ranks that fit neither: the feed check names the input


class ArraySource(Source):
    """``.npy``/``.npz`` files (or a folder of them, sorted): the one reader of array data for
    bench, quantize, validate, robustness and the board agent.

    ``.npy``: one array, for a single-input model. ``.npz``: one array per input name (a
    single-input model also accepts ``x`` or the only non-label key), labels under ``y``/``labels``.
    Samples (see :func:`file_layout`): along an extra first axis (``[n, *input_shape]``), as rows of
    the input's batch axis (``[n, ...]`` for a dynamic or 1 batch dim), or the whole file as one feed.
    """

    description = "arrays"

    def __init__(self, path: Union[str, "os.PathLike[str]"], specs: Sequence[TensorSpec], check: bool = True,
                 label_key: Optional[str] = None, limit: Optional[int] = None,
                 values: Optional[Mapping[str, np.ndarray]] = None,
                 sample_axes: Optional[Mapping[str, Optional[int]]] = None):
        super().__init__(specs, check)
        self.path = Path(path)
        self.limit = limit
        #: inputs that are not in the data: the same value in every sample (``--input-value``)
        self.values = dict(values or {})
        #: input -> the axis of its array that holds samples; None: one value for every sample
        self.sample_axes = dict(sample_axes or {})
        self.constants: List[Dict[str, np.ndarray]] = []
        if not self.path.exists():
            raise InputError(f"data path '{self.path}' does not exist")
        self.warnings: List[str] = []
        if self.path.is_dir():
            try:
                named = sorted(f for f in self.path.iterdir() if f.suffix in (".npy", ".npz"))
            except OSError as exc:
                raise InputError(f"cannot read data folder '{self.path}': {exc}") from exc
            self.files = [f for f in named if f.is_file()]     # a FIFO, socket or device would hang or lie
            for f in named:
                if not f.is_file():
                    self.warnings.append(f"skipped '{f}': not a regular file")
                    _warn(self.warnings[-1])
            if not self.files:
                raise InputError(f"data folder '{self.path}' holds no .npy or .npz files")
        else:
            if self.path.suffix not in (".npy", ".npz"):
                raise InputError(f"unsupported data file '{self.path}'", "use .npy or .npz, or a folder of images")
            self.files = [self.path]
        self._label_key = label_key
        for f in self.files:
            check_array_file(f)
        self._plans = [self._plan(f) for f in self.files]
        if any(not rows for rows, _, _ in self._plans):
            raise InputError(f"data '{self.path}': every input is a value or has no sample axis",
                             "give at least one input with samples")
        if sum(len(next(iter(rows.values()))) for rows, _, _ in self._plans) == 0:
            raise InputError(f"data '{self.path}' holds no samples (its arrays have 0 rows)",
                             "give at least one sample")

    def _plan(self, f: Path) -> Tuple[Dict[str, Any], Optional[_NpyRows], str]:
        rows, label, layout = self._plan_file(f)
        const: Dict[str, np.ndarray] = {}
        for n in list(rows):
            if n in self.values:
                del rows[n]
            elif n in self.sample_axes and self.sample_axes[n] is None:
                const[n] = rows.pop(n).whole()
            elif self.sample_axes.get(n):
                rows[n] = _AxisRows(rows[n], int(self.sample_axes[n] or 0))
        self.constants.append(const)
        if const or self.values or any(self.sample_axes.values()):
            specs = [_moved(s, rows[s.name].axis) if isinstance(rows[s.name], _AxisRows) else s
                     for s in self.specs if s.name in rows]
            layout = file_layout({n: r.shape for n, r in rows.items()}, specs)
            if layout == WHOLE:
                label = None
        return rows, label, layout

    def _plan_file(self, f: Path) -> Tuple[Dict[str, Any], Optional[_NpyRows], str]:
        names = [s.name for s in self.specs if s.name not in self.values]
        if f.suffix == ".npy":
            if len(names) != 1:
                raise InputError(f"{f}: a .npy file holds one array, but the model has {len(names)} inputs "
                                 f"({', '.join(names)})", "save an .npz with one array per input name, or give "
                                 "the value of an input that is not data with --input-value NAME=VALUE")
            rows = {names[0]: _NpyRows(f)}
            return rows, None, file_layout({names[0]: rows[names[0]].shape}, self.specs)
        arrays, label = self._npz_arrays(f, names)
        arrays = {n: k for n, k in arrays.items() if n not in self.values}
        try:
            rows = {n: _NpyRows(f, k) for n, k in arrays.items()}
            lab = _NpyRows(f, label) if label else None
        except (zipfile.BadZipFile, OSError, KeyError) as exc:
            raise InputError(f"cannot read data file '{f}': {exc}") from exc
        layout = file_layout({n: r.shape for n, r in rows.items()}, self.specs)
        return rows, (lab if layout != WHOLE else None), layout

    def _npz_arrays(self, f: Path, names: List[str]) -> Tuple[Dict[str, str], Optional[str]]:
        """Which array of the .npz ``f`` feeds each model input (``names``), and the label array's
        key (None: no labels); unreadable files, missing inputs and stray arrays are input errors."""
        try:
            with zipfile.ZipFile(f) as zf:
                keys = [n[:-4] for n in zf.namelist() if n.endswith(".npy")]
        except (zipfile.BadZipFile, OSError) as exc:
            raise InputError(f"cannot read data file '{f}': {exc}") from exc
        label_keys = [self._label_key] if self._label_key else list(LABEL_KEYS)
        label = next((k for k in label_keys if k in keys), None)
        if self._label_key and label is None:
            raise InputError(f"{f}: no label array '{self._label_key}'", f"arrays: {', '.join(keys)}")
        arrays = _input_arrays(names, keys, label)
        if not arrays:
            missing = [n for n in names if n not in keys]
            raise InputError(f"{f}: no array for model input {', '.join(repr(m) for m in missing)}",
                             f"arrays in the file: {', '.join(keys) or 'none'}")
        extra = [k for k in keys if k not in arrays.values() and k != label and k not in self.values]
        if extra and all(n in keys for n in names):
            raise InputError(f"{f}: '{extra[0]}' is not a model input", f"model inputs: {', '.join(names)}")
        return arrays, label

    def sample_nbytes(self) -> int:
        """Bytes of one sample (a row of every input array) of the first file."""
        rows = self._plans[0][0]
        return sum(int(np.prod(r.shape[1:], dtype=np.int64)) * r.dtype.itemsize for r in rows.values())

    @property
    def layouts(self) -> List[str]:
        """The layout of each file (``stacked``, ``rows`` or ``whole``; see :func:`file_layout`)."""
        return [layout for _, _, layout in self._plans]

    @property
    def has_labels(self) -> bool:
        return all(lab is not None for _, lab, _ in self._plans)

    def file_lengths(self) -> List[int]:
        """How many samples each file gives (1 for a file read whole)."""
        return [1 if layout == WHOLE else len(next(iter(rows.values()))) for rows, _, layout in self._plans]

    def __len__(self) -> int:
        n = sum(self.file_lengths())
        return n if self.limit is None else min(n, self.limit)

    def fingerprint(self) -> Optional[str]:
        h = hashlib.sha256()
        for f in self.files:
            st = f.stat()
            h.update(f"{f.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def samples(self) -> Iterator[Sample]:
        count = 0
        for f, (rows, label, layout), const in zip(self.files, self._plans, self.constants):
            if self.limit is not None and count >= self.limit:
                return
            fixed = {**const, **self.values}
            if layout == WHOLE:
                feed = {n: r.whole() for n, r in rows.items()}
                count += 1
                yield self._checked({**feed, **fixed}, str(f)), None
                continue
            counts = {len(r) for r in rows.values()} | ({len(label)} if label is not None else set())
            if len(counts) != 1:
                raise InputError(f"{f}: arrays have different sample counts {sorted(counts)}")
            iters = {n: r.rows() for n, r in rows.items()}
            labels = label.rows() if label is not None else None
            for i in range(counts.pop()):
                if self.limit is not None and count >= self.limit:
                    return
                feed = {n: next(it) for n, it in iters.items()}
                if layout == STACKED:
                    feed = {n: np.asarray(a[0]) for n, a in feed.items()}  # a 0-d array, not a NumPy scalar
                else:
                    feed = {n: (np.moveaxis(a, 0, rows[n].axis) if isinstance(rows[n], _AxisRows) else a)
                            for n, a in feed.items()}
                feed.update(fixed)
                y = next(labels)[0] if labels is not None else None
                count += 1
                yield self._checked(feed, f"{f}[{i}]"), y


def _input_arrays(names: Sequence[str], keys: Sequence[str], label: Optional[str]) -> Dict[str, str]:
    """Model input -> array of an ``.npz``: by input name; for a one-input model also ``x`` or
    the only array that is not the label. Empty when nothing matches."""
    if all(n in keys for n in names):
        return {n: n for n in names}
    if len(names) == 1:
        rest = [k for k in keys if k != label]
        if "x" in rest:
            return {names[0]: "x"}
        if len(rest) == 1:
            return {names[0]: rest[0]}
    return {}


class IterableSource(Source):
    """Any Python iterable of feeds ``{input_name: array}`` or of ``(feed, label)`` pairs.

    A feed's arrays may hold several samples along axis 0; they are split into samples of one.
    """

    description = "iterable"

    def __init__(self, iterable: Iterable[Any], specs: Sequence[TensorSpec], check: bool = True,
                 limit: Optional[int] = None, values: Optional[Mapping[str, np.ndarray]] = None,
                 sample_axes: Optional[Mapping[str, Optional[int]]] = None):
        super().__init__(specs, check)
        self.iterable = iterable
        self.limit = limit
        self.values = dict(values or {})
        self.sample_axes = dict(sample_axes or {})
        self._labelled: Optional[bool] = None

    def __len__(self) -> int:
        n = len(self.iterable)  # type: ignore[arg-type]  # TypeError when it has no length
        return n if self.limit is None else min(n, self.limit)

    @property
    def has_labels(self) -> bool:
        return bool(self._labelled)

    def samples(self) -> Iterator[Sample]:
        count = 0
        for i, item in enumerate(self.iterable):
            label = None
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Mapping):
                item, label = item
                self._labelled = True
            if not isinstance(item, Mapping):
                raise InputError(f"sample {i} of the data is a {type(item).__name__}, not a dict of input arrays")
            for one, y, where in _split_rows(i, item, label, self.values, self.sample_axes):
                if self.limit is not None and count >= self.limit:
                    return
                count += 1
                yield self._checked(one, where), y


def _split_rows(i: int, item: Mapping[str, Any], label: Any, values: Optional[Mapping[str, np.ndarray]] = None,
                sample_axes: Optional[Mapping[str, Optional[int]]] = None,
                ) -> Iterator[Tuple[Dict[str, np.ndarray], Any, str]]:
    """The samples of one feed whose arrays may hold several along their sample axis (the first,
    or the one ``sample_axes`` names; ``None``: no sample axis, the array goes to every sample):
    ``(feed, label, where)``. ``values`` fill the inputs the feed does not hold."""
    axes = dict(sample_axes or {})
    feed = {k: np.asarray(v) for k, v in item.items()}
    fixed = {k: a for k, a in feed.items() if k in axes and axes[k] is None or a.ndim == 0}
    for k, v in (values or {}).items():
        if k not in feed:
            fixed[k] = np.asarray(v)
    split = {k: a for k, a in feed.items() if k not in fixed}
    n = {a.shape[axes.get(k) or 0] for k, a in split.items()}
    if len(n) > 1:
        detail = ", ".join(f"{k}: {a.shape[axes.get(k) or 0]}" for k, a in split.items())
        raise InputError(f"sample {i}: arrays have different batch sizes {sorted(n)} ({detail})",
                         "declare the inputs without a sample axis (a state, a rate): sample_axes={NAME: None}")
    rows = n.pop() if n else 1
    labels = np.asarray(label) if label is not None else None
    for r in range(rows):
        one = {k: (np.take(a, [r], axis=axes.get(k) or 0) if rows > 1 else a) for k, a in split.items()}
        one.update(fixed)
        y = None if labels is None else (labels[r] if labels.ndim and len(labels) == rows and rows > 1 else labels)
        yield one, y, f"sample {i}" + (f"[{r}]" if rows > 1 else "")


def open_source(data: Any, specs: Sequence[TensorSpec], preprocess: Any = None, *, check: bool = True,
                label_key: Optional[str] = None, limit: Optional[int] = None,
                values: Optional[Mapping[str, np.ndarray]] = None,
                sample_axes: Optional[Mapping[str, Optional[int]]] = None) -> Source:
    """The right :class:`Source` for ``data``: a :class:`Source` (returned as is), a path to an image
    folder (needs ``preprocess``, a :class:`~sdk.preprocess.PreprocessSpec`; when None, the size comes
    from a static NCHW/NHWC model input), a ``.npy``/``.npz`` file or folder, or a Python iterable."""
    if isinstance(data, Source):
        return data
    if isinstance(data, (str, os.PathLike)):
        p = Path(data)
        if not p.exists():
            raise InputError(f"data path '{p}' does not exist")
        if p.is_dir():
            try:
                entries = list(p.iterdir())
            except OSError as exc:
                raise InputError(f"cannot read data folder '{p}': {exc}") from exc
            if not entries:
                raise InputError(f"data folder '{p}' is empty")
            if any(e.suffix in (".npy", ".npz") for e in entries):
                return ArraySource(p, specs, check=check, label_key=label_key, limit=limit, values=values,
                                   sample_axes=sample_axes)
            _image_files(p)  # a folder of neither arrays nor images: say so before asking for a spec
            spec = preprocess if preprocess is not None else default_preprocess(specs)
            return ImageFolderSource(p, spec, specs, check=check, limit=limit)
        return ArraySource(p, specs, check=check, label_key=label_key, limit=limit, values=values,
                                   sample_axes=sample_axes)
    if isinstance(data, Mapping):
        return IterableSource([data], specs, check=check, limit=limit, values=values, sample_axes=sample_axes)
    try:
        iter(data)
    except TypeError as exc:
        raise InputError(f"cannot use a {type(data).__name__} as data",
                         "give a path, or an iterable of {input_name: array}") from exc
    return IterableSource(data, specs, check=check, limit=limit, values=values, sample_axes=sample_axes)


def default_preprocess(specs: Sequence[TensorSpec]) -> Any:
    """A PreprocessSpec for a single 3-channel image input whose H and W are static."""
    from .preprocess import PreprocessSpec

    if len(specs) != 1 or len(specs[0].shape) != 4:
        raise InputError("an image folder needs a preprocessing spec for this model", "pass --preprocess size=HxW ...")
    s = specs[0]
    shape = s.shape
    layout = "NCHW" if shape[1] == 3 else ("NHWC" if shape[3] == 3 else None)
    hw = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if layout is None or not all(isinstance(d, int) and d > 0 for d in hw):
        raise InputError(f"cannot derive image preprocessing from input '{s.name}' {format_shape(shape)}",
                         "pass --preprocess size=HxW (and mean/std/layout)")
    dtype = s.dtype if s.dtype in ("float32", "float16", "uint8", "int8") else "float32"
    return PreprocessSpec(size=(int(hw[0]), int(hw[1])), layout=layout, dtype=dtype)  # type: ignore[arg-type]


def batched(samples: Iterable[Sample], batch_size: int) -> Iterator[Tuple[Feed, List[Optional[np.ndarray]], int]]:
    """Group samples of batch 1 into batches of up to ``batch_size`` (concatenated along axis 0).
    Yields ``(feed, labels, n)``."""
    buf: List[Sample] = []
    for s in samples:
        buf.append(s)
        if len(buf) >= batch_size:
            yield _concat(buf)
            buf = []
    if buf:
        yield _concat(buf)


def _concat(buf: List[Sample]) -> Tuple[Feed, List[Optional[np.ndarray]], int]:
    if len(buf) == 1:
        return buf[0][0], [buf[0][1]], 1
    names = list(buf[0][0])
    feed = {n: np.concatenate([s[0][n] for s in buf], axis=0) for n in names}
    return feed, [s[1] for s in buf], len(buf)


# -- preprocessing options --------------------------------------------------------------------------
def parse_preprocess(items: Optional[Sequence[str]]) -> Any:
    """A PreprocessSpec from CLI items: one ``spec.toml`` path (keys at top level or under
    ``[preprocess]``) and/or ``key=value`` pairs (``size=224x224 mean=123.7,116.3,103.5
    layout=NHWC``). None when no items."""
    from .preprocess import PreprocessSpec

    if not items:
        return None
    data: Dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            p = Path(item)
            if not p.exists():
                raise ConfigError(f"preprocess spec file '{p}' does not exist", "give a .toml file or key=value pairs")
            data.update(_read_toml(p))
            continue
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip()
        try:
            data[key] = _preprocess_value(key, value)
        except ValueError as exc:
            raise ConfigError(f"bad --preprocess '{item}': {exc}",
                              "e.g. size=224x224 mean=123.7,116.3,103.5 std=58.4,57.1,57.4 pad_value=114") from exc
    if "size" in data and (not isinstance(data["size"], (list, tuple)) or len(data["size"]) != 2):
        raise ConfigError(f"preprocess size {data['size']} is not valid", "write size=HxW, e.g. size=224x224")
    return PreprocessSpec.from_dict(data)


def _preprocess_value(key: str, value: str) -> Any:
    """One ``key=value`` of --preprocess, typed (ValueError on a bad number)."""
    if key == "size":
        parts = [v for v in value.replace("x", ",").split(",") if v]
        return [int(v) for v in parts] if len(parts) == 2 else parts
    if key in ("mean", "std"):
        return [float(v) for v in value.split(",") if v]
    if key == "pad_value":
        return int(value)
    return value


def _warn(message: str) -> None:
    """One ``warning: ...`` line on stderr (a data file that was skipped)."""
    import sys

    from .textsafe import plain

    sys.stderr.write(f"warning: {plain(message)}\n")
    sys.stderr.flush()


def _read_toml(p: Path) -> Dict[str, Any]:
    from .config import load_toml

    data = load_toml(p, f"preprocess spec '{p}'", "preprocess spec files")
    if "preprocess" in data and isinstance(data["preprocess"], dict):
        data = data["preprocess"]
    return dict(data)
