"""Compare two measurements: is B significantly slower than A?

::

    from sdk.compare import compare_results, load_result
    cmp = compare_results(load_result("a.json"), load_result("b.json"), threshold_pct=5)
    for c in cmp.changes:
        print(c.stat, c.change_pct, c.change_ci_pct, c.verdict)
    raise SystemExit(cmp.exit_code)           # 1 when B is a regression

A statistic regressed when both runs have its 95% interval, the intervals do not overlap, and B is
more than ``threshold_pct`` slower. Two kinds of run measured the machine, not the model, and a
comparison with one is ``inconclusive`` and calls nothing a regression (rerun it quiet):
a *contended* run, whose threads waited for a CPU held by other processes
(``latency_ms.noise.contended``, Linux schedstat), and an *unsettled* one, during which the
machine's speed moved: its median drifted between the run's halves, or its p50 interval is wider
than :data:`sdk.stats.NOISE_LIMITS` allow (a shared VM slowed by 16 % for one second with no CPU
wait showed that). Only the statistics in ``decide_on`` (default the p50) decide:
the median's interval is narrow and steady on a shared machine, while a p99 moves with whatever
else runs there; the others are reported beside it. The change's own interval is the widest one the
two intervals allow: ``[(b_lo - a_hi) / a, (b_hi - a_lo) / a]``.

Between two runs the machine's speed can move while each run is steady (a VM moved to a busier
host, a board that throttled): every run times a fixed workload before and after its window
(:mod:`sdk.speedprobe`, ``latency_ms.noise.probe``). When the two runs' probes differ beyond their
own noise (:func:`probe_change`: the larger of each probe's before/after shift and
:data:`PROBE_NOISE_FLOOR_PCT`), the comparison is inconclusive with that reason; with
``normalize=True`` it is judged instead on B's latency scaled by ``probe_A / probe_B``, labelled so.
Runs whose probes are of another workload, or whose CPU clocks differ, are *not comparable*.

A slowdown can be larger than what the noise can explain: then it is signed even though A was
contended or the probes moved (:attr:`Comparison.beyond_noise`). B's p50 is divided by
``1 + (max(0, probe change) + probe noise) / 100`` (the machine taken to be as much slower during B as
its probes allow, never faster) and must still be slower beyond the threshold, intervals apart. A
contended A only makes that harder (load slows A). What cannot be bounded is never signed: a
contended B, an unsettled run (on a shared 2-core VM one run of a 1-thread model was steady 30 %
faster than the next, with B's median drifting 15 % and the probe within 4 %: no allowance taken
from the runs' drift covered that), runs that are not comparable.

When both models are at hand, :func:`compare_paired` judges interleaved rounds of A and B measured
in one process (:func:`sdk.targets.measure.benchmark_pair`) on their paired ratios, which no drift
of the machine can fool: each round's A and B ran within the same fraction of a second.

Baselines (``sdk validate --baseline FILE``) are earlier results looked up by
:attr:`sdk.result.BenchResult.key` (model sha256 x board x target x runtime version).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import InputError, ResultFormatError
from .result import BenchResult, Interval

__all__ = ["StatChange", "Comparison", "ProbeChange", "probe_change", "PairedComparison", "compare_paired",
           "compare_results", "load_results", "load_result", "find_baseline", "DEFAULT_THRESHOLD_PCT",
           "PAIRED_THRESHOLD_PCT", "PROBE_NOISE_FLOOR_PCT", "COMPARED_STATS"]

DEFAULT_THRESHOLD_PCT = 5.0
#: Interleaved rounds cancel the machine's drift, so a smaller paired change is signed.
PAIRED_THRESHOLD_PCT = 2.0
#: The probe's repeat-to-repeat noise on a quiet machine: below this a probe change is not a move.
PROBE_NOISE_FLOOR_PCT = 3.0
#: CPU clocks (cpufreq) further apart than this make two runs not comparable.
CLOCK_MISMATCH_PCT = 5.0
COMPARED_STATS = ("p50", "p90", "p99", "mean")
SLOWER, FASTER, SAME, UNCERTAIN = "slower", "faster", "same", "uncertain"


@dataclass(frozen=True)
class StatChange:
    """One statistic of A and B (ms) with their 95% intervals; ``change_pct`` = (B - A) / A;
    ``change_ci_pct`` the interval of the change; ``verdict`` slower / faster (intervals apart
    and beyond the threshold), same, or uncertain (an interval is missing: too few runs)."""

    stat: str
    a_ms: float
    b_ms: float
    a_ci: Optional[Interval]
    b_ci: Optional[Interval]
    change_pct: float
    change_ci_pct: Optional[Interval]
    overlap: Optional[bool]
    verdict: str

    def to_dict(self) -> Dict[str, Any]:
        return {"stat": self.stat, "a_ms": self.a_ms, "b_ms": self.b_ms,
                "a_ci95": list(self.a_ci) if self.a_ci else None, "b_ci95": list(self.b_ci) if self.b_ci else None,
                "change_pct": self.change_pct,
                "change_ci95_pct": list(self.change_ci_pct) if self.change_ci_pct else None,
                "intervals_overlap": self.overlap, "verdict": self.verdict}


def _change(stat: str, a: BenchResult, b: BenchResult, threshold_pct: float, scale_b: float = 1.0) -> StatChange:
    va, vb = a.stats.value(stat), b.stats.value(stat) * scale_b
    ca, cb = a.stats.ci(stat), b.stats.ci(stat)
    if cb is not None and scale_b != 1.0:
        cb = (cb[0] * scale_b, cb[1] * scale_b)
    change = (vb - va) / va * 100.0 if va > 0 else 0.0
    if ca is None or cb is None or va <= 0:
        return StatChange(stat, va, vb, ca, cb, change, None, None, UNCERTAIN if stat != "mean" else SAME)
    overlap = not (cb[0] > ca[1] or cb[1] < ca[0])
    interval = ((cb[0] - ca[1]) / va * 100.0, (cb[1] - ca[0]) / va * 100.0)
    verdict = SAME
    if not overlap and change > threshold_pct:
        verdict = SLOWER
    elif not overlap and change < -threshold_pct:
        verdict = FASTER
    return StatChange(stat, va, vb, ca, cb, change, interval, overlap, verdict)


@dataclass(frozen=True)
class ProbeChange:
    """The machine-speed probes of A and B (ms): ``change_pct`` = (B - A) / A, ``noise_pct`` the
    probes' own noise (the larger before/after shift of either run, at least
    :data:`PROBE_NOISE_FLOOR_PCT`), ``moved`` when the change is beyond it; ``mismatch`` names why
    the two cannot be compared at all (another workload, other CPU clocks), else None."""

    a_ms: float
    b_ms: float
    change_pct: float
    noise_pct: float
    moved: bool
    mismatch: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"a_ms": self.a_ms, "b_ms": self.b_ms, "change_pct": self.change_pct, "noise_pct": self.noise_pct,
                "moved": self.moved, "mismatch": self.mismatch}


def probe_change(a: BenchResult, b: BenchResult) -> Optional[ProbeChange]:
    """How the machine's speed differed between A and B by their probes; None when one has none."""
    pa = a.stats.noise.probe if a.stats.noise is not None else None
    pb = b.stats.noise.probe if b.stats.noise is not None else None
    if pa is None or pb is None or pa.ms <= 0:
        return None
    change = (pb.ms - pa.ms) / pa.ms * 100.0
    noise = max(PROBE_NOISE_FLOOR_PCT, pa.shift_pct, pb.shift_pct)
    mismatch = None
    if pa.workload != pb.workload:
        mismatch = f"their speed probes ran other workloads ({pa.workload} vs {pb.workload})"
    elif pa.cpu_khz and pb.cpu_khz and abs(pb.cpu_khz - pa.cpu_khz) / pa.cpu_khz * 100.0 > CLOCK_MISMATCH_PCT:
        mismatch = (f"they ran at other CPU clocks ({pa.cpu_khz / 1e3:.0f} vs {pb.cpu_khz / 1e3:.0f} MHz): "
                    "lock the clocks or the power mode to the baseline's")
    return ProbeChange(pa.ms, pb.ms, change, noise, abs(change) > noise, mismatch)


