"""Inline-SVG plots of performance breakdowns: the roofline (log-log, layers as points against the
chip's compute and bandwidth roofs), a stacked bar of pipeline stages, and small multiples of
device telemetry over time. Pure Python; each returns one ``<svg>`` element as text."""
from __future__ import annotations

import math
from typing import List, Mapping, Optional, Sequence, Tuple

from .svg import PALETTE, escape
from .svg import _fmt as svg_fmt
from .svg import _open as svg_open

__all__ = ["roofline_plot", "stacked_bar", "telemetry_plots", "BOUND_COLORS"]

BOUND_COLORS = {"memory": "#1f77b4", "compute": "#d62728", None: "#7f7f7f"}


def _fmt(v: float) -> str:
    return svg_fmt(v, big=10000)


def _empty(title: str, note: str, cls: str) -> str:
    out = svg_open(title, 640, 80, cls + " empty")
    out.append(f'<text x="320" y="52" text-anchor="middle" font-size="12" fill="#777">{escape(note)}</text>')
    return "\n".join(out + ["</svg>"])


def _decades(lo: float, hi: float) -> List[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0 ** k for k in range(a, b + 1)]


class _LogFrame:
    """Log-log plot area: data ranges and the pixel box."""

    def __init__(self, x_lo: float, x_hi: float, y_lo: float, y_hi: float, left: float, top: float,
                 pw: float, ph: float) -> None:
        self.x_lo, self.x_hi, self.y_lo, self.y_hi = x_lo, x_hi, y_lo, y_hi
        self.left, self.top, self.pw, self.ph = left, top, pw, ph
        self.lx0, self.lx1 = math.log10(x_lo), math.log10(x_hi)
        self.ly0, self.ly1 = math.log10(y_lo), math.log10(y_hi)

    def X(self, v: float) -> float:
        return self.left + (math.log10(v) - self.lx0) / (self.lx1 - self.lx0) * self.pw

    def Y(self, v: float) -> float:
        return self.top + self.ph - (math.log10(max(v, self.y_lo)) - self.ly0) / (self.ly1 - self.ly0) * self.ph


def _roofline_frame(pts: Sequence[Tuple[str, float, float, Optional[str]]], peaks: Sequence[float],
                    bandwidth_gbs: Optional[float], top: float) -> _LogFrame:
    xs = [p[1] for p in pts] or [1.0]
    ys = [p[2] for p in pts] or [1.0]
    x_lo, x_hi = min(xs + [0.1]) / 2, max(xs + [1000.0]) * 2
    if bandwidth_gbs and peaks:
        x_hi = max(x_hi, max(peaks) / bandwidth_gbs * 4)
    y_lo = min(ys + ([bandwidth_gbs * x_lo] if bandwidth_gbs else [])) / 2
    y_hi = max(ys + list(peaks)) * 2
    return _LogFrame(x_lo, x_hi, y_lo, y_hi, 70, top, 720 - 70 - 20, 420 - top - 50)


def _log_axes(f: _LogFrame) -> List[str]:
    out = []
    for t in _decades(f.x_lo, f.x_hi):
        if f.x_lo <= t <= f.x_hi:
            out.append(f'<line x1="{f.X(t):.1f}" x2="{f.X(t):.1f}" y1="{f.top}" y2="{f.top + f.ph}" stroke="#eee"/>')
            out.append(f'<text x="{f.X(t):.1f}" y="{f.top + f.ph + 16}" text-anchor="middle" font-size="11">{_fmt(t)}</text>')
    for t in _decades(f.y_lo, f.y_hi):
        if f.y_lo <= t <= f.y_hi:
            out.append(f'<line x1="{f.left}" x2="{f.left + f.pw}" y1="{f.Y(t):.1f}" y2="{f.Y(t):.1f}" stroke="#eee"/>')
            out.append(f'<text x="{f.left - 6}" y="{f.Y(t) + 4:.1f}" text-anchor="end" font-size="11">{_fmt(t)}</text>')
    out.append(f'<rect x="{f.left}" y="{f.top}" width="{f.pw}" height="{f.ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{f.left + f.pw / 2}" y="410" text-anchor="middle" font-size="12">'
               f'arithmetic intensity (FLOP/byte, log)</text>')
    out.append(f'<text x="16" y="{f.top + f.ph / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 16 {f.top + f.ph / 2})">GFLOP/s (log)</text>')
    return out


