"""The ``onnxruntime`` target."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Dict, Optional

from ...errors import BuildError, InvalidModelError, TargetUnavailableError, first_line
from ...probe import dist_version, module_installed
from ..base import Artifact, Availability, Target
from . import providers as _providers
from .build import provider_options, session_options

_DISTS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml",
          "onnxruntime-qnn", "onnxruntime-rocm", "onnxruntime-silicon")


def import_ort():
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise TargetUnavailableError(f"onnxruntime cannot be imported: {exc}", "pip install onnxruntime") from exc
    return ort


class OnnxRuntimeTarget(Target):
    """ONNX Runtime with execution providers chosen by short name.

    Options: ``providers`` (e.g. ``["cuda", "cpu"]``; default ``["cpu"]``), ``threads``
    (intra-op), ``inter_threads``, ``graph_optimization`` (disable|basic|extended|all),
    ``save_optimized`` (path: write the optimised graph there), ``provider_options``
    (full provider name -> dict), ``io_binding`` ("auto": for non-CPU providers; True; False).
    """

    name = "onnxruntime"
    description = "ONNX Runtime (CPU, CUDA, TensorRT, XNNPACK, NNAPI, CoreML execution providers)"
    model_formats = ("onnx", "ort")
    install_hint = "pip install onnxruntime (or onnxruntime-gpu for CUDA/TensorRT)"
    default_options: ClassVar[Dict[str, Any]] = {
        "providers": ("cpu",),
        "threads": None,
        "inter_threads": None,
        "graph_optimization": "all",
        "save_optimized": None,
        "provider_options": None,
        "io_binding": "auto",
    }

    @classmethod
    def _probe(cls, deep: bool) -> Availability:
        if not module_installed("onnxruntime"):
            return Availability(False, reason="the onnxruntime package is not installed")
        version = dist_version(*_DISTS)
        if not deep:
            return Availability(True, version=version)
        try:
            ort = import_ort()
            provs = [p for p in ort.get_available_providers() if p not in _providers.NOT_LOCAL]
        except TargetUnavailableError as exc:
            return Availability(False, version=version, reason=exc.message)
        except Exception as exc:  # a broken native library surfaces as anything
            return Availability(False, version=version, reason=f"onnxruntime is installed but broken: {exc}")
        return Availability(True, version=getattr(ort, "__version__", version),
                            details={"providers": [_providers.short_name(p) for p in provs]})

    def providers(self) -> list:
        ort = import_ort()
        requested = self.options["providers"]
        if isinstance(requested, str):
            requested = [p for p in requested.split(",") if p]
        return _providers.resolve(requested, ort.get_available_providers())

    def _prepare_impl(self, model: Any, workdir: Optional[Path], **build: Any) -> Artifact:
        providers = self.providers()
        meta: Dict[str, Any] = {
            "providers": [_providers.short_name(p) for p in providers],
            "graph_optimization": self.options["graph_optimization"],
            "runtime_version": self.runtime_version(),
        }
        artifact = Artifact(self.name, model.sha256, path=model.path, data=None if model.path else model.to_bytes(),
                            metadata=meta)
        save = self.options.get("save_optimized")
        if save:
            save = Path(save)
            save.parent.mkdir(parents=True, exist_ok=True)
            self._create(artifact, providers, optimized_path=save)  # creating the session writes the file
            meta["optimized_model"] = str(save)
        return artifact

    def _create(self, artifact: Artifact, providers, optimized_path: Optional[Path] = None,
                profile_prefix: Optional[str] = None):
        ort = import_ort()
        from .build import runtime_log_level

        ort.set_default_logger_severity(runtime_log_level())  # graph-building warnings go here
        so = session_options(ort, self.options, optimized_path)
        if profile_prefix is not None:  # a second session, for Session.profile()
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        source = str(artifact.path) if artifact.path is not None else artifact.data
        try:
            return ort.InferenceSession(source, sess_options=so, providers=providers,
                                        provider_options=provider_options(providers, self.options))
        except Exception as exc:
            text = first_line(exc)
            kind = type(exc).__name__
            if kind in ("InvalidGraph", "InvalidProtobuf", "NotImplemented"):
                raise InvalidModelError(f"onnxruntime rejects the model: {text}") from exc
            raise BuildError(f"onnxruntime could not create a session: {text}") from exc

    def _open_impl(self, artifact: Artifact):
        from .session import OnnxRuntimeSession

        providers = self.providers()
        sess = self._create(artifact, providers)
        use_binding = self.options.get("io_binding", "auto")
        if use_binding == "auto":
            use_binding = providers[0] != "CPUExecutionProvider"
        return OnnxRuntimeSession(sess, io_binding=bool(use_binding),
                                  model_source=artifact.path if artifact.path is not None else artifact.data,
                                  profiling_session=lambda prefix: self._create(artifact, providers, profile_prefix=prefix))
