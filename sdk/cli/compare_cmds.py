"""``sdk compare A.json B.json``: is B significantly slower than A?"""
from __future__ import annotations

from typing import Any, List, Optional

import typer

from ._common import input_value_option
from ..stats import PAIRED_ROUNDS


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)


def compare_cmd(
    a: str = typer.Argument(..., help="Reference: a result JSON (sdk bench / push / validate --json), or a model."),
    b: str = typer.Argument(..., help="The one to judge: a result JSON, or a model (then both run interleaved here)."),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", min=0.0, help="A slowdown beyond this % (with intervals apart) is a regression "
                                           "(default 5 for results, 2 for interleaved models)."),
    on: Optional[List[str]] = typer.Option(None, "--on", help="Statistic that decides: p50 (default), p90, p99; repeatable."),
    board: Optional[str] = typer.Option(None, "--board", "-b", help="Pick this board's result in files that hold several."),
    normalize: bool = typer.Option(False, "--normalize", help="When the runs' speed probes differ, judge on "
                                                              "probe-normalised latency instead of INCONCLUSIVE."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Models: the target both run on."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="Models: NAME=1x3x224x224; repeatable."),
    input_value: Optional[List[str]] = input_value_option(),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="Models: runtime threads of both."),
    data: Optional[str] = typer.Option(None, "--data", help="Models: real inputs (.npy/.npz file or folder)."),
    rounds: int = typer.Option(PAIRED_ROUNDS, "--rounds", min=6, max=100000, help="Models: interleaved rounds."),
    round_seconds: float = typer.Option(0.1, "--round-seconds", min=0.001, max=60.0, help="Models: seconds per model per round."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the comparison JSON here ('-' for stdout)."),
) -> None:
    """Is B significantly slower than A? Two result files: each latency statistic's change with its
    95% interval, INCONCLUSIVE when a run was contended or the machine's speed (its speed probe)
    moved; exit 1 when B is significantly slower (intervals apart AND beyond --threshold). Two
    models: both run here in interleaved rounds and are judged on the paired ratios."""
    from ..compare import DEFAULT_THRESHOLD_PCT, compare_results, load_result
    from ._common import check_output, console, write_json

    check_output(json_path, "--json")
    if not (a.lower().endswith(".json") and b.lower().endswith(".json")):
        if a.lower().endswith(".json") or b.lower().endswith(".json"):
            from ..errors import InputError

            raise InputError("sdk compare takes two result files or two models, not one of each",
                             "give both --json results, or both models")
        cmp_paired = run_paired(a, b, target=target, input_shape=input_shape, threads=threads, data=data,
                                rounds=rounds, round_seconds=round_seconds, threshold=threshold,
                                input_value=input_value)
        if json_path:
            write_json(json_path, cmp_paired.to_dict())
        if json_path != "-":
            print_paired(cmp_paired, a, b)
        raise typer.Exit(cmp_paired.exit_code)
    cmp = compare_results(load_result(a, board), load_result(b, board),
                          threshold_pct=DEFAULT_THRESHOLD_PCT if threshold is None else threshold,
                          decide_on=tuple(on or ("p50",)), normalize=normalize)
    if json_path:
        write_json(json_path, cmp.to_dict())
    if json_path != "-":
        _print(cmp, a, b)
        if json_path:
            console().print(f"wrote {json_path}")
    raise typer.Exit(cmp.exit_code)


def run_paired(a: str, b: str, *, target: Optional[str], input_shape: Optional[List[str]], threads: Optional[int],
               data: Optional[str], rounds: int, round_seconds: float, threshold: Optional[float],
               input_value: Optional[List[str]] = None) -> Any:
    """A and B timed in interleaved rounds here (:func:`sdk.targets.measure.benchmark_pair`) and
    judged on their paired ratios (:func:`sdk.compare.compare_paired`)."""
    from ..compare import PAIRED_THRESHOLD_PCT, compare_paired
    from ..targets.measure import benchmark_pair
    from ..tensors import parse_input_shapes

    timing = benchmark_pair(a, b, target, target_options={"threads": threads} if threads else None,
                            input_shapes=parse_input_shapes(input_shape or []), data=data, rounds=rounds,
                            round_s=round_seconds, input_values=list(input_value or []) or None)
    return compare_paired(timing.a_round_ms, timing.b_round_ms,
                          PAIRED_THRESHOLD_PCT if threshold is None else threshold)


