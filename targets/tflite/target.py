"""The ``tflite`` target: TFLite / LiteRT interpreters on this machine or a board."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Dict, Optional, Tuple

from ...errors import InputError, MissingDependencyError, TargetUnavailableError
from ...formats.tflite import INSTALL_HINT, default_signature, find_runtimes, load_runtime
from ..base import Artifact, Availability, Target
from .build import create_interpreter, load_delegates, parse_config


class TFLiteTarget(Target):
    """TFLite models run by the first working runtime among LiteRT (``ai_edge_litert``),
    ``tflite_runtime`` and ``tensorflow.lite``.

    Options: ``threads`` (interpreter and XNNPACK threads), ``xnnpack`` (default delegate on/off;
    default on), ``delegate`` (path of an external delegate library, or a list), ``delegate_options``
    (dict of strings, or a list of dicts, one per delegate), ``quantized_io`` ("float": quantised
    inputs/outputs are float32, converted with scale/zero-point; "raw": the model's integers),
    ``signature`` (which signature to run; default ``serving_default`` or the first), ``runtime``
    (force one runtime by module name).
    """

    name = "tflite"
    description = "TFLite / LiteRT interpreter (XNNPACK; external delegates such as Edge TPU, GPU)"
    model_formats = ("tflite",)
    install_hint = INSTALL_HINT
    default_options: ClassVar[Dict[str, Any]] = {
        "threads": None,
        "xnnpack": True,
        "delegate": None,
        "delegate_options": None,
        "quantized_io": "float",
        "signature": None,
        "runtime": None,
    }

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.config = parse_config(self.options)
        self._built: Optional[Tuple[Artifact, Any, Any]] = None

    # -- availability -------------------------------------------------------------------------------
    @classmethod
    def _probe(cls, deep: bool) -> Availability:
        installed = find_runtimes()
        if not installed:
            return Availability(False, reason="no TFLite runtime is installed (ai_edge_litert, tflite_runtime "
                                              "or tensorflow)")
        if not deep:
            cand, version = installed[0]
            return Availability(True, version=version, details={"runtime": cand.name})
        try:
            rt = load_runtime()
        except (TargetUnavailableError, MissingDependencyError) as exc:
            return Availability(False, version=installed[0][1], reason=f"{exc.message}; fix: {exc.hint}")
        details: Dict[str, Any] = {"runtime": rt.name}
        if rt.skipped:
            details["skipped"] = list(rt.skipped)
        return Availability(True, version=rt.version, details=details)

    @classmethod
    def source_io(cls, model: Any) -> Optional[Dict[str, Any]]:
        """The ``inputs``/``outputs`` of the ``edgesdk.onnx`` metadata that ``sdk convert`` writes
        (:mod:`.convert`); None for a file without it."""
        from .convert import onnx_names

        try:
            meta = onnx_names(Path(model.path).read_bytes() if model.path is not None else model.to_bytes())
        except (MissingDependencyError, ValueError):
            return None
        if not isinstance(meta.get("inputs"), dict) or not isinstance(meta.get("outputs"), dict):
            return None
        return {"inputs": meta["inputs"], "outputs": meta["outputs"], "io_layout": meta.get("io_layout")}

    # -- build -------------------------------------------------------------------------------------
    def _prepare_impl(self, model: Any, workdir: Optional[Path], **build: Any) -> Artifact:
        if build:
            raise InputError(f"target 'tflite' has no build option {', '.join(repr(k) for k in sorted(build))}",
                             "tflite models are built by the converter; set runtime options with --option")
        cfg = self.config
        rt = load_runtime(cfg.runtime)
        delegates = load_delegates(rt, cfg.delegates)
        if model.path is not None:
            interp = create_interpreter(rt, cfg, model_path=str(model.path), delegates=delegates)
            data = None
        else:
            data = model.to_bytes()
            interp = create_interpreter(rt, cfg, model_content=data, delegates=delegates)
        signature = cfg.signature or default_signature(interp)
        from .session import TFLiteSession

        probe = TFLiteSession(interp, signature=signature, quantized_io=cfg.quantized_io, delegates=delegates,
                              source=(rt, data if data is not None else str(model.path)))
        meta: Dict[str, Any] = {
            "runtime": rt.name,
            "runtime_version": rt.version,
            "threads": cfg.threads,
            "xnnpack": cfg.xnnpack,
            "delegates": [d.to_dict() for d in cfg.delegates],
            "quantized_io": cfg.quantized_io,
            "signature": signature,
        }
        delegated = _delegated(interp)
        if delegated is not None:
            meta["delegated"] = delegated
        artifact = Artifact(self.name, model.sha256, path=model.path if data is None else None, data=data,
                            metadata=meta, inputs=list(probe.inputs), outputs=list(probe.outputs))
        self._built = (artifact, interp, delegates)  # the first open reuses this interpreter
        return artifact

    # -- open --------------------------------------------------------------------------------------
    def _open_impl(self, artifact: Artifact):
        from .session import TFLiteSession

        cfg = self.config
        built, self._built = self._built, None
        rt = load_runtime(cfg.runtime)
        if built is not None and built[0] is artifact:
            _, interp, delegates = built
        else:
            delegates = load_delegates(rt, cfg.delegates)
            if artifact.path is not None:
                interp = create_interpreter(rt, cfg, model_path=str(artifact.path), delegates=delegates)
            elif artifact.data is not None:
                interp = create_interpreter(rt, cfg, model_content=artifact.data, delegates=delegates)
            else:
                raise InputError("the tflite artifact has neither a path nor data")
        signature = artifact.metadata.get("signature") if "signature" in artifact.metadata else \
            (cfg.signature or default_signature(interp))
        return TFLiteSession(interp, signature=signature, quantized_io=cfg.quantized_io, delegates=delegates,
                             runtime=rt.describe(),
                             source=(rt, artifact.data if artifact.path is None else str(artifact.path)))


def _delegated(interp: Any) -> Optional[Dict[str, int]]:
    """What the delegates (XNNPACK by default) took of the graph, read from the interpreter's
    execution plan: ``{"nodes": taken, "of": all model nodes, "partitions": delegate nodes}``;
    None where the runtime does not list its nodes. 0 nodes with XNNPACK on means every op ran on
    the builtin kernels (seen where XNNPACK's cpuinfo cannot read the CPU lists). LiteRT's Python
    API lists the main subgraph's nodes only: a file with others (a WHILE's body and condition)
    adds ``"other_subgraphs"``, their nodes counted in neither number."""
    from .capability import delegated_nodes

    try:
        ops = interp._get_ops_details()
    except (AttributeError, RuntimeError, ValueError):
        return None
    taken, partitions = delegated_nodes(ops)
    out = {"nodes": len(taken), "of": sum(op["op_name"] != "DELEGATE" for op in ops), "partitions": partitions}
    try:
        others = int(interp.num_subgraphs()) - 1
    except (AttributeError, RuntimeError, ValueError):
        others = 0
    if others > 0:
        out["other_subgraphs"] = others
    return out

