"""``validate()``: run a model on one or more boards with real inputs, compare with the FP32
reference on the host, and evaluate the spec's checks into a GO / NO-GO verdict.

::

    from sdk.validation import validate
    result = validate("model.onnx", ["local", "jetson-nano"], data="eval.npz", spec="spec.toml")
    print(result.verdict, result.exit_code)      # "pass" 0 / "fail" 1
    result.write_html("report.html"); result.write_junit("report.xml"); result.write_json("report.json")

A board that fails (unreachable, drops mid-run) does not stop the others: its checks fail with the
cause. Errors that make the whole run impossible (missing data, labels that do not match, a model
or reference that cannot run) raise an :class:`~sdk.errors.EdgeSDKError`.
"""
from __future__ import annotations

import datetime as _dt
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import EdgeSDKError, InputError, ValidationError, first_line
from ..result import BenchResult
from .checks import FAIL, PASS, SKIP, CheckResult, evaluate_checks
from .inputs import Dataset, load_dataset
from .layout import IOMap, io_map
from .runners import HostRunner, open_runner

__all__ = ["validate", "ValidationResult", "BoardRun", "classifier_output", "robustness_on", "strict_checks"]

SCHEMA = "edgesdk.validation/1"
Progress = Optional[Callable[[str], None]]


