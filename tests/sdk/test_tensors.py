from __future__ import annotations

import pytest

from sdk.errors import InputError
from sdk.tensors import TensorSpec, parse_input_shapes, parse_shape, parse_shape_profiles


def test_parse_shape():
    assert parse_shape("1x3x640x640") == (1, 3, 640, 640)
    assert parse_shape("1,3,8,8") == (1, 3, 8, 8)
    for bad in ("", "1x", "ax3", "1x0", "-1x3"):
        with pytest.raises(InputError):
            parse_shape(bad)


def test_parse_input_shapes():
    assert parse_input_shapes(["x=1x3x8x8", "y=2"]) == {"x": (1, 3, 8, 8), "y": (2,)}
    with pytest.raises(InputError, match="NAME="):
        parse_input_shapes(["1x3"])
    with pytest.raises(InputError, match="engine builds"):
        parse_input_shapes(["x=1x3:1x4:1x5"])


def test_profiles():
    p = parse_shape_profiles(["x=1x3x320x320:1x3x640x640:1x3x960x960", "y=1x4"])
    assert p["x"][0] == (1, 3, 320, 320) and p["x"][2] == (1, 3, 960, 960)
    assert p["y"] == ((1, 4),) * 3
    with pytest.raises(InputError, match="min <= opt <= max"):
        parse_shape_profiles(["x=1x9:1x4:1x5"])


def test_resolve():
    spec = TensorSpec("x", ("N", 3, None), "float32")
    assert spec.dynamic_dims == [0, 2]
    assert spec.resolve(default_dim=1) == (1, 3, 1)
    assert spec.resolve((4, 3, 7)) == (4, 3, 7)
    with pytest.raises(InputError, match="--input-shape x=Nx3xN"):
        spec.resolve()
    with pytest.raises(InputError, match="fixed to 3"):
        spec.resolve((1, 2, 3))
