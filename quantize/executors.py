"""Calibration executors: where the one streamed FP32 pass of :func:`~sdk.quantize.calibrate.calibrate` runs.

Each executor collects :class:`~sdk.quantize.stats.CalibrationStats` shards and merges them (exactly:
integer histograms on power-of-two bins, exact extremes), so the statistics, the ranges and the written
model do not depend on where the samples were run.

- ``threads`` (default): worker threads of this process, one ONNX Runtime session each.
- ``ray``: actors of a Ray cluster (``pip install 'edgesdk[ray]'``), one ONNX Runtime session per
  actor reused across its shards. The data is split into *shards* (runs of whole batches of an
  image folder or of ``.npy``/``.npz`` files) that the actors read themselves, so the data must sit
  on a filesystem every node sees (or be a list of such files). Without an address a local Ray is
  started for the job and stopped after it. An actor that dies is restarted by Ray and its shards
  retried (``max_restarts``/``max_task_retries``); a shard that fails twice fails the job with its
  file names. Progress counts shards.

::

    from sdk.quantize import quantize
    quantize("model.onnx", "/shared/calib/", executor="ray",
             executor_options={"address": "10.0.0.5:6379"}, output="model_int8.onnx")

Add an executor with ``@register_executor("name")`` on an :class:`Executor` subclass.
"""
from __future__ import annotations

import copy
import functools
import math
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Type

from ..errors import InputError, MissingDependencyError, QuantizationError, first_line
from .stats import CalibrationStats

__all__ = ["CalibrationJob", "Executor", "ThreadsExecutor", "RayExecutor", "Shard", "register_executor",
           "executor_names", "get_executor", "split_source", "RAY_INSTALL"]

ProgressFn = Callable[[int, Optional[int]], None]
RAY_INSTALL = "pip install 'edgesdk[ray]'"
RAY_OBJECT_STORE_BYTES = 200 * 1024 * 1024   # a local Ray's object store: shards' statistics pass through it
MAX_SHARD_BATCHES = 16


@dataclass(frozen=True)
class CalibrationJob:
    """What every executor needs: the augmented model (every calibrated activation an output) at
    ``model_path``, the tensors to keep statistics of (``channels``: those with per-channel sums),
    the histogram bins, the batch size, the number of workers and the intra-op threads of a session
    in this process."""

    model_path: str
    names: Tuple[str, ...]
    channels: Tuple[str, ...]
    model_sha256: str
    nbins: int
    batch_size: int
    workers: int
    threads: int
    workers_given: bool = True
    adaptive: bool = False  # batch size from the measured activation bytes (calibrate.AdaptiveBatches)
    #: tensors that also keep per-channel minima and maxima (last axis; :mod:`sdk.quantize.smooth`)
    extremes: Tuple[str, ...] = ()

    def empty_stats(self) -> CalibrationStats:
        return CalibrationStats.empty(self.model_sha256, self.names, self.nbins, self.channels, self.extremes)


class Executor:
    """Base class: :meth:`collect` runs ``job`` over the samples and returns the merged statistics.

    ``samples``: ``(feed, label)`` pairs of batch 1; ``source``: the :class:`~sdk.sources.Source`
    they come from when there is one (executors that ship work elsewhere read its files);
    ``progress(done, total)`` in the executor's :attr:`progress_unit`."""

    name: ClassVar[str] = ""
    progress_unit: ClassVar[str] = "samples"

    def collect(self, job: CalibrationJob, samples: Iterable[Any], source: Any, total: Optional[int],
                progress: Optional[ProgressFn]) -> CalibrationStats:
        raise NotImplementedError


_EXECUTORS: Dict[str, Type[Executor]] = {}


def register_executor(name: str) -> Callable[[Type[Executor]], Type[Executor]]:
    """Class decorator: register an :class:`Executor` subclass under ``name``."""

    def deco(cls: Type[Executor]) -> Type[Executor]:
        cls.name = name
        _EXECUTORS[name] = cls
        return cls

    return deco


