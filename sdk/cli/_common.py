"""Shared CLI plumbing: consoles, error lines, option parsing, JSON output."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

STATE: Dict[str, Any] = {"debug": False}
_consoles: Dict[str, Any] = {}


def _safe_console(**kw: Any) -> Any:
    """A rich Console whose tables fit the width (:class:`~sdk.cli._layout.FittingConsole`) and
    that cannot be driven by the text it prints: markup is OFF unless a call
    asks for it (``markup=True``: then names inside go through :func:`sdk.textsafe.inert`, or
    the string is built with :func:`styled`), and every string it renders (messages, table
    cells) has its control characters made visible (:func:`sdk.textsafe.plain`)."""
    from ..textsafe import plain
    from ._layout import FittingConsole  # tables that fit 80 columns and a pipe

    class SafeConsole(FittingConsole):
        def render_str(self, text: str, *args: Any, **kwargs: Any) -> Any:
            return super().render_str(plain(text, keep_newlines=True), *args, **kwargs)

    return SafeConsole(highlight=False, markup=False, **kw)


def console() -> Any:
    if "out" not in _consoles:
        _consoles["out"] = _safe_console()
    return _consoles["out"]


def err_console() -> Any:
    if "err" not in _consoles:
        _consoles["err"] = _safe_console(stderr=True)
    return _consoles["err"]


def styled(markup: str) -> Any:
    """Our own markup (``"[green]PASS[/green] " + inert(name)``) as a rich Text, for a table cell or
    a print on the markup-off consoles; every untrusted part must already be :func:`inert`."""
    from rich.text import Text

    from ..textsafe import plain

    return Text.from_markup(plain(markup, keep_newlines=True))


def error_line(exc: BaseException, explain: Optional[str] = None) -> None:
    """Print ``error: <message> (<hint>)`` as one line on stderr, no markup interpretation and no
    control character (a name from a model or a board cannot move the cursor or retitle the window).
    ``explain``: the command that explains the failure, ending the same line."""
    from ..textsafe import plain

    text = plain(str(exc).replace("\n", " ").strip())
    tail = f"; explain: {plain(explain)}" if explain else ""
    sys.stderr.write(f"error: {text}{tail}\n")
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


def check_output(path: Optional[str], option: str, *, stdout_ok: bool = True) -> Optional[Path]:
    """Validate an output path before any work is done: ``'-'`` (stdout, when ``stdout_ok``) and
    None pass; otherwise the parent folder must exist (none is created) and take a new file,
    and the path must not be a folder or a special file. Raises :class:`~sdk.errors.InputError`
    naming ``option``. Probes the folder with a temporary file that is removed at once."""
    import tempfile

    from ..errors import InputError

    if path is None or (stdout_ok and path == "-"):
        return None
    if path in ("", "-"):
        raise InputError(f"{option}: an empty path", "give a file name")
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option}: '{path}' is a folder", "give a file name inside it")
    if p.exists() and not p.is_file():
        raise InputError(f"{option}: '{path}' is not a regular file (a device, pipe or socket)",
                         "give the path of a file to write")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"{option}: the folder '{parent}' does not exist", "create it first, or write elsewhere")
    if not parent.is_dir():
        raise InputError(f"{option}: '{parent}' is not a folder", "give a path inside a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=str(parent))
    except OSError as exc:
        raise InputError(f"{option}: cannot write in '{parent}' ({exc.strerror or exc})",
                         "choose a writable folder") from exc
    os.close(fd)
    os.unlink(probe)
    return p


def write_text_atomic(path: Union[str, Path], text: str, option: str = "output") -> None:
    """Write ``text`` to ``path`` atomically (:func:`sdk.atomic.atomic_write`: a temporary file in
    the same folder, renamed; removed on every failure). The folder was checked by
    :func:`check_output` before the work; a failure now is one :class:`~sdk.errors.InputError`."""
    from ..atomic import atomic_write
    from ..errors import InputError

    try:
        atomic_write(path, text)
    except OSError as exc:
        raise InputError(f"{option}: cannot write '{path}' ({exc.strerror or exc})",
                         "check the path and free space") from exc


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN/Infinity (not JSON: a board or a bug may produce one) as null."""
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_json(path: Optional[str], data: Any, option: str = "--json") -> None:
    """Write ``data`` to ``path`` atomically ('-' means stdout); no parent folder is created.
    Strict JSON: a non-finite number is written as null, never as ``NaN``/``Infinity``."""
    text = json.dumps(json_safe(data), indent=2, sort_keys=False, default=str, allow_nan=False)
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return
    write_text_atomic(path, text + "\n", option)


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


def input_value_option() -> Any:
    """The ``--input-value`` option, the same in every command that runs a model."""
    import typer

    return typer.Option(None, "--input-value", help="Value of an input that is not data, typed by the model: "
                                                    "NAME=VALUE (sr=16000; a list 1,2,3 or JSON [[1,2]]). Repeatable.")


def carry_option() -> Any:
    """The ``--carry`` option (recurrent state fed back across runs), the same in bench, push and validate."""
    import typer

    return typer.Option(None, "--carry", help="Feed an output back as an input on the next run: OUTPUT=INPUT "
                                              "(stateN=state), as a streaming model runs. Repeatable.")


def sample_axis_option(data_option: str = "--data") -> Any:
    """The ``--sample-axis`` option (``data_option``: the option whose arrays it describes)."""
    import typer

    return typer.Option(None, "--sample-axis", help=f"Which axis of a {data_option} array holds the samples: "
                                                    "NAME=AXIS, or NAME=none for one value every sample uses "
                                                    "(an initial state). Repeatable.")
