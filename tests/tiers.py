"""Test tiers: groups of tests that need something from the machine (a real sshd, a TFLite runtime,
g++, the corpus...), and the CI skip gate. Every skip of a tier goes through here.

A tier is *required* when its name is in ``EDGESDK_REQUIRE`` (comma separated, ``all`` for every
tier) or when ``EDGESDK_REQUIRE_<NAME>=1`` is set (``-`` becomes ``_``: ``EDGESDK_REQUIRE_GPU_APIS=1``,
``EDGESDK_REQUIRE_CORPUS=1``, ``EDGESDK_REQUIRE_ARM=1``). A required tier that cannot run FAILS with
the reason; elsewhere it skips with it. ``.ci/run`` requires every tier it installs.

Tests use :func:`require_or_skip` (inside a test or fixture) or :func:`needs` (a mark, for a
decorator or ``pytestmark``). Adding a tier is one line in :data:`TIERS`.

The skip gate (the pytest hooks at the bottom, loaded by ``tests/conftest.py``) lists every skip
with its reason at the end of the run. Under CI (``CI=true`` or ``EDGESDK_REQUIRE`` set) it fails the
session when a skip's reason does not start with one of :data:`HARDWARE_SKIP_PREFIXES` (the machine
has no GPU / no TensorRT libraries, or has them where a test covers their absence): it judges by the
reason only, whatever the test's name. Use :func:`skip_no_gpu` / :func:`skip_no_tensorrt` /
:func:`skip_has_gpu` to skip for hardware reasons.
"""
from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Dict, List, NoReturn, Tuple

import pytest

#: tier name -> what it needs (said in every skip or failure of the tier).
TIERS: Dict[str, str] = {
    "ssh": "a real OpenSSH server and ssh-keygen on loopback (apt: openssh-server openssh-client)",
    "tflite": "a working TFLite runtime (pip: ai-edge-litert, the tflite extra)",
    "py38": "a Python 3.8 with numpy and onnxruntime for the board agent (EDGESDK_TEST_PY38; .ci/run makes one)",
    "gpu-apis": "cuda-python, pycuda and a libcuda link stub (the cuda-ci extra, .ci/pycuda.sh)",
    "trt-bindings": "the TensorRT 8.6/10.x/11.x Python bindings wheels (.ci/tensorrt_bindings.sh, EDGESDK_TRT_BINDINGS)",
    "corpus": "the real-model corpus (python scripts/fetch_corpus.py)",
    "chromium": "a headless Chromium for the PDF reports (apt: chromium)",
    "gxx": "the C/C++ compilers that build the simulated GPU and the stub libraries (apt: gcc g++)",
    "nvrtc": "cuda-python's NVRTC with libnvrtc (the cuda-ci extra: nvidia-cuda-nvrtc)",
    "nvcc": "the CUDA toolkit's nvcc (compiles the .cu kernels; no GPU needed)",
    "tmpfs": "mounting a small tmpfs for the full-disk case (root with CAP_SYS_ADMIN)",
    "arm": "the emulated aarch64 board: qemu-user-static + binfmt_misc and the rootfs of scripts/arm_rootfs.sh",
    "x86-emulated": "qemu-user-static's qemu-x86_64 on an x86-64 host: onnxruntime run as a CPU without VNNI (apt: qemu-user-static)",
}

#: Skip reasons CI accepts: this machine has no GPU / no TensorRT libraries, or has one where the
#: test covers the machine without. Every other skip fails a CI run.
HARDWARE_SKIP_PREFIXES: Tuple[str, ...] = (
    "no GPU on this machine",
    "no GPU:",                               # the ``cuda`` fixture: "no GPU: <probe's reason>"
    "no TensorRT libraries on this machine",
    "this machine has a GPU",
    "this machine has TensorRT",
)


def _env_name(tier: str) -> str:
    return "EDGESDK_REQUIRE_" + tier.upper().replace("-", "_")


def required_tiers() -> List[str]:
    """The tiers this run requires (from the environment, read now)."""
    names = [n.strip() for n in os.environ.get("EDGESDK_REQUIRE", "").split(",") if n.strip()]
    unknown = [n for n in names if n != "all" and n not in TIERS]
    if unknown:
        raise pytest.UsageError(f"EDGESDK_REQUIRE names unknown tier(s) {', '.join(unknown)}; "
                                f"known: {', '.join(TIERS)} (or all)")
    if "all" in names:
        return list(TIERS)
    return [t for t in TIERS if t in names or os.environ.get(_env_name(t)) == "1"]


