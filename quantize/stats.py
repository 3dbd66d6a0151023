"""Streaming per-tensor statistics that merge exactly.

:class:`TensorStats` keeps, for one activation tensor: exact min/max, a count of non-finite values,
per-channel sums (axis 1, for bias correction) and a signed histogram whose bins are aligned on
multiples of a power-of-two width ``w``: bin ``i`` counts values in ``[i*w, (i+1)*w)`` for
``i`` in ``[-NBINS, NBINS)``. When a batch falls outside that range, ``w`` doubles and pairs of bins
merge (``floor(floor(x/w)/2) == floor(x/2w)``), which is exact. So the histogram after any sequence
of batches equals the one a single batch over all the data gives (the smallest power-of-two ``w`` that
holds the data), and two histograms of the same tensor merge exactly whatever their widths.

Division by a power of two is exact in floating point, so ``floor(x / w)`` is computed without
rounding error.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

__all__ = ["TensorStats", "CalibrationStats", "NBINS"]

NBINS = 2048
"""Bins on each side of zero (the histogram holds ``2 * NBINS`` bins)."""


def _pow2_width(absmax: float, nbins: int) -> float:
    """Smallest power of two ``w`` with ``absmax / w <= nbins`` (then refined by :meth:`_fits`)."""
    if not absmax > 0 or not math.isfinite(absmax):
        return 0.0
    return math.ldexp(1.0, math.ceil(math.log2(absmax / nbins)))


class _Scratch:
    """Work buffers of one thread for :meth:`TensorStats.update`, grown on demand and reused, so a
    batch costs no fresh allocation (and no page faults): values (the data's float type), bin
    indices (intp, what ``np.bincount`` reads without a copy) and a boolean mask."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self.values = np.empty(0, dtype)
        self.index = np.empty(0, np.intp)
        self.mask = np.empty(0, bool)

    def reserve(self, n: int) -> "_Scratch":
        if len(self.values) < n:
            self.values = np.empty(n, self.dtype)
            self.index = np.empty(n, np.intp)
            self.mask = np.empty(n, bool)
        return self

    def count_equal(self, flat: np.ndarray, value: float) -> int:
        m = self.mask[:flat.size]
        np.equal(flat, value, out=m)
        return int(np.count_nonzero(m))


_SCRATCH = threading.local()


def _edge_counts(flat: np.ndarray, lo: float, hi: float, scratch: _Scratch) -> Tuple[int, int, int]:
    """``(zeros, count at lo, count at hi)`` of ``flat``; the count at hi is -1 when it is left to
    the histogram (or counted after it)."""
    n = int(flat.size)
    zeros = 0 if (lo > 0.0 or hi < 0.0) else scratch.count_equal(flat, 0.0)
    if hi == lo:
        return zeros, n, n
    n_lo = zeros if lo == 0.0 else scratch.count_equal(flat, lo)  # ReLU outputs: min is 0
    return zeros, n_lo, (zeros if hi == 0.0 else -1)


def _scratch(dtype: np.dtype, n: int) -> _Scratch:
    per_dtype = getattr(_SCRATCH, "by_dtype", None)
    if per_dtype is None:
        per_dtype = _SCRATCH.by_dtype = {}
    s = per_dtype.get(dtype)
    if s is None:
        s = per_dtype[dtype] = _Scratch(dtype)
    return s.reserve(n)


@dataclass
class TensorStats:
    """Statistics of one tensor. ``width`` is 0 until a non-zero value has been seen."""

    name: str
    nbins: int = NBINS
    count: int = 0
    nonfinite: int = 0
    zeros: int = 0
    at_min: int = 0   # values equal to the minimum (a point mass there: a saturating activation)
    at_max: int = 0
    min: float = math.inf
    max: float = -math.inf
    width: float = 0.0
    hist: np.ndarray = field(default=None)  # type: ignore[arg-type]  # set in __post_init__
    channel_sum: Optional[np.ndarray] = None
    channel_count: int = 0
    track_channels: bool = False
    #: per-channel minimum and maximum along the last axis (the features of a MatMul/Gemm input),
    #: kept for the tensors that activation-weight balancing (:mod:`sdk.quantize.smooth`) rescales
    channel_min: Optional[np.ndarray] = None
    channel_max: Optional[np.ndarray] = None
    track_extremes: bool = False

    def __post_init__(self):
        if self.hist is None:
            self.hist = np.zeros(2 * self.nbins, dtype=np.int64)

    # -- update -----------------------------------------------------------------------------------------
    def update(self, x: np.ndarray, channel_axis: Optional[int] = 1) -> None:
        """Add the values of ``x`` (any shape). Non-finite values are counted and left out.
        With ``track_channels``, per-channel sums along ``channel_axis`` are kept too.

        Cost per value: min, max, at most two comparisons (zeros, the minimum), and the histogram
        (scale, floor, shift, cast, bincount) in reused scratch buffers; the count at the maximum
        comes from the batch histogram when the maximum sits on a bin edge (saturating activations)."""
        x = np.asarray(x)
        if x.dtype != np.float32 and x.dtype != np.float64:
            x = x.astype(np.float32)
        flat = x.ravel()
        if flat.size == 0:
            return
        lo, hi = float(flat.min()), float(flat.max())  # NaN propagates: finite extremes mean all finite
        full: Optional[np.ndarray] = x
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = np.isfinite(flat)
            self.nonfinite += int(flat.size - np.count_nonzero(finite))
            flat = flat[finite]
            full = None  # channel sums need the full shape; skip them for this batch
            if flat.size == 0:
                return
            lo, hi = float(flat.min()), float(flat.max())
        n = int(flat.size)
        self.count += n
        scratch = _scratch(flat.dtype, n)
        zeros, n_lo, n_hi = _edge_counts(flat, lo, hi, scratch)
        self.zeros += zeros
        if self.track_channels and full is not None and channel_axis is not None and full.ndim >= 2:
            self._add_channel_sums(full, channel_axis)
        if self.track_extremes and full is not None and full.ndim >= 1:
            self._add_channel_extremes(full)
        if self.width == 0.0:
            self.width = _pow2_width(max(abs(lo), abs(hi)), self.nbins)
            if self.width == 0.0:  # all zeros so far: zero is bin 0 whatever the width
                self._extremes(lo, n_lo, hi, n_hi)
                self.hist[self.nbins] += n
                return
        while not self._fits(lo, hi, self.width):
            self._coarsen()
        counts, offset = self._add_histogram(flat, lo, scratch)
        if n_hi < 0:
            k = math.floor(hi / self.width)
            # the maximum on a bin's lower edge: that bin holds only values equal to it
            n_hi = int(counts[k + offset]) if k * self.width == hi else scratch.count_equal(flat, hi)
        self._extremes(lo, n_lo, hi, n_hi)

    def _add_channel_sums(self, x: np.ndarray, channel_axis: int) -> None:
        channel_axis %= x.ndim   # -1: the last axis (TFLite's NHWC channels)
        if channel_axis == 1 and x.ndim >= 3 and x.flags.c_contiguous:
            # rows of one (sample, channel) summed in the data's type (pairwise: ~1e-7 relative),
            # then across samples in float64; twice as fast as one float64 reduction
            s = x.reshape(x.shape[0], x.shape[1], -1).sum(axis=2).sum(axis=0, dtype=np.float64)
        else:
            s = np.sum(x, axis=tuple(i for i in range(x.ndim) if i != channel_axis), dtype=np.float64)
        if self.channel_sum is None or len(self.channel_sum) == len(s):
            self.channel_sum = s if self.channel_sum is None else self.channel_sum + s
            self.channel_count += x.size // x.shape[channel_axis]

    def _add_channel_extremes(self, x: np.ndarray) -> None:
        rows = x.reshape(-1, x.shape[-1])
        lo, hi = rows.min(axis=0).astype(np.float64), rows.max(axis=0).astype(np.float64)
        self._merge_extremes(lo, hi)

    def _merge_extremes(self, lo: np.ndarray, hi: np.ndarray) -> None:
        if self.channel_min is None or self.channel_max is None:
            self.channel_min, self.channel_max = lo.copy(), hi.copy()
        elif len(self.channel_min) == len(lo):
            self.channel_min = np.minimum(self.channel_min, lo)
            self.channel_max = np.maximum(self.channel_max, hi)

    def _add_histogram(self, flat: np.ndarray, lo: float, scratch: "_Scratch") -> Tuple[np.ndarray, int]:
        """Add ``flat`` (finite, fitting the current width) to the histogram; returns the batch's
        bin counts and the offset of bin 0 in them."""
        n = int(flat.size)
        # x * (1/w) is exact for a power-of-two w (in float32 too), so floor() gives the exact bin
        idx = scratch.index[:n]
        scale = flat.dtype.type(1.0 / self.width)
        if lo >= 0.0:  # ReLU/Clip outputs: floor is the truncating cast, and only bins >= 0 are hit
            np.multiply(flat, scale, out=idx, casting="unsafe")
            counts = np.bincount(idx, minlength=self.nbins)
            self.hist[self.nbins:] += counts
            return counts, 0
        t = scratch.values[:n]
        np.multiply(flat, scale, out=t)
        np.floor(t, out=t)
        np.add(t, self.nbins, out=t)  # small integers: exact in float32
        np.copyto(idx, t, casting="unsafe")
        counts = np.bincount(idx, minlength=2 * self.nbins)
        self.hist += counts
        return counts, self.nbins

    def _extremes(self, lo: float, n_lo: int, hi: float, n_hi: int) -> None:
        """Fold another min/max (with how many values sit exactly there) into self."""
        if lo < self.min:
            self.min, self.at_min = lo, n_lo
        elif lo == self.min:
            self.at_min += n_lo
        if hi > self.max:
            self.max, self.at_max = hi, n_hi
        elif hi == self.max:
            self.at_max += n_hi

    def _fits(self, lo: float, hi: float, w: float) -> bool:
        return math.floor(hi / w) < self.nbins and math.floor(lo / w) >= -self.nbins

    def _coarsen(self) -> None:
        """Double the bin width: bin i joins bin floor(i/2) (exact)."""
        n = self.nbins  # even: pairs (2m, 2m+1) of stored bins hold signed bins 2k, 2k+1 -> k
        new = np.zeros_like(self.hist)
        new[n // 2: n // 2 + n] = self.hist.reshape(-1, 2).sum(axis=1)
        self.hist = new
        self.width *= 2.0

    def coarsen_to(self, width: float) -> None:
        while self.width < width:
            self._coarsen()

    # -- merge --------------------------------------------------------------------------------------------
    def merge(self, other: "TensorStats") -> "TensorStats":
        """Add ``other`` (same tensor) into self, exactly."""
        if other.nbins != self.nbins:
            raise ValueError("cannot merge histograms with different bin counts")
        self.count += other.count
        self.nonfinite += other.nonfinite
        self.zeros += other.zeros
        # a width of 0 means only zeros were seen (all in bin 0, which no coarsening moves)
        o = TensorStats(other.name, other.nbins, width=other.width, hist=other.hist)
        w = max(self.width, o.width)
        if self.width:
            self.coarsen_to(w)
        else:
            self.width = w
        if o.width:
            o.coarsen_to(w)  # replaces o.hist, never modifies other's array
        self.hist = self.hist + o.hist
        if other.count:
            self._extremes(other.min, other.at_min, other.max, other.at_max)
        if other.channel_sum is not None:
            if self.channel_sum is None:
                self.channel_sum = other.channel_sum.copy()
                self.channel_count = other.channel_count
            elif len(self.channel_sum) == len(other.channel_sum):
                self.channel_sum = self.channel_sum + other.channel_sum
                self.channel_count += other.channel_count
        if other.channel_min is not None and other.channel_max is not None:
            self.track_extremes = True
            self._merge_extremes(other.channel_min, other.channel_max)
        return self

    # -- views ----------------------------------------------------------------------------------------------
    @property
    def seen(self) -> bool:
        return self.count > 0

    @property
    def absmax(self) -> float:
        return max(abs(self.min), abs(self.max)) if self.seen else 0.0

    def edges(self) -> np.ndarray:
        """Bin edges of :attr:`hist` (``2*nbins + 1`` values)."""
        return np.arange(-self.nbins, self.nbins + 1, dtype=np.float64) * self.width

    def abs_hist(self, exclude_zeros: bool = False) -> Tuple[np.ndarray, float]:
        """Histogram of ``|x|``: bin ``j`` counts values with ``j*w <= |x| <= (j+1)*w``; returns
        ``(counts[nbins], w)``. ``exclude_zeros`` leaves exact zeros out (ReLU outputs)."""
        h = self.hist
        pos = h[self.nbins:]
        neg = h[:self.nbins][::-1]
        out = pos + neg
        if exclude_zeros and self.zeros:
            out = out.copy()
            out[0] -= self.zeros
        return out, (self.width or 1.0)

    def channel_mean(self) -> Optional[np.ndarray]:
        if self.channel_sum is None or self.channel_count == 0:
            return None
        return self.channel_sum / self.channel_count

    # -- (de)serialisation ---------------------------------------------------------------------------------
    def to_arrays(self, prefix: str) -> Dict[str, np.ndarray]:
        out = {
            prefix + "scalars": np.array([self.count, self.nonfinite, self.channel_count, self.zeros, self.at_min,
                                          self.at_max], np.int64),
            prefix + "range": np.array([self.min, self.max, self.width], np.float64),
            prefix + "hist": self.hist,
        }
        if self.channel_sum is not None:
            out[prefix + "chsum"] = self.channel_sum
        if self.channel_min is not None and self.channel_max is not None:
            out[prefix + "chmin"], out[prefix + "chmax"] = self.channel_min, self.channel_max
        return out

    @classmethod
    def from_arrays(cls, name: str, arrays: Mapping[str, np.ndarray], prefix: str) -> "TensorStats":
        count, nonfinite, ch_count, zeros, at_min, at_max = (int(v) for v in arrays[prefix + "scalars"])
        lo, hi, width = (float(v) for v in arrays[prefix + "range"])
        hist = np.asarray(arrays[prefix + "hist"], np.int64)
        chsum = arrays.get(prefix + "chsum")
        chmin, chmax = arrays.get(prefix + "chmin"), arrays.get(prefix + "chmax")
        extremes = chmin is not None and chmax is not None
        return cls(name, len(hist) // 2, count, nonfinite, zeros, at_min, at_max, lo, hi, width, hist.copy(),
                   None if chsum is None else np.asarray(chsum, np.float64), ch_count,
                   channel_min=np.asarray(chmin, np.float64) if extremes else None,
                   channel_max=np.asarray(chmax, np.float64) if extremes else None, track_extremes=extremes)


class CalibrationStats:
    """Statistics of every calibrated tensor of one model: the calibration artifact.

    Keyed by the model's sha256 and the tensor names. Saved as one ``.npz`` (with a JSON header), so
    choosing another method or another target later costs no inference.
    """

    FORMAT = "edgesdk-calibration-v1"

    def __init__(self, model_sha256: str, tensors: Dict[str, TensorStats], samples: int = 0,
                 meta: Optional[Dict[str, object]] = None):
        self.model_sha256 = model_sha256
        self.tensors = tensors
        self.samples = samples
        self.meta = dict(meta or {})

    @classmethod
    def empty(cls, model_sha256: str, names: Iterable[str], nbins: int = NBINS,
              channel_names: Iterable[str] = (), extreme_names: Iterable[str] = ()) -> "CalibrationStats":
        """Empty statistics for ``names``; ``channel_names`` also keep per-channel sums (axis 1),
        ``extreme_names`` per-channel minima and maxima (last axis)."""
        chans, ext = set(channel_names), set(extreme_names)
        return cls(model_sha256, {n: TensorStats(n, nbins, track_channels=n in chans, track_extremes=n in ext)
                                  for n in names})

    @property
    def names(self) -> List[str]:
        return list(self.tensors)

    def update(self, outputs: Mapping[str, np.ndarray], samples: int, channel_axis: int = 1) -> None:
        """Add one batch of ``outputs`` (tensor name -> array) of ``samples`` samples; per-channel
        sums along ``channel_axis`` (1: NCHW; -1: the channels-last tensors of a TFLite model)."""
        for name, arr in outputs.items():
            t = self.tensors.get(name)
            if t is not None:
                t.update(arr, channel_axis)
        self.samples += samples

    def merge(self, other: "CalibrationStats") -> "CalibrationStats":
        if other.model_sha256 != self.model_sha256:
            raise ValueError("cannot merge statistics of different models")
        for name, t in other.tensors.items():
            if name in self.tensors:
                self.tensors[name].merge(t)
            else:
                self.tensors[name] = t
        self.samples += other.samples
        return self

    def __getitem__(self, name: str) -> TensorStats:
        return self.tensors[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    # -- files -------------------------------------------------------------------------------------------
    def to_arrays(self) -> Dict[str, np.ndarray]:
        import json

        header = {"format": self.FORMAT, "model_sha256": self.model_sha256, "samples": self.samples,
                  "names": list(self.tensors), "meta": self.meta}
        out: Dict[str, np.ndarray] = {"header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
        for i, t in enumerate(self.tensors.values()):
            out.update(t.to_arrays(f"t{i}_"))
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "CalibrationStats":
        import json

        header = json.loads(bytes(np.asarray(arrays["header"], np.uint8)).decode())
        if header.get("format") != cls.FORMAT:
            raise ValueError(f"not an edgesdk calibration file (format {header.get('format')!r})")
        tensors = {n: TensorStats.from_arrays(n, arrays, f"t{i}_") for i, n in enumerate(header["names"])}
        return cls(header["model_sha256"], tensors, int(header["samples"]), header.get("meta"))

    def save(self, path) -> None:
        """Write atomically (``.npz``)."""
        from ..atomic import atomic_path

        with atomic_path(path, suffix=".npz") as tmp:
            arrays: Dict[str, Any] = self.to_arrays()
            np.savez(tmp, **arrays)

    @classmethod
    def load(cls, path) -> "CalibrationStats":
        from ..sources import check_array_file

        check_array_file(path)
        with np.load(path, allow_pickle=False) as npz:
            return cls.from_arrays({k: npz[k] for k in npz.files})