@dataclass
class BoardRun:
    """What one board did: ``facts`` (device facts), ``bench`` (:class:`sdk.result.BenchResult`),
    ``bench_fp32`` (the FP32 model measured beside it when the spec asks ``min_speedup_vs_fp32``),
    ``baseline`` (the stored result it is compared with, ``--baseline``),
    ``compare`` (per output: cosine, snr_db, max_abs_error, top1_agreement vs the reference),
    ``accuracy`` (top1_board, top1_reference, top1_drop with labels), ``robustness`` (sweep dict),
    ``failed_stage``/``error`` when it failed, and the evaluated ``checks``."""

    board: str
    facts: Optional[Dict[str, Any]] = None
    bench: Optional[BenchResult] = None
    bench_fp32: Optional[BenchResult] = None
    baseline: Optional[BenchResult] = None
    baseline_note: Optional[str] = None
    #: judge the baseline on probe-normalised latency when the machine's speed moved (``--normalize``)
    baseline_normalize: bool = False
    compare: Optional[Dict[str, Dict[str, float]]] = None
    accuracy: Optional[Dict[str, Any]] = None
    robustness: Optional[Dict[str, Any]] = None
    failed_stage: Optional[str] = None
    error: Optional[str] = None
    checks: List[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return FAIL if any(c.verdict == FAIL for c in self.checks) else PASS

    @property
    def emulation(self) -> Optional[Dict[str, Any]]:
        """How the board's code was emulated (its facts' ``emulation``), None when native."""
        return (self.facts or {}).get("emulation") or None

    def to_dict(self) -> Dict[str, Any]:
        out = {"board": self.board, "verdict": self.verdict, "emulation": self.emulation, "failed_stage": self.failed_stage, "error": self.error,
               "seconds": round(self.seconds, 3), "facts": self.facts, "benchmark": _bench_json(self.bench),
               "compare": self.compare, "accuracy": self.accuracy, "robustness": self.robustness,
               "checks": [c.to_dict() for c in self.checks]}
        if self.bench_fp32 is not None:
            out["benchmark_fp32"] = _bench_json(self.bench_fp32)
            out["speedup_vs_fp32"] = self.speedup_vs_fp32
        if self.baseline is not None:
            out["baseline"] = _bench_json(self.baseline)
        return out

    @property
    def speedup_vs_fp32(self) -> Optional[float]:
        """FP32 p50 / this model's p50 on the same board (> 1: faster than FP32), or None."""
        if self.bench is None or self.bench_fp32 is None or self.bench.stats.p50_ms <= 0:
            return None
        return self.bench_fp32.stats.p50_ms / self.bench.stats.p50_ms


def _bench_json(bench: Optional[BenchResult]) -> Optional[Dict[str, Any]]:
    return None if bench is None else bench.to_dict(samples=bool(bench.samples_ms))


@dataclass
class ValidationResult:
    """The whole run: ``boards`` (one :class:`BoardRun` each), the ``model``, ``data`` and
    ``reference`` facts, and the ``spec``. ``verdict`` is pass when no check of any board failed;
    ``exit_code`` 0 (pass) or 1 (fail)."""

    boards: List[BoardRun]
    model: Dict[str, Any]
    data: Dict[str, Any]
    reference: Dict[str, Any]
    spec: Dict[str, Any]
    started: str = ""
    seconds: float = 0.0
    strict: bool = False

    @property
    def verdict(self) -> str:
        return FAIL if any(b.verdict == FAIL for b in self.boards) else PASS

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == PASS else 1

    def failed_checks(self) -> List[str]:
        """``board: check`` for every failed check."""
        return [f"{b.board}: {c.name}" for b in self.boards for c in b.checks if c.verdict == FAIL]

    def not_verified(self) -> List[str]:
        """Short names of the spec's checks that no board could verify (skipped: no sensor, no
        labels...), each once, in check order: ``["power", "temperature"]``."""
        out: List[str] = []
        for b in self.boards:
            for c in b.checks:
                if c.verdict == SKIP and short_check_name(c.name) not in out:
                    out.append(short_check_name(c.name))
        return out

    @property
    def budgets_checked(self) -> int:
        """How many checks besides ``board.run`` the spec enabled (0 without a spec)."""
        return max((sum(1 for c in b.checks if c.name != "board.run") for b in self.boards), default=0)

    def summary_line(self) -> str:
        """The verdict in one line: ``GO``, ``GO (2 budgets not verified: power, temperature)``,
        ``GO: ... no budget was checked (no spec)`` or ``NO-GO: 3 check(s) failed``."""
        if self.verdict == FAIL:
            return f"NO-GO: {len(self.failed_checks())} check(s) failed"
        if self.budgets_checked == 0:
            return "GO: the model ran on every board; no budget was checked (no spec given: --spec)"
        skipped = self.not_verified()
        if skipped:
            return f"GO ({len(skipped)} budget{'s' if len(skipped) != 1 else ''} not verified: {', '.join(skipped)})"
        return "GO: every check passed"

    def summary_rows(self) -> List[Dict[str, Any]]:
        rows = []
        for b in self.boards:
            # an emulated board's timings are the emulator's: never in the board's speed columns
            stats = b.bench.stats if b.bench is not None and not b.emulation else None
            counts = {v: sum(1 for c in b.checks if c.verdict == v) for v in (PASS, FAIL, SKIP)}
            rows.append({"board": b.board, "verdict": b.verdict, "p50_ms": stats.p50_ms if stats else None,
                         "p99_ms": stats.p99_ms if stats else None,
                         "throughput_ips": stats.throughput_ips if stats else None,
                         "mean_w": b.bench.power.mean_w if b.bench is not None and not b.emulation else None,
                         "top1": (b.accuracy or {}).get("top1_board"),
                         "cosine": min((m["cosine"] for m in (b.compare or {}).values()), default=None),
                         "passed": counts[PASS], "failed": counts[FAIL], "skipped": counts[SKIP],
                         "emulated": bool(b.emulation),
                         "emulated_p50_ms": b.bench.stats.p50_ms if b.bench is not None and b.emulation else None,
                         "error": b.error})
        return rows

    def to_dict(self) -> Dict[str, Any]:
        return {"schema": SCHEMA, "verdict": self.verdict, "exit_code": self.exit_code, "summary_line": self.summary_line(),
                "strict": self.strict, "not_verified": self.not_verified(), "budgets_checked": self.budgets_checked,
                "started": self.started,
                "seconds": round(self.seconds, 3), "model": self.model, "data": self.data,
                "reference": self.reference, "spec": self.spec, "summary": self.summary_rows(),
                "boards": [b.to_dict() for b in self.boards]}

    def write_json(self, path: Union[str, os.PathLike]) -> None:
        from ..reports import write_json

        write_json(path, self.to_dict())

    def write_html(self, path: Union[str, os.PathLike]) -> None:
        from ..reports.html import validation_html

        _write_text(path, validation_html(self.to_dict()))

    def write_junit(self, path: Union[str, os.PathLike]) -> None:
        from ..reports.junit import validation_junit

        _write_text(path, validation_junit(self.to_dict()))


def short_check_name(name: str) -> str:
    """``power.mean`` -> ``power``, ``energy.per_inference`` -> ``energy``, ``device.temperature`` -> ``temperature``; other names as they are."""
    if name.startswith("device."):
        return name[len("device."):]
    for suffix in (".mean", ".per_inference"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def strict_checks(checks: List[CheckResult]) -> List[CheckResult]:
    """``--strict``: a skipped check fails (a budget nobody verified is not met)."""
    out = []
    for c in checks:
        if c.verdict == SKIP:
            c = CheckResult(c.name, FAIL, c.measured, c.limit, c.unit, c.op,
                            f"not verified (--strict): {c.reason}" if c.reason else "not verified (--strict)")
        out.append(c)
    return out


def _write_text(path: Union[str, os.PathLike], text: str) -> None:
    from ..atomic import atomic_write

    atomic_write(path, text)


def classifier_output(outputs: Dict[str, np.ndarray]) -> Optional[str]:
    """The first output that looks like class scores ([N, classes>1]), or None."""
    for name, arr in outputs.items():
        if np.ndim(arr) == 2 and np.shape(arr)[1] > 1:
            return name
    return None


def _top1(outputs: Dict[str, np.ndarray], labels: np.ndarray) -> Optional[float]:
    name = classifier_output(outputs)
    if name is None:
        return None
    return float(np.mean(np.argmax(outputs[name], axis=1) == labels))


def _check_labels(ds: Dataset, ref_out: Dict[str, np.ndarray]) -> None:
    if ds.labels is None:
        return
    name = classifier_output(ref_out)
    if name is None:
        raise InputError("labels were given, but the model has no class-score output ([N, classes])",
                         "drop --labels, or use a classifier")
    classes = ref_out[name].shape[1]
    bad = ds.labels[(ds.labels < 0) | (ds.labels >= classes)]
    if bad.size:
        raise InputError(f"labels do not match the model: label {int(bad[0])} is outside 0..{classes - 1} "
                         f"(output '{name}' has {classes} classes)", f"check the labels file {ds.labels_source}")


def board_arrays(specs: Sequence[Any], arrays: Dict[str, np.ndarray], stacked: bool = False) -> Dict[str, np.ndarray]:
    """Inputs in the board protocol's layout: as they are (one batched feed) when every input has
    a dynamic batch dim or they are ``stacked`` already, else with an extra leading sample axis
    (one feed per sample)."""
    if stacked:
        return dict(arrays)
    dynamic = all(s.shape and not (isinstance(s.shape[0], int) and s.shape[0] >= 0) for s in specs)
    return dict(arrays) if dynamic else {k: v[:, None] for k, v in arrays.items()}


def merge_sample_axis(outputs: Dict[str, Any], n: int, like: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
    """Outputs of a per-sample board run ([n, 1, ...]) back to [n, ...]; batched ones unchanged."""
    out = {}
    for k, v in outputs.items():
        a = np.asarray(v)
        ref_ndim = like[k].ndim if like is not None and k in like else None
        if a.ndim >= 2 and a.shape[0] == n and (ref_ndim is None or a.ndim == ref_ndim + 1) and a.shape[1] == 1:
            a = a.reshape((n,) + a.shape[2:])
        out[k] = a
    return out


def _sample_shapes(ds: Dataset) -> Dict[str, List[int]]:
    if ds.stacked:
        return {k: list(v.shape[1:]) for k, v in ds.arrays.items() if k not in ds.values}
    return {k: [1] + list(v.shape[1:]) for k, v in ds.arrays.items()}


def robustness_on(runner: Any, model: Any, ds: Dataset, corruptions: Any = None, severities: Any = "1-5",
                  seed: int = 0, limit: Optional[int] = None, workdir: Optional[Path] = None,
                  target: Optional[str] = None):
    """Run :func:`sdk.robustness.sweep` with ``runner.infer`` on the samples of ``ds`` (image
    folders: the decoded images are corrupted before preprocessing; arrays: a single image-shaped
    input is corrupted within its value range). Inputs with a value (``ds.values``, ``--input-value``)
    go with every sample unchanged. Returns a :class:`~sdk.robustness.RobustnessResult`."""
    from ..data import save_npz
    from ..robustness import from_hwc, sweep, to_hwc

    n = len(ds) if limit is None else min(limit, len(ds))
    labels = None if ds.labels is None else ds.labels[:n]
    data_inputs = [k for k in ds.arrays if k not in ds.values]
    if len(data_inputs) != 1:
        raise InputError("the robustness sweep needs a model with one image input",
                         "give the other inputs' values with --input-value NAME=VALUE")
    name = data_inputs[0]
    # a folder of its own: boards of a fleet sweep at the same time
    tmp = tempfile.TemporaryDirectory(prefix="edgesdk-robust-", dir=str(workdir) if workdir else None)
    where = Path(tmp.name)
    calls = [0]

    specs = model.inputs if hasattr(model, "inputs") else None

    def infer(batch: np.ndarray) -> Dict[str, np.ndarray]:
        calls[0] += 1
        p = where / f"robust_{calls[0]}.npz"
        if ds.values:   # one feed per sample (the board protocol's stacked layout): the row and each value
            arrays = {name: batch[:, None], **{k: np.broadcast_to(v, (len(batch),) + v.shape) for k, v in ds.values.items()}}
        else:
            arrays = {name: batch} if specs is None else board_arrays(specs, {name: batch})
        save_npz(p, arrays)
        try:
            return merge_sample_axis(runner.infer(model, str(p), target=target), len(batch))
        finally:
            p.unlink()

    try:
        if ds.images is not None:
            return sweep(infer, ds.images[:n], prepare=ds.prepare, labels=labels, corruptions=corruptions,
                         severities=severities, seed=seed)
        x = ds.arrays[name][:n]
        if ds.stacked and x.ndim >= 2 and x.shape[1] == 1:   # [n, 1, ...]: one sample per feed, batch 1
            x = x[:, 0]
        if not np.issubdtype(x.dtype, np.floating) and x.dtype != np.uint8:
            raise InputError(f"the robustness sweep cannot corrupt {x.dtype} inputs", "use images or float/uint8 arrays")
        hwc, layout = to_hwc(x)
        value_range = None
        if x.dtype != np.uint8:
            lo, hi = float(np.min(x)), float(np.max(x))
            value_range = (min(0.0, lo), hi if hi > lo else lo + 1.0)
        result = sweep(infer, list(hwc), prepare=lambda imgs: from_hwc(np.stack(imgs), layout).astype(x.dtype),
                       labels=labels, corruptions=corruptions, severities=severities, seed=seed,
                       value_range=value_range)
        result.settings["layout"] = layout
        return result
    finally:
        tmp.cleanup()


def _benchmark(board: Any, model: Any, run_opts: Dict[str, Any], ds: Dataset, precision: Optional[str] = None) -> BenchResult:
    """One benchmark with the spec's [run] settings (the board's or the host runner's)."""
    from ..bench import EarlyStop

    kw: Dict[str, Any] = {"warmup": int(run_opts["warmup"])} if "warmup" in run_opts else {}
    if "early_stop_percentile" in run_opts:
        kw["early_stop"] = EarlyStop(float(run_opts["early_stop_percentile"]))
    return board.benchmark(model, target=run_opts.get("target"), precision=precision or run_opts.get("precision"),
                           runs=int(run_opts.get("runs", 100)), min_seconds=float(run_opts.get("min_seconds", 1.0)),
                           input_shapes=_sample_shapes(ds), samples=True,
                           **({"input_values": ds.values} if ds.values else {}),
                           **({"carry": ds.carry} if ds.carry else {}), **kw)


def _ep_readiness(m: Any, ref_m: Any, eps: Sequence[str], shapes: Dict[str, List[int]]) -> Dict[str, Any]:
    """Per EP: onnxruntime's usability checker on the ONNX model (the model itself, else its ONNX
    reference: an .ort file holds the optimised graph of it) at the validated shapes."""
    from ..targets.onnxrt.readiness import check_ep_name, ep_readiness

    names = [check_ep_name(e) for e in eps]
    onnx_m = m if m.format == "onnx" else ref_m if ref_m.format == "onnx" else None
    if onnx_m is None:
        return {e: {"error": f"readiness reads ONNX models; {m.name} is {m.format} (give --reference-model "
                             "the source .onnx)"} for e in names}
    out: Dict[str, Any] = {}
    for e in names:
        r = ep_readiness(onnx_m, e, shapes)
        out[e] = {"model": r.model, "summary": r.summary(), "num_nodes": r.num_nodes,
                  "supported_nodes": r.supported_nodes, "coverage": r.coverage,
                  "partitions": [len(p) for p in r.partitions], "suitability": r.suitability,
                  "unsupported_ops": r.unsupported_ops, "fallback_counts": r.fallback_counts,
                  "assignment": r.assignment, "assignment_note": r.assignment_note}
    return out


@dataclass
class _Extras:
    """What a board run measures beyond the model itself: the FP32 model beside it
    (``min_speedup_vs_fp32``) and the stored baselines (``--baseline``)."""

    fp32_model: Any = None
    baselines: Optional[List[BenchResult]] = None
    baseline_source: str = ""
    normalize: bool = False

    def attach(self, run: BoardRun, board: Any, ds: Dataset, run_opts: Dict[str, Any], say: Callable[[str], None],
               label: str) -> None:
        from ..compare import find_baseline

        if self.baselines is not None and run.bench is not None:
            run.baseline = find_baseline(self.baselines, run.bench)
            run.baseline_normalize = self.normalize
            key = run.bench.key
            run.baseline_note = (f"baseline from {self.baseline_source}" if run.baseline is not None else
                                 f"{self.baseline_source} holds no result of this model x board x target x runtime "
                                 f"(sha256 {key[0][:12]}, {key[1]}, {key[2]} {key[3]})")
        if self.fp32_model is not None:
            say(f"{label}: benchmarking the FP32 model beside it")
            run.bench_fp32 = _benchmark(board, self.fp32_model, run_opts, ds, precision="fp32")


def _run_board(name_or_runner: Any, model: Any, ds: Dataset, inputs_npz: Path, ref_out: Dict[str, np.ndarray],
               ref_top1: Optional[float], spec: Any, workdir: Path, progress: Progress,
               label: Optional[str] = None, iomap: Optional[IOMap] = None,
               extras: Optional["_Extras"] = None) -> BoardRun:
    from ..metrics import compare_outputs

    if label is None:
        label = name_or_runner if isinstance(name_or_runner, str) else getattr(name_or_runner, "name", "board")
    run = BoardRun(board=str(label))
    t0 = time.monotonic()
    stage = "connect"
    say = progress or (lambda _msg: None)
    try:
        runner = open_runner(name_or_runner)
        with runner as board:
            stage = "facts"
            say(f"{label}: checking the device")
            run.facts = board.check()
            stage = "infer"
            say(f"{label}: running {len(ds)} samples")
            run_opts: Dict[str, Any] = dict(spec.run) if spec is not None else {"runs": NO_SPEC_RUNS}
            out = _board_outputs(board, model, inputs_npz, ds, ref_out, run_opts, iomap)
            run.compare = compare_outputs(ref_out, {k: out[k] for k in ref_out})
            run.accuracy = _board_accuracy(out, ds, ref_top1)
            stage = "benchmark"
            say(f"{label}: benchmarking")
            run.bench = _benchmark(board, model, run_opts, ds)
            if extras is not None:
                extras.attach(run, board, ds, run_opts, say, label)
            if spec is not None and spec.robustness is not None:
                stage = "robustness"
                say(f"{label}: robustness sweep")
                run.robustness = _board_robustness(board, model, ds, spec.robustness, workdir, run_opts)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a board that fails must not stop the fleet: record the cause
        run.failed_stage = stage
        run.error = first_line(exc)
        if not isinstance(exc, EdgeSDKError):
            run.error = f"{type(exc).__name__}: {run.error}"
        say(f"{label}: FAILED during {stage}: {run.error}")
    run.seconds = time.monotonic() - t0
    run.checks = emulated_timing_checks(evaluate_checks(run, spec), run.emulation)
    return run


#: checks that judge a board's speed (or power, measured over that time): not under emulation
TIMING_CHECKS = ("latency.p50", "latency.p99", "throughput", "latency.regression", "speedup.vs_fp32",
                 "power.mean", "energy.per_inference")


def emulated_timing_checks(checks: List[CheckResult], emulation: Optional[Dict[str, Any]]) -> List[CheckResult]:
    """On an emulated board (qemu-user: :func:`sdk.hostinfo.emulation`) timings measure the
    emulator, never the board: its speed and power checks are skipped with that reason."""
    if not emulation:
        return checks
    why = f"emulated board ({emulation.get('kind', 'emulation')}): {emulation.get('note', 'timings are not the board')}"
    return [CheckResult(c.name, SKIP, c.measured, c.limit, c.unit, c.op, why)
            if c.name in TIMING_CHECKS and c.verdict != SKIP else c for c in checks]


def _board_outputs(board: Any, model: Any, inputs_npz: Path, ds: Dataset, ref_out: Dict[str, np.ndarray],
                   run_opts: Dict[str, Any], iomap: Optional[IOMap]) -> Dict[str, np.ndarray]:
    """The board's outputs over ``inputs_npz``, named, laid out and shaped as the reference's (or a
    :class:`ValidationError` saying which one is missing or of another shape)."""
    out = board.infer(model, str(inputs_npz), target=run_opts.get("target"), **({"carry": ds.carry} if ds.carry else {}))
    if iomap is not None and not iomap.identity:  # other names (by position or recorded), other layouts
        out = iomap.to_reference(out)
    out = merge_sample_axis(out, len(ds), ref_out)
    missing = [k for k in ref_out if k not in out]
    if missing:
        raise ValidationError(f"the board returned no output '{missing[0]}'")
    bad = [k for k in ref_out if out[k].shape != ref_out[k].shape]
    if bad:
        raise ValidationError(f"output '{bad[0]}' has shape {out[bad[0]].shape} on the board, "
                              f"{ref_out[bad[0]].shape} on the reference")
    return out


def _board_accuracy(out: Dict[str, np.ndarray], ds: Dataset, ref_top1: Optional[float]) -> Dict[str, Any]:
    """Top-1 on the board beside the reference's (with labels), else why it is not measured."""
    if ds.labels is not None and ref_top1 is not None:
        top1 = _top1(out, ds.labels)
        if top1 is None:
            raise ValidationError("the board's outputs hold no class scores, the reference's do")
        return {"top1_board": top1, "top1_reference": ref_top1, "top1_drop": ref_top1 - top1,
                "samples": len(ds)}
    return {"reason": "no labels given (--labels)"}


def _board_robustness(board: Any, model: Any, ds: Dataset, rob: Mapping[str, Any], workdir: Path,
                      run_opts: Dict[str, Any]) -> Dict[str, Any]:
    """The spec's ``[robustness]`` sweep on the board, as a dict."""
    res = robustness_on(board, model, ds, corruptions=rob.get("corruptions"),
                        severities=rob.get("severities", [1, 2, 3, 4, 5]), seed=int(rob.get("seed", 0)),
                        limit=rob.get("max_samples"), workdir=workdir, target=run_opts.get("target"))
    return res.to_dict()


def _on_this_machine(runner: Any) -> bool:
    if isinstance(runner, HostRunner):
        return True
    conn = getattr(getattr(runner, "profile", None), "connection", None)
    return bool(getattr(conn, "is_local", True))  # unknown runner objects: assume local, be safe


def _run_fleet(runners: Sequence[Any], one: Callable[[int], BoardRun], parallel: bool,
               max_workers: int = 16) -> List[BoardRun]:
    """``one(i)`` for every runner, in order. With ``parallel``, each remote board gets its own
    thread (at most ``max_workers`` at once) and the boards on this machine share one (serial) thread."""
    local = [i for i, r in enumerate(runners) if _on_this_machine(r)]
    remote = [i for i in range(len(runners)) if i not in local]
    if not parallel or not remote or len(runners) == 1:
        return [one(i) for i in range(len(runners))]
    from concurrent.futures import ThreadPoolExecutor

    results: Dict[int, BoardRun] = {}

    def serial(indices: List[int]) -> None:
        for i in indices:
            results[i] = one(i)

    groups = ([local] if local else []) + [[i] for i in remote]
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(groups))), thread_name_prefix="edgesdk-validate") as pool:
        for f in [pool.submit(serial, g) for g in groups]:
            f.result()
    return [results[i] for i in range(len(runners))]