@dataclass
class Comparison:
    """A vs B: one :class:`StatChange` per statistic, the throughput change, and ``regression``:
    a statistic in ``decide_on`` is significantly slower in B. ``warnings``: what makes the
    comparison weaker (an unstable run, different models, targets or boards)."""

    a: BenchResult
    b: BenchResult
    threshold_pct: float
    decide_on: Tuple[str, ...]
    changes: List[StatChange]
    throughput_change_pct: Optional[float]
    warnings: List[str] = field(default_factory=list)
    probe: Optional[ProbeChange] = None
    normalized: bool = False
    #: The decisive statistic's change judged with the noise's allowance (module docstring), when
    #: the runs' noise would make the comparison inconclusive and the slowdown is larger than it.
    beyond_noise: Optional[StatChange] = None

    @property
    def not_comparable(self) -> Optional[str]:
        """Why A and B cannot be compared at all (their probes say other workloads or clocks), or None."""
        return self.probe.mismatch if self.probe is not None else None

    @property
    def contended(self) -> List[str]:
        """``["A", "B"]``: the runs measured while other processes held the CPUs."""
        return [label for label, r in (("A", self.a), ("B", self.b))
                if r.stats.noise is not None and r.stats.noise.contended]

    @property
    def unsettled(self) -> List[str]:
        """``["A", "B"]``: the runs during which the machine's speed moved (:attr:`sdk.result.Noise.unsettled`)."""
        return [label for label, r in (("A", self.a), ("B", self.b))
                if r.stats.noise is not None and r.stats.noise.unsettled]

    @property
    def inconclusive_reasons(self) -> List[str]:
        """Why the figures cannot be signed, one phrase per kind of run ("B ran while ..."); empty when they can."""
        return self.reasons_naming({"A": "A", "B": "B"})

    def reasons_naming(self, names: Dict[str, str]) -> List[str]:
        """:attr:`inconclusive_reasons` with the runs called ``names["A"]`` and ``names["B"]``."""
        out = []
        if self.contended:
            out.append(f"{' and '.join(names[x] for x in self.contended)} ran while other processes held the CPUs")
        moved = [names[x] for x in self.unsettled if x not in self.contended]
        if moved:
            out.append(f"the machine's speed moved during {' and '.join(moved)} (median drift or a wide p50 interval)")
        p = self.probe
        if p is not None and p.mismatch:
            out.append(f"{names['A']} and {names['B']} are not comparable: {p.mismatch}")
        elif p is not None and p.moved and not self.normalized:
            out.append(f"the machine's speed differed between {names['A']} and {names['B']}: its speed probe took "
                       f"{p.a_ms:.3f} ms in {names['A']} and {p.b_ms:.3f} ms in {names['B']} ({p.change_pct:+.1f} %, "
                       f"beyond the probe's own noise of {p.noise_pct:.1f} %; --normalize judges on probe-scaled latency)")
        return out

    @property
    def inconclusive(self) -> bool:
        """A run was contended or unsettled, or the probes moved, and no slowdown is larger than
        that noise: the figures cannot be signed either way."""
        return bool(self.inconclusive_reasons) and self.beyond_noise is None

    @property
    def regression(self) -> bool:
        """A decisive statistic is significantly slower in B, and the comparison is not inconclusive
        (or the slowdown is beyond the noise that made it so)."""
        if self.beyond_noise is not None:
            return True
        return not self.inconclusive and any(c.verdict == SLOWER for c in self.changes if c.stat in self.decide_on)

    @property
    def exit_code(self) -> int:
        return 1 if self.regression else 0

    def change(self, stat: str) -> StatChange:
        for c in self.changes:
            if c.stat == stat:
                return c
        raise KeyError(stat)

    def to_dict(self) -> Dict[str, Any]:
        return {"regression": self.regression, "inconclusive": self.inconclusive, "contended": self.contended,
                "unsettled": self.unsettled, "inconclusive_reasons": self.inconclusive_reasons,
                "threshold_pct": self.threshold_pct, "decide_on": list(self.decide_on),
                "changes": [c.to_dict() for c in self.changes], "throughput_change_pct": self.throughput_change_pct,
                "warnings": list(self.warnings), "a": _identity(self.a), "b": _identity(self.b),
                "probe": self.probe.to_dict() if self.probe is not None else None, "normalized": self.normalized,
                "not_comparable": self.not_comparable,
                "beyond_noise": self.beyond_noise.to_dict() if self.beyond_noise is not None else None}


