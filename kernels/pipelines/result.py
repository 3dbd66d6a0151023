"""The one result type of a pipeline run, here or on a board: :class:`PipelineResult`, written by
:meth:`PipelineResult.to_dict` to the versioned schema ``pipeline-result`` (``schema_version`` 1)
and read back by :meth:`PipelineResult.from_dict`. Runs on the board too (Python 3.8)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ...errors import ResultFormatError

__all__ = ["PipelineResult", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA = "pipeline-result"
SCHEMA_VERSION = 1
_REQUIRED = ("pipeline", "stages", "end_to_end", "throughput", "bounding_stage", "outputs", "frames")


@dataclass
class PipelineResult:
    """A pipeline run. Times in ms, throughput in frames/s, energy in mJ per frame.

    ``pipeline``: the spec (``to_dict``) and its name; ``stages``: per stage ``{name, model, target,
    precision, devices, latency_ms (stage total, with ci95), inference_ms, glue_ms, items_per_frame,
    share}``; ``end_to_end``: the serial frame latency (``latency_ms`` with ci95 and noise,
    ``throughput_ips``); ``throughput``: ``{serial_fps, overlapped_fps, speedup, queue_depth,
    overlapped_frames}``; ``bounding_stage``: the stage with the largest mean time (it bounds the
    overlapped frame rate); ``energy``: ``{measured, mj_per_frame, mean_w, source, reason}``;
    ``outputs``: per input ``{input, items: [{box, quad?, score, class?, label?, text?}], counts}``;
    ``timeline``: per frame of the overlapped run ``{frame, stages: [[start_ms, end_ms], ...]}``;
    ``per_frame_ms``: ``{stage: [ms...], "end_to_end": [...]}`` of the serial run; ``frames``;
    ``warmup``; ``host``/``device``/``board``: where it ran; ``accuracy``: filled by validation."""

    pipeline: Dict[str, Any]
    stages: List[Dict[str, Any]]
    end_to_end: Dict[str, Any]
    throughput: Dict[str, Any]
    bounding_stage: str
    outputs: List[Dict[str, Any]]
    frames: int
    warmup: int = 0
    energy: Dict[str, Any] = field(default_factory=lambda: {"measured": False, "reason": "not measured"})
    timeline: List[Dict[str, Any]] = field(default_factory=list)
    per_frame_ms: Dict[str, List[float]] = field(default_factory=dict)
    host: Dict[str, Any] = field(default_factory=dict)
    device: Dict[str, Any] = field(default_factory=dict)
    board: Optional[Dict[str, Any]] = None
    accuracy: Optional[Dict[str, Any]] = None

    @property
    def name(self) -> str:
        return str(self.pipeline.get("name", "pipeline"))

    def stage(self, name: str) -> Dict[str, Any]:
        for s in self.stages:
            if s["name"] == name:
                return s
        raise KeyError(name)

    @property
    def p50_ms(self) -> float:
        return float(self.end_to_end["latency_ms"]["p50"])

    def outputs_by_input(self) -> Dict[str, List[Dict[str, Any]]]:
        return {o["input"]: list(o["items"]) for o in self.outputs}

    def to_dict(self, samples: bool = True) -> Dict[str, Any]:
        d: Dict[str, Any] = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "pipeline": self.pipeline,
                             "stages": self.stages, "end_to_end": self.end_to_end, "throughput": self.throughput,
                             "bounding_stage": self.bounding_stage, "energy": self.energy, "outputs": self.outputs,
                             "frames": self.frames, "warmup": self.warmup, "host": self.host, "device": self.device,
                             "board": self.board, "accuracy": self.accuracy}
        if samples:
            d["timeline"], d["per_frame_ms"] = self.timeline, self.per_frame_ms
        return d

    def to_json(self, samples: bool = True) -> str:
        return json.dumps(self.to_dict(samples), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any, source: str = "pipeline result") -> "PipelineResult":
        if not isinstance(data, Mapping):
            raise ResultFormatError("%s is not a JSON object" % source)
        if data.get("schema") != SCHEMA or data.get("schema_version") != SCHEMA_VERSION:
            raise ResultFormatError("%s is not a %s v%d document (schema %r, version %r)"
                                    % (source, SCHEMA, SCHEMA_VERSION, data.get("schema"), data.get("schema_version")))
        missing = [k for k in _REQUIRED if k not in data]
        if missing:
            raise ResultFormatError("%s lacks %s" % (source, ", ".join(missing)))
        for s in data["stages"]:
            if not isinstance(s, Mapping) or "latency_ms" not in s or "name" not in s:
                raise ResultFormatError("%s: a stage lacks name/latency_ms" % source)
        return cls(pipeline=dict(data["pipeline"]), stages=[dict(s) for s in data["stages"]],
                   end_to_end=dict(data["end_to_end"]), throughput=dict(data["throughput"]),
                   bounding_stage=str(data["bounding_stage"]), outputs=list(data["outputs"]),
                   frames=int(data["frames"]), warmup=int(data.get("warmup") or 0),
                   energy=dict(data.get("energy") or {"measured": False, "reason": "not measured"}),
                   timeline=list(data.get("timeline") or []), per_frame_ms=dict(data.get("per_frame_ms") or {}),
                   host=dict(data.get("host") or {}), device=dict(data.get("device") or {}),
                   board=data.get("board"), accuracy=data.get("accuracy"))

    @classmethod
    def from_json(cls, text: str, source: str = "pipeline result") -> "PipelineResult":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ResultFormatError("%s is not JSON: %s" % (source, exc)) from exc
        return cls.from_dict(data, source)
