"""Reports of validation and robustness runs: self-contained HTML with inline SVG plots
(:mod:`sdk.reports.html`, plots in :mod:`sdk.reports.svg`), JUnit XML (:mod:`sdk.reports.junit`)
and JSON. They render plain result dicts (the ``to_dict()`` of a run), so they need nothing but
the standard library and open offline."""
from __future__ import annotations

import json
import math
import os
from typing import Any, Union

__all__ = ["write_json", "to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Dicts, lists, numbers and strings only: NumPy scalars/arrays become Python values, and
    non-finite floats become the strings "inf", "-inf", "nan" (JSON has no such numbers)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def write_json(path: Union[str, "os.PathLike[str]"], data: Any) -> None:
    """Write ``data`` as JSON to ``path`` (atomic; '-' for stdout)."""
    import sys

    text = json.dumps(to_jsonable(data), indent=2) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        return
    from ..atomic import atomic_write

    atomic_write(path, text)
