"""The FP32 reference of ``sdk debug reduce --fails diff:MIN_SNR_DB@TARGET --reference fp32.onnx``:
its values of the candidate's tensors on one sample, to feed a candidate subgraph's boundary and
to judge its outputs.

A candidate tensor has a counterpart in the reference when the reference has a tensor of the same
name (a Q/DQ model made by ``sdk quantize`` keeps the FP32 model's float tensor names; a folded
BatchNormalization's output name goes to the Conv that absorbed it), or when it is the output of a
DequantizeLinear of a QuantizeLinear of such a tensor (``X -> Q -> DQ -> X'``: ``X'`` is compared with
the reference's ``X``, so the activation's quantization counts in the layer that makes ``X``). A
tensor without a counterpart is neither fed nor judged.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError

__all__ = ["Reference", "snr_db"]

_FLOAT = ("float32", "float16", "float64")


def snr_db(reference: np.ndarray, value: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (ref - value)^2), in float64; inf when equal."""
    a = np.asarray(reference, np.float64).ravel()
    d = a - np.asarray(value, np.float64).ravel()
    noise = float(np.einsum("i,i->", d, d))
    if noise == 0.0:
        return math.inf
    signal = float(np.einsum("i,i->", a, a))
    if signal == 0.0 or not math.isfinite(noise):
        return -math.inf
    return 10.0 * math.log10(signal / noise)


