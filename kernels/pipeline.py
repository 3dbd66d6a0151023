"""The detection pipeline split: where a frame's time goes between JPEG decode, preprocessing,
inference and post-processing (score threshold, box decode, class-aware NMS).

::

    from sdk.kernels.pipeline import PipelineConfig, detect_pipeline
    res = detect_pipeline("yolov8n.onnx", PipelineConfig(data="photos/", input_size=(320, 320)))
    print(res["stages_ms"]["inference"]["p50"], res["stages_ms"]["end_to_end"]["p50"])

Each frame is timed stage by stage with ``perf_counter`` (the file's bytes are read before timing:
``decode`` is the decoder, not the disk). Pre- and post-processing run the CUDA kernels of this
package when a GPU and a CUDA backend are present (``device="auto"``), else their CPU references
(:func:`sdk.preprocess.preprocess`, :func:`reference.yolo_postprocess`); the result says which ran
and why. The model runs on any target through the registry. Runs on the board too (Python 3.8,
NumPy; OpenCV for JPEG decoding).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import InputError, MissingDependencyError
from ..preprocess import PreprocessSpec
from .reference import Detections, PostprocessSpec, scale_boxes, yolo_postprocess

__all__ = ["PipelineConfig", "detect_pipeline", "STAGES", "stage_stats", "image_files", "PIPELINES", "run_pipeline", "cuda_reason"]

STAGES = ("decode", "preprocess", "inference", "postprocess")
_IMAGE_EXT = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


@dataclass
class PipelineConfig:
    """``data``: a folder of images (or a list of files). ``input_size``: (h, w) for a dynamic
    input (default: the model's static size, else 640x640). ``objectness``: rows carry an
    objectness score (YOLOv5/YOLOX) or not (YOLOv8); None: YOLOv8 when the output is
    ``[1, 4+C, N]`` (transposed), else with objectness. ``frames``: at least this many frames are
    timed (the images are cycled), after ``warmup`` untimed frames. ``device``: ``auto`` | ``cpu``
    | ``cuda`` for pre/post-processing."""

    data: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]] = "."
    target: str = "onnxruntime"
    target_options: Dict[str, Any] = field(default_factory=dict)
    input_size: Optional[Tuple[int, int]] = None
    objectness: Optional[bool] = None
    score_threshold: float = 0.25
    iou_threshold: float = 0.45
    frames: int = 20
    warmup: int = 2
    device: str = "auto"
    letterbox: bool = True
    #: An open :class:`~sdk.targets.cuda.CudaBackend` for the CUDA stages (default: ``get_backend()``);
    #: the caller keeps it open and closes it.
    cuda_backend: Any = None


def image_files(data: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]) -> List[Path]:
    """The image files of a folder (sorted) or a list; :class:`InputError` when there are none."""
    if isinstance(data, (str, os.PathLike)):
        p = Path(data)
        if not p.exists():
            raise InputError(f"image folder '{p}' does not exist")
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in _IMAGE_EXT) if p.is_dir() else [p]
    else:
        files = [Path(f) for f in data]
    if not files:
        raise InputError(f"no images ({', '.join(_IMAGE_EXT)}) in '{data}'", "give a folder of photos with --data")
    return files


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise MissingDependencyError("decoding images in the pipeline split", "opencv-python-headless",
                                     "pip install opencv-python-headless") from exc
    return cv2


# -- stage implementations (CPU references and CUDA kernels), chosen through a table ------------------
class _CpuStages:
    label = {"preprocess": "cpu (sdk.preprocess.preprocess, OpenCV)",
             "postprocess": "cpu (sdk.kernels.reference.yolo_postprocess, NumPy)"}

    def __init__(self, pre: PreprocessSpec, post: PostprocessSpec, rows: int, fields: int, backend: Any = None) -> None:
        from ..preprocess import preprocess

        self.pre_spec, self.post_spec = pre, post
        self._out = np.empty(pre.output_shape(), dtype=pre.dtype)
        self._preprocess = preprocess

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        return self._preprocess(image, self.pre_spec, out=self._out)

    def postprocess(self, pred: np.ndarray) -> Detections:
        return yolo_postprocess(pred, self.post_spec)

    def close(self) -> None:
        pass


class _CudaStages:

    def __init__(self, pre: PreprocessSpec, post: PostprocessSpec, rows: int, fields: int, backend: Any = None) -> None:
        from ..targets.cuda import get_backend
        from .postprocess import GpuYoloPostprocessor
        from .preprocess import GpuPreprocessor

        self._own = backend is None
        self.backend = backend if backend is not None else get_backend()
        name = type(self.backend).__name__
        self.label = {"preprocess": "cuda (sdk.kernels preprocess.cu on %s)" % name,
                      "postprocess": "cuda (sdk.kernels postprocess.cu on %s)" % name}
        self._pre = GpuPreprocessor(pre, backend=self.backend)
        self._post = GpuYoloPostprocessor(post, rows, fields, backend=self.backend, stream=self._pre.stream)

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        return self._pre(image)  # to the host: the session takes host arrays on every target

    def postprocess(self, pred: np.ndarray) -> Detections:
        return self._post(pred)

    def close(self) -> None:
        self._pre.close()
        self._post.close()
        if self._own:
            self.backend.close()


_DEVICES: Dict[str, Callable[..., Any]] = {"cpu": _CpuStages, "cuda": _CudaStages}


def cuda_reason() -> Optional[str]:
    """None when the CUDA kernels can run here, else why not (also used by the pipeline glue steps)."""
    from ..targets.cuda import installed_backends
    from ..targets.cuda.probe import probe_gpu

    probe = probe_gpu()
    if not probe.available:
        return f"no usable NVIDIA GPU ({probe.reason})"
    if not installed_backends():
        return "no CUDA backend package (pip install cuda-python or pycuda)"
    return None


def _pick_device(device: str, backend: Any = None) -> Tuple[str, Optional[str]]:
    if device not in ("auto", *_DEVICES):
        raise InputError(f"unknown pipeline device '{device}'", f"use one of: auto, {', '.join(_DEVICES)}")
    if device == "cpu":
        return "cpu", "cpu was asked for"
    if backend is not None:
        return "cuda", None
    why = cuda_reason()
    if device == "cuda" and why:
        raise InputError(f"the CUDA pre/post-processing kernels cannot run here: {why}", "use --device cpu")
    return ("cpu", why) if why else ("cuda", None)


# -- statistics ---------------------------------------------------------------------------------------
def stage_stats(per_frame: Mapping[str, Sequence[float]]) -> Dict[str, Dict[str, float]]:
    """``{stage: {mean, std, min, p50, p90, p99, max, share}}`` from per-frame ms lists;
    ``share`` is the stage's mean over the end-to-end mean."""
    e2e_mean = float(np.mean(per_frame["end_to_end"])) if per_frame.get("end_to_end") else 0.0
    out: Dict[str, Dict[str, float]] = {}
    for stage, vals in per_frame.items():
        a = np.asarray(vals, dtype=np.float64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        out[stage] = {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
                      "min": float(a.min()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
                      "max": float(a.max()), "share": float(a.mean() / e2e_mean) if e2e_mean else 0.0}
    return out


# -- the pipeline -------------------------------------------------------------------------------------
def _specs(session: Any, cfg: PipelineConfig, pred_shape: Tuple[int, ...]) -> Tuple[PreprocessSpec, PostprocessSpec]:
    spec = session.inputs[0]
    if len(spec.shape) != 4:
        raise InputError(f"the detect pipeline needs one image input [1,3,H,W] or [1,H,W,3]; "
                         f"'{spec.name}' has shape {spec.shape}")
    nhwc = spec.shape[3] == 3 and spec.shape[1] != 3
    hw = (spec.shape[1], spec.shape[2]) if nhwc else (spec.shape[2], spec.shape[3])
    size: Tuple[int, int] = cfg.input_size or ((int(hw[0]), int(hw[1])) if all(isinstance(d, int) for d in hw)
                                               else (640, 640))
    pre = PreprocessSpec(size=size, resize="letterbox" if cfg.letterbox else "resize",
                         layout="NHWC" if nhwc else "NCHW", dtype=spec.dtype if spec.dtype in ("float32", "float16") else "float32")
    rows3 = pred_shape[1:] if len(pred_shape) == 3 else pred_shape
    transposed = rows3[0] < rows3[1]
    objectness = (not transposed) if cfg.objectness is None else cfg.objectness
    post = PostprocessSpec(score_threshold=cfg.score_threshold, iou_threshold=cfg.iou_threshold,
                           has_objectness=objectness, transposed=transposed)
    return pre, post


def detect_pipeline(model: Any, config: Optional[PipelineConfig] = None) -> Any:
    """Run the detection pipeline over the images and time each stage per frame; returns a
    :class:`sdk.result.BenchResult`: the end-to-end frame latency as its statistics, ``stages_ms``
    ({stage: stats} for decode, preprocess, inference, postprocess and end_to_end) and ``pipeline``
    (what ran where, ``per_frame_ms`` lists, ``detections`` per image)."""
    from ..model import Model
    from ..targets import get_target

    cfg = config or PipelineConfig()
    if cfg.frames < 1 or cfg.warmup < 0:
        raise InputError("frames must be >= 1 and warmup >= 0")
    files = image_files(cfg.data)
    blobs = [f.read_bytes() for f in files]
    cv2 = _cv2()
    if not isinstance(model, Model):
        model = Model.load(model)
    device, why_cpu = _pick_device(cfg.device, cfg.cuda_backend)
    tgt = get_target(cfg.target, **dict(cfg.target_options))
    with tgt.open(tgt.prepare(model)) as session:
        probe = _decode(cv2, blobs[0], files[0])
        t0 = time.perf_counter()
        stages, per_frame, found = _run(session, cfg, cv2, blobs, files, device, probe)
        wall_s = time.perf_counter() - t0
        session_inputs = [s.to_dict() for s in session.inputs]
    return _result(tgt, model, cfg, files, stages, per_frame, found, why_cpu, wall_s, session_inputs)


def _result(tgt: Any, model: Any, cfg: PipelineConfig, files: List[Path], stages: Any,
            per_frame: Dict[str, List[float]], found: List[Dict[str, Any]], why_cpu: Optional[str], wall_s: float,
            inputs: List[Dict[str, Any]]) -> Any:
    """The :class:`sdk.result.BenchResult` of a pipeline run: the end-to-end frame latency as its
    statistics, ``stages_ms`` and ``pipeline`` (what ran where, per-frame times, detections)."""
    from ..hostinfo import host_info
    from ..result import BenchResult, LatencyStats

    describe = tgt.describe()
    return BenchResult(
        stats=LatencyStats.from_samples(per_frame["end_to_end"], wall_s=wall_s), target=tgt.name, runtime=describe,
        model={"path": str(model.path), "sha256": model.sha256, "format": model.format}, host=host_info(),
        inputs=inputs,
        settings={"warmup": cfg.warmup, "min_runs": cfg.frames, "data": str(cfg.data), "pipeline": "detect",
                  "device": cfg.device},
        samples_ms=list(per_frame["end_to_end"]), stages_ms=stage_stats(per_frame),
        pipeline={"kind": "detect", "stages": list(STAGES), "frames": len(per_frame["end_to_end"]),
                  "warmup": cfg.warmup, "images": len(files), "data": str(cfg.data),
                  "devices": {"decode": "cpu (cv2.imdecode)", "preprocess": stages.label["preprocess"],
                              "inference": tgt.name, "postprocess": stages.label["postprocess"]},
                  "why_not_cuda": why_cpu, "preprocess": stages.pre_spec.to_dict(),
                  "score_threshold": cfg.score_threshold, "iou_threshold": cfg.iou_threshold,
                  "per_frame_ms": per_frame, "detections": found})


def _decode(cv2: Any, blob: bytes, path: Path) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(blob, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise InputError(f"'{path}' is not an image OpenCV can decode")
    return img


def _run(session: Any, cfg: PipelineConfig, cv2: Any, blobs: List[bytes], files: List[Path], device: str,
         probe: np.ndarray) -> Tuple[Any, Dict[str, List[float]], List[Dict[str, Any]]]:
    name = session.inputs[0].name
    out_name = session.outputs[0].name
    # one untimed pass to learn the output layout
    from ..preprocess import preprocess

    first_spec = PreprocessSpec(size=cfg.input_size or (640, 640))
    shape0 = session.inputs[0].shape
    if all(isinstance(d, int) for d in shape0[2:]) and shape0[1] == 3:
        first_spec = PreprocessSpec(size=(int(shape0[2]), int(shape0[3])))
    pred0 = session.run({name: preprocess(probe, first_spec)})[out_name]
    pre_spec, post_spec = _specs(session, cfg, tuple(pred0.shape))
    rows, fields = (pred0.shape[-1], pred0.shape[-2]) if post_spec.transposed else (pred0.shape[-2], pred0.shape[-1])
    stages = _DEVICES[device](pre_spec, post_spec, int(rows), int(fields), backend=cfg.cuda_backend)
    stages.pre_spec = pre_spec
    per_frame: Dict[str, List[float]] = {s: [] for s in STAGES + ("end_to_end",)}
    found: Dict[str, Dict[str, Any]] = {}
    perf = time.perf_counter
    try:
        total = cfg.warmup + max(cfg.frames, len(blobs))
        for i in range(total):
            k = i % len(blobs)
            t0 = perf()
            img = _decode(cv2, blobs[k], files[k])
            t1 = perf()
            x = stages.preprocess(img)
            t2 = perf()
            pred = session.run({name: x})[out_name]
            t3 = perf()
            det = stages.postprocess(pred)
            boxes = scale_boxes(det.boxes, pre_spec, img.shape[:2])
            t4 = perf()
            if i >= cfg.warmup:
                for s, v in zip(STAGES + ("end_to_end",), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                    per_frame[s].append(v * 1e3)
            found[files[k].name] = {"image_hw": list(img.shape[:2]), "count": len(det),
                                    "top": [{"class": int(c), "score": float(s), "box": [float(b) for b in bb]}
                                            for c, s, bb in list(zip(det.classes, det.scores, boxes))[:5]]}
    finally:
        stages.close()
    return stages, per_frame, [dict(image=k, **v) for k, v in found.items()]


#: Pipeline kinds by name (``sdk bench --pipeline NAME``).
PIPELINES: Dict[str, Callable[[Any, PipelineConfig], Any]] = {"detect": detect_pipeline}


def run_pipeline(kind: str, model: Any, config: PipelineConfig) -> Any:
    """Run the pipeline ``kind``; :class:`InputError` lists the known kinds for an unknown one."""
    fn = PIPELINES.get(kind)
    if fn is None:
        raise InputError(f"unknown pipeline '{kind}'", f"known pipelines: {', '.join(PIPELINES)}")
    return fn(model, config)


_cuda_reason = cuda_reason  # the earlier private name (tests/kernels/test_pipeline.py)
