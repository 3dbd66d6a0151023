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


def main(argv: Optional[List[str]] = None) -> None:
    from ..errors import EdgeSDKError
    from . import _common

    argv = list(sys.argv[1:] if argv is None else argv)
    _common.STATE["debug"] = "--debug" in argv
    app = build_app()
    try:
        app(args=argv, prog_name="sdk")
    except EdgeSDKError as exc:
        if _common.STATE["debug"]:
            raise
        _common.error_line(exc)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        _common.err_console().print("interrupted")
        sys.exit(130)
