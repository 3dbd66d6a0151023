"""JUnit XML of a validation run: one ``<testsuite>`` per board, one ``<testcase>`` per check
(classname ``edgesdk.validate.<board>``); a failed check is a ``<failure>``, a skipped one
``<skipped>`` with the reason, so a CI system shows each check by name."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Dict, Sequence

from ..textsafe import xml_text

__all__ = ["validation_junit", "robustness_junit"]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _message(check: Dict[str, Any]) -> str:
    parts = []
    if check.get("measured") is not None:
        parts.append(f"measured {_fmt(check['measured'])}{(' ' + check['unit']) if check.get('unit') else ''}")
    if check.get("limit") is not None:
        parts.append(f"limit {check.get('op') or ''} {_fmt(check['limit'])}".replace("  ", " "))
    if check.get("reason"):
        parts.append(str(check["reason"]))
    return "; ".join(parts) or check.get("verdict", "")


def _el(parent: ET.Element, tag: str, text: Any = None, **attrs: Any) -> ET.Element:
    """A child element whose attributes and text hold only characters XML can hold (a check name
    from a hostile model may carry ESC or NUL: written as ``\x1b``, never raw)."""
    el = ET.SubElement(parent, tag, {k: xml_text(v) for k, v in attrs.items()})
    if text is not None:
        el.text = xml_text(text)
    return el


def _suite(root: ET.Element, name: str, classname: str, checks: Sequence[Dict[str, Any]], seconds: float, error: Any = None) -> None:
    failures = sum(1 for c in checks if c["verdict"] == "fail")
    skipped = sum(1 for c in checks if c["verdict"] == "skip")
    suite = _el(root, "testsuite", name=name, tests=str(len(checks)), failures=str(failures),
                errors="0", skipped=str(skipped), time=f"{seconds:.3f}")
    for c in checks:
        case = _el(suite, "testcase", name=c["name"], classname=classname, time="0")
        msg = _message(c)
        if c["verdict"] == "fail":
            _el(case, "failure", msg, message=msg, type="CheckFailed")
        elif c["verdict"] == "skip":
            _el(case, "skipped", message=msg)
        else:
            _el(case, "system-out", msg)
    if error:
        _el(suite, "system-err", str(error))


def _to_text(root: ET.Element) -> str:
    try:
        ET.indent(root)
    except AttributeError:  # Python < 3.9
        pass
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def validation_junit(result: Dict[str, Any]) -> str:
    """JUnit XML text for a validation result dict (``ValidationResult.to_dict()``)."""
    boards = result.get("boards", [])
    total = sum(len(b["checks"]) for b in boards)
    fails = sum(1 for b in boards for c in b["checks"] if c["verdict"] == "fail")
    model = (result.get("model") or {}).get("name") or "model"
    root = ET.Element("testsuites", name=xml_text(f"edgesdk validate {model}"), tests=str(total), failures=str(fails),
                      errors="0", time=f"{float(result.get('seconds') or 0):.3f}")
    for b in boards:
        _suite(root, f"validate {model} on {b['board']}", f"edgesdk.validate.{b['board']}", b["checks"],
               float(b.get("seconds") or 0), b.get("error"))
    return _to_text(root)


def robustness_junit(result: Dict[str, Any]) -> str:
    """JUnit XML text for a robustness result dict with ``checks``."""
    checks = result.get("checks", [])
    root = ET.Element("testsuites", name="edgesdk robustness", tests=str(len(checks)),
                      failures=str(sum(1 for c in checks if c["verdict"] == "fail")), errors="0", time="0")
    _suite(root, f"robustness on {result.get('runner', 'host')}", "edgesdk.robustness", checks, 0.0)
    return _to_text(root)
