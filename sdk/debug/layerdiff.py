"""``sdk debug diff``: the same inputs through the FP32 ONNX model (ONNX Runtime, this host) and
through a candidate, compared tensor by tensor where both sides have the tensor.

Candidates (a registry, :data:`CANDIDATES`, picked by the file's format): an ONNX model (an INT8
Q/DQ model from ``sdk quantize``, or any other ONNX model with the same tensor names), a ``.tflite``
model (its tensors read with the interpreter's ``experimental_preserve_all_tensors``, matched by
name, NHWC transposed back to NCHW), a TensorRT engine (only its own outputs: the engine is run
as built, so marking outputs never changes the engine under test; its fused layers' boundaries are
listed from the engine inspector). With ``board=`` the candidate runs on a board through its agent
(ONNX: intermediate tensors exposed as outputs of a copy of the candidate, written compressed
and capped; TFLite: outputs only).

Intermediate tensors are exposed by :func:`sdk.quantize.calibrate.augment` (the quantizer's own
way), and a Q/DQ candidate's tensor ``X`` is read where its consumers read it (the output of
``X``'s QuantizeLinear -> DequantizeLinear), so the activation's own quantization counts.
Per tensor: cosine, SNR (dB), max abs error, accumulated over the samples one sample at a time
(nothing but the running sums is kept), and for a Q/DQ candidate the error each quantized layer
adds on FP32's inputs (:func:`sdk.quantize.fallback.rank_layers`, relative squared error, mean over
channels). The first divergence is the first tensor in graph order whose SNR falls below
``min_snr_db`` (or whose cosine falls below ``min_cosine``).
"""
from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InputError, QuantizationError, TargetUnavailableError, first_line
from ..registry import Registry

__all__ = ["DiffConfig", "LayerDiff", "DiffReport", "diff", "CANDIDATES", "Candidate", "SCHEMA_VERSION",
           "plant_scale_fault"]

SCHEMA_VERSION = 1
#: SNR (dB) that stands for "exact" when a layer's drop is measured (model inputs, identical tensors)
SNR_CAP = 100.0
Feed = Mapping[str, np.ndarray]


@dataclass
class DiffConfig:
    """``min_snr_db`` / ``min_cosine``: a tensor below either is past the tolerance, and it diverges
    (is where the error starts) when its layer also lost ``min_drop_db`` of SNR against its inputs
    (INT8 error accumulates with depth; the layer that breaks a model loses it at once);
    ``added_error_samples``: how
    many samples measure each layer's own error (Q/DQ candidates; 0: not measured);
    ``board``: run the candidate there; ``max_transfer_mb``: the cap on the tensors a board sends
    back (compressed; past it, tensors are left out evenly and the report says so); ``threads``:
    ONNX Runtime threads on the host (None: its default)."""

    min_snr_db: float = 20.0
    min_cosine: float = 0.99
    min_drop_db: float = 10.0
    added_error_samples: int = 4
    board: Optional[str] = None
    max_transfer_mb: float = 256.0
    threads: Optional[int] = None
    trust_new_host: bool = False


@dataclass
class LayerDiff:
    """One compared tensor: the FP32 model's ``tensor`` (made by ``node``, ``op``, at ``depth`` =
    the node's position in graph order), the candidate's tensor it was compared with, and the errors
    over all samples. ``added_error``: what the layer alone in the candidate's form adds on FP32's
    inputs (None where not measured); ``gain``: how much of it reaches the outputs (its topological
    group alone in the candidate's form, as the quantizer measures it); ``share`` = their product, the
    quantizer's ranking score."""

    tensor: str
    node: str
    op: str
    depth: int
    candidate_tensor: str
    cosine: float
    snr_db: float
    max_abs_error: float
    shape: List[int]
    added_error: Optional[float] = None
    gain: Optional[float] = None
    diverges: bool = False
    snr_drop_db: float = 0.0
    candidate_node: Optional[str] = None   # the candidate's node making it (BatchNormalization folded into a Conv...)

    @property
    def share(self) -> Optional[float]:
        """``added_error x gain``: the layer's estimated share of the output error."""
        return None if self.added_error is None else self.added_error * (1.0 if self.gain is None else self.gain)

    def to_dict(self) -> Dict[str, Any]:
        return {"tensor": self.tensor, "node": self.node, "op": self.op, "depth": self.depth,
                "candidate_tensor": self.candidate_tensor, "cosine": _num(self.cosine), "snr_db": _num(self.snr_db),
                "max_abs_error": _num(self.max_abs_error), "shape": list(self.shape),
                "added_error": None if self.added_error is None else _num(self.added_error),
                "gain": None if self.gain is None else _num(self.gain),
                "snr_drop_db": _num(self.snr_drop_db), "diverges": self.diverges,
                "candidate_node": self.candidate_node}


def _num(v: float) -> Any:
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")


