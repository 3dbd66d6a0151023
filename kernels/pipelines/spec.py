"""The pipeline spec: stages (a model with its target, precision and preprocessing) and the glue
steps between them, from TOML or Python. Runs on the board too (Python 3.8 + NumPy): the board
receives a spec whose references (corpus models, character files, metadata) are already resolved.

TOML (``[[stages]]`` in order; ``pre``/``post`` are lists of ``{step = NAME, OPTIONS...}``)::

    name = "ppocr"
    task = "ocr"                             # the end-to-end metric: ocr | detect-classify | none
    [[stages]]
    name = "det"
    model = "corpus:ppocr-v4-det"            # a corpus model, or a path (relative to this file)
    target = "onnxruntime"                   # optional; precision = "fp32", target_options = {...}
    preprocess = {size = [736, 736], resize = "letterbox", mean = [123.7, 116.3, 103.5], std = [58.4, 57.1, 57.4]}
    post = [{step = "db_boxes", unclip_ratio = 1.6}, {step = "crop_quads"},
            {step = "resize_pad", height = 48, width = 320, mean = 127.5, std = 127.5}, {step = "batch", max_batch = 6}]
    [[stages]]
    name = "rec"
    model = "corpus:ppocr-v4-rec"
    post = [{step = "ctc_greedy", characters = "metadata:character"}]
    [budgets]                                # for sdk validate --pipeline
    max_p50_ms = 500
    min_fps = 2
    max_energy_mj_per_frame = 5000
    min_metric = 0.98

Python: ``PipelineSpec(name, [StageSpec("det", model=..., preprocess=PreprocessSpec(...),
post=[GlueSpec("db_boxes", {"unclip_ratio": 1.6}), ...]), ...])``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ...config import check_keys, load_toml, loads_toml
from ...errors import ConfigError, InputError
from ...preprocess import PreprocessSpec

__all__ = ["GlueSpec", "StageSpec", "PipelineSpec", "TASKS", "BUDGET_KEYS"]

#: End-to-end metrics by task (:mod:`.metrics`).
TASKS = ("ocr", "detect-classify", "none")
#: Budget keys of ``[budgets]`` (``sdk validate --pipeline``).
BUDGET_KEYS = ("max_p50_ms", "max_p99_ms", "min_fps", "min_overlapped_fps", "max_energy_mj_per_frame", "min_metric")
_STAGE_KEYS = ("name", "model", "target", "target_options", "precision", "preprocess", "pre", "post", "input",
               "outputs", "reference_model")


@dataclass
class GlueSpec:
    """One glue step: a registered name (:data:`glue.GLUE`) or ``FILE.py:FUNCTION``, and its options."""

    step: str
    options: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"step": self.step}
        d.update(self.options)
        return d

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "GlueSpec":
        if isinstance(data, str):
            return cls(data)
        if not isinstance(data, Mapping) or not data.get("step"):
            raise ConfigError("%s: a glue step is {step = NAME, options...}" % where)
        opts = {k: v for k, v in data.items() if k != "step"}
        return cls(str(data["step"]), opts)


@dataclass
class StageSpec:
    """One stage: ``model`` (a file path), run with ``target`` (options, precision); its input is
    made by ``pre`` glue (a ``preprocess`` spec is the shorthand for a first ``preprocess`` step)
    or by the previous stage's ``post`` glue; ``input``: the input name (default the model's first),
    ``outputs``: the outputs the glue reads, in order (default all); ``reference_model``: the FP32
    original of a quantized ``model`` (what the end-to-end reference runs)."""

    name: str
    model: str
    target: str = "onnxruntime"
    target_options: Dict[str, Any] = field(default_factory=dict)
    precision: str = "fp32"
    preprocess: Optional[PreprocessSpec] = None
    pre: List[GlueSpec] = field(default_factory=list)
    post: List[GlueSpec] = field(default_factory=list)
    input: Optional[str] = None
    outputs: Optional[List[str]] = None
    reference_model: Optional[str] = None

    def pre_steps(self) -> List[GlueSpec]:
        """The steps before inference (the ``preprocess`` shorthand first)."""
        first = [GlueSpec("preprocess", self.preprocess.to_dict())] if self.preprocess is not None else []
        return first + list(self.pre)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "model": self.model, "target": self.target,
                             "target_options": dict(self.target_options), "precision": self.precision,
                             "pre": [g.to_dict() for g in self.pre], "post": [g.to_dict() for g in self.post]}
        if self.preprocess is not None:
            d["preprocess"] = self.preprocess.to_dict()
        if self.input:
            d["input"] = self.input
        if self.outputs:
            d["outputs"] = list(self.outputs)
        if self.reference_model:
            d["reference_model"] = self.reference_model
        return d

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "StageSpec":
        if not isinstance(data, Mapping):
            raise ConfigError("%s: a stage is a table" % where)
        check_keys(data, _STAGE_KEYS, "%s: unknown stage key(s): {keys}" % where)
        for key in ("name", "model"):
            if not data.get(key):
                raise ConfigError("%s: the stage needs '%s'" % (where, key))
        pre = data.get("preprocess")
        if pre is not None and not isinstance(pre, Mapping):
            raise ConfigError("%s: preprocess is a table of PreprocessSpec fields" % where)
        for key in ("pre", "post"):
            if not isinstance(data.get(key, []), list):
                raise ConfigError("%s: %s is a list of glue steps" % (where, key))
        opts = data.get("target_options") or {}
        if not isinstance(opts, Mapping):
            raise ConfigError("%s: target_options is a table" % where)
        return cls(name=str(data["name"]), model=str(data["model"]), target=str(data.get("target") or "onnxruntime"),
                   target_options=dict(opts), precision=str(data.get("precision") or "fp32"),
                   preprocess=PreprocessSpec.from_dict(dict(pre)) if pre is not None else None,
                   pre=[GlueSpec.from_dict(g, where) for g in data.get("pre", [])],
                   post=[GlueSpec.from_dict(g, where) for g in data.get("post", [])],
                   input=data.get("input"), outputs=list(data["outputs"]) if data.get("outputs") else None,
                   reference_model=data.get("reference_model"))


@dataclass
class PipelineSpec:
    """A pipeline: ``stages`` in order, the end-to-end ``task`` (its metric), ``budgets``
    (:data:`BUDGET_KEYS`), ``source`` (the file it came from, for relative paths)."""

    name: str
    stages: List[StageSpec]
    task: str = "none"
    budgets: Dict[str, float] = field(default_factory=dict)
    source: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.stages:
            raise ConfigError("pipeline '%s' has no stages" % self.name, "add [[stages]] tables")
        if self.task not in TASKS:
            raise ConfigError("pipeline task '%s' is not valid" % self.task, "use one of: %s" % ", ".join(TASKS))
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ConfigError("pipeline '%s': stage names repeat (%s)" % (self.name, ", ".join(names)))
        check_keys(self.budgets, BUDGET_KEYS, "unknown budget key(s): {keys}")
        if not self.stages[0].pre_steps():
            raise ConfigError("the first stage '%s' needs a preprocess spec (or pre glue) to turn an image "
                              "into its input" % self.stages[0].name)

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "task": self.task, "stages": [s.to_dict() for s in self.stages],
                "budgets": dict(self.budgets)}

    @classmethod
    def from_dict(cls, data: Any, source: Optional[str] = None, resolve: bool = True) -> "PipelineSpec":
        """From the TOML/JSON document; with ``resolve``, ``corpus:NAME`` models, paths relative to
        ``source``, ``file:`` and ``metadata:`` glue options become files and values (host side)."""
        where = "pipeline spec" + (" '%s'" % source if source else "")
        if not isinstance(data, Mapping):
            raise ConfigError("%s is not a table" % where)
        check_keys(data, ("name", "task", "stages", "budgets"), "%s: unknown key(s): {keys}" % where)
        stages = data.get("stages")
        if not isinstance(stages, list) or not stages:
            raise ConfigError("%s has no [[stages]]" % where)
        budgets = data.get("budgets") or {}
        if not isinstance(budgets, Mapping):
            raise ConfigError("%s: [budgets] is a table" % where)
        try:
            budget_values = {str(k): float(v) for k, v in budgets.items()}
        except (TypeError, ValueError) as exc:
            raise ConfigError("%s: budgets are numbers (%s)" % (where, exc)) from exc
        spec = cls(name=str(data.get("name") or (Path(source).stem if source else "pipeline")),
                   stages=[StageSpec.from_dict(s, "%s stage %d" % (where, i + 1)) for i, s in enumerate(stages)],
                   task=str(data.get("task") or "none"), budgets=budget_values, source=source)
        if resolve:
            spec.resolve()
        return spec

    @classmethod
    def load(cls, path: "os.PathLike[str] | str") -> "PipelineSpec":
        """Read a TOML spec file (references resolved)."""
        p = Path(path)
        if not p.is_file():
            raise InputError("pipeline spec '%s' does not exist" % p, "give a .toml pipeline spec")
        return cls.from_dict(load_toml(p, "pipeline spec '%s'" % p), source=str(p))

    @classmethod
    def loads(cls, text: str, source: Optional[str] = None) -> "PipelineSpec":
        return cls.from_dict(loads_toml(text, "pipeline spec"), source=source)

    # -- resolution (host side) --------------------------------------------------------------------------
    def _path(self, value: str) -> str:
        if value.startswith("corpus:"):
            from ...corpus import path as corpus_path

            return str(corpus_path(value[len("corpus:"):]))
        p = Path(os.path.expanduser(value))
        if not p.is_absolute() and self.source:
            p = Path(self.source).parent / p
        return str(p)

    def resolve(self) -> "PipelineSpec":
        """Resolve references in place: model paths (``corpus:NAME``, relative paths), user glue
        files, and glue options ``"file:PATH"`` (lines) / ``"metadata:KEY"`` (the stage model's
        ONNX metadata, lines). Missing models are an :class:`InputError`."""
        for st in self.stages:
            st.model = self._path(st.model)
            if not Path(st.model).is_file():
                raise InputError("stage '%s': model '%s' does not exist" % (st.name, st.model))
            if st.reference_model:
                st.reference_model = self._path(st.reference_model)
            for g in st.pre + st.post:
                if ".py:" in g.step:
                    file, _, fn = g.step.rpartition(":")
                    g.step = "%s:%s" % (self._path(file), fn)
                for key, value in list(g.options.items()):
                    if isinstance(value, str) and value.startswith(("file:", "metadata:")):
                        g.options[key] = self._lines(value, st)
        return self

    def _lines(self, ref: str, stage: StageSpec) -> List[str]:
        if ref.startswith("file:"):
            p = Path(self._path(ref[len("file:"):]))
            if not p.is_file():
                raise InputError("stage '%s': file '%s' does not exist" % (stage.name, p))
            return p.read_text(encoding="utf-8").splitlines()
        key = ref[len("metadata:"):]
        meta = _onnx_metadata(stage.model)
        if key not in meta:
            raise InputError("stage '%s': the model has no metadata '%s'" % (stage.name, key),
                             "its metadata keys: %s" % (", ".join(sorted(meta)) or "none"))
        return meta[key].splitlines()

    def models(self) -> List[str]:
        return [s.model for s in self.stages]

    def reference(self) -> "PipelineSpec":
        """The same pipeline in FP32: each stage's ``reference_model`` (or its model), precision fp32."""
        ref = self.with_models([s.reference_model or s.model for s in self.stages])
        for st in ref.stages:
            st.precision, st.reference_model = "fp32", None
        return ref

    def with_models(self, models: Sequence[str]) -> "PipelineSpec":
        """A copy with the stages' models replaced (e.g. INT8 ones, or paths on a board)."""
        data = self.to_dict()
        for st, m in zip(data["stages"], models):
            st["model"] = str(m)
        return PipelineSpec.from_dict(data, source=self.source, resolve=False)


def _onnx_metadata(path: str) -> Dict[str, str]:
    """An ONNX model's ``metadata_props`` (host side: the onnx package)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}
