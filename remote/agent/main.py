"""The board agent's command line: ``<python> <agent.pyz> <command> --request <file|->``.

Prints exactly ONE JSON document on stdout and exits 0, or, on failure, prints
``{"error": {"type", "message", "hint"}}`` and exits 2 (an :class:`~sdk.errors.EdgeSDKError`:
bad request, missing model, runtime unavailable...) or 1 (anything else; the traceback goes to
stderr, never stdout). While a command runs, file descriptor 1 points at stderr, so a runtime
that prints (TensorRT, ONNX Runtime logs) cannot corrupt the JSON. Commands: see
:data:`.commands.COMMANDS`. Runs on the board: Python 3.8.
"""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["main", "parse_args"]

USAGE = "usage: python edgesdk-agent.pyz {version,facts,bench,infer,profile,clean} [--request FILE|-]"


def parse_args(argv: List[str]) -> Tuple[str, Optional[str]]:
    """``(command, request path or "-" or None)``; bad arguments raise InputError."""
    from ...errors import InputError

    if not argv or argv[0].startswith("-"):
        raise InputError("no agent command given", USAGE)
    command, request, rest = argv[0], None, argv[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--request" and rest:
            request = rest.pop(0)
        elif arg.startswith("--request="):
            request = arg.split("=", 1)[1]
        else:
            raise InputError("unexpected argument '%s'" % arg, USAGE)
    return command, request


def read_request(source: Optional[str]) -> Dict[str, Any]:
    from ...errors import ConfigError, InputError

    if source is None:
        return {}
    try:
        text = sys.stdin.read() if source == "-" else open(source, "r", encoding="utf-8").read()
    except OSError as exc:
        raise InputError("cannot read the request file '%s': %s" % (source, exc)) from exc
    if not text.strip():
        return {}
    try:
        request = json.loads(text)
    except ValueError as exc:
        raise ConfigError("the request is not valid JSON: %s" % exc) from exc
    if not isinstance(request, dict):
        raise ConfigError("the request must be a JSON object")
    return request


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become null (strict JSON has no such numbers)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # anything printed while the command runs goes to stderr
    code = 0
    try:
        from ...errors import EdgeSDKError

        try:
            from .commands import run_command

            command, source = parse_args(argv)
            doc: Dict[str, Any] = run_command(command, read_request(source))
        except EdgeSDKError as exc:
            code = 2
            doc = {"error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}}
        except KeyboardInterrupt:
            code = 130
            doc = {"error": {"type": "Interrupted", "message": "the agent was interrupted", "hint": None}}
        except Exception as exc:  # noqa: BLE001 - the one place that turns anything into JSON
            traceback.print_exc(file=sys.stderr)
            code = 1
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            doc = {"error": {"type": type(exc).__name__, "message": first or type(exc).__name__,
                             "hint": "unexpected error in the board agent; its traceback is on stderr"}}
        text = json.dumps(_clean(doc), default=str, allow_nan=False)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
