"""Run step of the TensorRT target: one engine, one execution context, device buffers bound by
tensor name (TensorRT 8.5 - 10.x: ``num_io_tensors``, ``get_tensor_name``, ``get_tensor_mode``,
``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``).

Latency as trtexec reports it: end-to-end (H2D + compute + D2H) and GPU compute alone, both timed
with CUDA events and summarised as :class:`~sdk.bench.LatencyStats`; optional per-layer times
through an ``IProfiler``. Runs on the board too: Python 3.8, NumPy, TensorRT, pycuda or cuda-python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ...bench import LatencyStats, measure_latency
from ...errors import BuildError, InferenceError, InputError
from ...tensors import TensorSpec, format_shape
from ..base import Session
from .build import import_trt, make_logger

__all__ = ["TensorRTSession", "TrtLatency", "LayerTime"]


@dataclass
class LayerTime:
    """Per-layer GPU time from the IProfiler: mean and total over ``count`` runs (ms)."""

    name: str
    mean_ms: float
    total_ms: float
    count: int


@dataclass
class TrtLatency:
    """trtexec-style figures: ``end_to_end`` (H2D + compute + D2H) and ``gpu_compute``, plus the
    copies alone (``h2d``, ``d2h``), all from CUDA events, in ms."""

    end_to_end: LatencyStats
    gpu_compute: LatencyStats
    h2d: LatencyStats
    d2h: LatencyStats
    layers: List[LayerTime] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"end_to_end": self.end_to_end.to_dict(), "gpu_compute": self.gpu_compute.to_dict(),
               "h2d": self.h2d.to_dict(), "d2h": self.d2h.to_dict()}
        if self.layers:
            out["layers"] = [{"name": l.name, "mean_ms": l.mean_ms, "total_ms": l.total_ms, "count": l.count}
                             for l in self.layers]
        return out


def _make_profiler(trt: Any):
    class LayerProfiler(trt.IProfiler):
        def __init__(self):
            trt.IProfiler.__init__(self)
            self.times: Dict[str, List[float]] = {}

        def report_layer_time(self, layer_name, ms):
            self.times.setdefault(layer_name, []).append(float(ms))

    return LayerProfiler()


class TensorRTSession(Session):
    """A deserialized engine with its execution context, stream and buffers.

    ``cuda``: an open :class:`~sdk.targets.cuda.CudaBackend` (closed with the session).
    ``dla_core``: the DLA core the engine was built for. ``layer_profile``: attach an IProfiler
    (per-layer times in :meth:`layer_times`; it slows every run a little).
    """

    target_name = "tensorrt"

    def __init__(self, engine_bytes: bytes, cuda: Any, dla_core: Optional[int] = None, layer_profile: bool = False,
                 source: str = "engine", model_source: Any = None):
        trt = self._trt = import_trt()
        self._model_source = model_source  # the ONNX model the engine was built from: to explain a failure
        self._cuda = cuda
        self._logger = make_logger(trt)
        self._runtime = trt.Runtime(self._logger)
        if dla_core is not None:
            self._runtime.DLA_core = int(dla_core)
        self._engine = self._runtime.deserialize_cuda_engine(engine_bytes)
        if self._engine is None:
            errs = self._logger.errors() or ["TensorRT gave no reason"]
            cuda.close()
            raise BuildError(f"TensorRT {trt.__version__} cannot load the {source}: {' | '.join(errs[-4:])}",
                             "engines are tied to the TensorRT version and GPU that built them: rebuild it on this "
                             "board (the target rebuilds when you pass rebuild=True or clear its cache)")
        self._context = self._engine.create_execution_context()
        if self._context is None:
            cuda.close()
            raise InferenceError("TensorRT could not create an execution context (out of GPU memory?)")
        inputs: List[TensorSpec] = []
        outputs: List[TensorSpec] = []
        self._io_dtype: Dict[str, np.dtype] = {}
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            shape = tuple(int(d) if int(d) >= 0 else None for d in self._engine.get_tensor_shape(name))
            self._io_dtype[name] = dtype
            spec = TensorSpec(name, shape, dtype.name)
            (inputs if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(spec)
        super().__init__(inputs, outputs)
        self._stream = cuda.stream()
        self._device: Dict[str, Any] = {}
        self._host: Dict[str, np.ndarray] = {}
        self._bound: Optional[Tuple] = None
        self._profiler = None
        if layer_profile:
            self._profiler = _make_profiler(trt)
            self._context.profiler = self._profiler

    # -- binding -----------------------------------------------------------------------------------
    def profile_range(self, name: str) -> Optional[Tuple[Tuple[int, ...], ...]]:
        """(min, opt, max) of a dynamic input in profile 0, None for a static one."""
        spec = next(s for s in self.inputs if s.name == name)
        if spec.is_static:
            return None
        return tuple(tuple(int(d) for d in s) for s in self._engine.get_tensor_profile_shape(name, 0))

    def _bind(self, shapes: Mapping[str, Tuple[int, ...]]) -> None:
        key = tuple(sorted(shapes.items()))
        if key == self._bound:
            return
        ctx = self._context
        for spec in self.inputs:
            if spec.name not in shapes:
                raise InputError(f"no array for engine input '{spec.name}'",
                                 f"engine inputs: {', '.join(s.name for s in self.inputs)}")
            shape = shapes[spec.name]
            spec.resolve(shape)  # rank and fixed dims
            if not spec.is_static and not ctx.set_input_shape(spec.name, shape):
                rng = self.profile_range(spec.name)
                raise InputError(f"input '{spec.name}' shape {format_shape(shape)} is outside the engine's profile "
                                 f"min {format_shape(rng[0])} .. max {format_shape(rng[2])}" if rng else
                                 f"TensorRT refuses shape {format_shape(shape)} for input '{spec.name}'",
                                 "rebuild with a wider --input-shape NAME=MIN:OPT:MAX")
        for spec in self.inputs + self.outputs:
            shape = tuple(int(d) for d in ctx.get_tensor_shape(spec.name))
            if any(d < 0 for d in shape):
                raise self._shape_failure(shapes, f"the shape of '{spec.name}' is still unknown "
                                                  f"({format_shape(shape)}) after setting the input shapes")
            dtype = self._io_dtype[spec.name]
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            dev = self._device.get(spec.name)
            if dev is None or dev.nbytes < nbytes:
                if dev is not None:
                    dev.free()
                dev = self._device[spec.name] = self._cuda.alloc(nbytes)
            host = self._host.get(spec.name)
            if host is None or host.shape != shape:
                self._host[spec.name] = self._cuda.pinned(shape, dtype)
            ctx.set_tensor_address(spec.name, int(dev.ptr))
        self._bound = key

    def _shape_failure(self, shapes: Mapping[str, Tuple[int, ...]], what: str,
                       error: type = InputError) -> Exception:
        """TensorRT failed for these input shapes: its last logged error (naming the layer) and, from
        the ONNX model, the constraint the shapes break (:func:`sdk.formats.onnx_diagnose.explain_failure`)
        as an :class:`InputError`; else ``error`` with ``what`` and TensorRT's line."""
        from ...formats.onnx_diagnose import explain_failure

        errs = self._logger.errors()
        said = errs[-1] if errs else ""
        feeds = {k: np.broadcast_to(np.uint8(0), tuple(v)) for k, v in shapes.items()}   # shapes, no data
        why = explain_failure(self._model_source, feeds, said)
        if why:
            return InputError(f"tensorrt cannot run these inputs: {why}", f"TensorRT said: {said[:200]}")
        return error(what + (f" (TensorRT said: {said})" if said else ""))

    def _diagnose(self, feeds: Mapping[str, np.ndarray], message: str) -> Optional[str]:
        from ...formats.onnx_diagnose import explain_failure

        return explain_failure(self._model_source, feeds, message)

    # -- running -----------------------------------------------------------------------------------
    def _h2d(self) -> None:
        for spec in self.inputs:
            self._cuda.htod(self._device[spec.name], self._host[spec.name], self._stream)

    def _d2h(self) -> None:
        for spec in self.outputs:
            self._cuda.dtoh(self._host[spec.name], self._device[spec.name], self._stream)

    def _enqueue(self) -> None:
        if not self._context.execute_async_v3(self._stream.handle):
            raise self._shape_failure(dict(self._bound or ()), "TensorRT execute_async_v3 failed", InferenceError)

    def _load_feeds(self, feeds: Mapping[str, np.ndarray]) -> None:
        self._bind({k: tuple(np.shape(v)) for k, v in feeds.items()})
        for spec in self.inputs:
            np.copyto(self._host[spec.name], feeds[spec.name], casting="no")

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        self._load_feeds(feeds)
        self._h2d()
        self._enqueue()
        self._d2h()
        self._stream.synchronize()
        return {s.name: self._host[s.name].copy() for s in self.outputs}

    def _runner_impl(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """End-to-end query for latency loops: the feeds are staged in pinned memory once; each call
        copies them to the GPU, runs, copies the outputs back and waits (errors: translated by
        :meth:`Session.runner`)."""
        self._load_feeds(feeds)
        h2d, enqueue, d2h, sync = self._h2d, self._enqueue, self._d2h, self._stream.synchronize

        def run_once():
            h2d()
            enqueue()
            d2h()
            sync()

        return run_once

    def latency(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10, min_runs: int = 100,
                min_seconds: float = 1.0, max_seconds: Optional[float] = None) -> TrtLatency:
        """trtexec-style latency with CUDA events, one query at a time (MLPerf SingleStream stop
        rule of :func:`~sdk.bench.measure_latency`)."""
        self._load_feeds(feeds)
        c, s = self._cuda, self._stream
        ev = [c.event() for _ in range(4)]
        e2e: List[float] = []
        comp: List[float] = []
        h2d: List[float] = []
        d2h: List[float] = []
        recording = [False]

        def run_once():
            ev[0].record(s)
            self._h2d()
            ev[1].record(s)
            self._enqueue()
            ev[2].record(s)
            self._d2h()
            ev[3].record(s)
            ev[3].synchronize()
            if recording[0]:
                e2e.append(ev[0].elapsed_ms(ev[3]))
                h2d.append(ev[0].elapsed_ms(ev[1]))
                comp.append(ev[1].elapsed_ms(ev[2]))
                d2h.append(ev[2].elapsed_ms(ev[3]))

        for _ in range(warmup):
            run_once()
        if self._profiler is not None:
            self._profiler.times.clear()
        recording[0] = True
        run = measure_latency(run_once, warmup=0, min_runs=min_runs, min_seconds=min_seconds, max_seconds=max_seconds)
        wall = run.end_s - run.begin_s
        return TrtLatency(LatencyStats.from_samples(e2e, wall), LatencyStats.from_samples(comp, wall),
                          LatencyStats.from_samples(h2d, wall), LatencyStats.from_samples(d2h, wall),
                          self.layer_times())

    def layer_times(self) -> List[LayerTime]:
        """Per-layer times collected so far (empty unless opened with ``layer_profile=True``),
        slowest first."""
        if self._profiler is None:
            return []
        out = [LayerTime(n, float(np.mean(t)), float(np.sum(t)), len(t)) for n, t in self._profiler.times.items() if t]
        return sorted(out, key=lambda l: -l.total_ms)

    def _profile_impl(self, feeds: Mapping[str, np.ndarray], runs: int, warmup: int):
        """Per-layer GPU times through an ``IProfiler`` (attached now if the session was opened
        without ``layer_profile``), over ``runs`` end-to-end queries after ``warmup``; op type,
        precision and ONNX nodes from the engine inspector (``LayerInformationFormat.JSON``: the
        ``Metadata`` of engines built with ``ProfilingVerbosity.DETAILED``, else the layer names,
        which the ONNX parser derives from node names, fused layers joined by " + ")."""
        import json
        import time

        from ..profiling import LayerProfile, layers_from_times, mean

        trt = self._trt
        if self._profiler is None:
            self._profiler = _make_profiler(trt)
            self._context.profiler = self._profiler
        run_once = self.runner(feeds)
        for _ in range(warmup):
            run_once()
        self._profiler.times.clear()
        wall: List[float] = []
        for _ in range(runs):
            t0 = time.perf_counter()
            run_once()
            wall.append((time.perf_counter() - t0) * 1e3)
        info: Dict[str, Any] = {}
        notes = ["TensorRT IProfiler: GPU time per engine layer; end_to_end_ms is the wall time of the same "
                 "queries, H2D and D2H copies included (they belong to no layer)"]
        try:
            inspector = self._engine.create_engine_inspector()
            inspector.execution_context = self._context
            data = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
            for layer in data.get("Layers", []):
                if isinstance(layer, dict) and layer.get("Name"):
                    info[str(layer["Name"])] = layer
            if not info:
                notes.append("the engine inspector gave layer names only: build with ProfilingVerbosity.DETAILED "
                             "for op types, precisions and ONNX node metadata")
        except Exception as exc:  # noqa: BLE001 - the inspector is optional detail
            notes.append(f"engine inspector unavailable: {exc}")
        times = self._profiler.times
        layers = layers_from_times(times, runs, "tensorrt", info)
        per_run = [sum(t[i] for t in times.values() if len(t) == runs) / w for i, w in enumerate(wall) if w > 0]
        return LayerProfile(target=self.target_name, profiler="tensorrt IProfiler", layers=layers, runs=runs,
                            end_to_end_ms=mean(wall), notes=notes, run_coverage=per_run).finish()

    def _close_impl(self) -> None:
        self._context = None
        self._engine = None
        self._runtime = None
        for buf in self._device.values():
            buf.free()
        self._device.clear()
        self._host.clear()
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None
