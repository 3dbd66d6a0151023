"""`sdk debug diff`'s ONNX Runtime sessions: the reference is made on a thread beside the candidate, the
candidate's unexposed run checks on a thread whether exposing tensors moved its outputs, neither spins
between runs, and a failure on either side ends both threads before one clear error leaves."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.debug import diff
from sdk.errors import InputError
from sdk.quantize.accuracy import ort_session


def _conv_bn(path, rng):
    """Conv -> BatchNormalization: ONNX Runtime folds the BN into the conv unless the conv's output is exposed."""
    arrays = {"w": rng.normal(size=(16, 8, 3, 3)), "b": rng.normal(size=16), "scale": rng.uniform(0.5, 2, 16),
              "bias": rng.normal(size=16), "mean": rng.normal(size=16), "var": rng.uniform(0.5, 2, 16)}
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], name="bn")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return model


def test_exposing_a_fused_tensor_is_noted_after_the_last_sample(tmp_path):
    rng = np.random.default_rng(0)
    _conv_bn(tmp_path / "m.onnx", rng)
    feeds = [{"x": rng.normal(size=(1, 8, 32, 32)).astype(np.float32)} for _ in range(3)]
    report = diff(tmp_path / "m.onnx", tmp_path / "m.onnx", feeds, added_error_samples=0)
    assert [x.tensor for x in report.layers] == ["c", "y"]
    assert all(x.max_abs_error == 0 for x in report.layers)  # both sides expose the same tensors
    assert any("exposing the intermediate tensors moved the candidate's outputs" in n for n in report.notes), report.notes


def test_a_reference_onnxruntime_refuses_is_one_error_naming_it(tmp_path):
    rng = np.random.default_rng(1)
    model = _conv_bn(tmp_path / "good.onnx", rng)
    model.graph.node[1].op_type, model.graph.node[1].domain = "Frobnicate", "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    feeds = [{"x": rng.normal(size=(1, 8, 32, 32)).astype(np.float32)}]
    with pytest.raises(InputError, match="cannot load the reference 'bad.onnx'.*Frobnicate"):
        diff(tmp_path / "bad.onnx", tmp_path / "good.onnx", feeds, added_error_samples=0)
    # in a process of its own: it ends with the error, not aborted by a thread still inside ONNX Runtime
    done = subprocess.run([sys.executable, "-m", "sdk", "debug", "diff", str(tmp_path / "bad.onnx"), "--against",
                           str(tmp_path / "good.onnx"), "--samples", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode not in (0, -6, 134), done
    assert "Traceback" not in done.stderr and "terminate called" not in done.stderr, done.stderr
    assert "cannot load the reference 'bad.onnx'" in done.stderr


def test_diff_sessions_do_not_spin_and_others_keep_the_default(tmp_path):
    _conv_bn(tmp_path / "m.onnx", np.random.default_rng(2))
    key = "session.intra_op.allow_spinning"
    quiet = ort_session(str(tmp_path / "m.onnx"), spinning=False).get_session_options()
    assert quiet.get_session_config_entry(key) == "0"
    default = ort_session(str(tmp_path / "m.onnx")).get_session_options()
    with pytest.raises(Exception, match="allow_spinning"):  # never set: ONNX Runtime's default (spinning)
        default.get_session_config_entry(key)
