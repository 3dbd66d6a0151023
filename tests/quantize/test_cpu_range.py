"""The onnxruntime scheme quantizes for the CPU the model will run on (issue 21, item 5).

On x86 without VNNI, onnxruntime's U8S8 kernels (AVX2 ``vpmaddubsw``) add pairs of u8 x s8 products
in int16 and saturate; the scheme then takes 7-bit weights. The emulated check runs the written model
on an AVX2-only CPU (Haswell) under ``qemu-x86_64-static`` (Debian's qemu-user-static, installed by
.ci/run): what the AVX2 kernels compute, not a model of it."""
from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sdk.quantize import quantize
from sdk.quantize.schemes.onnxruntime import OnnxRuntimeScheme
from sdk.quantize.schemes.tensorrt import TensorRTScheme

C_IN, C_OUT = 64, 16


def test_reduced_range_reason_reads_the_cpu_flags():
    why = OnnxRuntimeScheme.reduced_range_reason
    assert why("x86_64", frozenset({"avx2", "fma"})) is not None
    assert why("x86_64", frozenset({"avx2", "avx512bw"})) is not None      # Skylake-X: AVX512 without VNNI
    assert why("x86_64", frozenset({"avx2", "avx512_vnni"})) is None
    assert why("x86_64", frozenset({"avx2", "avx_vnni"})) is None          # Alder Lake's VEX VNNI
    assert why("aarch64", frozenset({"asimd"})) is None                    # NEON/SDOT accumulate in 32 bits
    assert TensorRTScheme.reduced_range_reason("x86_64", frozenset({"avx2"})) is None


def _saturating_model(path: Path) -> Path:
    """Conv 64->16 (1x1) with every weight of a channel at its channel's maximum magnitude, then
    Relu and a float 1x1 conv: on inputs near 1 (uint8 255) each pair of u8 x s8 products is 64770."""
    w1 = np.ones((C_OUT, C_IN, 1, 1), np.float32) * 0.02
    w1[1::2] *= -1.0
    w2 = np.eye(C_OUT, dtype=np.float32).reshape(C_OUT, C_OUT, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "sat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_OUT, 4, 4])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _calib(n: int = 16) -> list:
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 1.0, (n, 1, C_IN, 4, 4)).astype(np.float32)
    x[:, :, :, 0, 0] = 1.0
    return [{"x": s} for s in x]


def _weight_int8_max(path: Path) -> int:
    m = onnx.load(str(path))
    return max(int(np.abs(numpy_helper.to_array(t).astype(np.int32)).max()) for t in m.graph.initializer
               if t.data_type == TensorProto.INT8 and len(t.dims) == 4)


@pytest.mark.parametrize("flags, bits", [(["avx2", "fma"], 7), (["avx2", "avx512_vnni"], 8)])
def test_quantize_takes_the_range_the_cpu_needs(tmp_path, flags, bits):
    src = _saturating_model(tmp_path / "sat.onnx")
    out = tmp_path / "q.onnx"
    res = quantize(src, _calib(), output=out, cpu_arch="x86_64", cpu_flags=flags, speed_check=False, use_cache=False)
    assert res.report["scheme"]["reduce_range"] is (bits == 7)
    assert res.report["cpu"]["source"] == "given" and res.report["cpu"]["arch"] == "x86_64"
    assert ("without VNNI" in res.report["cpu"]["reduce_range"]) is (bits == 7)
    assert _weight_int8_max(out) == (63 if bits == 7 else 127)


def test_asked_range_wins(tmp_path):
    src = _saturating_model(tmp_path / "sat.onnx")
    res = quantize(src, _calib(), output=tmp_path / "q.onnx", cpu_arch="x86_64", cpu_flags=["avx2"],
                   reduce_range=False, speed_check=False, use_cache=False)
    assert res.report["scheme"]["reduce_range"] is False and "as asked" in res.report["cpu"]["reduce_range"]


