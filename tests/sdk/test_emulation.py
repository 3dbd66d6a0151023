"""Emulation is told from what the process sees (``sdk.hostinfo.emulation``: its own machine vs the
kernel's and the CPU's), and an emulated board's timings never judge its speed (the validation skips
every speed and power check with the emulation named; the summary's latency columns stay empty)."""
from __future__ import annotations

import platform

from sdk.hostinfo import emulation
from sdk.validation.checks import FAIL, PASS, SKIP, CheckResult
from sdk.validation.run import TIMING_CHECKS, emulated_timing_checks


def _proc(tmp_path, arch=None, cpuinfo=None):
    if arch is not None:
        (tmp_path / "sys" / "kernel").mkdir(parents=True)
        (tmp_path / "sys" / "kernel" / "arch").write_text(arch + "\n")
    if cpuinfo is not None:
        (tmp_path / "cpuinfo").write_text(cpuinfo)
    return str(tmp_path)


def test_native_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert emulation(_proc(tmp_path, "x86_64")) is None
    assert emulation(str(tmp_path / "missing")) is None      # nothing says otherwise


def test_arm_process_on_an_x86_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    emu = emulation(_proc(tmp_path, "x86_64"))
    assert emu is not None and emu["process_machine"] == "aarch64" and emu["kernel_machine"] == "x86_64"
    assert "not this board's speed" in emu["note"]


def test_arm_process_seeing_an_intel_cpu(tmp_path, monkeypatch):
    """Older kernels have no /proc/sys/kernel/arch: the CPU's vendor tells it."""
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    emu = emulation(_proc(tmp_path, cpuinfo="processor\t: 0\nvendor_id\t: GenuineIntel\n"))
    assert emu is not None and "GenuineIntel" in emu["evidence"]
    other = tmp_path / "arm"
    other.mkdir()
    assert emulation(_proc(other, cpuinfo="processor\t: 0\nCPU implementer\t: 0x41\n")) is None


def test_timing_checks_skip_under_emulation():
    checks = [CheckResult("latency.p50", FAIL, 900.0, 10.0, "ms", "<="), CheckResult("accuracy.cosine", PASS, 1.0, 0.99),
              CheckResult("power.mean", PASS, 3.0, 5.0, "W", "<=")]
    assert emulated_timing_checks(checks, None) is checks
    out = emulated_timing_checks(checks, {"kind": "user-mode emulation (qemu-user)", "note": "not the board"})
    verdicts = {c.name: c.verdict for c in out}
    assert verdicts == {"latency.p50": SKIP, "accuracy.cosine": PASS, "power.mean": SKIP}
    assert "emulated board" in out[0].reason and out[0].measured == 900.0
    assert {"latency.p50", "latency.p99", "throughput", "speedup.vs_fp32"} <= set(TIMING_CHECKS)


def test_push_output_and_report_say_emulated():
    from types import SimpleNamespace

    from sdk.cli.remote_cmds import emulated_note
    from sdk.reports.perf_html import bench_html

    emu = {"kind": "user-mode emulation (qemu-user)", "process_machine": "aarch64", "kernel_machine": "x86_64"}
    assert "not the board's speed" in emulated_note(SimpleNamespace(device={"emulation": emu}))
    assert emulated_note(SimpleNamespace(device={"emulation": None})) == ""
    page = bench_html([{"board": {"name": "arm"}, "device": {"emulation": emu}, "latency_ms": {"count": 3, "p50": 1.0}}])
    assert "EMULATED" in page and ("not the board&#x27;s speed" in page or "not the board's speed" in page)
