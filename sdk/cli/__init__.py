"""The ``sdk`` command: a thin layer over the Python API (typer + rich).

Each command group lives in its own module with a ``register(app)`` function, listed in
``COMMAND_MODULES``. Errors from the SDK's exception tree, usage errors and anything unexpected
become one ``error:`` line on stderr and exit code 2; ``--debug`` shows the traceback (and the
third-party log lines) instead. Ctrl-C stops the board jobs and exits 130; SIGTERM and SIGHUP
do the same and exit 143 and 129 (temporary files are removed on the way out, as for Ctrl-C).
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Dict, List, Optional

COMMAND_MODULES = [
    "sdk.cli.model_cmds",    # inspect
    "sdk.cli.bench_cmds",    # bench, targets
    "sdk.cli.quantize_cmds", # quantize
    "sdk.cli.remote_cmds",   # boards, push
    "sdk.cli.validate_cmds", # validate, robustness
    "sdk.cli.compare_cmds",  # compare
    "sdk.cli.profile_cmds",  # profile
    "sdk.cli.convert_cmds",  # convert
    "sdk.cli.pipeline_run_cmds",  # pipeline run / quantize / glue
    "sdk.cli.debug_cmds",    # check, debug diff, debug reduce
]

EXIT_FAILED = 1   # the job ran and its verdict is negative (a check failed, a board failed)
EXIT_ERROR = 2    # the job could not be done (bad input, missing file, unavailable runtime)


def build_app() -> Any:
    import typer

    app = typer.Typer(
        name="sdk",
        help="edgesdk: build, run and measure models on edge targets and boards.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    def _print_version(value: bool) -> None:
        if value:
            from .. import __version__

            typer.echo(f"edgesdk {__version__}")
            raise typer.Exit(0)

    @app.callback()
    def _root(
        debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
        version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                     callback=_print_version),
    ) -> None:
        from . import _common

        _common.STATE["debug"] = debug

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    return app


def _plain_metavars(cmd: Any) -> None:
    """Help shows ``TEXT``, ``INTEGER``, ``MODEL`` instead of typer's ``<str>``, ``<list[str]>``,
    and nothing for flags (``<bool>``)."""
    for sub in getattr(cmd, "commands", {}).values():
        _plain_metavars(sub)
    cmd.help = _literal(cmd.help)
    if hasattr(cmd, "get_help_option"):  # --help is made per context, not listed in params
        made = cmd.get_help_option

        def help_option(ctx: Any, _made: Any = made) -> Any:
            opt = _made(ctx)
            if opt is not None and opt.metavar is None:
                opt.metavar = ""
            return opt

        cmd.get_help_option = help_option
    for param in getattr(cmd, "params", []):
        param.help = _literal(getattr(param, "help", None))
        if param.metavar is not None:
            continue
        if getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
            param.metavar = ""
        elif getattr(param, "param_type_name", "") == "argument":
            param.metavar = str(param.name).upper()
            if hasattr(param, "display_type_rich"):  # typer >= 0.2x prints "<str>" after the name
                param.display_type_rich = lambda ctx: None
        else:
            kind = _type_word(param)
            if kind:
                param.metavar = kind


def _literal(text: Optional[str]) -> Optional[str]:
    """Help text as written: rich would take ``[robustness]`` for a markup tag and drop it."""
    if not text or "[" not in text:
        return text
    from rich.markup import escape

    return escape(text)


_TYPE_WORDS = {"str": "TEXT", "text": "TEXT", "int": "INTEGER", "integer": "INTEGER", "float": "FLOAT",
               "path": "PATH", "Path": "PATH"}


def _type_word(param: Any) -> Optional[str]:
    """``TEXT``/``INTEGER``/``FLOAT``/``PATH`` for a plain (or repeated) value, else None (choices
    keep typer's own display). Works with typer's vendored click and with click itself."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:  # typer >= 0.2x: its own parameter types
        if getattr(desc, "is_choice", False):
            return None
        name = param.bare_type()
        if name.startswith("list[") and name.endswith("]"):
            name = name[5:-1]
        return _TYPE_WORDS.get(name)
    kind = getattr(getattr(param, "type", None), "name", None)
    return _TYPE_WORDS.get(str(kind).split()[0]) if kind else None


#: Options whose KEY=VALUE items may follow one flag, separated by spaces
#: (``--preprocess size=224x224 mean=0.5,0.5,0.5``): spread into repeated flags.
_KEY_VALUE_LISTS = ("--preprocess",)


def _spread_key_values(argv: List[str]) -> List[str]:
    out: List[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        out.append(arg)
        i += 1
        if arg == "--":
            out.extend(argv[i:])
            break
        flag = arg.split("=", 1)[0]
        if flag in _KEY_VALUE_LISTS and (arg != flag or i < len(argv)):
            if arg == flag:  # "--preprocess VALUE"; else "--preprocess=VALUE" carried its own
                out.append(argv[i])
                i += 1
            while i < len(argv) and not argv[i].startswith("-") and "=" in argv[i]:
                out += [flag, argv[i]]
                i += 1
    return out


def main(argv: Optional[List[str]] = None) -> None:
    """Run the ``sdk`` command. Every way out is one line on stderr and an exit code: usage and
    input errors ``error: ...`` and 2, failed checks 1, Ctrl-C ``interrupted`` and 130 (after the
    board jobs were stopped), never a traceback unless ``--debug``."""
    from . import _common

    argv = _spread_key_values(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in argv
    _common.STATE["debug"] = debug
    if debug:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        os.environ["EDGESDK_RUNTIME_LOG"] = "1"   # the runtimes' own logs too (quiet otherwise)
    previous = _install_sigint()
    try:
        code = _run(argv, debug)
    except KeyboardInterrupt:
        _stop_boards()
        signum = _SIGNALLED.get("signum") or 2
        sys.stderr.write({15: "terminated (SIGTERM)\n", 1: "hangup (SIGHUP)\n"}.get(signum, "interrupted\n"))
        sys.stderr.flush()
        code = 128 + signum
    finally:
        _restore_sigint(previous)
    sys.exit(code)


def _kind(exc: BaseException) -> str:
    """Which click exception ``exc`` is ('UsageError', 'ClickException', 'Abort' or ''), by class
    name: typer ships its own copy of click, and plain click may be used as well."""
    names = {c.__name__ for c in type(exc).__mro__}
    for kind in ("UsageError", "ClickException", "Abort"):
        if kind in names:
            return kind
    return ""


def _run(argv: List[str], debug: bool) -> int:
    from ..errors import EdgeSDKError
    from . import _common

    try:
        import typer

        cmd = typer.main.get_command(build_app())
        _plain_metavars(cmd)
        from ._layout import flatten_help

        flatten_help(cmd)   # help paragraphs wrap at the terminal width, not mid-sentence
        rv = cmd.main(args=argv, prog_name="sdk", standalone_mode=False)
        if rv == 130:                  # typer turns KeyboardInterrupt into Exit(130)
            raise KeyboardInterrupt
        return rv if isinstance(rv, int) else 0
    except EdgeSDKError as exc:
        if debug:
            raise
        _common.error_line(exc, explain=_explain_refusal(exc, argv))
        return EXIT_ERROR
    except (KeyboardInterrupt, SystemExit):
        raise
    except MemoryError as exc:        # e.g. an input shape far larger than this machine
        if debug:
            raise
        _common.error_line(Exception(f"not enough memory: {exc}; check the input shapes and batch sizes"))
        return EXIT_ERROR
    except Exception as exc:
        kind = _kind(exc)
        if kind == "Abort":            # click turns KeyboardInterrupt/EOF into Abort
            raise KeyboardInterrupt from None
        if kind == "UsageError" and type(exc).__name__ == "NoArgsIsHelpError":
            return EXIT_ERROR          # a bare `sdk` or group: the help was printed, as click does
        if kind == "UsageError":
            _common.error_line(Exception(_usage_text(exc)))
            return EXIT_ERROR
        if kind == "ClickException":
            _common.error_line(Exception(exc.format_message()))  # type: ignore[attr-defined]
            return getattr(exc, "exit_code", None) or EXIT_ERROR
        if debug:
            raise
        # a bug, or an input no check caught: still one line, never a traceback
        _common.error_line(Exception(f"{type(exc).__name__}: {exc} (unexpected; run with --debug for the "
                                     "traceback, and please report it)"))
        return EXIT_ERROR


def _explain_refusal(exc: BaseException, argv: List[str]) -> Optional[str]:
    """A target that refused to build or run a model: the ``sdk debug reduce`` command that finds
    the node (with the command's own target, ``--input-shape`` and ``--data``), to end the one
    error line with; None for any other error."""
    import shlex

    from ..errors import BuildError, InferenceError

    if not isinstance(exc, (BuildError, InferenceError)):
        return None
    model = next((a for a in argv if a.endswith(".onnx") and not a.startswith("-")), None)
    if model is None or "--board" in argv or any(a.startswith("--board=") for a in argv):
        return None
    target = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-t", "--target")), None)
    if target is None:
        from ..formats import default_target

        try:
            target = default_target(model)
        except Exception:  # the model cannot even be read: no command to suggest
            return None
    pattern = str(getattr(exc, "message", exc)).split(":")[0][:40].replace("'", "")
    carried = [argv[i:i + 2] for i, a in enumerate(argv[:-1]) if a in ("--input-shape", "--data")]
    extra = "".join(f" {opt} {shlex.quote(value)}" for opt, value in carried)
    return f"sdk debug reduce {shlex.quote(model)} --fails {shlex.quote(f'error:{pattern}@{target}')}{extra}"


def _usage_text(exc: Any) -> str:
    """A click usage error as one line: the message, then where to look."""
    msg = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    where = f"'{ctx.command_path} --help'" if ctx is not None else "'sdk --help'"
    return f"{msg} (see {where})"


_SIGNALLED: Dict[str, int] = {}


def _install_sigint() -> Any:
    """Ctrl-C, SIGTERM (``timeout``, CI cancels) and SIGHUP (a closed terminal or SSH session):
    the first one cancels every board job (:func:`sdk.remote.cancel.cancel_all` sets the flag;
    each job stops its board processes, TERM then KILL) and raises KeyboardInterrupt here, so
    every ``finally`` runs (temporary files removed); a second one while that cleanup runs is
    ignored, so it completes (bounded: about 3 s). The exit code is 128 + the signal number."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    _SIGNALLED.clear()

    def handler(signum: int, frame: Any) -> None:
        cancel = sys.modules.get("sdk.remote.cancel")
        if cancel is not None and cancel.cancelled():
            return                          # already stopping: let the cleanup finish
        _SIGNALLED.setdefault("signum", int(signum))
        if cancel is not None:
            cancel.cancel_all(wait_s=0)
            if cancel.deferring():          # a process is being started: the job raises once it can
                return
        raise KeyboardInterrupt

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _restore_sigint(previous: Any) -> None:
    import signal

    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _stop_boards() -> None:
    """After an interrupt: wait (bounded) until every board job has stopped its processes."""
    cancel = sys.modules.get("sdk.remote.cancel")
    if cancel is not None:
        cancel.cancel_all()
