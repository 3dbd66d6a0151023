"""A background sampler for one :class:`PowerSource`, and the window arithmetic.

Samples are ``(t, {rail: value})`` with ``t`` on ``time.monotonic``: the clock on which
:func:`sdk.bench.measure_latency` reports ``begin_s``/``end_s``. A window's figures use only the
samples strictly inside it:

- power sources: per-rail mean W = trapezoid integral / (t_last - t_first);
- energy counters: per-rail mean W = (E_last - E_first) / (t_last - t_first).

The window's energy is that mean times the window's duration. No tool's running average is used.
Runs on the board: Python 3.8, standard library only.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .base import BackgroundSampler, PowerSource, Sample

__all__ = ["PowerSampler", "WindowPower", "power_report", "no_power", "sampled_run"]


@dataclass
class WindowPower:
    """Power over one window: ``mean_w`` (whole device, as ``total_label`` says), per-rail
    ``rails_w``, the number of ``samples`` inside, the achieved ``rate_hz`` and the window's
    ``duration_s`` and ``energy_j`` (= mean_w x duration_s)."""

    mean_w: float
    rails_w: Dict[str, float]
    samples: int
    rate_hz: Optional[float]
    duration_s: float
    energy_j: float
    total_label: str


class PowerSampler(BackgroundSampler):
    """Runs ``source`` on a daemon thread at ``rate_hz`` between :meth:`start` and :meth:`stop`
    (or as a context manager) and keeps every sample."""

    thread_name = "power-sampler"

    def __init__(self, source: PowerSource, rate_hz: float = 20.0) -> None:
        if not rate_hz or rate_hz <= 0:
            raise ValueError("rate_hz must be > 0")
        self.source = source
        self.rate_hz = float(rate_hz)
        self.samples: List[Sample] = []
        super().__init__()
        self.error: Optional[str] = None

    def _sink(self, sample: Sample) -> None:
        with self._lock:
            self.samples.append(sample)

    def _run(self) -> None:
        try:
            self.source.run(self._sink, self.rate_hz, self._stop)
        except Exception as exc:  # noqa: BLE001 - reported in the result, never kills the run
            self.error = "%s: %s" % (type(exc).__name__, exc)


    def trace(self, origin_s: float = 0.0) -> List[List[float]]:
        """Every sample as ``[t_s - origin_s, total_w]`` (energy counters: the mean W since the
        previous sample), for plotting the power over time."""
        with self._lock:
            samples = list(self.samples)
        out: List[List[float]] = []
        if getattr(self.source, "kind", "power") == "energy":
            for (t0, v0), (t1, v1) in zip(samples, samples[1:]):
                if t1 > t0:
                    rails = {r: (v1[r] - v0[r]) / (t1 - t0) for r in v1 if r in v0}
                    out.append([t1 - origin_s, float(self.source.total(rails)[0])])
        else:
            for t, rails in samples:
                out.append([t - origin_s, float(self.source.total(rails)[0])])
        return out

    def window(self, begin_s: float, end_s: float) -> Optional[WindowPower]:
        """Figures over ``(begin_s, end_s)`` from the samples strictly inside; None when there
        are too few (0, or 1 for an energy counter)."""
        with self._lock:
            inside = [s for s in self.samples if begin_s < s[0] < end_s]
        return window_power(self.source, inside, end_s - begin_s)


def window_power(source: PowerSource, inside: List[Sample], duration_s: float) -> Optional[WindowPower]:
    """:class:`WindowPower` from the samples of one window (see the module docstring)."""
    energy = getattr(source, "kind", "power") == "energy"
    if not inside or (energy and len(inside) < 2):
        return None
    rails: Dict[str, float] = {}
    for rail in sorted({r for _, v in inside for r in v}):
        pts = [(t, v[rail]) for t, v in inside if rail in v]
        span = pts[-1][0] - pts[0][0]
        if energy:
            if span <= 0:
                continue
            rails[rail] = (pts[-1][1] - pts[0][1]) / span
        elif span <= 0:
            rails[rail] = sum(p[1] for p in pts) / len(pts)
        else:  # trapezoid
            rails[rail] = sum((b[1] + a[1]) * 0.5 * (b[0] - a[0]) for a, b in zip(pts, pts[1:])) / span
    if not rails:
        return None
    mean_w, label = source.total(rails)
    span = inside[-1][0] - inside[0][0]
    rate = (len(inside) - 1) / span if span > 0 else None
    return WindowPower(mean_w=float(mean_w), rails_w=rails, samples=len(inside), rate_hz=rate,
                       duration_s=float(duration_s), energy_j=float(mean_w) * float(duration_s), total_label=label)


def no_power(reason: str, tried: Optional[List[Dict[str, Any]]] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The ``power`` and ``energy_mj_per_inference`` blocks when nothing was measured: every
    figure null, with the reason (:meth:`sdk.result.Power.unmeasured`, the one definition)."""
    from ....result import Energy, Power

    return Power.unmeasured(reason, tried).to_dict(), Energy.unmeasured(reason).to_dict()