def _roofs(f: _LogFrame, peaks: Mapping[str, float], bandwidth_gbs: Optional[float]) -> List[str]:
    out = []
    for i, (prec, peak) in enumerate(sorted(peaks.items(), key=lambda kv: kv[1])):
        color = PALETTE[(i + 4) % len(PALETTE)]
        ridge = peak / bandwidth_gbs if bandwidth_gbs else f.x_lo
        line = []
        if bandwidth_gbs:
            start = max(f.x_lo, f.y_lo / bandwidth_gbs)
            line += [(f.X(start), f.Y(start * bandwidth_gbs)),
                     (f.X(min(ridge, f.x_hi)), f.Y(min(ridge, f.x_hi) * bandwidth_gbs))]
        line += [(f.X(max(ridge, f.x_lo)), f.Y(peak)), (f.X(f.x_hi), f.Y(peak))]
        d = " ".join(f"{a:.1f},{b:.1f}" for a, b in line)
        out.append(f'<polyline class="roof" points="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{f.left + f.pw - 4}" y="{f.Y(peak) - 4:.1f}" text-anchor="end" font-size="11" '
                   f'fill="{color}">{escape(prec)} peak {_fmt(peak)} GOP/s</text>')
    if bandwidth_gbs:
        out.append(f'<text x="{f.left + 6}" y="{f.top + 14}" font-size="11" fill="#555">memory roof: '
                   f'{_fmt(bandwidth_gbs)} GB/s</text>')
    return out


def _layer_points(f: _LogFrame, pts: Sequence[Tuple[str, float, float, Optional[str]]]) -> List[str]:
    out = []
    for label, x, y, bound in pts:
        out.append(f'<circle class="layer {escape(str(bound))}" cx="{f.X(x):.1f}" cy="{f.Y(y):.1f}" r="3.5" '
                   f'fill="{BOUND_COLORS.get(bound, "#7f7f7f")}" fill-opacity="0.7"><title>{escape(label)}: '
                   f'{_fmt(x)} FLOP/B, {_fmt(y)} GFLOP/s, {escape(str(bound))}-bound</title></circle>')
    for i, (name, color) in enumerate((("memory-bound", BOUND_COLORS["memory"]),
                                       ("compute-bound", BOUND_COLORS["compute"]))):
        out.append(f'<circle cx="{f.left + 12 + i * 120}" cy="{f.top + f.ph - 12}" r="4" fill="{color}"/>')
        out.append(f'<text x="{f.left + 20 + i * 120}" y="{f.top + f.ph - 8}" font-size="11">{name}</text>')
    return out


