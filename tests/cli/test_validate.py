"""`sdk validate` and `sdk robustness` end to end with the example model and its labelled data on
the `local` board (the board agent in a subprocess): GO, NO-GO with the failing check named,
reports, bad input (exit 2), and a board that drops mid-run while the fleet goes on."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "digits" / "spec.toml"
SPEC_FAIL = ROOT / "examples" / "digits" / "spec_fail.toml"


def sdk(*args, env=None):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def fast_spec(tmp_path_factory):
    """The example's passing spec with a shorter measurement (the budgets are the same)."""
    p = tmp_path_factory.mktemp("spec") / "spec.toml"
    p.write_text(SPEC.read_text().replace("runs = 100", "runs = 30").replace("min_seconds = 0.5", "min_seconds = 0.1"))
    return p


@pytest.fixture(scope="module")
def passing_run(example_model, example_eval, fast_spec, tmp_path_factory):
    out = tmp_path_factory.mktemp("pass")
    proc = sdk("validate", example_model, "--board", "local", "--data", example_eval, "--spec", fast_spec,
               "--report", out / "report.html", "--junit", out / "report.xml", "--json", out / "report.json")
    return proc, out


def test_passing_spec_exits_0_with_reports(passing_run):
    proc, out = passing_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "report.json").read_text())
    # budgets without a sensor here (power, temperature) are listed, never silently passed
    assert data["summary_line"] in proc.stdout and "local" in proc.stdout
    skipped = [c["name"] for c in data["boards"][0]["checks"] if c["verdict"] == "skip"]
    assert len(data["not_verified"]) == len(skipped)
    if skipped:
        assert data["summary_line"].startswith(f"GO ({len(skipped)} budget")
    else:
        assert data["summary_line"] == "GO: every check passed"
    assert data["verdict"] == "pass" and data["exit_code"] == 0
    board = data["boards"][0]
    assert board["board"] == "local" and board["failed_stage"] is None
    verdicts = {c["name"]: c["verdict"] for c in board["checks"]}
    assert verdicts["accuracy.top1_drop"] == "pass" and verdicts["latency.p99"] == "pass"
    assert verdicts["power.mean"] == "skip"  # no power sensor here: skipped, with the reason
    reason = next(c["reason"] for c in board["checks"] if c["name"] == "power.mean")
    assert "power sensor" in reason
    assert board["accuracy"]["top1_board"] == pytest.approx(data["reference"]["top1"])
    assert board["compare"]["logits"]["cosine"] > 0.9999
    assert data["data"]["samples"] == 450 and "stored labels" in data["data"]["labels"]
    assert board["robustness"]["rows"] and board["facts"]["python"]
    root = ET.parse(out / "report.xml").getroot()
    assert int(root.get("failures")) == 0 and int(root.get("tests")) == len(board["checks"])
    html = (out / "report.html").read_text()
    assert "GO" in html and html.count("<svg") >= 5


def test_failing_spec_exits_1_and_names_the_check(example_model, example_eval, tmp_path):
    spec = tmp_path / "fail.toml"
    spec.write_text(SPEC_FAIL.read_text().replace("runs = 100", "runs = 20").replace("min_seconds = 0.5", "min_seconds = 0.05"))
    proc = sdk("validate", example_model, "-b", "local", "--data", example_eval, "--spec", spec, "-q",
               "--junit", tmp_path / "r.xml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL local: latency.p99" in proc.stdout
    assert "FAIL local: runtime.onnxruntime" in proc.stdout and "does not meet >=99" in proc.stdout
    assert "FAIL local: robustness.top1_drop" in proc.stdout
    assert "accuracy.top1_drop" not in proc.stdout.split("NO-GO")[0].split("FAIL", 1)[1]  # that one passed
    assert "NO-GO: 3 check(s) failed" in proc.stdout
    cases = ET.parse(tmp_path / "r.xml").getroot().iter("testcase")
    failed = sorted(c.get("name") for c in cases if c.find("failure") is not None)
    assert failed == ["latency.p99", "robustness.top1_drop", "runtime.onnxruntime"]


def test_labels_file_formats(example_model, example_eval, tmp_path):
    y = np.load(example_eval)["y"][:60]
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "y.csv").write_text("label\n" + "\n".join(map(str, y)) + "\n")
    np.savez(tmp_path / "x.npz", image=np.load(example_eval)["x"][:60])
    for labels in ("y.npy", "y.csv"):
        proc = sdk("validate", example_model, "-b", "host:onnxruntime", "--data", tmp_path / "x.npz",
                   "--labels", tmp_path / labels, "--json", "-", "-q")
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        assert data["boards"][0]["accuracy"]["samples"] == 60 and data["data"]["labels"].endswith(labels)


