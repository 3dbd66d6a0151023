"""Checks: each spec key becomes one named check with a verdict (pass, fail or skip + reason).

Checks are registered by name in :data:`CHECKS`; each says which spec key enables it, which stage
of the board run it needs (``facts``, ``infer``, ``benchmark``, ``robustness``) and how it
evaluates. When the board failed at or before that stage, the check fails with the cause.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..registry import Registry

__all__ = ["CheckResult", "CHECKS", "evaluate_checks", "PASS", "FAIL", "SKIP"]

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class CheckResult:
    """One check: ``name`` (e.g. ``latency.p99``), ``verdict`` (pass/fail/skip), the ``measured``
    value and the ``limit`` in ``unit``, the comparison ``op`` (<=, >=, ==), and ``reason``
    (why it failed or was skipped, or a detail)."""

    name: str
    verdict: str
    measured: Any = None
    limit: Any = None
    unit: str = ""
    op: str = ""
    reason: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class _Check:
    name: str
    section: str
    key: Optional[str]
    stage: str
    fn: Callable[[Any, Any, Any], Tuple[str, Any, str]]  # (run, spec, limit) -> (verdict, measured, reason)
    unit: str = ""
    op: str = ""
    doc: str = ""
    default: Optional[Callable[[Any], Any]] = None  # run -> limit when the spec has no key (None: off)


CheckFn = Callable[[Any, Any, Any], Tuple[str, Any, str]]

#: Check name -> its definition, in evaluation order (plugins: entry-point group ``edgesdk.checks``).
CHECKS: "Registry[_Check]" = Registry("check", entry_points="edgesdk.checks")


def register_check(name: str, section: str, key: Optional[str], stage: str, unit: str = "", op: str = "", doc: str = "",
                   default: Optional[Callable[[Any], Any]] = None) -> Callable[[CheckFn], CheckFn]:
    """Decorator: register ``fn(run, spec, limit) -> (verdict, measured, reason)``. ``default``:
    ``run -> limit`` for runs that enable the check without the spec key (None: not enabled)."""
    def deco(fn: CheckFn) -> CheckFn:
        CHECKS.register(name, _Check(name, section, key, stage, fn, unit, op, doc, default))
        return fn
    return deco


def _cmp(measured: Optional[float], limit: float, op: str, missing: str) -> Tuple[str, Any, str]:
    if measured is None:
        return SKIP, None, missing
    if isinstance(measured, float) and math.isnan(measured):
        return FAIL, measured, "measured value is NaN"
    ok = measured <= limit if op == "<=" else measured >= limit
    return (PASS if ok else FAIL), measured, ""


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


# -- budgets ------------------------------------------------------------------------------------------
def _stat(run: Any, name: str) -> Optional[float]:
    """A latency statistic of the board's :class:`~sdk.result.BenchResult` (``p50_ms``,
    ``throughput_ips``, ...), or None without a benchmark."""
    return None if run.bench is None else getattr(run.bench.stats, name)


@register_check("latency.p50", "budgets", "p50_latency_ms", "benchmark", "ms", "<=")
def _p50(run, spec, limit):
    return _cmp(_stat(run, "p50_ms"), limit, "<=", "no latency result")


@register_check("latency.p99", "budgets", "p99_latency_ms", "benchmark", "ms", "<=")
def _p99(run, spec, limit):
    verdict, measured, reason = _cmp(_stat(run, "p99_ms"), limit, "<=", "no latency result")
    if run.bench is not None and run.bench.stats.ci("p99") is None and verdict != SKIP:
        from ..stats import min_runs_for

        reason = (f"{run.bench.stats.count} runs give the p99 no 95% interval (needs {min_runs_for(99.0)}): "
                  "raise [run] runs")
    return verdict, measured, reason


@register_check("throughput", "budgets", "min_throughput_ips", "benchmark", "inf/s", ">=")
def _throughput(run, spec, limit):
    return _cmp(_stat(run, "throughput_ips"), limit, ">=", "no throughput result")


def _power_reason(run) -> str:
    if run.bench is None:
        return "no benchmark result"
    reason = run.bench.power.reason or run.bench.energy.reason
    return str(reason or "no power measurement: the board reports no power sensor")


@register_check("power.mean", "budgets", "max_mean_power_w", "benchmark", "W", "<=")
def _power(run, spec, limit):
    return _cmp(None if run.bench is None else run.bench.power.mean_w, limit, "<=", _power_reason(run))


@register_check("energy.per_inference", "budgets", "max_energy_mj_per_inference", "benchmark", "mJ", "<=")
def _energy(run, spec, limit):
    return _cmp(None if run.bench is None else run.bench.energy.total_mj, limit, "<=", _power_reason(run))


_RUN_NAMES = {"A": "the baseline", "B": "this run"}


def _baseline_default(run: Any) -> Optional[float]:
    from ..compare import DEFAULT_THRESHOLD_PCT

    return DEFAULT_THRESHOLD_PCT if getattr(run, "baseline_note", None) is not None else None


@register_check("latency.regression", "budgets", "max_regression_pct", "benchmark", "%", "<=",
                default=_baseline_default)
def _regression(run, spec, limit):
    """p50 against the stored baseline of this model x board x runtime: fails when the 95%
    intervals do not overlap AND the p50 is more than ``limit`` % slower."""
    from ..compare import SLOWER, compare_results

    if run.bench is None:
        return SKIP, None, "no latency result"
    if run.baseline is None:
        return SKIP, None, run.baseline_note or "no baseline given (--baseline FILE)"
    cmp = compare_results(run.baseline, run.bench, threshold_pct=float(limit),
                          normalize=bool(getattr(run, "baseline_normalize", False)))
    c = cmp.change("p50")
    ci = "" if c.change_ci_pct is None else f" (95% interval {c.change_ci_pct[0]:+.1f}..{c.change_ci_pct[1]:+.1f} %)"
    scaled = " (probe-normalised)" if cmp.normalized else ""
    where = f"p50{scaled} {c.b_ms:.4g} ms vs baseline {c.a_ms:.4g} ms: {c.change_pct:+.1f} %{ci}"
    if cmp.beyond_noise is not None:
        return FAIL, round(c.change_pct, 3), (f"{where}: slower by more than the noise allows ({cmp.beyond_noise.change_pct:+.1f} % "
                                              f"probe-scaled, beyond {cmp.threshold_pct:.1f} %; intervals do not overlap), despite: {'; '.join(cmp.reasons_naming(_RUN_NAMES))}")
    if cmp.inconclusive:
        return SKIP, round(c.change_pct, 3), f"{where}: inconclusive, {'; '.join(cmp.reasons_naming(_RUN_NAMES))}"
    if c.verdict == SLOWER:
        return FAIL, round(c.change_pct, 3), f"{where}, intervals do not overlap"
    if c.overlap is None:
        why = "too few runs for intervals"
    elif c.overlap:
        why = "within the intervals"
    else:
        why = "faster than the baseline" if c.change_pct < 0 else "a change within the limit"
    return PASS, round(c.change_pct, 3), f"{where}: {why}"


@register_check("speedup.vs_fp32", "budgets", "min_speedup_vs_fp32", "benchmark", "x", ">=")
def _speedup(run, spec, limit):
    """FP32 p50 / this model's p50, both measured on the board in the same run."""
    speedup = run.speedup_vs_fp32
    if speedup is None:
        return SKIP, None, "the FP32 model was not measured"
    fp32, mine = run.bench_fp32.stats.p50_ms, run.bench.stats.p50_ms
    where = f"p50 {mine:.4g} ms vs FP32 {fp32:.4g} ms"
    busy = [name for name, r in (("this model", run.bench), ("the FP32 model", run.bench_fp32))
            if r.stats.noise is not None and r.stats.noise.contended]
    if busy:
        return SKIP, round(speedup, 4), (f"{where}: inconclusive, {' and '.join(busy)} ran while other processes "
                                         "held the CPUs")
    verdict, measured, _ = _cmp(round(speedup, 4), limit, ">=", "")
    return verdict, measured, where


