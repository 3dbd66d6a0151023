"""Pipelines judged as one unit: the end-to-end metric against the same pipeline in FP32 on the
host, INT8 per stage under an end-to-end budget, and GO/NO-GO on budgets.

::

    from sdk.validation.pipeline import validate_pipeline, quantize_pipeline
    v = validate_pipeline("ocr.toml", "pages/", boards=["local"])      # v.verdict, v.checks, v.results
    q = quantize_pipeline("ocr.toml", "calib_pages/", "out/")          # q.spec_path: the INT8 pipeline

``sdk validate --pipeline SPEC`` and ``sdk pipeline quantize SPEC`` are these calls.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ..errors import EdgeSDKError, InputError

__all__ = ["reference_result", "pipeline_accuracy", "PipelineValidation", "validate_pipeline",
           "PipelineQuantization", "quantize_pipeline", "write_spec_toml"]

SpecLike = Union[str, "os.PathLike[str]", Any]
Progress = Optional[Callable[[str], None]]


def _spec(spec: SpecLike) -> Any:
    from ..kernels.pipelines import Pipeline, PipelineSpec

    if isinstance(spec, Pipeline):
        return spec.spec
    if isinstance(spec, PipelineSpec):
        return spec
    return PipelineSpec.load(spec)


def reference_result(spec: SpecLike, data: Any, frames: int = 1) -> Any:
    """The same pipeline in FP32 on the host (each stage's ``reference_model`` or its model),
    run once per input: its outputs are the end-to-end truth."""
    from ..kernels.pipelines import Pipeline, RunConfig

    ref = _spec(spec).reference()
    return Pipeline(ref).run(data, RunConfig(frames=frames, warmup=0, overlapped=False))


def pipeline_accuracy(task: str, result: Any, reference: Any) -> Dict[str, Any]:
    """:func:`sdk.kernels.pipelines.metrics.end_to_end_metric` of ``result`` against ``reference``."""
    from ..kernels.pipelines.metrics import end_to_end_metric

    return end_to_end_metric(task, reference.outputs_by_input(), result.outputs_by_input())


@dataclass
class PipelineValidation:
    """``verdict`` GO | NO-GO, ``checks`` (name, verdict pass|fail|skip, measured, limit, op, unit,
    reason), ``results`` (one :class:`PipelineResult` per board, or the host's), ``reference``."""

    name: str
    verdict: str
    checks: List[Dict[str, Any]]
    results: List[Any]
    reference: Any = None
    budgets: Dict[str, float] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "GO" else 1

    @property
    def summary(self) -> str:
        failed = [c["name"] for c in self.checks if c["verdict"] == "fail"]
        skipped = [c["name"] for c in self.checks if c["verdict"] == "skip"]
        if failed:
            return "failing: %s" % ", ".join(failed)
        if not self.checks:
            return "no budget was checked (the spec has no [budgets])"
        return "%d checks passed" % sum(c["verdict"] == "pass" for c in self.checks) + (
            " (%d budgets not verified: %s)" % (len(skipped), ", ".join(skipped)) if skipped else "")

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": "pipeline-validation", "schema_version": 1, "name": self.name, "verdict": self.verdict,
                "summary": self.summary, "budgets": self.budgets, "checks": self.checks,
                "results": [r.to_dict() for r in self.results]}


_CHECKS = (  # budget key, check name, op, unit, measured(result) -> value or (None, reason)
    ("max_p50_ms", "end-to-end p50", "<=", "ms", lambda r: r.end_to_end["latency_ms"]["p50"]),
    ("max_p99_ms", "end-to-end p99", "<=", "ms", lambda r: r.end_to_end["latency_ms"]["p99"]),
    ("min_fps", "frames per second (serial)", ">=", "fps", lambda r: r.throughput["serial_fps"]),
    ("min_overlapped_fps", "frames per second (stages overlapped)", ">=", "fps",
     lambda r: r.throughput.get("overlapped_fps")),
    ("max_energy_mj_per_frame", "energy per frame", "<=", "mJ",
     lambda r: r.energy.get("mj_per_frame") if r.energy.get("measured") else None),
    ("min_metric", "end-to-end metric", ">=", "", lambda r: (r.accuracy or {}).get("metric")),
)


def _checks(result: Any, budgets: Mapping[str, float], strict: bool) -> List[Dict[str, Any]]:
    where = (result.board or {}).get("name") or "host"
    out = []
    for key, name, op, unit, get in _CHECKS:
        if key not in budgets:
            continue
        limit = float(budgets[key])
        value = get(result)
        check: Dict[str, Any] = {"name": "%s: %s" % (where, name), "budget": key, "limit": limit, "op": op,
                                 "unit": unit, "measured": value}
        if value is None:
            reason = (result.energy.get("reason") if key == "max_energy_mj_per_frame"
                      else "not measured (single-stage pipeline)" if key == "min_overlapped_fps" else "not measured")
            check.update(verdict="fail" if strict else "skip", reason=reason)
        else:
            ok = value <= limit if op == "<=" else value >= limit
            check["verdict"] = "pass" if ok else "fail"
            if key == "min_metric":
                check["reason"] = (result.accuracy or {}).get("metric_name")
        out.append(check)
    return out


def validate_pipeline(spec: SpecLike, data: Any, boards: Sequence[Any] = (), *, config: Any = None,
                      budgets: Optional[Mapping[str, float]] = None, strict: bool = False,
                      progress: Progress = None) -> PipelineValidation:
    """Run the pipeline on each board (none: on the host), compute its end-to-end metric against
    the FP32 host reference, and check the spec's ``[budgets]`` (``budgets`` override them):
    end-to-end p50/p99, frames per second, energy per frame, the end-to-end metric."""
    from ..kernels.pipelines import Pipeline, RunConfig

    sp = _spec(spec)
    say = progress or (lambda _m: None)
    cfg = config or RunConfig()
    all_budgets = dict(sp.budgets)
    all_budgets.update(dict(budgets or {}))
    say("reference: %s in FP32 on the host" % sp.name)
    reference = reference_result(sp, data)
    results = []
    for b in (list(boards) or [None]):
        say("running %s on %s" % (sp.name, b or "the host"))
        r = Pipeline(sp).run(data, cfg, board=b)
        r.accuracy = pipeline_accuracy(sp.task, r, reference)
        results.append(r)
    checks = [c for r in results for c in _checks(r, all_budgets, strict)]
    verdict = "NO-GO" if any(c["verdict"] == "fail" for c in checks) else "GO"
    return PipelineValidation(sp.name, verdict, checks, results, reference, all_budgets)


# -- quantization -----------------------------------------------------------------------------------------
@dataclass
class PipelineQuantization:
    """Per stage ``{name, quantized (kept), metric (end to end with it), calib_feeds, model, reason}``;
    ``spec``: the resulting pipeline (INT8 stages kept, each with its FP32 ``reference_model``);
    ``spec_path`` where it was written; ``metric_fp32``/``metric`` the end-to-end metrics (FP32
    pipeline vs the reference is 1.0 by definition)."""

    stages: List[Dict[str, Any]]
    spec: Any
    spec_path: Optional[str]
    min_metric: float
    metric: float

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": "pipeline-quantization", "schema_version": 1, "stages": self.stages,
                "spec_path": self.spec_path, "min_metric": self.min_metric, "metric": self.metric,
                "spec": self.spec.to_dict()}


