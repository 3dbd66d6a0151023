"""``sdk compare A.json B.json``: is B significantly slower than A?"""
from __future__ import annotations

from typing import Any, List, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)


def compare_cmd(
    a: str = typer.Argument(..., help="Result JSON of the reference run (sdk bench / push / validate --json)."),
    b: str = typer.Argument(..., help="Result JSON of the run to judge."),
    threshold: float = typer.Option(5.0, "--threshold", min=0.0,
                                    help="A slowdown beyond this % (with intervals apart) is a regression."),
    on: Optional[List[str]] = typer.Option(None, "--on", help="Statistic that decides: p50 (default), p90, p99; repeatable."),
    board: Optional[str] = typer.Option(None, "--board", "-b", help="Pick this board's result in files that hold several."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the comparison JSON here ('-' for stdout)."),
) -> None:
    """Print the change of each latency statistic with its 95% interval; exit 1 when B is
    significantly slower (intervals do not overlap AND the change is beyond --threshold), 0 otherwise."""
    from ..compare import compare_results, load_result
    from ._common import console, write_json

    cmp = compare_results(load_result(a, board), load_result(b, board), threshold_pct=threshold,
                          decide_on=tuple(on or ("p50",)))
    if json_path:
        write_json(json_path, cmp.to_dict())
    if json_path != "-":
        _print(cmp, a, b)
        if json_path:
            console().print(f"wrote {json_path}")
    raise typer.Exit(cmp.exit_code)


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
    if cmp.inconclusive:
        c.print(f"[yellow]INCONCLUSIVE[/yellow]: {inert('; '.join(cmp.inconclusive_reasons))}: no regression can be "
                "called; rerun on a quiet machine", markup=True, soft_wrap=True)
    elif cmp.regression:
        c.print(f"[red]REGRESSION[/red]: B is significantly slower on {inert(on)} (intervals apart, beyond "
                f"{cmp.threshold_pct:g} %)", markup=True, soft_wrap=True)
    else:
        c.print(f"no regression on {on} (threshold {cmp.threshold_pct:g} %)", soft_wrap=True)
