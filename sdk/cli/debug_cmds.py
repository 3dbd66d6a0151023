"""``sdk check`` (what a target runs, before a build) and ``sdk debug diff|reduce`` (why it breaks)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("check")(check_cmd)
    debug = typer.Typer(help="Why a model breaks: layer-by-layer diff, smallest failing subgraph.",
                        no_args_is_help=True)
    debug.command("diff")(diff_cmd)
    debug.command("reduce")(reduce_cmd)
    app.add_typer(debug, name="debug")


def _shapes(items: Optional[List[str]]) -> Any:
    from ..tensors import parse_input_shapes

    return parse_input_shapes(items) if items else None


def check_cmd(
    model: str = typer.Argument(..., help="Model file (.onnx for TensorRT, .tflite for TFLite)."),
    target: str = typer.Option("tensorrt", "--target", "-t", help="NAME[@VERSION]: tensorrt@8.6, tensorrt@10.3, "
                               "tensorrt@11, tflite, onnxruntime (with --ep)."),
    dla: bool = typer.Option(False, "--dla", help="TensorRT: which nodes the DLA runs (the rest fall back to the GPU)."),
    soc: str = typer.Option("orin", "--soc", help="With --dla: orin or xavier."),
    precision: Optional[str] = typer.Option(None, "--precision", help="TensorRT: fp32, fp16 or int8 (DLA: fp16 or int8)."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape",
                                                    help="Fix a dynamic input: NAME=1x3x640x640 (DLA needs static shapes)."),
    json_path: Optional[str] = typer.Option(None, "--json", metavar="FILE", help="Write the report JSON ('-': stdout)."),
    all_nodes: bool = typer.Option(False, "--all", help="List every node, not only those that fall back or fail."),
    ep: Optional[str] = typer.Option(None, "--ep", help="With --target onnxruntime: the mobile EP (nnapi, coreml, "
                                                       "coreml-mlprogram, xnnpack)."),
) -> None:
    """What a target runs of a model, node by node, before any build. Exit 1 when a node cannot run."""
    from ..targets.capability import check
    from ._common import check_output, console, write_json

    check_output(json_path, "--json")
    opts: Dict[str, Any] = {"input_shapes": _shapes(input_shape)}
    if dla:
        opts["dla"] = True
        opts["soc"] = soc
    if precision:
        opts["precision"] = precision
    if ep:
        opts["ep"] = ep
    report = check(model, target, **opts)
    if json_path == "-":
        write_json("-", report.to_dict())
        raise typer.Exit(0 if report.ok else 1)
    from rich.table import Table

    c = console()
    t = Table(title=f"{report.target} {report.version}: {report.model}")
    for col in ("node", "op", "verdict", "device", "reason"):
        t.add_column(col)
    for n in report.nodes:
        if all_nodes or n.verdict != "runs" or n.reason:
            t.add_row(n.node, n.op, n.verdict, n.device, n.reason)
    if t.row_count:
        c.print(t)
    for n in report.failing():
        for r in n.remedies:
            c.print(f"  remedy for {n.node} ({n.op}): {r}", markup=False)
    for note in report.notes:
        c.print(f"note: {note}", markup=False)
    c.print(report.summary(), markup=False)
    c.print(f"source: {report.source}; {report.seconds:.2f} s", markup=False)
    if not report.ok:
        c.print(f"explain: sdk debug reduce {model} --fails check:{target}", markup=False)
    if json_path:
        write_json(json_path, report.to_dict())
    raise typer.Exit(0 if report.ok else 1)


def _feeds(model: str, data: Optional[str], samples: int, input_shape: Optional[List[str]]) -> List[Any]:
    from ..data import load_feeds, random_feed
    from ..model import Model

    m = Model.load(model)
    if data:
        feeds = load_feeds(data, m.inputs)
        return feeds[:samples] if samples else feeds
    shapes = _shapes(input_shape)
    return [random_feed(m.inputs, shapes, seed=i) for i in range(samples or 4)]


def diff_cmd(
    model: str = typer.Argument(..., help="The FP32 ONNX model (the reference, run here on ONNX Runtime)."),
    against: str = typer.Option(..., "--against", help="The candidate: an INT8 Q/DQ .onnx, a .tflite, a TensorRT engine."),
    board: Optional[str] = typer.Option(None, "--board", help="Run the candidate on this board (through its agent)."),
    data: Optional[str] = typer.Option(None, "--data", help="Inputs: .npy/.npz file or folder (default: seeded random)."),
    samples: int = typer.Option(4, "--samples", help="How many samples (of --data, or random ones)."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="For random inputs: NAME=1x3x224x224."),
    min_snr: float = typer.Option(20.0, "--min-snr", help="Tolerance: SNR in dB below which a tensor is past it."),
    min_cosine: float = typer.Option(0.99, "--min-cosine", help="Tolerance: cosine below which a tensor is past it."),
    min_drop: float = typer.Option(10.0, "--min-drop", help="dB of SNR a layer must lose against its inputs to be "
                                   "where the error starts."),
    report_path: Optional[str] = typer.Option(None, "--report", metavar="FILE", help="Write the HTML page here."),
    json_path: Optional[str] = typer.Option(None, "--json", metavar="FILE", help="Write the report JSON ('-': stdout)."),
    trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Accept the board's host key on first use."),
) -> None:
    """The same inputs through the FP32 model and the candidate, tensor by tensor; the first layer
    where the error starts. Exit 1 when one diverges."""
    from ..debug.layerdiff import DiffConfig, diff
    from ._common import check_output, console, write_json

    check_output(json_path, "--json")
    check_output(report_path, "--report", stdout_ok=False)
    cfg = DiffConfig(min_snr_db=min_snr, min_cosine=min_cosine, min_drop_db=min_drop, board=board,
                     trust_new_host=trust_new_host)
    report = diff(model, against, _feeds(model, data, samples, input_shape), cfg)
    if report_path:
        report.write_html(report_path)
    if json_path == "-":
        write_json("-", report.to_dict())
        raise typer.Exit(0 if report.first_divergence is None else 1)
    from rich.table import Table

    c = console()
    first = report.first_divergence
    t = Table(title=f"{report.candidate} vs {report.model}")
    for col in ("depth", "node", "op", "cosine", "SNR dB", "drop dB", "max abs", "added err", "gain"):
        t.add_column(col, justify="right" if col not in ("node", "op") else "left")
    shown = [x for x in report.layers if x.diverges or x.tensor in report.outputs]
    shown += [x for x in report.ranked()[:10] if x not in shown]
    for x in sorted(shown, key=lambda r: r.depth):
        t.add_row(str(x.depth), x.node, x.op, f"{x.cosine:.5f}", f"{x.snr_db:.2f}", f"{x.snr_drop_db:.1f}",
                  f"{x.max_abs_error:.4g}", "" if x.added_error is None else f"{x.added_error:.3g}",
                  "" if x.gain is None else f"{x.gain:.3g}")
    c.print(t)
    for note in report.notes:
        c.print(f"note: {note}", markup=False)
    c.print(report.summary(), markup=False)
    if report.ranked():
        c.print("largest share of the output error (own error x gain, keep in float first): " + ", ".join(x.candidate_node or x.node for x in report.ranked()[:5]), markup=False)
    if first is not None:
        layer = first.candidate_node or first.node
        keep = f"keep {layer} in float: sdk quantize ... --exclude {layer}"
        if against.lower().endswith(".onnx"):
            import shlex

            where = f"board:{board}" if board else "onnxruntime"
            extra = (["--data", data] if data else []) + [a for s in (input_shape or []) for a in ("--input-shape", s)]
            line = shlex.join(["sdk", "debug", "reduce", against, "--fails", f"diff:{_reduce_tolerance(report):g}@{where}",
                               "--reference", model, *extra])
            c.print(f"explain: {line}   (or {keep})", markup=False)
        else:
            c.print(f"explain: {keep}", markup=False)
    if json_path:
        write_json(json_path, report.to_dict())
    if report_path:
        c.print(f"wrote {report_path}")
    raise typer.Exit(0 if first is None else 1)


def _reduce_tolerance(report: Any) -> float:
    """The SNR (dB) for ``sdk debug reduce --fails diff:`` that ends at the report's first divergence:
    between its SNR and the lowest SNR of the tensors before it (accumulated error stays above it)."""
    first = report.first_divergence
    before = [x.snr_db for x in report.layers if x.depth < first.depth]
    ceiling = min(min(before, default=first.snr_db + 2 * report.min_drop_db), first.snr_db + 2 * report.min_drop_db)
    if ceiling <= first.snr_db:
        return float(report.min_snr_db)
    return round(first.snr_db + (ceiling - first.snr_db) / 2, 1)


def reduce_cmd(
    model: str = typer.Argument(..., help="The ONNX model that fails."),
    fails: str = typer.Option(..., "--fails", help="error:PATTERN@TARGET, error:PATTERN@board:NAME, check:TARGET[@V], "
                              "or diff:MIN_SNR_DB@TARGET / diff:MIN_SNR_DB@board:NAME (an output's SNR against "
                              "--reference below MIN_SNR_DB)."),
    reference: Optional[str] = typer.Option(None, "--reference", metavar="FP32.onnx",
                                            help="For diff: the FP32 model MODEL was made from; a subgraph's inputs "
                                            "are its values, its outputs are compared with its tensors of the same name."),
    out: str = typer.Option(".", "--out", help="Folder for failing.onnx, passing.onnx and their inputs (.npz)."),
    data: Optional[str] = typer.Option(None, "--data", help="One input sample (.npy/.npz); default: seeded random."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="For random inputs: NAME=1x3x224x224."),
    max_runs: int = typer.Option(64, "--max-runs", help="At most this many runs of the check."),
    json_path: Optional[str] = typer.Option(None, "--json", metavar="FILE", help="Write the result JSON ('-': stdout)."),
) -> None:
    """The smallest subgraph that still fails CHECK (bisection, then unit by unit), written with inputs to
    reproduce it. With diff:, the smallest run of layers (each with its Q/DQ nodes) that, fed the FP32
    reference's values, adds the error: the first diverging layer."""
    from ..debug.reducer import parse_check, reduce
    from ._common import check_output, console, err_console, write_json

    check_output(json_path, "--json")
    check = parse_check(fails, reference)
    feeds = _feeds(model, data, 1, input_shape)
    result = reduce(model, check, feeds[0], out_dir=out, max_runs=max_runs,
                    progress=lambda line: err_console().print(line, markup=False))
    if json_path == "-":
        write_json("-", result.to_dict())
        return
    c = console()
    c.print(result.summary(), markup=False)
    for note in result.notes:
        c.print(f"note: {note}", markup=False)
    c.print(f"failing: {result.failing_model} (inputs {result.failing_inputs})", markup=False)
    if result.passing_model:
        c.print(f"largest passing: {result.passing_model} ({result.passing_nodes} nodes; inputs {result.passing_inputs})",
                markup=False)
    if json_path:
        write_json(json_path, result.to_dict())
