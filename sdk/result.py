"""One measurement, one type, one codec: :class:`BenchResult`.

``sdk.benchmark()``, ``Board.benchmark()``, the host runner of ``sdk validate`` and the board
agent all return (the agent: print) this one class. :meth:`BenchResult.to_dict` is the only
function that writes its JSON and :meth:`BenchResult.from_dict` the only one that reads it; the
JSON follows ``sdk/schemas/bench-result.schema.json`` (:func:`schema_path`), versioned by the
top-level ``schema_version`` (:data:`SCHEMA_VERSION`).

JSON layout (every figure's unit is in its name)::

    schema_version   1
    latency_ms       {count, mean, std, min, p50, p90, p95, p99, max,
                      ci95: {p50: [lo, hi] | null, p90: ..., p99: ...},
                      noise: {cv, drift_pct, p50_ci_width_pct, cpu_wait_pct, contended, unstable,
                              warnings: [...], probe_ms?, probe?: {workload, before_ms, after_ms,
                              shift_pct, cpu_khz, temp_c}}}
    throughput_ips   inferences/s over the measured window
    target, runtime  target name; its facts (version, options, build metadata)
    precision        {requested, applied_as_option, note?} or absent
    model            {path, sha256, format, remote_path?}
    host, inputs, settings, window
    power            {mean_w, idle_w, samples, rate_hz, source, rails, measures, note, reason, ...}
    energy_mj_per_inference {total, above_idle, reason, ...}
    device, board, transfer, agent   optional sections (absent when not measured there)
    telemetry, clocks, clock_lock    optional: device telemetry over the run, clock-lock state and record
    stages_ms, pipeline              optional: a pipeline run's per-stage statistics, what ran where
    samples_ms, samples_stride       optional: latency samples in run order (every stride-th)

Adding an optional section (e.g. ``stages_ms``, ``telemetry``): add a field with default ``None``
to :class:`BenchResult`, put its name in :data:`OPTIONAL_SECTIONS` (with an encoder/decoder pair
when it is a typed object rather than a plain JSON dict), and add its property to the schema file.
``to_dict`` leaves it out while it is None, ``from_dict`` reads it when present, and readers of
older versions ignore it. Bump :data:`SCHEMA_VERSION` only for changes that old readers would
misread (a renamed or re-meant key).

Runs on the board too: Python 3.8, standard library only (it is bundled in the agent zipapp).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import InputError, ResultFormatError
from .stats import CI_PERCENTILES, NOISE_LIMITS, noise_report, percentile, quantile_ci

__all__ = ["BenchResult", "LatencyStats", "Noise", "SpeedProbe", "Power", "Energy", "SCHEMA_VERSION", "OPTIONAL_SECTIONS",
           "schema_path", "load_result_json"]

SCHEMA_VERSION = 1
_LAT_KEYS = ("count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max")
Interval = Tuple[float, float]


def schema_path() -> str:
    """The JSON Schema file of :meth:`BenchResult.to_dict` (package data)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", "bench-result.schema.json")


