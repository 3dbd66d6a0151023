"""Run step of the ONNX Runtime target."""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from ...tensors import TensorSpec
from ..base import Session

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16", "tensor(uint16)": "uint16",
    "tensor(int32)": "int32", "tensor(uint32)": "uint32", "tensor(int64)": "int64", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool", "tensor(string)": "str",
}


def _spec(arg) -> TensorSpec:
    shape = tuple(d if isinstance(d, (int, str)) else None for d in (arg.shape or []))
    return TensorSpec(arg.name, shape, _ORT_TYPES.get(arg.type, arg.type))


class OnnxRuntimeSession(Session):
    """An ``onnxruntime.InferenceSession``. ``run`` calls ``InferenceSession.run`` directly with
    precomputed output names; :meth:`runner` can bind inputs and outputs once (IOBinding) so the
    latency loop does no per-call conversion."""

    target_name = "onnxruntime"

    def __init__(self, sess: Any, io_binding: bool = False, profiling_session: Any = None,
                 model_source: Any = None):
        super().__init__([_spec(a) for a in sess.get_inputs()], [_spec(a) for a in sess.get_outputs()])
        self._sess = sess
        self._model_source = model_source  # the ONNX file or bytes: to explain a failure by the graph
        self._profiling_session = profiling_session
        self._names = [o.name for o in self.outputs]
        self._io_binding = io_binding
        self.run = self._make_run()  # type: ignore[method-assign]  # instance attribute: one Python frame per call

    def _diagnose(self, feeds: Mapping[str, np.ndarray], message: str) -> Optional[str]:
        """The shape constraint of the model that the feeds break (:mod:`sdk.formats.onnx_diagnose`)."""
        from ...formats.onnx_diagnose import explain_failure

        return explain_failure(self._model_source, feeds, message)

    def _make_run(self):
        names, explain = self._names, self._explain
        c_run = _cpu_binding_run(self._sess)
        if c_run is not None:
            def run(feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
                try:
                    return dict(zip(names, c_run(names, feeds, None)))
                except Exception as exc:
                    raise explain(feeds, exc) from exc
        else:
            ort_run = self._sess.run

            def run(feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
                try:
                    return dict(zip(names, ort_run(names, feeds)))
                except Exception as exc:
                    raise explain(feeds, exc) from exc
        run.__doc__ = Session.run.__doc__
        return run

    @property
    def providers(self):
        return list(self._sess.get_providers())

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self.run(feeds)

    def _runner_impl(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """A callable for latency loops (:meth:`Session.runner` translates its errors). With
        IOBinding, inputs are copied to the device once and outputs stay on the device (what
        trtexec's GPU compute time measures); without, it is the runtime's run with the output
        names and feeds bound (outputs as the runtime returns them, a list)."""
        if not self._io_binding:
            names = self._names
            c_run = _cpu_binding_run(self._sess)
            if c_run is not None:
                return lambda: c_run(names, feeds, None)
            ort_run = self._sess.run
            return lambda: ort_run(names, feeds)
        sess = self._sess
        binding = sess.io_binding()
        device = "cuda" if any(p in ("CUDAExecutionProvider", "TensorrtExecutionProvider")
                               for p in sess.get_providers()[:1]) else "cpu"
        import onnxruntime as ort

        for name, arr in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr), device, 0))
        for name in self._names:
            binding.bind_output(name, device)
        run_binding = sess.run_with_iobinding
        run_binding(binding)  # first call allocates the outputs; later calls reuse them
        return lambda: run_binding(binding)

    def _close_impl(self) -> None:
        self._sess = None
        self.run = self._run_closed  # type: ignore[method-assign]

    def _run_closed(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        raise self._explain(feeds, RuntimeError("closed"))

    def _profile_impl(self, feeds: Mapping[str, np.ndarray], runs: int, warmup: int) -> Any:
        """ONNX Runtime's profiler on a second session (see :func:`.profile.profile_ort`);
        ``profiling_session(prefix)`` creates it with the same model, providers and options."""
        if self._profiling_session is None:
            return super()._profile_impl(feeds, runs, warmup)
        from .profile import profile_ort

        return profile_ort(self._profiling_session, self._names, self.run, feeds, runs, warmup)


def _cpu_binding_run(sess: Any):
    """The C++ binding's ``run(names, feeds, run_options)`` when only the CPU provider is
    active: the Python wrapper's per-call input checks and EP fallback add nothing there
    (failures are explained by ``Session._explain``). None for other providers, whose fallback
    matters, or when the binding is not where onnxruntime has kept it."""
    binding = getattr(sess, "_sess", None)
    if binding is not None and hasattr(binding, "run") and sess.get_providers() == ["CPUExecutionProvider"]:
        return binding.run
    return None
