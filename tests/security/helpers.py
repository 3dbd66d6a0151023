"""Shared helpers of the adversarial tier: board processes found by their workdir in /proc,
`sdk` started as a real process, local board profiles."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[2]


def sdk(*args, input=None, timeout=300, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          input=input, timeout=timeout, env=env, cwd=cwd)


_MEASURED = ("import resource, subprocess, sys\n"
             "code = subprocess.run(sys.argv[1:]).returncode\n"
             "sys.stderr.write('\\nmaxrss_kb=%d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(code)\n")


def sdk_with_rss(*args, timeout=300) -> Tuple[subprocess.CompletedProcess, float]:
    """:func:`sdk`, and the peak RSS (MB) of that command and the processes it waited for (not of
    every process this test session ever started)."""
    proc = subprocess.run([sys.executable, "-c", _MEASURED, sys.executable, "-m", "sdk", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    head, _, tail = proc.stderr.rpartition("\nmaxrss_kb=")
    proc.stderr = head
    return proc, int(tail.strip()) / 1024


def start(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sdk", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def error_lines(text: str) -> List[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def board_processes(marker: str) -> List[int]:
    """Live processes (not zombies) whose command line holds ``marker`` (a board's workdir)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmd and _alive(int(d)):
            out.append(int(d))
    return out


def wait_for(marker: str, count: int, proc: subprocess.Popen, timeout_s: float = 120) -> List[int]:
    """Wait until ``count`` agent processes of boards whose workdir path holds ``marker`` run."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = [p for p in board_processes(marker) if _is_agent(p)]
        if len(got) >= count:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"sdk exited {proc.returncode} before the board job started: {proc.communicate()}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the board job did not start: {proc.communicate()}")


def _is_agent(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b".pyz\0bench\0" in cmd


def seconds_until_gone(marker: str, limit_s: float = 15.0) -> float:
    """Seconds until no process with ``marker`` in its command line is left (``inf`` past ``limit_s``:
    what is left is killed, so a failing test leaves nothing behind)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if not board_processes(marker):
            return time.monotonic() - t0
        time.sleep(0.05)
    for p in board_processes(marker):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return float("inf")


def local_board(folder: Path, name: str, workdir: Path, python: str = sys.executable, extra: str = "") -> str:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.toml").write_text(
        f'name = "{name}"\n[connection]\nhost = "local"\npython = "{python}"\nworkdir = "{workdir}"\n{extra}\n')
    return name
