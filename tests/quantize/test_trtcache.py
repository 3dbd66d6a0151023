"""TensorRT calibration cache: format, round trip, and the scales quantize() writes."""
from __future__ import annotations

import struct

import pytest

from sdk.errors import InputError
from sdk.quantize import quantize
from sdk.quantize.trtcache import format_cache, parse_cache, read_cache, write_cache


def test_format_is_big_endian_float_hex():
    text = format_cache({"input": 1.0, "conv1": 0.5}, version="8510")
    lines = text.splitlines()
    assert lines[0] == "TRT-8510-EntropyCalibration2"
    assert lines[1] == "input: 3f800000" and lines[2] == "conv1: 3f000000"


def test_round_trip(tmp_path):
    scales = {"x": 0.0123, "block.1/conv:0": 3.5e-5, "out": 7.0}
    p = write_cache(tmp_path / "c.cache", scales, version="8601")
    version, algo, back = read_cache(p)
    assert (version, algo) == ("8601", "EntropyCalibration2")
    assert back == {k: struct.unpack(">f", struct.pack(">f", v))[0] for k, v in scales.items()}


@pytest.mark.parametrize("text", ["", "hello\nx: 3f800000\n", "TRT-8510-EntropyCalibration2\nx 3f800000\n",
                                  "TRT-8510-EntropyCalibration2\nx: zzzzzzzz\n"])
def test_malformed(text):
    with pytest.raises(InputError):
        parse_cache(text)


def test_quantize_writes_cache(residual_model, residual_calib, tmp_path):
    res = quantize(residual_model, residual_calib, scheme="tensorrt", output=tmp_path / "m.onnx", workers=1,
                   trt_version="8510")
    version, algo, scales = read_cache(tmp_path / "m.calib.cache")
    assert version == "8510" and algo == "EntropyCalibration2"
    assert set(scales) == set(res.ranges)  # every calibrated tensor, graph input included
    assert "x" in scales
    for name, (lo, hi) in res.ranges.items():
        assert scales[name] == pytest.approx(max(abs(lo), abs(hi)) / 127.0, rel=1e-6)
