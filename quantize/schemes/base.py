"""The Scheme contract and the plan it produces.

A :class:`Scheme` turns a graph into a :class:`QuantPlan`: which activation tensors get a Q/DQ pair
(for all their consumers or only some), which weights are quantized on which axis, which biases
become int32, which tensors share one scale and which have a fixed one. :mod:`sdk.quantize.qdq`
then emits the plan; the scheme's attributes say how (dtypes, symmetric or not).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from ...errors import InputError
from ..graph import GraphIndex

__all__ = ["Scheme", "QuantPlan", "WeightQ", "BiasQ", "QParams"]


@dataclass
class WeightQ:
    node: str
    index: int
    tensor: str
    axis: Optional[int]   # None: per-tensor


@dataclass
class BiasQ:
    node: str
    index: int
    tensor: str
    activation: str       # the node's quantized data input
    weight: str           # the node's quantized weight


@dataclass
class QParams:
    scale: Any            # float or per-channel array
    zero_point: Any       # int or array
    dtype: str            # int8 / uint8 / int32


@dataclass
class QuantPlan:
    """Where Q/DQ goes. ``activations``: tensor -> None (every consumer reads the dequantized value)
    or a set of ``(node_name, input_index)`` consumers. ``layers``: the quantized nodes (names).
    ``int16``: activations quantized to int16 (symmetric; TFLite's 16x8 fallback), and ``int8_readers``
    of each: the consumers that read it requantized to int8 (an int8 layer after a 16x8 one).
    ``outputs``: the quantized graph outputs the target hands over as their integer tensor (the
    graph output becomes the dequantized value); ``int8_outputs``: the int16 ones it hands over as int8."""

    activations: Dict[str, Optional[Set[Tuple[str, int]]]] = field(default_factory=dict)
    weights: List[WeightQ] = field(default_factory=list)
    biases: List[BiasQ] = field(default_factory=list)
    shared: List[List[str]] = field(default_factory=list)
    fixed: Dict[str, Tuple[float, int]] = field(default_factory=dict)
    layers: List[str] = field(default_factory=list)
    int16: Set[str] = field(default_factory=set)
    int8_readers: Dict[str, Set[Tuple[str, int]]] = field(default_factory=dict)
    outputs: Set[str] = field(default_factory=set)
    int8_outputs: Set[str] = field(default_factory=set)
    #: recurrent nodes (LSTM) run with int8 weights and activations quantized at run time
    #: (onnxruntime's DynamicQuantizeLSTM); in ``layers`` too
    dynamic: List[str] = field(default_factory=list)

    def add_activation(self, tensor: str, consumer: Optional[Tuple[str, int]] = None) -> None:
        """QDQ on ``tensor`` for every consumer (``consumer`` None) or for one more consumer."""
        if consumer is None:
            self.activations[tensor] = None
        elif tensor not in self.activations:
            self.activations[tensor] = {consumer}
        elif self.activations[tensor] is not None:
            self.activations[tensor].add(consumer)  # type: ignore[union-attr]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "layers": list(self.layers),
            "activations": sorted(self.activations),
            "weights": [{"node": w.node, "tensor": w.tensor, "axis": w.axis} for w in self.weights],
            "biases": [b.tensor for b in self.biases],
            "shared": self.shared,
            "fixed": {k: list(v) for k, v in self.fixed.items()},
            **({"int16": sorted(self.int16)} if self.int16 else {}),
            **({"outputs": sorted(self.outputs)} if self.outputs else {}),
            **({"dynamic": list(self.dynamic)} if self.dynamic else {}),
        }


class Scheme:
    """Base class of a target's quantization scheme. Options: ``per_channel`` (weights),
    ``reduce_range`` (7-bit weights for x86 without VNNI), ``activation_dtype`` (uint8/int8 where
    the scheme allows both)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default_method: ClassVar[str] = "entropy"
    activation_symmetric: ClassVar[bool] = False
    activation_dtypes: ClassVar[Tuple[str, ...]] = ("int8",)
    weight_qdq_pair: ClassVar[bool] = False   # True: float weights -> Q -> DQ; False: int8 initializer -> DQ
    quantize_bias: ClassVar[bool] = True
    fold_batchnorm: ClassVar[bool] = True
    #: the target has a hard-swish kernel: the prepared graph writes each hard-swish as one ONNX
    #: HardSwish (else as x * HardSigmoid(x), two ops ONNX Runtime runs faster than the written-out four)
    hardswish_op: ClassVar[bool] = False
    #: besides the QDQ model, write a TensorRT calibration cache (implicit-quantization builds)
    writes_calibration_cache: ClassVar[bool] = False
    #: the QDQ model runs on this host's ONNX Runtime as is: its latency there is the target's
    host_runtime: ClassVar[bool] = False
    #: besides the QDQ model, export every tensor's range as JSON (for a converter to apply)
    exports_ranges: ClassVar[bool] = False
    #: ops whose weights are per-channel, with the axis of the output channels
    channel_axis: ClassVar[Dict[str, int]] = {"Conv": 0, "ConvTranspose": 1}

    def __init__(self, per_channel: bool = True, reduce_range: bool = False,
                 activation_dtype: Optional[str] = None):
        self.per_channel = per_channel
        self.reduce_range = reduce_range
        self.activation_dtype = activation_dtype or self.activation_dtypes[0]
        if self.activation_dtype not in self.activation_dtypes:
            raise InputError(f"target '{self.name}' takes activations as {' or '.join(self.activation_dtypes)}, "
                             f"not {self.activation_dtype}")

    # -- planning ---------------------------------------------------------------------------------------
    def with_int16(self, layers: Iterable[str]) -> "Scheme":
        """This scheme with ``layers`` in 16x8 (int16 activations, int8 weights), for targets that run it."""
        raise InputError(f"target '{self.name}' has no 16x8 (int16 activation) layers", "use --fallback-precision float")

    def for_io(self, io: str) -> "Scheme":
        """This scheme for a model whose inputs and outputs are ``io`` (``float`` or ``int8``: TFLite's
        ``--io``); a scheme whose target has only float I/O is the same scheme."""
        return self

    def plan(self, idx: GraphIndex, exclude: Iterable[str] = (), only: Optional[Iterable[str]] = None) -> QuantPlan:
        """The plan for the graph of ``idx``; ``exclude`` keeps those node names in float;
        ``only`` (when given) quantizes just those nodes."""
        raise NotImplementedError

    def speed_variants(self, plan: QuantPlan, idx: GraphIndex) -> List[Tuple[str, "Scheme"]]:
        """Alternative schemes (label, scheme) that keep some op types of ``plan`` in float, for the
        speed-aware plan to time against the full plan (host runtimes only)."""
        return []

    @classmethod
    def reduced_range_reason(cls, machine: str, flags: FrozenSet[str]) -> Optional[str]:
        """Why a CPU of architecture ``machine`` (``x86_64``, ``aarch64``) with feature ``flags``
        (``/proc/cpuinfo``) needs 7-bit weights with this scheme's runtime, or None when 8 bits are
        safe there (the default: runtimes that accumulate in 32 bits)."""
        return None

    def options(self) -> Dict[str, Any]:
        return {"per_channel": self.per_channel, "reduce_range": self.reduce_range,
                "activation_dtype": self.activation_dtype, "activation_symmetric": self.activation_symmetric}

    # -- helpers for subclasses ---------------------------------------------------------------------------
    @staticmethod
    def _selected(node: Any, exclude: FrozenSet[str], only: Optional[FrozenSet[str]]) -> bool:
        return node.name not in exclude and (only is None or node.name in only)

    def _weight(self, idx: GraphIndex, plan: QuantPlan, node: Any, i: int) -> Optional[WeightQ]:
        """Plan the weight input ``i`` of ``node`` when it is a float initializer."""
        if len(node.input) <= i or node.input[i] not in idx.inits:
            return None
        t = idx.inits[node.input[i]]
        if t.data_type != 1:  # FLOAT only
            return None
        axis = None
        if self.per_channel and node.op_type in self.channel_axis and len(t.dims) >= 2:
            axis = self.channel_axis[node.op_type]
        w = WeightQ(node.name, i, node.input[i], axis)
        plan.weights.append(w)
        return w

    def _compute_weights(self, idx: GraphIndex, plan: QuantPlan, node: Any, act_quantized: bool) -> bool:
        """Weights (and int32 bias when the scheme quantizes biases) of Conv/ConvTranspose/Gemm/MatMul.
        True when the node has a quantized weight."""
        op = node.op_type
        if op in ("Conv", "ConvTranspose", "Gemm"):
            w = self._weight(idx, plan, node, 1)
            if w is None:
                return False
            if self.quantize_bias and act_quantized and len(node.input) > 2 and node.input[2] in idx.inits \
                    and idx.inits[node.input[2]].data_type == 1:
                plan.biases.append(BiasQ(node.name, 2, node.input[2], node.input[0], w.tensor))
            return True
        if op == "MatMul":
            return self._weight(idx, plan, node, 1) is not None
        return False


def ensure_node_names(proto: Any) -> Any:
    """Give every unnamed node of ``proto`` a unique name (in place); returns ``proto``."""
    used = {n.name for n in proto.graph.node if n.name}
    for i, n in enumerate(proto.graph.node):
        if not n.name:
            base = f"{n.op_type}_{i}"
            name, k = base, 0
            while name in used:
                k += 1
                name = f"{base}_{k}"
            n.name = name
            used.add(name)
    return proto