def _extras(spec: Any, fp32_model: Any, baseline: Any, normalize: bool = False) -> Optional[_Extras]:
    from ..compare import load_results

    extras = _Extras(normalize=normalize)
    if spec is not None and "min_speedup_vs_fp32" in spec.budgets:
        extras.fp32_model = fp32_model
    if baseline is not None:
        if isinstance(baseline, (str, os.PathLike)):
            extras.baselines, extras.baseline_source = load_results(baseline), f"'{baseline}'"
        else:
            extras.baselines, extras.baseline_source = list(baseline), "the given baselines"
    return extras if (extras.fp32_model is not None or extras.baselines is not None) else None


#: Samples of seeded random data when ``validate`` gets no data.
RANDOM_SAMPLES = 4
#: Measured runs (at least; and at least 1 s) without a spec: no latency budget to check, the
#: figures are for information (a spec's ``[run] runs`` sets them; its default is 100).
NO_SPEC_RUNS = 10


def random_dataset(specs: Sequence[Any], input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                   samples: int = RANDOM_SAMPLES, seed: int = 0,
                   input_values: Optional[Mapping[str, np.ndarray]] = None) -> Dataset:
    """``samples`` seeded random samples for the inputs ``specs`` (see :func:`sdk.data.random_feed`),
    batch dim 1. A dynamic batch dim (the first) defaults to 1; other dynamic dims need
    ``input_shapes`` (:class:`InputError` names the input). ``input_values``: the value of each
    input that is not data, the same in every sample. Inputs without a batch-like first axis (a
    scalar, a state ``[2, N, 128]``) make the samples stacked (``[n, *input_shape]``)."""
    from ..data import random_feed
    from ..tensors import check_input_names
    from .inputs import stack_needed

    shapes: Dict[str, Sequence[int]] = dict(input_shapes or {})
    values = dict(input_values or {})
    check_input_names(shapes, specs)
    stacked = stack_needed(specs, values)
    for s in specs:
        if s.name not in shapes and s.shape and not (isinstance(s.shape[0], int) and s.shape[0] >= 0):
            rest = [d for d in s.shape[1:] if isinstance(d, int) and d >= 0]
            if len(rest) == len(s.shape) - 1:  # only the batch dim is dynamic: a sample of 1
                shapes[s.name] = [1] + rest
    feeds = [random_feed(specs, shapes, seed=seed + i, values=values) for i in range(max(1, samples))]
    join = np.stack if stacked else (lambda parts: np.concatenate(parts, axis=0))
    arrays = {s.name: join([f[s.name] for f in feeds]) for s in specs}
    return Dataset(arrays=arrays, labels=None, names=[f"random {i}" for i in range(len(feeds))],
                   source=f"random (seed {seed})", kind="random", stacked=stacked, values=values,
                   warnings=["no data given: seeded random inputs; outputs are compared with the reference, "
                             "task accuracy is not measured"])