@register_check("accuracy.top1_drop", "budgets", "max_top1_drop", "infer", "", "<=")
def _top1_drop(run, spec, limit):
    acc = run.accuracy or {}
    if acc.get("top1_drop") is None:
        return SKIP, None, acc.get("reason") or "no labels given (--labels)"
    verdict, measured, reason = _cmp(acc["top1_drop"], limit, "<=", "")
    return verdict, measured, f"board top-1 {acc['top1_board']:.4f} vs reference {acc['top1_reference']:.4f}"


@register_check("accuracy.top1_agreement", "budgets", "min_top1_agreement", "infer", "", ">=")
def _agreement(run, spec, limit):
    vals = [m["top1_agreement"] for m in (run.compare or {}).values() if "top1_agreement" in m]
    return _cmp(min(vals) if vals else None, limit, ">=", "no classifier-like output (2-D scores)")


def _worst_output(run, key: str) -> Tuple[Optional[float], str]:
    items = [(m[key], name) for name, m in (run.compare or {}).items() if key in m]
    if not items:
        return None, ""
    value, name = min(items)
    return value, f"worst output '{name}'"


@register_check("accuracy.cosine", "budgets", "min_cosine", "infer", "", ">=")
def _cosine(run, spec, limit):
    value, where = _worst_output(run, "cosine")
    verdict, measured, reason = _cmp(value, limit, ">=", "no outputs compared")
    return verdict, measured, reason or where