def executor_names() -> List[str]:
    return list(_EXECUTORS)


def get_executor(spec: Any = None, **options: Any) -> Executor:
    """An :class:`Executor` from a name (``threads``, ``ray``; None is ``threads``) and its options,
    or ``spec`` itself when it is one already. Unknown names list the known ones."""
    if isinstance(spec, Executor):
        if options:
            raise InputError(f"executor options {sorted(options)} given with an executor object",
                             "set them on the object")
        return spec
    name = "threads" if spec is None else str(spec)
    cls = _EXECUTORS.get(name)
    if cls is None:
        raise InputError(f"unknown calibration executor '{name}'", f"known: {', '.join(_EXECUTORS)}")
    try:
        return cls(**options)
    except TypeError as exc:
        raise InputError(f"bad option for the '{name}' executor: {first_line(exc)}") from exc


# -- threads -----------------------------------------------------------------------------------------------
@register_executor("threads")
class ThreadsExecutor(Executor):
    """Worker threads of this process (see :mod:`sdk.quantize.calibrate`): no start-up, no copies."""

    def collect(self, job: CalibrationJob, samples: Iterable[Any], source: Any, total: Optional[int],
                progress: Optional[ProgressFn]) -> CalibrationStats:
        from ..sources import batched
        from .calibrate import AdaptiveBatches, _calibrate_here, _calibrate_threads

        batches: Any = AdaptiveBatches(samples, job.batch_size) if job.adaptive else batched(samples, job.batch_size)
        names, chans = list(job.names), list(job.channels)
        if job.workers == 1:
            return _calibrate_here(job.model_path, names, chans, job.model_sha256, job.nbins, job.threads, batches,
                                   total, progress, extremes=job.extremes)
        return _calibrate_threads(job.model_path, names, chans, job.model_sha256, job.nbins, job.threads,
                                  job.workers, batches, total, progress, extremes=job.extremes)


# -- shards of a source ------------------------------------------------------------------------------------
@dataclass
class Shard:
    """Samples ``[skip, skip + count)`` of ``source`` (a copy of the job's source that holds only the
    files of this shard): what one actor task reads. ``files``: those files, for error messages."""

    index: int
    source: Any
    skip: int
    count: int
    files: List[str] = field(default_factory=list)

    def samples(self) -> Iterator[Any]:
        return islice(self.source.samples(), self.skip, self.skip + self.count)

    def describe(self) -> str:
        shown = ", ".join(self.files[:3]) + (f" and {len(self.files) - 3} more" if len(self.files) > 3 else "")
        rows = f" (samples {self.skip}..{self.skip + self.count - 1} of it)" if self.skip or len(self.files) == 1 else ""
        return f"shard {self.index} [{shown}]{rows}"


@functools.singledispatch
def split_source(source: Any, shard_samples: int) -> List[Shard]:
    """Cut ``source`` into shards of ``shard_samples`` samples (the last one shorter), each a copy
    of the source over the files it reads. Sources without files (Python iterables) cannot be split."""
    raise InputError(f"an executor that ships work to other processes reads the calibration data from files, "
                     f"not from a {type(source).__name__}",
                     "give an image folder or .npy/.npz files on a filesystem every worker sees")


def _image_split(source: Any, shard_samples: int) -> List[Shard]:
    shards = []
    for i, start in enumerate(range(0, len(source.files), shard_samples)):
        part = copy.copy(source)
        part.files = list(source.files[start:start + shard_samples])
        shards.append(Shard(i, part, 0, len(part.files), [str(f) for f in part.files]))
    return shards


