"""``sdk convert MODEL -o OUT``: a model in another format, the format from ``OUT``'s suffix
(over :func:`sdk.targets.convert.convert`)."""
from __future__ import annotations

from typing import List, Optional

import typer

from ._common import input_value_option


def register(app: typer.Typer) -> None:
    app.command("convert")(convert_cmd)


def convert_cmd(
    model: str = typer.Argument(..., help="The model to convert (.onnx)."),
    output: str = typer.Option(..., "--output", "-o", help="Where to write it; the suffix names the format."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="Fix an input's shape: NAME=1x3x224x224."),
    input_value: Optional[List[str]] = input_value_option(),
    int8: bool = typer.Option(False, "--int8", help="Write an INT8 model, calibrated on --calib (a QDQ model: its own scales without --calib)."),
    calib: Optional[str] = typer.Option(None, "--calib", help="Calibration data for --int8 (a folder or .npz)."),
    option: Optional[List[str]] = typer.Option(None, "--option", help="Converter option KEY=VALUE; repeatable."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the conversion record here ('-' for stdout)."),
) -> None:
    """Convert MODEL into the format its -o suffix names and print what was written (-o flat.onnx:
    the model specialized for --input-value/--input-shape, the Ifs they decide inlined; -o m.tflite
    with --input-value: that model, converted)."""
    from ..targets.convert import ConvertOptions, convert
    from ..tensors import parse_input_shapes
    from ._common import check_output, console, parse_options, write_json

    check_output(output, "-o", stdout_ok=False)
    check_output(json_path, "--json")
    opts = ConvertOptions(input_shapes=parse_input_shapes(input_shape or []), int8=int8, calib=calib,
                          extra=parse_options(option), input_values=list(input_value or []) or None)
    result = convert(model, output, opts)
    if json_path:
        write_json(json_path, result.to_dict())
    if json_path == "-":
        return
    c = console()
    for note in result.notes:
        c.print(note, markup=False)
    c.print(f"wrote {result.output} ({result.format}, {result.seconds:.2f} s)", markup=False)
    for role, path in result.extras.items():
        c.print(f"wrote {path} ({role})", markup=False)
