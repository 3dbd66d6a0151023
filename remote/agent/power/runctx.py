"""What wraps a measured run on the board besides power: device telemetry and, on request, locked
clocks (:class:`.clocks.ClockLock`). Used by the agent's ``bench``. Runs on the board: Python 3.8."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from ....errors import ConfigError

__all__ = ["RunContext"]


class RunContext:
    """``telemetry``: True / False / ``{rate_hz}``. ``lock_clocks``: None / False / True /
    ``{power_mode, sudo}``. ``source``: the open power source (tegrastats lines and NVML fields
    feed the telemetry). A context manager: clocks are locked on entry and restored on exit."""

    def __init__(self, telemetry: Any, lock_clocks: Any, root: str, source: Any = None) -> None:
        if telemetry not in (True, False, None) and not isinstance(telemetry, Mapping):
            raise ConfigError("telemetry must be true, false or {rate_hz}")
        if lock_clocks not in (True, False, None) and not isinstance(lock_clocks, Mapping):
            raise ConfigError("lock_clocks must be true, false or {power_mode, sudo}")
        if isinstance(lock_clocks, Mapping):
            unknown = sorted(set(lock_clocks) - {"power_mode", "sudo"})
            if unknown:
                raise ConfigError("unknown key(s) in lock_clocks: %s" % ", ".join(unknown), "allowed: power_mode, sudo")
        self.root = root
        self.source = source
        self.telemetry_req = telemetry
        self.lock_req = lock_clocks
        self.lock: Any = None
        self.sampler: Any = None

    def __enter__(self) -> "RunContext":
        if self.lock_req:
            from .clocks import ClockLock

            opts: Mapping[str, Any] = self.lock_req if isinstance(self.lock_req, Mapping) else {}
            mode = opts.get("power_mode")
            self.lock = ClockLock(self.root, power_mode=int(mode) if mode is not None else None, sudo=opts.get("sudo"))
            self.lock.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.lock is not None:
            self.lock.__exit__(*exc)

    def start_telemetry(self) -> None:
        if self.telemetry_req is False:
            return
        from .telemetry import TelemetrySampler

        rate = float((self.telemetry_req or {}).get("rate_hz", 5.0)) if isinstance(self.telemetry_req, Mapping) else 5.0
        extra: List[Any] = []
        if self.source is not None and hasattr(self.source, "telemetry"):
            extra.append(self.source.telemetry)
        self.sampler = TelemetrySampler(self.root, rate_hz=rate, extra=extra)
        if self.source is not None and hasattr(self.source, "line_listeners"):
            self.source.line_listeners.append(self.sampler.feed_line)
        self.sampler.start()

    def stop_telemetry(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            if self.source is not None and hasattr(self.source, "line_listeners"):
                try:
                    self.source.line_listeners.remove(self.sampler.feed_line)
                except ValueError:
                    pass

    def report(self, origin_s: float, window: Tuple[float, float],
               power_trace: Optional[List[List[float]]] = None) -> Dict[str, Any]:
        """``telemetry`` and ``clock_lock`` blocks for the result (``clock_lock`` only when asked)."""
        from .. import facts

        out: Dict[str, Any] = {}
        if self.sampler is not None:
            out["telemetry"] = self.sampler.report(origin_s, window, power_trace)
        elif self.telemetry_req is False:
            out["telemetry"] = {"reason": "telemetry was not requested"}
        if self.lock is not None:
            out["clock_lock"] = self.lock.record()
            out["clocks"] = {"locked_during_run": (self.lock.during.get("clocks") or {}).get("locked"),
                             "lock_requested": True, "restored": self.lock.restored}
        else:
            state = facts.clocks_locked(self.root)
            out["clocks"] = {"locked_during_run": state.get("locked"), "lock_requested": False, "state": state}
        return out