class Reference:
    """The FP32 model ``path`` run once on ``feed``, its tensors mapped onto ``candidate`` (the
    candidate's :class:`sdk.debug.subgraph.Subgraph`)."""

    def __init__(self, path: Any, candidate: Any, feed: Mapping[str, np.ndarray]):
        import onnx

        from ..quantize.accuracy import ort_session
        from ..quantize.calibrate import augment

        self.path = Path(str(path))
        if not self.path.is_file():
            raise InputError(f"--reference: '{self.path}' does not exist", "give the FP32 .onnx the model was made from")
        if self.path.suffix.lower() != ".onnx":
            raise InputError(f"--reference must be an FP32 ONNX model, not '{self.path.name}'",
                             "give the FP32 .onnx the model was made from")
        try:
            ref = onnx.load(str(self.path))
        except Exception as exc:
            raise InputError(f"--reference: '{self.path}' is not an ONNX model ({exc})",
                             "give the FP32 .onnx the model was made from") from exc
        inits = {t.name for t in ref.graph.initializer}
        ref_inputs = sorted(i.name for i in ref.graph.input if i.name not in inits)
        cand_inputs = sorted(i.name for i in candidate.graph_inputs)
        if ref_inputs != cand_inputs:
            raise InputError(f"--reference '{self.path.name}' takes inputs {', '.join(ref_inputs) or '(none)'}; "
                             f"the model takes {', '.join(cand_inputs)}",
                             "give the FP32 model this model was made from")
        self.mapping = _counterparts(ref, candidate)
        if not self.mapping:
            raise InputError(f"no tensor of the model has a counterpart in --reference '{self.path.name}' "
                             "(no shared tensor names)", "give the FP32 model this model was made from")
        wanted = sorted({r for r in self.mapping.values() if r not in ref_inputs})
        try:
            sess = ort_session(augment(ref, wanted))
            names = [o.name for o in sess.get_outputs()]
            got = sess.run(names, {k: np.asarray(feed[k]) for k in ref_inputs})
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"--reference '{self.path.name}' does not run on the model's inputs: {first}",
                             "give the FP32 model this model was made from (same inputs and shapes)") from exc
        self.values: Dict[str, np.ndarray] = {k: np.asarray(feed[k]) for k in ref_inputs}
        self.values.update({k: np.asarray(v) for k, v in zip(names, got)})
        self.mapping = {c: r for c, r in self.mapping.items() if r in self.values}
        self._dtype = {t: _dtype(candidate, t) for t in self.mapping}
        candidate.learn_shapes({c: self.values[r] for c, r in self.mapping.items()
                                if self.values[r].dtype.kind == "f" and str(self._dtype.get(c) or "float32") in _FLOAT})
        self._readers = candidate.consumers
        self._q_nodes = {i for i, n in enumerate(candidate.nodes) if n.op_type == "QuantizeLinear"}

    def known(self) -> Dict[str, np.ndarray]:
        """``{candidate tensor: the reference's value}`` (cast to the candidate's type) for every
        tensor with a counterpart: the boundary values a subgraph is fed."""
        out: Dict[str, np.ndarray] = {}
        for c, r in self.mapping.items():
            v = self.values[r]
            dt = self._dtype.get(c)
            out[c] = v.astype(dt) if dt is not None and v.dtype != dt else v
        return out

    def judged(self, made: Sequence[str]) -> List[str]:
        """Of the tensors ``made`` (by a subgraph), those compared with the reference: float, with a
        counterpart, and read by something other than their own QuantizeLinear (the value the next
        layer reads)."""
        out = []
        for t in made:
            if t not in self.mapping or str(self._dtype.get(t) or "float32") not in _FLOAT:
                continue
            readers = self._readers.get(t, [])
            if readers and all(i in self._q_nodes for i in readers):
                continue
            out.append(t)
        return out

    def compare(self, outputs: Mapping[str, np.ndarray], min_snr_db: float) -> Tuple[bool, str, List[str]]:
        """``(failed, message, unjudged)``: failed when an output's SNR against its counterpart is
        below ``min_snr_db``; ``unjudged``: outputs without a counterpart (not failures)."""
        worst: Optional[Tuple[float, str]] = None
        unjudged: List[str] = []
        for name, value in outputs.items():
            r = self.mapping.get(name)
            got = np.asarray(value)
            if got.dtype.kind != "f":
                continue  # shapes, indices: not what an accuracy tolerance is about
            if r is None:
                unjudged.append(name)
                continue
            want = self.values[r]
            if want.shape != got.shape:
                if want.size != got.size:
                    unjudged.append(name)
                    continue
                got = got.reshape(want.shape)
            s = snr_db(want, got)
            if worst is None or s < worst[0]:
                worst = (s, name)
        if worst is None:
            return False, "no output has a counterpart in the reference", unjudged
        s, name = worst
        ref_name = self.mapping[name]
        where = f"'{name}'" + (f" (reference '{ref_name}')" if ref_name != name else "")
        failed = s < min_snr_db
        return failed, f"SNR {s:.2f} dB {'<' if failed else '>='} {min_snr_db:g} dB at {where}", unjudged


def _dtype(sub: Any, name: str) -> Optional[np.dtype]:
    from onnx import helper

    vi = sub.value_info.get(name)
    et = vi.type.tensor_type.elem_type if vi is not None else 0
    return np.dtype(helper.tensor_dtype_to_np_dtype(et)) if et else None


def _counterparts(ref: Any, sub: Any) -> Dict[str, str]:
    """``{candidate tensor: reference tensor}``: same names, and Q/DQ outputs back to their float tensor."""
    inits = {t.name for t in ref.graph.initializer}
    ref_tensors = {o for n in ref.graph.node for o in n.output if o} | {i.name for i in ref.graph.input if i.name not in inits}
    made = {o for n in sub.nodes for o in n.output if o} | {i.name for i in sub.graph_inputs}
    out = {t: t for t in made if t in ref_tensors}
    q_out = {n.output[0]: n.input[0] for n in sub.nodes if n.op_type == "QuantizeLinear" and n.input and n.output}
    for n in sub.nodes:
        if n.op_type == "DequantizeLinear" and n.input and n.output and n.input[0] in q_out:
            x = q_out[n.input[0]]
            if x in ref_tensors and n.output[0] not in out:
                out[n.output[0]] = x
    return out