def required(tier: str) -> bool:
    """Whether ``tier`` must run here (a missing dependency fails it instead of skipping)."""
    if tier not in TIERS:
        raise KeyError(f"unknown test tier {tier!r}; known: {', '.join(TIERS)} (add it to tests/tiers.py TIERS)")
    return tier in required_tiers()


def require_or_skip(tier: str, reason: str) -> NoReturn:
    """The ``tier`` cannot run here because of ``reason``: fail when it is required, else skip."""
    __tracebackhide__ = True   # the skip or failure is reported at the caller
    if required(tier):
        pytest.fail(f"tier '{tier}' is required (EDGESDK_REQUIRE) but cannot run: {reason} -- needs {TIERS[tier]}",
                    pytrace=False)
    pytest.skip(f"tier '{tier}' cannot run here: {reason}")


def needs(tier: str, available: bool, reason: str) -> pytest.MarkDecorator:
    """A mark: when ``available`` is false the test goes through :func:`require_or_skip` at setup."""
    if available:
        return pytest.mark.tier(tier)
    return pytest.mark.tier(tier, missing=reason)


def skip_no_gpu(detail: str) -> NoReturn:
    __tracebackhide__ = True   # the skip or failure is reported at the caller
    pytest.skip(f"no GPU on this machine: {detail}")


def skip_no_tensorrt(detail: str) -> NoReturn:
    __tracebackhide__ = True   # the skip or failure is reported at the caller
    pytest.skip(f"no TensorRT libraries on this machine: {detail}")


def skip_has_gpu(detail: str) -> NoReturn:
    __tracebackhide__ = True   # the skip or failure is reported at the caller
    pytest.skip(f"this machine has a GPU: {detail}")


def hardware_reason(reason: str) -> bool:
    """Whether a skip ``reason`` is one CI accepts (no GPU / no TensorRT libraries here)."""
    return reason.startswith(HARDWARE_SKIP_PREFIXES)


# ------------------------------------------------------------------------------------------------
# pytest hooks (tests/conftest.py loads this module as a plugin): the tier mark, the skip list, the CI gate.

_SKIPS: List[Tuple[str, str]] = []          # (node id, reason) of every skip this session
_BAD_KEY = pytest.StashKey[List[Tuple[str, str]]]()


def ci_gate_on() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1") or bool(os.environ.get("EDGESDK_REQUIRE", "").strip())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tier(name, missing=None): a test of a tier (tests/tiers.py); "
                                       "missing=reason when the tier cannot run here")
    required_tiers()   # an unknown name in EDGESDK_REQUIRE stops the run before any test
    _SKIPS.clear()


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("tier"):
        if mark.kwargs.get("missing"):
            require_or_skip(mark.args[0], mark.kwargs["missing"])


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPS.append((report.nodeid, _reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _SKIPS.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    bad = [(node, why) for node, why in _SKIPS if not hardware_reason(why)]
    session.config.stash[_BAD_KEY] = bad
    if bad and ci_gate_on() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _SKIPS:
        return
    by_reason: Dict[str, List[str]] = {}
    for node, why in _SKIPS:
        by_reason.setdefault(why, []).append(node)
    tr = terminalreporter
    tr.section(f"skips ({len(_SKIPS)}, by reason)")
    for why, nodes in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        mark = "ok (hardware)" if hardware_reason(why) else "NOT HARDWARE"
        tr.write_line(f"{len(nodes):4d}  [{mark}] {why}   e.g. {nodes[0]}")
    bad = config.stash.get(_BAD_KEY, [])
    if bad and ci_gate_on():
        # shown in pytest's last line ("N skipped, 1 skip-gate failed"); an object like a report, for other plugins
        tr.stats.setdefault("skip-gate failed", []).append(SimpleNamespace(skips=bad, when="sessionfinish"))
        tr.write_line(f"CI skip gate FAILED: {len(bad)} skip(s) whose reason is not 'no GPU / no TensorRT "
                      f"libraries on this machine' (tests/tiers.py HARDWARE_SKIP_PREFIXES); install what they "
                      f"need or require their tier", red=True, bold=True)
    elif bad:
        tr.write_line(f"{len(bad)} skip(s) for other reasons than GPU/TensorRT absence: a CI run "
                      f"(CI=true or EDGESDK_REQUIRE set) fails on them", yellow=True)
