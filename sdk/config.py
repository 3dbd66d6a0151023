"""Configuration files: one TOML loader and one unknown-key check for specs, preprocess files,
board profiles and agent requests. An unknown key is a :class:`~sdk.errors.ConfigError` that
names it, lists the allowed keys and suggests the closest one.

Runs on the board too (bundled in the agent zipapp, which checks its requests with
:func:`check_keys`): Python 3.8, standard library only (``tomli`` below Python 3.11, imported
only when a TOML file is read).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Union

from .errors import ConfigError, MissingDependencyError
from .registry import did_you_mean

__all__ = ["load_toml", "loads_toml", "check_keys", "unknown_keys"]


def _tomllib(what: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (3.11+, guarded)
        return tomllib
    try:
        import tomli
    except ImportError as exc:  # a dependency below 3.11 (pyproject), so only a broken install
        raise MissingDependencyError(what, "tomli", "pip install tomli") from exc
    return tomli


def loads_toml(text: str, where: str, what: str = "reading TOML files") -> Dict[str, Any]:
    """Parse TOML ``text``; invalid TOML is a :class:`ConfigError` "<where> is not valid TOML: ..."."""
    toml = _tomllib(what)
    try:
        return dict(toml.loads(text))
    except toml.TOMLDecodeError as exc:
        raise ConfigError("%s is not valid TOML: %s" % (where, exc)) from exc


def load_toml(path: Union[str, "Path"], where: str = "", what: str = "reading TOML files") -> Dict[str, Any]:
    """Read the TOML file ``path`` (``where`` names it in errors, default the path): an unreadable
    file or invalid TOML is a :class:`ConfigError`."""
    p = Path(path)
    where = where or "'%s'" % p
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("cannot read %s: %s" % (where, getattr(exc, "strerror", None) or exc)) from exc
    return loads_toml(text, where, what)


def unknown_keys(data: Mapping[str, Any], allowed: Iterable[str]) -> List[str]:
    """The keys of ``data`` not in ``allowed``, sorted."""
    known = set(allowed)
    return sorted(k for k in data if k not in known)


def check_keys(data: Mapping[str, Any], allowed: Iterable[str], message: str, allowed_label: str = "allowed") -> None:
    """:class:`ConfigError` when ``data`` has a key not in ``allowed``. ``message`` is the error's
    text with ``{key}`` (the first unknown key) and ``{keys}`` (all of them, comma-separated); the
    hint lists the allowed keys after ``allowed_label`` and suggests the closest one."""
    allowed = sorted(allowed)
    unknown = unknown_keys(data, allowed)
    if not unknown:
        return
    hint = "%s: %s" % (allowed_label, ", ".join(allowed) or "none")
    close = did_you_mean(unknown[0], allowed)
    if close:
        hint = "%s; did you mean '%s'?" % (hint, close)
    raise ConfigError(message.format(key=unknown[0], keys=", ".join(unknown)), hint)
