"""Every help screen and table of the CLI at COLUMNS=80 in a pipe (not a tty): no line wider than
80, no box border cut off, no table column narrower than its header, no raw escape codes; and every
``sdk ...`` command that an error message or hint quotes parses with the CLI (real options only)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.controlflow import if_rate_model, loop_model

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[")


def sdk80(*args, cwd=None):
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def _commands():
    import typer

    from sdk.cli import build_app

    cmd = typer.main.get_command(build_app())
    out = [[]]
    for name, sub in cmd.commands.items():
        out.append([name])
        for inner in (getattr(sub, "commands", None) or {}):
            out.append([name, inner])
    return cmd, out


BOX = "╭╰┏┡└┃│┗┣┠╞╘━─"


def check_screen(text: str, what: str, every_line: bool = True) -> None:
    """Lines fit 80 columns (``every_line``; else the lines of boxes and tables: a message line is
    one logical line, which the terminal wraps), boxes and tables keep both borders, table
    headers stay on one line."""
    assert not ANSI.search(text), f"{what}: raw escape codes in a pipe"
    lines = text.splitlines()
    for ln in lines:
        if every_line or ln[:1] in BOX:
            assert len(ln) <= 80, f"{what}: {len(ln)} columns: {ln!r}"
        s = ln.rstrip()
        for left, right in (("╭", "╮"), ("╰", "╯"), ("┏", "┓"), ("┡", "┩"), ("└", "┘"), ("┃", "┃")):
            if s.startswith(left):
                assert s.endswith(right), f"{what}: border cut off: {ln!r}"
        if s.startswith("│"):
            assert s.endswith("│"), f"{what}: border cut off: {ln!r}"
    for i, ln in enumerate(lines):
        if ln.startswith("┏"):  # the header of a table: exactly one line, every header whole
            assert lines[i + 2].startswith("┡"), f"{what}: a header wraps (a column narrower than its header):\n" + \
                "\n".join(lines[i:i + 5])


@pytest.mark.parametrize("path", _commands()[1], ids=lambda p: " ".join(p) or "sdk")
def test_help_fits_80_columns(path):
    proc = sdk80(*path, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    check_screen(proc.stdout, f"sdk {' '.join(path)} --help")


def test_help_paragraphs_wrap_at_the_width_not_mid_sentence():
    """A docstring's hard line breaks left half-empty lines mid-sentence in the commands box."""
    rows = [ln.rstrip()[1:-1].rstrip() for ln in sdk80("--help").stdout.splitlines() if ln.startswith("│")]
    for a, b in zip(rows, rows[1:]):
        cont_a, cont_b = a.startswith(" " * 12), b.startswith(" " * 12)
        if cont_b and len(a) < 50 and a.strip() and not a.rstrip().endswith((".", ":")):
            pytest.fail(f"a help line breaks mid-sentence:\n{a}\n{b}")
        del cont_a


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("layout")
    return {"if": if_rate_model(d / "if.onnx"), "loop": loop_model(d / "loop.onnx")}


def test_tables_fit_80_columns(tiny, tmp_path):
    screens = {
        "boards": sdk80("boards"),
        "targets": sdk80("targets"),
        "inspect": sdk80("inspect", tiny["if"], "--input-shape", "x=1x4", "--input-shape", "state=2x1x3"),
        "bench": sdk80("bench", tiny["loop"], "--runs", "3", "--min-seconds", "0", "--warmup", "0"),
        "profile": sdk80("profile", tiny["loop"], "--runs", "2"),
    }
    for name, proc in screens.items():
        assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
        check_screen(proc.stdout, f"sdk {name}", every_line=False)
    boards = screens["boards"].stdout
    assert "ali/ase/s" not in boards.replace("\n", "/") and "┃ board" in boards   # a table, headers whole


_QUOTED = re.compile(r"\bsdk ((?:inspect|bench|targets|quantize|push|validate|robustness|compare|profile|boards)"
                     r"(?: [^\"'`()\n;,]*)?)")


def _quoted_commands():
    found = set()
    for base in (ROOT / "sdk", ROOT / "targets"):
        for f in base.rglob("*.py"):
            for lit in re.findall(r"f?\"([^\"\n]*)\"|f?'([^'\n]*)'", f.read_text(encoding="utf-8")):
                text = lit[0] or lit[1]
                for m in _QUOTED.finditer(text):
                    found.add((f.relative_to(ROOT).as_posix(), m.group(1).strip()))
    return sorted(found)


def test_every_quoted_command_names_real_options():
    """A hint said `sdk quantize --scheme tensorrt`: an option that does not exist (it is --target)."""
    cmd, _ = _commands()
    quoted = _quoted_commands()
    assert len(quoted) >= 10, quoted
    bad = []
    for where, text in quoted:
        words = text.split()
        sub = cmd.commands[words[0]]
        rest = words[1:]
        if getattr(sub, "commands", None) and rest and rest[0] in sub.commands:
            sub = sub.commands[rest[0]]
            rest = rest[1:]
        names = {o for p in sub.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}
        for w in rest:
            opt = w.split("=")[0].rstrip(".:")
            if opt.startswith("--") and opt not in names:
                bad.append(f"{where}: `sdk {text}`: {opt} is not an option of `sdk {words[0]}`")
    assert not bad, "\n".join(bad)
