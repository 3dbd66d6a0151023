"""Run a pipeline: sessions opened through the target registry, glue steps from :data:`glue.GLUE`,
frames timed stage by stage, serially and with the stages overlapped (one thread per stage,
bounded queues). The same code runs on the host and inside the board agent (Python 3.8 + NumPy;
nothing round-trips per stage).

Per frame and stage: ``pre`` glue (the first stage's preprocessing), inference (a batched stage
runs each batch and concatenates the outputs), ``post`` glue. The serial run gives the latency
statistics (per stage and end to end) and the outputs; the overlapped run gives the throughput,
the per-frame timeline and the bounding stage. The runner's own time is what the end-to-end time
has beyond the stages' times (``overhead_ms`` in the result; ``benchmarks/pipeline_overhead.py``
compares it with a hand-written loop).
"""
from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import InputError
from .glue import Frame, GlueStep, build_step
from .result import PipelineResult
from .spec import PipelineSpec, StageSpec

__all__ = ["RunConfig", "OpenPipeline", "run_pipeline_spec", "load_images", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


@dataclass
class RunConfig:
    """``frames``: at least this many timed frames (inputs cycled; every input at least once),
    after ``warmup`` untimed ones; ``overlapped``: also run with the stages overlapped
    (``queue_depth`` frames between stages); ``outputs``: keep the per-input outputs;
    ``workdir``: where targets keep built artifacts."""

    frames: int = 20
    warmup: int = 2
    overlapped: bool = True
    queue_depth: int = 2
    outputs: bool = True
    workdir: Optional[str] = None
    #: called with (begin_s, end_s) on time.monotonic around the measured serial window (power)
    on_window: Optional[Callable[[float, float], None]] = field(default=None, repr=False)


def load_images(data: Any) -> List[Tuple[str, np.ndarray]]:
    """``(file name, BGR image)`` of a folder of images (sorted), a file, or a list of files
    (decoded with OpenCV); :class:`InputError` when there are none or one cannot be decoded."""
    if isinstance(data, (str, os.PathLike)):
        p = Path(data)
        if not p.exists():
            raise InputError("input folder '%s' does not exist" % p, "give a folder of images with --data")
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_EXTENSIONS) if p.is_dir() else [p]
    else:
        files = [Path(f) for f in data]
    if not files:
        raise InputError("no images (%s) in '%s'" % (", ".join(IMAGE_EXTENSIONS), data),
                         "give a folder of pages or photos with --data")
    try:
        import cv2
    except ImportError as exc:
        from ...errors import MissingDependencyError

        raise MissingDependencyError("decoding pipeline inputs", "opencv-python-headless",
                                     "pip install opencv-python-headless") from exc
    out = []
    for f in files:
        img = cv2.imdecode(np.fromfile(str(f), np.uint8), cv2.IMREAD_COLOR) if f.is_file() else None
        if img is None:
            raise InputError("'%s' is not an image OpenCV can decode" % f)
        out.append((f.name, img))
    return out


def _join(parts: List[np.ndarray]) -> Any:
    """One output of a batched stage: the batches concatenated on axis 0, or the list of batch
    arrays when their other dims differ (e.g. a recognizer's steps for batches of other widths)."""
    if len(parts) == 1:
        return parts[0]
    if all(p.shape[1:] == parts[0].shape[1:] for p in parts):
        return np.concatenate(parts, axis=0)
    return parts


class _Stage:
    def __init__(self, spec: StageSpec, session: Any, pre: List[GlueStep], post: List[GlueStep]) -> None:
        self.spec, self.session, self.pre, self.post = spec, session, pre, post
        self.name = spec.name
        self.input = spec.input or session.inputs[0].name
        self.output_names = list(spec.outputs or [o.name for o in session.outputs])
        self.run = session.run