@pytest.mark.parametrize("case, match", [
    ("missing_data", "data path"),
    ("labels_count", "has 10 labels for 450 samples"),
    ("labels_range", "labels do not match the model: label 12"),
    ("spec_unknown_key", "unknown key 'p99_ms' in [budgets] (allowed keys:"),
    ("unknown_board", "unknown board 'no-such-board'"),
    ("missing_model", "does not exist"),
    # an FP32 model with [run] precision = "int8" on onnxruntime: refused before any run, not FP32 timed
    ("spec_precision", "target 'onnxruntime' runs a model in the precision it is stored in (fp32), not int8"),
])
def test_bad_input_exits_2_with_one_line(example_model, example_eval, tmp_path, case, match):
    args = [example_model, "--board", "local", "--data", example_eval]
    if case == "missing_data":
        args = [example_model, "--board", "local", "--data", tmp_path / "nothing"]
    elif case == "labels_count":
        np.save(tmp_path / "y.npy", np.arange(10))
        args += ["--labels", tmp_path / "y.npy"]
    elif case == "labels_range":
        np.save(tmp_path / "y.npy", np.full(450, 12))
        args += ["--labels", tmp_path / "y.npy"]
    elif case == "spec_unknown_key":
        (tmp_path / "s.toml").write_text("[budgets]\np99_ms = 3\n")
        args += ["--spec", tmp_path / "s.toml"]
    elif case == "spec_precision":
        (tmp_path / "s.toml").write_text('[run]\nprecision = "int8"\n')
        args += ["--spec", tmp_path / "s.toml"]
    elif case == "unknown_board":
        args += ["--board", "no-such-board"]
    elif case == "missing_model":
        args[0] = tmp_path / "none.onnx"
    proc = sdk("validate", *args, "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def dropping_board(tmp_path):
    """A `local`-style board whose Python dies like a dropped link as soon as it is asked to run
    the model (the device facts still work): the drop is simulated at the lowest level, the
    process on the board, and everything above it is real."""
    wrapper = tmp_path / "python-that-drops"
    wrapper.write_text("#!/bin/sh\n"
                       "case \"$*\" in *' infer '*|*' bench '*)\n"
                       "  echo 'Connection to board closed by remote host.' >&2; exit 255;;\n"
                       "esac\n"
                       f"exec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "flaky.toml").write_text(
        'name = "flaky"\ndescription = "drops when the model runs"\n\n[connection]\nhost = "local"\n'
        f'python = "{wrapper}"\nworkdir = "{tmp_path / "flaky-work"}"\n')
    return {"EDGESDK_BOARDS_PATH": str(boards)}


def test_board_that_drops_mid_run_fails_its_checks_others_continue(example_model, example_eval, fast_spec,
                                                                  dropping_board, tmp_path):
    proc = sdk("validate", example_model, "-b", "flaky", "-b", "local", "--data", example_eval, "--spec", fast_spec,
               "--limit", "100", "--json", tmp_path / "r.json", "--report", tmp_path / "r.html", env=dropping_board)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    flaky, local = data["boards"]
    assert local["verdict"] == "pass" and local["benchmark"]["latency_ms"]["count"] >= 30
    assert flaky["verdict"] == "fail" and flaky["failed_stage"] == "infer"
    assert flaky["facts"]["python"], "the facts gathered before the drop are kept"
    checks = {c["name"]: c for c in flaky["checks"]}
    assert checks["board.run"]["verdict"] == "fail"
    assert checks["latency.p99"]["verdict"] == "fail"
    assert checks["latency.p99"]["reason"].startswith("board failed during infer")
    assert checks["runtime.onnxruntime"]["verdict"] == "pass"  # measured before the drop
    assert "FAIL flaky: the board failed during infer" in proc.stdout
    assert [r["verdict"] for r in data["summary"]] == ["fail", "pass"]
    assert "board failed during" in (tmp_path / "r.html").read_text()


def test_robustness_command(example_model, example_eval, tmp_path):
    args = ["robustness", example_model, "--data", example_eval, "--corruptions", "noise,contrast",
            "--severities", "1,5", "--limit", "120", "--json", tmp_path / "r.json", "--report", tmp_path / "r.html"]
    proc = sdk(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = json.loads((tmp_path / "r.json").read_text())
    rows = first["robustness"]["rows"]
    assert [(r["corruption"], r["severity"]) for r in rows] == [("noise", 1), ("noise", 5), ("contrast", 1), ("contrast", 5)]
    assert first["robustness"]["clean"]["top1"] > 0.9 and rows[1]["top1_drop"] > rows[0]["top1_drop"]
    assert "contrast" in proc.stdout and (tmp_path / "r.html").read_text().count("<svg") == 1
    assert sdk(*args).returncode == 0
    assert json.loads((tmp_path / "r.json").read_text())["robustness"] == first["robustness"], "seeded: reproducible"
    spec = tmp_path / "s.toml"
    spec.write_text("[robustness]\nmax_top1_drop = 0.02\n")
    proc = sdk("robustness", example_model, "--data", example_eval, "--corruptions", "contrast", "--severities", "5",
               "--limit", "60", "--spec", spec)
    assert proc.returncode == 1 and "FAIL robustness.top1_drop" in proc.stdout
    proc = sdk("robustness", example_model, "--data", example_eval, "--corruptions", "fog")
    assert proc.returncode == 2 and "unknown corruption 'fog'" in proc.stderr


def test_robustness_on_the_local_board(example_model, example_eval, tmp_path):
    proc = sdk("robustness", example_model, "--data", example_eval, "--board", "local", "--corruptions", "blur",
               "--severities", "2", "--limit", "50", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["runner"] == "local" and len(data["robustness"]["rows"]) == 1


def test_power_and_device_checks_on_a_simulated_jetson(example_model, example_eval, tmp_path):
    """SIMULATION: the `local` agent reads a fake Jetson sysfs tree (INA3221 rails, nvpmodel,
    clocks, thermal zones) written by the remote runner's SimulatedBoard, so the power, energy,
    power-mode, clocks and temperature checks are evaluated end to end instead of skipped."""
    from sdk.remote.agent.power.simulate import SimulatedBoard

    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "simjet.toml").write_text(
        f'name = "simjet"\n[connection]\nhost = "local"\nworkdir = "{tmp_path / "work"}"\n'
        f'[power]\nsensors = ["ina3221-hwmon"]\nsysfs_root = "{tmp_path / "sysfs"}"\n')
    spec = tmp_path / "spec.toml"
    spec.write_text("[run]\nruns = 20\nmin_seconds = 0.6\n"
                    "[budgets]\nmax_mean_power_w = 20.0\nmax_energy_mj_per_inference = 50.0\n"
                    "[device]\npower_mode = \"MAXN\"\nclocks_locked = true\nmax_temperature_c = 40.0\n"
                    "[device.runtimes]\njetpack = \">=5.1\"\ncuda = \"==11.4.*\"\n")
    with SimulatedBoard(tmp_path / "sysfs", "jetson-jp5"):
        proc = sdk("validate", example_model, "-b", "simjet", "--data", example_eval, "--limit", "50",
                   "--spec", spec, "--json", tmp_path / "r.json", "--report", tmp_path / "r.html", "-q",
                   env={"EDGESDK_BOARDS_PATH": str(boards)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["boards"][0]["checks"]}
    assert checks["power.mean"]["verdict"] == "pass" and 0 < checks["power.mean"]["measured"] < 20
    assert checks["energy.per_inference"]["verdict"] == "pass"
    assert checks["device.clocks_locked"]["verdict"] == "pass"
    assert checks["runtime.jetpack"]["verdict"] == "pass" and checks["runtime.cuda"]["verdict"] == "pass"
    # the simulated board is in mode 10W and its CPU zone reads 41.5 C: both conditions fail, named
    assert checks["device.power_mode"]["verdict"] == "fail" and checks["device.power_mode"]["measured"] == "10W"
    assert checks["device.temperature"]["verdict"] == "fail" and checks["device.temperature"]["measured"] == 41.5
    assert "FAIL simjet: device.power_mode" in proc.stdout and "FAIL simjet: device.temperature" in proc.stdout
    html = (tmp_path / "r.html").read_text()
    assert "ina3221-hwmon" in html and "Power trace" in html


def _tflite_available() -> bool:
    from sdk.errors import EdgeSDKError
    from sdk.targets import target_class

    try:
        return target_class("tflite").availability().available
    except EdgeSDKError:
        return False


@tiers.needs("tflite", _tflite_available(), "needs the tflite target (pip install 'edgesdk[tflite]')")
def test_tflite_model_against_its_onnx_reference(example_eval, tmp_path):
    """A converted model (.tflite, NHWC, output 'output_0') on the board, the FP32 ONNX original
    as the reference: outputs are matched by position and compared."""
    data = ROOT / "tests" / "data"
    d = np.load(example_eval)
    np.savez(tmp_path / "nhwc.npz", image=d["x"][:80].transpose(0, 2, 3, 1).copy(), y=d["y"][:80])
    spec = tmp_path / "s.toml"
    spec.write_text('[run]\ntarget = "tflite"\nruns = 20\nmin_seconds = 0.05\n'
                    '[budgets]\nmax_top1_drop = 0.01\nmin_cosine = 0.999\n')
    proc = sdk("validate", data / "digits_float.tflite", "-b", "local", "--data", tmp_path / "nhwc.npz",
               "--reference-model", data / "digits_float.onnx", "--spec", spec, "--json", "-", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["reference"]["model"] == "digits_float.onnx"
    assert out["boards"][0]["compare"]["logits"]["cosine"] > 0.9999
    assert out["boards"][0]["benchmark"]["target"] == "tflite"
