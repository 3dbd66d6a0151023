"""The validation spec: budgets and conditions a device must meet, read from TOML.

::

    [run]                       # how the board is measured
    target = "onnxruntime"      # runtime on the board
    precision = "fp32"
    runs = 200                  # minimum measured runs (and min_seconds, MLPerf SingleStream)
    min_seconds = 2.0
    early_stop_percentile = 99  # keep measuring until the p99 has a 95% interval (>= 368 runs)

    [budgets]                   # every key optional; a key left out is not checked
    p50_latency_ms = 5.0        # p50 latency must be <= this
    p99_latency_ms = 20.0
    min_throughput_ips = 100.0  # inferences per second, >=
    max_mean_power_w = 10.0     # mean power during the measured window, <=
    max_energy_mj_per_inference = 50.0
    max_top1_drop = 0.01        # reference top-1 minus board top-1 (fraction: 0.01 = 1 point), <=
    min_top1_agreement = 0.99   # board argmax == reference argmax, fraction
    min_cosine = 0.999          # per output tensor, board vs reference
    min_snr_db = 30.0           # per output tensor
    max_regression_pct = 5.0    # p50 vs the --baseline result: fail when > 5% slower AND the 95% intervals
                                # do not overlap (default 5 when --baseline is given without this key)
    min_speedup_vs_fp32 = 1.5   # INT8 that is not faster fails: the FP32 model (--reference-model) is
                                # measured on the board beside it; FP32 p50 / this p50 must be >= 1.5

    [device]
    power_mode = "MAXN"         # nvpmodel mode name (or number) the board must be in
    clocks_locked = true
    max_temperature_c = 85.0    # the hottest sensor before and after the run, <=

    [device.runtimes]           # version requirements: ">=1.16", "==8.6.1", ">=1.16,<2"
    onnxruntime = ">=1.16"

    [robustness]                # a corruption sweep on the board (see sdk.robustness)
    corruptions = ["blur", "noise", "brightness"]
    severities = [1, 2, 3]
    max_top1_drop = 0.10        # clean top-1 minus corrupted top-1, worst case, <=
    min_cosine = 0.9            # corrupted vs clean outputs, worst case mean, >=
    seed = 0

    [preprocess]                # how image files become inputs (sdk.preprocess.PreprocessSpec)
    size = [224, 224]

Unknown sections or keys raise :class:`~sdk.errors.ConfigError` naming the key and the allowed ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .config import check_keys
from .errors import ConfigError, InputError

__all__ = ["ValidationSpec", "load_spec", "parse_spec", "check_version", "SPEC_KEYS"]

_NUM = (int, float)

#: section -> key -> (accepted Python types, what it means). ``None`` types = a sub-table.
SPEC_KEYS: Dict[str, Dict[str, Tuple[Any, str]]] = {
    "run": {
        "target": ((str,), "runtime on the board"),
        "precision": ((str,), "fp32, fp16, int8"),
        "runs": ((int,), "minimum measured runs"),
        "min_seconds": (_NUM, "minimum measured duration, s"),
        "warmup": ((int,), "warm-up runs"),
        "early_stop_percentile": (_NUM, "keep measuring until this percentile has a 95% interval (99: >= 368 runs)"),
    },
    "budgets": {
        "p50_latency_ms": (_NUM, "p50 latency budget, ms (<=)"),
        "p99_latency_ms": (_NUM, "p99 latency budget, ms (<=)"),
        "min_throughput_ips": (_NUM, "throughput floor, inferences/s (>=)"),
        "max_mean_power_w": (_NUM, "mean power budget, W (<=)"),
        "max_energy_mj_per_inference": (_NUM, "energy per inference budget, mJ (<=)"),
        "max_top1_drop": (_NUM, "reference top-1 minus board top-1, fraction (<=)"),
        "min_top1_agreement": (_NUM, "board argmax agrees with reference, fraction (>=)"),
        "min_cosine": (_NUM, "cosine similarity to the reference per output (>=)"),
        "min_snr_db": (_NUM, "SNR to the reference per output, dB (>=)"),
        "max_regression_pct": (_NUM, "p50 slower than the --baseline result, % (<=; only when the 95% intervals "
                                     "do not overlap)"),
        "min_speedup_vs_fp32": (_NUM, "FP32 model's p50 / this model's p50 on the same board (>=)"),
    },
    "device": {
        "power_mode": ((str, int), "required power mode (name or number)"),
        "clocks_locked": ((bool,), "clocks must be locked (true) or not (false)"),
        "max_temperature_c": (_NUM, "temperature ceiling, degrees C (<=)"),
        "runtimes": (None, "table: runtime name -> version requirement"),
    },
    "robustness": {
        "corruptions": ((list,), "corruption names"),
        "severities": ((list,), "severities 1-5"),
        "max_top1_drop": (_NUM, "worst clean-minus-corrupted top-1, fraction (<=)"),
        "min_cosine": (_NUM, "worst mean cosine of corrupted vs clean outputs (>=)"),
        "seed": ((int,), "seed of the random corruptions"),
        "max_samples": ((int,), "use at most this many inputs for the sweep"),
    },
    "preprocess": {},  # checked by PreprocessSpec.from_dict
}


@dataclass(frozen=True)
class ValidationSpec:
    """A parsed validation spec. Each attribute is one section as a plain dict (missing keys are
    not checked); ``runtimes`` maps a runtime name to a version requirement; ``preprocess`` is a
    :class:`~sdk.preprocess.PreprocessSpec` or None. ``source`` is the file it came from."""

    run: Dict[str, Any] = field(default_factory=dict)
    budgets: Dict[str, float] = field(default_factory=dict)
    device: Dict[str, Any] = field(default_factory=dict)
    runtimes: Dict[str, str] = field(default_factory=dict)
    robustness: Optional[Dict[str, Any]] = None
    preprocess: Any = None
    source: Optional[str] = None

    @property
    def target(self) -> str:
        return str(self.run.get("target", "onnxruntime"))

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"source": self.source, "run": dict(self.run), "budgets": dict(self.budgets),
                               "device": {**self.device, "runtimes": dict(self.runtimes)}}
        if self.robustness is not None:
            out["robustness"] = dict(self.robustness)
        if self.preprocess is not None:
            out["preprocess"] = self.preprocess.to_dict()
        return out


def _toml_loads(text: str, where: str) -> Dict[str, Any]:
    from .config import loads_toml

    return loads_toml(text, where, "reading TOML specs")


def load_spec(path: Union[str, Path]) -> ValidationSpec:
    """Read and check a spec file; :class:`ConfigError` on unknown keys or bad values."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"spec file '{p}' does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read spec file '{p}': {exc}", "a spec is a UTF-8 TOML file") from exc
    return parse_spec(_toml_loads(text, f"spec '{p}'"), source=str(p))


