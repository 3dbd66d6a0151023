"""The board agent as a board runs it: the zipapp built, then ``python <pyz> <command>`` in a
subprocess with this machine's Python, on the real example model (ONNX Runtime), with power from
a SIMULATED Jetson sysfs tree (sdk.remote.agent.power.simulate) named by the request's
``sysfs_root`` like a board profile does."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests import tiers

from sdk.remote.agent import AGENT_PREFIX, agent_sources, build_zipapp
from sdk.remote.agent.power.simulate import DEFAULT_RAILS, SimulatedBoard


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    return build_zipapp(tmp_path_factory.mktemp("agent"))


def agent(pyz: Path, command: str, request=None, python: list = None, timeout: float = 120):
    """Run the agent; returns (exit code, the ONE JSON document on stdout, stderr)."""
    cmd = (python or [sys.executable]) + [str(pyz), command]
    if request is not None:
        cmd += ["--request", "-"]
    proc = subprocess.run(cmd, input=json.dumps(request) if request is not None else None, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, "stdout must be exactly one JSON document, got:\n" + proc.stdout + proc.stderr
    return proc.returncode, json.loads(lines[0]), proc.stderr


# -- the zipapp ----------------------------------------------------------------------------------------
def test_zipapp_is_content_addressed_and_deterministic(pyz, tmp_path):
    again = build_zipapp(tmp_path)
    assert again.name == pyz.name and again.read_bytes() == pyz.read_bytes()
    import hashlib

    assert pyz.name == AGENT_PREFIX + hashlib.sha256(pyz.read_bytes()).hexdigest()[:12] + ".pyz"
    assert build_zipapp(tmp_path) == again  # already there: left alone


def test_zipapp_holds_the_board_side_and_nothing_host_only(pyz):
    with zipfile.ZipFile(pyz) as zf:
        names = zf.namelist()
        infos = zf.infolist()
        remote_init = zf.read("sdk/remote/__init__.py").decode()
    assert names == sorted(names)
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in infos)
    for must in ("__main__.py", "sdk/__init__.py", "sdk/errors.py", "sdk/tensors.py", "sdk/bench.py", "sdk/data.py",
                 "sdk/probe.py", "sdk/hostinfo.py", "sdk/preprocess.py", "sdk/metrics.py", "sdk/model.py",
                 "sdk/formats/onnx.py", "sdk/targets/base.py", "sdk/targets/registry.py", "sdk/targets/measure.py",
                 "sdk/targets/onnxrt/target.py", "sdk/remote/agent/main.py", "sdk/remote/agent/power/ina3221.py",
                 "sdk/remote/agent/power/simulate.py"):
        assert must in names
    assert not any(n.startswith(("sdk/cli/", "numpy/")) or "__pycache__" in n or n.endswith(".pyc") for n in names)
    assert not any(n.startswith("sdk/remote/") and not n.startswith("sdk/remote/agent/") and n != "sdk/remote/__init__.py"
                   for n in names)
    assert "import" not in remote_init


def test_zipapp_imports_without_host_only_modules(pyz):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import sdk.remote, sdk.remote.agent.main, "
            "sdk.remote.agent.commands, sdk.remote.agent.power; "
            "assert sdk.remote.__file__.startswith(sys.argv[1]), sdk.remote.__file__; "
            "bad = [m for m in ('paramiko', 'onnx', 'onnxruntime', 'typer', 'rich') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code, str(pyz)], check=True, timeout=60)


def test_version_runs_the_bundled_code(pyz):
    rc, doc, _ = agent(pyz, "version")
    assert rc == 0 and doc["numpy"] is True
    assert doc["agent_file"].startswith(str(pyz)), "the zipapp's own sdk must run, not the installed one"


# -- facts -----------------------------------------------------------------------------------------------
def test_facts_on_this_machine(pyz):
    rc, doc, _ = agent(pyz, "facts")
    assert rc == 0, doc
    assert doc["python"] == "%d.%d.%d" % sys.version_info[:3] and doc["numpy"] == np.__version__
    assert doc["runtimes"]["targets"]["onnxruntime"]["available"] is True
    assert doc["runtimes"]["versions"]["onnxruntime"]
    assert {p["sensor"] for p in doc["power_sensors"]} >= {"ina3221-hwmon", "ina3221-iio", "tegrastats", "rapl"}
    assert all(p["found"] or p["why_not"] for p in doc["power_sensors"])
    assert isinstance(doc["temperatures_c"], dict) and "clocks" in doc and "power_mode" in doc


def test_facts_of_a_simulated_jetson(pyz, tmp_path):
    with SimulatedBoard(tmp_path, "jetson-jp5"):
        rc, doc, _ = agent(pyz, "facts", {"sysfs_root": str(tmp_path), "sensors": ["ina3221-hwmon"]})
    assert rc == 0, doc
    assert doc["l4t"] == "35.4.1" and doc["jetpack"] == "5.1.2" and doc["cuda"] == "11.4.315"
    assert doc["power_mode"]["name"] == "10W" and doc["power_mode"]["id"] == 2
    assert doc["clocks"]["locked"] is True and doc["clocks"]["gpu_devfreq"].endswith("ga10b")
    assert doc["temperatures_c"] == {"CPU-therm": 41.5, "GPU-therm": 39.0}
    assert doc["power_sensors"][0]["found"] and doc["power_sensors"][0]["rails"] == ["VDD_CPU_GPU_CV", "VDD_IN", "VDD_SOC"]


# -- bench -----------------------------------------------------------------------------------------------
def test_bench_with_simulated_power(pyz, tmp_path, example_model, example_eval):
    x = np.load(example_eval)["x"][:1]
    np.save(tmp_path / "one.npy", x)
    sysfs = tmp_path / "board"
    request = {"model_path": str(example_model), "target": "onnxruntime", "target_options": {"threads": 1},
               "precision": "fp16", "data_path": str(tmp_path / "one.npy"), "runs": 50, "warmup": 5,
               "min_seconds": 0.8, "idle_seconds": 0.6,
               "power": {"sensors": ["ina3221-hwmon", "tegrastats"], "sysfs_root": str(sysfs), "rate_hz": 50}}
    with SimulatedBoard(sysfs, "jetson-jp5", update_hz=200) as sim:
        rc, doc, err = agent(pyz, "bench", request)
    assert rc == 0, (doc, err)
    lat = doc["latency_ms"]
    assert lat["count"] >= 50 and 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert doc["throughput_ips"] > 0 and doc["target"] == "onnxruntime" and doc["runtime"]["options"]["threads"] == 1
    assert doc["model"]["sha256"] == __import__("hashlib").sha256(example_model.read_bytes()).hexdigest()
    assert doc["precision"] == {"requested": "fp16", "applied_as_option": False,
                                "note": "target 'onnxruntime' has no precision option: the model ran as stored"}
    begin, end = doc["window"]["begin_s"], doc["window"]["end_s"]
    ib, ie = doc["window"]["idle_begin_s"], doc["window"]["idle_end_s"]
    assert ib < ie <= begin < end
    power = doc["power"]
    assert power["source"] == "ina3221-hwmon" and power["measures"] == "module input rail VDD_IN"
    assert set(power["rails"]) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}
    # the same clock in two processes: the known input over the agent's own window
    rail, slack = DEFAULT_RAILS[0], 0.1  # W: edges (<= 2 gaps of ~20 ms at 2 W deviation) + staleness + 5 mW steps
    assert power["mean_w"] == pytest.approx(sim.energy_j("VDD_IN", begin, end) / (end - begin), abs=slack + 4 * rail.amp_w * 0.05 / (end - begin))
    assert power["idle_w"] == pytest.approx(sim.energy_j("VDD_IN", ib, ie) / (ie - ib), abs=slack + 4 * rail.amp_w * 0.05 / (ie - ib))
    assert power["samples"] >= 20 and power["rate_hz"] > 10
    energy = doc["energy_mj_per_inference"]
    assert energy["total"] == pytest.approx(power["mean_w"] * (end - begin) / lat["count"] * 1e3)
    assert energy["above_idle"] == pytest.approx((power["mean_w"] - power["idle_w"]) * (end - begin) / lat["count"] * 1e3)
    dev = doc["device"]
    assert dev["l4t"] == "35.4.1" and dev["temperatures_before_c"]["CPU-therm"] == 41.5
    assert dev["temperatures_after_c"]["GPU-therm"] == 39.0


def test_bench_samples_and_power_trace(pyz, tmp_path, example_model):
    """With ``samples``: the latency samples in run order (strided to ``max_samples``) and the
    power trace on the window's clock, whose in-window points average to about ``mean_w``."""
    sysfs = tmp_path / "board"
    request = {"model_path": str(example_model), "target": "onnxruntime", "input_shapes": {"image": [1, 1, 8, 8]},
               "runs": 300, "warmup": 2, "min_seconds": 0.6, "idle_seconds": 0.3, "samples": True, "max_samples": 100,
               "power": {"sensors": ["ina3221-hwmon"], "sysfs_root": str(sysfs), "rate_hz": 50}}
    with SimulatedBoard(sysfs, "jetson-jp5", update_hz=200):
        rc, doc, err = agent(pyz, "bench", request)
    assert rc == 0, (doc, err)
    count, stride = doc["latency_ms"]["count"], doc["samples_stride"]
    assert stride == -(-count // 100) and len(doc["samples_ms"]) == len(range(0, count, stride))
    assert min(doc["samples_ms"]) >= doc["latency_ms"]["min"] and max(doc["samples_ms"]) <= doc["latency_ms"]["max"]
    trace = doc["power"]["trace"]
    begin, end = doc["window"]["begin_s"], doc["window"]["end_s"]
    inside = [w for t, w in trace if begin < t < end]
    assert any(t < doc["window"]["idle_end_s"] for t, _ in trace) and len(inside) >= 10
    assert sum(inside) / len(inside) == pytest.approx(doc["power"]["mean_w"], rel=0.1)


def test_bench_without_a_sensor_reports_null_with_the_reason(pyz, tmp_path, example_model):
    request = {"model_path": str(example_model), "input_shapes": {"image": [1, 1, 8, 8]}, "runs": 20, "warmup": 2,
               "min_seconds": 0.1, "idle_seconds": 0.1,
               "power": {"sensors": ["rapl", "ina3221-hwmon"], "sysfs_root": str(tmp_path / "empty")}}
    rc, doc, _ = agent(pyz, "bench", request)
    assert rc == 0, doc
    assert doc["inputs"] == [{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}]
    assert doc["power"]["mean_w"] is None and doc["power"]["idle_w"] is None and doc["power"]["rails"] is None
    assert "no power sensor found" in doc["power"]["reason"] and "rapl:" in doc["power"]["reason"]
    assert doc["energy_mj_per_inference"] == {"total": None, "above_idle": None, "reason": doc["power"]["reason"]}


# -- infer -----------------------------------------------------------------------------------------------
def test_infer_per_sample_and_one_feed(pyz, tmp_path, example_model, example_eval):
    import onnxruntime as ort

    x = np.load(example_eval)["x"][:5]
    expect = ort.InferenceSession(str(example_model), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.savez(tmp_path / "samples.npz", image=x[:, None])  # leading sample axis: 5 x [1,1,8,8]
    np.savez(tmp_path / "feed.npz", anything=x)  # one feed; a single-input model takes any key
    rc, doc, _ = agent(pyz, "infer", {"model_path": str(example_model), "inputs_npz": str(tmp_path / "samples.npz"),
                                      "outputs_npz": str(tmp_path / "out" / "samples_out.npz")})
    assert rc == 0, doc
    assert doc["samples"] == 5 and doc["batched"] and doc["outputs"] == [{"name": "logits", "shape": [5, 1, 10], "dtype": "float32"}]
    got = np.load(tmp_path / "out" / "samples_out.npz")["logits"]
    np.testing.assert_allclose(got[:, 0], expect, rtol=1e-5, atol=1e-5)
    rc, doc, _ = agent(pyz, "infer", {"model_path": str(example_model), "inputs_npz": str(tmp_path / "feed.npz"),
                                      "outputs_npz": str(tmp_path / "feed_out.npz")})
    assert rc == 0 and doc["samples"] == 5 and not doc["batched"]  # rows of the batch axis, run together
    np.testing.assert_allclose(np.load(tmp_path / "feed_out.npz")["logits"], expect, rtol=1e-5, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left


# -- errors ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command,request_,etype,needle", [
    ("bench", {"model_path": "/nonexistent/model.onnx"}, "ModelNotFoundError", "does not exist"),
    ("bench", {"model_path": "x.onnx", "runz": 3}, "ConfigError", "runz"),
    ("bench", {}, "ConfigError", "model_path"),
    ("bench", {"model_path": "PLACEHOLDER", "target": "nope"}, "UnknownTargetError", "nope"),
    ("infer", {"model_path": "PLACEHOLDER", "inputs_npz": "/nonexistent.npz", "outputs_npz": "/tmp/o.npz"},
     "InputError", "does not exist"),
    ("explode", {}, "InputError", "unknown agent command"),
])
def test_errors_are_one_json_document(pyz, example_model, command, request_, etype, needle):
    request_ = {k: (str(example_model) if v == "PLACEHOLDER" else v) for k, v in request_.items()}
    rc, doc, err = agent(pyz, command, request_)
    assert rc == 2
    assert set(doc) == {"error"} and doc["error"]["type"] == etype and needle in doc["error"]["message"] + str(doc["error"]["hint"])
    assert "Traceback" not in json.dumps(doc)


def test_bad_json_request(pyz, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, str(pyz), "bench", "--request", str(bad)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["type"] == "ConfigError"


def test_board_without_numpy_gets_one_clear_error(pyz, example_model):
    # -S: no site-packages, so no numpy (what a bare board Python looks like)
    rc, doc, _ = agent(pyz, "bench", {"model_path": str(example_model)}, python=[sys.executable, "-S"])
    assert rc == 2 and doc["error"]["type"] == "MissingDependencyError" and "numpy" in doc["error"]["message"]
    assert "pip3 install numpy" in doc["error"]["hint"]
    rc, doc, _ = agent(pyz, "facts", python=[sys.executable, "-S"])  # facts still work
    assert rc == 0 and doc["numpy"] is None


# -- Python 3.8 --------------------------------------------------------------------------------------------
VERMIN = shutil.which("vermin")


@pytest.mark.skipif(VERMIN is None, reason="vermin is not installed (pip install vermin)")
def test_board_side_code_runs_on_python_38():
    files = [str(path) for arc, path in agent_sources() if arc.endswith(".py")]
    proc = subprocess.run([VERMIN, "--target=3.8-", "--no-tips", "--violations", *files],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stdout


# -- a real Python 3.8 (JetPack 5's), when one with numpy and onnxruntime is at hand -------------------------
def _python38():
    import os

    for cand in (os.environ.get("EDGESDK_TEST_PY38"), shutil.which("python3.8")):
        if cand and subprocess.run([cand, "-c", "import sys, numpy, onnxruntime; assert sys.version_info[:2] == (3, 8)"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return cand
    return None


PY38 = _python38()


@tiers.needs("py38", PY38 is not None, "no Python 3.8 with numpy and onnxruntime (set EDGESDK_TEST_PY38 to one)")
def test_zipapp_on_python_38(pyz, example_model):
    rc, doc, _ = agent(pyz, "bench", {"model_path": str(example_model), "input_shapes": {"image": [1, 1, 8, 8]},
                                      "runs": 20, "warmup": 2, "min_seconds": 0.1, "idle_seconds": 0.1},
                       python=[PY38])
    assert rc == 0, doc
    assert doc["host"]["python"].startswith("3.8.") and doc["latency_ms"]["count"] >= 20


# -- precision: an option where the target has one, a record elsewhere ---------------------------------------
def test_precision_is_passed_to_targets_that_take_it():
    from sdk.errors import ConfigError
    from sdk.remote.agent.commands import _target
    from sdk.targets import target_class, target_names

    tgt, record = _target({"target": "onnxruntime", "precision": "int8"})
    assert "precision" not in tgt.options and record["applied_as_option"] is False and "as stored" in record["note"]
    with_option = [n for n in target_names() if "precision" in target_class(n).default_options]
    assert with_option, "no registered target has a precision option (the tensorrt target has one)"
    tgt, record = _target({"target": with_option[0], "precision": "fp16"})
    assert tgt.options["precision"] == "fp16" and record == {"requested": "fp16", "applied_as_option": True}
    with pytest.raises(ConfigError, match="contradicts"):
        _target({"target": with_option[0], "precision": "fp16", "target_options": {"precision": "int8"}})