def _array_split(source: Any, shard_samples: int) -> List[Shard]:
    """Shards over the concatenated rows of the files: each keeps the files it touches (rows of its
    first file before its start are read and skipped; split big arrays into several files)."""
    lengths = source.file_lengths()
    starts = [sum(lengths[:k]) for k in range(len(lengths))]
    total = len(source)
    shards = []
    for i, begin in enumerate(range(0, total, shard_samples)):
        end = min(total, begin + shard_samples)
        keep = [k for k in range(len(lengths)) if starts[k] < end and starts[k] + lengths[k] > begin]
        part = copy.copy(source)
        part.files = [source.files[k] for k in keep]
        part._plans = [source._plans[k] for k in keep]
        part.constants = [source.constants[k] for k in keep]   # per file, beside its plan
        part.limit = None
        shards.append(Shard(i, part, begin - starts[keep[0]], end - begin, [str(f) for f in part.files]))
    return shards


def _register_splitters() -> None:
    from ..sources import ArraySource, ImageFolderSource

    split_source.register(ImageFolderSource, _image_split)
    split_source.register(ArraySource, _array_split)


_register_splitters()


def default_shard_samples(total: int, workers: int, batch_size: int) -> int:
    """Whole batches, about four shards per worker (for balance), at most :data:`MAX_SHARD_BATCHES` batches."""
    batches = math.ceil(total / max(1, 4 * workers * batch_size))
    return batch_size * min(MAX_SHARD_BATCHES, max(1, batches))


# -- the Ray actor (runs on the workers) -------------------------------------------------------------------
class _ShardWorker:
    """One ONNX Runtime session (opened on the first call, from the model bytes in Ray's object
    store) that calibrates shards. The model travels with each call, not with the constructor, so
    an actor that Ray restarts needs nothing that may have gone out of scope."""

    def __init__(self, names: Sequence[str], channels: Sequence[str], sha: str, nbins: int, batch_size: int,
                 threads: int, extremes: Sequence[str] = ()):
        self.job = (list(names), list(channels), sha, nbins, batch_size)
        self.extremes = list(extremes)
        self.threads = threads
        self.sess: Any = None
        self.load_s = 0.0
        self.host = f"{os.uname().nodename}:{os.getpid()}"

    def _load(self, model: List[Any]) -> None:
        if self.sess is not None:
            return
        import ray

        from .calibrate import _session

        t0 = time.perf_counter()
        model_bytes = ray.get(model[0])   # a nested reference: fetched here (once per node's store)
        with tempfile.TemporaryDirectory(prefix="edgesdk-calib-worker-") as tmp:
            path = Path(tmp) / "augmented.onnx"
            path.write_bytes(model_bytes)
            self.sess = _session(str(path), self.threads)
        self.load_s = time.perf_counter() - t0

    def ready(self, model: List[Any]) -> float:
        """Load the session; returns the seconds it took."""
        self._load(model)
        return self.load_s

    def run(self, shard: Shard, model: List[Any]) -> Dict[str, Any]:
        """Statistics of one shard, with its time (s) and the images it skipped."""
        from ..sources import batched
        from .calibrate import _run_batch

        self._load(model)
        names, chans, sha, nbins, batch_size = self.job
        t0 = time.perf_counter()
        stats = CalibrationStats.empty(sha, names, nbins, chans, self.extremes)
        try:
            for feed, _, n in batched(shard.samples(), batch_size):
                _run_batch(self.sess, names, stats, feed, n)
        except InputError:
            if stats.samples or getattr(shard.source, "skipped", 0) < shard.count:
                raise   # not "every image of this shard was undecodable": a real error
        return {"index": shard.index, "stats": stats, "seconds": time.perf_counter() - t0, "load_s": self.load_s,
                "worker": self.host, "skipped": getattr(shard.source, "skipped", 0),
                "warnings": list(getattr(shard.source, "warnings", []))}


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("calibration on a Ray cluster", "ray", RAY_INSTALL) from exc
    return ray