class OpenPipeline:
    """A pipeline with its sessions open and glue steps built (a context manager); :meth:`stage`
    runs one stage on a frame, :meth:`process` all of them. ``feed_hook(stage_index, feed)`` sees
    every stage input (calibration records them)."""

    def __init__(self, spec: PipelineSpec, workdir: Optional[str] = None) -> None:
        self.spec = spec
        self.workdir = workdir
        self.stages: List[_Stage] = []
        self.targets: List[Any] = []
        self.feed_hook: Optional[Callable[[int, Any], None]] = None

    def __enter__(self) -> "OpenPipeline":
        from ...model import Model
        from ...targets import get_target

        try:
            for st in self.spec.stages:
                opts = dict(st.target_options)
                tgt = get_target(st.target, **opts)
                if st.precision not in ("fp32", "") and "precision" in getattr(tgt, "default_options", {}):
                    tgt = get_target(st.target, **dict(opts, precision=st.precision))
                session = tgt.open(tgt.prepare(Model(Path(st.model)), workdir=self.workdir))
                try:
                    pre = [build_step(g.step, g.options) for g in st.pre_steps()]
                    post = [build_step(g.step, g.options) for g in st.post]
                except BaseException:
                    session.close()
                    raise
                self.targets.append(tgt)
                self.stages.append(_Stage(st, session, pre, post))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for st in self.stages:
            for step in st.pre + st.post:
                step.close()
            st.session.close()
        self.stages = []

    def stage(self, k: int, frame: Frame, perf: Callable[[], float] = time.perf_counter) -> Tuple[float, float, float]:
        """Run stage ``k`` on ``frame``; returns ``(pre_s, inference_s, post_s)``."""
        st = self.stages[k]
        t0 = perf()
        for step in st.pre:
            step(frame)
        t1 = perf()
        feed = frame.feed
        if self.feed_hook is not None:
            self.feed_hook(k, feed)
        if isinstance(feed, list):
            frame.counts[st.name] = int(sum(b.shape[0] for b in feed))
            if feed:
                runs = [st.run({st.input: b}) for b in feed]
                frame.outputs = [_join([x[n] for x in runs]) for n in st.output_names]
            else:
                frame.outputs = []
        elif feed is None:
            raise InputError("stage '%s' got no input: the previous stage's glue must end in batch "
                             "(or set feed)" % st.name)
        else:
            frame.counts[st.name] = 1
            out = st.run({st.input: feed})
            frame.outputs = [out[n] for n in st.output_names]
        t2 = perf()
        frame.feed = None
        for step in st.post:
            step(frame)
        t3 = perf()
        return t1 - t0, t2 - t1, t3 - t2

    def process(self, name: str, image: np.ndarray) -> Frame:
        """All stages on one image; returns the frame (``frame.items``: the answer)."""
        frame = Frame(name, image)
        for k in range(len(self.stages)):
            self.stage(k, frame)
        return frame

    def devices(self) -> List[Dict[str, str]]:
        return [{"pre": ", ".join("%s: %s" % (s.name, s.device) for s in st.pre),
                 "inference": str(tgt.name), "post": ", ".join("%s: %s" % (s.name, s.device) for s in st.post)}
                for st, tgt in zip(self.stages, self.targets)]


def _summary(ms: Sequence[float]) -> Dict[str, float]:
    a = np.asarray(ms, np.float64)
    if not a.size:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0, "min": 0.0, "max": 0.0}
    p50, p99 = np.percentile(a, [50, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p99": float(p99), "min": float(a.min()), "max": float(a.max())}


def _serial(pipe: OpenPipeline, images: List[Tuple[str, np.ndarray]], cfg: RunConfig
            ) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]], float]:
    n_st = len(pipe.stages)
    per: Dict[str, Any] = {"end_to_end": [], "stages": [[] for _ in range(n_st)], "pre": [[] for _ in range(n_st)],
                           "inference": [[] for _ in range(n_st)], "post": [[] for _ in range(n_st)],
                           "items": [[] for _ in range(n_st)]}
    outputs: Dict[str, Dict[str, Any]] = {}
    total = cfg.warmup + max(cfg.frames, len(images))
    perf = time.perf_counter
    stage = pipe.stage
    begin = time.monotonic()
    t_start = perf()
    for i in range(total):
        if i == cfg.warmup:
            begin, t_start = time.monotonic(), perf()
        name, image = images[i % len(images)]
        frame = Frame(name, image)
        t0 = perf()
        times = [stage(k, frame) for k in range(n_st)]
        t1 = perf()
        if i >= cfg.warmup:
            per["end_to_end"].append((t1 - t0) * 1e3)
            for k, (a, b, c) in enumerate(times):
                per["pre"][k].append(a * 1e3)
                per["inference"][k].append(b * 1e3)
                per["post"][k].append(c * 1e3)
                per["stages"][k].append((a + b + c) * 1e3)
                per["items"][k].append(frame.counts.get(pipe.stages[k].name, 0))
        if cfg.outputs and name not in outputs:
            outputs[name] = {"input": name, "items": frame.items, "counts": dict(frame.counts),
                             "image_hw": list(image.shape[:2])}
    wall_s = perf() - t_start
    if cfg.on_window is not None:
        cfg.on_window(begin, time.monotonic())
    return per, outputs, wall_s


