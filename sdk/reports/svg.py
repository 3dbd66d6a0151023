"""Small inline-SVG plots for the HTML reports: histogram, line plot (with shaded windows) and
horizontal bars. Pure Python, no dependencies; each returns one ``<svg>`` element as text."""
from __future__ import annotations

import html
import math
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..textsafe import xml_text

__all__ = ["histogram", "line_plot", "bar_chart", "nice_ticks", "PALETTE"]


def escape(s: str, quote: bool = True) -> str:
    """XML-escaped text that XML can hold (characters it cannot are written as visible escapes)."""
    return html.escape(xml_text(s), quote)


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]
_W, _H = 600, 260
_M = (50, 18, 48, 64)  # top, right, bottom, left


def nice_ticks(lo: float, hi: float, n: int = 5) -> List[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 0.5:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float, big: float = 1000) -> str:
    """Three significant digits; two, in exponent form, at ``big`` and above or under 0.01."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= big or a < 0.01:
        return f"{v:.2g}"
    return f"{v:.3g}"


class _Frame:
    def __init__(self, x0: float, x1: float, y0: float, y1: float, width: int = _W, height: int = _H) -> None:
        self.x0, self.x1 = x0, (x1 if x1 > x0 else x0 + 1)
        self.y0, self.y1 = y0, (y1 if y1 > y0 else y0 + 1)
        self.w, self.h = width, height
        self.left, self.top = _M[3], _M[0]
        self.pw, self.ph = width - _M[3] - _M[1], height - _M[0] - _M[2]

    def x(self, v: float) -> float:
        return self.left + (v - self.x0) / (self.x1 - self.x0) * self.pw

    def y(self, v: float) -> float:
        return self.top + self.ph - (v - self.y0) / (self.y1 - self.y0) * self.ph


def _open(title: str, width: int = _W, height: int = _H, cls: str = "plot") -> List[str]:
    return [f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
            f"<title>{escape(title)}</title>",
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
            f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="600">{escape(title)}</text>']


def _axes(f: _Frame, xticks: Sequence[float], yticks: Sequence[float], xlabel: str, ylabel: str,
          xfmt: Callable[[float], str] = _fmt) -> List[str]:
    out = []
    for t in yticks:
        y = f.y(t)
        out.append(f'<line x1="{f.left}" x2="{f.left + f.pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{f.left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{escape(_fmt(t))}</text>')
    for t in xticks:
        x = f.x(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top + f.ph}" y2="{f.top + f.ph + 4}" stroke="#333"/>')
        out.append(f'<text x="{x:.1f}" y="{f.top + f.ph + 17}" text-anchor="middle" font-size="11">{escape(xfmt(t))}</text>')
    out.append(f'<rect x="{f.left}" y="{f.top}" width="{f.pw}" height="{f.ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{f.left + f.pw / 2}" y="{f.h - 8}" text-anchor="middle" font-size="12">{escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{f.top + f.ph / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 14 {f.top + f.ph / 2})">{escape(ylabel)}</text>')
    return out


def _empty(title: str, note: str) -> str:
    out = _open(title, height=80, cls="plot empty")
    out.append(f'<text x="{_W / 2}" y="52" text-anchor="middle" font-size="12" fill="#777">{escape(note)}</text>')
    return "\n".join(out + ["</svg>"])


def histogram(values: Sequence[float], title: str, xlabel: str, bins: int = 40,
              marks: Sequence[Tuple[str, Optional[float]]] = ()) -> str:
    """Histogram of ``values``; ``marks`` draw labelled vertical lines (e.g. ("p99", 3.2))."""
    vals = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    if not vals:
        return _empty(title, "no samples")
    # a few far outliers (a GC pause, a page fault) would squeeze the histogram: cut at p99.9
    # when the maximum is far beyond it, and say how many samples were left out
    vals, title = _cut_outliers(vals, title)
    lo, hi = vals[0], vals[-1]
    if hi == lo:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    bins = max(1, min(bins, len(vals)))
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in vals:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    xt = nice_ticks(lo, hi)
    f = _Frame(min(lo, xt[0]), max(hi, xt[-1]), 0, max(counts) * 1.08)
    out = _open(title) + _axes(f, [t for t in xt if f.x0 <= t <= f.x1], nice_ticks(0, max(counts) * 1.08, 4), xlabel, "count")
    for i, c in enumerate(counts):
        if c:
            x0, x1 = f.x(lo + i * width), f.x(lo + (i + 1) * width)
            out.append(f'<rect class="bar" x="{x0:.1f}" y="{f.y(c):.1f}" width="{max(0.5, x1 - x0 - 0.5):.1f}" '
                       f'height="{f.y(0) - f.y(c):.1f}" fill="{PALETTE[0]}"/>')
    out += _marks_svg(f, marks)
    return "\n".join(out + ["</svg>"])


def _cut_outliers(vals: List[float], title: str) -> Tuple[List[float], str]:
    """``vals`` (sorted) without far outliers, and the title saying how many were cut."""
    cut = vals[min(len(vals) - 1, int(len(vals) * 0.995))]
    if vals[-1] > cut + 0.5 * (cut - vals[0]) and len(vals) >= 200:
        above = sum(1 for v in vals if v > cut)
        vals = [v for v in vals if v <= cut]
        title = f"{title} ({above} sample{'s' if above > 1 else ''} above {_fmt(cut)} not shown)"
    return vals, title


def _marks_svg(f: _Frame, marks: Sequence[Tuple[str, Optional[float]]]) -> List[str]:
    out = []
    for i, (label, v) in enumerate(marks):
        if v is None or not (f.x0 <= v <= f.x1):
            continue
        x = f.x(v)
        color = PALETTE[(i + 1) % len(PALETTE)]
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top}" y2="{f.top + f.ph}" stroke="{color}" '
                   f'stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x + 3:.1f}" y="{f.top + 12 + 12 * i}" font-size="11" fill="{color}">'
                   f'{escape(label)} {escape(_fmt(v))}</text>')
    return out


def _finite(x: Any, y: Any) -> bool:
    return x is not None and y is not None and math.isfinite(float(x)) and math.isfinite(float(y))


def _y_range(ys: Sequence[float], ylim: Optional[Tuple[float, float]]) -> Tuple[float, float]:
    """``ylim``, else the data's range padded by 8 % (from 0 when the data is positive and near it)."""
    if ylim:
        return ylim
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.08 or (abs(y1) * 0.1 or 1.0)
    return (0.0 if y0 >= 0 and y0 - pad < 0 else y0 - pad), y1 + pad


