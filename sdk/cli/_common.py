"""Shared CLI plumbing: consoles, error lines, option parsing, JSON output."""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, Tuple

STATE: Dict[str, Any] = {"debug": False}
_consoles: Dict[str, Any] = {}


def console() -> Any:
    if "out" not in _consoles:
        from rich.console import Console

        _consoles["out"] = Console(highlight=False)
    return _consoles["out"]


def err_console() -> Any:
    if "err" not in _consoles:
        from rich.console import Console

        _consoles["err"] = Console(stderr=True, highlight=False)
    return _consoles["err"]


def error_line(exc: BaseException) -> None:
    """Print ``error: <message> (<hint>)`` as one line on stderr, no markup interpretation."""
    text = str(exc).replace("\n", " ").strip()
    sys.stderr.write(f"error: {text}\n")
    sys.stderr.flush()


def parse_options(items: Optional[List[str]]) -> Dict[str, Any]:
    """``["threads=2", "providers=cuda,cpu"]`` -> dict; values parsed as JSON when they are JSON."""
    from ..errors import InputError

    out: Dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"bad --option '{item}'", "write KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def write_json(path: Optional[str], data: Any) -> None:
    """Write ``data`` to ``path`` atomically ('-' means stdout)."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str)
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return
    from ..atomic import atomic_write

    atomic_write(path, text + "\n")


def fmt_ms(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 1 else (f"{v:.3f}" if v < 10 else f"{v:.2f}")


def latency_table(title: str, results: List[Tuple[str, Any]]) -> Any:
    """A rich table with one column per ``(label, BenchResult)`` and one row per statistic (with
    the 95% interval of p50/p90/p99), so it stays readable in a narrow terminal."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column("")
    for label, _ in results:
        t.add_column(str(label), justify="right")
    stats = [r.stats for _, r in results]
    t.add_row("count", *[str(s.count) for s in stats])
    for key in ("mean", "std", "min", "p50", "p90", "p95", "p99", "max"):
        t.add_row(f"{key} ms", *[fmt_ms(getattr(s, key + "_ms")) for s in stats])
        if key in ("p50", "p90", "p99"):
            t.add_row("  95% CI", *[fmt_ci(s.ci(key), key) for s in stats])
    t.add_row("throughput inf/s", *[f"{s.throughput_ips:.1f}" for s in stats])
    return t


def fmt_ci(ci: Optional[Tuple[float, float]], stat: str = "") -> str:
    """``[lo, hi]`` in ms, or why there is none (too few runs for that percentile)."""
    if ci is None:
        from ..stats import min_runs_for

        return f"n/a (< {min_runs_for(float(stat[1:]))} runs)" if stat.startswith("p") else "n/a"
    return f"[{fmt_ms(ci[0])}, {fmt_ms(ci[1])}]"


def noise_lines(label: str, result: Any) -> List[str]:
    """``warning: <label>: ...`` for each noise warning of a result (an unstable run)."""
    noise = result.stats.noise
    return [f"warning: {label}: {w}" for w in (noise.warnings if noise is not None else ())]
