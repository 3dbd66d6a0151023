"""Untrusted text made inert: names from a model, a file or a board never drive the terminal or
break an XML file.

* :func:`inert` is THE function for terminal output: control characters (C0, DEL, C1, the
  bidirectional overrides) become visible escapes (``\\x1b``), and rich markup (``[red]``,
  ``[link=...]``) is escaped so it prints as written. Every name interpolated into a message or a
  table cell that rich renders goes through it; :func:`plain` is the same without the markup
  escape (for lines written straight to a stream, and for rich output with markup off).
* :func:`xml_text` drops what XML 1.0 cannot hold (most C0 characters, U+FFFE/U+FFFF, lone
  surrogates) and what it discourages (DEL, C1) by writing it as a visible escape; every XML writer (JUnit, SVG) uses it.

Standard library only (runs on the board too: Python 3.8).
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["inert", "plain", "xml_text", "escape_markup"]

# C0 controls except TAB/LF (handled by ``keep_newlines``), DEL, C1, and the Unicode format
# characters that reorder or hide text on a terminal (bidi embeddings/overrides/isolates, LRM/RLM).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MARKUP = re.compile(r"(\\*)(\[[a-zA-Z#/@][^[]*?])")
# XML 1.0 Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
_NOT_XML = re.compile("[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")   # and DEL/C1 (discouraged)


def _visible(m: "re.Match[str]") -> str:
    c = ord(m.group(0))
    return "\\x%02x" % c if c < 0x100 else "\\u%04x" % c


def plain(text: Any, keep_newlines: bool = False) -> str:
    """``text`` as a string whose control characters are visible escapes (``ESC`` -> ``\\x1b``);
    newlines too unless ``keep_newlines`` (a name never starts a new line of output)."""
    s = text if isinstance(text, str) else str(text)
    return (_CONTROL if keep_newlines else _CONTROL_NL).sub(_visible, s)


def escape_markup(text: str) -> str:
    """Escape rich markup tags (``[red]`` -> ``\\[red]``), as ``rich.markup.escape`` does."""
    def esc(m: "re.Match[str]") -> str:
        backslashes, tag = m.groups()
        return "%s%s\\%s" % (backslashes, backslashes, tag)

    out = _MARKUP.sub(esc, text)
    if out.endswith("\\") and not out.endswith("\\\\"):
        out += "\\"
    return out


def inert(text: Any, keep_newlines: bool = False) -> str:
    """The one function for untrusted text on a terminal: :func:`plain` plus escaped markup, so it
    can be interpolated into a rich markup string or a table cell and prints exactly as written."""
    return escape_markup(plain(text, keep_newlines))


def xml_text(text: Any) -> str:
    """``text`` with every character XML 1.0 cannot hold written as a visible escape (``\\x1b``);
    ``&``, ``<`` and ``>`` are left to the XML writer (ElementTree escapes them)."""
    s = text if isinstance(text, str) else str(text)
    return _NOT_XML.sub(_visible, s)
