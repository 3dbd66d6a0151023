"""Cheap probes for optional packages: installed? which version? No imports of the package.

Runs on the board too: Python 3.8.
"""
from __future__ import annotations

import importlib.util
from typing import Optional

__all__ = ["module_installed", "dist_version"]


def module_installed(module: str) -> bool:
    """True when ``module`` can be found on the path (it is not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def dist_version(*dists: str) -> Optional[str]:
    """Version of the first installed distribution among ``dists`` (package metadata only)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    for d in dists:
        try:
            return version(d)
        except PackageNotFoundError:
            continue
    return None
