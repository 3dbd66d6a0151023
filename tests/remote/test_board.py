"""``sdk.remote.Board`` end to end: the real agent zipapp run by the board's Python, over a real
sshd on loopback and through the local subprocess board. Power comes from the agent's SIMULATED
sysfs tree (labelled so), since this machine has no power sensors."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from sdk.errors import BoardConnectionError, EdgeSDKError, RemoteCommandError
from sdk.remote import Board, run_fleet
from sdk.remote.agent import build_zipapp  # noqa: F401 - the agent is part of the tree: a failure here fails
from tests.remote.sshd import free_port, needs_sshd, trust


@pytest.fixture
def local_board(client_home):
    return Board("local")


def test_local_board_checks_and_benchmarks(local_board, conv_model):
    with local_board as board:
        facts = board.check()
        assert facts["python"] and facts["numpy"]
        first = board.benchmark(conv_model, runs=5, min_seconds=0.05, warmup=1, idle_seconds=0,
                                input_shapes={"x": (1, 3, 16, 16)})
        again = board.benchmark(conv_model, runs=5, min_seconds=0.05, warmup=1, idle_seconds=0,
                                input_shapes={"x": (1, 3, 16, 16)})
    assert first.stats.count >= 5 and first.stats.throughput_ips > 0
    assert first.board["name"] == "local" and first.model["path"] == str(conv_model)
    assert first.transfer["skipped"] is False and again.transfer["skipped"] is True
    doc = first.to_dict()
    assert "power" in doc and "energy_mj_per_inference" in doc and "device" in doc


def test_quantize_for_a_boards_cpu(local_board, conv_model, tmp_path):
    """``Board.cpu()`` is the board's architecture and /proc/cpuinfo flags from its facts;
    ``sdk quantize --board NAME`` quantizes for them, names the board as the source and judges the
    exact int8 arithmetic (the model is for that board, not for this host's fused kernels)."""
    import json
    import subprocess

    from sdk.hostinfo import cpu_flags

    with local_board as board:
        arch, flags = board.cpu()
    assert (arch, frozenset(flags)) == cpu_flags()
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((24, 3, 16, 16)).astype(np.float32))
    base = [sys.executable, "-m", "sdk", "quantize", str(conv_model), "--calib", str(tmp_path / "c.npz"), "-o",
            str(tmp_path / "q.onnx"), "--no-speed-check", "--no-cache", "--workers", "1"]
    r = subprocess.run(base + ["--board", "local", "--report", str(tmp_path / "r.json")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cpu = json.loads((tmp_path / "r.json").read_text())["cpu"]
    assert cpu["source"] == "board local (its /proc/cpuinfo)" and cpu["arch"] == arch
    assert cpu["judged_as"].startswith("the exact int8 arithmetic") and cpu["reduce_range"]
    both = subprocess.run(base + ["--board", "local", "--cpu", "x86_64:avx2"], capture_output=True, text=True,
                          timeout=300)
    assert both.returncode == 2 and "--board and --cpu both name the CPU" in both.stderr
    assert len(both.stderr.strip().splitlines()) == 1 and "Traceback" not in both.stderr


def test_bench_timeout_scales_with_the_seconds_per_inference_a_board_showed():
    """An emulated aarch64 board took 224 s per nudenet inference: 2 runs after 1 warm-up cannot fit
    the fixed 0.5 s a run; the timeout then allows three times the seconds seen."""
    from sdk.remote.board import BENCH_TIMEOUT_PAD_S, bench_timeout_s

    fast = bench_timeout_s(runs=2, warmup=1, min_seconds=0, idle_seconds=1)
    assert fast == BENCH_TIMEOUT_PAD_S + 1 + 3 * 0.5
    assert bench_timeout_s(2, 1, 0, 1, s_per_inference=0.01) == fast     # fast models keep the floor
    assert bench_timeout_s(2, 1, 0, 1, s_per_inference=224.0) == BENCH_TIMEOUT_PAD_S + 1 + 3 * 3 * 224.0


def test_infer_records_the_seconds_per_inference_the_benchmark_timeout_reads(local_board, conv_model, tmp_path):
    from sdk.remote.board import bench_timeout_s

    np.savez(tmp_path / "in.npz", x=np.zeros((3, 3, 16, 16), np.float32))
    timeouts = {}
    with local_board as board:
        agent = board.agent

        def timed_agent(command, request, *, timeout_s=600.0):
            timeouts[command] = timeout_s
            return agent(command, request, timeout_s=timeout_s)

        board.agent = timed_agent
        board.infer(conv_model, tmp_path / "in.npz")
        (per_s,) = board._s_per_inference.values()
        board._s_per_inference = {k: 200.0 for k in board._s_per_inference}   # as an emulated board shows
        board.benchmark(conv_model, runs=2, min_seconds=0, warmup=1, idle_seconds=0, input_shapes={"x": (1, 3, 16, 16)})
    assert 0 < per_s < 60
    assert timeouts["bench"] == bench_timeout_s(2, 1, 0, 0, s_per_inference=200.0)


def test_profile_target_options_reach_the_board(client_home, tmp_path, monkeypatch, conv_model):
    """``[runtime.onnxruntime]`` in a profile is what the board opens the target with; options the
    caller passes win."""
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "lab.toml").write_text(
        f'[connection]\nhost = "local"\npython = "{sys.executable}"\n'
        '[runtime]\ntargets = ["onnxruntime"]\n[runtime.onnxruntime]\nthreads = 1\ngraph_optimization = "basic"\n')
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(tmp_path / "boards"))
    with Board("lab") as board:
        res = board.benchmark(conv_model, runs=3, min_seconds=0, warmup=0, idle_seconds=0,
                              input_shapes={"x": (1, 3, 16, 16)}, target_options={"graph_optimization": "all"})
    assert res.runtime["options"]["threads"] == 1 and res.runtime["options"]["graph_optimization"] == "all"