def _allowed(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys))


def parse_spec(data: Mapping[str, Any], source: Optional[str] = None) -> ValidationSpec:
    """Check a spec given as nested dicts (what TOML gives) and return a :class:`ValidationSpec`."""
    where = f"spec '{source}'" if source else "spec"
    check_keys(data, SPEC_KEYS, where + ": unknown section [{key}]", "allowed sections")
    sections: Dict[str, Dict[str, Any]] = {}
    for name, table in data.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: '{name}' must be a table ([{name}])")
        if name != "preprocess":
            sections[name] = _check_section(name, table, SPEC_KEYS[name], where)

    budgets = {k: float(v) for k, v in sections.get("budgets", {}).items()}
    for k, v in budgets.items():
        if v < 0:
            raise ConfigError(f"{where}: [budgets] {k} must be >= 0, not {v}")
    device = dict(sections.get("device", {}))
    runtimes = {str(k): str(v) for k, v in device.pop("runtimes", {}).items()}
    for name, req in runtimes.items():
        _parse_requirement(req, f"{where}: [device.runtimes] {name}")
    run = dict(sections.get("run", {}))
    if run.get("runs", 1) < 1:
        raise ConfigError(f"{where}: [run] runs must be >= 1")
    if run.get("min_seconds", 0) < 0:
        raise ConfigError(f"{where}: [run] min_seconds must be >= 0")
    if "early_stop_percentile" in run and not 0 < run["early_stop_percentile"] < 100:
        raise ConfigError(f"{where}: [run] early_stop_percentile must be in (0, 100)")
    robustness = sections.get("robustness")
    if robustness is not None:
        robustness = _check_robustness(robustness, where)
    preprocess = None
    if "preprocess" in data:
        from .preprocess import PreprocessSpec

        preprocess = PreprocessSpec.from_dict(dict(data["preprocess"]))
    return ValidationSpec(run=run, budgets=budgets, device=device, runtimes=runtimes, robustness=robustness,
                          preprocess=preprocess, source=source)


