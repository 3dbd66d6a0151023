"""Engine cache: a second push of the same model to the same board loads the engine, not rebuild.

An entry is keyed by everything that makes an engine valid: the model's sha256, the build request
(precision, DLA core, shape profiles, int8 calibration cache hash, ...) and the environment
(TensorRT version, GPU name and compute capability). :meth:`EngineCache.lookup` returns the engine
or says why it must be (re)built: none cached, built by another TensorRT, for another GPU, or the
file changed on disk. Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

__all__ = ["EngineKey", "EngineCache", "CacheLookup", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$EDGESDK_CACHE/tensorrt`` or ``~/.cache/edgesdk/tensorrt``."""
    base = os.environ.get("EDGESDK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "edgesdk")
    return Path(base) / "tensorrt"


@dataclass(frozen=True)
class EngineKey:
    """What an engine depends on. ``request``: the build choices (from ``BuildConfig.key_parts()``
    plus e.g. the calibration cache's sha256); the rest is the environment."""

    model_sha256: str
    trt_version: str
    gpu_name: str
    compute_capability: Tuple[int, int]
    request: Dict[str, Any] = field(default_factory=dict)

    def _blob(self, parts: Dict[str, Any]) -> str:
        return json.dumps(parts, sort_keys=True, default=str)

    def request_digest(self) -> str:
        return hashlib.sha256(self._blob({"model": self.model_sha256, **self.request}).encode()).hexdigest()[:16]

    def digest(self) -> str:
        """The entry's name: a hash of the request and the environment."""
        env = {"trt": self.trt_version, "gpu": self.gpu_name, "cc": list(self.compute_capability)}
        return hashlib.sha256(self._blob({"model": self.model_sha256, "env": env, **self.request}).encode()).hexdigest()[:24]

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["compute_capability"] = list(self.compute_capability)
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "EngineKey":
        return cls(d["model_sha256"], d["trt_version"], d["gpu_name"], tuple(d["compute_capability"]),
                   dict(d.get("request") or {}))


@dataclass
class CacheLookup:
    """``path`` of a valid cached engine, or None with ``reason`` saying why it must be built."""

    path: Optional[Path]
    reason: str
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def hit(self) -> bool:
        return self.path is not None


def _sha256_file(path: Path) -> str:
    from ...digest import file_sha256

    return file_sha256(path)


class EngineCache:
    """Engines under ``root/<model sha256[:16]>/<digest>.engine`` with a ``.json`` beside each."""

    def __init__(self, root: Union[str, Path, None] = None):
        self.root = Path(root) if root else default_cache_dir()

    def _dir(self, key: EngineKey) -> Path:
        return self.root / key.model_sha256[:16]

    def paths(self, key: EngineKey) -> Tuple[Path, Path]:
        d = self._dir(key)
        return d / f"{key.digest()}.engine", d / f"{key.digest()}.json"

    def entries(self, model_sha256: str) -> List[Dict[str, Any]]:
        """Metadata of every cached engine of a model."""
        d = self.root / model_sha256[:16]
        out = []
        for meta in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                out.append(json.loads(meta.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def lookup(self, key: EngineKey) -> CacheLookup:
        engine, meta_path = self.paths(key)
        if engine.is_file() and meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                return CacheLookup(None, "the cached engine's metadata is unreadable: rebuilding")
            if meta.get("engine_sha256") and meta["engine_sha256"] != _sha256_file(engine):
                return CacheLookup(None, "the cached engine file changed on disk (truncated or replaced): rebuilding")
            return CacheLookup(engine, "cached engine found", meta)
        # Same model and request, other environment: say what changed.
        want = key.request_digest()
        for meta in self.entries(key.model_sha256):
            try:
                other = EngineKey.from_dict(meta["key"])
            except (KeyError, TypeError, ValueError):
                continue
            if other.request_digest() != want:
                continue
            changes = []
            if other.trt_version != key.trt_version:
                changes.append(f"TensorRT {other.trt_version}, this is TensorRT {key.trt_version}")
            if other.gpu_name != key.gpu_name or tuple(other.compute_capability) != tuple(key.compute_capability):
                changes.append(f"GPU {other.gpu_name} (sm_{''.join(map(str, other.compute_capability))}), this is "
                               f"{key.gpu_name} (sm_{''.join(map(str, key.compute_capability))})")
            if changes:
                return CacheLookup(None, "the cached engine was built for " + "; ".join(changes)
                                   + ": engines are tied to both, rebuilding")
        return CacheLookup(None, "no cached engine for this model and settings: building")

    def store(self, key: EngineKey, engine_bytes: bytes, extra: Optional[Dict[str, Any]] = None) -> Path:
        """Write the engine and its metadata atomically; returns the engine path."""
        from ...atomic import atomic_write

        engine, meta_path = self.paths(key)
        atomic_write(engine, engine_bytes)
        meta = {"key": key.to_dict(), "engine_sha256": hashlib.sha256(engine_bytes).hexdigest(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
        atomic_write(meta_path, json.dumps(meta, indent=1, sort_keys=True, default=str))
        return engine

    def invalidate(self, key: EngineKey) -> None:
        for p in self.paths(key):
            try:
                p.unlink()
            except OSError:
                pass
