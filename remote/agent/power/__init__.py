"""Power sources on the board and the sampler that records them during a run.

Sources are registered by name (the names board profiles list under ``[power] sensors``) and are
tried in the profile's order; the first whose ``probe`` succeeds is used::

    source, tried = open_source(["ina3221-hwmon", "tegrastats"], sysfs_root="/")
    with PowerSampler(source, rate_hz=20) as sampler:
        ...                                   # the measured run
    window = sampler.window(begin_s, end_s)   # trapezoid over samples strictly inside

``simulate`` (a fake Jetson / RAPL sysfs tree and a fake ``tegrastats``) is the simulation for
tests and demos, clearly labelled as such. Runs on the board: Python 3.8, NumPy only.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Type, Union

from ....registry import Registry
from .base import PowerSource, Sample
from .sampler import PowerSampler, WindowPower, power_report

__all__ = ["PowerSource", "Sample", "PowerSampler", "WindowPower", "power_report",
           "source_names", "source_class", "open_source", "probe_all", "register_source", "SOURCES"]

#: Sensor name (as profiles list them under ``[power] sensors``) -> PowerSource subclass.
SOURCES: "Registry[Type[PowerSource]]" = Registry(
    "power sensor",
    {
        "ina3221-hwmon": "sdk.remote.agent.power.ina3221:Ina3221Hwmon",
        "ina3221-iio": "sdk.remote.agent.power.ina3221:Ina3221Iio",
        "tegrastats": "sdk.remote.agent.power.tegrastats:TegrastatsSource",
        "hwmon": "sdk.remote.agent.power.hwmon:HwmonSource",
        "rapl": "sdk.remote.agent.power.hwmon:RaplSource",
        "vcgencmd": "sdk.remote.agent.power.vcgencmd:VcgencmdSource",
    },
    entry_points="edgesdk.power_sources", known_label="known sensors",
)


def register_source(name: str, cls: "Union[str, Type[PowerSource]]") -> None:
    """Register a :class:`PowerSource` subclass (or ``"module:Class"``) under ``name``."""
    SOURCES.register(name, cls)


def source_names() -> List[str]:
    return SOURCES.names()


def source_class(name: str) -> "Type[PowerSource]":
    """The source class registered as ``name``; an unknown name (a :class:`ConfigError`) lists the known names."""
    return SOURCES.load(name)


def open_source(sensors: Optional[Sequence[str]] = None, sysfs_root: Optional[str] = None
                ) -> Tuple[Optional[PowerSource], List[Dict[str, object]]]:
    """The first source among ``sensors`` (default: every registered one, in order) whose probe
    succeeds under ``sysfs_root`` (default ``/``), and what was tried: ``[{sensor, found, why_not}]``."""
    tried: List[Dict[str, object]] = []
    for name in (list(sensors) if sensors else source_names()):
        source = source_class(name)()
        found = bool(source.probe(sysfs_root or "/"))
        tried.append({"sensor": name, "found": found, "why_not": None if found else source.why_not})
        if found:
            return source, tried
    return None, tried


def probe_all(sysfs_root: Optional[str] = None, sensors: Optional[Sequence[str]] = None) -> List[Dict[str, object]]:
    """Probe every source (or ``sensors``): ``[{sensor, found, why_not, measures, rails}]``."""
    out = []
    for name in (list(sensors) if sensors else source_names()):
        source = source_class(name)()
        found = bool(source.probe(sysfs_root or "/"))
        rails: List[str] = []
        if found and name != "tegrastats":  # reading tegrastats means starting it: skip here
            try:
                rails = sorted(source.read())
            except Exception:  # noqa: BLE001 - a probe reports, it does not fail
                rails = []
        out.append({"sensor": name, "found": found, "why_not": None if found else source.why_not,
                    "measures": source.measures, "rails": rails})
    return out


# NVIDIA GPUs (nvidia-ml-py): energy counter or polled power; last, after the board's own sensors.
register_source("nvml", "sdk.remote.agent.power.nvml:NvmlSource")
