"""Task metrics for the accuracy budget: how well the INT8 model's results agree with FP32's.

A task metric is ``metric(reference, candidate) -> float`` (1.0 = the same results): ``reference``
and ``candidate`` hold, per evaluated sample, the list of the model's output arrays in output order.
``sdk quantize --task-metric`` names one:

- a registered name: ``top1`` (argmax agreement of the first output);
- ``corpus:NAME``: the corpus model's own metric (box mAP, 1-CER, ...; see :mod:`sdk.corpus.tasks`);
- ``FILE.py:FUNCTION``: a function of yours with that signature.

New built-in metrics go in :data:`TASK_METRICS` through :func:`register_task_metric`.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable, Dict, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["TaskMetric", "TASK_METRICS", "register_task_metric", "resolve_task_metric", "top1_agreement"]

TaskMetric = Callable[[Sequence[Sequence[Any]], Sequence[Sequence[Any]]], float]

TASK_METRICS: Dict[str, TaskMetric] = {}

_FORMS = "a registered name (top1), corpus:NAME, or FILE.py:FUNCTION"


def register_task_metric(name: str) -> Callable[[TaskMetric], TaskMetric]:
    def deco(fn: TaskMetric) -> TaskMetric:
        TASK_METRICS[name] = fn
        return fn
    return deco


@register_task_metric("top1")
def top1_agreement(reference: Sequence[Sequence[Any]], candidate: Sequence[Sequence[Any]]) -> float:
    """Share of rows of the first output whose argmax (last axis) is the same in both."""
    same = total = 0
    for ref, cand in zip(reference, candidate):
        r, c = np.asarray(ref[0]), np.asarray(cand[0])
        r = r.reshape(-1, r.shape[-1]) if r.ndim else r.reshape(1, 1)
        c = c.reshape(-1, c.shape[-1]) if c.ndim else c.reshape(1, 1)
        same += int(np.sum(r.argmax(-1) == c.argmax(-1)))
        total += r.shape[0]
    return same / total if total else 1.0


def resolve_task_metric(spec: str) -> TaskMetric:
    """The metric ``spec`` names (see the module docstring); :class:`InputError` with the fix otherwise."""
    if spec in TASK_METRICS:
        return TASK_METRICS[spec]
    kind, sep, rest = spec.partition(":")
    if sep and kind == "corpus":
        return _corpus_metric(rest)
    if sep and kind.endswith(".py"):
        return _script_metric(Path(kind), rest)
    raise InputError(f"unknown task metric {spec!r}", f"use {_FORMS}")


def _corpus_metric(name: str) -> TaskMetric:
    from .. import corpus

    if name not in corpus.names():
        raise InputError(f"no corpus model {name!r} for --task-metric corpus:NAME",
                         f"use one of: {', '.join(corpus.names())}")

    def metric(reference: Sequence[Sequence[Any]], candidate: Sequence[Sequence[Any]]) -> float:
        return corpus.metric(name, reference, candidate)
    return metric


def _script_metric(path: Path, function: str) -> TaskMetric:
    if not path.is_file():
        raise InputError(f"task metric script {str(path)!r} does not exist", "give FILE.py:FUNCTION with an existing file")
    spec = importlib.util.spec_from_file_location(f"_edgesdk_task_metric_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InputError(f"cannot load {str(path)!r} as Python", "give a .py file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: say where it failed, in one line
        raise InputError(f"loading {str(path)!r} failed: {type(exc).__name__}: {exc}", "fix the script") from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise InputError(f"{str(path)!r} has no function {function!r}",
                         "define metric(reference, candidate) -> float there and name it after the colon")
    return fn