def _identity(r: BenchResult) -> Dict[str, Any]:
    return {"model_sha256": r.model.get("sha256"), "board": r.board_name, "target": r.target,
            "runtime_version": r.runtime_version, "count": r.stats.count}


def _warnings(a: BenchResult, b: BenchResult) -> List[str]:
    out = []
    for label, r in (("A", a), ("B", b)):
        if r.stats.noise is not None and r.stats.noise.unstable:
            out.append(f"{label} was unstable: " + "; ".join(r.stats.noise.warnings))
    ka, kb = a.key, b.key
    for i, what in enumerate(("model", "board", "target", "runtime version")):
        if ka[i] != kb[i]:
            out.append(f"A and B differ in {what}: {ka[i] or '?'} vs {kb[i] or '?'}")
    oa, ob = a.runtime.get("options") or {}, b.runtime.get("options") or {}
    changed = sorted(k for k in set(oa) | set(ob) if oa.get(k) != ob.get(k))
    if changed:
        out.append("A and B ran with other options: " + ", ".join(f"{k} {oa.get(k)} vs {ob.get(k)}" for k in changed))
    return out


def compare_results(a: BenchResult, b: BenchResult, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
                    decide_on: Sequence[str] = ("p50",), normalize: bool = False) -> Comparison:
    """Compare B with A (see the module docstring). ``decide_on``: statistics with intervals
    (``p50``, ``p90``, ``p99``) whose significant slowdown is a regression. ``normalize``: when the
    speed probes say the machine's speed differed, judge B's latency scaled by ``probe_A / probe_B``
    instead of calling the comparison inconclusive."""
    if threshold_pct < 0:
        raise InputError(f"the threshold must be >= 0 %, not {threshold_pct}")
    bad = [s for s in decide_on if s not in ("p50", "p90", "p99")]
    if bad or not decide_on:
        raise InputError(f"cannot decide on '{(bad or [''])[0]}'", "use p50, p90 or p99 (they have intervals)")
    probe = probe_change(a, b)
    scale = probe.a_ms / probe.b_ms if (normalize and probe is not None and probe.moved and not probe.mismatch) else 1.0
    changes = [_change(s, a, b, threshold_pct, scale) for s in COMPARED_STATS]
    ta, tb = a.stats.throughput_ips, b.stats.throughput_ips / scale
    tput = (tb - ta) / ta * 100.0 if ta > 0 else None
    warnings = _warnings(a, b)
    if probe is None:
        missing = [label for label, r in (("A", a), ("B", b)) if r.stats.noise is None or r.stats.noise.probe is None]
        warnings.append(f"{' and '.join(missing)} carry no speed probe (an older result): a change of the machine's "
                        "speed between the runs cannot be told from a change of the model")
    elif scale != 1.0:
        warnings.append(f"judged on probe-normalised latency: B's figures x {scale:.3f} (its speed probe "
                        f"{probe.b_ms:.3f} ms vs A's {probe.a_ms:.3f} ms)")
    cmp = Comparison(a, b, float(threshold_pct), tuple(decide_on), changes, tput, warnings, probe, scale != 1.0)
    if cmp.inconclusive_reasons:
        cmp.beyond_noise = _beyond_noise(cmp)
    return cmp