def _stage_feeds(spec: Any, images: List[Any], k: int, limit: int) -> List[Dict[str, Any]]:
    """What stage ``k`` really gets from the stages before it, one feed per item (rows of its batches)."""
    from ..kernels.pipelines import Frame, OpenPipeline

    feeds: List[Dict[str, Any]] = []
    with OpenPipeline(spec) as pipe:
        name = pipe.stages[k].input

        def hook(i: int, feed: Any) -> None:
            if i != k:
                return
            for b in (feed if isinstance(feed, list) else [feed]):
                for row in range(b.shape[0]):
                    if len(feeds) < limit:
                        feeds.append({name: b[row:row + 1]})

        pipe.feed_hook = hook
        for img_name, img in images:
            frame = Frame(img_name, img)
            for j in range(k + 1):
                pipe.stage(j, frame)
            if len(feeds) >= limit:
                break
    return _same_shape(feeds)


def _same_shape(feeds: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Rows of different widths (a recognizer's crops) padded with 0 to the widest, as the
    ``batch`` step pads a batch, so the quantizer can batch them."""
    import numpy as np

    if not feeds:
        return feeds
    name = next(iter(feeds[0]))
    shapes = {f[name].shape for f in feeds}
    if len(shapes) == 1 or len({len(sh) for sh in shapes}) != 1:
        return feeds
    top = tuple(max(sh[i] for sh in shapes) for i in range(len(next(iter(shapes)))))
    out = []
    for f in feeds:
        a = f[name]
        out.append({name: np.pad(a, [(0, t - d) for t, d in zip(top, a.shape)]) if a.shape != top else a})
    return out


def quantize_pipeline(spec: SpecLike, calib: Any, output_dir: Union[str, "os.PathLike[str]"], *,
                      eval_data: Any = None, min_metric: Optional[float] = None, stages: Optional[Sequence[str]] = None,
                      calib_limit: int = 64, scheme: Optional[str] = None, progress: Progress = None,
                      stage_budget: bool = True,
                      quantize_options: Optional[Mapping[str, Any]] = None) -> PipelineQuantization:
    """INT8 per stage, in order, each calibrated on what the pipeline (with the stages kept so far)
    really feeds it from ``calib`` (crops from the detector's boxes, not synthetic ones), through
    :func:`sdk.quantize.quantize`; a stage's INT8 model is kept only while the end-to-end metric on
    ``eval_data`` (default: ``calib``) against the FP32 host pipeline stays >= ``min_metric``
    (default: the spec's ``[budgets] min_metric``, else 0.98). With ``stage_budget`` the stage's
    own default budget of :func:`sdk.quantize.quantize` (cosine, per-position top-1 of a recognizer)
    holds on those same real inputs first, so its fallback search keeps the layers that break it in
    float before the end-to-end check. Writes ``<stage>.int8.onnx`` files
    and ``<name>.int8.toml`` (the pipeline with the kept stages) into ``output_dir``."""
    from ..kernels.pipelines import Pipeline, RunConfig, load_images
    from ..quantize import QuantizeConfig, quantize

    sp = _spec(spec)
    say = progress or (lambda _m: None)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    floor = float(min_metric if min_metric is not None else sp.budgets.get("min_metric", 0.98))
    want = list(stages or [s.name for s in sp.stages])
    unknown = sorted(set(want) - {s.name for s in sp.stages})
    if unknown:
        raise InputError("no stage named %s in pipeline '%s'" % (", ".join(unknown), sp.name),
                         "stages: %s" % ", ".join(s.name for s in sp.stages))
    calib_images = load_images(calib)
    eval_src = eval_data if eval_data is not None else calib
    say("reference: %s in FP32 on the host" % sp.name)
    reference = reference_result(sp, eval_src)
    current = sp.reference()
    rows: List[Dict[str, Any]] = []
    metric = 1.0
    for k, st in enumerate(current.stages):
        row: Dict[str, Any] = {"name": st.name, "quantized": False, "model": st.model}
        if st.name not in want:
            row["reason"] = "not asked for"
            rows.append(row)
            continue
        feeds = _stage_feeds(current, calib_images, k, calib_limit)
        row["calib_feeds"] = len(feeds)
        if not feeds:
            row["reason"] = "the stages before it gave it no input on the calibration data"
            rows.append(row)
            continue
        say("stage %s: calibrating on %d inputs the pipeline feeds it" % (st.name, len(feeds)))
        dst = out / ("%s.int8.onnx" % st.name)
        opts = dict(quantize_options or {})
        cfg = QuantizeConfig(scheme=scheme or (st.target if st.target in ("onnxruntime", "tensorrt", "tflite")
                                               else "onnxruntime"), budget=stage_budget,
                             eval_data=feeds if stage_budget else None, speed_check=False, allow_slower=True)
        try:
            q = quantize(st.model, feeds, cfg, output=dst, **opts)
        except EdgeSDKError as exc:
            row["reason"] = "quantization failed: %s" % exc
            rows.append(row)
            continue
        row["quantize_failures"] = list(q.failures)
        trial = current.with_models([str(dst) if i == k else s.model for i, s in enumerate(current.stages)])
        trial.stages[k].precision, trial.stages[k].reference_model = "int8", st.model
        r = Pipeline(trial).run(eval_src, RunConfig(frames=1, warmup=0, overlapped=False))
        acc = pipeline_accuracy(sp.task, r, reference)
        row.update(metric=acc["metric"], accuracy=acc)
        if acc["metric"] >= floor:
            row.update(quantized=True, model=str(dst), reason="end-to-end metric %.4f >= %.4f" % (acc["metric"], floor))
            current, metric = trial, acc["metric"]
        else:
            row["reason"] = "end-to-end metric %.4f < %.4f: kept in FP32" % (acc["metric"], floor)
        say("stage %s: %s" % (st.name, row["reason"]))
        rows.append(row)
    # every stage keeps its FP32 original as the reference
    for st, orig in zip(current.stages, sp.stages):
        st.reference_model = orig.reference_model or orig.model if st.model != orig.model else None
    current.budgets = dict(sp.budgets)
    spec_path = out / ("%s.int8.toml" % sp.name)
    write_spec_toml(current, spec_path)
    return PipelineQuantization(rows, current, str(spec_path), floor, metric)


def _toml_value(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join("%s = %s" % (json.dumps(str(k)), _toml_value(x)) for k, x in v.items()) + "}"
    if v is None:
        raise InputError("a pipeline spec value is None: cannot write it as TOML")
    return json.dumps(str(v))


def write_spec_toml(spec: Any, path: Union[str, "os.PathLike[str]"]) -> Path:
    """Write a (resolved) :class:`PipelineSpec` as TOML, atomically; glue options that were
    resolved from files or metadata are written as their values."""
    from ..atomic import atomic_write

    d = spec.to_dict()
    lines = ["name = %s" % _toml_value(d["name"]), "task = %s" % _toml_value(d["task"]), ""]
    for st in d["stages"]:
        lines.append("[[stages]]")
        for key, value in st.items():
            if value is None or value == [] or value == {}:
                continue
            lines.append("%s = %s" % (key, _toml_value(value)))
        lines.append("")
    if d["budgets"]:
        lines.append("[budgets]")
        lines += ["%s = %s" % (k, _toml_value(v)) for k, v in d["budgets"].items()]
    return Path(atomic_write(Path(path), ("\n".join(lines) + "\n").encode("utf-8")))