@dataclass
class DiffReport:
    """The result of :func:`diff` (``to_dict``: schema ``kind: "layer-diff"``, ``schema_version`` 1)."""

    model: str
    candidate: str
    candidate_kind: str
    board: Optional[str]
    samples: int
    min_snr_db: float
    min_cosine: float
    min_drop_db: float
    layers: List[LayerDiff] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def first_divergence(self) -> Optional[LayerDiff]:
        """The first tensor in graph order past the tolerance, or None."""
        return next((x for x in self.layers if x.diverges), None)

    def ranked(self) -> List[LayerDiff]:
        """Layers with a measured ``added_error``, largest ``share`` of the output error first (the
        quantizer's order: the layers to keep in float first)."""
        rows = [x for x in self.layers if x.added_error is not None]
        return sorted(rows, key=lambda x: -(x.share or 0.0))

    def summary(self) -> str:
        first = self.first_divergence
        n = len(self.layers)
        where = f" on board {self.board}" if self.board else ""
        if first is None:
            past = sum(1 for x in self.layers if x.snr_db < self.min_snr_db or x.cosine < self.min_cosine)
            return (f"{n} tensors compared over {self.samples} samples{where}: no layer diverges "
                    f"({past} past SNR {self.min_snr_db:g} dB / cosine {self.min_cosine:g} by accumulated error only)")
        by = f" = candidate's {first.candidate_node}" if first.candidate_node and first.candidate_node != first.node else ""
        return (f"{n} tensors compared over {self.samples} samples{where}; first divergence: {first.node}{by} ({first.op}, "
                f"depth {first.depth}) output '{first.tensor}': SNR {first.snr_db:.1f} dB ({first.snr_drop_db:.1f} dB "
                f"below its inputs), cosine {first.cosine:.4f}, "
                f"max abs error {first.max_abs_error:.4g}")

    def to_dict(self) -> Dict[str, Any]:
        first = self.first_divergence
        return {"schema_version": SCHEMA_VERSION, "kind": "layer-diff", "model": self.model, "candidate": self.candidate,
                "candidate_kind": self.candidate_kind, "board": self.board, "samples": self.samples,
                "tolerance": {"min_snr_db": self.min_snr_db, "min_cosine": self.min_cosine,
                              "min_drop_db": self.min_drop_db},
                "first_divergence": None if first is None else first.to_dict(), "summary": self.summary(),
                "outputs": list(self.outputs), "notes": list(self.notes), "seconds": round(self.seconds, 3),
                "ranked": [x.candidate_node or x.node for x in self.ranked()], "layers": [x.to_dict() for x in self.layers]}

    def write_html(self, path: Any) -> None:
        from ..atomic import atomic_write
        from ..reports.debug_html import layer_diff_page

        atomic_write(path, layer_diff_page(self.to_dict()))


# -- running accumulators ---------------------------------------------------------------------------

#: elements per float32 partial sum in :func:`_dot` (their sum in float64): relative error about
#: sqrt(_BLOCK) x 6e-8 on sums of squares, against float64 throughout 3.7x the time on 1 M elements
_BLOCK = 1024