def _beyond_noise(cmp: Comparison) -> Optional[StatChange]:
    """The first decisive statistic that is slower in B, past the threshold, by more than the noise
    allows (module docstring); None when none is, or when the noise cannot be bounded (B
    contended, a run unsettled, runs not comparable)."""
    if cmp.not_comparable or "B" in cmp.contended or cmp.unsettled:
        return None
    p = cmp.probe
    # the most the machine can have slowed during B by the probes: their change, plus their own noise
    scale = 1.0 / (1.0 + (max(0.0, p.change_pct) + p.noise_pct) / 100.0) if p is not None else 1.0
    for stat in cmp.decide_on:
        c = _change(stat, cmp.a, cmp.b, cmp.threshold_pct, scale)
        if c.verdict == SLOWER:
            return c
    return None


@dataclass(frozen=True)
class PairedComparison:
    """B vs A from interleaved rounds in one process: ``a_ms``/``b_ms`` each round's mean latency
    (ms), ``ratio`` the median of the per-round ratios B/A with its 95% interval ``ratio_ci``
    (order statistics; None with fewer than 6 rounds), ``change_pct`` = (ratio - 1) x 100 and its
    interval, ``verdict`` slower / faster (the interval excludes no change AND the change is beyond
    ``threshold_pct``), same, or uncertain (no interval)."""

    a_ms: Tuple[float, ...]
    b_ms: Tuple[float, ...]
    ratio: float
    ratio_ci: Optional[Interval]
    threshold_pct: float
    verdict: str

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def change_ci_pct(self) -> Optional[Interval]:
        return None if self.ratio_ci is None else ((self.ratio_ci[0] - 1.0) * 100.0, (self.ratio_ci[1] - 1.0) * 100.0)

    @property
    def regression(self) -> bool:
        return self.verdict == SLOWER

    @property
    def exit_code(self) -> int:
        return 1 if self.regression else 0

    def to_dict(self) -> Dict[str, Any]:
        from .stats import percentile

        return {"mode": "interleaved", "rounds": len(self.a_ms), "a_round_ms": list(self.a_ms),
                "b_round_ms": list(self.b_ms), "a_median_ms": percentile(sorted(self.a_ms), 50.0),
                "b_median_ms": percentile(sorted(self.b_ms), 50.0), "ratio": self.ratio,
                "ratio_ci95": list(self.ratio_ci) if self.ratio_ci else None, "change_pct": self.change_pct,
                "change_ci95_pct": list(self.change_ci_pct) if self.change_ci_pct else None,
                "threshold_pct": self.threshold_pct, "verdict": self.verdict, "regression": self.regression}


