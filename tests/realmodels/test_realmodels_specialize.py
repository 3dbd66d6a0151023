"""Every ONNX corpus model through ``sdk convert -o flat.onnx`` with its tier shapes and values: the
specialized model is written (its outputs were checked against the original's on onnxruntime),
passes onnx.checker, has no If left, and counts the MACs that the original counts with the same
flags (for silero-vad: the 7 Ifs the value and the shapes decide, 679,552 MACs)."""
from __future__ import annotations

import json

import onnx
import pytest

from tests.realmodels.tier import model_params, require_corpus, sdk

pytestmark = pytest.mark.realmodels


ONNX_MODELS = [p for p in model_params() if p.values[0] is None or p.values[0].format == "onnx"]


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_convert_to_a_flat_onnx(model, board_env, tmp_path):
    require_corpus()
    out, rec = tmp_path / "flat.onnx", tmp_path / "convert.json"
    proc = sdk(board_env, "convert", model.path, "-o", out, *model.shape_flags, "--json", rec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    flat = onnx.load(str(out))
    onnx.checker.check_model(flat, full_check=True)
    doc = json.loads(rec.read_text())
    assert doc["details"]["check"] and all("max abs diff" in line for line in doc["details"]["check"])
    assert not any(n.op_type == "If" for n in flat.graph.node) or doc["details"]["unresolved"]
    a, b = tmp_path / "orig.json", tmp_path / "flat.json"
    assert sdk(board_env, "inspect", model.path, *model.shape_flags, "--json", a).returncode == 0
    assert sdk(board_env, "inspect", out, "--json", b).returncode == 0
    orig, special = json.loads(a.read_text()), json.loads(b.read_text())
    assert special["macs"] == orig["macs"] and special["macs_partial"] == orig["macs_partial"]
