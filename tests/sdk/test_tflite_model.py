"""The TFLite model handler on the committed models (tests/data/make_tflite.py made them)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdk.errors import ModelFormatError, UnsupportedModelError
from sdk.model import Model
from sdk.targets.tflite import TFLiteTarget
from tests import tiers
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent.parent / "data"

_AVAIL = TFLiteTarget.availability(deep=True)
pytestmark = tiers.needs("tflite", _AVAIL.available, f"no working TFLite runtime: {_AVAIL.reason}")


def test_float_model_inputs_outputs_use_signature_names():
    m = Model.load(DATA / "digits_float.tflite")
    assert m.format == "tflite"
    (x,) = m.inputs
    (y,) = m.outputs
    assert (x.name, x.shape, x.dtype, x.quantization) == ("image", (None, 8, 8, 1), "float32", None)
    assert (y.name, y.shape, y.dtype) == ("output_0", (None, 10), "float32")


def test_int8_model_carries_scale_and_zero_point():
    m = Model.load(DATA / "digits_int8.tflite")
    (x,) = m.inputs
    (y,) = m.outputs
    assert x.dtype == "int8" and y.dtype == "int8"
    scale, zp = x.quantization
    assert scale == pytest.approx(1 / 255, rel=1e-5) and zp == -128  # pixels in [0, 1]
    assert y.quantization[0] > 0


def test_inspect_reports_ops_params_macs_and_tensors():
    info = Model.load(DATA / "digits_float.tflite").inspect()
    assert info["format"] == "tflite"
    assert info["size_bytes"] == (DATA / "digits_float.tflite").stat().st_size
    assert info["ops"]["CONV_2D"] == 2 and info["ops"]["FULLY_CONNECTED"] == 1
    assert info["op_list"][:2] == ["CONV_2D", "CONV_2D"]
    # conv1 16*(3*3*1)+16, conv2 32*(3*3*16)+32, dense 10*512+10, plus 3 int32 shape constants
    assert info["params"] == 160 + 4640 + 5130 + 3
    # MACs at batch 1: 8*8*16*9 + 4*4*32*144 + 10*512
    assert info["macs"] == 9216 + 73728 + 5120
    assert info["signatures"] == {"serving_default": {"inputs": ["image"], "outputs": ["output_0"]}}
    assert info["quantized"] is False
    names = {t["name"] for t in info["tensors"]}
    assert "serving_default_image:0" in names
    json.dumps(info)  # JSON-ready


def test_inspect_int8_lists_per_axis_weight_quantization():
    info = Model.load(DATA / "digits_int8.tflite").inspect()
    assert info["quantized"] is True
    assert info["inputs"][0]["quantization"]["zero_point"] == -128
    per_axis = [t for t in info["tensors"] if t.get("quantization") and len(t["quantization"]["scales"]) > 1]
    assert per_axis, "conv weights are quantised per output channel"
    assert all(z == 0 for t in per_axis for z in t["quantization"]["zero_points"])  # symmetric weights
    assert info["param_bytes"] < Model.load(DATA / "digits_float.tflite").inspect()["param_bytes"] / 3


def test_multi_signature_model_lists_each_signature():
    info = Model.load(DATA / "two_signatures.tflite").inspect()
    assert set(info["signatures"]) == {"add", "mul"}
    assert info["subgraphs"] == 2


def test_model_with_custom_op_can_still_be_inspected():
    info = Model.load(DATA / "custom_op.tflite").inspect()
    assert info["ops"] == {"BesselI0e": 1}


def test_truncated_model_is_a_clear_format_error(tmp_path):
    bad = tmp_path / "trunc.tflite"
    bad.write_bytes((DATA / "digits_float.tflite").read_bytes()[:4000])
    with pytest.raises(ModelFormatError, match="truncated or corrupt"):
        Model.load(bad)


def test_not_a_flatbuffer_is_a_clear_format_error(tmp_path):
    bad = tmp_path / "text.tflite"
    bad.write_text("this is not a model\n")
    with pytest.raises(ModelFormatError, match="no TFL3 identifier"):
        Model.load(bad)


def test_content_detection_without_suffix(tmp_path):
    p = tmp_path / "model.bin"
    p.write_bytes((DATA / "digits_int8.tflite").read_bytes())
    assert Model.load(p).format == "tflite"


def test_onnx_only_transforms_say_so():
    with pytest.raises(UnsupportedModelError):
        Model.load(DATA / "digits_float.tflite").simplify()


def test_cli_inspect_json(capsys):
    code, out, err = run_cli(["inspect", str(DATA / "digits_int8.tflite"), "--json", "-"], capsys)
    assert code == 0, err
    info = json.loads(out)
    assert info["format"] == "tflite" and info["inputs"][0]["dtype"] == "int8"


def test_cli_inspect_table(capsys):
    code, out, err = run_cli(["inspect", str(DATA / "digits_int8.tflite")], capsys)
    assert code == 0, err
    assert "CONV_2D" in out and "-128" in out


def test_cli_inspect_truncated_is_one_line(tmp_path, capsys):
    bad = tmp_path / "trunc.tflite"
    bad.write_bytes((DATA / "digits_float.tflite").read_bytes()[:4000])
    code, out, err = run_cli(["inspect", str(bad)], capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "truncated" in lines[0] and "Traceback" not in err