def _check_section(name: str, table: Mapping[str, Any], allowed: Mapping[str, Any], where: str) -> Dict[str, Any]:
    """The keys of one ``[name]`` table, checked against ``allowed`` (key -> (types, doc))."""
    check_keys(table, allowed, where + ": unknown key '{key}' in [" + name + "]", "allowed keys")
    out: Dict[str, Any] = {}
    for key, value in table.items():
        types, _doc = allowed[key]
        if types is None:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}: [{name}] {key} must be a table")
            out[key] = dict(value)
            continue
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{where}: [{name}] {key} must be a number, not {value!r}")
        if not isinstance(value, types):
            want = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{where}: [{name}] {key} must be {want}, not {value!r}")
        out[key] = value
    return out


def _check_robustness(section: Dict[str, Any], where: str) -> Dict[str, Any]:
    from .robustness import CORRUPTIONS, parse_severities

    out = dict(section)
    names = out.get("corruptions")
    if names is not None:
        for n in names:
            if n not in CORRUPTIONS:
                raise ConfigError(f"{where}: [robustness] unknown corruption '{n}'",
                                  f"allowed: {_allowed(CORRUPTIONS)}")
    if "severities" in out:
        out["severities"] = parse_severities(out["severities"])
    return out


# -- version requirements ------------------------------------------------------------------------
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<|~=)?\s*([0-9][0-9A-Za-z.*+-]*)\s*$")


def _parse_requirement(req: str, where: str) -> List[Tuple[str, str]]:
    clauses = []
    for part in req.split(","):
        m = _CLAUSE.match(part)
        if not m:
            raise ConfigError(f"{where}: bad version requirement '{req}'", "write e.g. '>=1.16', '==8.6.1', '>=1.16,<2'")
        clauses.append((m.group(1) or "==", m.group(2)))
    return clauses


def _version_tuple(v: str) -> Tuple[int, ...]:
    parts = []
    for piece in re.split(r"[.+-]", v):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def check_version(version: Optional[str], requirement: str) -> bool:
    """True when ``version`` (e.g. "1.17.3") meets ``requirement`` (">=1.16,<2", "==1.17.*",
    "~=1.17"). Numeric parts only; a missing version never meets a requirement."""
    if not version:
        return False
    have = _version_tuple(version)
    for op, want_text in _parse_requirement(requirement, "version requirement"):
        if want_text.endswith(".*"):
            prefix = _version_tuple(want_text[:-2])
            ok = have[:len(prefix)] == prefix
            if (op == "==" and not ok) or (op == "!=" and ok):
                return False
            continue
        want = _version_tuple(want_text)
        n = max(len(have), len(want))
        a, b = have + (0,) * (n - len(have)), want + (0,) * (n - len(want))
        ok = {
            ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b, "==": a == b, "!=": a != b,
            "~=": a >= b and have[:max(1, len(want) - 1)] == want[:max(1, len(want) - 1)],
        }[op]
        if not ok:
            return False
    return True
