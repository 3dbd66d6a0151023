"""Device telemetry sampled with power, --lock-clocks against a SIMULATED Jetson (fake sysfs tree,
fake tegrastats, fake nvpmodel / jetson_clocks that act on the tree and log their calls), and the
NVML source with the real pynvml package on a machine without an NVIDIA driver."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers

from sdk.errors import PowerError
from sdk.remote.agent.commands import bench
from sdk.remote.agent.power import open_source
from sdk.remote.agent.power.clocks import ClockLock
from sdk.remote.agent.power.sampler import window_power
from sdk.remote.agent.power.simulate import SimulatedBoard, write_fake_tegrastats
from sdk.remote.agent.power.simulate_tools import write_fake_jetson_tools
from sdk.remote.agent.power.telemetry import TelemetrySampler, parse_tegrastats_telemetry, read_proc_stat


def test_tegrastats_telemetry_in_every_dialect():
    jp4 = ("RAM 1608/3956MB (lfb 76x4MB) SWAP 0/1978MB (cached 0MB) IRAM 0/252kB(lru 0kB) CPU [8%@1479,3%@1479,4%@1479,"
           "2%@1479] EMC_FREQ 0%@1600 GR3D_FREQ 0%@921 APE 25 PLL@34C CPU@36.5C PMIC@100C GPU@35C AO@43C thermal@35.75C "
           "POM_5V_IN 933/933 POM_5V_GPU 0/0 POM_5V_CPU 84/105")
    t = parse_tegrastats_telemetry(jp4)
    assert t["cpu_load_pct"] == pytest.approx(4.25) and t["cpu_freq_mhz"] == 1479
    assert t["emc_freq_mhz"] == 1600 and t["gpu_freq_mhz"] == 921 and t["gpu_load_pct"] == 0
    assert t["temp_cpu_c"] == 36.5 and t["temp_thermal_c"] == 35.75
    jp5 = ("09-21-2025 15:38:17 RAM 3645/7620MB (lfb 4x4MB) SWAP 0/3810MB (cached 0MB) CPU [2%@729,1%@729,0%@729,0%@729,"
           "off,off] GR3D_FREQ 37%@[305] cpu@47.5C soc2@46.4C gpu@46.5C tj@47.5C VDD_IN 2957mW/2957mW")
    t = parse_tegrastats_telemetry(jp5)
    assert t["cpu_load_pct"] == pytest.approx(0.75) and t["gpu_load_pct"] == 37 and t["gpu_freq_mhz"] == 305
    assert t["temp_tj_c"] == 47.5 and "emc_freq_mhz" not in t
    t = parse_tegrastats_telemetry("GR3D_FREQ 12%@[1300,1300] VDD_GPU_SOC 5139mW/5139mW/5139mW")
    assert t["gpu_load_pct"] == 12 and t["gpu_freq_mhz"] == 1300


def test_proc_stat_is_read():
    busy, total = read_proc_stat()
    assert 0 <= busy <= total and total > 0


def test_sysfs_telemetry_of_a_simulated_jetson(tmp_path):
    """SIMULATION: the GPU load file follows a known sine; the sampler must see it move."""
    with SimulatedBoard(tmp_path, "jetson-jp5", update_hz=100, locked=False):
        with TelemetrySampler(str(tmp_path), rate_hz=40) as tel:
            import time

            # at least 1.2 s and 20 samples, however slow a loaded machine makes the sampler;
            # the 60 s bound only catches a sampler that stopped
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.2 or len(tel.samples) < 20:
                assert time.monotonic() - t0 < 60, "the telemetry sampler stopped"
                time.sleep(0.05)
    rep = tel.report(tel.samples[0][0])
    s = rep["series"]
    assert rep["samples"] >= 20
    assert set(s) >= {"cpu_load_pct", "cpu_freq_mhz", "gpu_load_pct", "gpu_freq_mhz", "emc_freq_mhz",
                      "temp_cpu_therm_c", "mem_used_mb"}
    assert s["gpu_freq_mhz"][-1] == 306.0 and s["emc_freq_mhz"][-1] == 665.6 and s["cpu_freq_mhz"][-1] == 729.6
    loads = [v for v in s["gpu_load_pct"] if v is not None]
    assert max(loads) - min(loads) > 30  # the simulated load swings between about 0 and 100 %
    assert rep["units"]["gpu_load_pct"] == "%" and rep["units"]["temp_cpu_therm_c"] == "C"


@pytest.fixture
def sim_jetson(tmp_path, monkeypatch):
    """SIMULATION: an unlocked Jetson tree, fake tegrastats / nvpmodel / jetson_clocks first on PATH."""
    root = tmp_path / "sysfs"
    bindir = tmp_path / "bin"
    with SimulatedBoard(root, "jetson-jp5", update_hz=100, locked=False) as sim:
        write_fake_tegrastats(bindir, t0=sim.t0)
        log = write_fake_jetson_tools(bindir, root)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
        yield root, log


def _calls(log: Path):
    return [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []


def test_bench_with_telemetry_and_locked_clocks(sim_jetson, conv_model):
    root, log = sim_jetson
    doc = bench({"model_path": str(conv_model), "input_shapes": {"x": [1, 3, 16, 16]}, "runs": 20, "warmup": 2,
                 "min_seconds": 0.6, "idle_seconds": 0.3, "samples": True,
                 "power": {"sensors": ["tegrastats"], "sysfs_root": str(root), "rate_hz": 20},
                 "telemetry": {"rate_hz": 20}, "lock_clocks": {"power_mode": 0, "sudo": False}})
    calls = _calls(log)
    assert calls[0] == ["nvpmodel", "-m", "0"] and calls[1][:2] == ["jetson_clocks", "--store"]
    assert calls[2] == ["jetson_clocks"] and calls[3][:2] == ["jetson_clocks", "--restore"]
    assert calls[4] == ["nvpmodel", "-m", "2"] and len(calls) == 5
    lock = doc["clock_lock"]
    assert lock["before"]["clocks"]["locked"] is False and lock["during"]["clocks"]["locked"] is True
    assert lock["after"]["clocks"]["locked"] is False and lock["restored"] is True
    assert lock["before"]["power_mode"]["name"] == "10W" and lock["during"]["power_mode"]["name"] == "MAXN"
    assert lock["after"]["power_mode"]["id"] == 2
    assert doc["clocks"]["locked_during_run"] is True and not list(Path("/tmp").glob(os.path.basename(calls[1][2])))
    tel = doc["telemetry"]
    assert tel["sources"].get("tegrastats") and "power_w" in tel["series"]
    # the tegrastats line's CPU clock (729 MHz) overrides sysfs, which jetson_clocks pinned to 1479 MHz
    assert tel["series"]["cpu_freq_mhz"][-1] == 729
    assert tel["series"]["gpu_freq_mhz"][-1] == 305  # GR3D_FREQ 0%@[305] of the fake tegrastats
    assert tel["window"][1] > tel["window"][0] >= 0 and tel["means_in_window"]["gpu_freq_mhz"] == 305
    assert doc["power"]["mean_w"] is not None


def test_lock_failure_restores_and_says_why(sim_jetson, monkeypatch, tmp_path):
    root, log = sim_jetson
    bad = tmp_path / "badbin"
    bad.mkdir()
    (bad / "jetson_clocks").write_text("#!/bin/sh\n[ \"$1\" = --store ] && echo saved > \"$2\" && exit 0\n"
                                       "echo 'jetson_clocks: must be run as root' >&2; exit 1\n")
    (bad / "jetson_clocks").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bad}{os.pathsep}{os.environ['PATH']}")
    lock = ClockLock(str(root), sudo=False)
    with pytest.raises(PowerError, match="must be run as root"):
        lock.__enter__()
    assert [c["argv"][1:] for c in lock.commands][:2] == [["--store", lock.commands[0]["argv"][2]], []]
    assert lock.commands[-1]["argv"][1] == "--restore" and lock.restored is False  # tried, and said it failed


def test_lock_clocks_off_a_jetson_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PowerError, match="needs 'nvpmodel' on PATH"):
        ClockLock("/", sudo=False).__enter__()


def test_push_lock_clocks_and_report_on_a_simulated_board(sim_jetson, conv_model, tmp_path, monkeypatch, capsys):
    """`sdk push --lock-clocks --report` on a local board whose sysfs is the simulated tree."""
    from tests.clirun import run_cli

    root, log = sim_jetson
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "simjet.toml").write_text(
        f'name = "simjet"\ndescription = "SIMULATED Jetson (fake sysfs and tools)"\n[connection]\nhost = "local"\n'
        f'python = "{sys.executable}"\nworkdir = "{tmp_path / "wd"}"\n[power]\nsensors = ["ina3221-hwmon"]\n'
        f'sysfs_root = "{root}"\n')
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    report = tmp_path / "r.html"
    code, out, err = run_cli(["push", conv_model, "--board", "simjet", "--runs", "10", "--min-seconds", "0.3",
                              "--idle-seconds", "0.2", "--input-shape", "x=1x3x16x16", "--lock-clocks",
                              "--power-mode", "0", "--report", report, "--json", tmp_path / "r.json"], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())[0]
    assert doc["clock_lock"]["during"]["clocks"]["locked"] is True and doc["clock_lock"]["restored"] is True
    assert [c[0] for c in _calls(log)] == ["nvpmodel", "jetson_clocks", "jetson_clocks", "jetson_clocks", "nvpmodel"]
    html = report.read_text()
    assert "Device telemetry" in html and "Clock lock" in html and 'class="plot telemetry"' in html


# -- NVML -------------------------------------------------------------------------------------------------------
def test_nvml_without_a_driver_says_why():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    from sdk.remote.agent.power.nvml import NvmlSource

    src = NvmlSource()
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        tiers.skip_has_gpu("its NVIDIA driver answers NVML: the not-available path does not apply")
    except pynvml.NVMLError:
        pass
    assert src.probe("/") is False
    assert "libnvidia-ml.so.1" in src.why_not and "no NVIDIA driver" in src.why_not
    source, tried = open_source(["nvml"])
    assert source is None and tried == [{"sensor": "nvml", "found": False, "why_not": src.why_not}]


def test_nvml_missing_package_is_named(tmp_path):
    code = ("import sys; sys.modules['pynvml'] = None\n"
            "from sdk.remote.agent.power.nvml import NvmlSource\n"
            "s = NvmlSource(); print(s.probe('/'), s.why_not)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert out.stdout.startswith("False") and "pip install nvidia-ml-py" in out.stdout, out.stderr


def test_nvml_energy_counter_is_integrated_by_difference():
    """The window arithmetic an NVML source gets: its counter (J, monotonic) differenced over the
    samples inside the window, not a trapezoid of polled power."""
    from sdk.remote.agent.power.nvml import NvmlSource

    src = NvmlSource()
    assert src.kind == "energy"
    samples = [(10.0 + 0.1 * i, {"gpu0": 1000.0 + 59.1 * 0.1 * i}) for i in range(11)]  # 59.1 W for 1 s
    w = window_power(src, samples, 1.0)
    assert w.mean_w == pytest.approx(59.1) and w.energy_j == pytest.approx(59.1) and w.total_label.endswith("gpu0")
    src.kind = "power"  # a GPU without the counter: polled W, trapezoid
    w = window_power(src, [(0.0, {"gpu0": 50.0}), (1.0, {"gpu0": 70.0})], 1.0)
    assert w.mean_w == pytest.approx(60.0)
