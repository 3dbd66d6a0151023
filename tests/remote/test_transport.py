"""A command stopped by a timeout or an interrupt leaves nothing running on the board: over a real
sshd on loopback (the "board" is this machine, so its processes are visible in /proc) and on the
local subprocess board."""
from __future__ import annotations

import _thread
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.remote.sshd import needs_sshd, trust
from sdk.errors import RemoteCommandError
from sdk.remote.ssh import SSHConnection, _kill_group_script, resolve_host
from sdk.remote.transport import LocalTransport


def running(tag: str) -> list:
    """PIDs of live processes whose command line holds ``tag`` (as ``pgrep -f`` would find)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if tag.encode() in fh.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def wait_gone(tag: str, within_s: float = 15.0) -> list:
    """Poll until no process holds ``tag``; returns the ones left after ``within_s``."""
    deadline = time.monotonic() + within_s
    while running(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    return running(tag)


@pytest.fixture
def tag():
    """A unique tag for a test's processes; any still running afterwards are KILLed (by PID)."""
    value = secrets.token_hex(6)
    yield value
    for pid in running(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def stubborn_command(tmp_path: Path, tag: str) -> str:
    """A group of processes: a loop that ignores TERM (needs the KILL) appending to a marker file,
    and a plain ``sleep`` in the foreground; all carry ``tag`` in their command line."""
    marker = tmp_path / f"marker-{tag}"
    loop = f"trap '' TERM; while :; do echo x >> {shlex.quote(str(marker))}; sleep 0.1; done"
    return f"sh -c {shlex.quote(loop)} stubborn-{tag} & sh -c 'sleep 300' sleeper-{tag}"


def assert_stopped(tmp_path: Path, tag: str) -> None:
    marker = tmp_path / f"marker-{tag}"
    assert marker.exists() and marker.stat().st_size > 0, "the command never started"
    assert wait_gone(tag) == [], "processes of the timed-out command still run on the board"
    size = marker.stat().st_size
    time.sleep(0.3)
    assert marker.stat().st_size == size


def wait_started(tmp_path: Path, tag: str) -> None:
    marker = tmp_path / f"marker-{tag}"
    deadline = time.monotonic() + 20
    while not (marker.exists() and marker.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.05)


@needs_sshd
@pytest.mark.ssh
def test_ssh_timeout_stops_the_command_on_the_board(client_home, sshd, tmp_path, tag):
    trust(client_home, sshd)
    with SSHConnection(resolve_host("127.0.0.1", port=sshd.port), board="loop", retries=0) as conn:
        r = conn.run("echo out; echo err >&2; exit 3", timeout_s=30)
        assert (r.returncode, r.stdout, r.stderr) == (3, b"out\n", b"err\n")   # the PID report is stripped
        with pytest.raises(RemoteCommandError) as exc:
            conn.run(f"{stubborn_command(tmp_path, tag)}; wait", timeout_s=2)
        assert str(exc.value).startswith("loop: command timed out after 2 s: sh -c")
        assert "\n" not in str(exc.value)
        assert_stopped(tmp_path, tag)
        assert conn.run("echo still-alive", timeout_s=30).text() == "still-alive\n"


@pytest.fixture
def default_sigint():
    """SIGINT handled as Python does by default while the test runs. A pytest started as a
    background job of a non-interactive shell (``nohup ... &``) inherits SIGINT ignored, and then
    ``_thread.interrupt_main()`` does nothing: the interrupt test ran into its 120 s timeout that
    way (twice, in fresh-clone runs started so), while it passed in the foreground and in CI."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


@needs_sshd
@pytest.mark.ssh
def test_ssh_interrupt_stops_the_command_on_the_board(client_home, sshd, tmp_path, tag, default_sigint):
    trust(client_home, sshd)
    with SSHConnection(resolve_host("127.0.0.1", port=sshd.port), board="loop", retries=0) as conn:
        started = threading.Event()

        def interrupt() -> None:       # Ctrl-C once the command runs on the board
            wait_started(tmp_path, tag)
            started.set()
            _thread.interrupt_main()

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            conn.run(f"{stubborn_command(tmp_path, tag)}; wait", timeout_s=120)
        assert started.is_set()
        assert_stopped(tmp_path, tag)


def test_local_timeout_stops_the_process_group(client_home, tmp_path, tag):
    with LocalTransport("bench-pc") as tr:
        with pytest.raises(RemoteCommandError, match=r"^bench-pc: command timed out after 2 s: sh -c"):
            tr.run(f"{stubborn_command(tmp_path, tag)}; wait", timeout_s=2)
        assert_stopped(tmp_path, tag)
        r = tr.run("echo out; echo err >&2", timeout_s=30)
        assert (r.stdout, r.stderr) == (b"out\n", b"err\n")


@pytest.mark.skipif(shutil.which("pgrep") is None, reason="needs pgrep (procps) for the fallback")
def test_kill_script_without_a_process_group_stops_the_process_tree(tmp_path, tag):
    """A server that does not setsid: the shell's PID leads no group, so its descendants are found
    with pgrep -P and stopped (TERM, then KILL for the one that ignores TERM)."""
    shell = subprocess.Popen(["sh", "-c", f"{stubborn_command(tmp_path, tag)}; wait"])   # our group, not its own
    try:
        wait_started(tmp_path, tag)
        assert os.getpgid(shell.pid) != shell.pid
        subprocess.run(["sh", "-c", _kill_group_script(shell.pid, grace_s=0.5)], timeout=30, check=True)
        shell.wait(10)
        assert_stopped(tmp_path, tag)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