@register_check("accuracy.snr", "budgets", "min_snr_db", "infer", "dB", ">=")
def _snr(run, spec, limit):
    value, where = _worst_output(run, "snr_db")
    verdict, measured, reason = _cmp(value, limit, ">=", "no outputs compared")
    return verdict, measured, reason or where


# -- device conditions --------------------------------------------------------------------------------
def _mode_names(mode: Any) -> List[str]:
    if isinstance(mode, dict):
        return [str(v) for k, v in mode.items() if k in ("name", "id", "mode") and v is not None]
    return [str(mode)]


@register_check("device.power_mode", "device", "power_mode", "facts", "", "==")
def _power_mode(run, spec, limit):
    mode = _get(run.facts, "power_mode")
    if mode is None:
        return SKIP, None, "the board reports no power mode (nvpmodel not found)"
    names = _mode_names(mode)
    ok = str(limit).strip().lower() in [n.strip().lower() for n in names]
    shown = mode.get("name", mode) if isinstance(mode, dict) else mode
    return (PASS if ok else FAIL), shown, "" if ok else f"board is in power mode {shown}"


@register_check("device.clocks_locked", "device", "clocks_locked", "facts", "", "==")
def _clocks(run, spec, limit):
    locked = _get(run.facts, "clocks_locked")
    if locked is None:
        locked = _get(run.facts, "clocks", "locked")
    if isinstance(locked, dict):
        locked = locked.get("locked")
    if locked is None:
        return SKIP, None, "the board cannot tell whether its clocks are locked"
    ok = bool(locked) == bool(limit)
    return (PASS if ok else FAIL), bool(locked), "" if ok else ("run jetson_clocks" if limit else "clocks are locked")


def _numbers(obj: Any) -> List[float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [float(obj)] if math.isfinite(obj) else []
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _numbers(x)]
    if isinstance(obj, (list, tuple)):
        return [v for x in obj for v in _numbers(x)]
    return []


def hottest_c(run) -> Optional[float]:
    """The highest temperature (C) in the facts and the benchmark's before/after readings."""
    temps: List[float] = []
    for k in ("temperatures", "temperatures_c"):
        temps += _numbers(_get(run.facts, k))
    device = run.bench.device if run.bench is not None else None
    for k in ("temperatures", "temperatures_c", "temperatures_before", "temperatures_after",
              "temperatures_before_c", "temperatures_after_c"):
        temps += _numbers(_get(device, k))
    return max(temps) if temps else None


@register_check("device.temperature", "device", "max_temperature_c", "facts", "C", "<=")
def _temperature(run, spec, limit):
    return _cmp(hottest_c(run), limit, "<=", "the board reports no temperature sensor")