_EMULATED = """
import sys, numpy as np, onnxruntime as ort
x = np.load(sys.argv[1])
out = {}
for i, path in enumerate(sys.argv[2:]):
    so = ort.SessionOptions(); so.intra_op_num_threads = 1
    out[str(i)] = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
np.savez(sys.argv[1] + ".out.npz", **out)
"""


def _run_on_haswell(tmp_path: Path, x: np.ndarray, models) -> list:
    qemu = shutil.which("qemu-x86_64-static")
    assert qemu, "qemu-user-static is missing: .ci/run installs it (apt-get install qemu-user-static)"
    script, data = tmp_path / "emulated.py", tmp_path / "x.npy"
    script.write_text(_EMULATED)
    np.save(data, x)
    res = subprocess.run([qemu, "-cpu", "Haswell", sys.executable, str(script), str(data)] + [str(m) for m in models],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    got = np.load(str(data) + ".out.npz")
    return [got[str(i)] for i in range(len(models))]


def _run_here(x: np.ndarray, model: Path) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="emulates an x86 CPU")
def test_model_for_an_avx2_cpu_computes_there_what_it_computes_here(tmp_path):
    """The model quantized for a VNNI CPU (8-bit weights) saturates on the emulated AVX2 CPU (the
    nudenet failure); the model quantized for that CPU (7-bit, chosen from its flags) gives there the
    same outputs as here."""
    src = _saturating_model(tmp_path / "sat.onnx")
    q8, q7 = tmp_path / "q8.onnx", tmp_path / "q7.onnx"
    quantize(src, _calib(), output=q8, cpu_arch="x86_64", cpu_flags=["avx2", "avx512_vnni"], speed_check=False,
             use_cache=False)
    quantize(src, _calib(), output=q7, cpu_arch="x86_64", cpu_flags=["avx2", "fma"], speed_check=False,
             use_cache=False)
    x = np.ones((1, C_IN, 4, 4), np.float32)
    exact = _run_here(x, src)
    e8, e7 = _run_on_haswell(tmp_path, x, [q8, q7])
    h8, h7 = _run_here(x, q8), _run_here(x, q7)
    step = float(np.abs(exact).max()) / 100
    if "avx512_vnni" in Path("/proc/cpuinfo").read_text() or "avx_vnni" in Path("/proc/cpuinfo").read_text():
        assert np.abs(h8 - exact).max() < step      # VNNI here: 8-bit weights are exact enough
    assert np.abs(e8 - exact).max() > 10 * step     # AVX2: the int16 pair sums saturate
    assert np.abs(e7 - exact).max() < step          # 7-bit weights: no saturation
    np.testing.assert_array_equal(e7, h7)           # and the same int8 result as on this CPU


def test_the_guard_judges_the_model_as_its_target_computes_it(tmp_path):
    """Quantized for this host, the guard runs this host's int8 kernels: 8-bit weights asked for on
    an x86 CPU without VNNI saturate there, and the saturating conv stays float. Quantized for a
    given VNNI CPU, the guard judges the exact int8 arithmetic (what that CPU computes, whatever
    this host is), and the conv is int8."""
    from sdk.hostinfo import cpu_flags

    arch, flags = cpu_flags()
    saturates_here = OnnxRuntimeScheme.reduced_range_reason(arch, frozenset(flags)) is not None
    src = _saturating_model(tmp_path / "sat.onnx")
    here = quantize(src, _calib(), output=tmp_path / "here.onnx", reduce_range=False, speed_check=False,
                    use_cache=False)
    assert here.report["cpu"]["judged_as"] == "this host's onnxruntime int8 kernels"
    assert ("conv1" in here.report["fallback_layers"]) is saturates_here, here.report["accuracy"]
    vnni = quantize(src, _calib(), output=tmp_path / "vnni.onnx", cpu_arch="x86_64",
                    cpu_flags=["avx2", "avx512_vnni"], speed_check=False, use_cache=False)
    assert vnni.report["cpu"]["judged_as"].startswith("the exact int8 arithmetic")
    assert "conv1" in vnni.plan.layers and "conv1" not in vnni.report["fallback_layers"]
    assert vnni.report["budget"]["holds"] is True
