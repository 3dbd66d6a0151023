"""Calibration on a REAL Ray cluster on loopback: a head node and one worker node (``ray start``,
one CPU and a 200 MB object store each), reached with ``ray.init(address=...)``, stopped afterwards
(each ``ray start --block`` in its own process group, ended by its id). The corpus detector
(nudenet 320n) quantized with ``--executor ray`` equals ``--executor threads`` byte for byte."""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import numpy as np
import pytest

from tests.quantize import qmodels
from tests.remote.sshd import wait_listening

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="needs Ray: pip install 'edgesdk[ray]'")
START_TIMEOUT_S = 120.0


def _ray_cli() -> Optional[str]:
    local = Path(sys.executable).parent / "ray"
    return str(local) if local.exists() else shutil.which("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """End a ``ray start --block`` and everything it started (its process group), by id: TERM,
    then KILL what is still running after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while _live_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            proc.wait(1)
        except subprocess.TimeoutExpired:
            pass
        if not _live_members(proc.pid):
            return


def _stat(pid: int) -> List[str]:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _live_members(pgid: int) -> List[int]:
    """Processes of group ``pgid`` that still run (zombies left to be reaped do not count)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if len(st) > 2 and st[2] == str(pgid) and st[0] != "Z":
                out.append(int(d.name))
    return out


def _pgid(pid: int) -> int:
    st = _stat(pid)
    return int(st[2]) if len(st) > 2 else -1


def _ppid(pid: int) -> int:
    st = _stat(pid)
    return int(st[1]) if len(st) > 1 else -1


@dataclass
class Cluster:
    address: str
    pgids: List[int]   # the process groups of the two ``ray start --block``


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """A Ray head on 127.0.0.1 with one more worker node; both stopped at the end."""
    if not HAVE_RAY or _ray_cli() is None:
        pytest.skip("needs Ray: pip install 'edgesdk[ray]'")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")   # short: Ray's unix socket paths must fit 107 bytes
    # token authentication, as a cluster should have: the nodes and every driver (this process and
    # the `sdk` subprocesses) read the token from the environment
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    import ray   # after the environment: Ray reads the authentication mode once
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=200000000",
              "--disable-usage-stats"]
    procs: List[subprocess.Popen] = []
    logs = [open(Path(tmp) / f"{n}.log", "wb") for n in ("head", "worker")]
    address = f"127.0.0.1:{port}"
    try:
        procs.append(subprocess.Popen([_ray_cli(), "start", "--head", f"--port={port}", "--include-dashboard=false",
                                       f"--temp-dir={tmp}", *common], env=env, stdout=logs[0],
                                      stderr=subprocess.STDOUT, start_new_session=True))
        wait_listening(port, procs[0], Path(tmp) / "head.log", START_TIMEOUT_S, name="ray start --head")
        procs.append(subprocess.Popen([_ray_cli(), "start", f"--address={address}", *common], env=env, stdout=logs[1],
                                      stderr=subprocess.STDOUT, start_new_session=True))
        ray.init(address=address, logging_level="ERROR")
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
                if time.monotonic() > deadline or procs[1].poll() is not None:
                    raise RuntimeError(f"the worker node did not join: {(Path(tmp) / 'worker.log').read_text()[-2000:]}")
                time.sleep(0.5)
        finally:
            ray.shutdown()
        yield Cluster(address, [p.pid for p in procs])
    finally:
        for p in reversed(procs):
            _stop(p)
        for log in logs:
            log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        leftovers = [pid for p in procs for pid in _live_members(p.pid)]
        shutil.rmtree(tmp, ignore_errors=True)
        assert not leftovers, f"Ray processes left running: {leftovers}"


# -- data ------------------------------------------------------------------------------------------------
def _nudenet() -> Path:
    """The corpus detector (fetched once from its pinned wheel, then cached)."""
    from sdk import corpus

    return corpus.fetch(["nudenet-320n"])["nudenet-320n"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """16 seeded augmentations (crop, flip, scale) of the corpus photos."""
    from sdk import corpus

    _nudenet()
    d = tmp_path_factory.mktemp("photos")
    corpus.write_image_folder(d, 16, seed=0, size=320)
    return d


def sdk(*args: object, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env)


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _same_stats(a, b) -> None:
    assert a.samples == b.samples and list(a.tensors) == list(b.tensors)
    for n, x in a.tensors.items():
        y = b.tensors[n]
        assert np.array_equal(x.hist, y.hist) and (x.min, x.max, x.width) == (y.min, y.max, y.width), n
        assert (x.count, x.zeros, x.at_min, x.at_max) == (y.count, y.zeros, y.at_min, y.at_max), n
        assert (x.channel_sum is None) == (y.channel_sum is None), n
        if x.channel_sum is not None:
            assert np.array_equal(x.channel_sum, y.channel_sum), n


# -- tests -----------------------------------------------------------------------------------------------
@needs_ray
@pytest.mark.slow
def test_ray_cluster_equals_threads_byte_for_byte(ray_cluster, photos, tmp_path):
    """``sdk quantize --executor ray --ray-address`` on the corpus detector: the INT8 model, the
    ranges and the statistics equal ``--executor threads``'s, byte for byte."""
    from sdk.quantize.stats import CalibrationStats

    model = _nudenet()
    outs = {}
    for ex in ("threads", "ray"):
        extra = ["--ray-address", ray_cluster.address] if ex == "ray" else []
        proc = sdk("quantize", model, "--calib", photos, "--preprocess", "size=160x160",
                   "--input-shape", "images=1x3x160x160", "--workers", "2", "--executor", ex, *extra,
                   "--no-cache", "--no-speed-check",   # the speed check times this host: not what is compared
                   "--stats", tmp_path / f"{ex}.npz", "--ranges", tmp_path / f"{ex}.ranges.json",
                   "--report", tmp_path / f"{ex}.json", "-o", tmp_path / f"{ex}.onnx")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        outs[ex] = json.loads((tmp_path / f"{ex}.json").read_text())
    # digests, not the bytes: pytest's diff of two 3 MB byte strings runs for hours (it did, once
    # the speed check had made the two models differ)
    assert _sha256(tmp_path / "ray.onnx") == _sha256(tmp_path / "threads.onnx")
    assert _sha256(tmp_path / "ray.ranges.json") == _sha256(tmp_path / "threads.ranges.json")
    _same_stats(CalibrationStats.load(tmp_path / "threads.npz"), CalibrationStats.load(tmp_path / "ray.npz"))
    cal = outs["ray"]["calibration"]
    # 16 photos, no --eval: the guard holds out the last 8 (their files shipped to no worker)
    assert cal["executor"] == "ray" and cal["workers"] == 2 and cal["samples"] == 8
    assert outs["ray"]["budget"]["checked"] is True and outs["ray"]["accuracy"]["samples"] == 8
    assert outs["threads"]["calibration"]["executor"] == "threads"


@needs_ray
@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_its_shard_retried(ray_cluster, photos):
    """SIGKILL one actor's process after the first shard: Ray restarts it, retries its shards, and
    the statistics still equal the threads'."""
    from sdk.model import Model
    from sdk.preprocess import PreprocessSpec
    from sdk.quantize.calibrate import calibrate
    from sdk.quantize.executors import RayExecutor
    from sdk.sources import open_source

    m = Model.load(_nudenet()).with_input_shapes({"images": (1, 3, 96, 96)})
    spec = PreprocessSpec(size=(96, 96), layout="NCHW", dtype="float32")
    ref = calibrate(m, open_source(photos, m.inputs, spec), workers=2)
    killed: List[int] = []

    def kill_one(done: int, total: Optional[int]) -> None:
        if not killed:
            pids = _actor_pids(ray_cluster.pgids)
            assert pids, "no Ray actor process found"
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    ex = RayExecutor(address=ray_cluster.address, shard_samples=1)
    got = calibrate(m, open_source(photos, m.inputs, spec), workers=2, executor=ex, progress=kill_one)
    assert killed and ex.last_run["shards"] == 16
    # two actors, the killed one restarted when Ray gives it its next shard (a third process); when
    # the kill lands after that actor's last shard, nothing needs restarting
    assert len(ex.last_run["worker_hosts"]) in (2, 3), ex.last_run
    _same_stats(ref, got)


def _actor_pids(pgids: List[int]) -> List[int]:
    """The calibration actors' processes of this cluster."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(b"ray::_ShardWorker") and _pgid(_ppid(int(d.name))) in pgids:
                pids.append(int(d.name))   # an actor of this cluster: its parent, a raylet, is in its groups
    return sorted(pids)


@needs_ray
@pytest.mark.slow
def test_a_shard_failing_twice_fails_the_job_with_its_files(ray_cluster, tmp_path):
    """An .npz whose member's bytes were flipped after it was written (its header is intact, so
    only reading the rows finds the bad CRC): its shard fails on the worker, is retried once, then
    the job fails with one line that names the file (exit 2: bad input), and nothing is written.
    A truncated .npy is refused before any shard runs, also naming the file."""
    import zipfile

    model = qmodels.residual_net(tmp_path / "residual.onnx")
    data = tmp_path / "calib"
    data.mkdir()
    good = qmodels.make_data(8, (3, 12, 12), seed=1)
    # the corrupt file first: without --eval the guard holds out the last 8 of the 16 rows (a.npz
    # is what the shards calibrate on)
    np.savez(data / "a.npz", x=good)   # stored, not deflated: the flipped byte is a data byte
    np.save(data / "b.npy", good)
    with zipfile.ZipFile(data / "a.npz") as zf:
        info = zf.getinfo("x.npy")
        assert info.compress_type == zipfile.ZIP_STORED
    raw = bytearray((data / "a.npz").read_bytes())
    at = raw.index(good[5].tobytes()[:64])   # a byte of row 5, inside the member's data
    raw[at] ^= 0xFF
    (data / "a.npz").write_bytes(bytes(raw))
    out = tmp_path / "int8.onnx"
    argv = ["quantize", model, "--calib", data, "--executor", "ray", "--ray-address", ray_cluster.address,
            "--batch-size", "4", "--workers", "2", "--no-cache", "-o", out]
    proc = sdk(*argv)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: calibration shard ") and "a.npz" in last and "failed twice" in last, last
    assert "corrupt" in last and "CRC" in last and "Traceback" not in proc.stderr, last
    assert not out.exists()

    (data / "a.npz").unlink()
    np.save(data / "a.npy", good)
    raw = (data / "a.npy").read_bytes()
    (data / "a.npy").write_bytes(raw[:len(raw) - good[0].nbytes * 5])   # rows 3.. missing
    proc = sdk(*argv)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "a.npy" in last and "truncated or forged" in last, proc.stderr[-3000:]
    assert "calibration shard" not in last and not out.exists()


@needs_ray
def test_iterables_and_unknown_executors_are_refused_before_any_work(tmp_path):
    from sdk.errors import InputError
    from sdk.model import Model
    from sdk.quantize.calibrate import calibrate

    m = Model.load(qmodels.residual_net(tmp_path / "residual.onnx"))
    feeds = [{"x": a[None]} for a in qmodels.make_data(4, (3, 12, 12), seed=1)]
    with pytest.raises(InputError, match="reads the calibration data from files"):
        calibrate(m, feeds, executor="ray")
    with pytest.raises(InputError, match="unknown calibration executor 'dask'.*known: threads, ray"):
        calibrate(m, feeds, executor="dask")
    proc = sdk("quantize", tmp_path / "residual.onnx", "--calib", tmp_path, "--ray-address", "127.0.0.1:1", "-o",
               tmp_path / "q.onnx")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --ray-address needs --executor ray"
    data = tmp_path / "calib"
    data.mkdir()
    np.save(data / "a.npy", qmodels.make_data(8, (3, 12, 12), seed=1))
    dead = f"127.0.0.1:{_free_port()}"
    proc = sdk("quantize", tmp_path / "residual.onnx", "--calib", data, "--executor", "ray", "--ray-address", dead,
               "--no-cache", "-o", tmp_path / "q.onnx")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().startswith(f"error: cannot reach the Ray cluster at {dead}: "), proc.stderr[-2000:]
    assert not (tmp_path / "q.onnx").exists()


@needs_ray
@pytest.mark.slow
def test_without_an_address_a_local_ray_is_started_and_stopped(tmp_path):
    import ray

    from sdk.model import Model
    from sdk.quantize.calibrate import calibrate
    from sdk.quantize.executors import RayExecutor
    from sdk.sources import open_source

    m = Model.load(qmodels.residual_net(tmp_path / "residual.onnx"))
    np.savez(tmp_path / "calib.npz", x=qmodels.make_data(24, (3, 12, 12), seed=1))
    ref = calibrate(m, open_source(tmp_path / "calib.npz", m.inputs), workers=1)
    seen: List[tuple] = []
    ex = RayExecutor(shard_samples=8)
    got = calibrate(m, open_source(tmp_path / "calib.npz", m.inputs), workers=1, executor=ex,
                    progress=lambda d, t: seen.append((d, t)))
    assert not ray.is_initialized()
    assert seen[-1] == (3, 3) and [d for d, _ in seen] == [1, 2, 3]
    assert got.meta["executor"] == "ray" and ex.last_run["workers"] == 1
    _same_stats(ref, got)
