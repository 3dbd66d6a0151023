"""ONNX -> a specialized ONNX (``sdk convert model.onnx -o flat.onnx --input-value sr=16000
--input-shape input=1x576``): the model for those input values and shapes, with every ``If`` they
decide replaced by the branch it takes (:func:`sdk.formats.onnx_specialize.specialize`).

:func:`convert_to_onnx` is the ``.onnx`` entry of :data:`sdk.targets.convert.CONVERTERS`. Before
anything is written, the specialized model must pass ``onnx.checker`` (full check) and give, on
ONNX Runtime, the outputs of the original for the same inputs (seeded random data of the given
shapes, the given values; both without graph optimizations; max abs difference at most
``tolerance``, default 1e-6); otherwise one
:class:`ConversionError` says which output differed and by how much. The output no longer takes
the valued inputs, and its inputs have the given shapes.

Options (``--option KEY=VALUE``): ``tolerance`` (float, default 1e-6; 1e-4 with
``float_rewrites``), ``max_elements`` (the largest tensor the pass evaluates, default 64),
``float_rewrites=true``: constants folded, then the quantizer's exact float rewrites
(:mod:`sdk.formats.onnx_rewrite`: scalar affines folded into convs, hard-swishes as
``x * HardSigmoid(x)``, ConvTranspose biases), the FP32 graph ``sdk quantize`` times INT8 against
(``report.latency.rewritten_fp32_ms``): a float file where INT8 does not pay over it. The same
check applies; folding changes float rounding, hence the wider default tolerance.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..errors import ConversionError, InputError, first_line
from .convert import ConvertOptions, ConvertResult

__all__ = ["convert_to_onnx", "specialize_checked", "specialization_notes"]

_OPTIONS = ("tolerance", "max_elements", "float_rewrites")


def _float_option(options: ConvertOptions, key: str, default: float) -> float:
    raw = options.extra.get(key, default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"bad --option {key}={raw}", f"{key} is a number, e.g. {default}") from None
    if value < 0:
        raise InputError(f"bad --option {key}={raw}", f"{key} is not negative")
    return value


def _outputs_agree(original: Any, special: Any, feed: Dict[str, Any], tolerance: float) -> List[str]:
    """Run both on ONNX Runtime (CPU) and compare output by output; returns the lines of the check."""
    import numpy as np
    import onnxruntime as ort

    def run(proto: Any) -> Dict[str, Any]:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        # no graph optimizations: the check is of what the pass changed, not of the fusions ORT
        # finds once shapes are constants (ppocr-v4-rec: 1.0e-6 apart with them, 0 without)
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        s = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = {i.name for i in s.get_inputs()}
        outs = s.run(None, {k: v for k, v in feed.items() if k in names})
        return dict(zip([o.name for o in s.get_outputs()], outs))

    try:
        ref = run(original)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise ConversionError(f"onnxruntime cannot run the original model on these inputs: {first_line(exc)}") from exc
    try:
        got = run(special)
    except Exception as exc:  # noqa: BLE001
        raise ConversionError(f"onnxruntime cannot run the specialized model: {first_line(exc)}") from exc
    lines = []
    for name, a in ref.items():
        b = got.get(name)
        if b is None or np.shape(a) != np.shape(b):
            raise ConversionError(f"output '{name}' of the specialized model has shape "
                                  f"{None if b is None else list(np.shape(b))}, the original {list(np.shape(a))}")
        x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
        both_nan = np.isnan(x) & np.isnan(y)
        diff = float(np.max(np.where(both_nan, 0.0, np.abs(x - y)))) if x.size else 0.0
        if not diff <= tolerance:
            raise ConversionError(f"output '{name}' of the specialized model differs from the original's by "
                                  f"{diff:.3g} (more than {tolerance:g}); nothing was written")
        lines.append(f"{name}: max abs diff {diff:.3g}")
    return lines


def specialize_checked(model: Any, values: Dict[str, Any], shapes: Dict[str, List[int]], *,
                       tolerance: float = 1e-6, max_elements: int = 64,
                       float_rewrites: bool = False) -> Tuple[Any, List[str]]:
    """``model`` (an ONNX :class:`~sdk.model.Model`) specialized for input ``values`` and
    ``shapes`` (then, with ``float_rewrites``, constants folded and the exact float rewrites made:
    ``spec.rewrites`` counts them), passed through ``onnx.checker`` (full) and checked against the
    original on ONNX Runtime (module docstring): ``(Specialization, check lines)``;
    :class:`ConversionError` when either check fails."""
    import onnx

    from ..data import random_feed
    from ..formats.onnx_specialize import specialize

    shaped = model.with_input_shapes(shapes) if shapes else model
    spec = specialize(model.proto, values, {k: list(v) for k, v in shapes.items()}, max_elements=max_elements)
    if float_rewrites:
        from ..formats.onnx_rewrite import simplify

        folded = model.derive(spec.proto).fold_constants()
        spec.proto, spec.rewrites = simplify(folded.proto)
    try:
        onnx.checker.check_model(spec.proto, full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker's own exception types vary by version
        raise ConversionError(f"the specialized model fails onnx.checker: {first_line(exc)}") from exc
    feed = random_feed(shaped.inputs, shapes, seed=0, values=values)
    return spec, _outputs_agree(model.proto, spec.proto, feed, tolerance)


def specialization_notes(spec: Any, values: Dict[str, Any]) -> List[str]:
    """What a specialization did, one line each: the Ifs resolved (and by what), those left, the
    inputs made constants."""
    notes = [r.note().replace(" is counted", " is kept") for r in spec.resolved]
    notes += [f"{u.node}: left as it is ({u.why})" for u in spec.unresolved]
    if values:
        notes.append("inputs now constants: " + ", ".join(f"{k}={v.tolist()}" for k, v in values.items()))
    return notes


def convert_to_onnx(source: Path, output: Path, options: ConvertOptions) -> ConvertResult:
    """Write the model at ``source`` specialized for ``options.input_values`` and
    ``options.input_shapes`` to ``output`` (see the module's docstring)."""
    from ..atomic import atomic_write
    from ..model import Model
    from .measure import as_values

    options.check(".onnx", _OPTIONS, ("this writes the model specialized, in its own precision",
                                      "quantize it after: sdk quantize flat.onnx --calib DATA"))
    rewrite = options.flag("float_rewrites")
    tolerance = _float_option(options, "tolerance", 1e-4 if rewrite else 1e-6)
    cap = int(_float_option(options, "max_elements", 64))
    model = Model.load(source)
    if model.format != "onnx":
        raise InputError(f"'{source}' is a {model.format} model: .onnx is written from ONNX models")
    values = as_values(options.input_values, model.inputs)
    spec, check = specialize_checked(model, values, {k: list(v) for k, v in options.input_shapes.items()},
                                     tolerance=tolerance, max_elements=cap, float_rewrites=rewrite)
    atomic_write(output, spec.proto.SerializeToString())
    notes = specialization_notes(spec, values)
    if rewrite:
        notes.append("float rewrites (exact): " + (", ".join(f"{k} x{n}" for k, n in spec.rewrites.items())
                                                   or "none applies to this model"))
    notes.append("outputs checked against the original on onnxruntime (seeded random data, the given values, "
                 "no graph optimizations): "
                 + "; ".join(check))
    details = spec.to_dict()
    details["check"] = check
    return ConvertResult(source=str(source), output=str(output), format="onnx", notes=notes, details=details)


convert_to_onnx.takes_input_values = True  # type: ignore[attr-defined]
