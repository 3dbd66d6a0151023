"""Every TensorRT Python name the target (``build.py``, ``session.py``, ``target.py``) and the board
agent use, with the parameters we pass, and :func:`check_api` to check them against a ``tensorrt``
module: names resolve, and each call fits one of the pybind11 signatures TensorRT documents in
``__doc__`` (``name(self: T, a: A, b: B = ...) -> R``).

CI runs it against the real bindings of TensorRT 8.6, 10.x and 11.x (their wheels imported over
stub libraries: tests/targets/test_tensorrt_api.py); ``scripts/gpu_check.py`` runs it against the
installed TensorRT. ``OPTIONAL`` names are only used behind a capability check
(:func:`sdk.targets.tensorrt.build.capabilities`) and may be absent.
Runs on the board too: Python 3.8, standard library only.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["REQUIRED", "OPTIONAL", "ApiReport", "check_api", "signatures", "VARIABLE_TYPES"]

#: "Class.member" (or a module-level name) -> the parameter names we pass, in order (None: an
#: attribute, property, enum value or class that is only subclassed or read).
REQUIRED: Dict[str, Optional[Tuple[str, ...]]] = {
    "__version__": None,
    "nptype": ("trt_type",),
    "ILogger.__init__": (),
    "ILogger.log": ("severity", "msg"),
    "IProfiler.__init__": (),
    "IProfiler.report_layer_time": ("layer_name", "ms"),
    "Builder.__init__": ("logger",),
    "Builder.create_network": ("flags",),
    "Builder.create_builder_config": (),
    "Builder.create_optimization_profile": (),
    "Builder.build_serialized_network": ("network", "config"),
    "Builder.num_DLA_cores": None,
    "NetworkDefinitionCreationFlag": None,
    "OnnxParser.__init__": ("network", "logger"),
    "OnnxParser.parse": ("model",),
    "OnnxParser.num_errors": None,
    "OnnxParser.get_error": ("index",),
    "ParserError.desc": (),
    "INetworkDefinition.num_inputs": None,
    "INetworkDefinition.get_input": ("index",),
    "ITensor.name": None,
    "ITensor.shape": None,
    "ITensor.dtype": None,
    "IBuilderConfig.set_memory_pool_limit": ("pool", "pool_size"),
    "IBuilderConfig.set_flag": ("flag",),
    "IBuilderConfig.add_optimization_profile": ("profile",),
    "IBuilderConfig.create_timing_cache": ("serialized_timing_cache",),
    "IBuilderConfig.set_timing_cache": ("cache", "ignore_mismatch"),
    "IBuilderConfig.get_timing_cache": (),
    "IBuilderConfig.default_device_type": None,
    "IBuilderConfig.DLA_core": None,
    "ITimingCache.serialize": (),
    "IOptimizationProfile.set_shape": ("input", "min", "opt", "max"),
    "MemoryPoolType.WORKSPACE": None,
    "DeviceType.DLA": None,
    "BuilderFlag.GPU_FALLBACK": None,
    "Runtime.__init__": ("logger",),
    "Runtime.DLA_core": None,
    "Runtime.deserialize_cuda_engine": ("serialized_engine",),
    "ICudaEngine.num_io_tensors": None,
    "ICudaEngine.create_execution_context": (),
    "ICudaEngine.get_tensor_name": ("index",),
    "ICudaEngine.get_tensor_dtype": ("name",),
    "ICudaEngine.get_tensor_shape": ("name",),
    "ICudaEngine.get_tensor_mode": ("name",),
    "ICudaEngine.get_tensor_profile_shape": ("name", "profile_index"),
    "TensorIOMode.INPUT": None,
    "IExecutionContext.set_input_shape": ("name", "shape"),
    "IExecutionContext.get_tensor_shape": ("name",),
    "IExecutionContext.set_tensor_address": ("name", "memory"),
    "IExecutionContext.execute_async_v3": ("stream_handle",),
    "IExecutionContext.profiler": None,
}

#: Names used only where a capability check found them (``hasattr``/``getattr``).
OPTIONAL: Dict[str, Optional[Tuple[str, ...]]] = {
    "BuilderFlag.FP16": None,
    "BuilderFlag.INT8": None,
    "NetworkDefinitionCreationFlag.EXPLICIT_BATCH": None,
    "NetworkDefinitionCreationFlag.STRONGLY_TYPED": None,
    "IInt8EntropyCalibrator2.__init__": (),
    "IInt8EntropyCalibrator2.get_batch_size": (),
    "IInt8EntropyCalibrator2.get_batch": ("names",),
    "IInt8EntropyCalibrator2.read_calibration_cache": (),
    "IInt8EntropyCalibrator2.write_calibration_cache": ("cache",),
    "IBuilderConfig.int8_calibrator": None,
    "IBuilderConfig.set_calibration_profile": ("profile",),
    "IBuilderConfig.builder_optimization_level": None,
    "OnnxParser.parse_from_file": ("model",),
    "ParserError.node": (),
    "ParserError.node_name": (),
    "ParserError.node_operator": (),
    # Session.profile(): the engine inspector maps layers to ONNX nodes (used inside a try: absent or
    # failing, the profile keeps the layer names and says so)
    "ICudaEngine.create_engine_inspector": (),
    "LayerInformationFormat.JSON": None,
    "EngineInspector.execution_context": None,
    "EngineInspector.get_engine_information": ("format",),
}

#: Local names in our code that hold TensorRT objects -> their class (for the test that keeps the
#: tables above complete: every ``<name>.<attr>`` in the TensorRT code must be listed).
VARIABLE_TYPES = {
    "builder": "Builder", "bconf": "IBuilderConfig", "parser": "OnnxParser", "network": "INetworkDefinition",
    "prof": "IOptimizationProfile", "_engine": "ICudaEngine", "_context": "IExecutionContext",
    "ctx": "IExecutionContext", "_runtime": "Runtime", "err": "ParserError", "timing": "ITimingCache",
    "t": "ITensor",
}

_SIG = re.compile(r"^\s*(?:\d+\.\s+)?(\w+)\((.*)\)\s*->")


@dataclass
class ApiReport:
    """What :func:`check_api` found: ``missing`` required names, ``bad_calls`` (name, why),
    ``optional_present`` / ``optional_missing``, and ``checked`` (names resolved and checked)."""

    version: str
    missing: List[str] = field(default_factory=list)
    bad_calls: List[Tuple[str, str]] = field(default_factory=list)
    optional_present: List[str] = field(default_factory=list)
    optional_missing: List[str] = field(default_factory=list)
    checked: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.bad_calls


def _split_params(text: str) -> List[str]:
    """Split a parameter list at top-level commas (types hold brackets and commas)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(<{":
            depth += 1
        elif ch in "])>}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def signatures(obj: Any, name: str) -> List[List[Tuple[str, bool]]]:
    """Every pybind11 overload of ``obj`` as [(parameter, has_default)] without ``self``; for a
    plain Python function, its ``inspect.signature``. Empty when none is documented."""
    doc = getattr(obj, "__doc__", None) or ""
    found = []
    for line in doc.splitlines():
        m = _SIG.match(line)
        if m and m.group(1) == name:
            params = []
            for p in _split_params(m.group(2)):
                pname = p.split(":", 1)[0].split("=", 1)[0].strip()
                if pname in ("self", "*args", "**kwargs"):
                    continue
                params.append((pname, "=" in p.split(":", 1)[-1] or "=" in p))
            found.append(params)
    if not found and inspect.isfunction(obj):
        sig = inspect.signature(obj)
        found.append([(p.name, p.default is not inspect.Parameter.empty) for p in sig.parameters.values()
                      if p.name != "self"])
    return found


def _fits(params: List[Tuple[str, bool]], passed: Sequence[str]) -> bool:
    if len(passed) > len(params):
        return False
    names_ok = all(p[0] == want for p, want in zip(params, passed))
    return names_ok and all(has_default for _, has_default in params[len(passed):])


def _resolve(trt: Any, path: str) -> Any:
    obj = trt
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _check_call(obj: Any, path: str, passed: Sequence[str]) -> Optional[str]:
    sigs = signatures(obj, path.split(".")[-1])
    if not sigs:
        return "no documented signature"
    if any(_fits(s, passed) for s in sigs):
        return None
    shown = " | ".join("(" + ", ".join(p + ("=..." if d else "") for p, d in s) + ")" for s in sigs)
    return f"we pass ({', '.join(passed)}), TensorRT has {shown}"


def check_api(trt: Any) -> ApiReport:
    """Check :data:`REQUIRED` (must resolve and fit) and :data:`OPTIONAL` (must fit where present)
    against the ``tensorrt`` module ``trt``."""
    report = ApiReport(str(getattr(trt, "__version__", "?")))
    for table, required in ((REQUIRED, True), (OPTIONAL, False)):
        for path, passed in table.items():
            try:
                obj = _resolve(trt, path)
            except AttributeError:
                (report.missing if required else report.optional_missing).append(path)
                continue
            if not required:
                report.optional_present.append(path)
            if passed is not None:
                why = _check_call(obj, path, passed)
                if why:
                    report.bad_calls.append((path, why))
                    continue
            report.checked.append(path)
    return report