def _background(make: Callable[[], Any]) -> Any:
    """``make()`` started on a thread of its own: a :class:`concurrent.futures.Future` (its worker is
    joined at interpreter exit, so a process never ends while it is inside ONNX Runtime)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgesdk-diff")
    try:
        return pool.submit(make)
    finally:
        pool.shutdown(wait=False)


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """``sum(x * y)`` of two flat float32 arrays: float32 sums of ``_BLOCK`` products (einsum, not
    BLAS: no thread pool on a busy host), added up in float64."""
    m = x.size - x.size % _BLOCK
    head = (float(np.einsum("ij,ij->i", x[:m].reshape(-1, _BLOCK), y[:m].reshape(-1, _BLOCK)).sum(dtype=np.float64))
            if m else 0.0)
    if not math.isfinite(head):       # float32 products past 3.4e38 (values above 1.8e19): all in float64
        head = float(np.dot(x[:m].astype(np.float64), y[:m].astype(np.float64)))
    return head + float(np.dot(x[m:].astype(np.float64), y[m:].astype(np.float64)))


def _max_abs_difference(a32: np.ndarray, b32: np.ndarray, d: np.ndarray) -> float:
    """``max |a - b|`` exactly: ``d`` (``a - b`` in float32) is off by up to half an ulp (7.4e-6 on an
    error of 128), so the elements within an ulp of its largest are subtracted again in float64."""
    ad = np.abs(d)
    top = float(np.max(ad))
    if not math.isfinite(top) or top == 0.0:
        return top
    near = np.flatnonzero(ad >= np.float32(top * (1.0 - 2.0 ** -22)))
    return float(np.max(np.abs(a32[near].astype(np.float64) - b32[near].astype(np.float64))))


class _Acc:
    __slots__ = ("dot", "aa", "bb", "noise", "maxabs", "shape")

    def __init__(self) -> None:
        self.dot = self.aa = self.bb = self.noise = 0.0
        self.maxabs = 0.0
        self.shape: List[int] = []

    def update(self, a: np.ndarray, b: np.ndarray) -> None:
        a32 = np.ascontiguousarray(a, np.float32).ravel()
        b32 = np.ascontiguousarray(b, np.float32).ravel()
        d = a32 - b32       # exact to half an ulp of the difference
        self.dot += _dot(a32, b32)
        self.aa += _dot(a32, a32)
        self.bb += _dot(b32, b32)
        self.noise += _dot(d, d)
        if d.size:
            self.maxabs = max(self.maxabs, _max_abs_difference(a32, b32, d))

    def cosine(self) -> float:
        if self.aa == 0.0 and self.bb == 0.0:
            return 1.0
        if self.aa == 0.0 or self.bb == 0.0:
            return 0.0
        return self.dot / math.sqrt(self.aa * self.bb)

    def snr_db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        if self.aa == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.aa / self.noise)


# -- candidates ------------------------------------------------------------------------------------

class Candidate:
    """One kind of candidate. :meth:`tensors` maps FP32 tensor names to the candidate's own names
    (the tensors it can expose); :meth:`run` yields, per feed, ``{FP32 tensor name: array}``."""

    kind = "?"

    def __init__(self, path: Path, ref_proto: Any, cfg: DiffConfig):
        self.path = path
        self.ref = ref_proto
        self.cfg = cfg
        self.notes: List[str] = []

    def tensors(self, wanted: Sequence[str]) -> Dict[str, str]:
        raise NotImplementedError

    def run(self, mapping: Mapping[str, str], feeds: Sequence[Feed]) -> Iterator[Dict[str, np.ndarray]]:
        raise NotImplementedError

    def qdq_proto(self) -> Optional[Any]:
        """The candidate as a Q/DQ ONNX graph (for the layers' own errors), or None."""
        return None

    def producers(self) -> Dict[str, str]:
        """{candidate tensor: the candidate's node that computes it (through its own Q/DQ)}."""
        return {}


def _read_names(proto: Any) -> Dict[str, str]:
    """For each float tensor of ``proto``: the tensor its float consumers read (``X`` itself, or the
    output of ``X``'s QuantizeLinear -> DequantizeLinear)."""
    q_of = {n.input[0]: n for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input}
    dq_of = {n.input[0]: n for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.input}
    produced = {o for n in proto.graph.node for o in n.output} | {i.name for i in proto.graph.input}
    out: Dict[str, str] = {}
    for name in produced:
        q = q_of.get(name)
        dq = dq_of.get(q.output[0]) if q is not None else None
        out[name] = dq.output[0] if dq is not None else name
    return out


class OnnxCandidate(Candidate):
    kind = "onnx"

    def __init__(self, path: Path, ref_proto: Any, cfg: DiffConfig):
        super().__init__(path, ref_proto, cfg)
        import onnx

        self.proto = onnx.load(str(path))
        self.is_qdq = any(n.op_type == "QuantizeLinear" for n in self.proto.graph.node)
        self.kind = "onnx-qdq" if self.is_qdq else "onnx"

    def tensors(self, wanted: Sequence[str]) -> Dict[str, str]:
        reads = _read_names(self.proto)
        return {t: reads[t] for t in wanted if t in reads}

    def qdq_proto(self) -> Optional[Any]:
        return self.proto if self.is_qdq else None

    def producers(self) -> Dict[str, str]:
        made = {o: n for n in self.proto.graph.node for o in n.output}
        out: Dict[str, str] = {}
        for t, n in made.items():
            while n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input and n.input[0] in made:
                n = made[n.input[0]]
            out[t] = n.name
        return out

    def augmented(self, mapping: Mapping[str, str]) -> Any:
        from ..quantize.calibrate import augment

        return augment(self.proto, sorted(set(mapping.values())))

    def _bytes(self) -> Optional[bytes]:
        """The candidate file's bytes, when they load on their own (no external weights)."""
        from ..quantize.calibrate import has_external_data

        return None if has_external_data(self.proto) else self.path.read_bytes()

    def run(self, mapping: Mapping[str, str], feeds: Sequence[Feed]) -> Iterator[Dict[str, np.ndarray]]:
        from ..quantize.accuracy import ort_session
        from ..quantize.calibrate import augment_bytes
        from concurrent.futures import wait

        from ..quantize.graph import GraphIndex

        data = self._bytes()
        plain_outputs = [o.name for o in self.proto.graph.output]
        names_out = sorted(set(mapping.values()))
        sess = ort_session(augment_bytes(data, self.proto, names_out, GraphIndex(self.proto).elem_type)
                           if data is not None else self.augmented(mapping), self.cfg.threads, spinning=False)
        # does exposing the tensors change what the model computes (fusions it blocks)? The unexposed
        # model runs the first sample on a thread while the samples run (ONNX Runtime releases the GIL);
        # started once the exposed session exists, so it does not delay the sessions the samples need
        plain = _background(lambda: ort_session(self.path if data is not None else self.proto, self.cfg.threads,
                                                spinning=False).run(plain_outputs, dict(feeds[0])))
        try:
            names = [o.name for o in sess.get_outputs()]
            back = {v: k for k, v in mapping.items()}
            first: Dict[str, np.ndarray] = {}
            for i, feed in enumerate(feeds):
                got = dict(zip(names, sess.run(names, dict(feed))))
                if i == 0:
                    first = {o: got[o] for o in plain_outputs if o in got}
                yield {back[k]: v for k, v in got.items() if k in back}
        finally:
            wait([plain])
        moved = max((float(np.max(np.abs(np.asarray(p, np.float64) - np.asarray(first[o], np.float64))))
                     for o, p in zip(plain_outputs, plain.result()) if o in first and np.asarray(p).size and
                     np.asarray(p).dtype.kind == "f"), default=0.0)
        if moved > 0:
            self.notes.append(f"exposing the intermediate tensors moved the candidate's outputs by up to "
                              f"{moved:.3g} (ONNX Runtime fuses differently around exposed tensors)")


class TFLiteCandidate(Candidate):
    kind = "tflite"

    def _interp(self) -> Any:
        from ..formats.tflite import load_runtime, quiet_native_info

        rt = load_runtime()
        with quiet_native_info():
            it = rt.Interpreter(model_path=str(self.path), experimental_preserve_all_tensors=True,
                                **rt.resolver_kwargs(False))
            it.allocate_tensors()
        return it

    def _recorded(self) -> Dict[str, Tuple[str, Optional[Tuple[int, ...]]]]:
        """{TFLite tensor: (ONNX tensor, perm)} from the ``edgesdk.onnx`` metadata ``sdk convert``
        writes (the TFLite tensor is the ONNX value transposed by ``perm``); {} without it."""
        if not hasattr(self, "_rec"):
            from ..targets.tflite.convert import onnx_names

            try:
                tensors = onnx_names(self.path.read_bytes()).get("tensors") or {}
            except ValueError:
                tensors = {}
            self._rec = {k: (str(v["onnx"]), tuple(int(i) for i in v["perm"]) if v.get("perm") else None)
                         for k, v in tensors.items() if isinstance(v, dict) and v.get("onnx")}
        return self._rec

    def tensors(self, wanted: Sequence[str]) -> Dict[str, str]:
        it = self._interp()
        names = {d["name"] for d in it.get_tensor_details()}
        out = {t: t for t in wanted if t in names}
        rec = self._recorded()
        if rec:  # the recorded map: the tensor named as the ONNX one if it holds it, else another holding it
            holders: Dict[str, str] = {}
            for k, (onnx_name, _perm) in rec.items():
                if k in names and (onnx_name not in holders or k == onnx_name):
                    holders[onnx_name] = k
            out = {t: holders[t] for t in wanted if t in holders}
        ref_outs = [o.name for o in self.ref.graph.output]
        cand_outs = [d["name"] for d in it.get_output_details()]
        for r, c in zip(ref_outs, cand_outs):  # outputs map by position when the names differ
            out.setdefault(r, c)
        if len(out) <= len(ref_outs):
            self.notes.append("the .tflite tensors share no names with the ONNX model beyond its outputs: "
                              "only the outputs are compared")
        return out

    def run(self, mapping: Mapping[str, str], feeds: Sequence[Feed]) -> Iterator[Dict[str, np.ndarray]]:
        it = self._interp()
        details = {d["name"]: d for d in it.get_tensor_details()}
        index = {k: d["index"] for k, d in details.items()}
        inputs = it.get_input_details()
        rec = self._recorded()
        for feed in feeds:
            for d, (_name, arr) in zip(inputs, _match_inputs(inputs, feed, rec)):
                x = np.asarray(arr)
                if rec:
                    x = _file_layout(x, rec[d["name"]][1] if d["name"] in rec else None)
                elif tuple(x.shape) != tuple(d["shape"]) and x.ndim == 4 and \
                        tuple(x.transpose(0, 2, 3, 1).shape) == tuple(d["shape"]):
                    x = x.transpose(0, 2, 3, 1)  # no record: guessed from the shapes
                it.set_tensor(d["index"], _quantized(x, d))
            it.invoke()
            yield {t: _onnx_layout(_dequantized(np.asarray(it.get_tensor(index[c])), details[c]),
                                   rec.get(c, ("", None))[1])
                   for t, c in mapping.items() if c in index}


def _dequantized(a: np.ndarray, detail: Mapping[str, Any]) -> np.ndarray:
    """An integer tensor with scales (a full-integer model's activations) as the real values it
    stands for, ``(q - zero_point) * scale`` (per axis where it has several scales)."""
    qp = detail.get("quantization_parameters") or {}
    scales = np.asarray(qp.get("scales", ()), np.float64)
    if a.dtype.kind not in "iu" or not scales.size:
        return a
    zps = np.asarray(qp.get("zero_points", ()), np.float64)
    zps = zps if zps.size == scales.size else np.zeros_like(scales)
    if scales.size > 1 and a.ndim:
        shape = [1] * a.ndim
        shape[int(qp.get("quantized_dimension", 0))] = scales.size
        scales, zps = scales.reshape(shape), zps.reshape(shape)
    return ((a.astype(np.float64) - zps) * scales).astype(np.float32)


def _quantized(x: np.ndarray, detail: Mapping[str, Any]) -> np.ndarray:
    """A float input for an integer input tensor with a scale (a ``--io int8`` file):
    ``round(x / scale) + zero_point``, clipped to the type; other inputs only cast."""
    dtype = np.dtype(detail["dtype"])
    scale, zp = detail.get("quantization") or (0.0, 0)
    if dtype.kind not in "iu" or not scale or np.asarray(x).dtype.kind in "iu":
        return np.asarray(x).astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(np.asarray(x, np.float64) / scale) + zp, info.min, info.max).astype(dtype)


