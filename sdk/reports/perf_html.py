"""Self-contained HTML for ``sdk profile`` (per-layer times, roofline) and ``sdk bench --pipeline``
(stage split), with device telemetry over time when the result carries it. One file, inline CSS
and SVG, no scripts."""
from __future__ import annotations

from .svg import escape   # html.escape of text XML can hold (control characters made visible)
from typing import Any, Dict, List, Mapping

from . import perfplots
from .html import _CSS, _table

__all__ = ["profile_html", "pipeline_html", "bench_html", "telemetry_section"]


def _page(title: str, body: List[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _clock_lock_rows(lock: Mapping[str, Any]) -> List[str]:
    def state(stage: str, key: str, field: str) -> Any:
        return ((lock.get(stage) or {}).get(key) or {}).get(field)

    rows = [[stage, state(stage, "clocks", "locked"), state(stage, "power_mode", "name")]
            for stage in ("before", "during", "after")]
    return ["<h3>Clock lock (nvpmodel + jetson_clocks)</h3>", _table(["when", "clocks locked", "power mode"], rows),
            _table(["command", "exit status"], [[" ".join(c.get("argv") or []), c.get("returncode")]
                                                for c in lock.get("commands") or []]),
            f'<p class="meta">previous settings restored: {escape(str(lock.get("restored")))}</p>']


def telemetry_section(doc: Mapping[str, Any]) -> List[str]:
    """The telemetry plots and the clock-lock record of a result (``telemetry``, ``clocks``,
    ``clock_lock``)."""
    tel = doc.get("telemetry") or {}
    out: List[str] = []
    if tel:
        win = tel.get("window")
        out += ["<h2>Device telemetry</h2>", '<div class="plots">' + perfplots.telemetry_plots(
            tel.get("t_s") or [], tel.get("series") or {}, tel.get("units") or {},
            "Telemetry over the run (shaded: measured window)", tuple(win) if win else None) + "</div>"]
        out += [f'<p class="meta">{escape(str(tel[k]))}</p>' for k in ("label", "reason") if tel.get(k)]
    clocks = doc.get("clocks")
    if clocks:
        rows = [(k, v if not isinstance(v, (dict, list)) else str(v)) for k, v in clocks.items()]
        out += ["<h3>Clocks</h3>", _table(["field", "value"], rows)]
    if doc.get("clock_lock"):
        out += _clock_lock_rows(doc["clock_lock"])
    return out


def _summary_table(doc: Mapping[str, Any]) -> str:
    flag = doc.get("flag_reason")
    return _table(["summed layers (ms)", "end to end (ms)", "unprofiled (ms)", "coverage", "flag"],
                  [[doc.get("total_ms"), doc.get("end_to_end_ms"), doc.get("end_to_end_unprofiled_ms"),
                    doc.get("coverage"), flag or "ok (within 20%)"]], num_cols=(0, 1, 2, 3))


def _roofline_section(doc: Mapping[str, Any], roof: Mapping[str, Any], estimate: bool) -> List[str]:
    hw = roof.get("hardware") or {}
    speed = "attainable_gflops" if estimate else "achieved_gflops"
    pts = [(lay["name"], lay.get("intensity_flop_per_byte"), lay.get(speed), lay.get("bound"))
           for lay in doc.get("layers") or []]
    out = ["<h2>Roofline</h2>",
           f'<p class="meta">board {escape(str(roof.get("board")))}: {escape(str(hw.get("source")))}</p>',
           '<div class="plots">' + perfplots.roofline_plot(
               [p for p in pts if p[1] is not None and p[2] is not None], hw.get("peak_gops") or {},
               hw.get("memory_bandwidth_gbs"), f"Roofline ({roof.get('board')})",
               "ESTIMATE: nothing was run" if estimate else "") + "</div>",
           _table(["memory-bound layers", "compute-bound layers", "time memory-bound (ms)", "time compute-bound (ms)",
                   "total GFLOP"],
                  [[roof.get("layers_memory_bound"), roof.get("layers_compute_bound"), roof.get("time_ms_memory_bound"),
                    roof.get("time_ms_compute_bound"), (roof.get("total_flops") or 0) / 1e9]], num_cols=(0, 1, 2, 3, 4))]
    return out + [f'<p class="meta">{escape(str(note))}</p>' for note in roof.get("notes") or []]


def _layer_rows(doc: Mapping[str, Any], top: int, estimate: bool) -> List[List[Any]]:
    return [[lay["name"], ", ".join(lay.get("onnx_nodes") or []) or "(inserted by the runtime)", lay.get("op_type"),
             lay.get("estimated_ms") if estimate else lay.get("time_ms"), lay.get("percent"), lay.get("precision"),
             lay.get("provider"), lay.get("intensity_flop_per_byte"), lay.get("achieved_gflops"),
             lay.get("attainable_gflops"), lay.get("bound")] for lay in (doc.get("layers") or [])[:top]]


def profile_html(doc: Mapping[str, Any], top: int = 40) -> str:
    """The report of an ``sdk profile`` JSON document."""
    model = (doc.get("model") or {}).get("path") or "model"
    estimate = doc.get("mode") == "estimate"
    body = [f"<h1>Per-layer profile: {escape(str(model))}</h1>",
            f'<p class="meta">target {escape(str(doc.get("target")))} · profiler {escape(str(doc.get("profiler")))} · '
            f'{escape(str(doc.get("where")))} · {doc.get("runs")} runs</p>',
            f'<p class="error">{escape(str(doc.get("estimate_reason")))}</p>' if estimate else _summary_table(doc)]
    if doc.get("roofline"):
        body += _roofline_section(doc, doc["roofline"], estimate)
    body += [f"<h2>Slowest layers (top {top})</h2>",
             _table(["layer", "ONNX nodes", "op", "estimated ms" if estimate else "ms", "%", "precision", "provider",
                     "FLOP/byte", "GFLOP/s", "attainable", "bound"], _layer_rows(doc, top, estimate),
                    num_cols=(3, 4, 7, 8, 9))]
    if doc.get("notes"):
        body.append("<h3>Notes</h3><ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in doc["notes"]) + "</ul>")
    body += telemetry_section(doc)
    return _page(f"profile {model}", body)


def pipeline_html(doc: Mapping[str, Any]) -> str:
    """The report of an ``sdk bench --pipeline`` result: the stage split as a stacked bar (median and
    mean per frame), the per-stage table, the end-to-end latency, telemetry."""
    pipe: Dict[str, Any] = dict(doc.get("pipeline") or {})
    stages = list(pipe.get("stages") or [])
    sm = doc.get("stages_ms") or {}
    body = [f"<h1>Pipeline split: {escape(str((doc.get('model') or {}).get('path')))}</h1>",
            f'<p class="meta">{escape(str(pipe.get("kind")))} pipeline · {pipe.get("frames")} frames of '
            f'{pipe.get("images")} images from {escape(str(pipe.get("data")))}</p>']
    rows = [(stat, {s: (sm.get(s) or {}).get(stat) for s in stages}) for stat in ("p50", "mean")]
    body.append('<div class="plots">' + perfplots.stacked_bar(rows, stages, "Where a frame's time goes") + "</div>")
    where = pipe.get("devices") or {}
    body.append(_table(["stage", "where", "mean ms", "p50 ms", "p90 ms", "share of end to end"],
                       [[s, where.get(s), (sm.get(s) or {}).get("mean"), (sm.get(s) or {}).get("p50"),
                         (sm.get(s) or {}).get("p90"), (sm.get(s) or {}).get("share")] for s in stages] +
                       [["end to end", "", (sm.get("end_to_end") or {}).get("mean"),
                         (sm.get("end_to_end") or {}).get("p50"), (sm.get("end_to_end") or {}).get("p90"), 1.0]],
                       num_cols=(2, 3, 4, 5)))
    if pipe.get("why_not_cuda"):
        body.append(f'<p class="meta">pre/post-processing on the CPU: {escape(str(pipe["why_not_cuda"]))}</p>')
    body += telemetry_section(doc)
    return _page("pipeline split", body)



def bench_html(results: Any) -> str:
    """A report of board benchmark results (``sdk push --report``): per board the latency
    statistics, the power trace and the device telemetry with the clock-lock record."""
    from .html import power_trace
    from . import svg

    items = results if isinstance(results, list) else [results]
    body = ["<h1>Board benchmark</h1>"]
    for r in items:
        name = (r.get("board") or {}).get("name") or r.get("target") or "host"
        body.append(f"<h2>{escape(str(name))}</h2>")
        if r.get("error"):
            body.append(f'<p class="error">{escape(str(r["error"].get("message")))}</p>')
            continue
        emu = (r.get("device") or {}).get("emulation")
        if emu:
            body.append(f'<p class="error">EMULATED ({escape(str(emu.get("kind")))}, {escape(str(emu.get("process_machine")))} '
                        f'on a {escape(str(emu.get("kernel_machine")))} kernel): these timings measure the emulator, '
                        "not the board's speed</p>")
        lat = r.get("latency_ms") or {}
        body.append(_table(["count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "power W", "mJ / inference"],
                           [[lat.get("count"), lat.get("mean"), lat.get("p50"), lat.get("p90"), lat.get("p99"),
                             (r.get("power") or {}).get("mean_w"), (r.get("energy_mj_per_inference") or {}).get("total")]],
                           num_cols=(0, 1, 2, 3, 4, 5, 6)))
        trace, spans, note = power_trace(r)
        if trace is not None:
            body.append('<div class="plots">' + svg.line_plot([("power", trace[0], trace[1])], "Power trace", "s", "W",
                                                                spans=spans) + "</div>")
        elif note:
            body.append(f'<p class="meta">power: {escape(note)}</p>')
        body += telemetry_section(r)
    return _page("board benchmark", body)
