"""``sdk profile``: per-layer times mapped to ONNX nodes, and the roofline (over :mod:`sdk.profiler`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import typer

from ._common import input_value_option


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_cmd)


def profile_cmd(
    model: str = typer.Argument(..., help="Model file (.onnx; .tflite where the runtime exposes a profiler)."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target (default: onnxruntime here, the "
                                                                         "board profile's first on a board)."),
    board: Optional[str] = typer.Option(None, "--board", "-b", help="Profile on this board, through its agent."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="NAME=1x3x640x640 for a dynamic "
                                                                                "input (repeatable)."),
    input_value: Optional[List[str]] = input_value_option(),
    runs: int = typer.Option(20, "--runs", min=1, help="Profiled runs (after warm-up)."),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Warm-up runs, not profiled."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="Runtime threads."),
    provider: Optional[List[str]] = typer.Option(None, "--provider", help="onnxruntime execution providers."),
    option: Optional[List[str]] = typer.Option(None, "--option", "-o", help="Target option KEY=VALUE."),
    roofline: bool = typer.Option(False, "--roofline", help="Add FLOPs, bytes, intensity and bound per layer "
                                                            "against the board's [hardware] roofs."),
    estimate: bool = typer.Option(False, "--estimate", help="With --roofline: run nothing, estimate from the graph."),
    precision: Optional[str] = typer.Option(None, "--precision", help="Precision for the board / the estimate."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the profile JSON here ('-' for stdout)."),
    report: Optional[str] = typer.Option(None, "--report", help="Write an HTML report here."),
    top: int = typer.Option(15, "--top", min=1, help="Layers shown in the terminal table."),
) -> None:
    """Where the time goes: per-layer times from the runtime's profiler, mapped to ONNX nodes."""
    from ..profiler import ProfileConfig, profile_model
    from ..tensors import parse_input_shapes
    from ._common import console, parse_options, write_json

    opts = parse_options(option)
    if threads is not None:
        opts["threads"] = threads
    if provider:
        opts["providers"] = [p for item in provider for p in item.split(",") if p]
    cfg = ProfileConfig(target=target, target_options=opts, input_shapes=dict(parse_input_shapes(input_shape or [])),
                        runs=runs, warmup=warmup, board=board, roofline=roofline, estimate_only=estimate,
                        precision=precision, input_values=list(input_value or []))
    doc = profile_model(model, cfg)
    if json_path == "-":
        write_json("-", doc)
        return
    _print(doc, top)
    if json_path:
        write_json(json_path, doc)
        console().print(f"wrote {json_path}")
    if report:
        from pathlib import Path

        from ..reports.perf_html import profile_html

        Path(report).parent.mkdir(parents=True, exist_ok=True)
        from ._common import write_text_atomic

        write_text_atomic(report, profile_html(doc), "--report")
        console().print(f"wrote {report}")


def _print(doc: Dict[str, Any], top: int) -> None:
    from rich.table import Table

    from ._common import console, fmt_ms

    c = console()
    estimate = doc.get("mode") == "estimate"
    t = Table(title=f"{'ESTIMATED ' if estimate else ''}slowest layers ({doc.get('target') or '-'}, "
                    f"{doc.get('where')})")
    for col in ("layer", "ONNX nodes", "op", "ms", "%", "precision"):
        t.add_column(col, overflow="fold")
    if doc.get("roofline"):
        t.add_column("FLOP/B")
        t.add_column("bound")
    for l in doc["layers"][:top]:
        row = [l["name"], ", ".join(l.get("onnx_nodes") or []) or "(runtime)", str(l.get("op_type")),
               fmt_ms(l.get("estimated_ms") if estimate else l.get("time_ms")),
               f"{l['percent']:.1f}" if l.get("percent") is not None else "-", str(l.get("precision"))]
        if doc.get("roofline"):
            ai = l.get("intensity_flop_per_byte")
            row += [f"{ai:.3g}" if ai is not None else "-", str(l.get("bound") or "-")]
        t.add_row(*row)
    c.print(t)
    if estimate:
        c.print(doc.get("estimate_reason"), markup=False)
    else:
        c.print(f"summed layers {fmt_ms(doc.get('total_ms'))} ms; end to end {fmt_ms(doc.get('end_to_end_ms'))} ms "
                f"(unprofiled {fmt_ms(doc.get('end_to_end_unprofiled_ms'))} ms)")
        if doc.get("flagged"):
            c.print(f"FLAG: {doc.get('flag_reason')}", markup=False)
    roof = doc.get("roofline")
    if roof:
        c.print(f"roofline ({roof['board']}): {roof['layers_memory_bound']} memory-bound, "
                f"{roof['layers_compute_bound']} compute-bound layers; {roof['hardware']['source']}", markup=False)
        for note in roof.get("notes") or []:
            c.print(f"note: {note}", markup=False)
