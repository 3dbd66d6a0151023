"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``): board power and the energy
counter, plus utilisation, clocks and temperature for telemetry.

Where the GPU has it (Volta and later discrete GPUs), ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver loaded, monotonic) is read and the source is ``kind = "energy"``: the
sampler integrates the counter over the window (difference of the first and last samples inside
it). Otherwise ``nvmlDeviceGetPowerUsage`` (mW) is polled and trapezoid-integrated (``kind =
"power"``), and the result says which was used. NVML's power reading updates only every few tens
of ms (board facts: 15 changes in 1.5 s idle on an H200), so the counter is preferred; on Jetson
(Orin) NVML has no power queries at all and the INA3221 / tegrastats sources apply.

Rails are ``gpu<i>`` per device (J cumulative, or W). Runs on the board: Python 3.8; ``pynvml``
is optional (``pip install nvidia-ml-py``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .base import PowerSource, sum_of

__all__ = ["NvmlSource", "nvml_reason", "INSTALL"]

INSTALL = "pip install nvidia-ml-py"


def _pynvml() -> Any:
    import pynvml  # noqa: PLC0415 - optional, board side

    return pynvml


def nvml_reason(exc: BaseException) -> str:
    """One line saying why NVML cannot be used, from a pynvml error (library missing, no driver,
    no GPU, not supported)."""
    name = type(exc).__name__
    text = str(exc) or name
    if "LibraryNotFound" in name:
        return ("NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine "
                "(pynvml says: %s)" % text)
    if "DriverNotLoaded" in name:
        return "the NVIDIA driver is not loaded (pynvml says: %s)" % text
    if "NoPermission" in name:
        return "no permission to query NVML (pynvml says: %s)" % text
    return "NVML failed: %s (%s)" % (text, name)


class NvmlSource(PowerSource):
    """Every NVIDIA GPU NVML sees (``probe`` picks them); ``read`` returns ``{gpu<i>: J}`` from the
    energy counters when every GPU has one, else ``{gpu<i>: W}`` from the power readings."""

    name = "nvml"
    kind = "energy"
    measures = "NVIDIA GPU board power from NVML (the whole graphics board, not the host)"

    def __init__(self) -> None:
        super().__init__()
        self._nvml: Any = None
        self._handles: List[Any] = []
        self.kind = "energy"  # per instance: "power" when a GPU has no energy counter
        self.devices: List[Dict[str, Any]] = []

    def probe(self, root: str = "/") -> bool:
        self.root = root
        try:
            nv = _pynvml()
        except ImportError:
            self.why_not = "the nvidia-ml-py package is not installed (%s)" % INSTALL
            return False
        try:
            nv.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - pynvml raises NVMLError subclasses built at run time
            self.why_not = nvml_reason(exc)
            return False
        try:
            count = nv.nvmlDeviceGetCount()
            handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # noqa: BLE001
            self.why_not = nvml_reason(exc)
            return False
        if not handles:
            self.why_not = "NVML sees no GPU"
            return False
        self._nvml, self._handles = nv, handles
        return self._pick_kind()

    def _pick_kind(self) -> bool:
        nv = self._nvml
        energy_ok, power_ok = True, True
        self.devices = []
        for i, h in enumerate(self._handles):
            info: Dict[str, Any] = {"index": i, "name": _text(_try(nv.nvmlDeviceGetName, h))}
            info["energy_counter"] = _try(nv.nvmlDeviceGetTotalEnergyConsumption, h) is not None
            info["power_reading"] = _try(nv.nvmlDeviceGetPowerUsage, h) is not None
            energy_ok &= info["energy_counter"]
            power_ok &= info["power_reading"]
            self.devices.append(info)
        if energy_ok:
            self.kind = "energy"
        elif power_ok:
            self.kind = "power"
        else:
            self.why_not = "NVML on this GPU supports neither the energy counter nor power readings (Jetson: use " \
                           "ina3221 or tegrastats)"
            return False
        return True

    def read(self) -> Dict[str, float]:
        nv = self._nvml
        if self.kind == "energy":
            return {"gpu%d" % i: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3 for i, h in enumerate(self._handles)}
        return {"gpu%d" % i: nv.nvmlDeviceGetPowerUsage(h) / 1e3 for i, h in enumerate(self._handles)}

    def total(self, rails: Dict[str, float]) -> Tuple[float, str]:
        return sum_of(rails)

    def telemetry(self) -> Dict[str, float]:
        """GPU utilisation (%), memory-controller utilisation (%), SM and memory clocks (MHz),
        temperature (C), power (W) of each GPU (``gpu<i>_...``; the first GPU also as ``gpu_*``)."""
        nv = self._nvml
        out: Dict[str, float] = {}
        for i, h in enumerate(self._handles):
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            fields = {
                "load_pct": getattr(util, "gpu", None) if util is not None else None,
                "mem_load_pct": getattr(util, "memory", None) if util is not None else None,
                "freq_mhz": _try(nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1)),
                "mem_freq_mhz": _try(nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_MEM", 2)),
                "temp_c": _try(nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
                "nvml_power_w": (lambda mw: mw / 1e3 if mw is not None else None)(_try(nv.nvmlDeviceGetPowerUsage, h)),
            }
            for k, v in fields.items():
                if v is not None:
                    out["gpu%d_%s" % (i, k)] = float(v)
                    if i == 0:
                        out["gpu_" + k] = float(v)
        return out

    def describe(self) -> Dict[str, object]:
        d = super().describe()
        d.update(kind=self.kind, devices=self.devices,
                 integration="energy counter difference (nvmlDeviceGetTotalEnergyConsumption)" if self.kind == "energy"
                 else "trapezoid of polled nvmlDeviceGetPowerUsage (no energy counter on this GPU)")
        return d


def _try(fn: Any, *args: Any) -> Optional[Any]:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED and friends: the field is absent
        return None


def _text(v: Any) -> Optional[str]:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return None if v is None else str(v)
