"""The accuracy guard of a run without held-out data: part of the calibration data is held out (never
used for ranges) and the default budget is checked on it.

The held-out samples are spread evenly over the data where it can be cut sample by sample (an image
folder of one image per file, an in-memory list of feeds): data in a user's order (by name, by time, by
source) holds its kinds of input together, and its tail alone would test one kind only. Array files
(``.npy``/``.npz``, sharded by rows across workers) keep the last part.

``split(source)`` returns ``(calibration part, held-out part, None)`` or ``(source, None, why)`` when
there are too few samples (or their number is unknown) to hold out :data:`MIN_HELD_OUT` and keep
:data:`MIN_CALIBRATION` for the ranges.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import math
from typing import Any, Iterator, List, Mapping, Optional, Tuple

__all__ = ["split", "HELD_OUT_FRACTION", "MIN_HELD_OUT", "MIN_CALIBRATION"]

#: the share of the calibration samples held out for the guard
HELD_OUT_FRACTION = 0.2
#: the fewest held-out samples a check is made on
MIN_HELD_OUT = 8
#: the fewest samples left for the ranges
MIN_CALIBRATION = 8


def _fingerprint(base: Optional[str], part: str) -> Optional[str]:
    """The calibration part's fingerprint: the data's and which of its samples the ranges read."""
    return None if base is None else hashlib.sha256(f"{base}\0{part}".encode()).hexdigest()


class _Tail:
    """Samples ``[skip, ...)`` of a source, with its input specs (the evaluation source); ``how``: which
    samples of the calibration data they are, in words."""

    description = "held-out calibration samples"

    def __init__(self, source: Any, skip: int, count: int, how: str = "the last ones"):
        self.source, self.skip, self.count, self.how = source, skip, count, how
        self.specs = getattr(source, "specs", [])
        self.skipped = 0
        self.warnings: list = []

    def samples(self) -> Iterator[Any]:
        return itertools.islice(self.source.samples(), self.skip, None)

    def __iter__(self) -> Iterator[Any]:
        for feed, _ in self.samples():
            yield feed

    def length(self) -> int:
        return self.count

    def __len__(self) -> int:
        return self.count

    @property
    def has_labels(self) -> bool:
        return bool(getattr(self.source, "has_labels", False))


def split(source: Any) -> Tuple[Any, Optional[Any], Optional[str]]:
    """``(calibration, held_out, None)``: the first samples for the ranges, the last
    ``max(MIN_HELD_OUT, 20%)`` held out; or ``(source, None, reason)`` when it cannot be split."""
    n = source.length() if hasattr(source, "length") else None
    if n is None:
        return source, None, "the calibration data does not say how many samples it holds"
    held = max(MIN_HELD_OUT, math.ceil(HELD_OUT_FRACTION * n))
    if n - held < MIN_CALIBRATION:
        return source, None, (f"{n} calibration samples are too few to hold out {MIN_HELD_OUT} "
                              f"(at least {MIN_HELD_OUT + MIN_CALIBRATION} needed)")
    keep = n - held
    if not hasattr(source, "limit"):
        return source, None, "the calibration data cannot be cut"
    base = source.fingerprint() if hasattr(source, "fingerprint") else None
    spread = _split_spread(source, n, held, base)
    if spread is not None:
        return spread[0], spread[1], None
    head = copy.copy(source)
    head.limit = keep if source.limit is None else min(source.limit, keep)
    head.fingerprint = functools.partial(_fingerprint, base, f"first {keep}")
    return head, _Tail(source, keep, held), None


def spread_indices(n: int, held: int) -> List[int]:
    """``held`` of the indices ``0..n-1``, evenly spread: the middle of each of ``held`` equal stretches."""
    return [int((k + 0.5) * n / held) for k in range(held)]


def _split_spread(source: Any, n: int, held: int, base: Optional[str]) -> Optional[Tuple[Any, _Tail]]:
    """``(calibration part, held-out part)`` with the held-out samples spread over the data, where the
    source holds one sample per file (an image folder: the held-out files leave the part's file list,
    so an executor that ships each shard its own files reads none of them) or per item of a list;
    else None. ``base``: the source's fingerprint."""
    from ..sources import ImageFolderSource, IterableSource

    if isinstance(source, ImageFolderSource) and len(source.files) == n:
        field = "files"
    elif isinstance(source, IterableSource) and isinstance(source.iterable, (list, tuple)) \
            and len(source.iterable) == n and _one_sample_each(source):
        field = "iterable"
    else:
        return None
    items = list(getattr(source, field))
    picked = spread_indices(n, held)
    chosen = set(picked)
    head, rest = copy.copy(source), copy.copy(source)
    setattr(head, field, [x for i, x in enumerate(items) if i not in chosen])
    setattr(rest, field, [items[i] for i in picked])
    head.limit, rest.limit = n - held, None
    head.fingerprint = functools.partial(_fingerprint, base, "without " + ",".join(map(str, picked)))
    every = n / held
    how = f"spread over the data, about one in {every:.0f}" if every >= 1.5 else "spread over the data"
    return head, _Tail(rest, 0, held, how)


def _one_sample_each(source: Any) -> bool:
    """Whether each item of an in-memory list is one sample (its first item tells, split as the
    source splits it: a batch of several is several samples, and then items and samples do not line up)."""
    from ..errors import InputError
    from ..sources import _split_rows

    first: Any = source.iterable[0] if len(source.iterable) else None
    feed: Any = first[0] if isinstance(first, tuple) and len(first) == 2 else first
    if not isinstance(feed, Mapping):
        return False
    try:
        return sum(1 for _ in _split_rows(0, feed, None, source.values, source.sample_axes)) == 1
    except InputError:   # the calibration itself says what is wrong with it
        return False
