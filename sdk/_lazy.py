"""Lazy package exports: names resolved from their modules on first access (PEP 562).

Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Sequence, Tuple


def lazy_exports(package: str, exports: Mapping[str, str],
                 also: Sequence[str] = ()) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to the module
    that defines it (a module that has no attribute of that name and is named so is exported
    itself, e.g. ``"errors": "sdk.errors"``). A resolved name is cached in the package, so later
    access costs nothing. ``also``: names defined eagerly, listed by ``dir()`` too."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        mod = importlib.import_module(module)
        if hasattr(mod, name) or module.rsplit(".", 1)[-1] != name:
            value = getattr(mod, name)
        else:
            value = mod
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted([*exports, *also])

    return __getattr__, __dir__