def _overlapped(pipe: OpenPipeline, images: List[Tuple[str, np.ndarray]], frames: int, depth: int
                ) -> Tuple[float, List[Dict[str, Any]], List[List[float]]]:
    """One thread per stage, queues of ``depth`` frames between them; returns ``(wall_s, timeline,
    per-stage ms)``."""
    n_st = len(pipe.stages)
    queues: List["queue.Queue[Any]"] = [queue.Queue(maxsize=max(1, depth)) for _ in range(n_st)]
    done: "queue.Queue[Any]" = queue.Queue()
    spans: List[List[Tuple[float, float]]] = [[(0.0, 0.0)] * frames for _ in range(n_st)]
    errors: List[BaseException] = []
    perf = time.perf_counter

    def work(k: int) -> None:
        q_in, q_out = queues[k], (queues[k + 1] if k + 1 < n_st else done)
        while True:
            item = q_in.get()
            if item is None:
                q_out.put(None)
                return
            idx, frame = item
            if not errors:
                try:
                    t0 = perf()
                    pipe.stage(k, frame)
                    spans[k][idx] = (t0, perf())
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    errors.append(exc)
            q_out.put(item)

    threads = [threading.Thread(target=work, args=(k,), name="pipeline-stage-%d" % k, daemon=True)
               for k in range(n_st)]
    for t in threads:
        t.start()
    t_start = perf()
    for i in range(frames):
        name, image = images[i % len(images)]
        queues[0].put((i, Frame(name, image)))
    queues[0].put(None)
    while done.get() is not None:
        pass
    wall_s = perf() - t_start
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    timeline = [{"frame": i, "input": images[i % len(images)][0],
                 "stages": [[round((spans[k][i][0] - t_start) * 1e3, 3), round((spans[k][i][1] - t_start) * 1e3, 3)]
                            for k in range(n_st)]} for i in range(frames)]
    stage_ms = [[(spans[k][i][1] - spans[k][i][0]) * 1e3 for i in range(frames)] for k in range(n_st)]
    return wall_s, timeline, stage_ms


def run_pipeline_spec(spec: PipelineSpec, images: List[Tuple[str, np.ndarray]], cfg: Optional[RunConfig] = None,
                      pipe: Optional[OpenPipeline] = None) -> PipelineResult:
    """Measure ``spec`` on the decoded ``images`` (see :func:`load_images`); returns the
    :class:`PipelineResult` (``host``/``device`` filled by the caller). ``pipe``: an already open
    pipeline to reuse (its sessions stay open)."""
    from ...result import LatencyStats

    cfg = cfg or RunConfig()
    if cfg.frames < 1 or cfg.warmup < 0:
        raise InputError("frames must be >= 1 and warmup >= 0")
    if not images:
        raise InputError("the pipeline got no inputs")
    own = pipe is None
    pipe = pipe or OpenPipeline(spec, cfg.workdir).__enter__()
    try:
        per, outputs, serial_s = _serial(pipe, images, cfg)
        n = len(per["end_to_end"])
        timeline: List[Dict[str, Any]] = []
        over_fps: Optional[float] = None
        over_ms: Optional[List[List[float]]] = None
        if cfg.overlapped and len(pipe.stages) > 1:
            over_s, timeline, over_ms = _overlapped(pipe, images, n, cfg.queue_depth)
            over_fps = n / over_s if over_s > 0 else None
        devices = pipe.devices()
        targets = [str(t.name) for t in pipe.targets]
    finally:
        if own:
            pipe.close()
    e2e = LatencyStats.from_samples(per["end_to_end"], wall_s=serial_s)
    e2e_mean = e2e.mean_ms or 1.0
    stages: List[Dict[str, Any]] = []
    for k, st in enumerate(spec.stages):
        stats = LatencyStats.from_samples(per["stages"][k])
        stages.append({
            "name": st.name, "model": {"path": st.model, "name": Path(st.model).name}, "target": targets[k],
            "precision": st.precision, "devices": devices[k], "latency_ms": stats.latency_dict(),
            "pre_ms": _summary(per["pre"][k]), "inference_ms": _summary(per["inference"][k]),
            "post_ms": _summary(per["post"][k]),
            "glue_ms": _summary([a + c for a, c in zip(per["pre"][k], per["post"][k])]),
            "items_per_frame": _summary(per["items"][k]), "share": stats.mean_ms / e2e_mean,
            "overlapped_ms": _summary(over_ms[k]) if over_ms else None})
    stage_sum = [sum(per["stages"][k][i] for k in range(len(spec.stages))) for i in range(n)]
    overhead = [e - s for e, s in zip(per["end_to_end"], stage_sum)]
    basis = [s["overlapped_ms"] or s["latency_ms"] for s in stages]
    bounding = max(range(len(stages)), key=lambda k: basis[k]["mean"])
    serial_fps = n / serial_s if serial_s > 0 else 0.0
    return PipelineResult(
        pipeline={"name": spec.name, "task": spec.task, "spec": spec.to_dict()}, stages=stages,
        end_to_end=dict(e2e.to_dict(), overhead_ms=_summary(overhead)),
        throughput={"serial_fps": serial_fps, "overlapped_fps": over_fps,
                    "speedup": (over_fps / serial_fps) if over_fps and serial_fps else None,
                    "queue_depth": cfg.queue_depth, "overlapped_frames": len(timeline),
                    "threads": "one per stage" if timeline else None},
        bounding_stage=stages[bounding]["name"], outputs=list(outputs.values()), frames=n, warmup=cfg.warmup,
        timeline=timeline,
        per_frame_ms=dict({st.name: [round(v, 4) for v in per["stages"][k]] for k, st in enumerate(spec.stages)},
                          end_to_end=[round(v, 4) for v in per["end_to_end"]]))