class _Reader:
    """Typed reads from a JSON object with errors that say where (``source``) and which key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, what: str) -> ResultFormatError:
        return ResultFormatError("%s: malformed bench result: %s" % (self.source, what),
                                 "expected the JSON of sdk bench / Board.benchmark (schema_version %d)" % SCHEMA_VERSION)

    def obj(self, data: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail("%s must be an object, not %s" % (path or "the document", type(data).__name__))
        return data

    def num(self, data: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Optional[float]:
        value = data.get(key)
        if value is None and nullable and key in data:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail("%s.%s is %s, expected a number" % (path, key, "missing" if key not in data else repr(value)))
        return float(value)

    def opt_obj(self, data: Mapping[str, Any], key: str) -> Optional[Dict[str, Any]]:
        value = data.get(key)
        if value is None:
            return None
        return dict(self.obj(value, key))


def _interval(value: Any, reader: _Reader, path: str) -> Optional[Interval]:
    if value is None:
        return None
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise reader.fail("%s must be [lo, hi] or null, not %r" % (path, value))
    return float(value[0]), float(value[1])


@dataclass(frozen=True)
class SpeedProbe:
    """The machine-speed probe of a run (:mod:`sdk.speedprobe`): the fixed ``workload`` timed
    ``before_ms`` and ``after_ms`` the measured window (each repeat, ms), with the CPU clock
    (``cpu_khz``) and the hottest thermal zone (``temp_c``) where the OS reports them. ``ms`` is the
    median of all repeats; ``shift_pct`` how far the after-median moved from the before-median (% of
    ``ms``): the probe's own noise over the run."""

    before_ms: Tuple[float, ...]
    after_ms: Tuple[float, ...]
    workload: str
    cpu_khz: Optional[float] = None
    temp_c: Optional[float] = None

    @property
    def ms(self) -> float:
        return percentile(sorted(self.before_ms + self.after_ms), 50.0)

    @property
    def shift_pct(self) -> float:
        mid = self.ms
        if mid <= 0:
            return 0.0
        before, after = percentile(sorted(self.before_ms), 50.0), percentile(sorted(self.after_ms), 50.0)
        return abs(after - before) / mid * 100.0

    def to_dict(self) -> Dict[str, Any]:
        return {"workload": self.workload, "before_ms": list(self.before_ms), "after_ms": list(self.after_ms),
                "shift_pct": round(self.shift_pct, 4), "cpu_khz": self.cpu_khz, "temp_c": self.temp_c}

    @classmethod
    def from_dict(cls, data: Any, reader: "_Reader") -> "SpeedProbe":
        d = reader.obj(data, "latency_ms.noise.probe")
        lists = []
        for key in ("before_ms", "after_ms"):
            v = d.get(key)
            if (not isinstance(v, list) or not v or
                    not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
                            for x in v)):
                raise reader.fail("latency_ms.noise.probe.%s must be a non-empty list of positive numbers" % key)
            lists.append(tuple(float(x) for x in v))
        return cls(before_ms=lists[0], after_ms=lists[1], workload=str(d.get("workload") or "?"),
                   cpu_khz=reader.num(d, "cpu_khz", "latency_ms.noise.probe", nullable=True) if d.get("cpu_khz")
                   is not None else None,
                   temp_c=reader.num(d, "temp_c", "latency_ms.noise.probe", nullable=True) if d.get("temp_c")
                   is not None else None)


@dataclass(frozen=True)
class Noise:
    """Whether a run was stable: ``cv`` (std / mean), ``drift_pct`` (median of the second half
    vs the first, % of the p50), ``p50_ci_width_pct``, ``cpu_wait_pct`` (share of the runnable
    time the threads waited for a CPU held by other processes; None where the OS does not say)
    and ``contended`` (that share passed its limit); ``unstable`` when any passes its limit
    (:data:`sdk.stats.NOISE_LIMITS`), with one ``warnings`` line each."""

    cv: float
    drift_pct: Optional[float]
    p50_ci_width_pct: Optional[float]
    unstable: bool
    warnings: Tuple[str, ...] = ()
    cpu_wait_pct: Optional[float] = None
    contended: bool = False
    probe: Optional[SpeedProbe] = None

    @property
    def probe_ms(self) -> Optional[float]:
        """The machine-speed probe's median (ms), None for a run without one (older results)."""
        return self.probe.ms if self.probe is not None else None

    @property
    def unsettled(self) -> bool:
        """The machine's speed moved during the run: the median drifted between its halves, or the
        p50's interval is wider than :data:`sdk.stats.NOISE_LIMITS` allow."""
        return (self.drift_pct is not None and self.drift_pct > NOISE_LIMITS["drift_pct"]) or \
            (self.p50_ci_width_pct is not None and self.p50_ci_width_pct > NOISE_LIMITS["p50_ci_width_pct"])

    def to_dict(self) -> Dict[str, Any]:
        return {"cv": self.cv, "drift_pct": self.drift_pct, "p50_ci_width_pct": self.p50_ci_width_pct,
                "cpu_wait_pct": self.cpu_wait_pct, "contended": self.contended,
                "unstable": self.unstable, "warnings": list(self.warnings),
                **({"probe_ms": self.probe_ms, "probe": self.probe.to_dict()} if self.probe is not None else {})}

    @classmethod
    def from_dict(cls, data: Any, reader: _Reader) -> "Noise":
        d = reader.obj(data, "latency_ms.noise")
        warnings = d.get("warnings") or []
        if not isinstance(warnings, list):
            raise reader.fail("latency_ms.noise.warnings must be a list")
        return cls(cv=float(reader.num(d, "cv", "latency_ms.noise") or 0.0),
                   drift_pct=reader.num(d, "drift_pct", "latency_ms.noise", nullable=True),
                   p50_ci_width_pct=reader.num(d, "p50_ci_width_pct", "latency_ms.noise", nullable=True),
                   unstable=bool(d.get("unstable")), warnings=tuple(str(w) for w in warnings),
                   cpu_wait_pct=reader.num(d, "cpu_wait_pct", "latency_ms.noise", nullable=True)
                   if "cpu_wait_pct" in d else None, contended=bool(d.get("contended")),
                   probe=SpeedProbe.from_dict(d["probe"], reader) if d.get("probe") is not None else None)


