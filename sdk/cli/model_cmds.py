"""``sdk inspect``."""
from __future__ import annotations

from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cmd)


def inspect_cmd(
    model: str = typer.Argument(..., help="Model file (.onnx or .tflite)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    input_shape: Optional[List[str]] = typer.Option(
        None, "--input-shape", help="Fix a dynamic input before counting MACs: NAME=1x3x640x640 (repeatable)."),
) -> None:
    """Show a model's inputs, outputs, ops, parameters and MACs."""
    from ..model import Model
    from ..tensors import format_shape, parse_input_shapes
    from ._common import console, write_json

    m = Model.load(model)
    if input_shape:
        m = m.with_input_shapes(parse_input_shapes(input_shape))
    info = m.inspect()
    if json_out:
        write_json(None, info)
        return
    from rich.table import Table

    c = console()
    c.print(f"[bold]{info['path']}[/bold]  {info['format']}  {info['size_bytes'] / 1e6:.2f} MB  sha256 {info['sha256'][:16]}…")
    facts = [(k, info.get(k)) for k in ("opset", "ir_version", "producer", "nodes", "params", "param_bytes", "macs")
             if info.get(k) is not None]
    for k, v in facts:
        if isinstance(v, int) and k in ("params", "param_bytes", "macs"):
            v = f"{v:,}"
        c.print(f"  {k}: {v}")
    if info.get("macs_unknown_nodes"):
        c.print(f"  MACs not counted for {info['macs_unknown_nodes']} node(s) with dynamic shapes (use --input-shape)")
    for kind in ("inputs", "outputs"):
        t = Table(title=kind)
        for col in ("name", "shape", "dtype"):
            t.add_column(col)
        has_q = any(s.get("quantization") for s in info[kind])
        if has_q:
            t.add_column("scale / zero point")
        for s in info[kind]:
            row = [s["name"], format_shape(s["shape"]), s["dtype"]]
            if has_q:
                q = s.get("quantization")
                row.append(f"{q['scale']:.6g} / {q['zero_point']}" if q else "")
            t.add_row(*row)
        c.print(t)
    if info.get("ops"):
        t = Table(title="ops")
        t.add_column("op")
        t.add_column("count", justify="right")
        for op, n in info["ops"].items():
            t.add_row(op, str(n))
        c.print(t)
