"""Power sources against fake sysfs trees (SIMULATION: sdk.remote.agent.power.simulate), read at
fixed simulated times so every value is exact; RAPL wraparound; the window arithmetic."""
from __future__ import annotations

import pytest

from sdk.errors import ConfigError
from sdk.remote.agent.power import PowerSampler, open_source, probe_all, source_class, source_names
from sdk.remote.agent.power.base import PowerSource
from sdk.remote.agent.power.hwmon import RaplSource, Unwrapper
from sdk.remote.agent.power.sampler import power_report, window_power
from sdk.remote.agent.power.simulate import SimulatedBoard


def _tree(tmp_path, layout, **kw):
    sim = SimulatedBoard(tmp_path / layout, layout, **kw)
    sim.write_static()
    return sim


def test_registry_names_match_the_board_profiles():
    assert source_names()[:6] == ["ina3221-hwmon", "ina3221-iio", "tegrastats", "hwmon", "rapl", "vcgencmd"]
    for name in source_names():
        assert issubclass(source_class(name), PowerSource) and source_class(name).name == name
    with pytest.raises(ConfigError, match="known sensors: ina3221-hwmon"):
        source_class("ina9999")


@pytest.mark.parametrize("layout,source", [("jetson-jp5", "ina3221-hwmon"), ("jetson-jp4", "ina3221-iio")])
def test_ina3221_reads_exact_rails(tmp_path, layout, source):
    sim = _tree(tmp_path, layout)
    t = sim.t0 + 0.5  # a quarter period: sin = 1
    sim.write_dynamic(t)
    src, tried = open_source([source], str(sim.root))
    assert src is not None and src.name == source and tried == [{"sensor": source, "found": True, "why_not": None}]
    rails = src.read()
    assert set(rails) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}
    for rail, watts in rails.items():  # 1 mA x 5 V (JP5) or 1 mW (JP4) resolution
        assert watts == pytest.approx(sim.watts(rail, t), abs=0.006)
    assert rails["VDD_IN"] == pytest.approx(6.0, abs=0.006)
    total, label = src.total(rails)
    assert total == rails["VDD_IN"] and label == "module input rail VDD_IN"  # sub-rails are not added


def test_ina3221_hwmon_skips_nc_and_in7_and_finds_chips_by_name(tmp_path):
    sim = _tree(tmp_path, "jetson-jp5", rails=SimulatedBoard(tmp_path, "jetson-jp5").rails[:2])  # ch3 = NC
    sim.write_dynamic()
    # a second chip (AGX Orin has 1-0041) at another hwmonN: found by scanning names, not by number
    chip2 = sim.p("/sys/bus/i2c/devices/1-0041")
    (chip2 / "hwmon" / "hwmon7").mkdir(parents=True)
    (chip2 / "name").write_text("ina3221\n")
    for k, (label, mv, ma) in enumerate([("VDDQ_VDD2_1V8AO", 1800, 100), ("NC", 0, 0), ("VDD_CPU_CV", 5000, 200)], 1):
        (chip2 / "hwmon/hwmon7" / f"in{k}_label").write_text(label + "\n")
        (chip2 / "hwmon/hwmon7" / f"in{k}_input").write_text(f"{mv}\n")
        (chip2 / "hwmon/hwmon7" / f"curr{k}_input").write_text(f"{ma}\n")
    src, _ = open_source(["ina3221-hwmon"], str(sim.root))
    rails = src.read()
    assert set(rails) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDDQ_VDD2_1V8AO", "VDD_CPU_CV"}  # no NC, no in7
    assert rails["VDDQ_VDD2_1V8AO"] == pytest.approx(0.18)
    assert rails["VDD_CPU_CV"] == pytest.approx(1.0)


def test_open_source_follows_the_profile_order_and_reports_what_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no tegrastats / vcgencmd here
    sim = _tree(tmp_path, "jetson-jp4")
    sim.write_dynamic()
    src, tried = open_source(["ina3221-hwmon", "tegrastats", "ina3221-iio"], str(sim.root))
    assert src.name == "ina3221-iio"
    assert [t["sensor"] for t in tried] == ["ina3221-hwmon", "tegrastats", "ina3221-iio"]
    assert "ina3221" in tried[0]["why_not"] and "PATH" in tried[1]["why_not"]
    none, tried = open_source(["rapl", "vcgencmd"], str(tmp_path / "nothing"))
    assert none is None and all(t["why_not"] for t in tried)
    found = {p["sensor"]: p for p in probe_all(str(sim.root))}
    assert found["ina3221-iio"]["found"] and found["ina3221-iio"]["rails"] == ["VDD_CPU_GPU_CV", "VDD_IN", "VDD_SOC"]
    assert not found["rapl"]["found"]