@dataclass(frozen=True)
class LatencyStats:
    """Summary of latency samples, all in milliseconds; ``throughput_ips`` in inferences/s
    (count divided by the wall time of the measured window). ``ci95`` maps ``"p50"``, ``"p90"``,
    ``"p99"`` to the percentile's 95% interval ``(lo_ms, hi_ms)``, None when there were too few
    runs for it; ``noise`` says whether the run was stable (None for results without samples)."""

    count: int
    mean_ms: float
    std_ms: float
    min_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    throughput_ips: float
    ci95: Mapping[str, Optional[Interval]] = field(default_factory=dict, compare=False)
    noise: Optional[Noise] = field(default=None, compare=False)

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float], wall_s: Optional[float] = None,
                     cpu_wait_pct: Optional[float] = None, probe: Optional[SpeedProbe] = None) -> "LatencyStats":
        """Statistics of ``samples_ms`` (in run order). ``wall_s`` is the measured window's
        duration; without it throughput is ``count / sum(samples)``. ``cpu_wait_pct``: the CPU
        wait share over the window (:func:`sdk.bench.cpu_wait_pct`); ``probe`` the machine-speed
        probe around it (:mod:`sdk.speedprobe`). Percentiles interpolate
        linearly; intervals are order-statistic intervals (:mod:`sdk.stats`)."""
        values = [float(v) for v in samples_ms]
        n = len(values)
        if n == 0:
            raise InputError("no latency samples to summarise")
        ordered = sorted(values)
        mean = math.fsum(values) / n
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
        total_s = float(wall_s) if wall_s else math.fsum(values) / 1e3
        ci = {"p%g" % p: quantile_ci(ordered, p) for p in CI_PERCENTILES}
        p50 = percentile(ordered, 50.0)
        noise = noise_report(values, mean, std, p50, ci["p50"], cpu_wait_pct)
        return cls(count=n, mean_ms=mean, std_ms=std, min_ms=ordered[0], p50_ms=p50,
                   p90_ms=percentile(ordered, 90.0), p95_ms=percentile(ordered, 95.0),
                   p99_ms=percentile(ordered, 99.0), max_ms=ordered[-1],
                   throughput_ips=float(n / total_s) if total_s > 0 else math.inf, ci95=ci,
                   noise=Noise(cv=float(noise["cv"]), drift_pct=noise["drift_pct"],  # type: ignore[arg-type]
                               p50_ci_width_pct=noise["p50_ci_width_pct"],  # type: ignore[arg-type]
                               unstable=bool(noise["unstable"]),
                               warnings=tuple(noise["warnings"]),  # type: ignore[arg-type]
                               cpu_wait_pct=noise["cpu_wait_pct"],  # type: ignore[arg-type]
                               contended=bool(noise["contended"]), probe=probe))

    def value(self, stat: str) -> float:
        """A statistic by its JSON name (``"p50"``, ``"mean"``, ...), in ms."""
        if stat not in _LAT_KEYS or stat == "count":
            raise InputError("unknown latency statistic '%s'" % stat, "use one of %s" % ", ".join(_LAT_KEYS[1:]))
        return float(getattr(self, stat + "_ms"))

    def ci(self, stat: str) -> Optional[Interval]:
        """The 95% interval of ``stat`` (``"p50"``, ``"p90"``, ``"p99"``), or None."""
        return self.ci95.get(stat)

    def latency_dict(self) -> Dict[str, Any]:
        """The ``latency_ms`` block of result JSON."""
        out: Dict[str, Any] = {k: (self.count if k == "count" else getattr(self, k + "_ms")) for k in _LAT_KEYS}
        out["ci95"] = {key: (list(ci) if ci is not None else None)
                       for key, ci in (("p%g" % p, self.ci95.get("p%g" % p)) for p in CI_PERCENTILES)}
        out["noise"] = self.noise.to_dict() if self.noise is not None else None
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"latency_ms": self.latency_dict(), "throughput_ips": self.throughput_ips}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "result") -> "LatencyStats":
        """Read ``{"latency_ms": {...}, "throughput_ips": ...}``; :class:`ResultFormatError`
        naming ``source`` and the bad key otherwise."""
        r = _Reader(source)
        lat = r.obj(data.get("latency_ms"), "latency_ms")
        nums = {k: r.num(lat, k, "latency_ms") for k in _LAT_KEYS}
        ci_block = lat.get("ci95") or {}
        r.obj(ci_block, "latency_ms.ci95")
        ci = {"p%g" % p: _interval(ci_block.get("p%g" % p), r, "latency_ms.ci95.p%g" % p) for p in CI_PERCENTILES}
        noise = Noise.from_dict(lat["noise"], r) if lat.get("noise") is not None else None
        tput = r.num(data, "throughput_ips", "")
        return cls(count=int(nums["count"] or 0), throughput_ips=float(tput or 0.0), ci95=ci, noise=noise,
                   **{k + "_ms": float(nums[k] or 0.0) for k in _LAT_KEYS if k != "count"})


