"""The fallback's ranking (quantize/fallback.py): each layer's own noise, measured in one run, equals
what that layer alone in int8 does to its output; the gain sends the ranking to what the outputs feel."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from sdk.errors import QuantizationError
from sdk.quantize import quantize
from sdk.quantize.accuracy import ort_session
from sdk.quantize.calibrate import augment
from sdk.quantize.fallback import _channel_mean, rank_layers


def _feeds(path, n):
    z = np.load(path)
    return [{"x": z["x"][i:i + 1]} for i in range(n)]


def test_own_noise_is_the_layer_alone_in_int8(residual_model, residual_calib, residual_eval):
    full = quantize(residual_model, residual_calib, workers=1, method="minmax", speed_check=False, bias_correction=False)
    layers = list(full.plan.layers)
    ref = onnx.load(str(residual_model))
    feeds = _feeds(residual_eval, 6)

    def only_int8(keep):
        try:
            return quantize(residual_model, residual_calib, workers=1, method="minmax", speed_check=False,
                            bias_correction=False, exclude=[x for x in layers if x not in set(keep)]).model.proto
        except QuantizationError:  # an op that is int8 only next to int8 neighbours (Add, MaxPool): all float
            return ref

    rows = {r["layer"]: r for r in rank_layers(ref, full.model.proto, layers, feeds, ort_session, only_int8)}
    assert set(rows) == set(layers)
    by_name = {n.name: n for n in ref.graph.node}
    checked = 0
    for layer in layers:
        node = by_name[layer]
        if node.op_type != "Conv":
            continue
        alone = only_int8([layer])
        out = node.output[0]
        produced = {o for n in alone.graph.node for o in n.output}
        read = f"{out}_dequantized" if f"{out}_dequantized" in produced else out  # what float consumers read
        got_s, ref_s = ort_session(augment(alone, [read])), ort_session(augment(ref, [out]))
        noise = power = 0.0
        for feed in feeds:
            a = np.asarray(ref_s.run([out], feed)[0], np.float64)
            b = np.asarray(got_s.run([read], feed)[0], np.float64)
            noise = noise + np.sum((a - b) ** 2, axis=(0, 2, 3))
            power = power + np.sum(a * a, axis=(0, 2, 3))
        assert rows[layer]["added_error"] == pytest.approx(_channel_mean(noise, power), rel=1e-3, abs=1e-12), layer
        checked += 1
    assert checked >= 4
    assert all(r["gain"] >= 0 and r["score"] == pytest.approx(r["added_error"] * r["gain"]) for r in rows.values())
    assert all(rows[x]["gain"] > 0 for x in layers if by_name[x].op_type == "Conv")
    plain = rank_layers(ref, full.model.proto, layers, feeds, ort_session)  # no gains asked for: all 1.0
    assert all(r["gain"] == 1.0 for r in plain)


def test_channel_mean_counts_a_crushed_small_channel():
    noise, power = np.array([1e-4, 1.0]), np.array([100.0, 1.0])  # a large clean channel, a small one lost
    assert _channel_mean(noise, power) == pytest.approx(0.5, rel=1e-3)
    assert float(noise.sum() / power.sum()) < 0.01  # the overall relative error hides it
    assert _channel_mean(np.array([0.0]), np.array([0.0])) == 0.0