# -- ray ---------------------------------------------------------------------------------------------------
@register_executor("ray")
class RayExecutor(Executor):
    """Shards on the actors of a Ray cluster.

    ``address``: the cluster (``HOST:PORT`` of its GCS, or ``ray://HOST:10001``); None starts a
    local Ray for the job (``workers`` CPUs, a 200 MB object store) and stops it afterwards; a Ray
    already initialised in this process is used as is. ``workers`` (from the job): actors, default
    the cluster's CPUs / ``cpus_per_worker``. ``cpus_per_worker``: CPUs each actor reserves, also its
    session's intra-op threads. ``shard_samples``: samples per shard (whole batches; default about
    four shards per worker). ``max_restarts``: how often Ray restarts a dead actor; every shard gets
    two attempts. ``runtime_env``: passed to ``ray.init`` (e.g. to install edgesdk on the workers).
    ``log_to_driver``: show the workers' output here (off: errors come back as one line each).
    """

    progress_unit = "shards"

    def __init__(self, address: Optional[str] = None, cpus_per_worker: int = 1, shard_samples: Optional[int] = None,
                 max_restarts: int = 2, runtime_env: Optional[Mapping[str, Any]] = None,
                 object_store_bytes: int = RAY_OBJECT_STORE_BYTES, log_to_driver: bool = False):
        if cpus_per_worker < 1 or (shard_samples is not None and shard_samples < 1):
            raise InputError("cpus_per_worker and shard_samples must be at least 1")
        self.address = address
        self.cpus_per_worker = int(cpus_per_worker)
        self.shard_samples = shard_samples
        self.max_restarts = int(max_restarts)
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.object_store_bytes = int(object_store_bytes)
        self.log_to_driver = bool(log_to_driver)
        self.last_run: Dict[str, Any] = {}

    # the job ------------------------------------------------------------------------------------------
    def collect(self, job: CalibrationJob, samples: Iterable[Any], source: Any, total: Optional[int],
                progress: Optional[ProgressFn]) -> CalibrationStats:
        if source is None:
            split_source(samples, 1)   # raises: Ray reads files
        size = len(source)
        shard_samples = self.shard_samples or default_shard_samples(size, job.workers, job.batch_size)
        shard_samples = job.batch_size * max(1, math.ceil(shard_samples / job.batch_size))  # whole batches
        shards = split_source(source, shard_samples)
        ray = _ray()
        t0 = time.perf_counter()
        self.last_run = {}
        started = self._connect(ray, job.workers)
        try:
            workers = job.workers if self.address is None or job.workers_given else self._cluster_workers(ray)
            t_ready = time.perf_counter()
            stats, results = self._run(ray, job, shards, workers, progress)
        finally:
            if started:
                ray.shutdown()
        self._note(source, results, shards, workers, t_ready - t0, time.perf_counter() - t_ready)
        stats.meta.update({"executor": "ray", "workers": workers, "shards": len(shards), "shard_samples": shard_samples})
        return stats

    def _connect(self, ray: Any, workers: int) -> bool:
        """Initialise Ray unless it already is; True when this call did (and must shut it down)."""
        if ray.is_initialized():
            return False
        kwargs: Dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": self.log_to_driver}
        if self.runtime_env:
            kwargs["runtime_env"] = self.runtime_env
        if self.address:
            self._probe(self.address)
        try:
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(address="local", num_cpus=workers * self.cpus_per_worker, include_dashboard=False,
                         object_store_memory=self.object_store_bytes, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
            raise QuantizationError(f"cannot start or reach {where}: {first_line(exc)}",
                                    "check --ray-address (HOST:PORT of the head's GCS) and that the cluster runs "
                                    "the same Ray and Python versions") from exc
        return True

    @staticmethod
    def _probe(address: str, timeout_s: float = 10.0) -> None:
        """Fail fast on a ``HOST:PORT`` nobody listens on (``ray.init`` would retry for minutes)."""
        host, sep, port = address.rpartition(":")
        if "://" in address or not sep or not port.isdigit():
            return   # ray://..., "auto": Ray's own resolution
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except OSError as exc:
            raise QuantizationError(f"cannot reach the Ray cluster at {address}: {first_line(exc)}",
                                    "check --ray-address (HOST:PORT of the head's GCS, 6379 by default)") from exc

    def _cluster_workers(self, ray: Any) -> int:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        return max(1, cpus // self.cpus_per_worker)

    def _run(self, ray: Any, job: CalibrationJob, shards: List[Shard], workers: int,
             progress: Optional[ProgressFn]) -> Tuple[CalibrationStats, List[Dict[str, Any]]]:
        """Two shards in flight per actor; results merged in shard order (the same sums every run)."""
        workers = max(1, min(workers, len(shards)))
        actor_cls = ray.remote(_ShardWorker).options(num_cpus=self.cpus_per_worker, max_restarts=self.max_restarts,
                                                     max_task_retries=1)
        model_ref = ray.put(Path(job.model_path).read_bytes())
        model = [model_ref]   # nested: the actors fetch it themselves (the driver keeps it alive)
        actors = [actor_cls.remote(list(job.names), list(job.channels), job.model_sha256, job.nbins, job.batch_size,
                                   self.cpus_per_worker, list(job.extremes)) for _ in range(workers)]
        t0 = time.perf_counter()
        try:   # start-up (processes, imports, sessions) apart
            ray.get([a.ready.remote(model) for a in actors])
        except ray.exceptions.RayError as exc:
            for actor in actors:
                ray.kill(actor)
            cause = getattr(exc, "cause", None)
            raise QuantizationError(f"the Ray workers could not start: {first_line(cause or exc)}",
                                    "every node needs the same edgesdk, Ray and Python as this one") from exc
        self.last_run["actors_ready_s"] = time.perf_counter() - t0
        todo = list(reversed(shards))
        pending: Dict[Any, Tuple[Shard, Any]] = {}

        def submit(actor: Any) -> None:
            if todo:
                shard = todo.pop()
                ref = actor.run.options(max_task_retries=1, retry_exceptions=True).remote(shard, model)
                pending[ref] = (shard, actor)

        for actor in actors * 2:
            submit(actor)
        merged = job.empty_stats()
        done: Dict[int, Dict[str, Any]] = {}
        results: List[Dict[str, Any]] = []
        driver_s = 0.0
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                t1 = time.perf_counter()
                shard, actor = pending.pop(ready[0])
                submit(actor)
                done[shard.index] = self._result(ray, ready[0], shard)
                while len(results) in done:           # merge in shard order
                    r = done.pop(len(results))
                    merged.merge(r.pop("stats"))
                    results.append(r)
                driver_s += time.perf_counter() - t1
                if progress:
                    progress(len(results) + len(done), len(shards))
        finally:
            for actor in actors:
                ray.kill(actor)
        self.last_run["driver_s"] = driver_s
        return merged, results

    @staticmethod
    def _result(ray: Any, ref: Any, shard: Shard) -> Dict[str, Any]:
        try:
            result: Dict[str, Any] = ray.get(ref)
            return result
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            why = first_line(cause) if isinstance(cause, BaseException) else first_line(exc)
            err = InputError if isinstance(cause, InputError) else QuantizationError
            raise err(f"calibration {shard.describe()} failed twice: {why}") from exc

    def _note(self, source: Any, results: List[Dict[str, Any]], shards: List[Shard], workers: int,
              startup_s: float, run_s: float) -> None:
        """Skipped images back on the driver's source; per-shard times in :attr:`last_run`."""
        if hasattr(source, "skipped"):
            source.skipped = sum(r["skipped"] for r in results)
            source.warnings = [w for r in results for w in r["warnings"]]
        self.last_run = {**self.last_run, "workers": workers, "shards": len(shards), "startup_s": startup_s, "run_s": run_s,
                         "shard_seconds": [r["seconds"] for r in results],
                         "shard_samples": [s.count for s in shards],
                         "load_s": sorted({r["worker"]: r["load_s"] for r in results}.values()),
                         "worker_hosts": sorted({r["worker"] for r in results})}