def validate(
    model: Any,
    boards: Sequence[Any],
    data: Optional[Union[str, os.PathLike]] = None,
    *,
    labels: Optional[Union[str, os.PathLike]] = None,
    spec: Any = None,
    reference: Optional[str] = None,
    reference_model: Any = None,
    preprocess: Any = None,
    limit: Optional[int] = None,
    progress: Progress = None,
    parallel: bool = True,
    baseline: Optional[Union[str, os.PathLike, Sequence[BenchResult]]] = None,
    max_workers: int = 16,
    on_board: Optional[Callable[[BoardRun], None]] = None,
    strict: bool = False,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    input_values: Any = None,
    sample_axes: Optional[Mapping[str, Optional[int]]] = None,
    ep_readiness: Sequence[str] = (),
    carry: Optional[Mapping[str, str]] = None,
    normalize: bool = False,
) -> ValidationResult:
    """Validate ``model`` on each of ``boards`` (names, or runner objects with ``check``/``infer``/
    ``benchmark``) with the inputs of ``data`` (and ``labels``). ``spec``: a
    :class:`~sdk.spec.ValidationSpec`, a path to its TOML, or None (only the run itself is checked).
    ``reference``: the host target of the FP32 reference (default: the one that runs the reference
    model's format: onnxruntime for ONNX, tflite for TFLite); ``reference_model``: the model it runs
    (default: ``model`` itself; give the FP32 original when ``model`` is quantized or a .tflite).
    ``data`` None: :data:`RANDOM_SAMPLES` seeded random samples (``input_shapes`` fixes dynamic
    dims). ``limit``: use at most this many samples. ``parallel``: remote boards run at the same time
    (boards on this machine, ``local`` and ``host:*``, always run one after the other so their
    measurements do not disturb each other). ``baseline``: earlier results (a file of ``sdk bench``,
    ``sdk push`` or ``sdk validate`` JSON, or a list of :class:`~sdk.result.BenchResult`); each board's
    p50 is compared with the one of the same model x board x target x runtime version
    (``latency.regression``, limit ``[budgets] max_regression_pct``, default 5 %). With
    ``[budgets] min_speedup_vs_fp32`` the FP32 model (``reference_model``, else ``model``) is measured
    on each board beside ``model`` (``speedup.vs_fp32``). Remote boards run at most ``max_workers`` at
    once (Ansible's forks); ``on_board(run)`` is called as each board finishes (from its worker
    thread), to stream results. ``strict``: a check of the spec that could not be
    verified (skipped: no power sensor, no labels...) fails instead of being listed as not verified.
    ``input_values``: values of inputs that are not data (``{"sr": 16000}`` or ``["sr=16000"]``),
    the same in every sample; an input that chooses an ``If`` branch must have one when ``data``
    is None. ``sample_axes``: which axis of each ``data`` array holds the samples (``None``: the
    array is one value for every sample, e.g. the initial state of a recurrent input).
    ``ep_readiness``: mobile EPs (nnapi, coreml, coreml-mlprogram, xnnpack) whose readiness for the
    model, at the validated input shapes, goes into the report (``model["ep_readiness"]``).
    ``carry`` (``{output: input}``): a streaming model's recurrent state, fed back across samples
    (in order, on the reference and on every board) and across the timed runs. ``normalize``: a
    baseline whose run's speed probe moved is judged on probe-normalised latency (labelled so)
    instead of being inconclusive (as ``sdk compare --normalize``)."""

    from ..model import Model
    from ..spec import ValidationSpec, load_spec

    t0 = time.monotonic()
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    if not boards:
        raise InputError("no board given", "pass --board NAME (repeatable)")
    if spec is not None and not isinstance(spec, ValidationSpec):
        spec = load_spec(spec)
    m = model if isinstance(model, Model) else Model.load(model)
    # resolve every board first: an unknown name is bad input (nothing has run yet), while a
    # board that cannot be reached or drops later fails its own checks and the others go on
    runners = [open_runner(b) for b in boards]
    if spec is not None and spec.run.get("precision"):
        from .runners import check_run_precision

        # a [run] precision the target cannot honour (an FP32 model and int8 on onnxruntime): exit 2
        check_run_precision(m, str(spec.run["precision"]), spec.run.get("target"), runners)
    if preprocess is None and spec is not None:
        preprocess = spec.preprocess
    from ..targets.measure import as_values, check_carry, require_control_values

    check_carry(carry or {}, m)
    values = as_values(input_values, m.inputs)
    if data is None:
        require_control_values(m, values, "sdk validate")
    ds = _validation_dataset(m, data, labels, preprocess, limit, input_shapes, values, sample_axes)
    ds.carry = dict(carry or {})
    say = progress or (lambda _msg: None)
    ref_m = _reference_model(m, reference_model)
    iomap = io_map(m, ref_m)
    if reference is None:
        from ..formats import default_target

        reference = default_target(ref_m)
    say(f"reference: {reference} on the host ({ref_m.name}), {len(ds)} samples")
    ref_out, ref_version = _run_reference(reference, ref_m, _reference_dataset(ds, iomap))
    _check_labels(ds, ref_out)
    ref_top1 = _top1(ref_out, ds.labels) if ds.labels is not None else None
    extras = _extras(spec, ref_m, baseline, normalize)
    reference_facts = {"target": reference, "version": ref_version, "top1": ref_top1, "model": ref_m.name,
                       "model_sha256": ref_m.sha256,
                       "outputs": {k: list(v.shape) for k, v in ref_out.items()}}
    if not iomap.identity:
        reference_facts["io_map"] = iomap.describe()
    with tempfile.TemporaryDirectory(prefix="edgesdk-validate-") as tmp:
        inputs_npz = ds.save_npz(Path(tmp) / "inputs.npz", board_arrays(m.inputs, ds.arrays, ds.stacked))

        def one(i: int) -> BoardRun:
            b = boards[i]
            run = _run_board(runners[i], m, ds, inputs_npz, ref_out, ref_top1, spec, Path(tmp), progress,
                             label=b if isinstance(b, str) else None, iomap=iomap, extras=extras)
            if on_board is not None:
                on_board(run)
            return run

        runs = _run_fleet(runners, one, parallel, max_workers)
    if strict:
        for r in runs:
            r.checks = strict_checks(r.checks)
    model_facts: Dict[str, Any] = {"path": str(m.origin) if m.origin else None, "name": m.name, "sha256": m.sha256,
                   "format": m.format, "inputs": [s.to_dict() for s in m.inputs],
                   "outputs": [s.to_dict() for s in m.outputs]}
    if ep_readiness:
        model_facts["ep_readiness"] = _ep_readiness(m, ref_m, ep_readiness, _sample_shapes(ds))
    return ValidationResult(boards=runs, model=model_facts, data=ds.describe(), reference=reference_facts,
                            spec=spec.to_dict() if spec is not None else {}, started=started,
                            seconds=time.monotonic() - t0, strict=strict)


