"""Self-contained HTML reports (one file, inline CSS and SVG, no scripts, opens offline).

:func:`validation_html` renders a validation result dict: the GO / NO-GO verdict, the fleet
summary, and per board its checks with verdicts, the latency histogram and latency over time, the
power trace with the idle and measured windows, per-output error against the reference, the
robustness sweep, and the device facts and versions. :func:`robustness_html` renders a sweep.
"""
from __future__ import annotations

import math
from .svg import escape   # html.escape of text XML can hold (control characters made visible)
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import svg

__all__ = ["validation_html", "robustness_html", "power_trace", "latency_rows"]

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:20px 0 8px} .meta{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px} th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5} td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px;color:#fff}
.pass{background:#2e7d32} .fail{background:#c62828} .skip{background:#9e9e9e}
.verdict{font-size:20px;padding:10px 16px;border-radius:6px;color:#fff;display:inline-block;margin:10px 0}
.plots{display:flex;flex-wrap:wrap;gap:12px} .plots svg{border:1px solid #eee}
.error{background:#fdecea;border:1px solid #f5c6cb;padding:8px 12px;border-radius:4px}
details{margin:8px 0} summary{cursor:pointer;font-weight:600}
"""


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.{digits}g}"
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return v
    return str(v)


def _badge(verdict: str) -> str:
    return f'<span class="badge {escape(verdict)}">{escape(verdict.upper())}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "", num_cols: Sequence[int] = ()) -> str:
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            text = c if isinstance(c, _Raw) else escape(_fmt(c))
            cells.append(f'<td class="num">{text}</td>' if i in num_cols else f"<td>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out + ["</tbody></table>"])


class _Raw(str):
    """Already-escaped HTML for a table cell."""


def _flatten(d: Any, prefix: str = "") -> List[Tuple[str, Any]]:
    out: List[Tuple[str, Any]] = []
    if isinstance(d, dict):
        if not d and prefix:
            out.append((prefix, "-"))
        for k, v in d.items():
            out.extend(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list) and d and all(isinstance(x, (dict, list)) for x in d):
        for i, v in enumerate(d):
            out.extend(_flatten(v, f"{prefix}[{i}]"))
    elif isinstance(d, list):
        out.append((prefix, ", ".join(_fmt(x) for x in d) or "-"))
    else:
        out.append((prefix, d))
    return out


def _page(title: str, body: List[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _check_rows(checks: Sequence[Dict[str, Any]]) -> List[Sequence[Any]]:
    rows: List[Sequence[Any]] = []
    for c in checks:
        limit = "" if c.get("limit") is None else f"{c.get('op') or ''} {_fmt(c['limit'])}".strip()
        unit = c.get("unit") or ""
        rows.append([c["name"], _Raw(_badge(c["verdict"])),
                     f"{_fmt(c.get('measured'))} {unit}".strip() if c.get("measured") is not None else "-",
                     f"{limit} {unit}".strip() if limit else "-", c.get("reason") or ""])
    return rows


def _trace_points(trace: Any) -> Tuple[List[float], List[float]]:
    """``power.trace`` as ``[[t_s, w], ...]``, ``[{t_s, w}, ...]`` or ``{"t_s": [...], "w": [...]}``."""
    xs: List[float] = []
    ys: List[float] = []
    if isinstance(trace, dict):
        xs = [float(v) for v in trace.get("t_s") or trace.get("t") or []]
        ys = [float(v) for v in trace.get("w") or trace.get("watts") or []]
    elif isinstance(trace, list):
        for item in trace:
            if isinstance(item, dict):
                point: Dict[str, Any] = item
                xs.append(float(point.get("t_s", point.get("t", 0.0))))
                ys.append(float(point.get("w", point.get("watts", 0.0))))
            elif isinstance(item, (list, tuple)) and len(item) >= 2:
                xs.append(float(item[0]))
                ys.append(float(item[1]))
    return xs, ys


def _window_means(power: Dict[str, Any], win: Dict[str, Any]) -> Tuple[List[float], List[float]]:
    """No per-sample trace: the idle and measured window means on the windows' own times (a step plot)."""
    xs: List[float] = []
    ys: List[float] = []
    ib, ie = win.get("idle_begin_s"), win.get("idle_end_s")
    if ib is not None and ie is not None and power.get("idle_w") is not None:
        xs += [float(ib), float(ie)]
        ys += [float(power["idle_w"])] * 2
    xs += [float(win["begin_s"]), float(win["end_s"])]
    ys += [float(power["mean_w"])] * 2
    return xs, ys


def _span(w: Any, t0: float) -> Optional[Tuple[float, float]]:
    """A window ``{begin_s, end_s}`` or ``[begin, end]`` relative to ``t0``, else None."""
    if isinstance(w, dict) and w.get("begin_s") is not None and w.get("end_s") is not None:
        return float(w["begin_s"]) - t0, float(w["end_s"]) - t0
    if isinstance(w, (list, tuple)) and len(w) == 2:
        return float(w[0]) - t0, float(w[1]) - t0
    return None


def power_trace(bench: Dict[str, Any]) -> Tuple[Optional[Tuple[List[float], List[float]]], List[Tuple[str, float, float, str]], str]:
    """``((t_s, w), spans, note)`` from a benchmark result's ``power``: the trace is
    ``power.trace`` as ``[[t_s, w], ...]`` or ``{"t_s": [...], "w": [...]}``; spans come from
    ``power.idle_window`` / ``power.window`` (or the result's ``window``) as ``{begin_s, end_s}``
    or ``[begin, end]``. Without a trace, the idle and measured window means are drawn on the
    windows' times (``window.idle_begin_s``..``end_s``) and ``note`` says so. Times are shown
    relative to the first point."""
    power: Dict[str, Any] = (bench or {}).get("power") or {}
    xs, ys = _trace_points(power.get("trace"))
    win: Dict[str, Any] = bench.get("window") or {}
    trace_note = ""
    if not xs and power.get("mean_w") is not None and win.get("begin_s") is not None:
        xs, ys = _window_means(power, win)
        trace_note = "window means (the board returned no per-sample trace)"
    if not xs:
        reason = power.get("reason") or ("no power trace in the result" if power.get("mean_w") is not None
                                         else "no power sensor")
        return None, [], str(reason)
    t0 = xs[0]
    spans = []
    idle = _span(power.get("idle_window"), t0) or _span(
        {"begin_s": win.get("idle_begin_s"), "end_s": win.get("idle_end_s")}, t0)
    if idle:
        spans.append(("idle", idle[0], idle[1], "#7f7f7f"))
    measured = _span(power.get("window") or power.get("measured_window") or bench.get("window"), t0)
    if measured:
        spans.append(("measured", measured[0], measured[1], "#2ca02c"))
    return ([x - t0 for x in xs], ys), spans, trace_note


def _latency_plots(bench: Dict[str, Any]) -> List[str]:
    lat = bench.get("latency_ms") or {}
    samples = bench.get("samples_ms") or bench.get("latency_samples_ms") or []
    marks: List[Tuple[str, Optional[float]]] = [(k, lat.get(k)) for k in ("p50", "p99") if lat.get(k) is not None]
    if samples:
        hist = svg.histogram(samples, "Latency histogram", "latency (ms)", marks=marks)
        over = svg.line_plot([("latency", list(range(1, len(samples) + 1)), samples)], "Latency over time",
                             "run #", "latency (ms)")
    else:  # the board sent statistics only: draw the distribution from its percentiles
        keys = [k for k in ("min", "p50", "p90", "p95", "p99") if lat.get(k) is not None]  # max: in the table
        hist = svg.bar_chart([(k, lat[k]) for k in keys], "Latency percentiles (the board returned no per-run samples)",
                             "latency (ms)")
        over = svg.line_plot([], "Latency over time (the board returned no per-run samples)", "run #", "ms")
    return [hist, over]


def _power_section(bench: Dict[str, Any]) -> List[str]:
    power = bench.get("power") or {}
    energy = bench.get("energy_mj_per_inference") or {}
    data, spans, note = power_trace(bench)
    out = []
    rows = [("mean power (measured window)", power.get("mean_w"), "W"), ("idle power", power.get("idle_w"), "W"),
            ("energy per inference", energy.get("total"), "mJ"),
            ("energy per inference above idle", energy.get("above_idle"), "mJ"),
            ("samples", power.get("samples") if not isinstance(power.get("samples"), list) else len(power["samples"]), ""),
            ("sample rate", power.get("rate_hz"), "Hz"), ("source", power.get("source"), "")]
    if power.get("reason") or energy.get("reason"):
        rows.append(("note", power.get("reason") or energy.get("reason"), ""))
    out.append(_table(["power", "value", "unit"], rows, num_cols=(1,)))
    if data:
        title = f"Power trace: {note}" if note else "Power trace"
        out.append(svg.line_plot([("power", data[0], data[1])], title, "time (s)", "power (W)", spans=spans))
    else:
        out.append(svg.line_plot([], "Power trace", "time (s)", "W"))  # the reason is in the table's note
    return out


def _compare_section(compare: Dict[str, Dict[str, Any]], budgets: Dict[str, Any]) -> List[str]:
    if not compare:
        return ["<p class=\"meta\">no outputs compared</p>"]
    rows = [[name, m.get("cosine"), m.get("snr_db"), m.get("max_abs_error"), m.get("top1_agreement")]
            for name, m in compare.items()]
    out = [_table(["output", "cosine", "SNR dB", "max abs error", "top-1 agreement"], rows, num_cols=(1, 2, 3, 4))]
    snr = [(name, float(m["snr_db"])) for name, m in compare.items() if isinstance(m.get("snr_db"), (int, float))]
    limit = ("min SNR", budgets["min_snr_db"]) if "min_snr_db" in (budgets or {}) else None
    finite = [(n, v) for n, v in snr if math.isfinite(v)]
    if finite:
        out.append(svg.bar_chart(finite, "Per-output error: SNR vs reference (higher is better)", "SNR (dB)",
                                 limit=limit))
    errs = [(name, max(0.0, 1.0 - float(m["cosine"]))) for name, m in compare.items() if isinstance(m.get("cosine"), (int, float))]
    if errs:
        out.append(svg.bar_chart([(n, v) for n, v in errs], "Per-output error: 1 - cosine (lower is better)",
                                 "1 - cosine", color=svg.PALETTE[1]))
    out.append(svg.bar_chart([(name, float(m["max_abs_error"])) for name, m in compare.items()
                              if isinstance(m.get("max_abs_error"), (int, float))],
                             "Per-output error: max abs error", "max |board - reference|", color=svg.PALETTE[4]))
    return out


def robustness_block(rob: Dict[str, Any]) -> List[str]:
    """Table and plot of a robustness sweep dict (``RobustnessResult.to_dict()``)."""
    rows = rob.get("rows") or []
    clean = rob.get("clean") or {}
    out = [f'<p class="meta">{_fmt(clean.get("samples"))} samples, seed {_fmt((rob.get("settings") or {}).get("seed"))}'
           + (f", clean top-1 {_fmt(clean.get('top1'))}" if clean.get("top1") is not None else "") + "</p>"]
    has_top1 = any(r.get("top1") is not None for r in rows)
    headers = ["corruption", "severity", "cosine vs clean", "SNR dB", "agreement"] + (["top-1", "top-1 drop"] if has_top1 else [])
    out.append(_table(headers, [[r["corruption"], r["severity"], r.get("cosine"), r.get("snr_db"), r.get("agreement")]
                                + ([r.get("top1"), r.get("top1_drop")] if has_top1 else []) for r in rows],
                      num_cols=tuple(range(1, len(headers)))))
    key, label = ("top1", "top-1 accuracy") if has_top1 else ("cosine", "cosine vs clean outputs")
    series = _severity_series(rows, key, clean.get("top1") if has_top1 else None)
    xt = ([0] if has_top1 else []) + sorted({r["severity"] for r in rows})
    out.append('<div class="plots">' + svg.line_plot(series, f"Robustness: {label} by severity (0 = clean)" if has_top1
                                                     else f"Robustness: {label} by severity",
                                                     "severity", label, markers=True, xticks=xt) + "</div>")
    return out


def _severity_series(rows: Sequence[Dict[str, Any]], key: str,
                     clean: Optional[float]) -> List[Tuple[str, List[Any], List[Any]]]:
    """One ``(corruption, severities, values of key)`` series per corruption, in first-seen order;
    ``clean`` (when given) is the point at severity 0."""
    names: List[str] = []
    for r in rows:
        if r["corruption"] not in names:
            names.append(r["corruption"])
    series = []
    for n in names:
        pts = sorted((r["severity"], r.get(key)) for r in rows if r["corruption"] == n and r.get(key) is not None)
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        if clean is not None:
            xs, ys = [0, *xs], [clean, *ys]
        series.append((n, xs, ys))
    return series


def _ci_text(ci: Optional[Tuple[float, float]]) -> str:
    return "-" if ci is None else f"{_fmt(ci[0])} .. {_fmt(ci[1])}"


def latency_rows(board: Dict[str, Any]) -> List[str]:
    """The latency table of one board of a validation result: the model's row, the FP32 model's
    measured beside it (``benchmark_fp32``, with the speedup) and the stored baseline's, each with
    the 95% intervals of p50 and p99; then the noise warnings of the run."""
    from ..result import BenchResult

    rows = []
    speedup = board.get("speedup_vs_fp32")
    for key, label in (("benchmark", "this model"), ("benchmark_fp32", "FP32 model"), ("baseline", "baseline")):
        if not board.get(key):
            continue
        r = BenchResult.from_dict(board[key], f"board '{board.get('board')}' {key}")
        st = r.stats
        if key == "benchmark_fp32" and speedup is not None:
            label = f"FP32 model (this model is {speedup:.2f}x faster)"
        rows.append([label, st.count, st.mean_ms, st.std_ms, st.min_ms, st.p50_ms, _ci_text(st.ci("p50")), st.p90_ms,
                     st.p99_ms, _ci_text(st.ci("p99")), st.max_ms, st.throughput_ips])
    out = [_table(["run", "count", "mean ms", "std ms", "min ms", "p50 ms", "p50 95% CI", "p90 ms", "p99 ms",
                   "p99 95% CI", "max ms", "inf/s"], rows, num_cols=tuple(range(1, 12)))]
    main = BenchResult.from_dict(board["benchmark"], f"board '{board.get('board')}'")
    if main.stats.noise is not None and main.stats.noise.unstable:
        out.append('<p class="error">unstable run: ' + escape("; ".join(main.stats.noise.warnings)) + "</p>")
    return out


def _board_section(b: Dict[str, Any], budgets: Dict[str, Any]) -> List[str]:
    out = [f'<h2 id="board-{escape(b["board"])}">{escape(b["board"])} {_badge(b["verdict"])}</h2>']
    if b.get("error"):
        out.append(f'<p class="error">board failed during <b>{escape(str(b.get("failed_stage")))}</b>: '
                   f'{escape(str(b["error"]))}</p>')
    out.append("<h3>Checks</h3>")
    out.append(_table(["check", "verdict", "measured", "limit", "reason"], _check_rows(b.get("checks") or []),
                      cls="checks"))
    bench = b.get("benchmark")
    if bench:
        out.append("<h3>Latency</h3>")
        out.extend(latency_rows(b))
        out.append('<div class="plots">' + "\n".join(_latency_plots(bench)) + "</div>")
        out.append("<h3>Power</h3>")
        pw = _power_section(bench)
        out.append(pw[0])
        out.append('<div class="plots">' + "\n".join(pw[1:]) + "</div>")
    acc = b.get("accuracy") or {}
    if b.get("compare") is not None:
        out.append("<h3>Outputs vs reference</h3>")
        if acc.get("top1_board") is not None:
            out.append(_table(["top-1 board", "top-1 reference", "drop", "samples"],
                              [[acc.get("top1_board"), acc.get("top1_reference"), acc.get("top1_drop"), acc.get("samples")]],
                              num_cols=(0, 1, 2, 3)))
        sec = _compare_section(b["compare"], budgets)
        out.append(sec[0])
        out.append('<div class="plots">' + "\n".join(sec[1:]) + "</div>")
    if b.get("robustness"):
        out.append("<h3>Robustness</h3>")
        out.extend(robustness_block(b["robustness"]))
    facts = b.get("facts")
    if facts:
        out.append("<h3>Device facts and versions</h3>")
        out.append(_table(["fact", "value"], _flatten(facts), cls="facts"))
    if bench and bench.get("device"):
        out.append("<details><summary>Device facts reported with the benchmark</summary>"
                   + _table(["fact", "value"], _flatten(bench["device"])) + "</details>")
    return out


def validation_html(result: Dict[str, Any]) -> str:
    """The HTML report of a validation result dict (``ValidationResult.to_dict()``)."""
    model = result.get("model") or {}
    verdict = result.get("verdict", "fail")
    title = f"Validation of {model.get('name', 'model')}: {'GO' if verdict == 'pass' else 'NO-GO'}"
    budgets = (result.get("spec") or {}).get("budgets") or {}
    body = [f"<h1>{escape(title)}</h1>",
            f'<p class="meta">{escape(str(result.get("started", "")))} · {_fmt(result.get("seconds"))} s · '
            f'model sha256 {escape(str(model.get("sha256", ""))[:16])} · spec {escape(str((result.get("spec") or {}).get("source") or "none"))}</p>',
            f'<div class="verdict {escape(verdict)}">{"GO" if verdict == "pass" else "NO-GO"}: '
            f'{sum(1 for b in result.get("boards", []) if b["verdict"] == "pass")} of {len(result.get("boards", []))} '
            f"board(s) pass</div>"]
    if result.get("summary_line"):
        body.append(f'<p class="meta">{escape(str(result["summary_line"]))}</p>')
    body.append("<h2>Summary</h2>")
    rows = []
    for r in result.get("summary", []):
        emulated = " (emulated: timings are not the board's)" if r.get("emulated") else ""
        link = _Raw(f'<a href="#board-{escape(r["board"])}">{escape(r["board"])}</a>{escape(emulated)}')
        rows.append([link, _Raw(_badge(r["verdict"])), r.get("p50_ms"), r.get("p99_ms"), r.get("throughput_ips"),
                     r.get("mean_w"), r.get("top1"), r.get("cosine"), r.get("passed"), r.get("failed"),
                     r.get("skipped"), r.get("error") or ""])
    body.append(_table(["board", "verdict", "p50 ms", "p99 ms", "inf/s", "mean W", "top-1", "min cosine", "passed",
                        "failed", "skipped", "error"], rows, cls="summary", num_cols=tuple(range(2, 11))))
    readiness = (result.get("model") or {}).get("ep_readiness") or {}
    if readiness:
        body.append("<h2>Mobile EP readiness (onnxruntime's usability checker)</h2>")
        body.append(_table(["EP", "nodes taken", "of", "partitions", "suitability", "ops left to the CPU"],
                           [[ep, r.get("supported_nodes"), r.get("num_nodes"), len(r.get("partitions") or []),
                             r.get("suitability") or r.get("error"), ", ".join(r.get("unsupported_ops") or [])]
                            for ep, r in readiness.items()], cls="summary"))
    ref = result.get("reference") or {}
    data = result.get("data") or {}
    body.append(_table(["reference", "version", "top-1", "data", "samples", "labels"],
                       [[ref.get("target"), ref.get("version"), ref.get("top1"), data.get("source"), data.get("samples"),
                         data.get("labels") or "none"]]))
    for b in result.get("boards", []):
        body.extend(_board_section(b, budgets))
    body.append("<h2>Model, data and spec</h2>")
    body.append(_table(["field", "value"], _flatten({"model": model, "data": data, "spec": result.get("spec") or {}})))
    return _page(title, body)


def robustness_html(result: Dict[str, Any]) -> str:
    """The HTML report of a robustness run dict (``sdk robustness --json`` layout)."""
    title = f"Robustness of {(result.get('model') or {}).get('name', 'model')} on {result.get('runner', 'host')}"
    body = [f"<h1>{escape(title)}</h1>"]
    if result.get("checks"):
        verdict = "fail" if any(c["verdict"] == "fail" for c in result["checks"]) else "pass"
        body.append(f'<div class="verdict {verdict}">{"GO" if verdict == "pass" else "NO-GO"}</div>')
        body.append(_table(["check", "verdict", "measured", "limit", "reason"], _check_rows(result["checks"]), cls="checks"))
    body.extend(robustness_block(result.get("robustness") or {}))
    body.append(_table(["field", "value"], _flatten({"model": result.get("model") or {}, "data": result.get("data") or {}})))
    return _page(title, body)