def _file_layout(a: np.ndarray, perm: Optional[Tuple[int, ...]]) -> np.ndarray:
    """An ONNX value in the layout of the TFLite tensor recorded as it transposed by ``perm``."""
    return a if perm is None or a.ndim != len(perm) else np.ascontiguousarray(a.transpose(perm))


def _onnx_layout(a: np.ndarray, perm: Optional[Tuple[int, ...]]) -> np.ndarray:
    """A TFLite tensor recorded as the ONNX value transposed by ``perm``, back in the ONNX layout."""
    if perm is None or a.ndim != len(perm):
        return a
    return a.transpose(tuple(int(i) for i in np.argsort(perm)))


def _match_inputs(details: Sequence[Mapping[str, Any]], feed: Feed,
                  recorded: Optional[Mapping[str, Tuple[str, Any]]] = None) -> List[Tuple[str, np.ndarray]]:
    by_name = dict(feed)
    if len(details) == 1 and len(by_name) == 1:
        return list(by_name.items())
    rec = recorded or {}
    return [(d["name"], by_name[rec[d["name"]][0] if d["name"] in rec else d["name"]]) for d in details]


class TensorRTCandidate(Candidate):
    """A serialized TensorRT engine, run as built (its outputs only); the fused layers' boundaries
    come from the engine inspector. Needs TensorRT and a GPU."""

    kind = "tensorrt"

    def __init__(self, path: Path, ref_proto: Any, cfg: DiffConfig):
        super().__init__(path, ref_proto, cfg)
        from ..targets import get_target

        target = get_target("tensorrt")
        avail = target.availability()
        if not avail.available:
            raise TargetUnavailableError(f"diffing a TensorRT engine needs TensorRT and a GPU: {avail.reason}",
                                         "run it on the Jetson or GPU host (sdk debug diff ... --board B)")
        self.target = target

    def tensors(self, wanted: Sequence[str]) -> Dict[str, str]:
        from ..targets.tensorrt import build

        trt: Any = build.import_trt()  # type: ignore[no-untyped-call]
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        engine = runtime.deserialize_cuda_engine(self.path.read_bytes())
        inspector = engine.create_engine_inspector()
        info = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        self.notes.append("engine layers (fused): " + str(info)[:2000])
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        return {t: t for t in wanted if t in names}

    def run(self, mapping: Mapping[str, str], feeds: Sequence[Feed]) -> Iterator[Dict[str, np.ndarray]]:
        from ..model import Model

        artifact = self.target.prepare(Model.load(self.path))
        with self.target.open(artifact) as session:
            for feed in feeds:
                out = session.run(dict(feed))
                yield {t: np.asarray(out[c]) for t, c in mapping.items() if c in out}