@dataclass
class Power:
    """The ``power`` block: ``mean_w`` over the measured window and ``idle_w`` over the idle
    window (W, None when not measured, with ``reason``), ``samples`` inside the window, the
    achieved ``rate_hz``, the sensor ``source``, per-rail W (``rails``), what the total
    ``measures``, a ``note`` on the method, ``tried`` sensors, the ``trace`` ``[[t_s, W], ...]`` and
    any further figures of the sensor in ``details`` (idle_rails, energy_j, window_s, ...)."""

    mean_w: Optional[float] = None
    idle_w: Optional[float] = None
    samples: int = 0
    rate_hz: Optional[float] = None
    source: Optional[str] = None
    rails: Optional[Dict[str, float]] = None
    measures: Optional[str] = None
    note: Optional[str] = None
    reason: Optional[str] = None
    tried: Optional[List[Dict[str, Any]]] = None
    trace: Optional[List[List[float]]] = None
    details: Dict[str, Any] = field(default_factory=dict)

    _CORE = ("mean_w", "idle_w", "samples", "rate_hz", "source", "rails", "measures", "note", "reason")

    @classmethod
    def unmeasured(cls, reason: str, tried: Optional[List[Dict[str, Any]]] = None) -> "Power":
        """No power figures, with the reason (never invented numbers)."""
        return cls(reason=reason, tried=tried)

    @property
    def measured(self) -> bool:
        return self.mean_w is not None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {k: getattr(self, k) for k in self._CORE}
        if self.tried is not None:
            out["tried"] = self.tried
        if self.trace is not None:
            out["trace"] = self.trace
        out.update(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "result") -> "Power":
        r = _Reader(source)
        d = dict(r.obj(data, "power"))
        kw: Dict[str, Any] = {k: d.pop(k, None) for k in cls._CORE}
        for k in ("mean_w", "idle_w", "rate_hz"):
            if kw[k] is not None:
                kw[k] = r.num({k: kw[k]}, k, "power")
        kw["samples"] = int(kw["samples"] or 0)
        return cls(tried=d.pop("tried", None), trace=d.pop("trace", None), details=d, **kw)


