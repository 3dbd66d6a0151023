"""Make the committed TFLite test models (run once, by hand; CI only uses the outputs).

Needs TensorFlow, which must not go into the project's Python (it pins NumPy/protobuf), so run
it from a separate virtual environment::

    python -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu onnx scikit-learn
    /tmp/tfvenv/bin/python tests/data/make_tflite.py

Writes into this folder (each file a few KB):

- ``digits_float.tflite``  a small Keras CNN trained on scikit-learn's digits: input ``image``
  float32 [N,8,8,1] (NHWC, pixels/16, N dynamic), output ``logits`` float32 [N,10].
- ``digits_int8.tflite``   the same network, full-integer int8 (representative dataset of 200
  training images), int8 input and output with scale/zero-point.
- ``digits_uint8.tflite``  the same, with uint8 input and output.
- ``digits_float.onnx``    the ONNX twin of the float model with the same weights, built with
  ``onnx.helper``: it takes the same NHWC input and transposes it to NCHW inside the graph.
- ``digits_ref.npz``       ``x`` (32 held-out images, [32,8,8,1] float32), ``y`` (labels) and
  ``logits`` (Keras' float outputs for ``x``).
- ``two_signatures.tflite`` a model with two signatures, ``add`` (x + y) and ``mul`` (x * y),
  each on its own subgraph (x, y: float32 [4]).
- ``custom_op.tflite``     a model whose only op is a custom op (``BesselI0e``) that no runtime
  registers.
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

HERE = Path(__file__).resolve().parent
SEED = 0


def digits():
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[..., None]  # [N,8,8,1]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


def keras_cnn():
    tf.keras.utils.set_random_seed(SEED)
    inp = tf.keras.Input(shape=(8, 8, 1), name="image")
    h = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1")(inp)
    h = tf.keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu", name="conv2")(h)
    h = tf.keras.layers.Flatten(name="flatten")(h)
    out = tf.keras.layers.Dense(10, name="logits")(h)
    return tf.keras.Model(inp, out, name="digits_cnn")


def convert(model, calib=None, io_type=None) -> bytes:
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    if calib is not None:
        def rep():
            for i in range(len(calib)):
                yield [calib[i:i + 1]]

        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = rep
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = io_type
        conv.inference_output_type = io_type
    return conv.convert()


def onnx_twin(model, path: Path) -> None:
    """The float CNN as ONNX with Keras' weights: NHWC in, Transpose to NCHW, Conv x2 (TF 'same'
    padding written out), Transpose back to NHWC so Flatten keeps Keras' order, Gemm."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1, b1 = model.get_layer("conv1").get_weights()
    w2, b2 = model.get_layer("conv2").get_weights()
    wd, bd = model.get_layer("logits").get_weights()
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(w1.transpose(3, 2, 0, 1)), "w1"),  # HWIO -> OIHW
        numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(np.ascontiguousarray(w2.transpose(3, 2, 0, 1)), "w2"),
        numpy_helper.from_array(b2, "b2"),
        numpy_helper.from_array(wd, "wd"),
        numpy_helper.from_array(bd, "bd"),
    ]
    nodes = [
        helper.make_node("Transpose", ["image"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["nchw", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        # stride 2 'same' on 8x8 with k=3: total pad 1, TF puts it at the end.
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[0, 0, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Transpose", ["r2"], ["nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Flatten", ["nhwc"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "wd", "bd"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn_nhwc",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 8, 8, 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="edgesdk-tests-make_tflite")
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


class TwoSignatures(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32, name="x"), tf.TensorSpec([4], tf.float32, name="y")])
    def add(self, x, y):
        return {"sum": x + y}

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32, name="x"), tf.TensorSpec([4], tf.float32, name="y")])
    def mul(self, x, y):
        return {"product": x * y}


def two_signatures() -> bytes:
    m = TwoSignatures()
    conv = tf.lite.TFLiteConverter.from_concrete_functions(
        [m.add.get_concrete_function(), m.mul.get_concrete_function()], m)
    return conv.convert()


def custom_op_model() -> bytes:
    """One op the TFLite builtins lack (Bessel I0e), kept as a custom op."""

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def f(x):
        return {"y": tf.math.special.bessel_i0e(x)}

    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    conv.allow_custom_ops = True  # kept as a custom op named BesselI0e, which no runtime registers
    return conv.convert()


def main() -> None:
    (x_train, y_train), (x_test, y_test) = digits()
    model = keras_cnn()
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-2),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=8, batch_size=64, verbose=0, shuffle=False)
    _, acc = model.evaluate(x_test, y_test, verbose=0)
    print(f"keras test accuracy: {acc:.3f}")

    out = {
        "digits_float.tflite": convert(model),
        "digits_int8.tflite": convert(model, x_train[:200], tf.int8),
        "digits_uint8.tflite": convert(model, x_train[:200], tf.uint8),
        "two_signatures.tflite": two_signatures(),
        "custom_op.tflite": custom_op_model(),
    }
    for name, blob in out.items():
        (HERE / name).write_bytes(blob)
        print(f"wrote {name}: {len(blob)} bytes")
    onnx_twin(model, HERE / "digits_float.onnx")
    print(f"wrote digits_float.onnx: {(HERE / 'digits_float.onnx').stat().st_size} bytes")
    ref_x = np.ascontiguousarray(x_test[:32])
    np.savez(HERE / "digits_ref.npz", x=ref_x, y=y_test[:32], logits=model.predict(ref_x, verbose=0).astype(np.float32))
    print("wrote digits_ref.npz")


if __name__ == "__main__":
    main()
