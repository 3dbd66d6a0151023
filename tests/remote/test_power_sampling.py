"""The sampler thread against SIMULATED sensors whose power changes over time in a known way
(sdk.remote.agent.power.simulate): fake JetPack 4/5 sysfs trees, a RAPL counter that wraps, and a
fake ``tegrastats`` on PATH in each dialect. The integrated energy is checked against the exact
integral of the simulated signal.

Tolerance, derived rather than picked: the estimate is the trapezoid mean over the samples
strictly inside the window, times the window's length. Its error is bounded by
- the uncovered edges: (t_first - begin) + (end - t_last) seconds at up to 2 x amp_w from the mean;
- staleness: a value is up to one writer period (sysfs) or the pipe delay (tegrastats) old,
  at slope <= amp_w x 2 pi / period_s;
- trapezoid curvature: amp_w (2 pi / period_s)^2 h^2 / 12 per sample gap h;
- quantization: 1 mA x 5 V (hwmon), 1 mW (IIO, tegrastats).
The bound is computed from the gaps actually observed, so a busy machine widens it honestly
instead of failing the test.
"""
from __future__ import annotations

import math
import os
import time

import pytest

from sdk.remote.agent.power import PowerSampler, open_source
from sdk.remote.agent.power.simulate import DEFAULT_RAILS, SimulatedBoard, write_fake_tegrastats

RATE_HZ = 50.0
WINDOW_S = 1.0


def _bound(samples, begin, end, rail, staleness_s, quantum_w):
    ts = [t for t, _ in samples if begin < t < end]
    h = max(b - a for a, b in zip(ts, ts[1:]))
    slope = rail.amp_w * 2 * math.pi / rail.period_s
    edges = (ts[0] - begin) + (end - ts[-1])
    mean_err_w = (2 * rail.amp_w * edges / (end - begin) + slope * staleness_s
                  + rail.amp_w * (2 * math.pi / rail.period_s) ** 2 * h * h / 12 + quantum_w)
    return mean_err_w * (end - begin)


#: The window lasts at least WINDOW_S and until MIN_SAMPLES samples are inside it, so a loaded
#: machine (a starved sampler thread) lengthens the window instead of failing the sample counts;
#: HANG_S only catches a sampler that stopped.
MIN_SAMPLES = 10
HANG_S = 60.0


def _measure(source, sleep_s=WINDOW_S, rate_hz=RATE_HZ, min_samples=MIN_SAMPLES):
    with PowerSampler(source, rate_hz) as sampler:
        time.sleep(0.15)
        begin = time.monotonic()
        time.sleep(sleep_s)
        while sum(1 for t, _ in list(sampler.samples) if t > begin) <= min_samples:   # +1: strictly inside
            assert time.monotonic() - begin < HANG_S, f"the sampler stopped: {sampler.error}"
            time.sleep(0.02)
        end = time.monotonic()
        time.sleep(0.1)
    return sampler, begin, end


def _observed_rate_hz(sampler, begin, end):
    """The rate from the samples inside the window (a second computation of WindowPower.rate_hz)."""
    ts = [t for t, _ in sampler.samples if begin < t < end]
    return (len(ts) - 1) / (ts[-1] - ts[0])


@pytest.mark.parametrize("layout,sensor,quantum_w", [
    ("jetson-jp5", "ina3221-hwmon", 0.005),
    ("jetson-jp4", "ina3221-iio", 0.001),
])
def test_jetson_sysfs_energy_matches_the_known_input(tmp_path, layout, sensor, quantum_w):
    with SimulatedBoard(tmp_path, layout, update_hz=200) as sim:
        source, _ = open_source(["tegrastats", sensor], str(tmp_path))  # the profile's order
        assert source is not None and source.name == sensor
        sampler, begin, end = _measure(source)
    w = sampler.window(begin, end)
    truth_j = sim.energy_j("VDD_IN", begin, end)
    rail = DEFAULT_RAILS[0]
    assert w.total_label == "module input rail VDD_IN"
    assert w.energy_j == pytest.approx(truth_j, abs=_bound(sampler.samples, begin, end, rail, 2 / sim.update_hz, quantum_w))
    assert w.samples >= MIN_SAMPLES and w.rate_hz == pytest.approx(_observed_rate_hz(sampler, begin, end))
    assert w.rate_hz <= RATE_HZ * 1.2   # never faster than asked (a busy machine only slows it: no bursts)
    # the signal moves: the per-rail means are not a constant read back
    sub = DEFAULT_RAILS[1]
    sub_bound_w = _bound(sampler.samples, begin, end, sub, 2 / sim.update_hz, quantum_w) / (end - begin)
    assert w.rails_w[sub.name] == pytest.approx(sim.energy_j(sub.name, begin, end) / (end - begin), abs=sub_bound_w)


def test_rapl_counter_energy_across_wraparounds(tmp_path):
    # 5 +- 1 W against a 2 J range: the counter wraps about every 0.4 s, twice or more per window
    with SimulatedBoard(tmp_path, "rapl", update_hz=200, rapl_range_uj=2_000_000) as sim:
        source, _ = open_source(["rapl"], str(tmp_path))
        sampler, begin, end = _measure(source)
    w = sampler.window(begin, end)
    truth_j = sim.energy_j("VDD_IN", begin, end)
    assert truth_j > 2 * 2.0  # more than two wraps happened inside the window
    bound = _bound(sampler.samples, begin, end, DEFAULT_RAILS[0], 2 / sim.update_hz, 1e-6)
    assert w.energy_j == pytest.approx(truth_j, abs=bound)
    assert w.total_label.startswith("sum of rails package-0")


@pytest.mark.parametrize("dialect", ["jp4", "jp5", "jp7"])
def test_fake_tegrastats_on_path(tmp_path, monkeypatch, dialect):
    t0 = time.monotonic()
    write_fake_tegrastats(tmp_path / "bin", t0=t0, dialect=dialect)
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ.get("PATH", ""))
    source, tried = open_source(["ina3221-hwmon", "tegrastats"], str(tmp_path / "no-sysfs"))
    assert source is not None and source.name == "tegrastats" and not tried[0]["found"]
    sampler, begin, end = _measure(source, rate_hz=20.0)
    assert sampler.error is None
    w = sampler.window(begin, end)
    rail = DEFAULT_RAILS[0]
    truth_j = rail.energy_j(begin, end, t0)
    assert set(w.rails_w) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}
    assert w.mean_w == pytest.approx(w.rails_w["VDD_IN"])  # VDD_IN is the module input: no double count
    assert w.energy_j == pytest.approx(truth_j, abs=_bound(sampler.samples, begin, end, rail, 0.02, 0.001))
    # one sample per line, at --interval 50 ms: never more than 20 a second (a busy machine only slows it)
    assert w.samples >= MIN_SAMPLES and w.rate_hz <= 20.0 * 1.2, (w.samples, w.rate_hz)