@needs_sshd
@pytest.mark.ssh
def test_ssh_board_benchmark_with_simulated_power(client_home, sshd, board_profile, static_conv_model, tmp_path):
    from sdk.remote.agent.power.simulate import SimulatedBoard

    trust(client_home, sshd)
    sysfs = tmp_path / "sysfs"
    name = board_profile("nx-sim", extra=f'[power]\nsensors = ["ina3221-hwmon"]\nsysfs_root = "{sysfs}"\n'
                                         '[hardware]\ngpu_arch = "volta-sm72"\n')
    with SimulatedBoard(sysfs, layout="jetson-jp5"):
        with Board(name) as board:
            facts = board.check()
            result = board.benchmark(static_conv_model, runs=10, min_seconds=0.3, warmup=2, idle_seconds=0.3)
            trips = board.round_trips
            board.benchmark(static_conv_model, runs=5, min_seconds=0.05, warmup=1, idle_seconds=0.1)
            assert board.round_trips - trips == 2      # one to see the model is there, one to run it
    assert facts.get("l4t") or facts.get("jetpack")            # read from the simulated /etc/nv_tegra_release
    assert result.power.mean_w > 0 and "ina3221" in str(result.power.source)
    assert result.board == {"name": "nx-sim", "host": "127.0.0.1", "description": "sshd on loopback (nx-sim)",
                               "hardware": {"gpu_arch": "volta-sm72", "memory_gb": None, "peak_tops": None,
                                            "peak_gops": {}, "memory_bandwidth_gbs": None, "source": None},
                               "profile": str(tmp_path / "boards" / "nx-sim.toml")}
    assert result.transfer["bytes_sent"] == static_conv_model.stat().st_size
    assert result.model["remote_path"].startswith(str(tmp_path / "board-nx-sim" / "models"))


@needs_sshd
@pytest.mark.ssh
def test_infer_over_ssh_matches_local_run(client_home, sshd, board_profile, conv_model, tmp_path):
    import onnxruntime as ort

    trust(client_home, sshd)
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    with Board(board_profile()) as board:
        outputs = board.infer(conv_model, tmp_path / "in.npz")
    ref = ort.InferenceSession(str(conv_model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(outputs["logits"], ref, rtol=1e-5, atol=1e-5)
    assert not list((tmp_path / "board-loop1" / "data").glob("out-*"))      # fetched, then removed


@needs_sshd
@pytest.mark.ssh
def test_board_side_failures_are_one_line_naming_the_board(client_home, sshd, board_profile, static_conv_model):
    trust(client_home, sshd)
    nopy = board_profile("nopy")
    prof = (client_home.parent / "boards" / "nopy.toml")
    prof.write_text(prof.read_text().replace(f'python = "{sys.executable}"', 'python = "python3-missing"'))
    with pytest.raises(RemoteCommandError) as exc:
        Board(nopy).check()
    assert str(exc.value).startswith("nopy: 'python3-missing' was not found on the board")
    nonumpy = board_profile("nonumpy")       # -S: no site-packages, so no numpy (a bare board's Python)
    prof = (client_home.parent / "boards" / "nonumpy.toml")
    prof.write_text(prof.read_text().replace(f'python = "{sys.executable}"', f'python = "{sys.executable} -S"'))
    with pytest.raises(EdgeSDKError) as exc:
        Board(nonumpy).benchmark(static_conv_model, runs=1, min_seconds=0, idle_seconds=0)
    assert str(exc.value).startswith("nonumpy: ") and "numpy" in str(exc.value) and "\n" not in str(exc.value)
    with Board(board_profile("nort")) as board:
        with pytest.raises(EdgeSDKError) as exc:
            board.benchmark(static_conv_model, target="no-such-runtime", runs=1, min_seconds=0, idle_seconds=0)
    assert str(exc.value).startswith("nort: ") and "\n" not in str(exc.value)


@needs_sshd
@pytest.mark.ssh
def test_fleet_runs_on_despite_a_dead_board(client_home, sshd, board_profile):
    trust(client_home, sshd)
    good = board_profile("good")
    dead = board_profile("dead", port=free_port())
    results = run_fleet([dead, good, "local"], lambda b: b.transport.run(["echo", b.name]).text().strip(),
                        retries=0)
    assert [r.board for r in results] == ["dead", "good", "local"]
    assert [r.ok for r in results] == [False, True, True]
    assert results[1].value == "good"
    assert isinstance(results[0].error, BoardConnectionError) and "dead: connection refused" in str(results[0].error)


@needs_sshd
@pytest.mark.ssh
def test_board_push_retries_a_dropped_link(client_home, sshd, board_profile, tmp_path):
    import hashlib

    from tests.remote.sshd import DropProxy

    model = tmp_path / "big.onnx"
    model.write_bytes(np.random.default_rng(3).integers(0, 256, 4_000_000, dtype=np.uint8).tobytes())
    proxy = DropProxy(sshd.port, drop_after=1_500_000, cut=1)   # the first connection dies after ~1.5 MB
    trust(client_home, sshd, port=proxy.port)
    try:
        with Board(board_profile("flaky", port=proxy.port), retries=3, backoff_s=0.01) as board:
            pushed = board.push(model)
    finally:
        proxy.close()
    assert proxy.connections == 2 and not pushed.skipped       # reconnected once, then done
    on_board = tmp_path / "board-flaky" / "models" / f"{pushed.sha256}.onnx"
    assert hashlib.sha256(on_board.read_bytes()).hexdigest() == pushed.sha256