def test_generic_hwmon_power_input_in_microwatts(tmp_path):
    sim = _tree(tmp_path, "hwmon")
    t = sim.t0 + 1.5  # sin = -1
    sim.write_dynamic(t)
    src, _ = open_source(["hwmon"], str(sim.root))
    assert src.kind == "power" and src.read() == {"simpower/VDD_IN": pytest.approx(4.0)}


def test_generic_hwmon_energy_input_is_a_counter(tmp_path):
    chip = tmp_path / "sys/class/hwmon/hwmon2"
    chip.mkdir(parents=True)
    (chip / "name").write_text("amd_energy\n")
    (chip / "energy1_label").write_text("Esocket0\n")
    (chip / "energy1_input").write_text("1000000\n")  # uJ
    src, _ = open_source(["hwmon"], str(tmp_path))
    assert src.kind == "energy" and src.read() == {"amd_energy/Esocket0": 1.0}
    (chip / "energy1_input").write_text("3500000\n")
    assert src.read() == {"amd_energy/Esocket0": 3.5}


def test_rapl_wraparound_adds_max_energy_range(tmp_path):
    sim = _tree(tmp_path, "rapl", rapl_range_uj=2_000_000)
    f = sim.p("/sys/class/powercap/intel-rapl:0/energy_uj")
    f.write_text("1999000\n")
    src, _ = open_source(["rapl"], str(sim.root))
    assert isinstance(src, RaplSource) and list(src.read()) == ["package-0"]  # sub-zone :0:0 is not a package
    f.write_text("500\n")  # wrapped: 1000 uJ to the top, then 500
    assert src.read()["package-0"] == pytest.approx((2_000_000 + 500) / 1e6)
    f.write_text("1000500\n")
    assert src.read()["package-0"] == pytest.approx((2_000_000 + 1_000_500) / 1e6)
    f.write_text("10\n")  # wrapped again
    assert src.read()["package-0"] == pytest.approx((4_000_000 + 10) / 1e6)


def test_rapl_unreadable_says_why(tmp_path):
    z = tmp_path / "sys/class/powercap/intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")  # energy_uj missing: what non-root sees since Linux 5.10
    src = RaplSource()
    assert not src.probe(str(tmp_path)) and "root only" in src.why_not


def test_unwrapper_without_range_treats_a_drop_as_a_restart():
    u = Unwrapper(None)
    assert [u(x) for x in (5, 10, 2, 4)] == [5, 10, 12, 14]


class _Fixed(PowerSource):
    name = "fixed"
    measures = "test rails"

    def probe(self, root="/"):
        return True

    def read(self):
        return {}


def test_window_uses_only_samples_strictly_inside_and_integrates_by_trapezoid():
    # a linear ramp P = t W: the trapezoid is exact; samples at 0 and 10 lie ON the window edges
    samples = [(float(t), {"A": float(t), "B": 1.0}) for t in range(11)]
    w = window_power(_Fixed(), [s for s in samples if 0.0 < s[0] < 10.0], duration_s=10.0)
    assert w.samples == 9 and w.rails_w["A"] == pytest.approx(5.0) and w.rails_w["B"] == 1.0
    assert w.mean_w == pytest.approx(6.0) and w.energy_j == pytest.approx(60.0) and w.rate_hz == pytest.approx(1.0)


def test_energy_counter_window_uses_the_counter_difference():
    src = _Fixed()
    src.kind = "energy"
    samples = [(1.0, {"pkg": 100.0}), (2.0, {"pkg": 103.0}), (3.0, {"pkg": 107.0})]
    w = window_power(src, samples, duration_s=4.0)
    assert w.mean_w == pytest.approx(3.5) and w.energy_j == pytest.approx(14.0)
    assert window_power(src, samples[:1], 4.0) is None  # one counter reading is no energy


def test_power_report_blocks_and_null_reasons():
    sampler = PowerSampler(_Fixed(), rate_hz=10)
    sampler.samples = [(t / 10, {"VDD_IN": 2.0 if t < 10 else 5.0}) for t in range(31)]
    power, energy = power_report(sampler, run_window=(1.0, 3.0), idle_window=(0.0, 0.95), count=100)
    assert power["mean_w"] == pytest.approx(5.0) and power["idle_w"] == pytest.approx(2.0)
    assert power["source"] == "fixed" and power["rails"] == {"VDD_IN": pytest.approx(5.0)}
    assert power["samples"] == 19 and power["rate_hz"] == pytest.approx(10.0)
    assert energy["total"] == pytest.approx(5.0 * 2.0 / 100 * 1e3)  # mJ per inference
    assert energy["above_idle"] == pytest.approx(3.0 * 2.0 / 100 * 1e3)
    empty, e2 = power_report(sampler, run_window=(10.0, 11.0), idle_window=None, count=100)
    assert empty["mean_w"] is None and "0 power samples" in empty["reason"] and e2["total"] is None