def _spans_svg(f: _Frame, spans: Sequence[Tuple[str, float, float, str]]) -> List[str]:
    out = []
    for label, a, b, color in spans:
        xa, xb = f.x(max(a, f.x0)), f.x(min(b, f.x1))
        out.append(f'<rect class="span" x="{xa:.1f}" y="{f.top}" width="{max(1.0, xb - xa):.1f}" height="{f.ph}" '
                   f'fill="{color}" fill-opacity="0.15"/>')
        out.append(f'<text x="{xa + 3:.1f}" y="{f.top + f.ph - 6}" font-size="11" fill="{color}">{escape(label)}</text>')
    return out


def _series_svg(f: _Frame, color: str, xs: Sequence[float], ys: Sequence[float], markers: bool) -> List[str]:
    """One polyline (thinned past 4000 points), with a circle per point when ``markers``."""
    p = [(f.x(x), f.y(min(max(y, f.y0), f.y1))) for x, y in zip(xs, ys) if _finite(x, y)]
    if not p:
        return []
    if len(p) > 4000:  # keep the file small: thin very long traces
        p = p[::len(p) // 2000]
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in p)
    out = [f'<polyline class="series" points="{d}" fill="none" stroke="{color}" stroke-width="1.5"/>']
    if markers:
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>' for x, y in p)
    return out


def _legend_svg(f: _Frame, labels: Sequence[str]) -> List[str]:
    out = []
    for i, label in enumerate(labels):
        lx = f.left + (i % 5) * 105
        ly = 36 + (i // 5) * 13
        out.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly + 1}" font-size="11">{escape(label)}</text>')
    return out


