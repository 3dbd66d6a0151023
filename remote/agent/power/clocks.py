"""Lock a Jetson's clocks for a run and put them back afterwards: ``nvpmodel`` + ``jetson_clocks``.

:class:`ClockLock` (a context manager) records the state before (``nvpmodel -q`` / the status
file, and whether clocks are locked per :func:`..facts.clocks_locked`), optionally switches the
power mode (``nvpmodel -m N``), saves the clock settings (``jetson_clocks --store FILE``), pins
them (``jetson_clocks``), and on exit restores them (``jetson_clocks --restore FILE``, then
``nvpmodel -m <previous>`` if the mode was changed). Every command, its exit status and output
are recorded in :meth:`ClockLock.record`. Both tools need root: without it they run through
``sudo -n`` (no password prompt; a missing sudo rule fails with the tool's message). Runs on the
board: Python 3.8, standard library.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Optional

from ....errors import PowerError

__all__ = ["ClockLock"]


class ClockLock:
    """Lock clocks on entry, restore on exit (see the module docstring). ``power_mode``: the
    nvpmodel mode id to run in (None: keep the current one). ``sudo``: prefix the tools with
    ``sudo -n`` (default: when not root). ``root``: the sysfs root for the state checks."""

    def __init__(self, root: str = "/", power_mode: Optional[int] = None, sudo: Optional[bool] = None,
                 timeout_s: float = 60.0) -> None:
        self.root = root or "/"
        self.power_mode = power_mode
        self.sudo = (os.geteuid() != 0) if sudo is None else bool(sudo)
        self.timeout_s = timeout_s
        self.commands: List[Dict[str, Any]] = []
        self.before: Dict[str, Any] = {}
        self.during: Dict[str, Any] = {}
        self.after: Dict[str, Any] = {}
        self.restored: Optional[bool] = None
        self._store: Optional[str] = None
        self._changed_mode_from: Optional[int] = None

    def _tool(self, name: str) -> str:
        exe = shutil.which(name)
        if exe is None:
            raise PowerError(f"--lock-clocks needs '{name}' on PATH (a Jetson with JetPack)",
                             "run without --lock-clocks on boards that are not Jetsons")
        return exe

    def _run(self, argv: List[str], check: bool = True) -> str:
        full = (["sudo", "-n"] if self.sudo else []) + argv
        try:
            proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                  timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            self.commands.append({"argv": full, "returncode": None, "output": str(exc)})
            raise PowerError(f"'{' '.join(full)}' could not run: {exc}") from exc
        self.commands.append({"argv": full, "returncode": proc.returncode, "output": proc.stdout.strip()[-2000:]})
        if check and proc.returncode != 0:
            raise PowerError(f"'{' '.join(full)}' failed ({proc.returncode}): "
                             f"{(proc.stdout.strip().splitlines() or ['no output'])[-1]}",
                             "clock locking needs root: run the agent as root or allow nvpmodel and jetson_clocks "
                             "in sudoers (NOPASSWD)")
        return proc.stdout

    def _state(self) -> Dict[str, Any]:
        from ..facts import clocks_locked, power_mode

        return {"clocks": clocks_locked(self.root), "power_mode": power_mode(self.root)}

    def __enter__(self) -> "ClockLock":
        nvpmodel, jetson_clocks = self._tool("nvpmodel"), self._tool("jetson_clocks")
        self.before = self._state()
        mode = (self.before.get("power_mode") or {}).get("id")
        fd, self._store = tempfile.mkstemp(prefix="edgesdk-jetson-clocks-", suffix=".conf")
        os.close(fd)
        try:
            if self.power_mode is not None and self.power_mode != mode:
                self._run([nvpmodel, "-m", str(int(self.power_mode))])
                self._changed_mode_from = mode
            self._run([jetson_clocks, "--store", self._store])
            self._run([jetson_clocks])
        except PowerError:
            self._restore()
            raise
        self.during = self._state()
        return self

    def _restore(self) -> None:
        ok = True
        if self._store is not None and os.path.exists(self._store) and os.path.getsize(self._store) > 0:
            try:
                self._run([self._tool("jetson_clocks"), "--restore", self._store])
            except PowerError:
                ok = False
        if self._changed_mode_from is not None:
            try:
                self._run([self._tool("nvpmodel"), "-m", str(int(self._changed_mode_from))])
            except PowerError:
                ok = False
        if self._store is not None and os.path.exists(self._store):
            os.unlink(self._store)
        self.restored = ok

    def __exit__(self, *exc: Any) -> None:
        self._restore()
        self.after = self._state()

    def record(self) -> Dict[str, Any]:
        """The ``clock_lock`` block of a result: states before / during / after, the commands run,
        whether the previous settings were restored."""
        return {"requested": True, "power_mode_requested": self.power_mode, "before": self.before,
                "during": self.during, "after": self.after, "restored": self.restored, "sudo": self.sudo,
                "commands": self.commands}
