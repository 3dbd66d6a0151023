"""The aarch64 tier's one availability check: a missing piece is a reason, and under
``EDGESDK_REQUIRE_ARM=1`` that reason fails the tier instead of skipping it."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.remote import armboard


def test_missing_qemu_is_a_reason(monkeypatch):
    real = shutil.which
    monkeypatch.setattr(armboard.shutil, "which", lambda name: None if name == "qemu-aarch64-static" else real(name))
    monkeypatch.setattr(armboard.os, "geteuid", lambda: 0)
    reason = armboard.arm_board_unavailable()
    assert reason is not None and "qemu-aarch64-static is missing" in reason and "apt-get install" in reason


def test_not_root_is_a_reason(monkeypatch):
    monkeypatch.setattr(armboard.os, "geteuid", lambda: 1000)
    assert "needs root" in armboard.arm_board_unavailable()


def test_required_fails_instead_of_skipping(monkeypatch):
    monkeypatch.setenv("EDGESDK_REQUIRE", "")
    monkeypatch.setenv("EDGESDK_REQUIRE_ARM", "1")
    assert armboard.arm_required()
    with pytest.raises(pytest.fail.Exception, match="tier 'arm' is required .* cannot run: aarch64 board: why"):
        armboard.skip_or_fail("why")
    monkeypatch.setenv("EDGESDK_REQUIRE_ARM", "0")
    assert not armboard.arm_required()
    with pytest.raises(pytest.skip.Exception, match="aarch64 board: why"):
        armboard.skip_or_fail("why")
    monkeypatch.setenv("EDGESDK_REQUIRE", "ssh,arm")
    assert armboard.arm_required()


def test_rootfs_script_cached_only_does_not_build(monkeypatch, tmp_path):
    """``EDGESDK_ARM_CACHED_ONLY=1`` with an empty cache: no build, exit 3 -> None (when the host can
    run arm64 at all; otherwise the script's error line)."""
    if os.geteuid() != 0 or armboard._binfmt_reason() or shutil.which("mmdebstrap") is None:
        with pytest.raises(RuntimeError, match=r"^error: "):
            monkeypatch.setenv("EDGESDK_CI_CACHE", str(tmp_path))
            armboard.rootfs_path(build=False)
        return
    monkeypatch.setenv("EDGESDK_CI_CACHE", str(tmp_path))
    assert armboard.rootfs_path(build=False) is None
    assert not list(tmp_path.iterdir())
