"""sdk.Model on real ONNX files: load, validate, inspect, transform, hash."""
from __future__ import annotations

import hashlib

import onnx
import pytest

from sdk import Model
from sdk.errors import InputError, InvalidModelError, ModelFormatError, ModelNotFoundError


def test_load_and_specs(conv_model):
    m = Model.load(conv_model)
    assert m.format == "onnx"
    assert [s.name for s in m.inputs] == ["x"]
    assert m.inputs[0].shape == ("N", 3, 16, 16)
    assert m.inputs[0].dtype == "float32"
    assert m.outputs[0].shape == ("N", 10)
    assert m.opset == 13


def test_sha256_is_file_hash(conv_model):
    m = Model.load(conv_model)
    assert m.sha256 == hashlib.sha256(conv_model.read_bytes()).hexdigest()
    assert m.size_bytes == conv_model.stat().st_size


def test_inspect_counts(static_conv_model):
    info = Model.load(static_conv_model).inspect()
    assert info["ops"] == {"Conv": 2, "Relu": 2, "Flatten": 1, "Gemm": 1, "GlobalAveragePool": 1}
    # params: w1 8*3*3*3 + b1 8 + w2 16*8*3*3 + b2 16 + wf 16*10 + bf 10
    assert info["params"] == 216 + 8 + 1152 + 16 + 160 + 10
    assert info["param_bytes"] == info["params"] * 4
    # MACs: conv1 out 8x16x16 * 27 + conv2 out 16x8x8 * 72 + gemm 10*16
    assert info["macs"] == 8 * 16 * 16 * 27 + 16 * 8 * 8 * 72 + 10 * 16
    assert info["macs_unknown_nodes"] == 0
    assert info["opset"] == 13


def test_dynamic_macs_unknown_then_fixed(conv_model):
    m = Model.load(conv_model)
    info = m.inspect()
    assert info["macs"] is None and info["macs_unknown_nodes"] == 3
    fixed = m.with_input_shapes({"x": [2, 3, 16, 16]})
    assert fixed.inputs[0].shape == (2, 3, 16, 16)
    assert fixed.outputs[0].shape == (2, 10)
    assert fixed.inspect()["macs"] == 2 * (8 * 16 * 16 * 27 + 16 * 8 * 8 * 72 + 10 * 16)
    assert fixed.path is None and fixed.sha256 != m.sha256


def test_matmul_macs(fp16_model):
    m = Model.load(fp16_model).with_input_shapes({"B": [4, 8]} if False else {"x": [4, 8]})
    assert m.inspect()["macs"] == 4 * 4 * 8


def test_with_input_shapes_errors(conv_model):
    m = Model.load(conv_model)
    with pytest.raises(InputError, match="no input named 'y'"):
        m.with_input_shapes({"y": [1, 3, 16, 16]})
    with pytest.raises(InputError, match="rank"):
        m.with_input_shapes({"x": [1, 3]})
    with pytest.raises(InputError, match="fixed to 3"):
        m.with_input_shapes({"x": [1, 4, 16, 16]})


def test_with_opset_and_save(conv_model, tmp_path):
    m = Model.load(conv_model)
    up = m.with_opset(17)
    assert up.opset == 17
    saved = up.save(tmp_path / "up.onnx")
    assert saved.path.exists() and Model.load(saved.path).opset == 17
    assert saved.sha256 == up.sha256
    assert m.with_opset(13) is m


def test_simplify(conv_model):
    pytest.importorskip("onnxsim")
    s = Model.load(conv_model).simplify()
    assert s.path is None
    assert s.inspect()["ops"]["Conv"] == 2


def test_missing_file(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        Model.load(tmp_path / "nope.onnx")


def test_not_onnx(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_text("this is not a model\n" * 10)
    with pytest.raises(ModelFormatError):
        Model.load(p)


def test_truncated(conv_model, tmp_path):
    p = tmp_path / "trunc.onnx"
    p.write_bytes(conv_model.read_bytes()[: conv_model.stat().st_size // 2])
    with pytest.raises(ModelFormatError, match="truncated"):
        Model.load(p)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelFormatError):
        Model.load(p)


def test_invalid_graph(tmp_path):
    from onnx import TensorProto, helper

    # A node consumes a tensor nobody produces: parses, but the checker refuses it.
    g = helper.make_graph([helper.make_node("Relu", ["missing"], ["y"])], "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    p = tmp_path / "invalid.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(InvalidModelError, match="not a valid ONNX graph"):
        Model.load(p)


def test_folder_is_not_a_model(tmp_path):
    with pytest.raises(ModelFormatError, match="folder"):
        Model.load(tmp_path)


def test_multi_input_specs(two_input_model):
    m = Model.load(two_input_model)
    assert [(s.name, s.dtype) for s in m.inputs] == [("a", "float32"), ("b", "int64")]


def test_example_model(example_model):
    info = Model.load(example_model).inspect()
    assert info["inputs"][0]["name"] == "image"
    assert info["outputs"][0]["shape"] == ["N", 10]
    assert info["ops"]["Conv"] == 2


def test_from_proto_roundtrip(conv_model):
    proto = onnx.load(str(conv_model))
    m = Model(proto=proto, format="onnx")
    assert m.inputs[0].name == "x"
    assert m.sha256 == hashlib.sha256(proto.SerializeToString()).hexdigest()
