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
from sdk.quantize.fallback import _channel_mean, _channel_sums, rank_layers


def _feeds(path, n):
    z = np.load(path)
    return [{"x": z["x"][i:i + 1]} for i in range(n)]


class _OwnNoise:
    """The residual model quantized in full, and for each Conv its own noise measured by hand: the
    layer alone in int8, its output against FP32's over 6 samples, per channel noise / power, then
    the mean over the channels that carry signal (written out here, not sdk's _channel_mean)."""

    def __init__(self, residual_model, residual_calib, residual_eval):
        self.full = quantize(residual_model, residual_calib, workers=1, method="minmax", speed_check=False,
                             bias_correction=False)
        self.layers = list(self.full.plan.layers)
        self.ref = onnx.load(str(residual_model))
        self.feeds = _feeds(residual_eval, 6)
        self.model, self.calib = residual_model, residual_calib
        self.by_name = {n.name: n for n in self.ref.graph.node}
        self.expected = {}
        for layer in self.layers:
            node = self.by_name[layer]
            if node.op_type != "Conv":
                continue
            alone = self.only_int8([layer])
            out = node.output[0]
            produced = {o for n in alone.graph.node for o in n.output}
            read = f"{out}_dequantized" if f"{out}_dequantized" in produced else out  # what float consumers read
            got_s, ref_s = ort_session(augment(alone, [read])), ort_session(augment(self.ref, [out]))
            noise = power = 0.0
            for feed in self.feeds:
                a = np.asarray(ref_s.run([out], feed)[0], np.float64)
                b = np.asarray(got_s.run([read], feed)[0], np.float64)
                noise = noise + np.sum((a - b) ** 2, axis=(0, 2, 3))
                power = power + np.sum(a * a, axis=(0, 2, 3))
            ratios = [n / p for n, p in zip(noise, power) if p > 0]
            self.expected[layer] = sum(ratios) / len(ratios) if ratios else 0.0

    def only_int8(self, keep):
        try:
            return quantize(self.model, self.calib, workers=1, method="minmax", speed_check=False,
                            bias_correction=False, exclude=[x for x in self.layers if x not in set(keep)]).model.proto
        except QuantizationError:  # an op that is int8 only next to int8 neighbours (Add, MaxPool): all float
            return self.ref

    def rank(self, **kw):
        return {r["layer"]: r for r in rank_layers(self.ref, self.full.model.proto, self.layers, self.feeds,
                                                   ort_session, self.only_int8, **kw)}

    def mismatches(self, rows):
        """Conv layers whose ranked own noise is not the hand-measured one (rel 1e-3)."""
        return [(x, rows[x]["added_error"], want) for x, want in self.expected.items()
                if rows[x]["added_error"] != pytest.approx(want, rel=1e-3, abs=1e-12)]


@pytest.fixture(scope="module")
def own_noise(residual_model, residual_calib, residual_eval):
    return _OwnNoise(residual_model, residual_calib, residual_eval)


def test_own_noise_is_the_layer_alone_in_int8(own_noise):
    rows = own_noise.rank()
    assert set(rows) == set(own_noise.layers)
    assert len(own_noise.expected) >= 4 and own_noise.mismatches(rows) == []
    assert all(r["gain"] >= 0 and r["score"] == pytest.approx(r["added_error"] * r["gain"]) for r in rows.values())
    assert all(rows[x]["gain"] > 0 for x in own_noise.expected)   # every Conv reaches the outputs
    plain = rank_layers(own_noise.ref, own_noise.full.model.proto, own_noise.layers, own_noise.feeds, ort_session)
    assert all(r["gain"] == 1.0 for r in plain)                   # no gains asked for: all 1.0


def test_the_own_noise_check_fails_on_a_broken_ranking(own_noise, monkeypatch):
    """Mutation check: the fallback's per-channel mean replaced on purpose by the overall ratio
    (sum of noise / sum of power, which hides a crushed small channel): the same check then finds
    layers whose ranked noise is not what the layer alone does."""
    import sdk.quantize.fallback as fallback

    monkeypatch.setattr(fallback, "_channel_mean", lambda noise, power: float(np.sum(noise) / np.sum(power)))
    assert own_noise.mismatches(own_noise.rank()) != []