def _validation_dataset(m: Any, data: Optional[Union[str, os.PathLike]], labels: Optional[Union[str, os.PathLike]],
                        preprocess: Any, limit: Optional[int],
                        input_shapes: Optional[Mapping[str, Sequence[int]]], values: Any = None,
                        sample_axes: Optional[Mapping[str, Optional[int]]] = None) -> Dataset:
    """The samples of ``data`` (with ``labels``), or seeded random ones when no data is given."""
    if data is None:
        if labels is not None:
            raise InputError("labels were given without data", "pass --data with the samples the labels belong to")
        return random_dataset(m.inputs, input_shapes, samples=limit or RANDOM_SAMPLES, input_values=values)
    return load_dataset(data, m.inputs, labels=labels, preprocess=preprocess, limit=limit, values=values,
                        sample_axes=sample_axes)


def _reference_model(m: Any, reference_model: Any) -> Any:
    """The model the reference runs (``m`` itself by default); :func:`.layout.io_map` checks that it
    takes the same inputs."""
    from ..model import Model

    return m if reference_model is None else (
        reference_model if isinstance(reference_model, Model) else Model.load(reference_model))


def _reference_dataset(ds: Dataset, iomap: IOMap) -> Dataset:
    """``ds`` as the reference model takes it: its input names and layouts (:class:`.layout.IOMap`)."""
    if iomap.identity:
        return ds
    import dataclasses

    return dataclasses.replace(ds, arrays=iomap.reference_arrays(ds.arrays),
                               values={iomap.inputs.get(k, (k, None))[0]: v for k, v in ds.values.items()},
                               carry=iomap.reference_names(ds.carry))


def _run_reference(reference: str, ref_m: Any, ds: Dataset) -> Tuple[Dict[str, np.ndarray], Any]:
    """The reference outputs of ``ref_m`` over ``ds`` on the host, and the runtime's version."""
    try:
        with HostRunner(reference, name=f"reference:{reference}") as ref:
            ref_out = ref.run_arrays(ref_m, ds.arrays, stacked=ds.stacked, carry=ds.carry or None)
            ref_version = ref.check().get("runtimes", {}).get(reference)
    except EdgeSDKError as exc:
        raise ValidationError(f"the reference ({reference}) could not run the model: {exc}") from exc
    return ref_out, ref_version

