"""Device validation: ``validate()`` a model on boards against a spec (GO / NO-GO), with reports.

Sits on top of the core (metrics, spec, robustness, reports), the targets and the remote runner;
nothing below imports it.
"""
from __future__ import annotations

from .checks import CHECKS, CheckResult
from .inputs import Dataset, load_dataset, read_labels
from .robust import run_robustness
from .run import BoardRun, ValidationResult, robustness_on, validate
from .runners import HostRunner, open_runner

__all__ = ["validate", "ValidationResult", "BoardRun", "CheckResult", "CHECKS", "Dataset", "load_dataset",
           "read_labels", "HostRunner", "open_runner", "robustness_on", "run_robustness"]
