"""Every corpus model through ``sdk inspect``, ``sdk bench``, ``sdk push --board local`` and
``sdk validate --board local`` with no flags beyond the input shapes its dynamic inputs need."""
from __future__ import annotations

import json

import pytest

from tests.realmodels.tier import model_params, record, require_corpus, sdk

pytestmark = pytest.mark.realmodels

# few, short runs: the tier measures that the door opens, benchmarks/ measure speed
FAST = ["--runs", "3", "--warmup", "1", "--min-seconds", "0"]


@pytest.mark.parametrize("model", model_params())
def test_inspect(model, board_env, tmp_path):
    require_corpus()
    out = tmp_path / "inspect.json"
    proc = sdk(board_env, "inspect", model.path, *model.shape_flags, "--json", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(out.read_text())
    assert info["format"] == model.format and info["inputs"] and info["outputs"]
    assert info["params"] > 10_000, "a pretrained model has weights (initializers or Constant nodes)"
    assert info["macs"] and info["macs"] > 100_000, (info.get("macs_unknown_nodes"), info.get("macs_notes"))
    # the table on the terminal says the same
    table = sdk(board_env, "inspect", model.path, *model.shape_flags)
    assert table.returncode == 0 and f"params: {info['params']:,}" in table.stdout
    macs = f"{info['macs']:,} (partial)" if info["macs_partial"] else info["macs"]
    record(model.name, inspect="pass", params=info["params"], MACs=macs)


@pytest.mark.parametrize("model", model_params())
def test_bench(model, board_env, tmp_path):
    require_corpus()
    out = tmp_path / "bench.json"
    proc = sdk(board_env, "bench", model.path, *model.shape_flags, *FAST, "--json", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "INFO: Created" not in proc.stderr, "the runtime's log lines stay off the terminal"
    res = json.loads(out.read_text())
    assert res["target"] == ("tflite" if model.format == "tflite" else "onnxruntime")  # from the format
    assert res["latency_ms"]["count"] >= 3 and res["latency_ms"]["p50"] > 0
    record(model.name, bench="pass", **{"p50 ms": res["latency_ms"]["p50"]})


@pytest.mark.parametrize("model", model_params())
def test_push_local(model, board_env, tmp_path):
    require_corpus()
    out = tmp_path / "push.json"
    proc = sdk(board_env, "push", model.path, "--board", "local", *model.shape_flags, *FAST,
               "--idle-seconds", "0", "--json", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (res,) = json.loads(out.read_text())
    assert res["model"]["sha256"] and res["latency_ms"]["p50"] > 0
    assert res["target"] == ("tflite" if model.format == "tflite" else "onnxruntime")
    record(model.name, **{"push local": "pass"})


@pytest.mark.parametrize("model", model_params())
def test_validate_local(model, board_env, tmp_path):
    require_corpus()
    out = tmp_path / "validate.json"
    proc = sdk(board_env, "validate", model.path, "--board", "local", *model.shape_flags, "--json", out, "-q")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["verdict"] == "pass" and res["budgets_checked"] == 0
    assert "no budget was checked" in proc.stdout  # never a bare "every check passed" without a spec
    assert res["reference"]["target"] == ("tflite" if model.format == "tflite" else "onnxruntime")
    (board,) = res["boards"]
    assert board["error"] is None and all(m["cosine"] > 0.9999 for m in board["compare"].values())
    record(model.name, **{"validate local": "pass"})
