"""A TFLite model that fails on the shapes it was fed: the error names the input, the node and the
constraint (targets/tflite/diagnose.py), with and without XNNPACK. The models are written here with
the project's own TFLite writer, their image dims dynamic (shape_signature -1)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from sdk.errors import InferenceError, InputError
from sdk.targets import get_target
from sdk.targets.tflite import TFLiteTarget
from sdk.targets.tflite.diagnose import parse_failure
from tests import tiers
from tests.clirun import run_cli

_AVAIL = TFLiteTarget.availability(deep=True)
pytestmark = tiers.needs("tflite", _AVAIL.available, f"no working TFLite runtime: {_AVAIL.reason}")
ANSI = re.compile(r"\x1b\[")


def _write(path, build):
    from sdk.targets.tflite.tflgraph import TFLGraph, write_flatbuffer

    g = TFLGraph()
    build(g)
    path.write_bytes(write_flatbuffer(g))
    return path


def _dynamic(g, name, channels, rank=4, size=1):
    """A tensor allocated at ``size`` x ``size`` whose H and W are set at run time."""
    t = g.add_tensor(name, (1, size, size, channels) if rank == 4 else (1, channels))
    g.tensors[t].shape_signature = (1, -1, -1, channels) if rank == 4 else (1, -1)
    return t


def _conv_opts(padding, stride):
    return dict(padding=padding, strideW=stride, strideH=stride, fusedActivationFunction=0, dilationWFactor=1,
                dilationHFactor=1)


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory):
    """image -> CONV_2D stride 2 (SAME) + AVERAGE_POOL_2D 2x2 stride 2 (VALID) -> ADD: an odd H or W
    gives the two maps different sizes (ceil vs floor), as a feature pyramid's join does."""
    def build(g):
        x = _dynamic(g, "image", 3)
        w = g.const("conv/w", np.random.default_rng(0).random((3, 3, 3, 3)).astype(np.float32))
        b = g.const("conv/b", np.zeros(3, np.float32))
        a, p, s = (_dynamic(g, n, 3) for n in ("conv_out", "pool_out", "sum"))
        g.add_op("CONV_2D", [x, w, b], [a], "Conv2DOptions", **_conv_opts(0, 2))
        g.add_op("AVERAGE_POOL_2D", [x], [p], "Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                 filterHeight=2, fusedActivationFunction=0)
        g.add_op("ADD", [a, p], [s], "AddOptions", fusedActivationFunction=0)
        g.inputs, g.outputs = [x], [s]
    return _write(tmp_path_factory.mktemp("tfl") / "pyramid.tflite", build)


@pytest.fixture(scope="module")
def valid_conv(tmp_path_factory):
    """image -> a 5x5 CONV_2D with VALID padding: an image under 5 pixels has no output."""
    def build(g):
        x = _dynamic(g, "image", 3, size=8)
        w = g.const("conv/w", np.random.default_rng(0).random((4, 5, 5, 3)).astype(np.float32))
        y = _dynamic(g, "conv_out", 4, size=4)
        g.add_op("CONV_2D", [x, w, g.const("conv/b", np.zeros(4, np.float32))], [y], "Conv2DOptions",
                 **_conv_opts(1, 1))
        g.inputs, g.outputs = [x], [y]
    return _write(tmp_path_factory.mktemp("tfl") / "valid.tflite", build)


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """a + b, both [1, -1]: different lengths cannot broadcast, and no graph rule says why."""
    def build(g):
        a, b, s = (_dynamic(g, n, 1, rank=2) for n in ("a", "b", "sum"))
        g.add_op("ADD", [a, b], [s], "AddOptions", fusedActivationFunction=0)
        g.inputs, g.outputs = [a, b], [s]
    return _write(tmp_path_factory.mktemp("tfl") / "add.tflite", build)


@pytest.mark.parametrize("xnnpack", [True, False], ids=["xnnpack", "builtin"])
def test_odd_size_names_the_input_and_the_stride(pyramid, xnnpack):
    with get_target("tflite", xnnpack=xnnpack).open(pyramid) as s:
        assert s.run({"image": np.zeros((1, 64, 64, 3), np.float32)})["sum"].shape == (1, 32, 32, 3)
        with pytest.raises(InputError) as exc:
            s.run({"image": np.zeros((1, 63, 63, 3), np.float32)})
        text = str(exc.value)
        assert "input 'image' has H x W 63 x 63" in text and "multiples of 2, e.g. 64 x 64" in text, text
        assert "ADD" in text and "the runtime said" in (exc.value.hint or ""), (text, exc.value.hint)
        # the session is still good for the shapes the model takes
        assert s.run({"image": np.zeros((1, 32, 32, 3), np.float32)})["sum"].shape == (1, 16, 16, 3)


@pytest.mark.parametrize("xnnpack", [True, False], ids=["xnnpack", "builtin"])
def test_window_longer_than_the_input_names_the_node(valid_conv, xnnpack):
    with get_target("tflite", xnnpack=xnnpack).open(valid_conv) as s:
        with pytest.raises(InputError) as exc:
            s.run({"image": np.zeros((1, 3, 3, 3), np.float32)})
    text = str(exc.value)
    assert "node 0 (CONV_2D, output 'conv_out') has a window of 5 along H but gets 3" in text, text
    assert "input 'image' [1,3,3,3] is too small" in text, text


def test_failure_without_a_rule_names_the_node_and_what_its_inputs_got(two_inputs):
    with get_target("tflite", xnnpack=False).open(two_inputs) as s:
        with pytest.raises(InferenceError) as exc:
            s.run({"a": np.zeros((1, 3), np.float32), "b": np.zeros((1, 4), np.float32)})
    text = str(exc.value)
    assert "node 0 (ADD, output 'sum') (its inputs got [1,3], [1,4]) failed to prepare" in text, text
    assert "not broadcastable" in text and "Node number" not in text, text


def test_cli_is_one_line_exit_2_no_escape_codes(pyramid, capsys):
    code, out, err = run_cli(["bench", pyramid, "-t", "tflite", "--input-shape", "image=1x63x63x3", "--runs", "2",
                              "--warmup", "0", "--min-seconds", "0"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "'image'" in lines[0] and "multiples of 2" in lines[0] and not ANSI.search(out + err)


def test_parse_failure_reads_litert_messages():
    f = parse_failure("tflite/kernels/conv.cc:396 params->stride_height > 0 was not true."
                      "Node number 0 (CONV_2D) failed to prepare.")
    assert (f.index, f.op, f.phase, f.reason, f.delegate) == (0, "CONV_2D", "prepare",
                                                              "params->stride_height > 0 was not true", False)
    f = parse_failure("XNNPack delegate failed to reshape runtimeNode number 3 (TfLiteXNNPackDelegate) failed to "
                      "prepare.")
    assert f.index == 3 and f.delegate and f.reason == "XNNPack delegate failed to reshape runtime"
    assert parse_failure("something else") is None


def test_shapes_the_file_declares_that_fail_name_the_node_at_build(tmp_path):
    """The file allocates its image at 1x1, under the 5x5 VALID window: refused at build, naming the node."""
    from sdk.errors import InvalidModelError

    def build(g):
        x = _dynamic(g, "image", 3)
        w = g.const("conv/w", np.zeros((4, 5, 5, 3), np.float32))
        y = _dynamic(g, "conv_out", 4)
        g.add_op("CONV_2D", [x, w, g.const("conv/b", np.zeros(4, np.float32))], [y], "Conv2DOptions",
                 **_conv_opts(1, 1))
        g.inputs, g.outputs = [x], [y]
    path = _write(tmp_path / "small.tflite", build)
    with pytest.raises(InvalidModelError, match=r"node 0 \(CONV_2D, output 'conv_out'\) failed to prepare"):
        get_target("tflite", xnnpack=False).prepare(path)
