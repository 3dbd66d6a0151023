"""``run_robustness()``: the corruption sweep of :mod:`sdk.robustness` on a host target or a board,
with the spec's ``[robustness]`` limits evaluated as checks (``robustness.top1_drop``,
``robustness.cosine``)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

from ..errors import InputError
from .checks import CHECKS, FAIL, PASS, CheckResult
from .inputs import load_dataset
from .run import BoardRun, robustness_on
from .runners import HostRunner, open_runner

__all__ = ["run_robustness"]


def run_robustness(
    model: Any,
    data: Union[str, os.PathLike],
    *,
    target: Optional[str] = None,
    board: Optional[str] = None,
    labels: Optional[Union[str, os.PathLike]] = None,
    corruptions: Optional[Union[str, Sequence[str]]] = None,
    severities: Optional[Union[str, Sequence[int]]] = None,
    seed: Optional[int] = None,
    limit: Optional[int] = None,
    spec: Any = None,
    preprocess: Any = None,
    input_values: Any = None,
) -> Dict[str, Any]:
    """Sweep ``model`` over the inputs of ``data`` on a host ``target`` (default: the one that runs the model's format) or
    a ``board``. Settings not given come from the spec's ``[robustness]`` section, then the
    defaults (all corruptions, severities 1-5, seed 0). ``input_values``: values of inputs that are
    not data (``{"gain": 2.0}`` or ``["gain=2"]``), fed unchanged with every corrupted sample.
    Returns a dict: ``model``, ``data``, ``runner``, ``robustness`` (the sweep), ``checks`` and
    ``verdict`` (pass/fail)."""
    from ..model import Model
    from ..spec import ValidationSpec, load_spec

    if target and board:
        raise InputError("give --target or --board, not both")
    if spec is not None and not isinstance(spec, ValidationSpec):
        spec = load_spec(spec)
    rob = dict((spec.robustness if spec is not None else None) or {})
    corruptions = _first_given(corruptions, rob.get("corruptions"))
    severities = _first_given(severities, rob.get("severities", "1-5"))
    seed = int(_first_given(seed, rob.get("seed", 0)))
    limit = _first_given(limit, rob.get("max_samples"))
    m = model if isinstance(model, Model) else Model.load(model)
    if preprocess is None and spec is not None:
        preprocess = spec.preprocess
    from ..targets.measure import as_values

    values = as_values(input_values, m.inputs)
    ds = load_dataset(data, m.inputs, labels=labels, preprocess=preprocess, values=values)
    runner = HostRunner(target) if board is None else open_runner(board)   # no target: the model's format's
    with runner as r:
        board_target = (spec.run.get("target") if spec is not None else None) if board is not None else None
        result = robustness_on(r, m, ds, corruptions=corruptions, severities=severities, seed=seed, limit=limit,
                               target=board_target)
    run = BoardRun(board=getattr(runner, "name", str(board or target)), robustness=result.to_dict())
    checks = _robustness_checks(run, spec, rob)
    return {
        "schema": "edgesdk.robustness/1",
        "verdict": FAIL if any(c.verdict == FAIL for c in checks) else PASS,
        "model": {"path": str(m.origin) if m.origin else None, "name": m.name, "sha256": m.sha256},
        "data": ds.describe(),
        "runner": run.board,
        "robustness": result.to_dict(),
        "checks": [c.to_dict() for c in checks],
    }


def _first_given(value: Any, default: Any) -> Any:
    return value if value is not None else default


def _robustness_checks(run: BoardRun, spec: Any, rob: Dict[str, Any]) -> List[CheckResult]:
    """The spec's ``[robustness]`` limits evaluated on ``run`` as checks."""
    checks: List[CheckResult] = []
    for chk in CHECKS.values():
        if chk.section == "robustness" and chk.key in rob:
            verdict, measured, reason = chk.fn(run, spec, rob[chk.key])
            checks.append(CheckResult(chk.name, verdict, measured, rob[chk.key], chk.unit, chk.op, reason))
    return checks
