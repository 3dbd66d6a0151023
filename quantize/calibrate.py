"""Streaming calibration: one FP32 pass over the data with every float activation exposed as an
output; statistics updated per batch and the outputs dropped, so peak memory does not grow with the
number of samples. The work is split across worker threads of this process (one ONNX Runtime session
and one shard of statistics each; ONNX Runtime and NumPy's loops release the GIL), whose statistics
merge exactly.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from ..errors import InferenceError, QuantizationError, first_line
from .graph import GraphIndex
from .stats import NBINS, CalibrationStats

__all__ = ["calibrate", "calibrate_shard", "calibration_tensors", "augment", "default_workers", "AdaptiveBatches"]

ProgressFn = Callable[[int, Optional[int]], None]

_CHANNEL_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


_FOLDING_PRODUCERS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add")
_FOLDED = ("Relu", "Clip")


def calibration_tensors(proto: Any, all_tensors: bool = False,
                        idx: Optional[GraphIndex] = None) -> Dict[str, List[str]]:
    """``{"tensors": [...], "channels": [...], "extremes": [...]}``: the float activations to
    calibrate, those that feed Conv/Gemm/MatMul (for which per-channel means are kept for bias
    correction), and those activation-weight balancing may rescale (per-channel minima and maxima
    along the last axis are kept: :func:`sdk.quantize.smooth.balance_sites`).

    Every float activation is calibrated except the output of a Conv/Gemm/MatMul/Add read only by a
    Relu/Clip: no scheme quantizes it (the activation folds into the op, the Q/DQ goes after it), and
    these pre-activation tensors are the largest of a network. ``all_tensors`` keeps them too.
    ``idx``: the :class:`GraphIndex` of ``proto`` when the caller has one (shape inference is not free)."""
    idx = idx if idx is not None else GraphIndex(proto)
    names = idx.activation_tensors()
    if not all_tensors:
        def folded(t: str) -> bool:
            p = idx.producer.get(t)
            cons = idx.consumers.get(t, [])
            return (p is not None and p.op_type in _FOLDING_PRODUCERS and bool(cons) and t not in idx.graph_outputs
                    and all(c.op_type in _FOLDED for c, _ in cons))
        names = [n for n in names if not folded(n)]
    chans = sorted({n.input[0] for n in proto.graph.node if n.op_type in _CHANNEL_OPS and n.input
                    and n.input[0] in set(names)})
    from .smooth import balance_sites

    wanted = set(names)
    extremes = sorted({t for site in balance_sites(proto, idx) for t in site.scaled if t in wanted})
    return {"tensors": names, "channels": chans, "extremes": extremes}


def augment(proto: Any, names: Sequence[str], idx: Optional[GraphIndex] = None,
            elem_types: Optional[Mapping[str, int]] = None) -> Any:
    """A copy of ``proto`` with ``names`` added as graph outputs (their element types from
    ``elem_types``, else from ``idx`` or shape inference, float where unknown; shape left open)."""
    import onnx
    from onnx import TensorProto, helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    types = elem_types if elem_types is not None else (idx if idx is not None else GraphIndex(proto)).elem_type
    have = {o.name for o in out.graph.output}
    for n in names:
        if n not in have:
            out.graph.output.append(helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), None))
    return out


def augment_bytes(data: bytes, proto: Any, names: Sequence[str], elem_types: Mapping[str, int]) -> bytes:
    """:func:`augment` on the serialized model: ``data`` (``proto``'s bytes, as read from its file)
    with a second ``graph`` field holding only the new outputs appended. A protobuf parser merges
    a repeated embedded message into the first and appends repeated fields, so the result parses
    as ``proto`` with those outputs, and the weights are never serialized again (a 54 MB model:
    ~40 ms per copy saved). ``proto`` only says which outputs exist already."""
    import onnx
    from onnx import TensorProto, helper

    have = {o.name for o in proto.graph.output}
    extra = onnx.ModelProto()
    for n in names:
        if n not in have:
            extra.graph.output.append(helper.make_tensor_value_info(n, elem_types.get(n, TensorProto.FLOAT), None))
    return (data if isinstance(data, bytes) else bytes(data)) + extra.SerializeToString()


def has_external_data(proto: Any) -> bool:
    """Some initializer keeps its data in a file beside the model (its bytes alone do not load)."""
    from onnx import TensorProto

    return any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)


def default_workers(samples: Optional[int]) -> int:
    """All available cores, but at least 8 samples per worker (a session costs ~0.1 s to load)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    if samples is not None:
        cores = min(cores, max(1, samples // 8))
    return max(1, cores)


def _session(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, threads)
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # the arena keeps the buffers of one batch (every intermediate is an output here) reserved at the
    # largest size seen: bounded by the batch size, not the number of samples, and it saves the page
    # faults of fresh buffers on every run (about a quarter of the calibration time)
    so.enable_cpu_mem_arena = True
    try:
        return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise QuantizationError(f"onnxruntime cannot load the model for calibration: {first_line(exc)}") from exc


#: activation bytes one calibration run may produce per worker: the batch size follows from it
BATCH_BYTES = 192 << 20


class AdaptiveBatches:
    """Batches whose size follows the measured activation bytes per sample, so peak memory depends
    on neither the number of samples nor their shape: the first batch holds one sample, later ones
    as many as keep a run's outputs under :data:`BATCH_BYTES` (at most ``max_size``). Samples of
    different shapes (dynamic inputs) never share a batch. Iterate it from one thread at a time."""

    def __init__(self, samples: Iterable[Any], max_size: int):
        self.it = iter(samples)
        self.max_size = max(1, int(max_size))
        self.size = 1
        self.pending: List[Any] = []

    def __iter__(self) -> "AdaptiveBatches":
        return self

    def __next__(self) -> Any:
        from ..sources import batched

        buf = self.pending
        self.pending = []
        shape = None if not buf else _shapes(buf[0][0])
        while len(buf) < self.size:
            nxt = next(self.it, None)
            if nxt is None:
                break
            if shape is not None and _shapes(nxt[0]) != shape:
                self.pending = [nxt]
                break
            shape = _shapes(nxt[0])
            buf.append(nxt)
        if not buf:
            raise StopIteration
        return next(iter(batched(buf, len(buf))))

    def observe(self, nbytes: int, n: int) -> None:
        """A run of ``n`` samples produced ``nbytes`` of activations."""
        per_sample = max(1, nbytes // max(1, n))
        self.size = max(1, min(self.max_size, BATCH_BYTES // per_sample))


def _shapes(feed: Any) -> Any:
    return tuple((k, getattr(v, "shape", None)) for k, v in sorted(feed.items()))


def _run_batch(sess, names, stats: CalibrationStats, feed, n: int) -> int:
    """Run one batch, fold its activations into ``stats``; returns the bytes of the activations."""
    try:
        outs = sess.run(names, feed)
    except Exception as exc:
        raise InferenceError(f"calibration run failed: {first_line(exc)}") from exc
    nbytes = sum(int(getattr(o, "nbytes", 0)) for o in outs)
    stats.update(dict(zip(names, outs)), n)
    del outs
    return nbytes


def calibrate(model: Any, samples: Iterable[Any], *, batch_size: Optional[int] = None,
              workers: Optional[int] = None, total: Optional[int] = None,
              progress: Optional[ProgressFn] = None, nbins: int = NBINS,
              tensors: Optional[Sequence[str]] = None,
              plan: Optional[Dict[str, List[str]]] = None, executor: Any = None) -> CalibrationStats:
    """Collect :class:`CalibrationStats` of ``model`` (an :class:`sdk.Model`, ONNX) over ``samples``
    (``(feed, label)`` pairs from an :mod:`sdk.sources` source, batch dim 1 each).

    ``batch_size``: samples per run (default 8 when the batch dim is dynamic, else 1). ``workers``:
    threads (default :func:`default_workers`), each with its own ONNX Runtime session; 1 runs in the
    calling thread. ``progress(done, total)`` is called after each batch. Raises :class:`QuantizationError` on NaN/Inf
    activations or when no sample was seen. ``plan``: :func:`calibration_tensors` of the model when
    the caller has it. ``executor``: where the pass runs, a name of
    :mod:`sdk.quantize.executors` (``threads``, the default, or ``ray``) or an ``Executor``; one that
    ships work elsewhere reads the files of ``samples`` (then a :class:`~sdk.sources.Source`), and its
    ``progress`` counts in its ``progress_unit`` (shards for ``ray``).
    """
    from ..sources import Source
    from .executors import CalibrationJob, get_executor

    ex = get_executor(executor)
    source = samples if isinstance(samples, Source) else None
    samples = source.samples() if source is not None else samples
    proto = model.proto
    idx = GraphIndex(proto)
    plan = plan if plan is not None else calibration_tensors(proto, idx=idx)
    names = list(tensors) if tensors is not None else plan["tensors"]
    chans = [c for c in plan["channels"] if c in set(names)]
    extremes = [c for c in plan.get("extremes", []) if c in set(names)]
    if not names:
        raise QuantizationError(f"'{model.name}' has no float activation to calibrate")
    dynamic_batch = all(not (isinstance(s.shape[0], int) and s.shape[0] > 0) for s in model.inputs if s.shape)
    adaptive = batch_size is None and dynamic_batch
    if batch_size is None:
        batch_size = 8 if dynamic_batch else 1
    if not dynamic_batch:
        batch_size = 1
    workers_given = workers is not None
    if workers is None:
        workers = default_workers(total)
    workers = max(1, int(workers))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count() or 1
    threads = max(1, cores // workers)

    with tempfile.TemporaryDirectory(prefix="edgesdk-calib-") as tmp:
        path = str(Path(tmp) / "augmented.onnx")
        import onnx

        onnx.save(augment(proto, names, idx), path)
        job = CalibrationJob(path, tuple(names), tuple(chans), model.sha256, nbins, batch_size, workers, threads,
                             workers_given, adaptive, tuple(extremes))
        stats = ex.collect(job, samples, source, total, progress)
    _check(stats, model.name)
    stats.meta.update({"batch_size": stats.meta.get("batch_size", batch_size),
                       "workers": stats.meta.get("workers", workers), "nbins": nbins})
    return stats


def calibrate_shard(path: str, names: Sequence[str], channels: Sequence[str], model_sha256: str,
                    samples: Iterable[Any], *, nbins: int = NBINS, threads: int = 1,
                    max_batch: int = 8, extremes: Sequence[str] = ()) -> CalibrationStats:
    """The statistics of one shard of samples (``(feed, label)`` pairs) on the augmented model at
    ``path`` (:func:`augment`): one session, adaptive batches, mergeable with
    :meth:`CalibrationStats.merge`. The unit of work an executor distributes."""
    return _calibrate_here(path, list(names), list(channels), model_sha256, nbins, threads,
                           AdaptiveBatches(samples, max_batch), None, None, extremes=extremes)


def _calibrate_here(path, names, chans, sha, nbins, threads, batches, total, progress,
                    extremes: Sequence[str] = ()) -> CalibrationStats:
    sess = _session(path, threads)
    stats = CalibrationStats.empty(sha, names, nbins, chans, extremes)
    done = 0
    for feed, _, n in batches:
        nbytes = _run_batch(sess, names, stats, feed, n)
        if isinstance(batches, AdaptiveBatches):
            batches.observe(nbytes, n)
        done += n
        if progress:
            progress(done, total)
    return stats


def _calibrate_threads(path, names, chans, sha, nbins, threads, workers, batches, total, progress,
                       extremes: Sequence[str] = ()) -> CalibrationStats:
    """``workers`` threads in this process, one ONNX Runtime session and one shard of statistics
    each, pulling batches from one iterator. ONNX Runtime's run and NumPy's loops (bincount
    included) release the GIL, so the threads use separate cores; no process start-up, no copies
    of the batches between processes. Shards merge exactly."""
    import threading

    lock = threading.Lock()
    it = iter(batches)
    state: Dict[str, Any] = {"done": 0, "error": None}
    shards: List[CalibrationStats] = []

    def fail(exc: BaseException) -> None:
        """Keep the first error: every thread stops at its next batch, and it is re-raised below."""
        with lock:
            if state["error"] is None:
                state["error"] = exc

    def work() -> None:
        stats = CalibrationStats.empty(sha, names, nbins, chans, extremes)
        shards.append(stats)
        try:
            sess = _session(path, threads)
            while True:
                with lock:
                    if state["error"] is not None:
                        return
                    item = next(it, None)  # the source failing stops every thread
                if item is None:
                    return
                feed, _, n = item
                nbytes = _run_batch(sess, names, stats, feed, n)
                with lock:
                    if isinstance(batches, AdaptiveBatches):
                        batches.observe(nbytes, n)
                    state["done"] += n
                    if progress:
                        progress(state["done"], total)
        except BaseException as exc:
            fail(exc)

    pool = [threading.Thread(target=work, name=f"edgesdk-calib-{i}", daemon=True) for i in range(1, workers)]
    for t in pool:
        t.start()
    try:
        work()
    except BaseException as exc:  # e.g. KeyboardInterrupt outside a batch: stop the other threads too
        fail(exc)
        raise
    finally:
        for t in pool:
            t.join()
    if state["error"] is not None:
        raise state["error"]
    stats = shards[0]
    for other in shards[1:]:
        stats.merge(other)
    return stats


def _check(stats: CalibrationStats, model_name: str) -> None:
    if stats.samples == 0:
        raise QuantizationError("no calibration sample was read", "check the calibration data path")
    bad = [(n, t.nonfinite) for n, t in stats.tensors.items() if t.nonfinite]
    if bad:
        listing = ", ".join(f"'{n}' ({c} values)" for n, c in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise QuantizationError(f"NaN or Inf in the activations of '{model_name}': {listing}",
                                "check the calibration data and its preprocessing")
