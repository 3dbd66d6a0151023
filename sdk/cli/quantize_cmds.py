"""``sdk quantize``: FP32 ONNX + calibration data -> INT8 QDQ ONNX for a target, with a report."""
from __future__ import annotations

from pathlib import Path

from typing import Any, Callable, Dict, List, Optional, Tuple

import typer

from ._common import input_value_option, sample_axis_option


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize_cmd)


def quantize_cmd(
    model: str = typer.Argument(..., help="FP32 ONNX model."),
    calib: str = typer.Option(..., "--calib", help="Calibration data: image folder, .npy/.npz file or folder."),
    output: str = typer.Option(..., "--output", "-o", help="Where to write the INT8 model: QDQ .onnx, or a "
                                                           "full-integer .tflite with --target tflite."),
    method: Optional[str] = typer.Option(
        None, "--method", help="Calibration method: auto, minmax, percentile, entropy, mse (default: the target's; "
                               "auto for onnxruntime: per tensor, the least expected quantization error)."),
    percentile: Optional[float] = typer.Option(None, "--percentile", help="Percentile for --method percentile (99.99)."),
    target: str = typer.Option("onnxruntime", "--target", "-t", help="Quantization scheme: onnxruntime, tensorrt, tflite."),
    ep: Optional[str] = typer.Option(
        None, "--ep", help="With --target onnxruntime: place Q/DQ by a mobile EP's rules: xnnpack, nnapi or qnn."),
    preprocess: Optional[List[str]] = typer.Option(
        None, "--preprocess", help="Image preprocessing: spec.toml and/or key=value (size=224x224, mean=..., layout=NHWC)."),
    input_shape: Optional[List[str]] = typer.Option(
        None, "--input-shape", help="Fix a dynamic input: NAME=1x3x224x224 (repeatable)."),
    input_value: Optional[List[str]] = input_value_option(),
    sample_axis: Optional[List[str]] = sample_axis_option("--calib"),
    eval_data: Optional[str] = typer.Option(
        None, "--eval", help="Held-out data for the accuracy report (.npz with 'y' labels, or see --labels)."),
    labels: Optional[str] = typer.Option(None, "--labels", help=".npy of class ids for the --eval samples."),
    max_drop: Optional[float] = typer.Option(
        None, "--max-drop", help="Accuracy budget in top-1 points; the most sensitive layers stay in float until it holds."),
    min_cosine: Optional[float] = typer.Option(
        None, "--min-cosine", help="Budget: minimum output cosine vs FP32 (with --eval and no budget given: 0.99)."),
    task_metric: Optional[str] = typer.Option(
        None, "--task-metric", help="Budget on the task's own result vs FP32 (with --eval): top1, corpus:NAME "
                                    "or FILE.py:FUNCTION (reference, candidate) -> float; replaces the cosine default."),
    min_task_metric: Optional[float] = typer.Option(
        None, "--min-task-metric", help="Least task metric vs FP32 for --task-metric (default 0.99)."),
    no_budget: bool = typer.Option(
        False, "--no-budget", help="Keep every layer in INT8; with --eval report accuracy, without it check nothing."),
    strict: bool = typer.Option(
        False, "--strict", help="Exit 1 when accuracy could not be checked (no --eval and too few calibration "
                                "samples to hold out 8), or when the budget holds but the samples are too few "
                                "to establish it (an output's 90% interval reaches below its bound)."),
    no_balance: bool = typer.Option(
        False, "--no-balance", help="Keep a MatMul/Gemm fed by a LayerNorm in float when the budget needs it, "
                                    "without first trying it in INT8 with activation-weight balancing."),
    no_margin: bool = typer.Option(
        False, "--no-margin", help="Let the fallback stop at the fewest float layers whose score on the held-out "
                                   "samples meets the budget, not the fewest whose 90% interval stays above it."),
    output_role: Optional[List[str]] = typer.Option(
        None, "--output-role", help="NAME=ROLE: how the default budget judges an output (detections, scores, mask, "
                                    "classes, log, embedding, cosine), over the role recognised (repeatable)."),
    allow_slower: bool = typer.Option(
        False, "--allow-slower", help="Accept an INT8 model slower than FP32 on this host (else exit 1)."),
    threads: Optional[int] = typer.Option(
        None, "--threads", min=1, help="Intra-op threads of the speed check (default: onnxruntime's, as sdk bench); "
                                       "time it as you will run it."),
    no_speed_check: bool = typer.Option(
        False, "--no-speed-check", help="Do not time FP32 vs INT8 on this host (onnxruntime target)."),
    sensitivity: bool = typer.Option(False, "--sensitivity", help="Measure per-layer sensitivity (needs --eval)."),
    exclude: Optional[List[str]] = typer.Option(None, "--exclude", help="Node name to keep in float (repeatable)."),
    no_bias_correction: bool = typer.Option(False, "--no-bias-correction", help="Skip bias correction."),
    per_tensor: bool = typer.Option(False, "--per-tensor", help="Per-tensor weights instead of per-channel."),
    reduce_range: Optional[bool] = typer.Option(
        None, "--reduce-range/--full-range", help="7-bit or 8-bit weights (default: 7-bit where the CPU the model "
                                                  "is for needs them: x86 without VNNI with onnxruntime)."),
    cpu: Optional[str] = typer.Option(
        None, "--cpu", help="The CPU the model is for, ARCH:FLAG,FLAG,... as /proc/cpuinfo lists them "
                            "(x86_64:avx2,fma); default: this host."),
    board: Optional[str] = typer.Option(
        None, "--board", help="Quantize for this board's CPU: its architecture and CPU flags read from the board over "
                              "SSH (as `sdk boards check`), accuracy judged on the exact int8 arithmetic; not with --cpu."),
    activation_dtype: Optional[str] = typer.Option(None, "--activation-dtype", help="uint8 or int8 (onnxruntime)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use at most this many calibration samples."),
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1, help="Calibration threads, or Ray actors (default: all cores / the cluster's CPUs)."),
    executor: str = typer.Option("threads", "--executor", help="Where calibration runs: threads (this process) or ray."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="Ray cluster HOST:PORT for --executor ray (default: start a local Ray)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, help="Samples per calibration run."),
    stats: Optional[str] = typer.Option(
        None, "--stats", help="Calibration statistics file (.npz): reused when it matches the model, else written."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not reuse or keep statistics in the cache folder."),
    trt_cache: Optional[str] = typer.Option(None, "--trt-cache", help="TensorRT calibration cache path (tensorrt)."),
    trt_version: Optional[str] = typer.Option(None, "--trt-version", help="Version in the cache header, e.g. 8510."),
    ranges: Optional[str] = typer.Option(None, "--ranges", help="Write per-tensor quantization ranges as JSON here."),
    report: Optional[str] = typer.Option(None, "--report", help="Write the report JSON here ('-' for stdout)."),
    io: str = typer.Option("float", "--io", help="-o *.tflite: float or int8 model inputs/outputs."),
    fallback_precision: str = typer.Option(
        "auto", "--fallback-precision", help="A .tflite's sensitive layers: int16 (16x8, then float), float, or auto "
                                             "(16x8 first with --io int8, else float)."),
) -> None:
    """Quantize an FP32 ONNX model to INT8 (QDQ) for a target, from calibration data streamed once."""
    from ..quantize.api import QuantizeConfig, quantize
    from ..sources import parse_preprocess
    from ..tensors import parse_input_shapes
    from ..errors import InputError
    from ._common import check_output, err_console, write_json

    if ray_address is not None and executor != "ray":
        raise InputError("--ray-address needs --executor ray")
    if min_task_metric is not None and task_metric is None:
        raise InputError("--min-task-metric needs --task-metric", "name the metric: top1, corpus:NAME or FILE.py:FUNCTION")
    if task_metric is not None:
        from ..quantize.task_metrics import resolve_task_metric

        resolve_task_metric(task_metric)  # a bad name or script: one line, before any work

    for path, opt in ((output, "--output"), (stats, "--stats"), (trt_cache, "--trt-cache"), (ranges, "--ranges"),
                      (report, "--report")):
        check_output(path, opt, stdout_ok=opt == "--report")     # before any work: no late failure
    from ..quantize.schemes.mobile import scheme_for_ep

    target = scheme_for_ep(target, ep)
    cpu_arch, cpu_flags = _parse_cpu(cpu)
    cpu_source = None
    if board is not None:
        if cpu is not None:
            raise InputError("--board and --cpu both name the CPU the model is for", "give one of them")
        from ..remote import Board

        with Board(board) as b:
            cpu_arch, cpu_flags = b.cpu()
            cpu_source = f"board {b.name} (its /proc/cpuinfo)"
    from ..quantize.roles import parse_output_roles

    roles = parse_output_roles(output_role or [])
    spec = parse_preprocess(preprocess)
    shapes = parse_input_shapes(input_shape or [])
    params = {"percentile": percentile} if percentile is not None else {}
    import warnings

    progress_cb, finish = _progress(err_console())
    cfg = QuantizeConfig(
        scheme=target, method=method, method_params=params, preprocess=spec, input_shapes=shapes or None,
        input_values=list(input_value or []), sample_axes=_sample_axes(model, sample_axis),
        eval_data=eval_data, labels=labels, max_drop=max_drop, min_cosine=min_cosine, budget=not no_budget,
        task_metric=task_metric, min_task_metric=min_task_metric, sensitivity=sensitivity or None,
        exclude=exclude or (), bias_correction=not no_bias_correction,
        per_channel=not per_tensor, reduce_range=reduce_range, activation_dtype=activation_dtype, workers=workers,
        cpu_arch=cpu_arch, cpu_flags=cpu_flags, cpu_source=cpu_source, strict=strict, output_roles=roles or None, balance=not no_balance,
        margin=not no_margin,
        executor=executor, executor_options={"address": ray_address} if ray_address else None,
        batch_size=batch_size, calib_limit=limit, stats_path=stats, use_cache=not no_cache,
        report_path=report if report not in (None, "-") else None, trt_cache=trt_cache, trt_version=trt_version,
        ranges_path=ranges, speed_check=not no_speed_check, speed_threads=threads, allow_slower=allow_slower,
        progress=progress_cb, tflite_io=io, fallback_precision=fallback_precision)
    try:
        with warnings.catch_warnings():  # the report's warnings are printed below, once
            warnings.simplefilter("ignore", UserWarning)
            result = quantize(model, calib, cfg, output=output)
    finally:
        finish()
    rep = result.report
    if report == "-":
        write_json("-", rep)
    else:
        _print_report(rep, report)
    for f in result.failures:
        err_console().print(f"error: {f}", markup=False, highlight=False)
    if result.failures:
        if eval_data and Path(output).is_file():  # the model was written: say which layer breaks it
            err_console().print(f"explain: sdk debug diff {model} --against {output} --data {eval_data}",
                                markup=False, highlight=False)
        raise typer.Exit(1)


def _sample_axes(model: str, items: Optional[List[str]]) -> Any:
    from .validate_cmds import _sample_axes as parse

    return parse(model, items)


def _parse_cpu(text: Optional[str]) -> Tuple[Optional[str], Optional[List[str]]]:
    """``ARCH:FLAG,FLAG`` -> (arch, flags); None -> this host (None, None)."""
    from ..errors import InputError

    if text is None:
        return None, None
    arch, sep, flags = text.partition(":")
    if not arch.strip():
        raise InputError(f"--cpu {text!r} names no architecture", "give ARCH:FLAG,FLAG, e.g. x86_64:avx2,fma")
    return arch.strip(), [f.strip().lower() for f in flags.split(",") if f.strip()]


def _print_rewrites(c: Any, rewrites: Dict[str, int]) -> None:
    """The float rewrites the quantizer prepared the model with (``sdk.formats.onnx_rewrite``)."""
    what = {"hardswish_fused": "written-out hard-swish as x*HardSigmoid(x)",
            "hardswish_op": "hard-swish as one HardSwish (the target's kernel)",
            "affine_folded": "scalar affines folded into the layer before",
            "conv_transpose_folded": "ConvTransposes took the bias/BatchNorm/per-channel ops after them",
            "affine_folded_forward": "scalar affines folded into the unpadded conv after"}
    if rewrites:
        c.print("float graph rewritten (exact; FP32 is judged with it, INT8 timed against it and the model as given): "
                + ", ".join(f"{n} {what.get(k, k)}" for k, n in rewrites.items()))


def _budget_lines(bud: Dict[str, Any], fallback: bool) -> str:
    """What the budget was checked on and whether it holds; after a fallback, what it aimed at."""
    verdict = "holds" if bud["holds"] else "does not hold" if bud["holds"] is False else "none asked"
    aim = f"\nthe fallback aimed at {bud['fallback_aim']}" if fallback and bud.get("fallback_aim") else ""
    return f"budget checked on {bud['checked_on']}: {verdict}{aim}"


def _print_report(rep: Dict[str, Any], report: Optional[str]) -> None:
    from ..textsafe import inert
    from ._common import console

    c = console()
    cal = rep["calibration"]
    how = f"reused {cal['reused_statistics']}" if cal["reused_statistics"] else f"{cal['time_s']:.1f} s"
    if not cal["reused_statistics"] and cal.get("executor", "threads") != "threads":
        how += f" on {cal['executor']}, {cal['workers']} workers"
    c.print(f"calibration: {cal['samples']} samples ({how}), method {rep['method']['name']}, target {rep['target']}")
    if cal.get("skipped"):
        c.print(f"[yellow]skipped {cal['skipped']} undecodable image(s)[/yellow]", markup=True)
    cpu = rep.get("cpu") or {}
    if cpu.get("reduce_range") and rep["scheme"].get("reduce_range"):
        c.print(f"weights: 7-bit for the CPU the model is for ({cpu['arch']}, {cpu['source']}): {cpu['reduce_range']}",
                markup=False)
    lay = rep["layers"]
    c.print(f"quantized {lay['quantized']} of {lay['quantizable']} layers, {lay['activations_with_qdq']} activations, "
            f"{lay['weights']} of {lay['weights_total']} weights; bias correction on "
            f"{rep['bias_correction']['corrected_layers']} layers")
    _print_rewrites(c, (rep.get("model") or {}).get("float_rewrites") or {})
    for w in rep["warnings"]:
        c.print(f"[yellow]warning:[/yellow] {inert(w)}", markup=True)
    acc = rep.get("accuracy")
    bud = rep.get("budget") or {}
    if bud.get("checked"):
        c.print(_budget_lines(bud, bool(rep.get("fallback_layers"))), markup=False)
    if acc:
        for name, m in acc["outputs"].items():
            extra = f", top-1 agreement {100 * m['top1_agreement']:.1f}%" if "top1_agreement" in m else ""
            if m.get("judged_with"):
                extra += f"; role {m['role']}: judged with {m['judged_with']}"
            elif "role" in m:
                extra += f"; role {m['role']}: {m['role_metric']} {m['role_score']:.4f} (min {m['role_min']:g}"
                if "role_interval" in m:
                    lo, hi = m["role_interval"]
                    extra += f"; {100 * m['role_interval_level']:.0f}% interval {lo:.4f}-{hi:.4f}"
                extra += ")"
            if "element_agreement" in m:
                extra += f", equal elements {100 * m['element_agreement']:.1f}%"
            c.print(f"{name}: cosine {m['cosine']:.5f}, SNR {m['snr_db']:.1f} dB, max abs {m['max_abs_error']:.4g}{extra}")
        if "task_metric" in acc:
            c.print(f"task metric vs FP32: {acc['task_metric']:.4f} (1.0 = the same results)")
        if "task" in acc:
            t = acc["task"]
            c.print(f"top-1 accuracy: FP32 {t['fp32']:.2f}%, INT8 {t['int8']:.2f}% (drop {t['drop_points']:.2f} points)")
    if rep.get("sensitivity"):
        worst = ", ".join(f"{r['layer']} ({r['added_error']:.2e} x gain {r['gain']:.2g})" for r in rep["sensitivity"][:5])
        c.print(f"most sensitive layers (relative error they add x its gain to the outputs): {worst}")
    if rep.get("fallback_layers"):
        where = "in 16x8" if (rep.get("fallback") or {}).get("precision") == "int16" else "in float"
        c.print(f"kept {where}: {', '.join(rep['fallback_layers'])}")
    balanced = [k for k, v in (rep.get("layer_precision") or {}).items() if "balanced" in v["precision"]]
    if balanced:
        c.print(f"INT8 with activation-weight balancing (instead of float): {', '.join(balanced)}")
    lat = rep.get("latency")
    if lat:
        ci = lat.get("speedup_ci95")
        c.print(f"latency on this host ({lat['runtime']}, threads {lat.get('threads')}, shapes {lat['input_shapes']}): "
                f"FP32 {lat['fp32_ms']:.2f} ms, INT8 {lat['int8_ms']:.2f} ms ({lat['speedup']:.2f}x"
                + (f", 95% interval {ci[0]:.2f}-{ci[1]:.2f}x" if ci else "") + ")"
                + (f"; the rewritten FP32 {lat['rewritten_fp32_ms']:.2f} ms ({lat['speedup_vs_rewritten_fp32']:.2f}x)"
                   if lat.get("speedup_vs_rewritten_fp32") else ""), markup=False, highlight=False)
    for kind, path in rep.get("outputs", {}).items():
        c.print(f"wrote {kind}: {path}")
    if report:
        c.print(f"wrote report: {report}")


def _progress(console: Any) -> Tuple[Callable[..., None], Callable[[], None]]:
    """A rich progress bar over calibration samples (and sensitivity layers)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks = {}
    started = [False]

    def update(stage: str, done: int, total: Optional[int]) -> None:
        if not started[0]:
            bar.start()
            started[0] = True
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    def finish() -> None:
        if started[0]:
            bar.stop()

    return update, finish