@dataclass
class Energy:
    """The ``energy_mj_per_inference`` block: ``total_mj`` (mean power x window / count) and
    ``above_idle_mj`` (mJ per inference), None with the ``reason`` when not measured."""

    total_mj: Optional[float] = None
    above_idle_mj: Optional[float] = None
    reason: Optional[str] = None
    details: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def unmeasured(cls, reason: str) -> "Energy":
        return cls(reason=reason)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"total": self.total_mj, "above_idle": self.above_idle_mj, "reason": self.reason}
        out.update(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "result") -> "Energy":
        r = _Reader(source)
        d = dict(r.obj(data, "energy_mj_per_inference"))
        total, above = d.pop("total", None), d.pop("above_idle", None)
        return cls(total_mj=None if total is None else r.num({"total": total}, "total", "energy_mj_per_inference"),
                   above_idle_mj=None if above is None else r.num({"above_idle": above}, "above_idle",
                                                                   "energy_mj_per_inference"),
                   reason=d.pop("reason", None), details=d)


def _plain(value: Any) -> Any:
    return value


#: Optional top-level sections: JSON key -> (encode, decode). Absent from the JSON when None.
OPTIONAL_SECTIONS: Dict[str, Tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "precision": (_plain, _plain),
    "device": (_plain, _plain),
    "board": (_plain, _plain),
    "transfer": (_plain, _plain),
    "agent": (_plain, _plain),
    "telemetry": (_plain, _plain),
    "clocks": (_plain, _plain),
    "clock_lock": (_plain, _plain),
    "stages_ms": (_plain, _plain),
    "pipeline": (_plain, _plain),
}


