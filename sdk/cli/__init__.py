"""The ``sdk`` command: a thin layer over the Python API (typer + rich).

Each command group lives in its own module with a ``register(app)`` function, listed in
``COMMAND_MODULES``. Errors from the SDK's exception tree become one line on stderr and exit
code 2; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, List, Optional

COMMAND_MODULES = [
    "sdk.cli.model_cmds",    # inspect
    "sdk.cli.bench_cmds",    # bench, targets
    "sdk.cli.quantize_cmds", # quantize
    "sdk.cli.remote_cmds",   # boards, push
    "sdk.cli.validate_cmds", # validate, robustness
    "sdk.cli.compare_cmds",  # compare
    "sdk.cli.profile_cmds",  # profile
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


def _usage_error(exc: BaseException) -> int:
    """One ``error:`` line for a command-line usage error (click's), exit code 2."""
    from . import _common

    ctx = getattr(exc, "ctx", None)
    where = f" (see: {ctx.command_path} --help)" if ctx is not None else " (see: sdk --help)"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    _common.error_line(RuntimeError(message.strip().rstrip(".") + where))
    return EXIT_ERROR


def main(argv: Optional[List[str]] = None) -> None:
    import typer

    from ..errors import EdgeSDKError
    from . import _common

    argv = _spread_key_values(list(sys.argv[1:] if argv is None else argv))
    _common.STATE["debug"] = "--debug" in argv
    cmd = typer.main.get_command(build_app())
    _plain_metavars(cmd)
    try:
        code = cmd.main(args=argv, prog_name="sdk", standalone_mode=False)
    except EdgeSDKError as exc:
        if _common.STATE["debug"]:
            raise
        _common.error_line(exc)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        _common.err_console().print("interrupted")
        sys.exit(130)
    except Exception as exc:  # click's own exceptions (typer vendors click; the class path varies)
        names = {c.__name__ for c in type(exc).__mro__}
        if "NoArgsIsHelpError" in names:
            exc.show()  # type: ignore[attr-defined]
            sys.exit(getattr(exc, "exit_code", EXIT_ERROR))
        if "UsageError" in names and not _common.STATE["debug"]:
            sys.exit(_usage_error(exc))
        if "Abort" in names:
            _common.err_console().print("interrupted")
            sys.exit(130)
        if "ClickException" in names:
            _common.error_line(RuntimeError(exc.format_message()))  # type: ignore[attr-defined]
            sys.exit(getattr(exc, "exit_code", EXIT_ERROR))
        raise
    if isinstance(code, int) and code:
        sys.exit(code)