class BoardCandidate(Candidate):
    """Any candidate on a board: an ONNX candidate runs as a copy with the compared tensors
    exposed as outputs; a .tflite one returns its outputs. The board writes the outputs
    compressed; the tensors asked for are capped at ``max_transfer_mb``."""

    def __init__(self, inner: Candidate, cfg: DiffConfig):
        super().__init__(inner.path, inner.ref, cfg)
        self.inner = inner
        self.kind = inner.kind
        self.notes = inner.notes

    def tensors(self, wanted: Sequence[str]) -> Dict[str, str]:
        if isinstance(self.inner, OnnxCandidate):
            return self.inner.tensors(wanted)
        outs = [o.name for o in self.ref.graph.output]
        self.notes.append("on a board a .tflite candidate gives its outputs only")
        return {t: c for t, c in self.inner.tensors(wanted).items() if t in outs}

    def cap(self, mapping: Dict[str, str], sizes: Mapping[str, int], samples: int) -> Dict[str, str]:
        """``mapping`` cut to at most ``max_transfer_mb`` of float32 per run (evenly; outputs kept)."""
        limit = self.cfg.max_transfer_mb * (1 << 20)
        total = sum(sizes.get(t, 0) * 4 * samples for t in mapping)
        if total <= limit:
            return mapping
        outs = {o.name for o in self.ref.graph.output}
        keep = dict((t, c) for t, c in mapping.items() if t in outs)
        rest = [t for t in mapping if t not in outs]
        budget = limit - sum(sizes.get(t, 0) * 4 * samples for t in keep)
        step = max(1, math.ceil(total / max(limit, 1.0)))
        for t in rest[::step]:
            cost = sizes.get(t, 0) * 4 * samples
            if cost <= budget:
                keep[t] = mapping[t]
                budget -= cost
        self.notes.append(f"the board returns {len(keep)} of {len(mapping)} tensors "
                          f"(capped at {self.cfg.max_transfer_mb:g} MB per run, every {step}th kept)")
        return keep

    def producers(self) -> Dict[str, str]:
        return self.inner.producers()

    def run(self, mapping: Mapping[str, str], feeds: Sequence[Feed]) -> Iterator[Dict[str, np.ndarray]]:
        from ..data import save_npz
        from ..remote import Board

        with tempfile.TemporaryDirectory(prefix="edgesdk-diff-") as tmp:
            model_path = Path(tmp) / ("diff" + self.path.suffix)
            if isinstance(self.inner, OnnxCandidate):
                import onnx

                onnx.save(self.inner.augmented(mapping), str(model_path))
            else:
                model_path.write_bytes(self.path.read_bytes())
            feeds_path = Path(tmp) / "feeds.npz"
            names = list(feeds[0])
            # a converted .tflite: its inputs and outputs in the layouts its metadata records
            # (the graph inputs carry the ONNX names)
            rec = self.inner._recorded() if isinstance(self.inner, TFLiteCandidate) else {}
            save_npz(feeds_path, {k: np.stack([_file_layout(np.asarray(f[k]), rec.get(k, ("", None))[1])
                                               for f in feeds]) for k in names})
            with Board(self.cfg.board or "local", trust_new_host=self.cfg.trust_new_host) as board:
                got = board.infer(model_path, feeds_path, compress=True)
        back = {v: k for k, v in mapping.items()}
        for i in range(len(feeds)):
            yield {back[k]: _onnx_layout(np.asarray(v[i]), rec.get(k, ("", None))[1]) for k, v in got.items()
                   if k in back}


