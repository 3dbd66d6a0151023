"""Terminal layout that holds at 80 columns and in a pipe.

- :class:`FittingConsole` is the CLI's console: every :class:`rich.table.Table` it prints keeps
  each column at least as wide as its header, short cells (names, numbers) on one line, and only
  free-text columns (description, notes, reason...) fold. A table that still cannot fit the width
  is printed as one ``key: value`` block per row instead of a table with broken borders.
- :func:`flatten_help` joins the hard line breaks inside each paragraph of the commands' help, so
  the help screens wrap at the terminal's width instead of mid-sentence.
"""
from __future__ import annotations

from typing import Any, List

__all__ = ["FittingConsole", "fit_table", "flatten_help", "FREE_TEXT"]

#: Column headers whose cells are free text: they fold; every other column keeps its cells whole
#: when it can.
FREE_TEXT = ("description", "notes", "note", "reason", "details", "message", "error", "why", "ONNX nodes",
             "layer", "path", "checks", "hint")
_SHORT_CELL = 12


def _plain(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # noqa: BLE001 - not markup: as it is
            return cell
    return str(cell)


def fit_table(table: Any, width: int) -> Any:
    """``table`` with column minimums set (see the module docstring); returns the table, or a
    :class:`rich.console.Group` of per-row blocks when its minimum width exceeds ``width``."""
    from rich.console import Group
    from rich.text import Text

    for col in table.columns:
        header = _plain(col.header)
        cells = [_plain(c) for c in col._cells]
        longest = max([len(c) for c in cells] or [0])
        longest_line = max([len(ln) for c in cells for ln in c.splitlines()] or [0])
        free = header in FREE_TEXT or longest > 60
        need = max(len(w) for w in header.split()) if header.split() else 1
        if free:  # free text wraps at words: the column can give way to the others
            col.no_wrap = False
            col.overflow = "fold"
            need = max(need, len(header))
        else:
            if longest_line <= _SHORT_CELL:
                col.no_wrap = True
                need = max(need, len(header), longest_line)
            else:  # long cells fold at their words (a long single token folds after 14 characters)
                words = [w for c in cells for w in c.split()]
                need = max(need, len(header), min(max([len(w) for w in words] or [1]), 14))
        col.min_width = max(col.min_width or 0, need)
    borders = 3 * len(table.columns) + 1 if table.show_edge else 3 * len(table.columns) - 1
    minimum = sum(c.min_width or 1 for c in table.columns) + borders
    if minimum <= width:
        natural = [max([len(_plain(col.header))] + [len(ln) for c in col._cells for ln in _plain(c).splitlines()])
                   for col in table.columns]
        if sum(natural) + borders > width:  # give each column its minimum, share the rest by need
            mins = [c.min_width or 1 for c in table.columns]
            spare = width - borders - sum(mins)
            wants = [max(0, n - m) for n, m in zip(natural, mins)]
            total = sum(wants) or 1
            extra = [spare * w // total for w in wants]
            for k in sorted(range(len(extra)), key=lambda k: -wants[k])[: spare - sum(extra)]:
                extra[k] += 1
            for col, m, e in zip(table.columns, mins, extra):
                col.width = col.min_width = col.max_width = m + e
                col.no_wrap = False
                col.overflow = "fold"
        return table
    rows: List[Any] = []
    if table.title:
        rows.append(Text(_plain(table.title), style="bold"))
    n = max((len(c._cells) for c in table.columns), default=0)
    headers = [_plain(c.header) or "-" for c in table.columns]
    for i in range(n):
        block = Text()
        for h, col in zip(headers, table.columns):
            value = _plain(col._cells[i]) if i < len(col._cells) else ""
            block.append(f"{h}: ", style="bold")
            block.append(value + "\n")
        rows.append(block)
    return Group(*rows)


from rich.console import Console as _Console  # noqa: E402 - this module is imported when a console is made


class FittingConsole(_Console):
    """A :class:`rich.console.Console` whose tables fit (see the module docstring)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        from rich.table import Table

        fitted = [fit_table(o, self.width) if isinstance(o, Table) else o for o in objects]
        super().print(*fitted, **kwargs)


def flatten_help(command: Any) -> None:
    """Join the line breaks inside each paragraph of ``command``'s help (and its subcommands'),
    keeping blank-line paragraph breaks, so help wraps at the terminal width."""
    for attr in ("help", "short_help"):
        text = getattr(command, attr, None)
        if text:
            paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
            setattr(command, attr, "\n\n".join(p for p in paragraphs if p))
    for param in getattr(command, "params", []):
        if getattr(param, "help", None):
            param.help = " ".join(param.help.split())
    for sub in (getattr(command, "commands", None) or {}).values():
        flatten_help(sub)