def compare_paired(a_round_ms: Sequence[float], b_round_ms: Sequence[float],
                   threshold_pct: float = PAIRED_THRESHOLD_PCT) -> PairedComparison:
    """Judge B against A on paired rounds (round i of A and of B measured back to back)."""
    from .stats import percentile, quantile_ci

    if threshold_pct < 0:
        raise InputError(f"the threshold must be >= 0 %, not {threshold_pct}")
    if len(a_round_ms) != len(b_round_ms) or not a_round_ms:
        raise InputError(f"paired rounds must match: {len(a_round_ms)} of A, {len(b_round_ms)} of B")
    if any(not (x > 0) for x in list(a_round_ms) + list(b_round_ms)):
        raise InputError("paired rounds must be positive latencies in ms")
    ratios = sorted(b / a for a, b in zip(a_round_ms, b_round_ms))
    ratio = percentile(ratios, 50.0)
    ci = quantile_ci(ratios, 50.0)
    change = (ratio - 1.0) * 100.0
    if ci is None:
        verdict = UNCERTAIN
    elif ci[0] > 1.0 and change > threshold_pct:
        verdict = SLOWER
    elif ci[1] < 1.0 and change < -threshold_pct:
        verdict = FASTER
    else:
        verdict = SAME
    return PairedComparison(tuple(float(x) for x in a_round_ms), tuple(float(x) for x in b_round_ms), ratio, ci,
                            float(threshold_pct), verdict)


# -- files ----------------------------------------------------------------------------------------------
def _results_in(doc: Any, source: str) -> List[BenchResult]:
    if isinstance(doc, list):  # sdk push --json: one entry per board (failed boards carry "error")
        return [r for i, item in enumerate(doc) if not (isinstance(item, dict) and "error" in item and
                                                        "latency_ms" not in item)
                for r in _results_in(item, f"{source}[{i}]")]
    if isinstance(doc, dict) and isinstance(doc.get("boards"), list) and "latency_ms" not in doc:  # sdk validate --json
        out = []
        for b in doc["boards"]:
            if isinstance(b, dict) and b.get("benchmark"):
                res = BenchResult.from_dict(b["benchmark"], f"{source} board '{b.get('board')}'")
                if res.board is None:
                    res.board = {"name": b.get("board")}
                out.append(res)
        return out
    return [BenchResult.from_dict(doc, source)]


def load_results(path: Union[str, "os.PathLike[str]"]) -> List[BenchResult]:
    """Every bench result in a file: ``sdk bench --json`` (one), ``sdk push --json`` (one per
    board) or ``sdk validate --json`` (each board's benchmark)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"result file '{p}' does not exist")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultFormatError(f"'{p}' is not valid JSON: {exc}", "give the --json output of sdk bench, "
                                                                    "sdk push or sdk validate") from exc
    return _results_in(doc, f"'{p}'")


def load_result(path: Union[str, "os.PathLike[str]"], board: Optional[str] = None) -> BenchResult:
    """The one result in ``path`` (with ``board``: that board's)."""
    results = load_results(path)
    if board is not None:
        results = [r for r in results if r.board_name == board]
    if len(results) != 1:
        names = ", ".join(str(r.board_name) for r in load_results(path))
        what = f"no result of board '{board}'" if board is not None and not results else \
            f"{len(results)} results"
        raise InputError(f"'{path}' holds {what}", f"pick one with --board (boards: {names or 'none'})")
    return results[0]


def find_baseline(baselines: Sequence[BenchResult], current: BenchResult) -> Optional[BenchResult]:
    """The stored result for the same model x board x target x runtime version, or None."""
    for r in baselines:
        if r.key == current.key:
            return r
    return None
