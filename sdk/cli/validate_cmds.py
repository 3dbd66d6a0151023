"""``sdk validate`` (GO / NO-GO on one or more boards, with reports) and ``sdk robustness``."""
from __future__ import annotations

import sys
from typing import Any, List, Optional

import typer

from ._common import carry_option, input_value_option, sample_axis_option

from .remote_cmds import FORKS_HELP, INVENTORY_HELP, LIMIT_HELP


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
    app.command("robustness")(robustness_cmd)


def _progress(msg: str) -> None:
    from ..textsafe import plain

    sys.stderr.write(f"{plain(msg)}\n")
    sys.stderr.flush()


def _sample_axes(model: str, items: Optional[List[str]]) -> Any:
    if not items:
        return None
    from ..model import Model
    from ..sources import parse_sample_axes

    return parse_sample_axes(items, Model.load(model).inputs)


def validate_cmd(
    model: Optional[str] = typer.Argument(None, help="Model file (.onnx or .tflite); not with --pipeline."),
    board: Optional[List[str]] = typer.Option(None, "--board", "-b",
                                              help="Board name (repeatable for a fleet); 'local' is this machine, "
                                                   "'host:<target>' a target on this machine."),
    data: Optional[str] = typer.Option(
        None, "--data", help="Inputs: a folder of images (see --preprocess), or a .npy/.npz file or folder "
                             "(default: 4 seeded random samples; outputs are compared, accuracy is not)."),
    input_shape: Optional[List[str]] = typer.Option(
        None, "--input-shape", help="Without --data: NAME=1x3x320x320 for a dynamic input (repeatable)."),
    input_value: Optional[List[str]] = input_value_option(),
    carry: Optional[List[str]] = carry_option(),
    sample_axis: Optional[List[str]] = sample_axis_option(),
    labels: Optional[str] = typer.Option(None, "--labels",
                                         help="Class ids: .npy/.npz, or a text/CSV file (filename,label)."),
    spec: Optional[str] = typer.Option(None, "--spec", help="Validation spec (TOML): budgets and conditions."),
    reference: Optional[str] = typer.Option(
        None, "--reference", help="Host target of the FP32 reference (default: the one that runs the "
                                  "reference model's format)."),
    reference_model: Optional[str] = typer.Option(
        None, "--reference-model", help="Model the reference runs (default: MODEL); the FP32 original of a "
                                        "quantized or converted MODEL."),
    preprocess: Optional[List[str]] = typer.Option(
        None, "--preprocess", help="Image preprocessing: a .toml file or KEY=VALUE (size=224x224 ...)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use at most this many samples."),
    report: Optional[str] = typer.Option(None, "--report", help="Write the HTML report here."),
    junit: Optional[str] = typer.Option(None, "--junit", help="Write JUnit XML here (one test case per check)."),
    json_path: Optional[str] = typer.Option(
        None, "--json", help="Write the result JSON here ('-' for stdout); with --inventory one document per board "
                             "per line, as boards finish."),
    strict: bool = typer.Option(False, "--strict", help="A budget that could not be verified (no sensor, "
                                                         "no labels) fails instead of being listed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    baseline: Optional[str] = typer.Option(
        None, "--baseline", help="Earlier results (sdk bench/push/validate --json): fail a board whose p50 regressed "
                                 "beyond [budgets] max_regression_pct (default 5%) with intervals apart."),
    normalize: bool = typer.Option(False, "--normalize", help="With --baseline: when the runs' speed probes differ, "
                                                              "judge on probe-normalised latency instead of skipping."),
    inventory: Optional[List[str]] = typer.Option(None, "--inventory", "-i", help=INVENTORY_HELP),
    hosts: Optional[str] = typer.Option(None, "--hosts", help=LIMIT_HELP + " (--limit counts samples here)"),
    forks: int = typer.Option(8, "--forks", "-f", min=1, help=FORKS_HELP),
    ep: Optional[List[str]] = typer.Option(
        None, "--ep", help="Add mobile EP readiness to the report: nnapi, coreml, coreml-mlprogram, xnnpack "
                           "(which nodes the EP takes at the validated shapes; repeatable)."),
    pipeline: Optional[str] = typer.Option(
        None, "--pipeline", help="Validate a pipeline spec (TOML) instead of a model: its [budgets] on end-to-end "
                                 "latency, fps, energy per frame and the end-to-end metric vs FP32 on the host."),
    frames: int = typer.Option(20, "--frames", min=1, help="With --pipeline: timed frames per board."),
) -> None:
    """Validate a model (or with --pipeline a whole pipeline) on boards against a spec: exit 0 when
    every check passes (GO), 1 when any fails (NO-GO), 2 when the run could not be done."""
    if pipeline:
        from .pipeline_run_cmds import validate_pipeline_cmd

        validate_pipeline_cmd(pipeline, model, board, data, spec, report, json_path, strict, quiet, frames)
        return
    if not model:
        from ..errors import InputError

        raise InputError("sdk validate needs MODEL (or --pipeline SPEC)")
    from ..sources import parse_preprocess
    from ..targets.measure import parse_carry
    from ..tensors import parse_input_shapes
    from ..validation import validate
    from ._common import check_output, console

    if normalize and not baseline:
        from ..errors import InputError

        raise InputError("--normalize needs --baseline FILE", "give the earlier results to compare with")
    for path, opt in ((report, "--report"), (junit, "--junit"), (json_path, "--json")):
        check_output(path, opt, stdout_ok=opt == "--json")      # before any work: no late failure
    if ep:
        from ..targets.onnxrt.readiness import check_ep_name

        for e in ep:
            check_ep_name(e)
    boards: List[Any] = list(board or [])
    stream = None
    if inventory or hosts:   # board profiles of an Ansible inventory: a row (and a JSON line) per board as it ends
        from ..remote.board import Board
        from .remote_cmds import FleetStream, fleet_profiles

        boards = [Board(p) for p in fleet_profiles(board, inventory, hosts)]
        stream = FleetStream(json_path, VALIDATE_COLUMNS, _validate_row, lambda run: run.to_dict())
    result = validate(model, boards, data, labels=labels, spec=spec, reference=reference,
                      reference_model=reference_model,
                      preprocess=parse_preprocess(preprocess), limit=limit,
                      progress=None if quiet else _progress, baseline=baseline, max_workers=forks, strict=strict,
                      normalize=normalize,
                      input_shapes=parse_input_shapes(input_shape or []) or None,
                      input_values=list(input_value or []), carry=parse_carry(carry),
                      sample_axes=_sample_axes(model, sample_axis),
                      on_board=stream.add if stream is not None else None, ep_readiness=tuple(ep or ()))
    if json_path != "-" and not quiet:
        for name, r in (result.model.get("ep_readiness") or {}).items():
            console().print(r.get("summary") or f"{name}: {r.get('error')}", markup=False, highlight=False)
    if report:
        result.write_html(report)
    if junit:
        result.write_junit(junit)
    if stream is not None and stream.lines is not None:
        stream.lines.close()
    elif json_path and stream is None:
        result.write_json(json_path)
    if json_path != "-":
        _print_summary(result)
        c = console()
        for run in result.boards:  # an accuracy check failed: the command that finds the layer
            if any(ch.verdict == "fail" and ch.name.startswith("accuracy.") for ch in run.checks):
                ref = reference_model or model
                c.print(f"explain: sdk debug diff {ref} --against {model} --board {run.board}"
                        + (f" --data {data}" if data else ""), markup=False, highlight=False)
        for path, what in ((report, "HTML report"), (junit, "JUnit XML"), (json_path, "JSON")):
            if path:
                c.print(f"wrote {what}: {path}")
    raise typer.Exit(result.exit_code)


