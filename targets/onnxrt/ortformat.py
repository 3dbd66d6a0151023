"""ONNX -> ORT format (``.ort``, what ONNX Runtime Mobile loads), with onnxruntime's own converter.

:func:`convert_to_ort` is the ``.ort`` entry of :data:`sdk.targets.convert.CONVERTERS`
(``sdk convert model.onnx -o model.ort``). It calls
``onnxruntime.tools.convert_onnx_models_to_ort.convert_onnx_models_to_ort`` (the function behind
``python -m onnxruntime.tools.convert_onnx_models_to_ort``) on a private copy of the model in a
temporary folder beside the output, then moves the ``.ort`` file and the required-operators config
that the tool writes for a reduced build (``--include_ops_by_config``) into place, so a failure
leaves nothing behind.

Options (``--option KEY=VALUE``):

``optimization``  ``fixed`` (default: optimisations applied and baked in, the tool's advice for the
                  CPU EP) or ``runtime`` (basic optimisations, the rest saved to be replayed at load
                  time, the tool's advice for NNAPI / CoreML, which take an unknown number of nodes)
``platform``      ``arm`` (default: mobile; ``session.qdqisint8allowed=1``, no NCHWc layout) or
                  ``amd64``
``type_reduction`` ``true``: the config also lists the types each operator needs
                  (``required_operators_and_types.config``)

A model the ORT format cannot hold (an op with no kernel in this onnxruntime, a custom domain,
a graph that does not load, a flatbuffer over 2 GiB) raises one :class:`ConversionError` with
onnxruntime's reason.
"""
from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any, Dict

from ...errors import ConversionError, InputError, first_line
from ..convert import ConvertOptions, ConvertResult

__all__ = ["convert_to_ort", "ORT_FORMAT_LIMIT_BYTES", "STYLES", "PLATFORMS"]

STYLES = ("fixed", "runtime")
PLATFORMS = ("arm", "amd64")
#: flatbuffers cannot address past 2 GiB: the ORT format's hard size limit.
ORT_FORMAT_LIMIT_BYTES = (1 << 31) - 1
_OPTIONS = ("optimization", "platform", "type_reduction")


def _check_options(options: ConvertOptions) -> Dict[str, Any]:
    options.check(".ort", _OPTIONS, ("the ORT format keeps the model's own precision",
                                     "quantize first (sdk quantize model.onnx -o model.int8.onnx), then convert that"))
    return {
        "style": options.choice("optimization", "fixed", STYLES),
        "platform": options.choice("platform", "arm", PLATFORMS),
        "type_reduction": options.flag("type_reduction"),
    }


def _source_model(source: Path, options: ConvertOptions, into: Path) -> Path:
    """The ONNX model to hand to the converter, as one file in ``into`` (the tool reads every
    ``.onnx`` of its folder): the source with external data inlined and shapes fixed as asked."""
    from ...model import Model

    model = Model.load(source)
    if model.format != "onnx":
        raise InputError(f"'{source}' is a {model.format} model: .ort is converted from ONNX models")
    if options.input_shapes:
        model = model.with_input_shapes(options.input_shapes)
    proto = model.proto
    dest = into / "model.onnx"
    if proto.ByteSize() > ORT_FORMAT_LIMIT_BYTES:
        raise ConversionError(f"'{source}' holds {proto.ByteSize() / 2**30:.2f} GiB of graph and weights: the ORT "
                              "format is one flatbuffer, which cannot exceed 2 GiB",
                              "keep the ONNX model (external data) for this one")
    dest.write_bytes(proto.SerializeToString())
    return dest


def _run_tool(model: Path, out_dir: Path, style: str, platform: str, type_reduction: bool) -> str:
    """Run onnxruntime's converter; returns what it printed. Its errors become ConversionError."""
    try:
        from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort
    except ImportError as exc:
        raise ConversionError(f"onnxruntime's ORT format converter cannot be imported: {exc}",
                              "pip install onnxruntime") from exc
    import logging

    printed = io.StringIO()
    log = logging.getLogger("ort_format_model.utils")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(printed):
            convert_onnx_models_to_ort(model, output_dir=out_dir,
                                       optimization_styles=[OptimizationStyle[style.capitalize()]],
                                       target_platform=platform, enable_type_reduction=type_reduction)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph/NotImplemented
        raise ConversionError(_why(exc), "the ORT format holds what this onnxruntime can load and run on its CPU "
                              "provider: replace or remove the node, or keep the .onnx model") from exc
    finally:
        log.setLevel(level)
    return printed.getvalue()


def _why(exc: BaseException) -> str:
    text = first_line(exc)
    for prefix in ("[ONNXRuntimeError] : ",):
        if prefix in text:
            text = text.split(prefix, 1)[1]
    return f"the ORT format cannot hold this model: onnxruntime could not load it ({type(exc).__name__}: {text})"


def convert_to_ort(source: Path, output: Path, options: ConvertOptions) -> ConvertResult:
    """Write ``output`` (``.ort``) from the ONNX model ``source`` with onnxruntime's converter, and
    its required-operators config beside it (``<output stem>.required_operators.config``, listed in
    ``extras["required_operators"]``). Both are written atomically; nothing is left on failure."""
    opts = _check_options(options)
    import onnxruntime

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    cfg_name = ("required_operators_and_types" if opts["type_reduction"] else "required_operators")
    cfg_name += ".with_runtime_opt" if opts["style"] == "runtime" else ""
    config_path = output.with_name(f"{output.stem}.{cfg_name}.config")
    with tempfile.TemporaryDirectory(prefix=".edgesdk-ort-", dir=str(output.parent)) as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        model = _source_model(Path(source), options, work / "in")
        _run_tool(model, work / "out", opts["style"], opts["platform"], opts["type_reduction"])
        ort_files = sorted((work / "out").glob("*.ort"))
        configs = sorted((work / "out").glob("*.config"))
        if len(ort_files) != 1 or len(configs) != 1:
            raise ConversionError(f"onnxruntime's converter wrote {len(ort_files)} .ort and {len(configs)} config files "
                                  "(expected one of each)")
        if ort_files[0].stat().st_size > ORT_FORMAT_LIMIT_BYTES:
            raise ConversionError("the converted model is over 2 GiB, past the ORT format's flatbuffer limit")
        # the config names the file it was generated from: name the one the user keeps
        text = configs[0].read_text().replace(str(ort_files[0]), str(output.resolve()))
        configs[0].write_text(text)
        os.replace(ort_files[0], output)
        os.replace(configs[0], config_path)
    from sdk.model import Model

    ort_model = Model.load(output)
    info = ort_model.inspect()
    notes = []
    if opts["style"] == "runtime":
        notes.append("saved runtime optimizations replay only with the session option "
                     "session.enable_saved_runtime_optimizations=1 (trusted models only)")
    return ConvertResult(
        source=str(source), output=str(output), format="ort",
        extras={"required_operators": str(config_path)},
        notes=notes,
        details={"optimization": opts["style"], "platform": opts["platform"], "type_reduction": opts["type_reduction"],
                 "onnxruntime": onnxruntime.__version__, "size_bytes": output.stat().st_size,
                 "source_size_bytes": Path(source).stat().st_size, "nodes": info["nodes"], "ops": info["ops"],
                 "opset": info["opset"], "required_operators": _config_ops(config_path)},
    )


def _config_ops(path: Path) -> Dict[str, Any]:
    """``{domain;opset: [ops]}`` from a required-operators config (comments skipped)."""
    out: Dict[str, Any] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(";", 2)
        if len(parts) == 3:
            out[f"{parts[0]};{parts[1]}"] = parts[2].split(",")
    return out