def print_paired(cmp: Any, a: str, b: str) -> None:
    """The paired verdict: medians, the ratio with its interval, and the one-line verdict."""
    from ._common import console

    c = console()
    d = cmp.to_dict()
    ci = d["change_ci95_pct"]
    c.print(f"B = {b} vs A = {a}: {d['rounds']} interleaved rounds", markup=False, soft_wrap=True)
    c.print(f"  A median {d['a_median_ms']:.3f} ms, B median {d['b_median_ms']:.3f} ms; paired B/A "
            f"{cmp.ratio:.4f} ({cmp.change_pct:+.1f} %, 95% CI "
            + (f"[{ci[0]:+.1f}, {ci[1]:+.1f}] %)" if ci else "none: too few rounds)"), markup=False, soft_wrap=True)
    if cmp.regression:
        c.print(f"[red]REGRESSION[/red]: B is slower in paired rounds (interval above no change, beyond "
                f"{cmp.threshold_pct:g} %)", markup=True, soft_wrap=True)
    elif cmp.verdict == "faster":
        c.print(f"B is faster in paired rounds (beyond {cmp.threshold_pct:g} %)", soft_wrap=True)
    else:
        c.print(f"no regression in paired rounds ({cmp.verdict}; threshold {cmp.threshold_pct:g} %)", soft_wrap=True)


def _print(cmp: Any, a: str, b: str) -> None:
    from rich.table import Table

    from ..textsafe import inert
    from ._common import console, fmt_ci, fmt_ms, styled

    c = console()
    t = Table(title=f"B = {b} vs A = {a}")
    for col in ("statistic", "A ms", "A 95% CI", "B ms", "B 95% CI", "change", "change 95% CI", "verdict"):
        t.add_column(col, justify="left" if col in ("statistic", "verdict") else "right", no_wrap=True)
    for ch in cmp.changes:
        interval = "-" if ch.change_ci_pct is None else f"[{ch.change_ci_pct[0]:+.1f}, {ch.change_ci_pct[1]:+.1f}] %"
        color = {"slower": "red", "faster": "green"}.get(ch.verdict, "")
        verdict = f"[{color}]{ch.verdict}[/{color}]" if color else inert(ch.verdict)
        if ch.stat == "mean":
            verdict = "- (no interval)"
        elif ch.stat not in cmp.decide_on:
            verdict += " (info)"
        elif cmp.inconclusive:
            verdict += " (inconclusive)"
        t.add_row(ch.stat, fmt_ms(ch.a_ms), fmt_ci(ch.a_ci, ch.stat) if ch.stat != "mean" else "-", fmt_ms(ch.b_ms),
                  fmt_ci(ch.b_ci, ch.stat) if ch.stat != "mean" else "-", f"{ch.change_pct:+.1f} %", interval,
                  styled(verdict))
    if c.is_terminal:
        c.print(t)
    else:  # piped or in CI: do not squeeze the table into 80 columns
        from ._common import _safe_console

        _safe_console(width=max(c.width, 132), file=c.file).print(t)
    if cmp.throughput_change_pct is not None:
        c.print(f"throughput: {cmp.a.stats.throughput_ips:.1f} -> {cmp.b.stats.throughput_ips:.1f} inf/s "
                f"({cmp.throughput_change_pct:+.1f} %)")
    for w in cmp.warnings:
        c.print(f"warning: {w}", markup=False, highlight=False, soft_wrap=True)
    on = ", ".join(cmp.decide_on)
    if cmp.beyond_noise is not None:
        bn = cmp.beyond_noise
        c.print(f"[red]REGRESSION[/red]: B is slower on {inert(bn.stat)} by more than the noise allows: "
                f"{bn.change_pct:+.1f} % with B's figures divided by the most its speed probes allow, "
                f"intervals apart, beyond {cmp.threshold_pct:.1f} %; despite: {inert('; '.join(cmp.inconclusive_reasons))}", markup=True, soft_wrap=True)
    elif cmp.inconclusive:
        c.print(f"[yellow]INCONCLUSIVE[/yellow]: {inert('; '.join(cmp.inconclusive_reasons))}: no regression can be "
                "called; rerun on a quiet machine", markup=True, soft_wrap=True)
    elif cmp.regression:
        c.print(f"[red]REGRESSION[/red]: B is significantly slower on {inert(on)} (intervals apart, beyond "
                f"{cmp.threshold_pct:g} %)", markup=True, soft_wrap=True)
    else:
        c.print(f"no regression on {on} (threshold {cmp.threshold_pct:g} %)", soft_wrap=True)
