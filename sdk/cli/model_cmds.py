"""``sdk inspect``."""
from __future__ import annotations

from typing import Any, List, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cmd)


def inspect_cmd(
    model: str = typer.Argument(..., help="Model file (.onnx or .tflite)."),
    json_path: Optional[str] = typer.Option(None, "--json", metavar="FILE",
                                            help="Write the result JSON here ('-' for stdout, no tables)."),
    input_shape: Optional[List[str]] = typer.Option(
        None, "--input-shape", help="Fix a dynamic input before counting MACs: NAME=1x3x640x640 (repeatable)."),
    input_value: Optional[List[str]] = typer.Option(
        None, "--input-value", help="Value of an input that chooses an If branch (sr=16000): count that "
                                    "branch instead of the larger one. Repeatable."),
    ep: Optional[List[str]] = typer.Option(
        None, "--ep", help="Mobile EP readiness: which nodes nnapi, coreml, coreml-mlprogram or xnnpack would take "
                           "(onnxruntime's usability checker; repeatable)."),
) -> None:
    """Show a model's inputs, outputs, ops, parameters and MACs (and, with --ep, which nodes a mobile
    execution provider takes)."""
    from ..model import Model
    from ..tensors import format_shape, parse_input_shapes
    from ._common import console, write_json

    m = Model.load(model)
    if input_shape:
        m = m.with_input_shapes(parse_input_shapes(input_shape))
    info = m.inspect(input_values=list(input_value or []) or None)
    readiness = []
    if ep:
        from ..targets.onnxrt.readiness import check_ep_name, ep_readiness

        names = [check_ep_name(e) for e in ep]   # every name checked before any work
        readiness = [ep_readiness(m, e) for e in names]
        info["ep_readiness"] = {r.ep: r.to_dict() for r in readiness}
    if json_path == "-":
        write_json("-", info)
        return
    from rich.table import Table

    from ..textsafe import inert

    c = console()
    c.print(f"[bold]{inert(info['path'])}[/bold]  {info['format']}  {info['size_bytes'] / 1e6:.2f} MB  "
            f"sha256 {info['sha256'][:16]}…", markup=True)
    _print_facts(c, info)
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
    for name, ops in (info.get("subgraph_ops") or {}).items():
        c.print(f"subgraph '{name}': {sum(ops.values())} ops ("
                + ", ".join(f"{op} {n}" for op, n in ops.items()) + ")", markup=False)
    for r in readiness:
        _print_readiness(c, r)
    if json_path:
        write_json(json_path, info)
        c.print(f"wrote {json_path}")


def _print_readiness(c: Any, r: Any) -> None:
    """One EP's readiness: the summary line, then the nodes left to the CPU grouped by op and reason."""
    from collections import Counter

    from rich.table import Table

    c.print(r.summary(), markup=False, highlight=False)
    if r.if_fixed_shapes:
        f = r.if_fixed_shapes
        c.print(f"  with fixed input shapes ({', '.join(r.dynamic_inputs)} are dynamic): {f['supported_nodes']}/"
                f"{r.num_nodes} nodes in {f['partitions']} partition(s); suitability {f['suitability']}",
                markup=False, highlight=False)
    c.print(f"  assignment: {r.assignment if r.assignment is not None else r.assignment_note}", markup=False,
            highlight=False)
    left = Counter((n.op, n.why) for n in r.cpu_nodes)
    if left:
        t = Table(title=f"{r.ep}: nodes left to the CPU")
        for col in ("op", "nodes", "why"):
            t.add_column(col)
        for (op, why), n in sorted(left.items(), key=lambda kv: (-kv[1], kv[0])):
            t.add_row(op, str(n), why)
        c.print(t)


def _print_facts(c: Any, info: Any) -> None:
    facts = [(k, info.get(k)) for k in ("opset", "ir_version", "producer", "ort_version", "nodes", "params", "param_bytes")
             if info.get(k) is not None]
    for k, v in facts:
        c.print(f"  {k}: {v:,}" if isinstance(v, int) and k.startswith("param") else f"  {k}: {v}")
    if info.get("params_in_constants"):
        c.print(f"  ({info['params_in_constants']:,} of the params are held in Constant nodes)")
    unknown = info.get("macs_unknown_nodes") or 0
    macs = info.get("macs")
    notes = info.get("macs_notes") or []
    if macs is None and unknown:
        c.print(f"  macs: unknown: {unknown} node(s) have dynamic or unknown shapes (fix them with --input-shape)")
    elif macs is None and notes:
        c.print("  macs: unknown: nothing outside the control flow was counted")
    elif macs is not None:
        why = []
        if unknown:
            dynamic = any(not all(isinstance(d, int) and d >= 0 for d in i["shape"]) for i in info["inputs"])
            why.append(f"{unknown} node(s) whose shapes could not be derived not counted"
                       + ("; use --input-shape" if dynamic else ""))
        if info.get("macs_partial") and not unknown:
            why.append("control flow not counted, see below")
        c.print(f"  macs: {macs:,}" + (f" (partial: {'; '.join(why)})" if why else ""), markup=False)
    resolved, left = info.get("ifs_resolved") or [], info.get("ifs_unresolved") or []
    if resolved or left:
        from collections import Counter

        kinds = Counter(r["kind"] for r in resolved)
        by = ", ".join(f"{n} by {k}" for k, n in sorted(kinds.items()))
        c.print(f"  If resolved: {len(resolved)}" + (f" ({by})" if by else "") + f"; left: {len(left)}", markup=False)
    for note in notes:
        c.print(f"    {note}", markup=False, soft_wrap=True)
    for ctl in info.get("control_inputs") or []:
        hint = f" (give it: --input-value {ctl['input']}=VALUE)" if ctl.get("kind") == "value" else \
            " (random data may run another path than real data)"
        c.print(f"  control flow: input '{ctl['input']}' {ctl['role']} {ctl['node']}{hint}", markup=False,
                soft_wrap=True)
