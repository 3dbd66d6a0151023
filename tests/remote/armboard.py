"""The emulated aarch64 test board: a Debian arm64 userland (``scripts/arm_rootfs.sh`` builds and
caches it) behind a REAL OpenSSH server on loopback whose ``ChrootDirectory`` is that userland.

Every command the SDK runs on the board (its shell, ``python3``, the agent zipapp) and every file it
uploads (internal-sftp, in the same chroot) lives inside the arm64 rootfs: the board's Python is
Debian's arm64 ``/usr/bin/python3`` with Debian's NumPy and the aarch64 wheels of onnxruntime and
ai-edge-litert, run by qemu-user through binfmt_misc (the ``F`` flag lets the kernel start it inside
the chroot). A fresh ``proc`` is mounted in the rootfs so the board sees its kernel (the host's
x86-64: that is how the agent tells it runs emulated, :func:`sdk.hostinfo.emulation`). A SIMULATED
``/sys`` (a read-only tmpfs holding only ``devices/system/cpu/{possible,present,online}``, this
machine's CPU count) stands in for the kernel's CPU lists, which qemu-user cannot give: without
them XNNPACK's cpuinfo fails and LiteRT runs the board's ``.tflite`` on its builtin kernels, where a
real board runs XNNPACK. The host's own ``/sys`` is not used: it describes x86 CPUs. The board's CPU
is qemu's model of a Cortex-A76 (a Raspberry Pi 5's core; ``QEMU_CPU``, set by sshd for every session),
not qemu's default ``max``: under ``max`` (qemu 7.2) XNNPACK picks kernels for extensions no such
board has, and their emulation gave wrong int8 results (layout-cdla's INT8 ``.tflite``: output cosine
0.02 vs the host, 0.92-0.995 on the A76 model, as between the host's own XNNPACK and builtin kernels).

:func:`arm_board_unavailable` is the one check the tier goes through: None when the board can be
started, else the reason (no root, no qemu-aarch64-static, binfmt_misc not enabled, the rootfs not
built). Under ``EDGESDK_REQUIRE_ARM=1`` (``.ci/run``) a reason fails the tier instead of skipping it
(:func:`skip_or_fail`).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


from tests.remote.sshd import SSH_KEYGEN, SSHD, Sshd, free_port, keygen, wait_listening

REPO = Path(__file__).resolve().parents[2]
ROOTFS_SCRIPT = REPO / "scripts" / "arm_rootfs.sh"
#: the CPU qemu-user models for the board (see the module's docstring)
BOARD_CPU = "cortex-a76"
REQUIRE_ENV = "EDGESDK_REQUIRE_ARM"


def arm_required() -> bool:
    """Whether the aarch64 tier must run here (``EDGESDK_REQUIRE=...,arm`` as ``.ci/run`` sets it, or
    ``EDGESDK_REQUIRE_ARM=1``: tests/tiers.py)."""
    from tests.tiers import required

    return required("arm")


def _binfmt_reason() -> Optional[str]:
    if shutil.which("qemu-aarch64-static") is None:
        return "qemu-aarch64-static is missing (apt-get install qemu-user-static binfmt-support)"
    entry = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if not entry.exists():
        return ("binfmt_misc has no qemu-aarch64 entry (mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
                "update-binfmts --enable qemu-aarch64)")
    text = entry.read_text()
    if not text.startswith("enabled"):
        return "the binfmt_misc entry qemu-aarch64 is disabled (update-binfmts --enable qemu-aarch64)"
    flags = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("flags:")), "")
    if "F" not in flags:
        return "the binfmt_misc entry qemu-aarch64 lacks the F flag: arm64 binaries cannot start inside a chroot"
    return None


def rootfs_path(build: bool = False) -> Optional[Path]:
    """The cached arm64 rootfs (``scripts/arm_rootfs.sh``); None when it is not built and
    ``build`` is False. Raises RuntimeError with the script's error when a build fails."""
    env = dict(os.environ, EDGESDK_ARM_CACHED_ONLY="" if build else "1")
    out = subprocess.run(["bash", str(ROOTFS_SCRIPT)], capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode == 3 and not build:
        return None
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")] or out.stderr.splitlines()[-1:]
        raise RuntimeError(lines[-1] if lines else f"scripts/arm_rootfs.sh exited {out.returncode}")
    return Path(out.stdout.strip().splitlines()[-1])


def arm_board_unavailable() -> Optional[str]:
    """Why the emulated aarch64 board cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the aarch64 board needs root (sshd ChrootDirectory, mounting proc)"
    if SSHD is None or SSH_KEYGEN is None:
        return "needs the OpenSSH server (sshd) and ssh-keygen: apt-get install openssh-server"
    reason = _binfmt_reason()
    if reason:
        return reason
    try:
        root = rootfs_path(build=arm_required())
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        return f"the arm64 rootfs cannot be built: {exc}"
    if root is None:
        return "the arm64 rootfs is not built: run scripts/arm_rootfs.sh (about 7 minutes, cached afterwards)"
    return None


def skip_or_fail(reason: str) -> None:
    """The ``arm`` tier cannot run here: skip with ``reason``, or fail where the tier is required
    (``EDGESDK_REQUIRE=...,arm`` or ``EDGESDK_REQUIRE_ARM=1``: tests/tiers.py)."""
    from tests.tiers import require_or_skip

    require_or_skip("arm", f"aarch64 board: {reason}")


@dataclass
class ArmBoard:
    """A running emulated board: its sshd, the rootfs, the board's workdir (a path inside the
    rootfs, as the board sees it) and what this board mounted (proc, the simulated sys)."""

    sshd: Sshd
    rootfs: Path
    workdir: str
    proc_mounted: bool
    sys_mounted: bool = False

    def host_path(self, board_path: str) -> Path:
        """Where a path of the board lies on this machine."""
        return self.rootfs / board_path.lstrip("/")

    def stop(self) -> None:
        self.sshd.stop()
        shutil.rmtree(self.host_path(self.workdir), ignore_errors=True)
        if self.proc_mounted:
            subprocess.run(["umount", "-l", str(self.rootfs / "proc")], check=False)
        if self.sys_mounted:
            subprocess.run(["umount", "-l", str(self.rootfs / "sys")], check=False)


def mount_simulated_cpu_lists(rootfs: Path) -> bool:
    """Mount the SIMULATED ``/sys`` in ``rootfs`` (CPUs 0..n-1, n = this machine's count) unless
    one is there; True when this call mounted it."""
    sys_dir = rootfs / "sys"
    cpu = sys_dir / "devices" / "system" / "cpu"
    if (cpu / "possible").exists():
        return False
    sys_dir.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "edgesdk-simulated-sys", str(sys_dir)],
                   check=True)
    cpu.mkdir(parents=True)
    listed = f"0-{max(1, os.cpu_count() or 1) - 1}\n"
    for name in ("possible", "present", "online"):
        (cpu / name).write_text(listed)
    subprocess.run(["mount", "-o", "remount,ro", str(sys_dir)], check=True)
    return True


def start_arm_board(rootfs: Path, authorized: Path, state_dir: Path) -> ArmBoard:
    """Start sshd on loopback with ``ChrootDirectory rootfs`` (sessions and internal-sftp inside
    the arm64 userland), mount a fresh proc and the simulated sys there, and make a per-run workdir."""
    proc_dir = rootfs / "proc"
    mounted = False
    if not (proc_dir / "self").exists():
        subprocess.run(["mount", "-t", "proc", "proc", str(proc_dir)], check=True)
        mounted = True
    sys_mounted = mount_simulated_cpu_lists(rootfs)
    workdir = f"/tmp/edgesdk-arm-{uuid.uuid4().hex[:8]}"
    (rootfs / workdir.lstrip("/")).mkdir(parents=True)
    host_key = keygen(state_dir / "host_ed25519")
    auth = state_dir / "authorized_keys"
    shutil.copy(authorized, auth)
    port = free_port()
    cfg = state_dir / "sshd_config"
    cfg.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"AuthorizedKeysFile {auth}",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "UsePAM no", "StrictModes no", "PidFile none", "PermitRootLogin yes", "AllowTcpForwarding no",
        "X11Forwarding no", "PrintMotd no", "LogLevel ERROR", "MaxStartups 64:30:128", "MaxSessions 64",
        f"ChrootDirectory {rootfs}", "Subsystem sftp internal-sftp",
        f"SetEnv SHLVL=1 QEMU_CPU={BOARD_CPU}", ""]))
    log = state_dir / "sshd.log"
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    srv = Sshd(port=port, dir=state_dir, proc=proc, host_key=host_key, log=log)
    try:
        wait_listening(port, proc, log)
    except RuntimeError:
        srv.stop()
        if mounted:
            subprocess.run(["umount", "-l", str(proc_dir)], check=False)
        if sys_mounted:
            subprocess.run(["umount", "-l", str(rootfs / "sys")], check=False)
        raise
    return ArmBoard(srv, rootfs, workdir, mounted, sys_mounted)


def profile_text(name: str, board: ArmBoard) -> str:
    """A board profile for ``board``: the arm64 python3 inside the rootfs, its workdir."""
    return "\n".join([
        f'name = "{name}"', 'description = "Debian arm64 userland under qemu-user, sshd on loopback (emulated)"', "",
        "[connection]", 'host = "127.0.0.1"', f"port = {board.sshd.port}", 'user = "root"',
        'python = "/usr/bin/python3"', f'workdir = "{board.workdir}"', ""])