#: candidate kind -> class; the kind follows the file (``.onnx``, ``.tflite``, ``.engine``/``.plan``)
CANDIDATES: "Registry[type]" = Registry("diff candidate", {"onnx": OnnxCandidate, "tflite": TFLiteCandidate,
                                                           "tensorrt": TensorRTCandidate},
                                        entry_points="edgesdk.diff_candidates")
_SUFFIX = {".onnx": "onnx", ".tflite": "tflite", ".engine": "tensorrt", ".plan": "tensorrt", ".trt": "tensorrt"}


def _graph_order(proto: Any) -> Tuple[List[Tuple[str, Any, int]], Dict[str, int]]:
    """``(tensor, producing node, depth)`` for every float node output of ``proto``, graph order
    (Constant nodes left out), and the element types shape inference gave."""
    import onnx

    from ..formats.onnx import weightless

    try:
        inferred = onnx.shape_inference.infer_shapes(weightless(proto))
    except Exception:
        inferred = proto
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    out: List[Tuple[str, Any, int]] = []
    depth = 0
    for node in proto.graph.node:
        if node.op_type == "Constant":
            continue
        for o in node.output:
            if o and types.get(o, onnx.TensorProto.FLOAT) in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                out.append((o, node, depth))
        depth += 1
    return out, types


def _accumulate(accs: Mapping[str, "_Acc"], want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray],
                skipped_shape: List[str]) -> None:
    """One sample's tensors into the per-tensor accumulators; a tensor whose shapes differ beyond layout
    or a reshape goes to ``skipped_shape``."""
    for t, acc in accs.items():
        if t not in got or t not in want:
            continue
        a, b = np.asarray(want[t]), np.asarray(got[t])
        if a.shape != b.shape and a.ndim == 4 and b.shape == a.transpose(0, 2, 3, 1).shape:
            b = b.transpose(0, 3, 1, 2)  # NHWC (TFLite) back to NCHW
        if a.shape != b.shape:
            if a.size == b.size:
                b = b.reshape(a.shape)
            else:
                skipped_shape.append(t)
                continue
        acc.shape = list(a.shape)
        acc.update(a, b)