def runtime_version(facts: Any, name: str) -> Optional[str]:
    """The version of ``name`` in device facts: ``runtimes.versions``, ``runtimes.targets``
    (available ones), ``runtimes`` itself, or a top-level fact (``python``, ``cuda``, ``tensorrt``,
    ``jetpack``, ``l4t``)."""
    rts = _get(facts, "runtimes") or {}
    candidates = [_get(rts, "versions", name), _get(rts, "targets", name), rts.get(name) if isinstance(rts, dict) else None,
                  facts.get(name) if isinstance(facts, dict) else None]
    for v in candidates:
        if isinstance(v, dict):
            if v.get("available") is False:
                continue
            v = v.get("version")
        if v not in (None, False, ""):
            return str(v)
    return None


# -- robustness ----------------------------------------------------------------------------------------
def _worst(run, key):
    from ..robustness import RobustnessResult

    if not run.robustness:
        return None, "no robustness result"
    res = RobustnessResult.from_dict(run.robustness)
    sev = res.settings.get("severities")
    row = res.worst(key, sev)
    if row is None:
        return None, ("no labels given (--labels)" if key == "top1_drop" else "no outputs compared")
    return row, f"worst: {row['corruption']} severity {row['severity']}"


@register_check("robustness.top1_drop", "robustness", "max_top1_drop", "robustness", "", "<=")
def _rob_drop(run, spec, limit):
    row, why = _worst(run, "top1_drop")
    verdict, measured, reason = _cmp(row["top1_drop"] if row else None, limit, "<=", why)
    return verdict, measured, reason or why


@register_check("robustness.cosine", "robustness", "min_cosine", "robustness", "", ">=")
def _rob_cos(run, spec, limit):
    row, why = _worst(run, "cosine")
    verdict, measured, reason = _cmp(row["cosine"] if row else None, limit, ">=", why)
    return verdict, measured, reason or why


# -- evaluation ----------------------------------------------------------------------------------------
STAGES = ("connect", "facts", "infer", "benchmark", "robustness")


def _failed_before(run, stage: str) -> Optional[str]:
    """The failure that keeps ``stage``'s data from existing, or None."""
    if run.failed_stage is None:
        return None
    if STAGES.index(run.failed_stage) <= STAGES.index(stage):
        return f"board failed during {run.failed_stage}: {run.error}"
    return None


def evaluate_checks(run: Any, spec: Any) -> List[CheckResult]:
    """Every check the spec enables, evaluated on one board's run (a ``BoardRun``), plus the
    ``board.run`` check (the run itself completed)."""
    from ..spec import check_version

    results = [CheckResult("board.run", FAIL if run.failed_stage else PASS,
                           reason=f"board failed during {run.failed_stage}: {run.error}" if run.failed_stage else "")]
    for chk in CHECKS.values():
        section = getattr(spec, chk.section, None) if spec is not None else None
        if chk.section == "robustness" and section is None:
            continue
        if section and chk.key in section:
            limit = section[chk.key]
        elif chk.default is not None and chk.default(run) is not None:
            limit = chk.default(run)
        else:
            continue
        cause = _failed_before(run, chk.stage)
        if cause:
            results.append(CheckResult(chk.name, FAIL, None, limit, chk.unit, chk.op, cause))
            continue
        verdict, measured, reason = chk.fn(run, spec, limit)
        results.append(CheckResult(chk.name, verdict, measured, limit, chk.unit, chk.op, reason))
    for name, req in (getattr(spec, "runtimes", None) or {}).items():
        cname = f"runtime.{name}"
        cause = _failed_before(run, "facts")
        if cause:
            results.append(CheckResult(cname, FAIL, None, req, "", "", cause))
            continue
        have = runtime_version(run.facts, name)
        if have is None:
            results.append(CheckResult(cname, FAIL, None, req, "", "", f"{name} is not installed on the board"))
        else:
            ok = check_version(have, req)
            results.append(CheckResult(cname, PASS if ok else FAIL, have, req, "", "",
                                       "" if ok else f"{name} {have} does not meet {req}"))
    return results
