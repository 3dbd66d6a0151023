"""Run the `sdk` CLI in-process for tests: ``run_cli(args, capsys) -> (exit code, stdout, stderr)``."""
from __future__ import annotations


def run_cli(args, capsys):
    from sdk.cli import main

    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err
