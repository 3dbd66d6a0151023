"""The HTML page of ``sdk debug diff``: error against depth (inline SVG) and the per-layer table."""
from __future__ import annotations

import math
from html import escape
from typing import Any, Dict, List, Mapping

from .svg import line_plot

__all__ = ["layer_diff_page"]

_CSS = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:2px 6px}td.num{text-align:right;font-variant-numeric:tabular-nums}"
        "tr.bad td{background:#fde2e2}.plot{max-width:100%}")


def _f(v: Any) -> float:
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf if v == "-inf" else math.nan
    return float(v) if v is not None else math.nan


def layer_diff_page(report: Mapping[str, Any]) -> str:
    """One self-contained page from a layer-diff report's ``to_dict()``."""
    layers: List[Dict[str, Any]] = list(report.get("layers", []))
    xs = [float(x["depth"]) for x in layers]
    snr = [min(_f(x["snr_db"]), 120.0) for x in layers]
    cos = [_f(x["cosine"]) for x in layers]
    body = [f"<h1>Layer diff: {escape(str(report.get('candidate')))}</h1>",
            f"<p>reference {escape(str(report.get('model')))}; {escape(str(report.get('summary')))}</p>"]
    for note in report.get("notes", []):
        body.append(f"<p><em>{escape(str(note))}</em></p>")
    tol = report.get("tolerance", {})
    body.append(line_plot([("SNR dB (capped at 120)", xs, snr)], "SNR against depth", "node depth", "SNR (dB)",
                          markers=True))
    body.append(line_plot([("cosine", xs, cos)], "cosine against depth", "node depth", "cosine", markers=True))
    added = [(float(x["depth"]), _f(x["added_error"])) for x in layers if x.get("added_error") is not None]
    if added:
        body.append(line_plot([("added error", [a for a, _ in added], [math.log10(max(b, 1e-12)) for _, b in added])],
                              "error each layer adds on FP32 inputs (log10 relative squared error)", "node depth",
                              "log10 added error", markers=True))
    head = ["depth", "node", "op", "tensor", "cosine", "SNR dB", "max abs err", "added err"]
    rows = ["<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for x in layers:
        cls = ' class="bad"' if x.get("diverges") else ""
        cells = [str(x["depth"]), escape(str(x["node"])), escape(str(x["op"])), escape(str(x["tensor"])),
                 f"{_f(x['cosine']):.5f}", f"{_f(x['snr_db']):.2f}", f"{_f(x['max_abs_error']):.4g}",
                 "" if x.get("added_error") is None else f"{_f(x['added_error']):.3g}"]
        rows.append(f"<tr{cls}>" + "".join(f'<td class="num">{c}</td>' if i in (0, 4, 5, 6, 7) else f"<td>{c}</td>"
                                           for i, c in enumerate(cells)) + "</tr>")
    rows.append("</tbody></table>")
    body.append(f"<p>tolerance: SNR >= {tol.get('min_snr_db')} dB, cosine >= {tol.get('min_cosine')}; "
                "rows past it are shaded</p>")
    body += rows
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sdk debug diff</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
