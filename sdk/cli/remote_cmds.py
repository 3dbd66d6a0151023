"""``sdk boards [show|check]`` and ``sdk push``: the remote runner's face (over ``sdk.remote``)."""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import typer

from ._common import carry_option, input_value_option

LARGE_UPLOAD_BYTES = 8 * 1024 * 1024   # show a progress bar for uploads at least this big
INVENTORY_HELP = ("Ansible inventory (file, folder or plugin config; repeatable): its hosts are the boards, "
                  "the profile from the host/group variable edgesdk_board. Needs ansible-core (the ansible extra).")
LIMIT_HELP = "Ansible host pattern of --inventory hosts to use (e.g. jetsons, 'lab1:&jetsons:!broken', 'jetsons[0:3]')."
FORKS_HELP = "Boards handled at once (Ansible's forks)."


def register(app: typer.Typer) -> None:
    boards = typer.Typer(help="Board profiles: list, show, check a board over SSH, clean its cache.", no_args_is_help=False,
                         invoke_without_command=True)
    boards.callback(invoke_without_command=True)(boards_list_cmd)
    boards.command("show")(boards_show_cmd)
    boards.command("check")(boards_check_cmd)
    boards.command("clean")(boards_clean_cmd)
    app.add_typer(boards, name="boards")
    app.command("push")(push_cmd)


def boards_list_cmd(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List board profiles (packaged, ~/.config/edgesdk/boards, EDGESDK_BOARDS_PATH)."""
    if ctx.invoked_subcommand is not None:
        return
    from ..remote.profiles import list_profiles, profile_problems
    from ..textsafe import plain
    from ._common import console, write_json

    profiles = list_profiles()
    for problem in profile_problems():     # a broken profile fails only its own board: warn here
        sys.stderr.write(f"warning: {plain(' '.join(str(problem).split()))} (this board is unusable until fixed)\n")
    if json_out:
        write_json(None, [p.to_dict() for p in profiles.values()])
        return
    from rich.table import Table

    t = Table(title="boards")
    t.add_column("board", no_wrap=True, min_width=max([len(n) for n in profiles] + [5]))
    for col in ("aliases", "host", "targets"):
        t.add_column(col, overflow="fold")
    t.add_column("description", no_wrap=True, overflow="ellipsis", max_width=40)
    for p in profiles.values():
        c = p.connection
        host = c.host if c.is_local else f"{c.user + '@' if c.user else ''}{c.host}{':' + str(c.port) if c.port else ''}"
        summary = p.description.split(";")[0].split(" (")[0]  # the full text: `sdk boards show NAME`
        t.add_row(p.name, ", ".join(p.aliases) or "-", host, ", ".join(p.runtime.targets), summary)
    console().print(t)


def boards_show_cmd(
    name: str = typer.Argument(..., help="Board name or alias."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one board profile (after user overrides) and the file it came from."""
    from ..remote.profiles import get_profile
    from ._common import console, write_json

    prof = get_profile(name)
    data = prof.to_dict()
    if json_out:
        write_json(None, data)
        return
    from rich.table import Table

    t = Table(title=f"{prof.name}  ({prof.source})", show_header=False)
    t.add_column("key")
    t.add_column("value")
    t.add_row("description", prof.description)
    t.add_row("aliases", ", ".join(prof.aliases) or "-")
    for table in ("connection", "runtime", "power", "hardware"):
        for key, value in data[table].items():
            if table == "runtime" and key == "options":  # [runtime.<target>] tables
                for target, opts in value.items():
                    for opt, v in opts.items():
                        t.add_row(f"runtime.{target}.{opt}", str(v))
            elif value not in (None, [], "", {}):
                t.add_row(f"{table}.{key}", ", ".join(value) if isinstance(value, list) else str(value))
    console().print(t)


def _flatten(prefix: str, value: Any, rows: List[Tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        if not value:
            rows.append((prefix, "-"))
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, rows)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, rows)
    else:
        rows.append((prefix, "-" if value is None else (", ".join(map(str, value)) if isinstance(value, list) else str(value))))


def boards_clean_cmd(
    name: str = typer.Argument(..., help="Board name or alias."),
    trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Accept and record an unknown host key."),
) -> None:
    """Empty a board's cache of pushed models and input data (pushed again when needed)."""
    from ..remote.board import Board
    from ._common import console

    with Board(name, trust_new_host=trust_new_host) as board:
        out = board.clean()
    console().print(f"{board.name}: removed {out['removed_files']} file(s), "
                    f"{out['removed_bytes'] / 1e6:.1f} MB from {out['workdir']}")


def boards_check_cmd(
    name: Optional[str] = typer.Argument(None, help="Board name or alias (or --inventory)."),
    trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Accept and record an unknown host key."),
    json_path: Optional[str] = typer.Option(
        None, "--json", help="Write the facts as JSON here ('-' for stdout); with --inventory one document per line."),
    inventory: Optional[List[str]] = typer.Option(None, "--inventory", "-i", help=INVENTORY_HELP),
    limit: Optional[str] = typer.Option(None, "--limit", "-l", "--hosts", help=LIMIT_HELP),
    forks: int = typer.Option(8, "--forks", "-f", min=1, help=FORKS_HELP),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", min=0.1, max=600.0,
                                          help="Seconds to wait for the board's SSH server (one retry)."),
) -> None:
    """Connect to a board and report what it has: OS, Python, numpy, runtimes, JetPack, CUDA,
    TensorRT, power mode, clocks, temperatures, power sensors. With --inventory: every board of an
    Ansible inventory, a row each as they finish; exit 1 unless all succeeded."""
    from ..remote.board import Board
    from ._common import check_output, console, write_json

    check_output(json_path, "--json")
    if inventory or name is None:
        _check_fleet(name, inventory, limit, forks, trust_new_host, json_path)
        return
    with Board(name, trust_new_host=trust_new_host, connect_timeout_s=connect_timeout) as board:
        facts = board.check()
    if json_path == "-":
        write_json("-", facts)
        return
    from rich.table import Table

    rows: List[Tuple[str, Any]] = []
    _flatten("", {k: v for k, v in facts.items() if k != "board"}, rows)
    t = Table(title=f"{board.name} ({board.profile.connection.host})", show_header=False)
    t.add_column("fact")
    t.add_column("value")
    for k, v in rows:
        t.add_row(k, v)
    console().print(t)
    if json_path:
        write_json(json_path, facts)