def line_plot(series: Sequence[Tuple[str, Sequence[float], Sequence[float]]], title: str, xlabel: str, ylabel: str,
              spans: Sequence[Tuple[str, float, float, str]] = (), markers: bool = False,
              ylim: Optional[Tuple[float, float]] = None, xticks: Optional[Sequence[float]] = None) -> str:
    """One polyline per ``(label, xs, ys)``; ``spans`` shade x ranges ``(label, x0, x1, color)``
    (e.g. the idle and measured windows of a power trace)."""
    pts = [(x, y) for _, xs, ys in series for x, y in zip(xs, ys) if _finite(x, y)]
    if not pts:
        return _empty(title, "no data")
    xs_all = [p[0] for p in pts] + [s[1] for s in spans] + [s[2] for s in spans]
    x0, x1 = min(xs_all), max(xs_all)
    y0, y1 = _y_range([p[1] for p in pts], ylim)
    f = _Frame(x0, x1, y0, y1)
    if len(series) > 1:  # room for the legend rows above the plot
        extra = 13 * ((len(series) - 1) // 5)
        f.top += extra
        f.ph -= extra
    xt = list(xticks) if xticks is not None else [t for t in nice_ticks(x0, x1) if x0 <= t <= x1]
    out = _open(title) + _axes(f, xt, [t for t in nice_ticks(y0, y1, 4) if y0 <= t <= y1], xlabel, ylabel)
    out += _spans_svg(f, spans)
    for i, (_label, xs, ys) in enumerate(series):
        out += _series_svg(f, PALETTE[i % len(PALETTE)], xs, ys, markers)
    if len(series) > 1:
        out += _legend_svg(f, [label for label, _, _ in series])
    return "\n".join(out + ["</svg>"])


def bar_chart(items: Sequence[Tuple[str, float]], title: str, xlabel: str, color: str = PALETTE[0],
              limit: Optional[Tuple[str, float]] = None) -> str:
    """Horizontal bars ``(label, value)``; ``limit`` draws a labelled dashed line."""
    rows = [(str(k), float(v)) for k, v in items if v is not None and math.isfinite(float(v))]
    if not rows:
        return _empty(title, "no finite values")
    bar_h = 22
    height = _M[0] + _M[2] + bar_h * len(rows) + 8
    vals = [v for _, v in rows] + ([limit[1]] if limit else [])
    lo, hi = min(0.0, min(vals)), max(vals)
    xt = nice_ticks(lo, hi)
    f = _Frame(min(lo, xt[0]), max(hi, xt[-1]), 0, len(rows), height=height)
    f.left = 140
    f.pw = _W - f.left - _M[1]
    out = _open(title, height=height) + [
        f'<rect x="{f.left}" y="{f.top}" width="{f.pw}" height="{f.ph}" fill="none" stroke="#333"/>']
    for t in xt:
        x = f.x(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top}" y2="{f.top + f.ph}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x:.1f}" y="{f.top + f.ph + 16}" text-anchor="middle" font-size="11">{escape(_fmt(t))}</text>')
    for i, (label, v) in enumerate(rows):
        y = f.top + 4 + i * bar_h
        xa, xb = sorted((f.x(0), f.x(v)))
        out.append(f'<rect class="bar" x="{xa:.1f}" y="{y}" width="{max(1.0, xb - xa):.1f}" height="{bar_h - 8}" fill="{color}"/>')
        out.append(f'<text x="{f.left - 6}" y="{y + bar_h / 2:.1f}" text-anchor="end" font-size="11">{escape(label[:22])}</text>')
        out.append(f'<text x="{xb + 4:.1f}" y="{y + bar_h / 2:.1f}" font-size="11">{escape(_fmt(v))}</text>')
    if limit:
        x = f.x(limit[1])
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.top}" y2="{f.top + f.ph}" stroke="{PALETTE[3]}" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{x + 3:.1f}" y="{f.top - 4}" font-size="11" fill="{PALETTE[3]}">{escape(limit[0])}</text>')
    out.append(f'<text x="{f.left + f.pw / 2}" y="{height - 8}" text-anchor="middle" font-size="12">{escape(xlabel)}</text>')
    return "\n".join(out + ["</svg>"])
