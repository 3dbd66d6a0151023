"""Run step of the TFLite target: a session over one allocated interpreter.

Quantised int8/uint8/int16 inputs and outputs are converted with the tensor's scale and zero-point
(``quantized_io="float"``, the default: float32 in, float32 out) or passed through as the model's
integers (``quantized_io="raw"``). Inputs whose shape signature has dynamic dims (``-1``) are
resized and the tensors reallocated when a feed's shape changes. A signature on another subgraph
runs through the runtime's SignatureRunner.

Runs on the board too: Python 3.8, NumPy and the TFLite runtime.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...errors import EdgeSDKError, InputError
from ...formats.tflite import signature_ports, spec_from_details
from ...tensors import TensorSpec, format_shape
from ..base import Session


class _Port:
    """One input or output: its name, tensor index and the conversion it needs."""

    __slots__ = ("name", "index", "raw", "scale", "zero_point", "convert", "dynamic", "spec", "lo", "hi")

    def __init__(self, name: str, details: Dict[str, Any], float_io: bool):
        raw = spec_from_details(name, details)
        self.name = name
        self.index = int(details["index"])
        self.raw = np.dtype(raw.dtype)
        q = raw.quantization
        self.convert = bool(float_io and q is not None and np.issubdtype(self.raw, np.integer))
        self.scale = np.float32(q[0]) if q else np.float32(0)
        self.zero_point = np.float32(q[1]) if q else np.float32(0)
        if self.convert:
            info = np.iinfo(self.raw)
            self.lo, self.hi = float(info.min), float(info.max)
        else:
            self.lo = self.hi = 0.0
        self.dynamic = not raw.is_static
        self.spec = TensorSpec(name, raw.shape, "float32", quantization=q) if self.convert else raw

    def quantize(self, arr: np.ndarray) -> np.ndarray:
        if arr.dtype != np.float32:
            raise InputError(
                f"input '{self.name}' has dtype {arr.dtype}; this quantised input takes float32 "
                f"(quantised with scale {float(self.scale):.6g}, zero point {int(self.zero_point)})",
                f"pass float32, or raw {self.raw.name} with quantized_io=raw",
            )
        q = np.round(arr / self.scale) + self.zero_point
        np.clip(q, self.lo, self.hi, out=q)
        return q.astype(self.raw)

    def dequantize(self, arr: np.ndarray) -> np.ndarray:
        return (arr.astype(np.float32) - self.zero_point) * self.scale


def _check_shape(port: _Port, shape: Sequence[int]) -> None:
    want = port.spec.shape
    if len(shape) != len(want) or any(isinstance(w, int) and w != g for w, g in zip(want, shape)):
        raise InputError(f"input '{port.name}' has shape {format_shape(shape)}, the model expects {format_shape(want)}")


class TFLiteSession(Session):
    """A TFLite interpreter with its tensors allocated. ``run(feeds)`` sets the inputs, invokes and
    returns copies of the outputs; :meth:`runner` does only ``set_tensor`` + ``invoke`` per call
    (outputs stay in the interpreter), like a native benchmark loop."""

    target_name = "tflite"
    profile_unavailable = ("the TFLite / LiteRT Python Interpreter exposes no op profiler (its C++ profiler has no "
                           "Python accessor); use the benchmark_model tool with --enable_op_profiling=true")

    def __init__(self, interp: Any, *, signature: Optional[str] = None, quantized_io: str = "float",
                 delegates: Sequence[Any] = (), runtime: str = "", source: Optional[Tuple[Any, Any]] = None):
        float_io = quantized_io == "float"
        ins, outs, primary = signature_ports(interp, signature)
        self._in = [_Port(n, d, float_io) for n, d in ins]
        self._out = [_Port(n, d, float_io) for n, d in outs]
        super().__init__([p.spec for p in self._in], [p.spec for p in self._out])
        self._interp = interp
        #: (the TFLiteRuntime, the model's path or bytes): to explain a failure by the graph
        self._source = source
        self._explained: Optional[Tuple[str, Tuple[Optional[str], Optional[str]]]] = None
        self._delegates = list(delegates)
        self.signature = signature
        self.quantized_io = quantized_io
        self.runtime = runtime
        self._set = interp.set_tensor
        self._get = interp.get_tensor
        self._invoke = interp.invoke
        self._shapes: Dict[int, Tuple[int, ...]] = {p.index: tuple(int(d) for d in d_["shape"])
                                                    for p, (_, d_) in zip(self._in, ins)}
        #: Shapes of the dynamic inputs as the model allocates them (dynamic dims usually 1): what a
        #: benchmark with random inputs uses when no shape is given.
        self.default_shapes: Dict[str, Tuple[int, ...]] = {p.name: self._shapes[p.index] for p in self._in
                                                           if p.dynamic}
        self._sig = None if primary else interp.get_signature_runner(signature)
        self._dynamic = any(p.dynamic for p in self._in)
        self._convert = any(p.convert for p in self._in + self._out)
        self._pairs_in = [(p.name, p.index) for p in self._in]
        self._pairs_out = [(p.name, p.index) for p in self._out]
        self._n_in = len(self._in)
        if self._sig is not None:
            self._run_impl = self._run_signature  # type: ignore[method-assign]
        elif len(self._in) == 1 and len(self._out) == 1 and not self._convert:
            self._run_impl = self._one_in_one_out()  # type: ignore[method-assign,assignment]
            self.run = self._run_impl  # type: ignore[method-assign]  # translates its own errors: one frame per call
        elif not self._dynamic and not self._convert:
            self._run_impl = self._run_plain  # type: ignore[method-assign]
        else:
            self._run_impl = self._run_general  # type: ignore[method-assign]

    def _one_in_one_out(self) -> Callable[[Mapping[str, np.ndarray]], Dict[str, np.ndarray]]:
        """The common case as one closure: set, invoke, get; anything unusual (a new shape, a
        wrong feed) goes to the general path, which resizes or explains."""
        name, index = self._pairs_in[0]
        out_name, out_index = self._pairs_out[0]
        set_tensor, invoke, get = self._set, self._invoke, self._get
        current = self._shapes
        general = self._run_general

        explain = self._explain

        def run_one(feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
            try:
                arr = feeds[name]
                if arr.shape != current[index] or len(feeds) != 1:
                    return general(feeds)
                set_tensor(index, arr)
                invoke()
                return {out_name: get(out_index)}
            except EdgeSDKError:
                raise
            except Exception as exc:
                raise explain(feeds, exc) from exc

        return run_one

    # -- failures ------------------------------------------------------------------------------------
    def _explain_failure(self, feeds: Mapping[str, np.ndarray], message: str) -> Tuple[Optional[str], Optional[str]]:
        """(the node that failed, the constraint) by :mod:`.diagnose`, once per message."""
        if self._explained is not None and self._explained[0] == message:
            return self._explained[1]
        got: Tuple[Optional[str], Optional[str]] = (None, None)
        try:
            from .diagnose import explain_failure

            shapes = {p.name: tuple(int(d) for d in np.asarray(feeds[p.name]).shape) for p in self._in if p.name in feeds}
            data, builtin = None, None
            if self._source is not None:
                rt, model = self._source
                data = model if isinstance(model, (bytes, bytearray)) else Path(model).read_bytes()
                if "delegate" in message.lower():
                    builtin = rt.Interpreter(model_content=bytes(data), **rt.resolver_kwargs(False))
            got = explain_failure(message, self._interp, shapes, {p.name: p.index for p in self._in},
                                  bytes(data) if data is not None else None, builtin)
        except Exception:  # noqa: BLE001 - an explanation is a bonus; the runtime's own line stays
            pass
        self._explained = (message, got)
        return got

    def _what_failed(self, feeds: Mapping[str, np.ndarray], message: str) -> Optional[str]:
        return self._explain_failure(feeds, message)[0]

    def _diagnose(self, feeds: Mapping[str, np.ndarray], message: str) -> Optional[str]:
        return self._explain_failure(feeds, message)[1]

    def _run_closed(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        raise RuntimeError("closed")

    # -- run paths ---------------------------------------------------------------------------------
    def _run_plain(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if len(feeds) != self._n_in:
            raise ValueError("wrong number of inputs")
        set_tensor = self._set
        for name, index in self._pairs_in:
            set_tensor(index, feeds[name])
        self._invoke()
        get = self._get
        return {name: get(index) for name, index in self._pairs_out}

    def _run_general(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        arrays = self._inputs_for(feeds)
        set_tensor = self._set
        for index, arr in arrays:
            set_tensor(index, arr)
        self._invoke()
        get = self._get
        return {p.name: (p.dequantize(get(p.index)) if p.convert else get(p.index)) for p in self._out}

    def _run_signature(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if len(feeds) != self._n_in:
            raise ValueError("wrong number of inputs")
        kwargs = {p.name: (p.quantize(feeds[p.name]) if p.convert else feeds[p.name]) for p in self._in}
        for p in self._in:  # the SignatureRunner resizes every input it is given: check static dims first
            _check_shape(p, kwargs[p.name].shape)
        sig = self._sig
        assert sig is not None  # chosen in __init__ only with a signature runner
        out = sig(**kwargs)
        return {p.name: (p.dequantize(out[p.name]) if p.convert else out[p.name]) for p in self._out}

    def _inputs_for(self, feeds: Mapping[str, np.ndarray]) -> List[Tuple[int, np.ndarray]]:
        """``(tensor index, array)`` per input: converted, and the interpreter resized when a
        dynamic input's shape changes."""
        if len(feeds) != self._n_in:
            raise ValueError("wrong number of inputs")
        arrays = []
        for p in self._in:
            arr = feeds[p.name]
            if p.convert:
                arr = p.quantize(arr)
            arrays.append((p.index, arr))
        if self._dynamic:
            self._fit_shapes(arrays)
        return arrays

    def _fit_shapes(self, arrays: Sequence[Tuple[int, np.ndarray]]) -> None:
        changed = [(p, arr.shape) for p, (_, arr) in zip(self._in, arrays)
                   if p.dynamic and tuple(arr.shape) != self._shapes[p.index]]
        if not changed:
            return
        for p, shape in changed:
            _check_shape(p, shape)
        interp = self._interp
        for p, shape in changed:
            interp.resize_tensor_input(p.index, [int(d) for d in shape])
            self._shapes[p.index] = tuple(int(d) for d in shape)
        interp.allocate_tensors()

    # -- latency loop ------------------------------------------------------------------------------
    def _runner_impl(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """A callable that sets ``feeds`` (converted once, here) and invokes; outputs are left in
        the interpreter. It runs once before it is returned, so bad feeds raise here
        (:meth:`Session.runner` translates the runtime's errors)."""
        run = self._make_runner(feeds)
        run()
        return run

    def _make_runner(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        if self._sig is not None:
            sig = self._sig
            kwargs = {p.name: (p.quantize(feeds[p.name]) if p.convert else np.ascontiguousarray(feeds[p.name]))
                      for p in self._in}
            if len(feeds) != self._n_in:
                raise ValueError("wrong number of inputs")
            for p in self._in:
                _check_shape(p, kwargs[p.name].shape)
            return lambda: sig(**kwargs)
        arrays = [(i, np.ascontiguousarray(a)) for i, a in self._inputs_for(feeds)]
        set_tensor, invoke = self._set, self._invoke
        if self._dynamic and len(arrays) == 1:
            index, arr = arrays[0]
            shape = tuple(arr.shape)
            current = self._shapes
            fit = self._fit_shapes

            def run_one_dynamic() -> None:
                if current[index] != shape:  # another runner resized the input since
                    fit(arrays)
                set_tensor(index, arr)
                invoke()

            return run_one_dynamic
        if self._dynamic:
            shapes = [(i, tuple(a.shape)) for i, a in arrays]
            current = self._shapes
            fit = self._fit_shapes

            def run_dynamic() -> None:
                for i, shape in shapes:
                    if current[i] != shape:
                        fit(arrays)
                        break
                for i, a in arrays:
                    set_tensor(i, a)
                invoke()

            return run_dynamic
        if len(arrays) == 1:
            index, arr = arrays[0]

            def run_one() -> None:
                set_tensor(index, arr)
                invoke()

            return run_one

        def run_many() -> None:
            for i, a in arrays:
                set_tensor(i, a)
            invoke()

        return run_many

    # -- lifecycle ---------------------------------------------------------------------------------
    def _close_impl(self) -> None:
        # The interpreter must go before the delegates it uses.
        self._run_impl = self._run_closed  # type: ignore[method-assign]
        self.__dict__.pop("run", None)  # back to Session.run, which reports the closed session
        self._set = self._get = self._invoke = None
        self._sig = None
        self._interp = None
        self._delegates = []

    def describe(self) -> Dict[str, Any]:
        return {"runtime": self.runtime, "signature": self.signature, "quantized_io": self.quantized_io,
                "inputs": [s.to_dict() for s in self.inputs], "outputs": [s.to_dict() for s in self.outputs]}
