"""Run step of the ONNX Runtime target."""
from __future__ import annotations

from typing import Any, Dict, Mapping

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

    def __init__(self, sess: Any, io_binding: bool = False):
        super().__init__([_spec(a) for a in sess.get_inputs()], [_spec(a) for a in sess.get_outputs()])
        self._sess = sess
        self._names = [o.name for o in self.outputs]
        self._ort_run = sess.run
        self._io_binding = io_binding

    @property
    def providers(self):
        return list(self._sess.get_providers())

    def _run_impl(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        names = self._names
        return dict(zip(names, self._ort_run(names, feeds)))

    def runner(self, feeds: Mapping[str, np.ndarray]):
        """A callable for latency loops. With IOBinding, inputs are copied to the device once and
        outputs stay on the device (what trtexec's GPU compute time measures); without, it is
        ``InferenceSession.run`` with the names bound."""
        if not self._io_binding:
            run, names = self._ort_run, self._names
            return lambda: run(names, feeds)
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
        self._ort_run = None