def _open_new(path: str) -> Any:
    """``path`` opened for writing as a new regular file: a link at that name is replaced (as an
    atomic rename would), never written through."""
    import os

    if os.path.islink(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "w", encoding="utf-8")


class _Uploads:
    """One rich progress bar per board for large uploads (on stderr)."""

    def __init__(self) -> None:
        self.progress: Any = None
        self.tasks: Dict[str, Any] = {}

    def callback(self, board: str) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            if total < LARGE_UPLOAD_BYTES:
                return
            if self.progress is None:
                from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                           TransferSpeedColumn)
                from ._common import err_console

                self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                         TransferSpeedColumn(), TimeRemainingColumn(), console=err_console(),
                                         transient=True)
                self.progress.start()
            if board not in self.tasks:
                self.tasks[board] = self.progress.add_task(f"push {board}", total=total)
            self.progress.update(self.tasks[board], completed=done)
        return report

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _power_line(r: Any) -> str:
    """One line of a :class:`sdk.result.BenchResult`'s power and energy figures."""
    p, e = r.power, r.energy
    if p.mean_w is None:
        return f"power: n/a ({p.reason or p.details.get('error') or 'no sensor'})"
    parts = [f"power: {p.mean_w:.2f} W mean"]
    if p.idle_w is not None:
        parts.append(f"{p.idle_w:.2f} W idle")
    if e.total_mj is not None:
        parts.append(f"{e.total_mj:.3f} mJ/inference")
        if e.above_idle_mj is not None:
            parts.append(f"{e.above_idle_mj:.3f} mJ above idle")
    parts.append(f"source {p.source}, {p.samples} samples at {p.rate_hz or 0:.0f} Hz")
    return ", ".join(parts)


def _print_board(c: Any, fr: Any, model: str, target: Optional[str]) -> None:
    """One board's table, power line, noise lines and upload line; everything is built before
    anything is printed, so an answer that cannot be read prints nothing."""
    from pathlib import Path

    from ._common import latency_table, noise_lines

    r = fr.value
    tr = r.transfer or {}
    sent = "skipped (already on the board)" if tr.get("skipped") else \
        f"{tr.get('bytes_sent', 0) / 1e6:.1f} MB in {tr.get('seconds', 0):.1f} s"
    emulated = emulated_note(r)
    title = f"{Path(model).name} on {fr.board} ({r.target or target or ''})" + (" EMULATED" if emulated else "")
    table = latency_table(title, [(fr.board, r)])
    lines = [_power_line(r)] + list(noise_lines(fr.board, r)) + [f"upload: {sent}"] + ([emulated] if emulated else [])
    c.print(table)
    for line in lines:
        c.print(line, markup=False, highlight=False, soft_wrap=True)


