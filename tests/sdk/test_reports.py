"""Reports: SVG plots, self-contained HTML (opened in headless Chromium), JUnit XML, JSON."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests import tiers

from sdk.reports import to_jsonable, write_json
from sdk.reports import svg
from sdk.reports.html import power_trace, robustness_html, validation_html
from sdk.reports.junit import validation_junit

ROOT = Path(__file__).resolve().parents[2]
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def result(example_model, example_eval):
    """A real validation run on this host (ONNX Runtime), with the example spec."""
    from sdk.spec import load_spec
    from sdk.validation import validate

    spec = load_spec(ROOT / "examples" / "digits" / "spec.toml")
    spec.run.update(runs=50, min_seconds=0.05)
    return validate(example_model, ["host:onnxruntime"], example_eval, spec=spec, limit=150).to_dict()


@pytest.fixture(scope="module")
def with_power(result):
    """The same result with a power trace and windows filled in, as a board with a sensor returns."""
    import copy

    r = copy.deepcopy(result)
    bench = r["boards"][0]["benchmark"]
    t = [100.0 + i * 0.05 for i in range(80)]
    bench["power"] = {"mean_w": 6.2, "idle_w": 4.1, "samples": 40, "rate_hz": 20.0, "source": "ina3221",
                      "trace": [[ti, 4.1 if ti < 102 else 6.2 + 0.1 * math.sin(ti)] for ti in t],
                      "idle_window": {"begin_s": 100.5, "end_s": 101.5}}
    bench["window"] = {"begin_s": 102.2, "end_s": 103.8}
    bench["energy_mj_per_inference"] = {"total": 1.5, "above_idle": 0.5}
    return r


def test_svg_plots_are_valid_xml():
    for text in (svg.histogram([1, 2, 2, 3, 3, 3, 4], "h", "ms", marks=[("p50", 3.0)]),
                 svg.line_plot([("a", [0, 1, 2], [1, 4, 2]), ("b", [0, 1, 2], [2, 2, 2])], "l", "x", "y",
                               spans=[("idle", 0, 0.5, "#777")], markers=True),
                 svg.bar_chart([("logits", 42.0), ("boxes", 12.5)], "b", "dB", limit=("min", 30.0)),
                 svg.histogram([], "empty", "ms"), svg.line_plot([], "empty", "x", "y"),
                 svg.bar_chart([("x", float("inf"))], "inf only", "dB")):
        root = ET.fromstring(text)
        assert root.tag == SVG_NS + "svg" and root.find(SVG_NS + "title") is not None
    hist = ET.fromstring(svg.histogram(list(range(100)), "h", "ms", bins=10))
    assert len([r for r in hist.iter(SVG_NS + "rect") if r.get("class") == "bar"]) == 10


def test_histogram_cuts_far_outliers():
    text = svg.histogram([1.0] * 2000 + [1.1] * 2000 + [500.0] * 3, "Latency", "ms")
    assert "3 samples above" in text


def test_nice_ticks():
    assert svg.nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert svg.nice_ticks(0.013, 0.024)[0] <= 0.013
    assert svg.nice_ticks(5, 5)  # degenerate range still gives ticks


def test_power_trace_windows(with_power):
    (xs, ys), spans, note = power_trace(with_power["boards"][0]["benchmark"])
    assert xs[0] == 0.0 and len(ys) == 80 and note == ""
    assert [s[0] for s in spans] == ["idle", "measured"]
    assert spans[0][1] == pytest.approx(0.5) and spans[1][2] == pytest.approx(3.8)
    _, _, why = power_trace({"power": {"mean_w": None, "reason": "no power sensor found"}})
    assert why == "no power sensor found"


def test_html_is_self_contained(result):
    html = validation_html(result)
    assert html.startswith("<!DOCTYPE html>") and "GO" in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html
    assert html.count("<svg") >= 6  # latency x2, power, per-output error x3, robustness
    for text in ("Latency histogram", "Latency over time", "Power trace", "Per-output error", "Robustness",
                 "Device facts and versions", "latency.p99", "accuracy.top1_drop"):
        assert text in html, text
    # every SVG embedded is well-formed XML
    for block in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        ET.fromstring(block)


def test_junit_reads_with_etree_and_junitparser(result, tmp_path):
    from sdk.validation.checks import FAIL

    failing = json.loads(json.dumps(to_jsonable(result)))
    next(c for c in failing["boards"][0]["checks"] if c["name"] == "latency.p99").update(verdict=FAIL, reason="too slow")
    text = validation_junit(failing)
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(result["boards"][0]["checks"]) == int(suite.get("tests"))
    assert {c.get("name") for c in cases} >= {"board.run", "latency.p99", "power.mean"}
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 1 == int(suite.get("failures")) and "too slow" in failed[0].find("failure").get("message")
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert any(c.get("name") == "power.mean" for c in skipped)  # no power sensor on the host
    junitparser = pytest.importorskip("junitparser", reason="junitparser is in the test extra")
    path = tmp_path / "r.xml"
    path.write_text(text)
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    names = {case.name: case for s in suites for case in s}
    assert "latency.p99" in names and not names["latency.p99"].is_passed
    assert names["power.mean"].is_skipped


def test_json_output_is_strict(result, tmp_path):
    p = tmp_path / "r.json"
    write_json(p, {**result, "odd": [float("inf"), float("nan")]})
    data = json.loads(p.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert data["odd"] == ["inf", "nan"] and data["schema"] == "edgesdk.validation/1"


def test_robustness_html(result):
    rob = {"model": {"name": "m"}, "runner": "host", "robustness": result["boards"][0]["robustness"],
           "checks": [c for c in result["boards"][0]["checks"] if c["name"].startswith("robustness")]}
    html = robustness_html(rob)
    assert "Robustness" in html and html.count("<svg") == 1 and "severity" in html


# -- a real headless browser -------------------------------------------------------------------------
def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = _chromium()
needs_chromium = tiers.needs("chromium", CHROMIUM is not None, "needs a headless Chromium: apt-get install chromium "
                                                               "(.ci/run installs it)")


def _chrome(tmp_path, *args):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
           *args]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@needs_chromium
def test_html_renders_in_headless_chromium(with_power, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(validation_html(with_power), encoding="utf-8")
    proc = _chrome(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # the browser parsed the page and built the plots: SVG elements with drawn marks are in the DOM
    assert dom.count("<svg") >= 6  # latency x2, power, per-output error x2 (SNR is inf), robustness
    assert 'class="bar"' in dom and 'class="series"' in dom and 'class="span"' in dom
    assert "Power trace" in dom and "measured" in dom and "idle" in dom
    errors = [line for line in proc.stderr.splitlines() if "Uncaught" in line or ("CONSOLE" in line and "ERROR" in line)]
    assert errors == [], errors
    shot = tmp_path / "shot.png"
    proc = _chrome(tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri())
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1280, 2400)
    assert len(png) > 20_000  # a rendered page with plots, not a blank one
