"""The `sdk` command: inspect, bench, targets, errors as one line, `python -m sdk`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def sdk(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"sdk {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_help_lists_commands():
    out = sdk("--help").stdout
    for cmd in ("inspect", "bench", "targets"):
        assert cmd in out


def test_inspect_json(example_model):
    info = json.loads(sdk("inspect", example_model, "--json", "-").stdout)
    assert info["inputs"][0]["name"] == "image" and info["format"] == "onnx"
    assert info["macs"] is None  # dynamic batch
    fixed = json.loads(sdk("inspect", example_model, "--json", "-", "--input-shape", "image=1x1x8x8").stdout)
    assert fixed["macs"] == 8 * 8 * 8 * 9 + 16 * 4 * 4 * 72 + 256 * 10


def test_inspect_table(example_model):
    out = sdk("inspect", example_model).stdout
    assert "image" in out and "Conv" in out and "logits" in out


def test_bench_json_file(example_model, tmp_path):
    out = tmp_path / "r" / "res.json"
    out.parent.mkdir()                   # sdk creates no folder the user did not ask for
    sdk("bench", example_model, "--input-shape", "image=1x1x8x8", "--runs", "20", "--warmup", "2",
        "--min-seconds", "0", "--threads", "1", "--json", out)
    res = json.loads(out.read_text())
    assert set(res["latency_ms"]) == {"count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max", "ci95", "noise"}
    assert res["latency_ms"]["count"] >= 20 and res["throughput_ips"] > 0
    assert res["target"] == "onnxruntime" and len(res["model"]["sha256"]) == 64
    assert res["host"]["cpu"] and res["host"]["os"] and res["host"]["runtimes"]["onnxruntime"]
    assert res["runtime"]["options"]["threads"] == 1


def test_bench_stdout_json_with_data(example_model, example_eval, tmp_path):
    import numpy as np

    np.savez(tmp_path / "one.npz", image=np.load(example_eval)["x"][:1])
    res = json.loads(sdk("bench", example_model, "--data", tmp_path / "one.npz", "--runs", "5", "--min-seconds", "0",
                         "--json", "-").stdout)
    assert res["settings"]["data"].endswith("one.npz")


def test_targets_table_and_json():
    assert "onnxruntime" in sdk("targets").stdout
    rows = json.loads(sdk("targets", "--json").stdout)
    ort = next(r for r in rows if r["name"] == "onnxruntime")
    assert ort["available"] and ort["version"]


@pytest.mark.parametrize("args, message", [
    (["inspect", "missing.onnx"], "does not exist"),
    (["bench", "{model}", "--target", "nosuch"], "unknown target 'nosuch' (known targets:"),
    (["bench", "{model}", "--input-shape", "image=1xax8"], "bad shape '1xax8'"),
    (["bench", "{model}", "--input-shape", "nope=1x1x8x8"], "no input named 'nope'"),
    (["bench", "{model}"], "dynamic shape"),
    (["bench", "{model}", "--input-shape", "image"], "bad --input-shape 'image'"),
])
def test_errors_are_one_line(example_model, args, message):
    proc = sdk(*[a.format(model=example_model) for a in args], check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_wrong_dtype_in_npz(example_model, tmp_path):
    import numpy as np

    np.savez(tmp_path / "bad.npz", image=np.ones((1, 1, 8, 8), np.float64))
    proc = sdk("bench", example_model, "--data", tmp_path / "bad.npz", check=False)
    assert proc.returncode == 2 and "has dtype float64, the model expects float32" in proc.stderr


def test_not_onnx_and_truncated(example_model, tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("hello")
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(example_model.read_bytes()[:4000])
    for path in (bad, trunc):
        proc = sdk("inspect", path, check=False)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_debug_shows_traceback():
    proc = sdk("--debug", "inspect", "missing.onnx", check=False)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_version():
    assert sdk("--version").stdout.startswith("edgesdk ")
