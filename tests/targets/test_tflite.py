"""The ``tflite`` target on the committed models (tests/data/make_tflite.py made them with TensorFlow;
the tests need only ai-edge-litert)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sdk.errors import InferenceError, InputError, InvalidModelError, TargetUnavailableError
from sdk.metrics import cosine_similarity as cosine, max_abs_error
from sdk.model import Model
from sdk.targets import benchmark, get_target, target_class, target_names
from sdk.targets.tflite import TFLiteTarget
from tests import tiers
from tests.clirun import run_cli

DATA = Path(__file__).resolve().parent.parent / "data"
FLOAT = DATA / "digits_float.tflite"
INT8 = DATA / "digits_int8.tflite"
UINT8 = DATA / "digits_uint8.tflite"

_AVAIL = TFLiteTarget.availability(deep=True)
pytestmark = tiers.needs("tflite", _AVAIL.available, f"no working TFLite runtime: {_AVAIL.reason}")


@pytest.fixture(scope="module")
def ref():
    with np.load(DATA / "digits_ref.npz") as z:
        return {k: z[k] for k in z.files}


def _quantize(x, spec):
    scale, zp = spec.quantization
    info = np.iinfo(np.dtype(spec.dtype))
    return np.clip(np.round(x / scale) + zp, info.min, info.max).astype(spec.dtype)


# -- registry and availability ------------------------------------------------------------------------
def test_registered_and_reports_runtime():
    assert "tflite" in target_names()
    assert target_class("tflite") is TFLiteTarget
    cheap = TFLiteTarget.availability()
    assert cheap.available and cheap.details["runtime"] == "ai_edge_litert" and cheap.version
    assert _AVAIL.details["runtime"] == "ai_edge_litert"
    assert _AVAIL.version == cheap.version


def test_describe_has_version_and_options():
    d = get_target("tflite", threads=2).describe()
    assert d["name"] == "tflite" and d["version"] and d["options"]["threads"] == 2


# -- float model --------------------------------------------------------------------------------------
def test_float_model_matches_keras(ref):
    with get_target("tflite").open(FLOAT) as s:
        assert [i.name for i in s.inputs] == ["image"] and [o.name for o in s.outputs] == ["output_0"]
        y = s.run({"image": ref["x"]})["output_0"]
    assert y.shape == (32, 10) and y.dtype == np.float32
    assert max_abs_error(ref["logits"], y) < 1e-4
    assert (y.argmax(1) == ref["y"]).mean() >= 0.95


def test_tflite_and_onnx_twin_agree(ref):
    """Same weights, two backends: the ONNX twin (NHWC in, transposed inside) on onnxruntime and
    the TFLite model on LiteRT give the same logits."""
    x = ref["x"]
    with get_target("tflite").open(FLOAT) as s:
        y_tfl = s.run({"image": x})["output_0"]
    with get_target("onnxruntime").open(DATA / "digits_float.onnx") as s:
        y_onnx = s.run({"image": x})["logits"]
    assert cosine(y_onnx, y_tfl) > 0.99999
    assert max_abs_error(y_onnx, y_tfl) < 1e-4
    # and the int8 model stays close to both
    with get_target("tflite").open(INT8) as s:
        y_q = s.run({"image": x})["output_0"]
    assert cosine(y_onnx, y_q) > 0.99
    assert (y_q.argmax(1) == y_onnx.argmax(1)).mean() >= 0.95


def test_dynamic_batch_resizes_and_reallocates(ref):
    with get_target("tflite").open(FLOAT) as s:
        assert s.inputs[0].shape == (None, 8, 8, 1)
        assert s.default_shapes == {"image": (1, 8, 8, 1)}
        one = s.run({"image": ref["x"][:1]})["output_0"]
        five = s.run({"image": ref["x"][:5]})["output_0"]
        again = s.run({"image": ref["x"][:1]})["output_0"]
    assert one.shape == (1, 10) and five.shape == (5, 10)
    np.testing.assert_allclose(five[:1], one, atol=1e-5)
    np.testing.assert_array_equal(one, again)


def test_runner_sets_and_invokes_only(ref):
    with get_target("tflite").open(FLOAT) as s:
        r3 = s.runner({"image": ref["x"][:3]})
        r1 = s.runner({"image": ref["x"][:1]})
        for _ in range(3):  # alternating shapes: each runner resizes when it must
            r3()
            r1()
        assert s.run({"image": ref["x"][:2]})["output_0"].shape == (2, 10)


# -- quantised I/O ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [INT8, UINT8], ids=["int8", "uint8"])
def test_quantized_io_float_by_default(ref, path):
    raw = Model.load(path).inputs[0]
    with get_target("tflite").open(path) as s:
        spec = s.inputs[0]
        assert spec.dtype == "float32" and spec.quantization == raw.quantization  # what the caller passes
        assert s.outputs[0].dtype == "float32"
        y = s.run({"image": ref["x"]})["output_0"]
    assert y.dtype == np.float32
    assert (y.argmax(1) == ref["y"]).mean() >= 0.95
    out_scale = Model.load(path).outputs[0].quantization[0]
    assert max_abs_error(ref["logits"], y) < 4 * out_scale  # within a few output steps


@pytest.mark.parametrize("path", [INT8, UINT8], ids=["int8", "uint8"])
def test_quantized_io_raw_passes_integers(ref, path):
    with get_target("tflite", quantized_io="raw").open(path) as s:
        spec, out_spec = s.inputs[0], s.outputs[0]
        assert spec.dtype == Model.load(path).inputs[0].dtype and spec.quantization
        xq = _quantize(ref["x"], spec)
        yq = s.run({"image": xq})["output_0"]
        assert yq.dtype == np.dtype(out_spec.dtype)
    with get_target("tflite").open(path) as s:
        y = s.run({"image": ref["x"]})["output_0"]
    scale, zp = out_spec.quantization
    np.testing.assert_allclose((yq.astype(np.float32) - zp) * scale, y, rtol=0, atol=1e-6)


def test_float_mode_refuses_integers_with_a_hint(ref):
    with get_target("tflite").open(INT8) as s:
        with pytest.raises(InputError, match="quantized_io=raw"):
            s.run({"image": ref["x"].astype(np.int8)})


def test_raw_mode_refuses_floats(ref):
    with get_target("tflite", quantized_io="raw").open(INT8) as s:
        with pytest.raises(InputError, match="dtype float32, the model expects int8"):
            s.run({"image": ref["x"]})


# -- signatures ---------------------------------------------------------------------------------------
def test_signature_on_another_subgraph_runs_through_its_runner():
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 3, np.float32)
    with get_target("tflite").open(DATA / "two_signatures.tflite") as s:  # default: the first, "add"
        assert s.signature == "add"
        np.testing.assert_array_equal(s.run({"x": x, "y": y})["sum"], x + y)
    with get_target("tflite", signature="mul").open(DATA / "two_signatures.tflite") as s:
        assert [o.name for o in s.outputs] == ["product"]
        np.testing.assert_array_equal(s.run({"x": x, "y": y})["product"], x * y)
        run = s.runner({"x": x, "y": y})
        run()


def test_unknown_signature_lists_known():
    with pytest.raises(InputError, match="its signatures: add, mul"):
        get_target("tflite", signature="div").prepare(DATA / "two_signatures.tflite")


# -- options ------------------------------------------------------------------------------------------
def test_threads_and_xnnpack_off_give_the_same_answer(ref):
    with get_target("tflite").open(FLOAT) as s:
        base = s.run({"image": ref["x"]})["output_0"]
    for opts in ({"threads": 2}, {"xnnpack": False}, {"xnnpack": "false", "threads": "1"}):
        t = get_target("tflite", **opts)
        art = t.prepare(FLOAT)
        assert art.metadata["xnnpack"] == (opts.get("xnnpack", True) is True)
        with t.open(art) as s:
            np.testing.assert_allclose(s.run({"image": ref["x"]})["output_0"], base, atol=1e-4)


def test_the_artifact_says_what_the_delegates_took():
    """``delegated`` is read from the interpreter's execution plan, not the option asked for: XNNPACK
    on takes nodes of the digits model in partitions, off takes none (all builtin kernels)."""
    on = get_target("tflite").prepare(FLOAT).metadata["delegated"]
    off = get_target("tflite", xnnpack=False).prepare(FLOAT).metadata["delegated"]
    assert 0 < on["nodes"] <= on["of"] and on["partitions"] >= 1, on
    assert off == {"nodes": 0, "of": on["of"], "partitions": 0}, off


@pytest.mark.parametrize("opts,match", [
    ({"threads": 0}, "threads must be >= 1"),
    ({"quantized_io": "int"}, "quantized_io"),
    ({"xnnpack": "maybe"}, "not a boolean"),
    ({"delegate_options": {"a": 1}}, "without a delegate"),
    ({"delegate": "x.so", "delegate_options": "{bad json"}, "not valid JSON"),
    ({"nope": 1}, "has no option 'nope'"),
])
def test_bad_options_are_input_errors(opts, match):
    with pytest.raises(InputError, match=match):
        get_target("tflite", **opts)


def test_artifact_metadata_and_specs():
    t = get_target("tflite", quantized_io="raw")
    art = t.prepare(INT8)
    assert art.target == "tflite" and art.path == INT8
    assert art.metadata["runtime"] == "ai_edge_litert" and art.metadata["signature"] == "serving_default"
    assert art.inputs[0].dtype == "int8"
    with t.open(art) as s:  # reuses the interpreter the build step made
        assert s.inputs == art.inputs
    with t.open(art) as s:  # and builds a fresh one the second time
        assert s.inputs == art.inputs


def test_in_memory_model_runs_from_bytes(ref):
    m = Model(data=FLOAT.read_bytes(), format="tflite")
    with get_target("tflite").open(m) as s:
        assert s.run({"image": ref["x"][:1]})["output_0"].shape == (1, 10)


# -- bad input ----------------------------------------------------------------------------------------
def test_wrong_shape_and_dtype_and_names(ref):
    with get_target("tflite").open(FLOAT) as s:
        with pytest.raises(InputError, match="shape"):
            s.run({"image": np.zeros((1, 9, 8, 1), np.float32)})
        with pytest.raises(InputError, match="dtype float64"):
            s.run({"image": ref["x"].astype(np.float64)})
        with pytest.raises(InputError, match="no array for model input 'image'"):
            s.run({"img": ref["x"]})
        with pytest.raises(InputError, match="not a model input"):
            s.run({"image": ref["x"], "extra": ref["x"]})
    with get_target("tflite", signature="mul").open(DATA / "two_signatures.tflite") as s:
        with pytest.raises(InputError, match="shape"):
            s.run({"x": np.zeros(5, np.float32), "y": np.zeros(5, np.float32)})


def test_run_after_close_is_an_inference_error(ref):
    s = get_target("tflite").open(FLOAT)
    s.close()
    with pytest.raises(InferenceError, match="closed"):
        s.run({"image": ref["x"][:1]})


def test_op_the_runtime_lacks_fails_at_build():
    with pytest.raises(InvalidModelError, match="BesselI0e"):
        get_target("tflite").prepare(DATA / "custom_op.tflite")


def test_onnx_model_is_refused_with_a_pointer():
    with pytest.raises(InputError, match="runs tflite models, not onnx"):
        get_target("tflite").prepare(DATA / "digits_float.onnx")


def test_missing_delegate_library():
    with pytest.raises(TargetUnavailableError, match="cannot load the TFLite delegate '/nonexistent/libedgetpu.so.1'"):
        get_target("tflite", delegate="/nonexistent/libedgetpu.so.1").prepare(FLOAT)


def test_library_that_is_not_a_delegate(tmp_path):
    import ctypes.util

    libm = ctypes.util.find_library("m") or "libm.so.6"
    with pytest.raises(TargetUnavailableError, match="not a TFLite external delegate"):
        get_target("tflite", delegate=libm, delegate_options='{"device": ":0"}').prepare(FLOAT)


# -- benchmark and CLI --------------------------------------------------------------------------------
def test_benchmark_json_matches_the_onnx_path():
    r = benchmark(INT8, "tflite", runs=20, warmup=2, min_seconds=0.0)
    d = r.to_dict()
    assert d["target"] == "tflite" and d["latency_ms"]["count"] >= 20
    assert d["runtime"]["runtime"] == "ai_edge_litert" and d["runtime"]["quantized_io"] == "float"
    assert d["inputs"][0]["shape"] == [1, 8, 8, 1] and d["model"]["format"] == "tflite"
    onnx = benchmark(DATA / "digits_float.onnx", "onnxruntime", input_shapes={"image": (1, 8, 8, 1)},
                     runs=5, warmup=1, min_seconds=0.0).to_dict()
    assert set(onnx["latency_ms"]) == set(d["latency_ms"]) and set(onnx) == set(d)


def test_benchmark_with_shape_and_real_data(tmp_path, ref):
    r = benchmark(FLOAT, "tflite", input_shapes={"image": (4, 8, 8, 1)}, runs=5, warmup=1, min_seconds=0.0)
    assert r.inputs[0]["shape"] == [4, 8, 8, 1]
    data = tmp_path / "x.npy"
    np.save(data, ref["x"][:2])
    r = benchmark(FLOAT, "tflite", data=str(data), runs=5, warmup=1, min_seconds=0.0)
    assert r.stats.count >= 5


def test_cli_bench_tflite_json(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    code, out, err = run_cli(["bench", INT8, "--target", "tflite", "--runs", "5", "--warmup", "1",
                           "--min-seconds", "0", "--threads", "1", "-o", "xnnpack=false",
                           "-o", "quantized_io=raw", "--json", out_json], capsys)
    assert code == 0, err
    d = json.loads(out_json.read_text())
    assert d["target"] == "tflite" and d["runtime"]["threads"] == 1 and d["runtime"]["xnnpack"] is False
    assert d["inputs"][0]["dtype"] == "int8"


def _one_error_line(code, err):
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("make,args,match", [
    (lambda p: p.write_text("not a model"), [], "no TFL3 identifier"),
    (lambda p: p.write_bytes(FLOAT.read_bytes()[:5000]), [], "truncated or corrupt"),
    (lambda p: p.write_bytes((DATA / "custom_op.tflite").read_bytes()), [], "BesselI0e"),
    (lambda p: p.write_bytes(FLOAT.read_bytes()),
     ["-o", "delegate=/nonexistent/libedgetpu.so.1", "-o", 'delegate_options={"device": "usb"}'],
     "cannot load the TFLite delegate"),
    (lambda p: p.write_bytes(FLOAT.read_bytes()), ["--input-shape", "image=1x9x8x1"], "dim 1 is fixed to 8"),
    (lambda p: p.write_bytes(FLOAT.read_bytes()), ["--input-shape", "x=1x8x8x1"], "no input named 'x'"),
    (lambda p: p.write_bytes(FLOAT.read_bytes()), ["-o", "quantized_io=int8"], "quantized_io"),
], ids=["not-flatbuffer", "truncated", "missing-op", "delegate", "shape", "name", "option"])
def test_cli_bad_input_is_one_line(tmp_path, capsys, make, args, match):
    p = tmp_path / "m.tflite"
    make(p)
    code, out, err = run_cli(["bench", p, "-t", "tflite", "--runs", "2", "--warmup", "0", "--min-seconds", "0", *args],
                          capsys)
    assert match in _one_error_line(code, err)


@pytest.mark.parametrize("arr,match", [
    (np.zeros((1, 8, 8, 1), np.float64), "dtype float64"),
    (np.zeros((1, 8, 9, 1), np.float32), "shape"),
], ids=["dtype", "shape"])
def test_cli_bad_data_file_is_one_line(tmp_path, capsys, arr, match):
    data = tmp_path / "bad.npy"
    np.save(data, arr)
    code, _, err = run_cli(["bench", FLOAT, "-t", "tflite", "--data", data, "--runs", "2", "--min-seconds", "0"], capsys)
    assert match in _one_error_line(code, err)


def test_cli_targets_lists_tflite_runtime(capsys):
    code, out, err = run_cli(["targets", "--json"], capsys)
    assert code == 0, err
    row = next(r for r in json.loads(out) if r["name"] == "tflite")
    assert row["available"] and row["details"]["runtime"] == "ai_edge_litert"