def diff(model: Any, candidate: Any, feeds: Iterable[Feed], config: Optional[DiffConfig] = None,
         **overrides: Any) -> DiffReport:
    """Compare ``candidate`` (path: ``.onnx``, ``.tflite``, ``.engine``) with the FP32 ONNX ``model``
    on ``feeds`` (``{input name: array}`` per sample), tensor by tensor. See :class:`DiffConfig`
    (keyword ``overrides`` set its fields) and :class:`DiffReport`."""
    import dataclasses
    from concurrent.futures import wait

    import onnx

    from ..quantize.accuracy import ort_session
    from ..quantize.calibrate import augment, augment_bytes, has_external_data

    cfg = dataclasses.replace(config or DiffConfig(), **overrides)
    start = time.perf_counter()
    model_path = Path(str(getattr(model, "path", model)))
    cand_path = Path(str(getattr(candidate, "path", candidate)))
    for p, what in ((model_path, "model"), (cand_path, "--against")):
        if not p.is_file():
            raise InputError(f"{what}: '{p}' does not exist", "give the path of a model file")
    if model_path.suffix.lower() != ".onnx":
        raise InputError(f"the reference must be an FP32 ONNX model, not '{model_path.name}'",
                         "give the .onnx the candidate was made from")
    kind = _SUFFIX.get(cand_path.suffix.lower())
    if kind is None:
        raise InputError(f"--against: cannot tell what '{cand_path.name}' is",
                         "give a .onnx, .tflite or .engine/.plan file")
    feeds = list(feeds)
    if not feeds:
        raise InputError("no input samples to compare on", "give --data or --samples N")
    ref = onnx.load(str(model_path))
    inner: Candidate = CANDIDATES.load(kind)(cand_path, ref, cfg)
    cand: Candidate = BoardCandidate(inner, cfg) if cfg.board else inner
    order, types = _graph_order(ref)
    wanted = [t for t, _, _ in order]
    mapping = cand.tensors(wanted)
    # expose only the tensors compared: each exposed tensor blocks ONNX Runtime's fusions around it
    # (Conv + BatchNormalization ...), and the FP32 values then differ from the model's by rounding
    exposed = [t for t in wanted if t in mapping]
    def reference_session() -> Any:
        data = (augment_bytes(model_path.read_bytes(), ref, exposed, types) if not has_external_data(ref)
                else augment(ref, exposed, elem_types=types))
        try:
            return ort_session(data, cfg.threads, spinning=False)
        except QuantizationError as exc:
            raise InputError(f"onnxruntime cannot load the reference '{model_path.name}': "
                             f"{first_line(exc.__cause__ or exc)}",
                             "give the FP32 .onnx the candidate was made from, one onnxruntime runs") from exc

    # the reference session is made on a thread while the candidate makes its own; the sessions take
    # turns, so none spins between its runs
    ref_made = _background(reference_session)
    runs = None
    try:
        accs: Dict[str, _Acc] = {t: _Acc() for t in mapping}
        if isinstance(cand, BoardCandidate):
            ref_session = ref_made.result()
            ref_names = [o.name for o in ref_session.get_outputs()]
            first = dict(zip(ref_names, ref_session.run(ref_names, dict(feeds[0]))))
            mapping = cand.cap(dict(mapping), {k: int(np.asarray(v).size) for k, v in first.items()}, len(feeds))
            accs = {t: accs[t] for t in mapping}
        skipped_shape: List[str] = []
        runs = cand.run(mapping, feeds)
        for i, got in enumerate(runs):  # to the end: a candidate adds its notes after the last
            if i == 0:
                ref_session = ref_made.result()
                ref_names = [o.name for o in ref_session.get_outputs()]
            _accumulate(accs, dict(zip(ref_names, ref_session.run(ref_names, dict(feeds[i])))), got, skipped_shape)
            del got
    finally:  # a failure on one side: the other's work ends before the error leaves
        close = getattr(runs, "close", None)  # a generator left midway ends (and waits for its threads) now
        if close is not None:
            close()
        wait([ref_made])
    added = _added_errors(ref, cand.qdq_proto() if not cfg.board else inner.qdq_proto(), feeds, cfg)
    layers: List[LayerDiff] = []
    # the SNR standing for each tensor: measured where compared, else that of the nearest compared
    # tensors upstream (a tensor the candidate fused away); model inputs and weights: SNR_CAP
    snr_of: Dict[str, float] = {}
    made_by = cand.producers()

    def upstream(node: Any) -> float:
        return min((snr_of[i] for i in node.input if i in snr_of), default=SNR_CAP)

    for t, node, depth in order:
        found = accs.get(t)
        if found is None or not found.shape:
            snr_of[t] = upstream(node)
            continue
        acc = found
        row = LayerDiff(t, node.name or t, node.op_type, depth, mapping[t], acc.cosine(), acc.snr_db(), acc.maxabs,
                        acc.shape, candidate_node=made_by.get(mapping[t]))
        row.added_error, row.gain = added.get(row.candidate_node or row.node, added.get(row.node, (None, None)))
        # what this layer itself did: its output's SNR below its inputs'
        row.snr_drop_db = upstream(node) - min(row.snr_db, SNR_CAP)
        snr_of[t] = min(row.snr_db, SNR_CAP)
        past = row.snr_db < cfg.min_snr_db or row.cosine < cfg.min_cosine
        row.diverges = past and row.snr_drop_db >= cfg.min_drop_db
        layers.append(row)
    notes = list(cand.notes)
    if skipped_shape:
        notes.append(f"{len(set(skipped_shape))} tensors left out: their shapes differ between the two sides")
    return DiffReport(str(model_path), str(cand_path), cand.kind, cfg.board, len(feeds), cfg.min_snr_db, cfg.min_cosine,
                      cfg.min_drop_db, layers, [o.name for o in ref.graph.output], notes, time.perf_counter() - start)