MAX_INPUT_BYTES = 16 * 1024 ** 3    # one input tensor larger than this is a typo, not a model input


def _check_precision(model: str, precision: Optional[str], target: Optional[str], profiles: List[Any]) -> None:
    """A ``--precision`` the target (``--target``, else each board's pick for this format) cannot
    honour is bad input (exit 2), not a run of the stored precision that says so only in the JSON."""
    if not precision:
        return
    from ..model import Model
    from ..validation.runners import check_run_precision

    check_run_precision(Model.load(model), precision, target, profiles)


def _precheck(model: str, shapes: Dict[str, Any], target: Optional[str],
              input_value: Optional[List[str]] = None, carry: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """What the boards would refuse, found here first: a file that is no model, an unknown target
    or one that cannot open this format, input shapes that do not fit the model (names, rank,
    fixed dims, a dynamic dim without a value) or that no board could hold, a ``--carry`` pair
    that is not an output and an input of one dtype."""
    import numpy as np

    from ..errors import InputError
    from ..model import Model
    from ..targets import target_class
    from ..tensors import check_input_names

    m = Model.load(model)   # a truncated or foreign file is bad input here: exit 2, nothing uploaded
    if target:              # without --target each board picks one that runs the model's format
        cls = target_class(target)
        formats = getattr(cls, "model_formats", (m.format,))
        if m.format not in formats:
            raise InputError(f"target '{target}' runs {'/'.join(formats)} models, not {m.format}",
                             "pick a target with --target (see `sdk targets`), or leave it out")
    from ..targets.measure import as_values, check_carry, require_control_values

    check_input_names(shapes, m.inputs)
    check_carry(carry or {}, m)
    values = as_values(list(input_value or []), m.inputs)
    require_control_values(m, values, "sdk push")
    for spec in m.inputs:
        if spec.name in values:
            continue
        shape = spec.resolve(shapes.get(spec.name))
        itemsize = np.dtype(getattr(spec, "dtype", "float32") or "float32").itemsize
        if any(d <= 0 for d in shape) or int(np.prod(shape, dtype=object)) * itemsize > MAX_INPUT_BYTES:
            raise InputError(f"input '{spec.name}' of shape {'x'.join(map(str, shape))} is empty or larger than "
                             f"{MAX_INPUT_BYTES // 1024 ** 3} GiB", "give the shape of one batch, e.g. 1x3x224x224")
    return values


def push_cmd(
    model: str = typer.Argument(..., help="Model file (.onnx, .tflite, ...)."),
    board: Optional[List[str]] = typer.Option(
        None, "--board", "-b", help="Board name or alias (repeatable: boards run concurrently)."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target on the board (default: the profile's first)."),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32, fp16 or int8 (default: the profile's)."),
    runs: int = typer.Option(100, "--runs", min=1, help="Minimum number of measured runs."),
    min_seconds: float = typer.Option(1.0, "--min-seconds", min=0.0, help="Minimum measured duration (s)."),
    warmup: int = typer.Option(10, "--warmup", min=0, help="Warm-up runs."),
    idle_seconds: float = typer.Option(1.0, "--idle-seconds", min=0.0, help="Idle power window before the run (s)."),
    input_shape: Optional[List[str]] = typer.Option(None, "--input-shape", help="NAME=1x3x224x224 for dynamic inputs (repeatable)."),
    input_value: Optional[List[str]] = input_value_option(),
    carry: Optional[List[str]] = carry_option(),
    option: Optional[List[str]] = typer.Option(None, "--option", "-o", help="Target option KEY=VALUE (repeatable)."),
    json_path: Optional[str] = typer.Option(
        None, "--json", help="Write the results here ('-' for stdout): a list, one per board; with --inventory "
                             "one document per line as boards finish."),
    trust_new_host: bool = typer.Option(False, "--trust-new-host", help="Accept and record unknown host keys."),
    jobs: int = typer.Option(8, "--forks", "-f", "--jobs", min=1, help=FORKS_HELP),
    inventory: Optional[List[str]] = typer.Option(None, "--inventory", "-i", help=INVENTORY_HELP),
    limit: Optional[str] = typer.Option(None, "--limit", "-l", "--hosts", help=LIMIT_HELP),
    lock_clocks: bool = typer.Option(False, "--lock-clocks", help="Jetson: pin clocks (nvpmodel + jetson_clocks) for "
                                                                  "the run, restore them after; needs root or sudo."),
    power_mode: Optional[int] = typer.Option(None, "--power-mode", help="With --lock-clocks: nvpmodel mode id to run in."),
    report: Optional[str] = typer.Option(None, "--report", help="Write an HTML report (latency, power, telemetry)."),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", min=0.1, max=600.0,
                                          help="Seconds to wait for each board's SSH server (one retry)."),
) -> None:
    """Push a model to boards over SSH, benchmark it there with power, print one table per board
    (with --inventory: one row per board as they finish). Exit code 0 only if every board
    succeeded, 1 otherwise."""
    from pathlib import Path

    from ..errors import InputError, ModelError, ResultFormatError
    from ..remote.board import run_fleet
    from ..targets.measure import parse_carry
    from ..tensors import parse_input_shapes
    from . import EXIT_ERROR, EXIT_FAILED
    from ._common import console, parse_options, write_json

    _check_push_args(model, precision, min_seconds, idle_seconds, json_path, report)
    shapes = parse_input_shapes(input_shape or [])
    opts = parse_options(option)
    profiles = fleet_profiles(board, inventory, limit)   # unknown names fail before any connection
    carried = parse_carry(carry)
    values = _precheck(model, shapes, target, input_value, carried)  # bad input is exit 2, before any board work
    _check_precision(model, precision, target, profiles)
    uploads = _Uploads()

    def job(b: Any) -> Any:
        b.progress = uploads.callback(b.name)
        lock = ({"power_mode": power_mode} if power_mode is not None else True) if lock_clocks else None
        return b.benchmark(model, target=target, precision=precision, runs=runs, min_seconds=min_seconds,
                           warmup=warmup, idle_seconds=idle_seconds, input_shapes=shapes, target_options=opts,
                           lock_clocks=lock, samples=bool(report), input_values=values, carry=carried)

    if inventory:
        stream = FleetStream(json_path, PUSH_COLUMNS, _push_row, _push_doc)
        try:
            results = run_fleet(profiles, job, max_workers=jobs, trust_new_host=trust_new_host, on_result=stream.add,
                                connect_timeout_s=connect_timeout)
        finally:
            uploads.stop()
        stream.finish(results)
        return
    try:
        results = run_fleet(profiles, job, max_workers=jobs, trust_new_host=trust_new_host,
                            connect_timeout_s=connect_timeout)
    finally:
        uploads.stop()
    c = console()
    out = _push_results(c, results, model, target, json_path)
    if json_path:
        write_json(json_path, out)
    if report:
        from ..reports.perf_html import bench_html

        Path(report).parent.mkdir(parents=True, exist_ok=True)
        from ._common import write_text_atomic

        write_text_atomic(report, bench_html(out), "--report")
        if json_path != "-":
            c.print(f"wrote {report}")
    failed = [fr.board for fr in results if not fr.ok]
    if failed:
        if json_path != "-":
            c.print(f"{len(results) - len(failed)} of {len(results)} boards succeeded; failed: {', '.join(failed)}")
        # every board refused the model or its inputs: bad input (2), not a failed board (1)
        bad_input = all(isinstance(fr.error, (InputError, ModelError)) and not isinstance(fr.error, ResultFormatError)
                        for fr in results if not fr.ok)     # a board's unreadable answer is the board's failure
        sys.exit(EXIT_ERROR if bad_input else EXIT_FAILED)


def _check_push_args(model: str, precision: Optional[str], min_seconds: float, idle_seconds: float,
                     json_path: Optional[str], report: Optional[str]) -> None:
    """`sdk push`'s argument checks, before any board work (bad input: exit 2)."""
    import math
    from pathlib import Path

    from ..errors import InputError, ModelNotFoundError
    from ..remote.profiles import PRECISIONS
    from ._common import check_output

    check_output(json_path, "--json")
    check_output(report, "--report", stdout_ok=False)
    for value, opt in ((min_seconds, "--min-seconds"), (idle_seconds, "--idle-seconds")):
        if not math.isfinite(value) or value > 86400:
            raise InputError(f"bad {opt} {value}", "give a number of seconds from 0 to 86400")
    if precision is not None and precision not in PRECISIONS:
        raise InputError(f"bad --precision '{precision}'", f"use one of {', '.join(PRECISIONS)}")
    if not Path(model).is_file():
        raise ModelNotFoundError(f"model file '{model}' does not exist")


def _push_results(c: Any, results: List[Any], model: str, target: Optional[str],
                  json_path: Optional[str]) -> List[Dict[str, Any]]:
    """Print each board's table (unless the JSON goes to stdout) or its error line; the JSON
    documents, one per board. A result that cannot be read turns the board into a failure."""
    from ._common import error_line

    out: List[Dict[str, Any]] = []
    for fr in results:
        if fr.ok:
            try:
                row = fr.value.to_dict()
                if json_path != "-":
                    _print_board(c, fr, model, target)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:   # an answer we cannot read
                from ..errors import RemoteCommandError

                fr.error = RemoteCommandError(f"the board's result cannot be read ({type(exc).__name__}: {exc})",
                                              board=fr.board)
                fr.value = None
        if fr.ok:
            out.append(row)
        else:
            out.append({"board": {"name": fr.board}, "error": {"type": type(fr.error).__name__, "message": str(fr.error)}})
            err = fr.error if fr.error is not None else Exception("failed")
            named = str(err).startswith((fr.board, f"board '{fr.board}'"))
            error_line(err if named else Exception(f"{fr.board}: {err}"))
    return out


# -- fleets (boards from an Ansible inventory): rows and JSON lines as boards finish -----------------------
def fleet_profiles(boards: Optional[List[str]], inventory: Optional[List[str]], limit: Optional[str]) -> List[Any]:
    """Board profiles from ``--board`` names or from ``--inventory`` (with ``--limit``): one or the other."""
    from ..errors import InputError

    if boards and inventory:
        raise InputError("give --board or --inventory, not both")
    if limit and not inventory:
        raise InputError("--limit (--hosts) needs --inventory")
    if inventory:
        from ..remote.inventory import inventory_boards

        return inventory_boards(inventory, limit)
    if not boards:
        raise InputError("no board given", "pass --board NAME (repeatable) or --inventory FILE")
    from ..remote.profiles import get_profile

    return [get_profile(b) for b in dict.fromkeys(boards)]


def _host(fr: Any, profiles: Dict[str, Any]) -> str:
    p = profiles.get(fr.board)
    if p is None:
        return "-"
    c = p.connection
    return c.host if c.is_local else f"{c.host}:{c.port or 22}"


class FleetStream:
    """One row per board as it finishes (stdout; stderr when JSON lines go to stdout), one JSON
    document per line to ``--json`` (a file, or '-'), then the count; exit 1 unless all succeeded."""

    def __init__(self, json_path: Optional[str], columns: List[Tuple[str, int]], row: Any, doc: Any) -> None:
        import threading

        from ._common import console, err_console

        self.json_path, self.columns, self.row, self.doc = json_path, columns, row, doc
        self.out = err_console() if json_path == "-" else console()
        self.lines: Any = None
        self.lock = threading.Lock()
        self.done = 0

    def _start(self) -> None:
        """The header and the JSON lines file, once the first board is done (nothing before)."""
        self._print(["#", *[c for c, _ in self.columns]], header=True)
        if self.json_path and self.json_path != "-":
            from pathlib import Path

            Path(self.json_path).parent.mkdir(parents=True, exist_ok=True)
            self.lines = _open_new(self.json_path)

    def _print(self, cells: List[str], header: bool = False) -> None:
        widths = [6] + [w for _, w in self.columns]
        text = " ".join(str(c).ljust(w) if i < len(widths) - 1 else str(c) for i, (c, w) in enumerate(zip(cells, widths)))
        self.out.print(text.rstrip(), style="bold" if header else None, markup=False, highlight=False, soft_wrap=True)

    def add(self, fr: Any) -> None:
        import json

        with self.lock:   # boards may finish in worker threads
            if self.done == 0:
                self._start()
            self.done += 1
            self._print([str(self.done)] + self.row(fr))
            if self.json_path:
                from ._common import json_safe

                line = json.dumps(json_safe(self.doc(fr)), default=str, allow_nan=False)
                if self.lines is not None:
                    self.lines.write(line + "\n")
                    self.lines.flush()
                else:
                    sys.stdout.write(line + "\n")
                    sys.stdout.flush()

    def finish(self, results: List[Any]) -> None:
        from . import EXIT_FAILED

        if self.lines is not None:
            self.lines.close()
        failed = [fr.board for fr in results if not fr.ok]
        self.out.print(f"{len(results) - len(failed)} of {len(results)} boards succeeded"
                       + (f"; failed: {', '.join(failed)}" if failed else ""), markup=False, highlight=False,
                       soft_wrap=True)
        if failed:
            sys.exit(EXIT_FAILED)


def _error_doc(fr: Any) -> Dict[str, Any]:
    return {"board": {"name": fr.board}, "error": {"type": type(fr.error).__name__, "message": str(fr.error)},
            "seconds": round(fr.seconds, 3)}


def _error_text(fr: Any) -> str:
    text = str(fr.error).replace("\n", " ")
    return text[len(fr.board) + 2:] if text.startswith(f"{fr.board}: ") else text


PUSH_COLUMNS = [("board", 16), ("result", 6), ("p50 ms", 9), ("p99 ms", 9), ("inf/s", 9), ("W", 7),
                ("s", 6), ("detail", 0)]


def emulated_note(r: Any) -> str:
    """The label of a result measured under emulation (its device facts' ``emulation``), else ''."""
    emu = (getattr(r, "device", None) or {}).get("emulation")
    if not emu:
        return ""
    return (f"EMULATED ({emu.get('kind', 'emulation')}, {emu.get('process_machine')} on a "
            f"{emu.get('kernel_machine')} kernel): these timings measure the emulator, not the board's speed")


def _push_row(fr: Any) -> List[str]:
    """A row of a board's :class:`sdk.result.BenchResult` (or of its error)."""
    from ._common import fmt_ms

    if not fr.ok:
        return [fr.board, "FAIL", "-", "-", "-", "-", f"{fr.seconds:.1f}", _error_text(fr)]
    r = fr.value
    w = r.power.mean_w
    tr = r.transfer or {}
    n = tr.get("bytes_sent", 0)
    sent = "model already there" if tr.get("skipped") else (
        f"sent {n / 1e6:.1f} MB" if n >= 1e6 else f"sent {n / 1e3:.0f} kB")
    return [fr.board, "emul" if emulated_note(r) else "ok", fmt_ms(r.stats.p50_ms), fmt_ms(r.stats.p99_ms),
            f"{r.stats.throughput_ips:.1f}", "-" if w is None else f"{w:.2f}", f"{fr.seconds:.1f}",
            f"{r.target or ''}, {sent}" + (", EMULATED: not the board's speed" if emulated_note(r) else "")]


def _push_doc(fr: Any) -> Dict[str, Any]:
    """The board's result JSON (the schema of ``sdk push --json``), or its error."""
    return fr.value.to_dict() if fr.ok else _error_doc(fr)


CHECK_COLUMNS = [("board", 16), ("result", 6), ("python", 8), ("s", 6), ("runtimes / detail", 0)]


def _check_row(fr: Any) -> List[str]:
    if not fr.ok:
        return [fr.board, "FAIL", "-", f"{fr.seconds:.1f}", _error_text(fr)]
    f = fr.value
    runtimes = f.get("runtimes") or {}
    shown = ", ".join(f"{k} {v}" for k, v in runtimes.items() if v) if isinstance(runtimes, dict) else str(runtimes)
    return [fr.board, "ok", str(f.get("python") or "-").split()[0], f"{fr.seconds:.1f}", shown or "-"]


def _check_doc(fr: Any) -> Dict[str, Any]:
    return dict(fr.value, seconds=round(fr.seconds, 3)) if fr.ok else _error_doc(fr)


def _check_fleet(name: Optional[str], inventory: Optional[List[str]], limit: Optional[str], forks: int,
                 trust_new_host: bool, json_path: Optional[str]) -> None:
    from ..remote.board import run_fleet

    profiles = fleet_profiles([name] if name else None, inventory, limit)
    stream = FleetStream(json_path, CHECK_COLUMNS, _check_row, _check_doc)
    results = run_fleet(profiles, lambda b: b.check(), max_workers=forks, trust_new_host=trust_new_host,
                        on_result=stream.add)
    stream.finish(results)
