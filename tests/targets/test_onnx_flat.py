"""``sdk convert model.onnx -o flat.onnx --input-value ... --input-shape ...``
(sdk/targets/onnx_flat.py): the specialized model, checked against the original before it is written."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from sdk import corpus
from sdk.errors import ConversionError, InputError
from sdk.model import Model
from sdk.targets.convert import ConvertOptions, convert
from tests.clirun import run_cli
from tests.controlflow import nested_if_model


def _run(path, feeds):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in s.get_inputs()}
    return s.run(None, {k: v for k, v in feeds.items() if k in names})


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    return nested_if_model(tmp_path_factory.mktemp("flat") / "nested.onnx")


def test_cli_writes_the_specialized_model(nested, tmp_path, capsys):
    out, rec = tmp_path / "flat.onnx", tmp_path / "rec.json"
    code, stdout, stderr = run_cli(["convert", nested, "-o", out, "--input-value", "sr=16000",
                                    "--input-shape", "x=3x4", "--json", rec], capsys)
    assert code == 0, stderr
    stdout = " ".join(stdout.split())      # the console folds long lines at its width
    assert f"wrote {out} (onnx" in stdout and "If_rate: the then branch, the one sr=16000 chooses" in stdout
    assert "y: max abs diff 0" in stdout
    flat = onnx.load(str(out))
    onnx.checker.check_model(flat, full_check=True)
    assert not [n for n in flat.graph.node if n.op_type == "If"] and [i.name for i in flat.graph.input] == ["x"]
    doc = json.loads(rec.read_text())
    assert [(r["node"], r["branch"], r["kind"]) for r in doc["details"]["resolved"]] == \
        [("If_rate", "then", "value"), ("If_gain", "then", "value"), ("If_batch1", "else", "shape")]
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for a, b in zip(_run(nested, {"x": x, "sr": np.array(16000)}), _run(out, {"x": x})):
        assert float(np.max(np.abs(a - b))) <= 1e-6
    # the hand count of tests/controlflow.py: 3*32 + 3*48, with no If left to guess
    info = Model.load(out).inspect()
    assert info["macs"] == 240 and not info["macs_partial"]


def test_refusals_leave_nothing(nested, tmp_path, capsys):
    out = tmp_path / "x.onnx"
    code, _, stderr = run_cli(["convert", nested, "-o", tmp_path / "x.ort", "--input-value", "sr=16000"], capsys)
    assert code == 2 and stderr.startswith("error: --input-value does not apply to .ort") and "-o flat.onnx" in stderr
    assert not (tmp_path / "x.ort").exists()   # (.tflite takes the values: tests/targets/test_tflite_convert.py)
    code, _, stderr = run_cli(["convert", nested, "-o", out, "--input-value", "rate=1"], capsys)
    assert code == 2 and "'rate' is not a model input" in stderr
    code, _, stderr = run_cli(["convert", nested, "-o", out, "--option", "tolerance=abc"], capsys)
    assert code == 2 and "bad --option tolerance=abc" in stderr
    code, _, stderr = run_cli(["convert", nested, "-o", out, "--option", "speed=1"], capsys)
    assert code == 2 and "unknown --option speed" in stderr
    assert not out.exists() and len(stderr.strip().splitlines()) == 1


def test_a_specialized_model_that_differs_is_not_written(nested, tmp_path, monkeypatch):
    """Fault injection: the pass's result gets a wrong constant; the output check must catch it."""
    import sdk.formats.onnx_specialize as sp

    real = sp.specialize

    def wrong(*args, **kwargs):
        spec = real(*args, **kwargs)
        for t in spec.proto.graph.initializer:
            if t.name == "two":
                t.CopyFrom(numpy_helper.from_array(np.array(2.5, np.float32), "two"))
        return spec

    monkeypatch.setattr(sp, "specialize", wrong)
    out = tmp_path / "bad.onnx"
    with pytest.raises(ConversionError, match=r"output 'z' of the specialized model differs .* nothing was written"):
        convert(nested, out, ConvertOptions(input_shapes={"x": (1, 4)}, input_values=["sr=16000"]))
    assert not out.exists()
    with pytest.raises(InputError, match="--input-value does not apply to .ort"):
        convert(nested, tmp_path / "m.ort", ConvertOptions(input_values=["sr=16000"]))
    with pytest.raises(ConversionError, match=r"output 'z' of the specialized model differs .* nothing was written"):
        convert(nested, tmp_path / "m.tflite", ConvertOptions(input_shapes={"x": (1, 4)}, input_values=["sr=16000"]))
    assert not (tmp_path / "m.tflite").exists()


def test_silero_flat_model(tmp_path):
    if not corpus.is_fetched("silero-vad"):
        corpus.fetch(["silero-vad"], with_photos=False)
    src, out = corpus.path("silero-vad"), tmp_path / "silero_16k.onnx"
    res = convert(src, out, ConvertOptions(input_shapes={"input": (1, 576), "state": (2, 1, 128)},
                                           input_values={"sr": "16000"}))
    assert res.format == "onnx" and not res.details["unresolved"] and len(res.details["resolved"]) == 7
    for f in corpus.sample_inputs("silero-vad", 3):     # real inputs, the carried state included
        for a, b in zip(_run(src, f), _run(out, f)):
            assert float(np.max(np.abs(a - b))) <= 1e-6
    info = Model.load(out).inspect()
    assert info["macs"] == 679_552 and not info["macs_partial"]   # hand count: tests/sdk/test_specialize.py


def test_float_rewrites_write_the_fp32_graph_the_quantizer_times(tmp_path, capsys):
    """``--option float_rewrites=true``: ppocr-v4-rec with the quantizer's exact float rewrites (28
    affines folded into the conv before, 28 hard-swishes as x*HardSigmoid(x), 12 affines into the
    conv after), checked against the original before it is written; its outputs within 1e-4 on
    corpus lines; a bad value is one error and writes nothing."""
    from tests.sdk.test_onnx_rewrite import CORPUS_REWRITES

    name = "ppocr-v4-rec"
    src = corpus.fetch([name])[name]
    feeds = corpus.sample_inputs(name, 2, seed=4)
    shape = "x".join(str(d) for d in feeds[0]["x"].shape)
    out, rec = tmp_path / "fp32.onnx", tmp_path / "rec.json"
    code, stdout, stderr = run_cli(["convert", src, "-o", out, "--input-shape", f"x={shape}", "--option",
                                    "float_rewrites=true", "--json", rec], capsys)
    assert code == 0, stderr
    assert "float rewrites (exact): affine_folded x28, hardswish_fused x28, affine_folded_forward x12" in \
        " ".join(stdout.split())
    assert json.loads(rec.read_text())["details"]["float_rewrites"] == CORPUS_REWRITES[name]
    written, original = onnx.load(str(out)), onnx.load(str(src))
    assert len(written.graph.node) < len(original.graph.node)
    for feed in feeds:
        for a, b in zip(_run(src, feed), _run(out, feed)):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
    bad = tmp_path / "bad.onnx"
    code, _, stderr = run_cli(["convert", src, "-o", bad, "--input-shape", f"x={shape}", "--option",
                               "float_rewrites=maybe"], capsys)
    assert code == 2 and "bad --option float_rewrites=maybe" in stderr and not bad.exists()