def _added_errors(ref: Any, qdq: Optional[Any], feeds: Sequence[Feed], cfg: DiffConfig
                  ) -> Dict[str, Tuple[float, float]]:
    """Each quantized layer's share of the output error as the quantizer ranks it (own error on
    FP32's inputs and its group's gain; :func:`sdk.quantize.fallback.rank_layers`), {node: (own
    error, gain)}; the gain is 1.0 where the layers are too few to cut into groups."""
    if qdq is None or cfg.added_error_samples <= 0:
        return {}
    from ..quantize.accuracy import ort_session
    from ..quantize.fallback import int8_only, rank_layers

    work = _working_reference(ref, qdq)
    dq_out = {o for n in qdq.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    q_in = {n.input[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear" and n.input}
    ref_names = {n.name for n in work.graph.node}
    # the quantized layers: weighted ops with Q/DQ inputs, and ops whose inputs and output are quantized
    layers = [n.name for n in qdq.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
              and n.name in ref_names and any(i in dq_out for i in n.input)
              and (n.op_type in _WEIGHTED or (n.op_type in _INT8_OPS and any(o in q_in for o in n.output)))]
    if not layers:
        return {}
    rows = rank_layers(work, qdq, layers, list(feeds[:cfg.added_error_samples]),
                       lambda p: ort_session(p, cfg.threads), lambda keep: int8_only(work, qdq, keep))
    return {r["layer"]: (float(r["added_error"]), float(r["gain"])) for r in rows}


_WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
#: ops with an int8 kernel of their own (ONNX Runtime's QLinear* ops) when their inputs and output are quantized;
#: other ops between Q/DQ pairs (HardSwish, Resize, ...) run in float and are not layers
_INT8_OPS = ("Add", "Mul", "Sigmoid", "LeakyRelu", "Concat", "AveragePool", "GlobalAveragePool", "Softmax")


def _working_reference(ref: Any, qdq: Any) -> Any:
    """The FP32 graph the quantizer worked on, rebuilt from ``ref`` the way ``sdk quantize``
    prepares it: constants folded, the opset raised to the candidate's, BatchNormalization folded
    into the convs when the candidate has none left; so each candidate layer has its FP32 twin."""
    import onnx

    from ..model import Model
    from ..quantize.graph import fold_batchnorm

    with tempfile.TemporaryDirectory(prefix="edgesdk-diff-") as tmp:
        path = Path(tmp) / "ref.onnx"
        onnx.save(ref, str(path))
        m = Model.load(path).fold_constants()
        want = next((o.version for o in qdq.opset_import if o.domain in ("", "ai.onnx")), None)
        if want is not None and (m.opset or 0) < want:
            m = m.with_opset(want)
        work = m.proto
    if not any(n.op_type == "BatchNormalization" for n in qdq.graph.node):
        work, _ = fold_batchnorm(work)
    return work


def plant_scale_fault(qdq_path: Any, out_path: Any, node: Optional[str] = None, factor: float = 100.0) -> str:
    """Write a copy of a Q/DQ model with one Conv's output quantization scale multiplied by
    ``factor`` (the Conv ``node``, or the middle quantized Conv); returns the Conv's name. For
    testing :func:`diff`: its first divergence must be that Conv."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(qdq_path))
    q_of = {n.input[0]: n for n in proto.graph.node if n.op_type == "QuantizeLinear"}
    dq_of = {n.input[0]: n for n in proto.graph.node if n.op_type == "DequantizeLinear"}
    convs = [n for n in proto.graph.node if n.op_type == "Conv" and n.output[0] in q_of]
    if not convs:
        raise InputError(f"'{qdq_path}' has no Conv with a quantized output")
    target = next((n for n in convs if n.name == node), None) if node else convs[len(convs) // 2]
    if target is None:
        raise InputError(f"no quantized Conv named '{node}'")
    q = q_of[target.output[0]]
    dq = dq_of.get(q.output[0])
    inits = {t.name: t for t in proto.graph.initializer}
    scale_name = q.input[1]
    new_name = scale_name + "__planted"
    value = numpy_helper.to_array(inits[scale_name]) * np.float32(factor)
    proto.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), new_name))
    q.input[1] = new_name
    if dq is not None and dq.input[1] == scale_name:
        dq.input[1] = new_name
    onnx.save(proto, str(out_path))
    return str(target.name)