@dataclass
class BenchResult:
    """One latency measurement: where (``target``, ``runtime``, ``host``, ``device``, ``board``),
    what (``model``, ``inputs``, ``precision``), how (``settings``, ``window`` on
    ``time.monotonic``), and the figures: ``stats`` (:class:`LatencyStats`), ``power``
    (:class:`Power`), ``energy`` (:class:`Energy`), ``transfer`` (the upload to a board),
    ``samples_ms`` (in run order, every ``samples_stride``-th)."""

    stats: LatencyStats
    target: str
    runtime: Dict[str, Any]
    model: Dict[str, Any]
    host: Dict[str, Any]
    inputs: List[Dict[str, Any]]
    settings: Dict[str, Any]
    samples_ms: List[float] = field(default_factory=list, repr=False)
    window: Dict[str, Any] = field(default_factory=dict)
    power: Power = field(default_factory=lambda: Power.unmeasured("power was not sampled"))
    energy: Energy = field(default_factory=lambda: Energy.unmeasured("power was not sampled"))
    samples_stride: int = 1
    precision: Optional[Dict[str, Any]] = None
    device: Optional[Dict[str, Any]] = None
    board: Optional[Dict[str, Any]] = None
    transfer: Optional[Dict[str, Any]] = None
    agent: Optional[Dict[str, Any]] = None
    #: Device telemetry sampled with power (sdk.remote.agent.power.telemetry): t_s, series, units, window.
    telemetry: Optional[Dict[str, Any]] = None
    #: Clock-lock state during the run: locked_during_run, lock_requested, restored / state.
    clocks: Optional[Dict[str, Any]] = None
    #: --lock-clocks record: states before / during / after, commands run, restored.
    clock_lock: Optional[Dict[str, Any]] = None
    #: Pipeline split (sdk bench --pipeline): {stage: {mean, std, min, p50, p90, p99, max, share}}.
    stages_ms: Optional[Dict[str, Any]] = None
    #: What the pipeline ran and where (kind, stages, frames, devices, why_not_cuda, ...).
    pipeline: Optional[Dict[str, Any]] = None
    schema_version: int = SCHEMA_VERSION

    # -- identity ---------------------------------------------------------------------------------
    @property
    def board_name(self) -> Optional[str]:
        return None if not self.board else self.board.get("name")

    @property
    def runtime_version(self) -> Optional[str]:
        v = self.runtime.get("version")
        return None if v is None else str(v)

    @property
    def key(self) -> Tuple[str, str, str, str]:
        """``(model sha256, board, target, runtime version)``: what a baseline is stored under."""
        return (str(self.model.get("sha256") or ""), str(self.board_name or self.host.get("hostname") or "host"),
                self.target, str(self.runtime_version or ""))

    # -- codec ------------------------------------------------------------------------------------
    def to_dict(self, samples: bool = False) -> Dict[str, Any]:
        """The result JSON (the schema in :func:`schema_path`); ``samples=True`` adds
        ``samples_ms`` and ``samples_stride``."""
        out: Dict[str, Any] = {"schema_version": self.schema_version}
        out.update(self.stats.to_dict())
        out.update(target=self.target, runtime=self.runtime, model=self.model, host=self.host, inputs=self.inputs,
                   settings=self.settings, window=self.window, power=self.power.to_dict(),
                   energy_mj_per_inference=self.energy.to_dict())
        for key, (encode, _decode) in OPTIONAL_SECTIONS.items():
            value = getattr(self, key)
            if value is not None:
                out[key] = encode(value)
        if samples:
            out["samples_ms"] = list(self.samples_ms)
            out["samples_stride"] = self.samples_stride
        return out

    def to_json(self, samples: bool = False) -> str:
        return json.dumps(self.to_dict(samples=samples), indent=2, default=str)

    @classmethod
    def from_dict(cls, data: Any, source: str = "result") -> "BenchResult":
        """Read result JSON; :class:`ResultFormatError` naming ``source`` (a file, ``board
        'jetson-nx'``) and the first bad key when it is malformed."""
        r = _Reader(source)
        d = r.obj(data, "")
        version = d.get("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise r.fail("schema_version is %r, expected an integer >= 1" % (version,))
        if version > SCHEMA_VERSION:
            raise ResultFormatError("%s: bench result schema_version %d is newer than this edgesdk reads (%d)"
                                    % (source, version, SCHEMA_VERSION), "upgrade edgesdk")
        stats = LatencyStats.from_dict(d, source)
        target = d.get("target")
        if not isinstance(target, str) or not target:
            raise r.fail("target is %r, expected the target's name" % (target,))
        samples, inputs = _list(d, "samples_ms", r), _list(d, "inputs", r)
        kw: Dict[str, Any] = {}
        for key, (_encode, decode) in OPTIONAL_SECTIONS.items():
            if d.get(key) is not None:
                kw[key] = decode(d[key])
        return cls(stats=stats, target=target, runtime=dict(r.obj(d.get("runtime") or {}, "runtime")),
                   model=dict(r.obj(d.get("model") or {}, "model")), host=dict(r.obj(d.get("host") or {}, "host")),
                   inputs=list(inputs), settings=dict(r.obj(d.get("settings") or {}, "settings")),
                   samples_ms=[float(v) for v in samples], window=dict(r.obj(d.get("window") or {}, "window")),
                   power=Power.from_dict(d.get("power") or {"reason": "no power block"}, source),
                   energy=Energy.from_dict(d.get("energy_mj_per_inference") or {}, source),
                   samples_stride=int(d.get("samples_stride") or 1), schema_version=SCHEMA_VERSION, **kw)

    @classmethod
    def from_json(cls, text: str, source: str = "result") -> "BenchResult":
        """Parse JSON text (e.g. what a board printed); invalid JSON is a :class:`ResultFormatError`."""
        return cls.from_dict(load_result_json(text, source), source)


def _list(data: Mapping[str, Any], key: str, reader: _Reader) -> List[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise reader.fail("%s must be a list, not %s" % (key, type(value).__name__))
    return value


def load_result_json(text: str, source: str) -> Any:
    """``json.loads`` with one clear error naming ``source`` when the text is not JSON."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ResultFormatError("%s: the bench result is not valid JSON: %s" % (source, exc)) from exc