def power_report(sampler: PowerSampler, run_window: Tuple[float, float], idle_window: Optional[Tuple[float, float]],
                 count: int, tried: Optional[List[Dict[str, Any]]] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The ``power`` and ``energy_mj_per_inference`` blocks of a bench result from a stopped
    sampler: mean W over the measured window, idle W over the idle window, per-inference mJ."""
    src = sampler.source
    run = sampler.window(*run_window)
    if run is None:
        why = sampler.error or ("only %d power samples inside the %.3f s measured window at %g Hz: raise "
                                "min_seconds or rate_hz" % (len([s for s in sampler.samples if run_window[0] < s[0] < run_window[1]]),
                                                            run_window[1] - run_window[0], sampler.rate_hz))
        return no_power(why, tried)
    idle = sampler.window(*idle_window) if idle_window else None
    note = ("%s; mean over %d samples strictly inside the measured window (%s), on the run's monotonic clock; "
            "the tool's running average is not used" %
            (src.measures, run.samples,
             "counter difference" if getattr(src, "kind", "power") == "energy" else "trapezoid"))
    power: Dict[str, Any] = {
        "mean_w": run.mean_w,
        "idle_w": idle.mean_w if idle else None,
        "samples": run.samples,
        "idle_samples": idle.samples if idle else 0,
        "rate_hz": run.rate_hz,
        "rate_hz_requested": sampler.rate_hz,
        "source": src.name,
        "rails": run.rails_w,
        "idle_rails": idle.rails_w if idle else None,
        "measures": run.total_label,
        "note": note,
        "window_s": run.duration_s,
        "energy_j": run.energy_j,
    }
    if tried is not None:
        power["tried"] = tried
    if sampler.error:
        power["sampler_error"] = sampler.error
    total_mj = run.energy_j / count * 1e3 if count else None
    above = (run.mean_w - idle.mean_w) * run.duration_s / count * 1e3 if (idle and count) else None
    energy: Dict[str, Any] = {"total": total_mj, "above_idle": above}
    if idle is None:
        energy["reason_above_idle"] = "no power samples inside the idle window (idle_seconds too short for rate_hz)"
        power["idle_reason"] = energy["reason_above_idle"]
    return power, energy


def sampled_run(sampler: Optional[PowerSampler], idle_s: float,
                run: Callable[[], Any]) -> Tuple[Any, Optional[Tuple[float, float]]]:
    """With ``sampler`` (None: no power sampling): start it, sleep ``idle_s`` s for the idle window,
    call ``run()``, and stop the sampler whatever happens. Returns ``(run's result, idle window)``
    on ``time.monotonic`` (None when not sampled or ``idle_s`` is 0)."""
    idle_window: Optional[Tuple[float, float]] = None
    if sampler is not None:
        sampler.start()
    try:
        if sampler is not None and idle_s > 0:
            begin = time.monotonic()
            time.sleep(idle_s)
            idle_window = (begin, time.monotonic())
        return run(), idle_window
    finally:
        if sampler is not None:
            sampler.stop()
