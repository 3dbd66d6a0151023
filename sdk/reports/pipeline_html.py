"""The HTML report of a pipeline run or validation (``sdk pipeline run --report``, ``sdk validate
--pipeline``): verdict and checks, a stacked per-stage bar (pre glue, inference, post glue of each
stage, p50 and mean), the per-frame timeline of the overlapped run (one row per frame, one
coloured span per stage), per-stage statistics, throughput, energy and accuracy. One file, inline
SVG, no scripts."""
from __future__ import annotations

from html import escape
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import perfplots
from .html import _CSS, _badge, _check_rows, _table
from .svg import PALETTE

__all__ = ["pipeline_report_html", "timeline_svg"]


def _page(title: str, body: List[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def timeline_svg(timeline: Sequence[Mapping[str, Any]], stages: Sequence[str], title: str, max_frames: int = 60) -> str:
    """Frames (rows) x time (ms): each stage's span of each frame in its colour."""
    rows = list(timeline)[:max_frames]
    if not rows:
        return f'<svg class="plot" width="720" height="60"><text x="10" y="30">{escape(title)}: no overlapped run</text></svg>'
    width, row_h, left, top = 720, 12, 60.0, 40
    height = top + row_h * len(rows) + 40
    t_max = max(float(span[1]) for r in rows for span in r["stages"]) or 1.0
    pw = width - left - 20
    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="{escape(title)}">', f'<text x="10" y="20" font-weight="bold">{escape(title)}</text>']
    for i, s in enumerate(stages):
        out.append(f'<rect x="{left + 140 * i:.0f}" y="26" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text x="{left + 14 + 140 * i:.0f}" y="35" font-size="11">{escape(s)}</text>')
    for r_i, r in enumerate(rows):
        y = top + r_i * row_h
        out.append(f'<text x="{left - 6:.0f}" y="{y + 9}" font-size="9" text-anchor="end">{int(r["frame"])}</text>')
        for k, span in enumerate(r["stages"]):
            x0, x1 = left + pw * float(span[0]) / t_max, left + pw * float(span[1]) / t_max
            out.append(f'<rect x="{x0:.1f}" y="{y + 1}" width="{max(0.5, x1 - x0):.1f}" height="{row_h - 2}" '
                       f'fill="{PALETTE[k % len(PALETTE)]}"><title>frame {int(r["frame"])} {escape(stages[k])}: '
                       f'{float(span[0]):.1f}-{float(span[1]):.1f} ms</title></rect>')
    y_axis = top + row_h * len(rows) + 16
    out.append(f'<text x="{left:.0f}" y="{y_axis}" font-size="11">0 ms</text>'
               f'<text x="{width - 20}" y="{y_axis}" font-size="11" text-anchor="end">{t_max:.0f} ms</text>'
               f'<text x="{width / 2:.0f}" y="{y_axis + 16}" font-size="11" text-anchor="middle">time since the '
               f'overlapped run began (frames on the left)</text></svg>')
    return "".join(out)


def _num(v: Any, digits: int = 2) -> str:
    return "-" if v is None else f"{float(v):.{digits}f}"


def _result_section(doc: Mapping[str, Any]) -> List[str]:
    stages: List[Dict[str, Any]] = list(doc.get("stages") or [])
    names = [str(st["name"]) for st in stages]
    parts: List[str] = []
    for n in names:
        parts += [f"{n}: pre glue", f"{n}: inference", f"{n}: post glue"]
    rows = []
    for stat in ("p50", "mean"):
        vals: Dict[str, Optional[float]] = {}
        for st in stages:
            vals[f"{st['name']}: pre glue"] = (st.get("pre_ms") or {}).get(stat)
            vals[f"{st['name']}: inference"] = (st.get("inference_ms") or {}).get(stat)
            vals[f"{st['name']}: post glue"] = (st.get("post_ms") or {}).get(stat)
        rows.append((stat, vals))
    where = (doc.get("board") or {}).get("name") or "host"
    e2e = (doc.get("end_to_end") or {}).get("latency_ms") or {}
    tp = doc.get("throughput") or {}
    en = doc.get("energy") or {}
    body = [f"<h2>{escape(str(where))}</h2>",
            '<div class="plots">' + perfplots.stacked_bar(rows, parts, "Where a frame's time goes, per stage") + "</div>",
            _table(["stage", "model", "target", "precision", "p50 ms", "p99 ms", "p50 95% CI", "inference p50 ms",
                    "glue p50 ms", "items / frame", "share"],
                   [[s["name"], (s.get("model") or {}).get("name"), s.get("target"), s.get("precision"),
                     _num(s["latency_ms"].get("p50")), _num(s["latency_ms"].get("p99")),
                     str((s["latency_ms"].get("ci95") or {}).get("p50")), _num((s.get("inference_ms") or {}).get("p50")),
                     _num((s.get("glue_ms") or {}).get("p50")), _num((s.get("items_per_frame") or {}).get("mean"), 1),
                     _num(s.get("share"))] for s in stages], num_cols=(4, 5, 7, 8, 9, 10)),
            _table(["end to end p50 ms", "p99 ms", "p50 95% CI", "serial fps", "overlapped fps", "speed-up",
                    "bounding stage", "mJ / frame"],
                   [[_num(e2e.get("p50")), _num(e2e.get("p99")), str((e2e.get("ci95") or {}).get("p50")),
                     _num(tp.get("serial_fps")), _num(tp.get("overlapped_fps")), _num(tp.get("speedup")),
                     doc.get("bounding_stage"),
                     _num(en.get("mj_per_frame"), 1) if en.get("measured") else f"not measured: {en.get('reason')}"]]),
            '<div class="plots">' + timeline_svg(doc.get("timeline") or [], names,
                                                 "Per-frame timeline, stages overlapped") + "</div>"]
    acc = doc.get("accuracy")
    if acc:
        body.append(_table(["end-to-end metric", "value", "box recall", "box precision", "inputs"],
                           [[acc.get("metric_name"), _num(acc.get("metric"), 4), _num(acc.get("box_recall"), 4),
                             _num(acc.get("box_precision"), 4), acc.get("inputs")]]))
    return body


def pipeline_report_html(doc: Mapping[str, Any]) -> str:
    """The report of a pipeline validation (``{verdict, checks, results}``) or of one
    :class:`~sdk.kernels.pipelines.PipelineResult` document."""
    results = list(doc.get("results") or ([doc] if "stages" in doc else []))
    name = str(doc.get("name") or ((results[0].get("pipeline") or {}).get("name") if results else "pipeline"))
    body = [f"<h1>Pipeline: {escape(name)}</h1>"]
    if doc.get("verdict"):
        body.append(f"<p>{_badge(str(doc['verdict']))} {escape(str(doc.get('summary') or ''))}</p>")
        body.append(_table(["check", "verdict", "measured", "limit", "reason"], _check_rows(list(doc.get("checks") or []))))
    for r in results:
        body += _result_section(r)
    return _page(f"pipeline {name}", body)
