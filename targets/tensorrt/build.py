"""Build step of the TensorRT target: ONNX -> serialized engine.

Split in two: the pure part (:class:`BuildConfig`, :func:`build_config` turning target options and
board-profile defaults into a checked config, :func:`plan_profiles`, :func:`check_device_support`)
runs anywhere and is tested without a GPU; :func:`build_engine` drives TensorRT's builder with the
name-based API of TensorRT 8.5 through 11.x, choosing by capability (:func:`capabilities`), not by
version number. Every TensorRT name used here is checked against the real bindings of 8.6, 10.x and
11.x in CI (``sdk.targets.tensorrt.api``).
Runs on the board too: Python 3.8, NumPy and TensorRT.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ...errors import BuildError, ConfigError, InputError, TargetUnavailableError, UnsupportedModelError
from ...tensors import TensorSpec, format_shape, parse_shape_profiles
from .calib import check_cache_version, read_calibration_cache

__all__ = ["BuildConfig", "build_config", "plan_profiles", "check_device_support", "build_engine",
           "make_logger", "PRECISIONS", "BUILD_KEYS", "int8_supported", "has_qdq", "TrtCapabilities", "capabilities",
           "PrecisionPlan", "precision_plan", "network_flags"]

log = logging.getLogger("sdk.targets.tensorrt")

Profile = Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]
PRECISIONS = ("fp32", "fp16", "int8")
_PRECISION_ALIASES = {"float32": "fp32", "fp32": "fp32", "float16": "fp16", "fp16": "fp16", "half": "fp16",
                      "int8": "int8"}
#: Keys a target option set or a board profile may give for the build.
BUILD_KEYS = ("precision", "workspace_mib", "dla_core", "gpu_fallback", "input_shapes", "calibration_cache",
              "timing_cache", "int8_fp16_fallback", "optimization_level")


@dataclass(frozen=True)
class BuildConfig:
    """Everything that shapes an engine.

    ``precision``: fp32, fp16 or int8 (int8: explicit Q/DQ models, or a ``calibration_cache`` for
    implicit quantization on TensorRT 8.x). ``workspace_mib``: builder workspace limit (MiB,
    None = TensorRT's default). ``dla_core``: run on that DLA core (Xavier/Orin), with
    ``gpu_fallback`` for layers DLA cannot run. ``profiles``: input name -> (min, opt, max) shapes
    for dynamic inputs. ``timing_cache``: a file the builder's timing cache is loaded from and
    saved to. ``int8_fp16_fallback``: with int8, also allow fp16 for layers left in float.
    ``optimization_level``: builder optimisation level 0-5 (TensorRT >= 8.6; None = default 3).
    """

    precision: str = "fp32"
    workspace_mib: Optional[int] = None
    dla_core: Optional[int] = None
    gpu_fallback: bool = True
    profiles: Dict[str, Profile] = field(default_factory=dict)
    calibration_cache: Optional[str] = None
    timing_cache: Optional[str] = None
    int8_fp16_fallback: bool = True
    optimization_level: Optional[int] = None

    def key_parts(self) -> Dict[str, Any]:
        """What of this config changes the engine (for the engine cache key)."""
        return {
            "precision": self.precision,
            "dla_core": self.dla_core,
            "gpu_fallback": self.gpu_fallback if self.dla_core is not None else None,
            "profiles": {k: [list(s) for s in v] for k, v in sorted(self.profiles.items())},
            "int8_fp16_fallback": self.int8_fp16_fallback if self.precision == "int8" else None,
            "optimization_level": self.optimization_level,
        }


def _profiles_from(value: Any) -> Dict[str, Profile]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = [v for v in value.replace(";", " ").split() if v]
    if isinstance(value, Mapping):
        out: Dict[str, Profile] = {}
        for name, shapes in value.items():
            if isinstance(shapes, str):
                out.update(parse_shape_profiles([f"{name}={shapes}"]))
                continue
            shapes = [tuple(int(d) for d in s) for s in shapes] if shapes and isinstance(shapes[0], (list, tuple)) \
                else [tuple(int(d) for d in shapes)]
            if len(shapes) == 1:
                shapes = shapes * 3
            text = ":".join("x".join(str(d) for d in s) for s in shapes)
            out.update(parse_shape_profiles([f"{name}={text}"]))
        return out
    return parse_shape_profiles(list(value))


def _precision(value: Any) -> str:
    precision = str(value).lower()
    if precision not in _PRECISION_ALIASES:
        raise InputError(f"unknown TensorRT precision '{precision}'", f"use one of: {', '.join(PRECISIONS)}")
    return _PRECISION_ALIASES[precision]


def _dla_core(value: Any, precision: str) -> Optional[int]:
    if value is None or (isinstance(value, str) and value.lower() in ("", "none", "gpu", "off")):
        return None
    dla = int(value)
    if dla < 0:
        raise InputError(f"dla_core must be >= 0, got {dla}")
    if precision == "fp32":
        raise InputError("DLA runs fp16 or int8 layers only, and fp32 was asked for",
                         "use --precision fp16 (or int8) with a DLA core, or drop the DLA core")
    return dla


def build_config(options: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None) -> BuildConfig:
    """A checked :class:`BuildConfig` from target/CLI ``options`` over board-profile ``defaults``
    (e.g. a Jetson profile's ``[runtime]`` table: ``{"precision": "fp16", "dla_core": 0}``; keys
    that are not build keys, like ``targets``, are ignored there). Options set to None fall back
    to the defaults. An unknown option raises :class:`ConfigError`."""
    unknown = sorted(set(options) - set(BUILD_KEYS))
    if unknown:
        raise ConfigError(f"unknown TensorRT build option(s): {', '.join(unknown)}", f"known: {', '.join(BUILD_KEYS)}")
    merged: Dict[str, Any] = {k: v for k, v in (defaults or {}).items() if k in BUILD_KEYS and v is not None}
    merged.update({k: v for k, v in options.items() if v is not None})
    precision = _precision(merged.get("precision", "fp32"))
    workspace = merged.get("workspace_mib")
    if workspace is not None and int(workspace) <= 0:
        raise InputError(f"workspace_mib must be > 0, got {workspace}")
    dla = _dla_core(merged.get("dla_core"), precision)
    level = merged.get("optimization_level")
    if level is not None and not 0 <= int(level) <= 5:
        raise InputError(f"optimization_level must be 0-5, got {level}")
    calib = merged.get("calibration_cache")
    timing = merged.get("timing_cache")
    return BuildConfig(
        precision=precision,
        workspace_mib=int(workspace) if workspace is not None else None,
        dla_core=dla,
        gpu_fallback=bool(merged.get("gpu_fallback", True)),
        profiles=_profiles_from(merged.get("input_shapes")),
        calibration_cache=str(calib) if calib else None,
        timing_cache=str(timing) if timing else None,
        int8_fp16_fallback=bool(merged.get("int8_fp16_fallback", True)),
        optimization_level=int(level) if level is not None else None,
    )


def plan_profiles(inputs: Sequence[TensorSpec], profiles: Mapping[str, Profile]) -> Dict[str, Profile]:
    """The optimisation profile of every dynamic input, checked against the model's inputs.

    A dynamic input without a profile, a profile for an unknown input, a rank mismatch, or a
    profile that contradicts a fixed dim raises :class:`InputError` naming the input and the fix.
    Static inputs need no profile (one given must equal the model's shape).
    """
    names = [s.name for s in inputs]
    for name in profiles:
        if name not in names:
            raise InputError(f"--input-shape names '{name}', which is not a model input",
                             f"the model's inputs are: {', '.join(names)}")
    out: Dict[str, Profile] = {}
    for spec in inputs:
        prof = profiles.get(spec.name)
        if prof is None:
            if spec.is_static:
                continue
            example = "x".join(str(d) if isinstance(d, int) and d >= 0 else "N" for d in spec.shape)
            raise InputError(
                f"input '{spec.name}' has a dynamic shape {format_shape(spec.shape)} and no optimisation profile",
                f"pass --input-shape {spec.name}=MIN:OPT:MAX, e.g. {spec.name}={example}:{example}:{example} "
                "with N replaced by numbers (one shape for a fixed size)")
        for which, shape in zip(("min", "opt", "max"), prof):
            if len(shape) != len(spec.shape):
                raise InputError(f"the {which} shape {format_shape(shape)} of input '{spec.name}' has rank "
                                 f"{len(shape)}, the model's input {format_shape(spec.shape)} has rank {len(spec.shape)}")
            for i, (want, got) in enumerate(zip(spec.shape, shape)):
                if isinstance(want, int) and want >= 0 and want != got:
                    raise InputError(f"the {which} shape {format_shape(shape)} of input '{spec.name}' sets dim {i} "
                                     f"to {got}, but the model fixes it to {want}")
        if not spec.is_static:
            out[spec.name] = prof
    return out


def int8_supported(compute_capability: Tuple[int, int]) -> bool:
    """INT8 tensor math needs compute capability 6.1 or >= 7.0 (not 5.x, 6.0, 6.2: Nano, TX2)."""
    return tuple(compute_capability) == (6, 1) or tuple(compute_capability) >= (7, 0)


def fp16_fast(compute_capability: Tuple[int, int]) -> bool:
    cc = tuple(compute_capability)
    return cc in ((5, 3), (6, 0), (6, 2)) or cc >= (7, 0)


def check_device_support(config: BuildConfig, gpu_name: str, compute_capability: Tuple[int, int],
                         num_dla_cores: int = 0) -> List[str]:
    """Refuse what this GPU cannot do (int8 without int8 support, a DLA core that does not exist)
    with :class:`InputError`; return warnings for what is merely slow (fp16 without fast fp16)."""
    cc = "{}.{}".format(*compute_capability)
    if config.precision == "int8" and not int8_supported(compute_capability):
        raise InputError(f"int8 needs a GPU with compute capability 6.1 or >= 7.0; {gpu_name} has {cc}",
                         "use --precision fp16" if fp16_fast(compute_capability) else "use --precision fp32")
    if config.dla_core is not None and config.dla_core >= num_dla_cores:
        have = f"DLA cores 0..{num_dla_cores - 1}" if num_dla_cores else "no DLA cores"
        raise InputError(f"DLA core {config.dla_core} was asked for, but {gpu_name} has {have}",
                         "drop --dla-core (DLA exists on Xavier and Orin)" if not num_dla_cores
                         else f"use a DLA core in 0..{num_dla_cores - 1}")
    warnings = []
    if config.precision == "fp16" and not fp16_fast(compute_capability):
        warnings.append(f"{gpu_name} (compute capability {cc}) has no fast fp16: fp16 may not be faster than fp32")
    return warnings


def has_qdq(onnx_bytes: bytes) -> bool:
    """True when the ONNX model holds QuantizeLinear/DequantizeLinear nodes (explicit quantization).
    Parses with onnx when installed, else looks for the op type strings in the protobuf bytes."""
    try:
        import onnx
    except ImportError:
        return b"DequantizeLinear" in onnx_bytes
    from ...formats.onnx import iter_nodes

    proto = onnx.load_model_from_string(onnx_bytes)
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in iter_nodes(proto.graph))


# -- TensorRT --------------------------------------------------------------------------------------
def import_trt():
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise TargetUnavailableError(
            f"the tensorrt Python package cannot be imported: {exc}",
            "TensorRT comes with JetPack on Jetson boards (python3-libnvinfer); on an x86 GPU host: pip install tensorrt",
        ) from exc
    return trt


def make_logger(trt: Any):
    """A TensorRT ILogger that keeps every message (for errors) and forwards them to logging."""

    class TrtLogCollector(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.messages: List[Tuple[str, str]] = []

        def log(self, severity, msg):  # noqa: D401 - TensorRT callback
            name = str(severity).split(".")[-1]
            self.messages.append((name, msg))
            level = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.ERROR, "WARNING": logging.WARNING,
                     "INFO": logging.DEBUG, "VERBOSE": logging.DEBUG}.get(name, logging.DEBUG)
            log.log(level, "TensorRT: %s", msg)

        def errors(self) -> List[str]:
            return [m for s, m in self.messages if s in ("ERROR", "INTERNAL_ERROR")]

        def warnings(self) -> List[str]:
            return [m for s, m in self.messages if s == "WARNING"]

    return TrtLogCollector()





def _parser_errors(parser: Any) -> List[str]:
    """One line per ONNX parser error, naming the node (index, name, op) when TensorRT tells."""
    out = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        where = []
        node = err.node() if hasattr(err, "node") else -1
        if node is not None and node >= 0:
            where.append(f"node {node}")
        for attr in ("node_name", "node_operator"):
            fn = getattr(err, attr, None)
            if fn is not None:
                try:
                    v = fn()
                except Exception:
                    v = None
                if v:
                    where.append(f"'{v}'" if attr == "node_name" else f"op {v}")
        out.append(f"{' '.join(where) + ': ' if where else ''}{err.desc()}")
    return out


def network_inputs(network: Any) -> List[TensorSpec]:
    import numpy as np

    trt = import_trt()
    specs = []
    for i in range(network.num_inputs):
        t = network.get_input(i)
        shape = tuple(int(d) if int(d) >= 0 else None for d in t.shape)
        specs.append(TensorSpec(t.name, shape, np.dtype(trt.nptype(t.dtype)).name))
    return specs


# -- what this TensorRT can do (capability checks, never version arithmetic) -------------------------
@dataclass(frozen=True)
class TrtCapabilities:
    """What the imported TensorRT offers, read from its API (``hasattr``), not from its version.

    ``weak_typing``: precision set by builder flags (``BuilderFlag.FP16``/``INT8``; TensorRT <= 10).
    Without it (TensorRT 11) networks are strongly typed: fp16 and int8 come from the model's
    types (an fp16 model, Q/DQ nodes). ``implicit_int8``: calibrators and calibration caches
    (``IInt8EntropyCalibrator2`` and ``IBuilderConfig.int8_calibrator``). ``explicit_batch_flag``:
    networks must be created with ``EXPLICIT_BATCH`` (TensorRT 8.x; ignored by 10.x, absent in 11).
    """

    version: str
    weak_typing: bool
    implicit_int8: bool
    explicit_batch_flag: bool
    strongly_typed_flag: bool
    optimization_level: bool
    parse_from_file: bool
    calibration_profile: bool


def capabilities(trt: Any) -> TrtCapabilities:
    """The :class:`TrtCapabilities` of the ``tensorrt`` module ``trt``."""
    flags, creation, config = trt.BuilderFlag, trt.NetworkDefinitionCreationFlag, trt.IBuilderConfig
    return TrtCapabilities(
        version=str(trt.__version__),
        weak_typing=hasattr(flags, "FP16") and hasattr(flags, "INT8"),
        implicit_int8=hasattr(trt, "IInt8EntropyCalibrator2") and hasattr(config, "int8_calibrator"),
        explicit_batch_flag=hasattr(creation, "EXPLICIT_BATCH"),
        strongly_typed_flag=hasattr(creation, "STRONGLY_TYPED"),
        optimization_level=hasattr(config, "builder_optimization_level"),
        parse_from_file=hasattr(trt.OnnxParser, "parse_from_file"),
        calibration_profile=hasattr(config, "set_calibration_profile"),
    )


@dataclass(frozen=True)
class PrecisionPlan:
    """How a precision is obtained on this TensorRT: ``builder_flags`` (``BuilderFlag`` names) to set,
    a ``strongly_typed`` network, the model ``convert_fp16`` first (numerically sensitive ops kept in
    fp32), the ``int8_mode`` (explicit = Q/DQ, implicit = calibration cache) and ``notes`` for the
    build's warnings."""

    builder_flags: Tuple[str, ...] = ()
    strongly_typed: bool = False
    convert_fp16: bool = False
    int8_mode: Optional[str] = None
    notes: Tuple[str, ...] = ()


def _int8_plan(caps: TrtCapabilities, config: BuildConfig, qdq: bool) -> PrecisionPlan:
    if qdq and caps.weak_typing:
        return PrecisionPlan(("INT8", "FP16") if config.int8_fp16_fallback else ("INT8",), int8_mode="explicit")
    if qdq:
        note = (f"TensorRT {caps.version} builds strongly typed networks: layers outside the Q/DQ pairs run in the "
                "model's float type (int8_fp16_fallback has no effect)") if config.int8_fp16_fallback else ""
        return PrecisionPlan(strongly_typed=True, int8_mode="explicit", notes=(note,) if note else ())
    if config.calibration_cache and not (caps.implicit_int8 and caps.weak_typing):
        raise InputError(f"TensorRT {caps.version} has no implicit quantization (no IInt8EntropyCalibrator2): a "
                         "calibration cache cannot be used", "quantize the model with Q/DQ nodes: sdk quantize MODEL --calib DATA --target tensorrt")
    if config.calibration_cache:
        return PrecisionPlan(("INT8", "FP16") if config.int8_fp16_fallback else ("INT8",), int8_mode="implicit")
    raise InputError("int8 was asked for, but the model has no Q/DQ nodes and no calibration cache was given",
                     "quantize it first (sdk quantize MODEL --calib DATA --target tensorrt), or pass calibration_cache=FILE "
                     "(TensorRT 8.x-10.x)")


def precision_plan(caps: TrtCapabilities, config: BuildConfig, qdq: bool) -> PrecisionPlan:
    """The :class:`PrecisionPlan` of ``config.precision`` on TensorRT ``caps``; ``qdq``: the model has
    Q/DQ nodes. Raises :class:`InputError` for what this TensorRT cannot do."""
    if config.precision == "int8":
        return _int8_plan(caps, config, qdq)
    if config.precision == "fp16" and caps.weak_typing:
        return PrecisionPlan(("FP16",))
    if config.precision == "fp16":
        return PrecisionPlan(strongly_typed=True, convert_fp16=True,
                             notes=(f"TensorRT {caps.version} has no fp16 builder flag: the model was converted to "
                                    "fp16 (numerically sensitive ops kept in fp32) and built strongly typed",))
    return PrecisionPlan(strongly_typed=not caps.weak_typing and caps.strongly_typed_flag)


def network_flags(trt: Any, caps: TrtCapabilities, plan: PrecisionPlan) -> int:
    """``create_network`` flags: EXPLICIT_BATCH where it exists, STRONGLY_TYPED when the plan asks."""
    creation = trt.NetworkDefinitionCreationFlag
    flags = 1 << int(creation.EXPLICIT_BATCH) if caps.explicit_batch_flag else 0
    if plan.strongly_typed:
        if not caps.strongly_typed_flag:
            raise InputError(f"TensorRT {caps.version} cannot build strongly typed networks")
        flags |= 1 << int(creation.STRONGLY_TYPED)
    return flags


class _CacheCalibrator:
    """Factory for a calibrator that only replays a calibration cache (no data: get_batch -> None)."""

    @staticmethod
    def make(trt: Any, data: bytes):
        class CacheOnlyCalibrator(trt.IInt8EntropyCalibrator2):
            def __init__(self):
                trt.IInt8EntropyCalibrator2.__init__(self)
                self._data = data

            def get_batch_size(self):
                return 1

            def get_batch(self, names):
                return None

            def read_calibration_cache(self):
                return self._data

            def write_calibration_cache(self, cache):
                return None

        return CacheOnlyCalibrator()


@dataclass
class BuildResult:
    engine: bytes
    inputs: List[TensorSpec]
    int8_mode: Optional[str]
    warnings: List[str]
    build_s: float


def _parse(trt: Any, network: Any, logger: Any, source: Union[str, Path, bytes], data: bytes) -> None:
    parser = trt.OnnxParser(network, logger)
    if isinstance(source, (str, Path)) and hasattr(parser, "parse_from_file"):
        ok = parser.parse_from_file(str(source))  # resolves external data next to the file
    else:
        ok = parser.parse(data)
    if not ok:
        errs = _parser_errors(parser) or logger.errors() or ["unknown parser error"]
        raise UnsupportedModelError("TensorRT cannot parse the model: " + "; ".join(errs),
                                    "replace or remove those ops (sdk model inspect shows the graph), "
                                    "or run it with --target onnxruntime")


def _configure_precision(trt: Any, bconf: Any, config: BuildConfig, plan: PrecisionPlan) -> None:
    for name in plan.builder_flags:
        bconf.set_flag(getattr(trt.BuilderFlag, name))
    if plan.int8_mode == "implicit":
        cache = read_calibration_cache(str(config.calibration_cache))
        check_cache_version(cache, trt.__version__, config.calibration_cache)
        bconf.int8_calibrator = _CacheCalibrator.make(trt, cache.to_bytes())


def _configure_dla(trt: Any, builder: Any, bconf: Any, config: BuildConfig, num_dla_cores_hint: Optional[int]) -> None:
    if config.dla_core is None:
        return
    n = builder.num_DLA_cores if num_dla_cores_hint is None else num_dla_cores_hint
    if config.dla_core >= n:
        raise InputError(f"DLA core {config.dla_core} was asked for, but this device has {n} DLA core(s)",
                         "drop --dla-core" if not n else f"use a DLA core in 0..{n - 1}")
    bconf.default_device_type = trt.DeviceType.DLA
    bconf.DLA_core = int(config.dla_core)
    if config.gpu_fallback:
        bconf.set_flag(trt.BuilderFlag.GPU_FALLBACK)


def _add_profiles(builder: Any, bconf: Any, profiles: Mapping[str, Profile], plan: PrecisionPlan) -> None:
    if not profiles:
        return
    prof = builder.create_optimization_profile()
    for name, (mn, opt, mx) in profiles.items():
        prof.set_shape(name, mn, opt, mx)
    bconf.add_optimization_profile(prof)
    if plan.int8_mode == "implicit" and hasattr(bconf, "set_calibration_profile"):
        bconf.set_calibration_profile(prof)  # dynamic inputs with implicit int8 need one


def _load_timing_cache(bconf: Any, path: Optional[str]) -> Any:
    if not path:
        return None
    tpath = Path(path)
    blob = tpath.read_bytes() if tpath.is_file() else b""
    timing = bconf.create_timing_cache(blob)
    bconf.set_timing_cache(timing, True)  # ignore_mismatch: a cache from another device is skipped
    return timing


def _save_timing_cache(bconf: Any, path: str) -> None:
    try:
        tpath = Path(path)
        tpath.parent.mkdir(parents=True, exist_ok=True)
        tmp = tpath.with_suffix(tpath.suffix + ".tmp")
        tmp.write_bytes(bytes(bconf.get_timing_cache().serialize()))
        tmp.replace(tpath)
    except OSError as exc:
        log.warning("could not save the timing cache %s: %s", path, exc)


def _builder_config(trt: Any, builder: Any, config: BuildConfig, plan: PrecisionPlan,
                    profiles: Mapping[str, Profile], num_dla_cores_hint: Optional[int]) -> Any:
    bconf = builder.create_builder_config()
    if config.workspace_mib:
        bconf.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(config.workspace_mib) << 20)
    if config.optimization_level is not None and hasattr(bconf, "builder_optimization_level"):
        bconf.builder_optimization_level = int(config.optimization_level)
    _configure_precision(trt, bconf, config, plan)
    _configure_dla(trt, builder, bconf, config, num_dla_cores_hint)
    _add_profiles(builder, bconf, profiles, plan)
    return bconf


def build_engine(source: Union[str, Path, bytes], config: BuildConfig, num_dla_cores_hint: Optional[int] = None) -> BuildResult:
    """Build a serialized engine from an ONNX file or bytes with ``config``.

    The precision is obtained as this TensorRT allows (:func:`precision_plan`): builder flags on
    TensorRT 8.x-10.x; on TensorRT 11 (strongly typed only) fp16 converts the model first
    (:func:`~sdk.targets.tensorrt.fp16.convert_to_fp16`) and int8 needs a Q/DQ model.

    Raises :class:`UnsupportedModelError` with the parser's errors (node names) when TensorRT
    cannot parse the model, :class:`InputError` for a dynamic input without a profile or an
    impossible request, :class:`BuildError` with the TensorRT log's errors when the build fails.
    """
    import time

    trt = import_trt()
    caps = capabilities(trt)
    data = Path(source).read_bytes() if isinstance(source, (str, Path)) else bytes(source)
    plan = precision_plan(caps, config, has_qdq(data) if config.precision == "int8" else False)
    if plan.convert_fp16:
        from .fp16 import convert_to_fp16

        data = convert_to_fp16(data)
        source = data
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(trt, caps, plan))
    _parse(trt, network, logger, source, data)
    inputs = network_inputs(network)
    bconf = _builder_config(trt, builder, config, plan, plan_profiles(inputs, config.profiles), num_dla_cores_hint)
    timing = _load_timing_cache(bconf, config.timing_cache)
    t0 = time.perf_counter()
    serialized = builder.build_serialized_network(network, bconf)
    build_s = time.perf_counter() - t0
    if serialized is None:
        errs = logger.errors() or ["no error message from TensorRT"]
        raise BuildError("TensorRT could not build the engine: " + " | ".join(errs[-8:]),
                         "see the messages above; try --precision fp32, a larger --workspace, or no DLA core")
    if timing is not None and config.timing_cache:
        _save_timing_cache(bconf, config.timing_cache)
    return BuildResult(bytes(serialized), inputs, plan.int8_mode, list(plan.notes) + logger.warnings(), build_s)
