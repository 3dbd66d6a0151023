"""The ``tensorrt`` target: ONNX -> cached engine (``build.py``, ``cache.py``) -> session
(``session.py``). Engines must be built on the board that runs them; the cache makes the second
push of the same model load the engine instead of rebuilding it.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, ClassVar, Dict, Optional

from ...errors import BuildError, InputError
from ...hostinfo import tensorrt_version
from ...probe import module_installed
from ..base import Artifact, Availability, Target
from .build import BUILD_KEYS, build_config, build_engine, check_device_support, import_trt
from .cache import EngineCache, EngineKey, default_cache_dir

__all__ = ["TensorRTTarget"]

log = logging.getLogger("sdk.targets.tensorrt")

_NO_TRT = ("the tensorrt Python package is not installed (TensorRT comes with JetPack on Jetson boards; "
           "on an x86 NVIDIA GPU host: pip install tensorrt)")


class TensorRTTarget(Target):
    """NVIDIA TensorRT on Jetson boards and GPU hosts.

    Build options (see :class:`~sdk.targets.tensorrt.build.BuildConfig`): ``precision`` (fp32 |
    fp16 | int8), ``workspace_mib``, ``dla_core``, ``gpu_fallback``, ``input_shapes``
    (``["x=1x3x320x320:1x3x640x640:1x3x960x960"]``), ``calibration_cache``, ``timing_cache``
    (a path; default: one per TensorRT version and GPU in the cache folder; False: none),
    ``int8_fp16_fallback``, ``optimization_level``. Others: ``board_defaults`` (a board profile's
    build defaults), ``cache_dir`` (engine cache), ``rebuild`` (ignore the cache), ``cuda_backend``
    (auto | pycuda | cuda-python), ``layer_profile`` (per-layer times), ``device`` (GPU index).
    """

    name = "tensorrt"
    description = "NVIDIA TensorRT engines (Jetson, GPU hosts): fp32, fp16, int8 (Q/DQ or calibration cache), DLA"
    model_formats = ("onnx",)
    precisions = ("fp32", "fp16", "int8")
    install_hint = "TensorRT ships with JetPack (python3-libnvinfer); on an x86 GPU host: pip install tensorrt cuda-python"
    default_options: ClassVar[Dict[str, Any]] = {
        **{k: None for k in BUILD_KEYS},
        "board_defaults": None,
        "cache_dir": None,
        "rebuild": False,
        "cuda_backend": "auto",
        "layer_profile": False,
        "device": 0,
    }

    @classmethod
    def _probe(cls, deep: bool) -> Availability:
        from ..cuda import installed_backends
        from ..cuda.probe import driver_library_path, probe_gpu

        if not module_installed("tensorrt"):
            return Availability(False, reason=_NO_TRT)
        version = tensorrt_version()
        if not installed_backends():
            return Availability(False, version=version,
                                reason="TensorRT needs pycuda or cuda-python for GPU buffers, and neither is installed "
                                       "(pip install cuda-python)")
        if not deep:
            if driver_library_path() is None:
                return Availability(False, version=version, reason="no NVIDIA driver (libcuda) on this machine")
            return Availability(True, version=version)
        gpu = probe_gpu()
        if not gpu.available:
            return Availability(False, version=version, reason=f"no usable NVIDIA GPU: {gpu.reason}")
        try:
            trt = import_trt()
        except Exception as exc:  # a broken native library surfaces as anything
            return Availability(False, version=version, reason=f"tensorrt is installed but cannot be imported: {exc}")
        dev = gpu.devices[0]
        return Availability(True, version=str(trt.__version__),
                            details={"gpu": dev.name, "compute_capability": "{}.{}".format(*dev.compute_capability),
                                     "driver_cuda": gpu.driver_version})

    # -- build ------------------------------------------------------------------------------------
    def build_config(self, **overrides: Any):
        """The :class:`BuildConfig` of this target's options (``overrides`` win) over the board
        profile's defaults."""
        opts = {k: self.options.get(k) for k in BUILD_KEYS}
        opts.update({k: v for k, v in overrides.items() if v is not None})
        unknown = sorted(set(overrides) - set(BUILD_KEYS))
        if unknown:
            raise InputError(f"unknown TensorRT build option(s): {', '.join(unknown)}", f"known: {', '.join(BUILD_KEYS)}")
        if opts.get("timing_cache") is False:
            opts["timing_cache"] = None
        return build_config(opts, self.options.get("board_defaults"))

    def engine_cache(self, workdir: Optional[Path] = None) -> EngineCache:
        root = self.options.get("cache_dir") or (Path(workdir) / "tensorrt" if workdir else default_cache_dir())
        return EngineCache(root)

    def _prepare_impl(self, model: Any, workdir: Optional[Path], **build: Any) -> Artifact:
        from ..cuda import require_gpu

        trt = import_trt()
        gpu = require_gpu(int(self.options.get("device") or 0))
        config = self.build_config(**build)
        cache = self.engine_cache(workdir)
        sm = "sm_{}{}".format(*gpu.compute_capability)
        if config.timing_cache is None and self.options.get("timing_cache") is not False:
            from dataclasses import replace

            config = replace(config, timing_cache=str(cache.root / f"timing-{trt.__version__}-{sm}.cache"))
        num_dla = 0
        if config.dla_core is not None:
            from .build import make_logger

            num_dla = int(trt.Builder(make_logger(trt)).num_DLA_cores)
        warnings = check_device_support(config, gpu.name, gpu.compute_capability, num_dla)
        for w in warnings:
            log.warning("%s", w)
        request = config.key_parts()
        if config.precision == "int8" and config.calibration_cache:
            request["calibration_cache_sha256"] = hashlib.sha256(Path(config.calibration_cache).read_bytes()).hexdigest() \
                if Path(config.calibration_cache).is_file() else None
        key = EngineKey(model.sha256, str(trt.__version__), gpu.name, gpu.compute_capability, request)
        look = cache.lookup(key)
        if self.options.get("rebuild"):
            look.path, look.reason = None, "rebuild requested"
        meta: Dict[str, Any] = {"precision": config.precision, "trt_version": str(trt.__version__),
                                "gpu": gpu.name, "compute_capability": list(gpu.compute_capability),
                                "dla_core": config.dla_core, "profiles": request["profiles"],
                                "engine_key": key.digest(), "warnings": warnings}
        if look.hit:
            log.info("tensorrt: %s (%s)", look.reason, look.path)
            meta.update(int8_mode=look.meta.get("int8_mode"), build_s=look.meta.get("build_s"),
                        inputs=look.meta.get("inputs"))
            path = look.path
            assert path is not None  # a cache hit has its engine file
        else:
            (log.warning if "built for" in look.reason or "changed" in look.reason else log.info)("tensorrt: %s", look.reason)
            source = model.path if model.path is not None else model.to_bytes()
            result = build_engine(source, config, num_dla_cores_hint=num_dla if config.dla_core is not None else None)
            inputs = [s.to_dict() for s in result.inputs]
            path = cache.store(key, result.engine, {"int8_mode": result.int8_mode, "build_s": result.build_s,
                                                    "inputs": inputs, "model": model.name})
            meta.update(int8_mode=result.int8_mode, build_s=result.build_s, inputs=inputs,
                        trt_warnings=result.warnings[-20:])
        meta["cache"] = {"hit": look.hit, "reason": look.reason, "dir": str(cache.root)}
        if model.path is not None:
            meta["onnx_model"] = str(model.path)   # to explain a run's shape failure by the graph
        return Artifact(self.name, model.sha256, path=Path(path), metadata=meta)

    # -- open -------------------------------------------------------------------------------------
    def _open_impl(self, artifact: Artifact):
        from ..cuda import get_backend, require_gpu
        from .session import TensorRTSession

        trt = import_trt()
        meta = artifact.metadata or {}
        built_with = meta.get("trt_version")
        if built_with and str(built_with) != str(trt.__version__):
            raise BuildError(f"the engine {artifact.path} was built with TensorRT {built_with}, this is TensorRT "
                             f"{trt.__version__}", "rebuild it here (prepare the model again on this board; "
                             "engines are tied to the TensorRT version)")
        gpu = require_gpu(int(self.options.get("device") or 0))
        cc = meta.get("compute_capability")
        if cc and tuple(cc) != tuple(gpu.compute_capability):
            raise BuildError(f"the engine {artifact.path} was built for compute capability {cc[0]}.{cc[1]} "
                             f"({meta.get('gpu')}), this GPU is {gpu.name} "
                             "({}.{})".format(*gpu.compute_capability),
                             "rebuild it on this board")
        data = artifact.data if artifact.data is not None else Path(str(artifact.path)).read_bytes()
        cuda = get_backend(self.options.get("cuda_backend") or "auto", int(self.options.get("device") or 0))
        return TensorRTSession(data, cuda, dla_core=meta.get("dla_core"),
                               layer_profile=bool(self.options.get("layer_profile")),
                               source=f"engine {artifact.path}" if artifact.path else "engine",
                               model_source=meta.get("onnx_model"))
