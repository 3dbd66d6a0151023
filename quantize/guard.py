"""The accuracy guard of a run without held-out data: the last part of the calibration data is held
out (never used for ranges) and the default budget is checked on it.

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
from typing import Any, Iterator, Optional, Tuple

__all__ = ["split", "HELD_OUT_FRACTION", "MIN_HELD_OUT", "MIN_CALIBRATION"]

#: the share of the calibration samples held out for the guard
HELD_OUT_FRACTION = 0.2
#: the fewest held-out samples a check is made on
MIN_HELD_OUT = 8
#: the fewest samples left for the ranges
MIN_CALIBRATION = 8


def _fingerprint(base: Optional[str], keep: int) -> Optional[str]:
    """The calibration part's fingerprint: the data's and how many samples of it the ranges read."""
    return None if base is None else hashlib.sha256(f"{base}\0first {keep}".encode()).hexdigest()


class _Tail:
    """Samples ``[skip, ...)`` of a source, with its input specs (the evaluation source)."""

    description = "held-out calibration samples"

    def __init__(self, source: Any, skip: int, count: int):
        self.source, self.skip, self.count = source, skip, count
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
    head = copy.copy(source)
    head.limit = keep if source.limit is None else min(source.limit, keep)
    from ..sources import ImageFolderSource

    if isinstance(source, ImageFolderSource) and len(source.files) == n:
        # one sample per file (an image folder): cut the files too, so an executor that ships each
        # shard its own files (Ray: the limit is per shard there) reads none of the held-out ones
        head.files = list(source.files[:keep])
    head.fingerprint = functools.partial(_fingerprint, source.fingerprint() if hasattr(source, "fingerprint") else None,
                                         keep)
    return head, _Tail(source, keep, held), None