VALIDATE_COLUMNS = [("board", 16), ("verdict", 7), ("p50 ms", 9), ("p99 ms", 9), ("pass/fail/skip", 14),
                    ("s", 6), ("detail", 0)]


def _validate_row(run: Any) -> List[str]:
    from ._common import fmt_ms

    stats = run.bench.stats if run.bench is not None and not run.emulation else None
    counts = [sum(1 for c in run.checks if c.verdict == v) for v in ("pass", "fail", "skip")]
    detail = f"failed during {run.failed_stage}: {run.error}" if run.error else ""
    if run.emulation:
        detail = ("emulated: timings are not the board's speed; " + detail).rstrip("; ")
    return [run.board, run.verdict.upper(), fmt_ms(stats.p50_ms if stats else None),
            fmt_ms(stats.p99_ms if stats else None),
            "/".join(map(str, counts)), f"{run.seconds:.1f}", detail]


def _num(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _print_summary(result: Any) -> None:
    from ._common import console

    c = console()
    _print_summary_table(c, result)
    for b in result.boards:
        _print_board_failures(c, b)
    _print_verdict(c, result)


def _print_summary_table(c: Any, result: Any) -> None:
    """One row per board: verdict, latency, throughput, power, top-1, cosine, check counts."""
    from rich.table import Table

    from ._common import fmt_ms, styled

    t = Table(title=f"validate {result.model.get('name')}")
    for col in ("board", "verdict", "p50 ms", "p99 ms", "inf/s", "W", "top-1", "cosine", "pass/fail/skip"):
        t.add_column(col, justify="left" if col in ("board", "verdict") else "right", no_wrap=True)
    for r in result.summary_rows():
        verdict = styled("[green]PASS[/green]" if r["verdict"] == "pass" else "[red]FAIL[/red]")
        board = f"{r['board']} (emulated)" if r.get("emulated") else r["board"]
        t.add_row(board, verdict, fmt_ms(r["p50_ms"]), fmt_ms(r["p99_ms"]), _num(r["throughput_ips"], "{:.1f}"),
                  _num(r["mean_w"], "{:.2f}"), _num(r["top1"], "{:.4f}"), _num(r["cosine"], "{:.5f}"),
                  f"{r['passed']}/{r['failed']}/{r['skipped']}")
    if c.is_terminal:
        c.print(t)
    else:  # piped or in CI: do not squeeze the table into 80 columns
        from ._common import _safe_console

        _safe_console(width=max(c.width, 132), file=c.file).print(t)


def _print_board_failures(c: Any, b: Any) -> None:
    """A board's noise notes, the stage it failed in (and the checks lost with it), its failed checks."""
    from ..textsafe import inert
    from ._common import noise_lines

    for line in noise_lines(b.board, b.bench) if b.bench is not None else ():
        c.print(line, markup=False, highlight=False, soft_wrap=True)
    if b.error:
        c.print(f"[red]FAIL[/red] {inert(b.board)}: the board failed during {b.failed_stage}: {inert(b.error)}",
                markup=True, highlight=False, soft_wrap=True)
        lost = [chk.name for chk in b.checks if chk.verdict == "fail" and chk.reason.startswith("board failed")]
        lost = [n for n in lost if n != "board.run"]
        if lost:
            c.print(f"[red]FAIL[/red] {inert(b.board)}: so these checks fail too: {inert(', '.join(lost))}",
                    markup=True, highlight=False, soft_wrap=True)
    for chk in b.checks:
        if chk.verdict == "fail" and not (b.error and chk.reason.startswith("board failed")):
            c.print(_failed_check_line(b.board, chk), markup=True, highlight=False, soft_wrap=True)


def _failed_check_line(board: str, chk: Any) -> str:
    """``FAIL board: name measured X unit (limit <= Y unit): reason`` (markup; names made inert)."""
    from ..textsafe import inert

    unit = f" {chk.unit}" if chk.unit else ""
    measured = "" if chk.measured is None else \
        f" measured {_num(chk.measured, '{:.4g}') if isinstance(chk.measured, float) else chk.measured}{unit}"
    limit = "" if chk.limit is None else f" (limit {chk.op} {chk.limit}{(' ' + chk.unit) if chk.unit else ''})".replace("  ", " ")
    return (f"[red]FAIL[/red] {inert(board)}: {inert(chk.name)}{inert(measured)}{inert(limit)}"
            + (f": {inert(chk.reason)}" if chk.reason else ""))


def _print_verdict(c: Any, result: Any) -> None:
    """The GO / NO-GO line; a GO with unverified budgets lists each of them."""
    from ..textsafe import inert

    line = inert(result.summary_line())
    if result.verdict == "pass" and result.not_verified():
        c.print(f"[yellow]{line}[/yellow]", markup=True, soft_wrap=True)
        for b in result.boards:
            for chk in b.checks:
                if chk.verdict == "skip":
                    c.print(f"[yellow]NOT VERIFIED[/yellow] {inert(b.board)}: {inert(chk.name)}: {inert(chk.reason)}",
                            markup=True, highlight=False, soft_wrap=True)
    else:
        color = "green" if result.verdict == "pass" else "red"
        head, sep, rest = line.partition(":")
        c.print(f"[{color}]{head}[/{color}]{sep}{rest}", markup=True, soft_wrap=True)


def robustness_cmd(
    model: Optional[str] = typer.Argument(None, help="Model file (.onnx or .tflite); not with --pipeline."),
    data: str = typer.Option(..., "--data", help="Inputs: a folder of images, or a .npy/.npz file or folder."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Host target (default: the one that runs the model's format)."),
    board: Optional[str] = typer.Option(None, "--board", "-b", help="Run on this board instead of the host."),
    corruptions: Optional[str] = typer.Option(
        None, "--corruptions", help="Comma-separated: blur,noise,brightness,contrast,jpeg,rotate,occlusion (default all)."),
    severities: Optional[str] = typer.Option(None, "--severities", help="Severities 1-5, e.g. 1-5 or 1,3,5 (default 1-5)."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Class ids for the task metric (top-1)."),
    spec: Optional[str] = typer.Option(None, "--spec", help="Spec whose [robustness] section sets the limits."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the corruptions (default 0)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use at most this many samples."),
    preprocess: Optional[List[str]] = typer.Option(
        None, "--preprocess", help="Image preprocessing: a .toml file or KEY=VALUE (size=224x224 ...)."),
    input_value: Optional[List[str]] = input_value_option(),
    report: Optional[str] = typer.Option(None, "--report", help="Write the HTML report here."),
    json_path: Optional[str] = typer.Option(
        None, "--json", help="Write the result JSON here ('-' for stdout); with --inventory one document per board "
                             "per line, as boards finish."),
) -> None:
    """Corrupt the inputs (seeded) at each severity and measure output drift and top-1 against
    the clean inputs; exit 1 when a spec limit is exceeded."""
    from ..reports import write_json
    from ..reports.html import robustness_html
    from ..sources import parse_preprocess
    from ..validation import run_robustness
    from ..validation.run import _write_text
    from ._common import check_output, console

    for path, opt in ((report, "--report"), (json_path, "--json")):
        check_output(path, opt, stdout_ok=opt == "--json")      # before any work: no late failure
    out = run_robustness(model, data, target=target, board=board, labels=labels, corruptions=corruptions,
                         severities=severities, seed=seed, limit=limit, spec=spec,
                         preprocess=parse_preprocess(preprocess), input_values=list(input_value or []))
    if report:
        _write_text(report, robustness_html(out))
    if json_path:
        write_json(json_path, out)
    if json_path != "-":
        _print_robustness(out)
        for path, what in ((report, "HTML report"), (json_path, "JSON")):
            if path:
                console().print(f"wrote {what}: {path}")
    raise typer.Exit(0 if out["verdict"] == "pass" else 1)


def _print_robustness(out: Any) -> None:
    from rich.table import Table

    from ..textsafe import inert
    from ._common import console

    rob = out["robustness"]
    rows = rob["rows"]
    has_top1 = any(r.get("top1") is not None for r in rows)
    clean = rob["clean"]
    t = Table(title=f"robustness of {out['model']['name']} on {out['runner']}"
                    + (f" (clean top-1 {clean['top1']:.4f})" if clean.get("top1") is not None else ""))
    for col in ["corruption", "severity", "cosine", "SNR dB", "agreement"] + (["top-1", "drop"] if has_top1 else []):
        t.add_column(col, justify="left" if col == "corruption" else "right")
    for r in rows:
        cells = [r["corruption"], str(r["severity"]), f"{r['cosine']:.4f}", f"{r['snr_db']:.1f}",
                 _num(r.get("agreement"), "{:.4f}")]
        if has_top1:
            cells += [_num(r.get("top1"), "{:.4f}"), _num(r.get("top1_drop"), "{:+.4f}")]
        t.add_row(*cells)
    c = console()
    c.print(t)
    for chk in out["checks"]:
        color = "green" if chk["verdict"] == "pass" else ("red" if chk["verdict"] == "fail" else "yellow")
        c.print(f"[{color}]{chk['verdict'].upper()}[/{color}] {inert(chk['name'])}: {inert(chk.get('reason') or '')}",
                markup=True)