def test_channel_mean_counts_a_crushed_small_channel():
    noise, power = np.array([1e-4, 1.0]), np.array([100.0, 1.0])  # a large clean channel, a small one lost
    assert _channel_mean(noise, power) == pytest.approx(0.5, rel=1e-3)
    assert float(noise.sum() / power.sum()) < 0.01  # the overall relative error hides it
    assert _channel_mean(np.array([0.0]), np.array([0.0])) == 0.0


def test_int8_only_from_the_qdq_model_stands_for_the_builders(own_noise):
    """``int8_only`` (no builder: ``sdk debug diff``'s candidate): all layers is the full INT8 model and
    none is FP32, exactly; one layer alone is the builder's build with the others excluded within 2x
    of its output error (root of the summed squares) (the builder quantizes a tensor for all its readers, ``int8_only`` per layer);
    the gains it gives rank the layers as the builder's do."""
    from sdk.quantize.fallback import int8_only

    full, feeds = own_noise.full.model.proto, own_noise.feeds[:2]

    def outputs(proto):
        s = ort_session(proto)
        return [np.concatenate([np.asarray(o, np.float64).ravel() for o in s.run(None, f)]) for f in feeds]

    def error(proto, ref):
        return sum(float(np.sum((a - b) ** 2)) for a, b in zip(outputs(proto), ref)) ** 0.5   # RMS-like

    ref = outputs(own_noise.ref)
    assert error(int8_only(own_noise.ref, full, own_noise.layers), outputs(full)) == 0.0
    assert error(int8_only(own_noise.ref, full, []), ref) == 0.0
    for layer in own_noise.layers:
        built = own_noise.only_int8([layer])
        if built is own_noise.ref:      # the builder does not quantize it alone (an Add between float convs)
            continue
        ours, theirs = error(int8_only(own_noise.ref, full, [layer]), ref), error(built, ref)
        assert theirs / 2 <= ours <= theirs * 2, (layer, ours, theirs)
    builder = [r["layer"] for r in rank_layers(own_noise.ref, full, own_noise.layers, own_noise.feeds, ort_session,
                                              own_noise.only_int8)]
    ours = [r["layer"] for r in rank_layers(own_noise.ref, full, own_noise.layers, own_noise.feeds, ort_session,
                                           lambda keep: int8_only(own_noise.ref, full, keep))]
    assert ours[:3] == builder[:3], (ours, builder)


def test_search_builds_equal_a_build_from_scratch(residual_model, residual_calib):
    """The fallback search's builds reuse each layer's corrected bias and the model's value types,
    and skip ONNX's checker (the final model gets it): each is byte for byte the model that bias
    correction, shape inference and the checker from scratch give, for any set of float layers."""
    from sdk.quantize.api import QuantizeConfig, _Run
    from sdk.quantize.bias_correction import correct_biases
    from sdk.quantize.graph import GraphIndex
    from sdk.quantize.qdq import emit_qdq

    run = _Run(QuantizeConfig(workers=1, speed_check=False, progress=False, use_cache=False))
    run.prepare(str(residual_model))
    run.calibrate(str(residual_calib))
    run.plan()
    b = run.builder
    layers = list(run.qplan.layers)
    assert len(layers) >= 4 and b.bias_correction
    for exclude in ([], layers[:1], layers[1:3], layers[:3], []):
        got, plan, _ = b.build(exclude=exclude)
        first = b.scheme.plan(GraphIndex(b.proto), exclude=exclude)
        fixed, corrected = correct_biases(b.proto, first, b.stats, b.scheme.reduce_range)
        assert corrected > 0
        want, _ = emit_qdq(fixed, b.scheme.plan(GraphIndex(fixed), exclude=exclude), b.ranges, b.scheme)
        assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    assert len(b.bias_memo) == corrected          # one corrected bias per layer, made once


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 4, 6, 6)])
def test_channel_sums_are_float64_sums_of_squares_per_channel(shape):
    """The own-noise sums (float32 data, float64 sums, per channel on axis 1 where there is one)
    equal the float64 sums written out."""
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32) * 1e3
    x64 = x.astype(np.float64)
    want = np.sum(x64 * x64, axis=tuple(i for i in range(x.ndim) if i != 1)) if x.ndim > 1 else np.sum(x64 * x64)
    np.testing.assert_allclose(_channel_sums(x), want, rtol=1e-12)
