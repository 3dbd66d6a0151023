"""One registry helper for every pluggable family: targets, model formats, quantization schemes,
calibration methods, power sources, CUDA backends, validation checks and corruptions.

A :class:`Registry` maps names to entries. An entry is an object (a class, a function) or a
``"module:attr"`` string loaded on first use, so listing names imports nothing heavy. Aliases
resolve to names (:data:`TARGET_ALIASES` are shared by every family named after a runtime, so
``-t trt`` means TensorRT in ``bench``, ``quantize`` and ``push`` alike). Plugins register
through the entry-point group ``edgesdk.<family>`` (value ``module:attr``). An unknown name
raises :class:`~sdk.errors.UnknownNameError` (or the family's subclass of it) listing the known
names, with a "did you mean" when one is close::

    TARGETS = Registry("target", builtin={"onnxruntime": "sdk.targets.onnxrt:OnnxRuntimeTarget"},
                       aliases=TARGET_ALIASES, entry_points="edgesdk.targets")
    TARGETS.load("ort")         # -> OnnxRuntimeTarget (imported now)

Runs on the board too (bundled in the agent zipapp): Python 3.8, standard library only.
"""
from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Type, TypeVar, Union

from .errors import EdgeSDKError, UnknownNameError

__all__ = ["Registry", "TARGET_ALIASES", "did_you_mean"]

T = TypeVar("T")

#: Short names of the runtimes, the same in every command and family (targets, schemes, ...).
TARGET_ALIASES: Dict[str, str] = {"ort": "onnxruntime", "onnxrt": "onnxruntime", "trt": "tensorrt",
                                  "litert": "tflite"}


def did_you_mean(name: str, known: Sequence[str]) -> Optional[str]:
    """The known name closest to ``name`` (difflib), or None when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


class Registry(Mapping[str, T]):
    """Names -> entries of one ``family`` (e.g. ``"target"``), in registration order.

    ``builtin`` entries may be ``"module:attr"`` strings (loaded on first :meth:`get`);
    ``aliases`` map other names to registered ones; ``entry_points`` names the plugin group;
    ``error`` is the :class:`UnknownNameError` subclass raised for an unknown name, ``load_error``
    the error for an entry that cannot be imported or a clashing registration; ``known_label``
    starts the hint (default ``"known <family>s"``); ``reserved`` names (e.g. ``"auto"``) are
    listed in the hint before the registered ones. A Registry is a read-only mapping, so
    ``name in reg``, ``reg[name]``, ``list(reg)`` and ``reg.values()`` work as on a dict."""

    def __init__(self, family: str, builtin: Optional[Mapping[str, Union[str, T]]] = None, *,
                 aliases: Optional[Mapping[str, str]] = None, entry_points: Optional[str] = None,
                 error: Type[UnknownNameError] = UnknownNameError, load_error: Type[EdgeSDKError] = EdgeSDKError,
                 known_label: Optional[str] = None, reserved: Sequence[str] = ()) -> None:
        self.family = family
        self.aliases: Dict[str, str] = dict(aliases or {})
        self.entry_point_group = entry_points
        self.error = error
        self.load_error = load_error
        self.known_label = known_label if known_label is not None else "known %ss" % family
        self.reserved = tuple(reserved)
        self._entries: Dict[str, Union[str, T]] = dict(builtin or {})
        self._entry_points_loaded = entry_points is None

    # -- registration ----------------------------------------------------------------------------
    def register(self, name: str, entry: Union[str, T], *, replace: bool = True) -> None:
        """Register ``entry`` (an object or ``"module:attr"``) under ``name``. With
        ``replace=False`` a different entry already under ``name`` is an error."""
        if not replace and name in self._entries and self._entries[name] != entry:
            raise self.load_error("a %s named '%s' is already registered" % (self.family, name))
        self._entries[name] = entry

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@reg.decorator("name")``: register the decorated object under ``name``."""
        def deco(obj: T) -> T:
            self.register(name, obj)
            return obj
        return deco

    def snapshot(self) -> Dict[str, Union[str, T]]:
        """The entries as they are now (for :meth:`restore`, e.g. in tests)."""
        return dict(self._entries)

    def restore(self, entries: Mapping[str, Union[str, T]]) -> None:
        self._entries = dict(entries)

    # -- lookup ----------------------------------------------------------------------------------
    def names(self) -> List[str]:
        """Every registered name (built-in first, then plugins), loaded or not."""
        self._load_entry_points()
        return list(self._entries)

    def canonical(self, name: str) -> str:
        """The registered name ``name`` stands for (aliases resolved); unknown: the family's error."""
        self._load_entry_points()
        key = self.aliases.get(name, name)
        if key not in self._entries:
            raise self.unknown(name)
        return key

    def load(self, name: str) -> T:
        """The entry for ``name`` (alias or name), importing a ``"module:attr"`` entry on first
        use; an unknown name raises the family's error, an entry that cannot be imported
        ``load_error`` (import errors are reported, never swallowed)."""
        return self._load(self.canonical(name))

    def unknown(self, name: str) -> UnknownNameError:
        """The error for an unknown ``name``: lists the known names, suggests the closest."""
        known = [*self.reserved, *self._entries]
        return self.error.for_name(self.family, name, known, did_you_mean(name, [*known, *self.aliases]),
                                   self.known_label)

    # -- Mapping ---------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> T:
        return self.load(name)

    def get(self, name: str, default: Any = None) -> Any:
        """As ``dict.get``: the entry, or ``default`` for an unknown name."""
        return self.load(name) if name in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return isinstance(name, str) and self.aliases.get(name, name) in self._entries

    def __repr__(self) -> str:
        return "<Registry %s: %s>" % (self.family, ", ".join(self._entries))

    # -- internals -------------------------------------------------------------------------------
    def _load(self, key: str) -> T:
        entry = self._entries[key]
        if not isinstance(entry, str):
            return entry
        module, _, attr = entry.partition(":")
        try:
            obj: T = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise self.load_error(
                "%s '%s' is registered as '%s', which cannot be loaded: %s" % (self.family, key, entry, exc)) from exc
        self._entries[key] = obj
        return obj

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for name, value in _entry_points(self.entry_point_group or ""):
            self._entries.setdefault(name, value)


def _entry_points(group: str) -> List[Any]:
    """``[(name, "module:attr")]`` of the entry-point ``group``; a broken distribution's metadata
    must not break a registry, so errors give an empty list."""
    try:
        from importlib.metadata import entry_points
        eps: Any = entry_points()
        found = eps.select(group=group) if hasattr(eps, "select") else eps.get(group, [])
        return [(ep.name, ep.value) for ep in found]
    except Exception:  # a registry lookup must work without plugins
        return []
