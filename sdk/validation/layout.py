"""How a validated model's inputs and outputs map onto its reference model's: names and layouts.

A ``.tflite`` that ``sdk convert --option io_layout=nhwc`` wrote from an ONNX model takes and gives
NHWC tensors where the ONNX model has NCHW ones; its ``edgesdk.onnx`` metadata records, for every
graph input and output, the ONNX name and the permutation ``perm`` (the file's tensor is the ONNX
value transposed by ``perm``). The target of the model's format reads that record
(:meth:`sdk.targets.base.Target.source_io`), so no format is named here.

The validation data (``--data``) is in the validated model's layout (the one that goes to the
board); the reference gets it transposed into its own, and the board's outputs are transposed into
the reference's layout and named as its outputs before they are compared.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import EdgeSDKError, InputError

__all__ = ["IOMap", "io_map"]

Perm = Optional[Tuple[int, ...]]


def _inverse(perm: Sequence[int]) -> Tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(np.asarray(perm)))


def _trailing(a: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    """``a`` with its last ``len(perm)`` axes transposed by ``perm`` (leading axes, e.g. a stacked
    sample axis, kept)."""
    lead = a.ndim - len(perm)
    if lead < 0:
        raise InputError(f"an array of shape {list(a.shape)} cannot take the layout permutation {list(perm)}")
    return np.ascontiguousarray(a.transpose(tuple(range(lead)) + tuple(lead + int(p) for p in perm)))


@dataclass(frozen=True)
class IOMap:
    """``inputs``/``outputs``: the validated model's name -> (the reference model's name, ``perm``:
    the model's tensor is the reference's value transposed by it; None: the same layout)."""

    inputs: Dict[str, Tuple[str, Perm]] = field(default_factory=dict)
    outputs: Dict[str, Tuple[str, Perm]] = field(default_factory=dict)
    recorded: bool = False

    @property
    def identity(self) -> bool:
        return all(k == v[0] and v[1] is None for d in (self.inputs, self.outputs) for k, v in d.items())

    def reference_arrays(self, arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The model's input arrays (samples along axis 0, or stacked) as the reference takes them."""
        out: Dict[str, np.ndarray] = {}
        for k, a in arrays.items():
            name, perm = self.inputs.get(k, (k, None))
            out[name] = np.asarray(a) if perm is None else _trailing(np.asarray(a), _inverse(perm))
        return out

    def reference_names(self, carry: Mapping[str, str]) -> Dict[str, str]:
        """A ``{output: input}`` carry of the model in the reference's names."""
        return {self.outputs.get(o, (o, None))[0]: self.inputs.get(i, (i, None))[0] for o, i in carry.items()}

    def to_reference(self, outputs: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """The model's outputs named and laid out as the reference's."""
        out: Dict[str, np.ndarray] = {}
        for k, v in outputs.items():
            name, perm = self.outputs.get(k, (k, None))
            a = np.asarray(v)
            out[name] = a if perm is None or a.ndim < len(perm) else _trailing(a, _inverse(perm))
        return out

    def describe(self) -> Dict[str, Any]:
        return {"recorded": self.recorded,
                "inputs": {k: {"reference": n, "perm": list(p) if p else None} for k, (n, p) in self.inputs.items()},
                "outputs": {k: {"reference": n, "perm": list(p) if p else None} for k, (n, p) in self.outputs.items()}}


def _show(shape: Sequence[Any]) -> str:
    return "[" + ",".join(str(d) if isinstance(d, int) and d >= 0 else "?" for d in shape) + "]"


def _permuted(shape: Sequence[Any], perm: Perm) -> Tuple[Any, ...]:
    return tuple(shape) if perm is None else tuple(shape[int(i)] for i in perm)


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Equal where both dims are known (a dynamic dim matches anything)."""
    return len(a) == len(b) and all(not (isinstance(x, int) and x >= 0 and isinstance(y, int) and y >= 0) or x == y
                                    for x, y in zip(a, b))


def _recorded(m: Any) -> Optional[Dict[str, Any]]:
    from ..formats import default_target
    from ..targets.registry import target_class

    try:
        cls = target_class(default_target(m))
    except (EdgeSDKError, ImportError):  # an unknown format or a target that cannot load: nothing recorded
        return None
    return cls.source_io(m)


def _side(specs: Sequence[Any], ref_specs: Sequence[Any], record: Mapping[str, Any]) -> Dict[str, Tuple[str, Perm]]:
    out: Dict[str, Tuple[str, Perm]] = {}
    for i, s in enumerate(specs):
        entry = record.get(s.name)
        if isinstance(entry, dict) and entry.get("onnx"):
            perm = entry.get("perm")
            out[s.name] = (str(entry["onnx"]), tuple(int(p) for p in perm) if perm else None)
        elif i < len(ref_specs):  # not recorded (a signature's key): by position
            out[s.name] = (ref_specs[i].name, None)
    return out


def io_map(m: Any, ref_m: Any) -> IOMap:
    """The map from ``m``'s inputs/outputs to the reference model ``ref_m``'s. :class:`InputError`
    when they cannot correspond: other input names or dtypes, or a layout that differs while ``m``
    records none (a ``.tflite`` not written by ``sdk convert``)."""
    if ref_m is m or getattr(ref_m, "sha256", None) == getattr(m, "sha256", 0):
        return IOMap({s.name: (s.name, None) for s in m.inputs}, {s.name: (s.name, None) for s in m.outputs})
    record = _recorded(m) if ref_m.format == "onnx" and m.format != "onnx" else None
    if record is None:
        _check_same_inputs(m, ref_m)
        names, ref_names = [o.name for o in m.outputs], [o.name for o in ref_m.outputs]
        if names != ref_names and len(names) != len(ref_names):
            raise InputError(f"{m.name} has {len(names)} outputs, the reference model {ref_m.name} {len(ref_names)}")
        outs = dict(zip(names, ref_names)) if names != ref_names else {n: n for n in names}
        return IOMap({s.name: (s.name, None) for s in m.inputs}, {k: (v, None) for k, v in outs.items()})
    iomap = IOMap(_side(m.inputs, ref_m.inputs, record["inputs"]),
                  _side(m.outputs, ref_m.outputs, record["outputs"]), recorded=True)
    _check_mapped(m, ref_m, iomap)
    return iomap


def _check_same_inputs(m: Any, ref_m: Any) -> None:
    if [(s.name, s.dtype) for s in ref_m.inputs] != [(s.name, s.dtype) for s in m.inputs]:
        raise InputError(f"the reference model {ref_m.name} has other inputs than {m.name}",
                         f"inputs: {[s.to_dict() for s in ref_m.inputs]} vs {[s.to_dict() for s in m.inputs]}")
    for s, r in zip(m.inputs, ref_m.inputs):
        if len(s.shape) != len(r.shape) or _same(s.shape, r.shape):
            continue
        if any(_same(_permuted(r.shape, p), s.shape) for p in itertools.permutations(range(len(r.shape)))):
            raise InputError(
                f"input '{s.name}' of {m.name} is {_show(s.shape)}, the reference model {ref_m.name}'s is "
                f"{_show(r.shape)} (another layout), and {m.name} records no layout of its source model",
                f"convert it with 'sdk convert {ref_m.name} -o {m.name}', which records the layouts, or give "
                "a reference model that takes the same layout")


def _check_mapped(m: Any, ref_m: Any, iomap: IOMap) -> None:
    ref_in = {s.name: s for s in ref_m.inputs}
    ref_out = {s.name: s for s in ref_m.outputs}
    mapped = sorted(n for n, _ in iomap.inputs.values())
    if mapped != sorted(ref_in):
        raise InputError(f"{m.name} was converted from a model with inputs {mapped}; the reference model "
                         f"{ref_m.name} has {sorted(ref_in)}", "give the ONNX model it was converted from")
    missing = [n for n, _ in iomap.outputs.values() if n not in ref_out]
    if missing or len(iomap.outputs) != len(ref_out):
        raise InputError(f"{m.name} was converted from a model with outputs "
                         f"{sorted(n for n, _ in iomap.outputs.values())}; the reference model {ref_m.name} has "
                         f"{sorted(ref_out)}", "give the ONNX model it was converted from")
    bad: List[str] = [f"input '{s.name}' is {s.dtype}, the reference's '{iomap.inputs[s.name][0]}' "
                      f"{ref_in[iomap.inputs[s.name][0]].dtype}" for s in m.inputs
                      if s.name in iomap.inputs and s.dtype != ref_in[iomap.inputs[s.name][0]].dtype]
    # inputs only: an ONNX model's declared output shapes may be stale for the converted shapes (a
    # board output of another shape is named when the outputs are compared)
    for s in m.inputs:
        if s.name not in iomap.inputs:
            continue
        name, perm = iomap.inputs[s.name]
        want = _permuted(ref_in[name].shape, perm) if perm is None or len(perm) == len(ref_in[name].shape) else None
        if want is None or not _same(s.shape, want):
            bad.append(f"input '{s.name}' is {_show(s.shape)}, the reference's '{name}' {_show(ref_in[name].shape)}"
                       + (f" (layout {list(perm)})" if perm else ""))
    if bad:
        raise InputError(f"{m.name} does not match the reference model {ref_m.name}: {bad[0]}",
                         "give the ONNX model it was converted from, at the shapes it was converted at")
