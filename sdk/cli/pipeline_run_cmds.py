"""``sdk pipeline run SPEC --data pages/ [--board B]`` and ``sdk pipeline quantize SPEC --calib pages/``
(thin over :class:`sdk.kernels.pipelines.Pipeline` and :func:`sdk.validation.pipeline.quantize_pipeline`)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Pipelines measured as one unit: stages and the glue between them.",
                        no_args_is_help=True)
    group.command("run")(run_cmd)
    group.command("quantize")(quantize_cmd)
    group.command("glue")(glue_cmd)
    app.add_typer(group, name="pipeline")


def _progress(msg: str) -> None:
    sys.stderr.write(f"{msg}\n")
    sys.stderr.flush()


def run_cmd(
    spec: str = typer.Argument(..., help="Pipeline spec (TOML)."),
    data: str = typer.Option(..., "--data", help="A folder of images (pages, photos) or one image."),
    board: Optional[List[str]] = typer.Option(None, "--board", "-b", help="Run the whole pipeline on this board "
                                                                        "(repeatable); default: here."),
    frames: int = typer.Option(20, "--frames", min=1, help="At least this many timed frames (inputs cycled)."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Untimed frames first."),
    no_overlap: bool = typer.Option(False, "--no-overlap", help="Skip the run with the stages overlapped."),
    queue_depth: int = typer.Option(2, "--queue-depth", min=1, help="Frames between overlapped stages."),
    outputs: Optional[str] = typer.Option(None, "--outputs", help="Write each input's outputs (texts, labels, "
                                                                  "boxes) as JSON into this folder."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the result JSON here ('-' for stdout)."),
    report: Optional[str] = typer.Option(None, "--report", help="Write the HTML report here."),
) -> None:
    """Run a pipeline over the inputs: per-stage and end-to-end latency, throughput serial and
    overlapped, the bounding stage, energy per frame (boards with sensors), outputs per input."""
    from ..kernels.pipelines import Pipeline, RunConfig
    from ._common import check_output

    for path, opt in ((report, "--report"), (json_path, "--json")):
        check_output(path, opt, stdout_ok=opt == "--json")
    pipe = Pipeline.load(spec)
    cfg = RunConfig(frames=frames, warmup=warmup, overlapped=not no_overlap, queue_depth=queue_depth)
    targets: List[Optional[str]] = list(board) if board else [None]
    results = [pipe.run(data, cfg, board=b) for b in targets]
    _emit(results, outputs, json_path, report)


def _emit(results: List[Any], outputs: Optional[str], json_path: Optional[str], report: Optional[str]) -> None:
    import json

    from ..atomic import atomic_write
    from ._common import console, write_json, write_text_atomic

    docs = [r.to_dict() for r in results]
    if json_path:
        write_json(json_path, docs[0] if len(docs) == 1 else docs)
    if json_path == "-":
        return
    c = console()
    for r in results:
        _print(r)
    if outputs:
        folder = Path(outputs)
        for r in results:
            where = (r.board or {}).get("name") or "host"
            sub = folder / where if len(results) > 1 else folder
            sub.mkdir(parents=True, exist_ok=True)
            for o in r.outputs:
                atomic_write(sub / f"{o['input']}.json", json.dumps(o, indent=1, ensure_ascii=False))
        c.print(f"wrote the outputs of {len(results[0].outputs)} inputs into {outputs}")
    if json_path:
        c.print(f"wrote {json_path}")
    if report:
        from ..reports.pipeline_html import pipeline_report_html

        doc = {"name": results[0].name, "results": docs}
        write_text_atomic(report, pipeline_report_html(doc), "--report")
        c.print(f"wrote {report}")


def _print(r: Any) -> None:
    from rich.table import Table

    from ._common import console, fmt_ms

    where = (r.board or {}).get("name") or "host"
    t = Table(title=f"pipeline {r.name} on {where}: {r.frames} frames")
    for col in ("stage", "model", "target", "p50 ms", "p99 ms", "inference p50", "glue p50", "items/frame", "share"):
        t.add_column(col, justify="left" if col in ("stage", "model", "target") else "right")
    for s in r.stages:
        t.add_row(s["name"], s["model"]["name"], f"{s['target']} {s['precision']}", fmt_ms(s["latency_ms"]["p50"]),
                  fmt_ms(s["latency_ms"]["p99"]), fmt_ms(s["inference_ms"]["p50"]), fmt_ms(s["glue_ms"]["p50"]),
                  f"{s['items_per_frame']['mean']:.1f}", f"{s['share']:.0%}")
    e = r.end_to_end["latency_ms"]
    t.add_row("end to end", "", "", fmt_ms(e["p50"]), fmt_ms(e["p99"]), "", "", "", "100%")
    c = console()
    c.print(t)
    ci = (e.get("ci95") or {}).get("p50")
    tp = r.throughput
    over = f"{tp['overlapped_fps']:.2f} fps overlapped ({tp['speedup']:.2f}x)" if tp.get("overlapped_fps") else \
        "not overlapped"
    c.print(f"end to end p50 {fmt_ms(e['p50'])} ms" + (f" (95% CI {ci[0]:.2f}-{ci[1]:.2f})" if ci else "") +
            f"; {tp['serial_fps']:.2f} fps serial, {over}; bounding stage: {r.bounding_stage}", markup=False,
            soft_wrap=True)
    en = r.energy
    c.print(f"energy: {en['mj_per_frame']:.1f} mJ/frame ({en.get('source')})" if en.get("measured")
            else f"energy: not measured ({en.get('reason')})", markup=False, soft_wrap=True)
    if r.accuracy:
        c.print(f"{r.accuracy['metric_name']}: {r.accuracy['metric']:.4f}", markup=False)


def quantize_cmd(
    spec: str = typer.Argument(..., help="Pipeline spec (TOML), FP32 stages."),
    calib: str = typer.Option(..., "--calib", help="A folder of images: each stage is calibrated on what the "
                                                  "stages before it feed it from these."),
    output: str = typer.Option(..., "--output", "-o", help="Folder for <stage>.int8.onnx and <name>.int8.toml."),
    eval_data: Optional[str] = typer.Option(None, "--eval", help="Images for the end-to-end metric (default: --calib)."),
    min_metric: Optional[float] = typer.Option(None, "--min-metric", help="End-to-end budget (default: [budgets] "
                                                                          "min_metric, else 0.98)."),
    stage: Optional[List[str]] = typer.Option(None, "--stage", help="Quantize only these stages (repeatable)."),
    calib_limit: int = typer.Option(64, "--calib-limit", min=1, help="At most this many inputs per stage."),
    no_stage_budget: bool = typer.Option(False, "--no-stage-budget", help="Skip each stage's own budget (and its "
                                                                         "fallback search) on its real inputs."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the report JSON here ('-' for stdout)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """INT8 per stage, kept only while the end-to-end metric against the FP32 pipeline holds;
    writes the INT8 pipeline spec. Exit 1 when no stage could be kept."""
    from ..validation.pipeline import quantize_pipeline
    from ._common import check_output, console, write_json

    check_output(json_path, "--json")
    res = quantize_pipeline(spec, calib, output, eval_data=eval_data, min_metric=min_metric, stages=stage,
                            calib_limit=calib_limit, progress=None if quiet else _progress,
                            stage_budget=not no_stage_budget)
    if json_path:
        write_json(json_path, res.to_dict())
    if json_path != "-":
        c = console()
        for row in res.stages:
            state = "INT8" if row["quantized"] else "FP32"
            c.print(f"{row['name']}: {state} ({row.get('reason', '')})", markup=False, soft_wrap=True)
        c.print(f"wrote {res.spec_path} (end-to-end metric {res.metric:.4f}, budget {res.min_metric:.4f})",
                markup=False)
    if not any(r["quantized"] for r in res.stages):
        raise typer.Exit(1)


def glue_cmd() -> None:
    """List the registered glue steps."""
    from ..kernels.pipelines import GLUE
    from ._common import console

    c = console()
    for name in GLUE.names():
        doc = (GLUE[name].__doc__ or "").strip().splitlines()
        c.print(f"{name:16} {doc[0] if doc else ''}", markup=False, soft_wrap=True)


def validate_pipeline_cmd(spec: str, model: Optional[str], board: Optional[List[str]], data: Optional[str],
                          budgets_spec: Optional[str], report: Optional[str], json_path: Optional[str], strict: bool,
                          quiet: bool, frames: int) -> None:
    """``sdk validate --pipeline SPEC --data pages/ [--board B ...] [--spec budgets.toml]``."""
    from ..config import load_toml
    from ..errors import InputError
    from ..kernels.pipelines import RunConfig
    from ..validation.pipeline import validate_pipeline
    from ._common import check_output, console, write_json, write_text_atomic

    if model:
        raise InputError("give either MODEL or --pipeline SPEC, not both")
    if not data:
        raise InputError("--pipeline needs --data: a folder of images (pages, photos)")
    for path, opt in ((report, "--report"), (json_path, "--json")):
        check_output(path, opt, stdout_ok=opt == "--json")
    budgets = None
    if budgets_spec:
        doc = load_toml(budgets_spec, "--spec '%s'" % budgets_spec)
        budgets = dict(doc.get("budgets") or {})
    res = validate_pipeline(spec, data, list(board or []), config=RunConfig(frames=frames), budgets=budgets,
                            strict=strict, progress=None if quiet else _progress)
    doc = res.to_dict()
    if json_path:
        write_json(json_path, doc)
    if report:
        from ..reports.pipeline_html import pipeline_report_html

        write_text_atomic(report, pipeline_report_html(doc), "--report")
    if json_path != "-":
        c = console()
        for r in res.results:
            _print(r)
        for ch in res.checks:
            measured = "-" if ch["measured"] is None else f"{ch['measured']:.4g}"
            c.print(f"{ch['verdict'].upper():5} {ch['name']}: {measured} {ch['unit']} (limit {ch['op']} {ch['limit']:g})"
                    + (f" - {ch['reason']}" if ch.get("reason") else ""), markup=False, soft_wrap=True)
        c.print(f"{res.verdict} ({res.summary})", markup=False)
        for path, what in ((report, "HTML report"), (json_path, "JSON")):
            if path:
                c.print(f"wrote {what}: {path}")
    raise typer.Exit(res.exit_code)
