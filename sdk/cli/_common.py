"""Shared CLI plumbing: consoles, error lines, option parsing, JSON output."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

STATE: Dict[str, Any] = {"debug": False}
_consoles: Dict[str, Any] = {}


def console():
    if "out" not in _consoles:
        from rich.console import Console

        _consoles["out"] = Console(highlight=False)
    return _consoles["out"]


def err_console():
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
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, p)


def fmt_ms(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" if v < 1 else (f"{v:.3f}" if v < 10 else f"{v:.2f}")


def latency_table(title: str, results: List[Dict[str, Any]], label_key: str = "target"):
    """A rich table with one column per result dict (keys ``latency_ms``, ``throughput_ips``)
    and one row per statistic, so it stays readable in a narrow terminal."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column("")
    for r in results:
        t.add_column(str(r.get(label_key)), justify="right")
    t.add_row("count", *[str(r["latency_ms"]["count"]) for r in results])
    for key in ("mean", "std", "min", "p50", "p90", "p95", "p99", "max"):
        t.add_row(f"{key} ms", *[fmt_ms(r["latency_ms"][key]) for r in results])
    t.add_row("throughput inf/s", *[f"{r['throughput_ips']:.1f}" for r in results])
    return t
