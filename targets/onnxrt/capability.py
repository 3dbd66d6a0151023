"""``sdk check MODEL --target onnxruntime --ep nnapi|coreml|coreml-mlprogram|xnnpack``: which nodes a
mobile execution provider takes, as a :class:`~sdk.targets.capability.CapabilityReport`.

The verdicts come from :func:`sdk.targets.onnxrt.readiness.ep_readiness` (onnxruntime's own usability
checker with the EP tables it ships; XNNPACK's table from the EP's source): a node in an EP partition
``runs`` on the EP, every other node is a ``fallback`` to the CPU execution provider with the
checker's reasons. ONNX Runtime runs every standard op on its CPU provider, so no node ``fails`` here.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ...errors import InputError
from ..capability import CapabilityChecker, NodeVerdict

__all__ = ["OrtMobileChecker"]


class OrtMobileChecker(CapabilityChecker):
    """ONNX Runtime with a mobile EP (option ``ep``; ``input_shapes`` fix dynamic inputs first)."""

    name = "onnxruntime"
    formats = ("onnx",)
    options = ("ep", "input_shapes")

    def __init__(self, version: Optional[str] = None, **options: Any) -> None:
        super().__init__(version, **options)
        from .readiness import check_ep_name

        ep = self.opts.get("ep")
        if not ep:
            raise InputError("sdk check --target onnxruntime needs --ep", "give --ep nnapi, coreml, "
                             "coreml-mlprogram or xnnpack")
        self.ep = check_ep_name(str(ep))
        self._source = ""

    def _check_impl(self, model: Any) -> Tuple[List[NodeVerdict], List[str]]:
        from .readiness import ep_readiness

        r = ep_readiness(model, self.ep, self.opts.get("input_shapes") or None)
        self._source = r.source
        nodes = [NodeVerdict(n.name, n.op, "runs", self.ep.upper()) if n.supported else
                 NodeVerdict(n.name, n.op, "fallback", "CPU", "; ".join(n.reasons) or "not in the EP's table")
                 for n in r.nodes]
        notes = [r.summary(), *r.caveats]
        if r.assignment_note:
            notes.append(r.assignment_note)
        return nodes, notes

    def version_label(self) -> str:
        import onnxruntime

        return str(onnxruntime.__version__)

    def devices(self) -> Tuple[str, str]:
        return (self.ep.upper(), "CPU execution provider")

    def source(self) -> str:
        return self._source or "onnxruntime.tools.mobile_helpers.usability_checker"
