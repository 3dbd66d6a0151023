"""Before any build: which nodes of a model a target runs, which fall back, which it cannot run.

One checker per target family (:class:`CapabilityChecker`), selected through the registry
:data:`CHECKERS` (plugins: entry-point group ``edgesdk.capability_checkers``), returning one result
type, :class:`CapabilityReport`, written by one function (:meth:`CapabilityReport.to_dict`) to one
versioned schema (``schema_version`` 1)::

    import sdk
    report = sdk.check("model.onnx", "tensorrt@8.6", dla=True, soc="xavier")
    print(report.summary())             # "412 of 431 nodes on DLA; 19 fall back to GPU: ..."
    for n in report.failing():          # nodes the target cannot run at all
        print(n.node, n.op, n.reason, n.remedies)

Verdicts: ``runs`` (on the target's preferred device: the GPU, the DLA, the XNNPACK delegate),
``fallback`` (runs, but elsewhere: DLA -> GPU, XNNPACK -> the CPU builtin kernels), ``fails``
(cannot run at all: the build or the session would refuse the model). Nothing is built and no
runtime is needed for TensorRT (its parser's published tables); the TFLite checker asks LiteRT's
own interpreter for its execution plan.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import InputError, ResultFormatError
from ..registry import TARGET_ALIASES, Registry

__all__ = ["VERDICTS", "NodeVerdict", "CapabilityReport", "CapabilityChecker", "CHECKERS", "check",
           "parse_target", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
VERDICTS = ("runs", "fallback", "fails")


@dataclass
class NodeVerdict:
    """One node: ``verdict`` (one of :data:`VERDICTS`), ``device`` it runs on (``GPU``, ``DLA``,
    ``XNNPACK``, ``CPU``; ``-`` for a node that makes no layer, e.g. a Constant folded by the
    parser, or one that cannot run), ``reason`` (why not the preferred device, or why it fails) and
    ``remedies`` (for ``fails``)."""

    node: str
    op: str
    verdict: str
    device: str
    reason: str = ""
    remedies: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "op": self.op, "verdict": self.verdict, "device": self.device,
                "reason": self.reason, "remedies": list(self.remedies)}


@dataclass
class CapabilityReport:
    """What one target does with one model, node by node (graph order)."""

    model: str
    sha256: str
    target: str                 # "tensorrt", "tflite", ...
    version: str                # the runtime version checked against ("8.6", "10.3", "2.3.0")
    device: str                 # the preferred device ("GPU", "DLA (Orin)", "XNNPACK")
    fallback_device: str        # where fallbacks run ("GPU", "CPU builtin kernels")
    source: str                 # where the rules come from (a table at a tag, a runtime's plan)
    nodes: List[NodeVerdict] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def counts(self) -> Dict[str, int]:
        c = Counter(n.verdict for n in self.nodes)
        return {v: c.get(v, 0) for v in VERDICTS}

    @property
    def ok(self) -> bool:
        """True when no node fails (the target can run the whole model, fallbacks included)."""
        return self.counts["fails"] == 0

    def failing(self) -> List[NodeVerdict]:
        return [n for n in self.nodes if n.verdict == "fails"]

    def falling_back(self) -> List[NodeVerdict]:
        return [n for n in self.nodes if n.verdict == "fallback"]

    def summary(self) -> str:
        """``"412 of 431 nodes on DLA (Orin); 19 fall back to GPU: Reshape x10, ...; 0 cannot run"``."""
        c = self.counts
        total = len(self.nodes)
        text = f"{c['runs']} of {total} nodes on {self.device}"
        if c["fallback"]:
            text += f"; {c['fallback']} fall back to {self.fallback_device}: {_ops(self.falling_back())}"
        if c["fails"]:
            text += f"; {c['fails']} cannot run: {_ops(self.failing())}"
        else:
            text += "; none cannot run"
        return text

    def to_dict(self) -> Dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": "capability", "model": self.model, "sha256": self.sha256,
                "target": self.target, "version": self.version, "device": self.device,
                "fallback_device": self.fallback_device, "source": self.source, "counts": self.counts,
                "ok": self.ok, "summary": self.summary(), "notes": list(self.notes),
                "seconds": round(self.seconds, 4), "nodes": [n.to_dict() for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CapabilityReport":
        if data.get("kind") != "capability" or data.get("schema_version") != SCHEMA_VERSION:
            raise ResultFormatError("not a capability report of schema_version %d" % SCHEMA_VERSION)
        try:
            nodes = [NodeVerdict(**{k: n[k] for k in ("node", "op", "verdict", "device", "reason", "remedies")})
                     for n in data["nodes"]]
            return cls(data["model"], data["sha256"], data["target"], data["version"], data["device"],
                       data["fallback_device"], data["source"], nodes, list(data.get("notes", [])),
                       float(data.get("seconds", 0.0)))
        except (KeyError, TypeError) as exc:
            raise ResultFormatError(f"capability report: missing or bad field {exc}") from exc


def _ops(nodes: Sequence[NodeVerdict], limit: int = 6) -> str:
    c = Counter(n.op for n in nodes)
    parts = [f"{op} x{k}" if k > 1 else op for op, k in c.most_common(limit)]
    if len(c) > limit:
        parts.append(f"{len(c) - limit} more op types")
    return ", ".join(parts)


class CapabilityChecker:
    """Base of a target family's checker. The public :meth:`check` loads the model, checks its
    format, times the run and fills the report's header; subclasses override :meth:`_check_impl`
    (return the node verdicts and notes) and set ``name``, ``formats``, ``options`` (the keyword
    options they take), :meth:`version_label`, :meth:`devices` and :meth:`source`."""

    name = "?"
    formats: Tuple[str, ...] = ("onnx",)
    options: Tuple[str, ...] = ()

    def __init__(self, version: Optional[str] = None, **options: Any) -> None:
        unknown = sorted(k for k, v in options.items() if k not in self.options and v not in (None, False))
        if unknown:
            raise InputError(f"{self.name} check: option(s) {', '.join(unknown)} do not apply",
                             f"options of this target: {', '.join(self.options) or 'none'}")
        self.version = version
        self.opts = {k: v for k, v in options.items() if k in self.options}

    def check(self, model: Any) -> CapabilityReport:
        """The report for ``model`` (a path or :class:`sdk.Model`)."""
        from ..digest import file_sha256
        from ..model import Model

        start = time.perf_counter()
        m = model if isinstance(model, Model) else Model.load(model)
        if m.format not in self.formats:
            raise InputError(f"{self.name} check takes {' or '.join('.' + f for f in self.formats)} models, "
                             f"not a {m.format} model ('{m.path}')",
                             "give a model of that format, or another --target")
        nodes, notes = self._check_impl(m)
        device, fallback = self.devices()
        # a model this call loaded is its file: hash the file, not a re-serialization of the proto
        sha256 = m.sha256 if m is model or m.path is None else file_sha256(m.path)
        return CapabilityReport(str(m.path), sha256, self.name, self.version_label(), device, fallback,
                                self.source(), nodes, notes, time.perf_counter() - start)

    # -- for subclasses --------------------------------------------------------------------------
    def _check_impl(self, model: Any) -> Tuple[List[NodeVerdict], List[str]]:
        raise NotImplementedError

    def version_label(self) -> str:
        return self.version or "?"

    def devices(self) -> Tuple[str, str]:
        return ("target", "-")

    def source(self) -> str:
        return ""


#: Target family -> checker class (``"module:Class"`` until first use); ``onnxruntime`` checks a
#: mobile execution provider (``ep``: NNAPI/CoreML/XNNPACK, from onnxruntime's usability checker).
CHECKERS: "Registry[type]" = Registry(
    "capability checker",
    {
        "tensorrt": "sdk.targets.tensorrt.capability:TensorRTChecker",
        "tflite": "sdk.targets.tflite.capability:TFLiteChecker",
        "onnxruntime": "sdk.targets.onnxrt.capability:OrtMobileChecker",
    },
    aliases=TARGET_ALIASES, entry_points="edgesdk.capability_checkers", known_label="targets with a checker",
)


def parse_target(spec: str) -> Tuple[str, Optional[str]]:
    """``"tensorrt@8.6"`` -> ``("tensorrt", "8.6")``; ``"trt"`` -> ``("tensorrt", None)``; an unknown
    family raises the registry's error listing the known ones."""
    name, _, version = spec.partition("@")
    if not name.strip():
        raise InputError(f"bad --target '{spec}'", "write NAME or NAME@VERSION, e.g. tensorrt@10.3")
    return CHECKERS.canonical(name.strip()), (version.strip() or None)


def check(model: Any, target: str = "tensorrt", **options: Any) -> CapabilityReport:
    """What ``target`` (``NAME[@VERSION]``: ``tensorrt@8.6``, ``trt@10``, ``tensorrt@11``,
    ``tflite``) runs of ``model``, node by node, without building anything. Options by target:
    TensorRT ``dla`` (bool), ``soc`` (``orin`` | ``xavier``, for DLA), ``precision`` (fp16 | int8 |
    fp32), ``input_shapes`` ({name: shape}, for DLA's static shapes). See :class:`CapabilityReport`."""
    name, version = parse_target(target)
    checker = CHECKERS.load(name)(version, **options)
    report: CapabilityReport = checker.check(model)
    return report