def roofline_plot(points: Sequence[Tuple[str, float, float, Optional[str]]], peaks: Mapping[str, float],
                  bandwidth_gbs: Optional[float], title: str = "Roofline", note: str = "") -> str:
    """Layers as ``(label, intensity FLOP/byte, GFLOP/s, bound)`` on log-log axes, under the roofs
    ``min(peak, intensity x bandwidth)`` (one per precision in ``peaks``, GOP/s). Points are
    coloured by bound (memory / compute); ``note`` is written under the title (e.g. "estimate")."""
    pts = [(lbl, float(x), float(y), b) for lbl, x, y, b in points
           if x and y and x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if not pts and not peaks:
        return _empty(title, "no layer with both FLOPs and a time", "plot roofline")
    f = _roofline_frame(pts, [float(v) for v in peaks.values() if v], bandwidth_gbs, 56 if note else 40)
    out = svg_open(title, 720, 420, "plot roofline")
    if note:
        out.append(f'<text x="360" y="38" text-anchor="middle" font-size="12" fill="#c62828">{escape(note)}</text>')
    out += _log_axes(f) + _roofs(f, peaks, bandwidth_gbs) + _layer_points(f, pts)
    return "\n".join(out + ["</svg>"])


def stacked_bar(rows: Sequence[Tuple[str, Mapping[str, Optional[float]]]], stages: Sequence[str], title: str,
                unit: str = "ms") -> str:
    """One horizontal bar per ``(label, {stage: value})``, its segments stacked in ``stages``
    order, each labelled; a legend names the stages."""
    norm = [(l, {s: float(v.get(s) or 0.0) for s in stages}) for l, v in rows]
    norm = [r for r in norm if any(math.isfinite(x) for x in r[1].values())]
    if not norm:
        return _empty(title, "no stage times", "plot stacked")
    width, bar_h = 720, 30
    left, right, top = 130.0, 70, 56
    height = top + bar_h * len(norm) + 50
    pw = width - left - right
    hi = max(sum(v.values()) for _, v in norm) or 1.0
    out = svg_open(title, width, height, "plot stacked")
    for i, s in enumerate(stages):
        x = left + i * 130
        out.append(f'<rect x="{x}" y="30" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(f'<text x="{x + 14}" y="39" font-size="11">{escape(s)}</text>')
    for r, (label, vals) in enumerate(norm):
        y = top + r * bar_h
        x = float(left)
        out.append(f'<text x="{left - 6}" y="{y + bar_h / 2 + 2:.1f}" text-anchor="end" font-size="11">{escape(label[:20])}</text>')
        for i, s in enumerate(stages):
            w = vals[s] / hi * pw
            if w <= 0:
                continue
            out.append(f'<rect class="segment" x="{x:.1f}" y="{y + 4}" width="{max(0.5, w):.1f}" height="{bar_h - 8}" '
                       f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(s)}: {_fmt(vals[s])} {escape(unit)}</title></rect>')
            if w > 34:
                out.append(f'<text x="{x + w / 2:.1f}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="middle" font-size="10" '
                           f'fill="#fff">{_fmt(vals[s])}</text>')
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + bar_h / 2 + 4:.1f}" font-size="11">{_fmt(sum(vals.values()))} {escape(unit)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle" font-size="12">{escape(unit)} per frame</text>')
    return "\n".join(out + ["</svg>"])


def telemetry_plots(t_s: Sequence[float], series: Mapping[str, Sequence[Optional[float]]],
                    units: Mapping[str, str], title: str = "Telemetry",
                    span: Optional[Tuple[float, float]] = None) -> str:
    """Small multiples, one strip per series ``name -> values`` over ``t_s`` (s), sharing the
    time axis; ``span`` shades the measured window."""
    named = [(k, list(v)) for k, v in series.items() if any(x is not None for x in v)]
    if not named or not t_s:
        return _empty(title, "no telemetry samples", "plot telemetry")
    width, strip = 720, 70
    left, right, top = 150.0, 20, 34
    height = top + strip * len(named) + 36
    pw = width - left - right
    t0, t1 = min(t_s), max(t_s)
    if t1 <= t0:
        t1 = t0 + 1.0

    def X(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * pw

    out = svg_open(title, width, height, "plot telemetry")
    for i, (name, vals) in enumerate(named):
        y0 = top + i * strip
        finite = [v for v in vals if v is not None and math.isfinite(v)]
        lo, hi = min(finite), max(finite)
        if hi <= lo:
            lo, hi = lo - 1, hi + 1
        out.append(f'<rect x="{left}" y="{y0 + 4}" width="{pw}" height="{strip - 12}" fill="none" stroke="#ccc"/>')
        if span:
            a, b = X(max(span[0], t0)), X(min(span[1], t1))
            out.append(f'<rect class="span" x="{a:.1f}" y="{y0 + 4}" width="{max(1.0, b - a):.1f}" height="{strip - 12}" '
                       f'fill="#2ca02c" fill-opacity="0.10"/>')
        pts = [(X(t), y0 + 4 + (strip - 12) * (1 - (v - lo) / (hi - lo))) for t, v in zip(t_s, vals)
               if v is not None and math.isfinite(v)]
        d = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        out.append(f'<polyline class="series" points="{d}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" '
                   f'stroke-width="1.5"/>')
        unit = units.get(name, "")
        out.append(f'<text x="{left - 6}" y="{y0 + strip / 2:.1f}" text-anchor="end" font-size="11">{escape(name)}</text>')
        out.append(f'<text x="{left - 6}" y="{y0 + strip / 2 + 13:.1f}" text-anchor="end" font-size="10" fill="#666">'
                   f'{_fmt(lo)}..{_fmt(hi)} {escape(unit)}</text>')
    out.append(f'<text x="{left}" y="{height - 10}" font-size="11">{_fmt(0.0)} s</text>')
    out.append(f'<text x="{left + pw}" y="{height - 10}" text-anchor="end" font-size="11">{_fmt(t1 - t0)} s</text>')
    return "\n".join(out + ["</svg>"])
