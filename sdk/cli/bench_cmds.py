"""``sdk bench`` and ``sdk targets``."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import typer

from ._common import carry_option, input_value_option, sample_axis_option
from ..stats import PAIRED_ROUNDS


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cmd)
    app.command("targets")(targets_cmd)


def bench_cmd(
    model: str = typer.Argument(..., help="Model file (.onnx or .tflite)."),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Target name (see `sdk targets`); default: the one that runs the model's "
                                     "format (onnxruntime for .onnx, tflite for .tflite)."),
    input_shape: Optional[List[str]] = typer.Option(
        None, "--input-shape", help="Shape for a dynamic input: NAME=1x3x640x640, or an engine profile "
                                    "NAME=MIN:OPT:MAX (targets that build engines; runs use OPT). Repeatable."),
    input_value: Optional[List[str]] = input_value_option(),
    sample_axis: Optional[List[str]] = sample_axis_option(),
    carry: Optional[List[str]] = carry_option(),
    runs: int = typer.Option(100, "--runs", min=1, help="Minimum number of measured runs."),
    warmup: int = typer.Option(10, "--warmup", min=0, help="Warm-up runs before measuring."),
    min_seconds: float = typer.Option(1.0, "--min-seconds", min=0.0, help="Minimum measured duration (s)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="Runtime threads."),
    provider: Optional[List[str]] = typer.Option(
        None, "--provider", help="onnxruntime execution provider in priority order: cpu, cuda, tensorrt, xnnpack..."),
    option: Optional[List[str]] = typer.Option(None, "--option", "-o", help="Target option KEY=VALUE (repeatable)."),
    data: Optional[str] = typer.Option(
        None, "--data", help="Real inputs: a folder of images (see --preprocess), or a .npy/.npz file or folder "
                             "(up to 64 samples are cycled)."),
    preprocess: Optional[List[str]] = typer.Option(
        None, "--preprocess", help="Image preprocessing for an image folder: a .toml file or KEY=VALUE "
                                   "(size=224x224 mean=... std=... layout=NCHW)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the result JSON here ('-' for stdout)."),
    samples: bool = typer.Option(False, "--samples", help="Include every latency sample in the JSON."),
    early_stop: Optional[float] = typer.Option(
        None, "--early-stop", min=1.0, max=99.99,
        help="Keep measuring until this percentile has a 95% interval (MLPerf-style; 99: >= 368 runs)."),
    max_ci_width: Optional[float] = typer.Option(
        None, "--max-ci-width", min=0.0, help="With --early-stop: until that interval is at most this % wide "
                                              "(bounded by --max-seconds)."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", min=0.0, help="Stop measuring after this long (s)."),
    pipeline: Optional[str] = typer.Option(None, "--pipeline", help="Time a whole pipeline per frame instead: "
                                                                   "'detect' (decode, preprocess, inference, "
                                                                   "YOLO post-processing) over the images of --data."),
    device: str = typer.Option("auto", "--device", help="--pipeline: pre/post-processing on auto | cpu | cuda."),
    report: Optional[str] = typer.Option(None, "--report", help="--pipeline: write an HTML report here."),
    against: Optional[str] = typer.Option(None, "--against", help="Time the model against this reference model "
                                                                  "instead, in 31 interleaved rounds (exit 1 when "
                                                                  "the model is slower)."),
) -> None:
    """Measure latency on this machine (MLPerf SingleStream: --runs AND --min-seconds)."""
    from ..bench import EarlyStop
    from ..errors import InputError
    from ..targets import benchmark
    from ..targets.measure import parse_carry
    from ..tensors import parse_shape_profiles
    from ._common import check_output, write_json

    if max_ci_width is not None and early_stop is None:
        raise InputError("--max-ci-width needs --early-stop PERCENTILE")

    check_output(json_path, "--json")          # before any work: no late failure, no folder created
    if not min_seconds <= 86400:               # also NaN and inf: a run that would never end
        raise InputError(f"bad --min-seconds {min_seconds}", "give a number of seconds from 0 to 86400")
    profiles = parse_shape_profiles(input_shape or [])
    shapes = {name: opt for name, (_, opt, _) in profiles.items()}
    target, opts = _bench_options(model, target, input_shape, option, threads, provider)
    if against:
        from .compare_cmds import print_paired, run_paired

        cmp = run_paired(against, model, target=target, input_shape=input_shape, threads=threads, data=data,
                         rounds=PAIRED_ROUNDS, round_seconds=0.1, threshold=None, input_value=input_value)
        if json_path:
            write_json(json_path, cmp.to_dict())
        if json_path != "-":
            print_paired(cmp, against, model)
        raise typer.Exit(cmp.exit_code)
    if pipeline:
        from .pipeline_cmds import run_pipeline_cmd

        from ..formats import default_target

        run_pipeline_cmd(pipeline, model, data=data, target=target or default_target(model), target_options=opts, shapes=shapes, frames=runs,
                         warmup=warmup, device=device, json_path=json_path, report=report)
        return
    early = EarlyStop(early_stop, max_ci_width) if early_stop is not None else None
    feeds: Any = data
    if data is not None and (preprocess or sample_axis):
        from ..model import Model
        from ..sources import open_source, parse_preprocess, parse_sample_axes
        from ..targets.measure import as_values

        specs = Model.load(model).inputs
        feeds = open_source(data, specs, parse_preprocess(preprocess) if preprocess else None,
                            values=as_values(list(input_value or []), specs),
                            sample_axes=parse_sample_axes(sample_axis, specs))
    result = benchmark(model, target, target_options=opts, input_shapes=shapes, data=feeds, warmup=warmup,
                       runs=runs, min_seconds=min_seconds, max_seconds=max_seconds, seed=seed, early_stop=early,
                       input_values=list(input_value or []), carry=parse_carry(carry))
    if json_path == "-":
        write_json("-", result.to_dict(samples=samples))
        return
    _print_bench(result, json_path, samples)


def _bench_options(model: str, target: Optional[str], input_shape: Optional[List[str]],
                   option: Optional[List[str]], threads: Optional[int],
                   provider: Optional[List[str]]) -> Tuple[Optional[str], Dict[str, Any]]:
    """The target (the model format's default when MIN:OPT:MAX profiles need one) and its
    options from --option, --input-shape profiles, --threads and --provider."""
    from ..errors import InputError
    from ..targets import target_class
    from ._common import parse_options

    opts = parse_options(option)
    if any(":" in item for item in input_shape or []):
        from ..formats import default_target

        target = target or default_target(model)
        if "input_shapes" not in target_class(target).default_options:
            raise InputError(f"target '{target}' takes no MIN:OPT:MAX shape profiles", "give one shape: NAME=1x3x640x640")
        opts.setdefault("input_shapes", list(input_shape or []))
    if threads is not None:
        opts["threads"] = threads
    if provider:
        opts["providers"] = [p for item in provider for p in item.split(",") if p]
    return target, opts


def _print_bench(result: Any, json_path: Optional[str], samples: bool) -> None:
    """The latency table, host line and noise notes of a `sdk bench` result; the JSON if asked."""
    from pathlib import Path

    from ._common import console, latency_table, noise_lines, write_json

    c = console()
    c.print(latency_table(f"{Path(str(result.model['path'])).name} latency", [(result.target, result)]))
    delegated = (result.runtime or {}).get("delegated")
    taken = (f"; delegates took {delegated['nodes']} of {delegated['of']} nodes ({delegated['partitions']} "
             "partitions)") if delegated else ""
    if delegated and delegated.get("other_subgraphs"):
        taken += (f" of the main graph; its {delegated['other_subgraphs']} other subgraphs (loop bodies) "
                  "are not listed by the runtime")
    c.print(f"host: {result.host['cpu']}, {result.host['cores']} cores; "
            f"{result.target} {result.runtime_version or ''}".rstrip() + taken)
    for note in (result.settings or {}).get("notes") or []:
        c.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    for line in noise_lines(result.target, result):
        c.print(line, markup=False, highlight=False, soft_wrap=True)
    if json_path:
        write_json(json_path, result.to_dict(samples=samples))
        c.print(f"wrote {json_path}")


def targets_cmd(
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List targets: available here or not (and why), runtime version."""
    from ..targets import target_class, target_names
    from ..errors import EdgeSDKError
    from ._common import console, styled, write_json

    rows: List[Dict[str, Any]] = []
    for name in target_names():
        try:
            cls = target_class(name)
            avail = cls.availability(deep=True)
            rows.append({"name": name, "available": avail.available, "version": avail.version,
                         "reason": avail.reason, "details": avail.details, "description": cls.description})
        except EdgeSDKError as exc:
            rows.append({"name": name, "available": False, "version": None, "reason": str(exc),
                         "details": {}, "description": ""})
    if json_out:
        write_json(None, rows)
        return
    from rich.table import Table

    t = Table(title="targets")
    for col in ("target", "available", "version", "notes"):
        t.add_column(col)
    for r in rows:
        notes = r["reason"] or ", ".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}"
                                         for k, v in r["details"].items()) or r["description"]
        t.add_row(r["name"], styled("[green]yes[/green]" if r["available"] else "[red]no[/red]"), r["version"] or "-",
                  notes)
    console().print(t)
