"""The one streamed FP32 pass: shards across processes merge exactly, NaN/Inf is an error, and
peak memory does not grow with the number of samples."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sdk.errors import QuantizationError
from sdk.model import Model
from sdk.quantize.calibrate import calibrate, calibration_tensors
from sdk.sources import open_source


def test_tensors_exposed(residual_model):
    plan = calibration_tensors(Model.load(residual_model).proto)
    assert plan["tensors"][0] == "x" and "logits" in plan["tensors"]
    assert "x" in plan["channels"]  # first Conv's input keeps channel means


def test_workers_merge_equals_single_process(residual_model, residual_calib):
    m = Model.load(residual_model)
    calls = []
    one = calibrate(m, open_source(residual_calib, m.inputs).samples(), workers=1, batch_size=4,
                    progress=lambda d, t: calls.append(d))
    two = calibrate(m, open_source(residual_calib, m.inputs).samples(), workers=2, batch_size=4)
    assert one.samples == two.samples == 48 and calls[-1] == 48
    for name in one.names:
        a, b = one[name], two[name]
        np.testing.assert_array_equal(a.hist, b.hist)
        assert (a.min, a.max, a.width, a.count) == (b.min, b.max, b.width, b.count)
    # batching does not change the statistics either
    per_sample = calibrate(m, open_source(residual_calib, m.inputs).samples(), workers=1, batch_size=1)
    for name in one.names:
        np.testing.assert_array_equal(one[name].hist, per_sample[name].hist)


def test_nan_activations_are_an_error(residual_model, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 3, 12, 12)).astype(np.float32)
    x[2, 0, 0, 0] = np.nan
    np.savez(tmp_path / "nan.npz", x=x)
    m = Model.load(residual_model)
    with pytest.raises(QuantizationError, match="NaN or Inf in the activations"):
        calibrate(m, open_source(tmp_path / "nan.npz", m.inputs).samples(), workers=1)


def test_no_samples_is_an_error(residual_model):
    m = Model.load(residual_model)
    with pytest.raises(QuantizationError, match="no calibration sample"):
        calibrate(m, iter([]), workers=1)


_PROBE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from sdk.model import Model
    from sdk.quantize.calibrate import calibrate
    n = int(sys.argv[2])
    m = Model.load(sys.argv[1])
    def samples():  # generated one at a time: only the calibration's own memory can grow
        rng = np.random.default_rng(0)
        for _ in range(n):
            yield {"x": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}, None
    st = calibrate(m, samples(), workers=1, batch_size=4)
    assert st.samples == n
    print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
""")


def test_memory_does_not_grow_with_samples(tmp_path):
    """Peak RSS with 400 samples stays within a few MB of the peak with 20 (the intermediates of one
    batch are ~10 MB; keeping every sample's outputs, as onnxruntime's calibrators do, would add
    ~450 MB)."""
    from tests.quantize import qmodels

    g = qmodels.G(0)
    h = g.op("Relu", [g.conv("x", 3, 16)])
    h = g.op("Relu", [g.conv(h, 16, 16)])
    out = g.gemm_head(h, 16)
    model = g.save(tmp_path / "m64.onnx", ["N", 3, 64, 64], out, ["N", 10])
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)

    def peak(n):
        r = subprocess.run([sys.executable, str(script), str(model), str(n)], capture_output=True, text=True, check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])["maxrss_kb"] / 1024.0

    small, large = peak(20), peak(400)
    assert large - small < 25, (small, large)


_BAD_SAMPLE = textwrap.dedent("""
    import sys
    import numpy as np
    from sdk.errors import InputError
    from sdk.model import Model
    from sdk.quantize.calibrate import calibrate
    from sdk.sources import IterableSource
    m = Model.load(sys.argv[1])
    good = [{"x": np.zeros((1, 3, 256, 256), np.float32)} for _ in range(40)]
    src = IterableSource(good + [{"x": np.zeros((1, 3, 256, 256), np.float64)}], m.inputs)
    try:
        calibrate(m, src.samples(), workers=2, batch_size=8)
    except InputError as exc:
        print("raised:", exc)
""")


def test_bad_sample_midway_stops_workers_and_exits(tmp_path):
    """A bad sample after good ones: the error reaches the caller, the workers stop, and the
    process exits (no hang on 6 MB batches left in the queue's pipe)."""
    from tests.quantize import qmodels

    g = qmodels.G(0)
    model = g.save(tmp_path / "big.onnx", ["N", 3, 256, 256], g.op("Relu", [g.conv("x", 3, 4)]), ["N", 4, 256, 256])
    script = tmp_path / "bad.py"
    script.write_text(_BAD_SAMPLE)
    r = subprocess.run([sys.executable, str(script), str(model)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "raised:" in r.stdout and "float64" in r.stdout, r.stderr


def test_outputs_appended_to_the_file_bytes_equal_augment(residual_model):
    """augment_bytes (the file's bytes plus a second graph field with the new outputs) parses as
    augment's copy and runs on ONNX Runtime with the same values; existing outputs are not repeated."""
    import onnx
    import onnxruntime as ort

    from sdk.quantize.calibrate import augment, augment_bytes
    from sdk.quantize.graph import GraphIndex

    proto = Model.load(residual_model).proto
    names = [n.output[0] for n in proto.graph.node][:4] + [proto.graph.output[0].name]
    types = GraphIndex(proto).elem_type
    data = augment_bytes(residual_model.read_bytes(), proto, names, types)
    merged, copied = onnx.load_from_string(data), augment(proto, names, elem_types=types)
    assert [o.name for o in merged.graph.output] == [o.name for o in copied.graph.output]
    assert len(merged.graph.node) == len(proto.graph.node) and len(merged.graph.initializer) == len(proto.graph.initializer)
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)}
    a = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(copied.SerializeToString(), providers=["CPUExecutionProvider"])
    want = [o.name for o in copied.graph.output]
    for u, v in zip(a.run(want, x), b.run(want, x)):
        np.testing.assert_array_equal(u, v)
