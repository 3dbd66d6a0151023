"""Build a MobileNetV2-class ONNX model with onnx.helper (no downloads, no torch).

The graph is what ``torch.onnx.export`` gives for torchvision's MobileNetV2 in eval mode: Conv with
folded BatchNorm (bias), Clip(0, 6) for ReLU6, inverted residual blocks with depthwise 3x3 convs and
residual Adds, GlobalAveragePool, Flatten, Gemm. Weights are seeded random with variance-preserving
scales, so activations keep realistic ranges through the depth.

    python benchmarks/models/make_mobilenet.py -o /tmp/mnv2.onnx --size 224 --width 1.0
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (expansion t, channels c, repeats n, stride s) of MobileNetV2
BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _div8(v: float) -> int:
    return max(8, int(v + 4) // 8 * 8)


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.n = 0
        zero = numpy_helper.from_array(np.array(0.0, np.float32), "clip_min")
        six = numpy_helper.from_array(np.array(6.0, np.float32), "clip_max")
        self.inits += [zero, six]

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, groups: int = 1, act: bool = True, gain: float = 2.0) -> str:
        nm = self.name("conv")
        fan_in = (cin // groups) * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32) * np.sqrt(gain / fan_in)
        # per-channel spread like a real folded BatchNorm
        w = (w * self.rng.uniform(0.5, 1.5, size=(cout, 1, 1, 1))).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.01).astype(np.float32)
        self.inits += [numpy_helper.from_array(w, nm + ".weight"), numpy_helper.from_array(b, nm + ".bias")]
        out = nm + "_out"
        self.nodes.append(helper.make_node("Conv", [x, nm + ".weight", nm + ".bias"], [out], name=nm, group=groups,
                                           kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        if not act:
            return out
        r = self.name("relu6") + "_out"
        self.nodes.append(helper.make_node("Clip", [out, "clip_min", "clip_max"], [r], name=r[:-4]))
        return r


def build(path: Path, size: int = 224, width: float = 1.0, classes: int = 1000, seed: int = 0, batch="N") -> Path:
    b = _Builder(seed)
    cin = _div8(32 * width)
    x = b.conv("input", 3, cin, 3, 2)
    for t, c, n, s in BLOCKS:
        cout = _div8(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = b.conv(y, cin, hidden, 1, 1)
            y = b.conv(y, hidden, hidden, 3, stride, groups=hidden)
            y = b.conv(y, hidden, cout, 1, 1, act=False, gain=1.0)
            if stride == 1 and cin == cout:
                out = b.name("add") + "_out"
                b.nodes.append(helper.make_node("Add", [x, y], [out], name=out[:-4]))
                y = out
            x, cin = y, cout
    last = _div8(1280 * max(1.0, width))
    x = b.conv(x, cin, last, 1, 1)
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    b.nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    wf = (b.rng.standard_normal((classes, last)) * np.sqrt(1.0 / last)).astype(np.float32)
    bf = np.zeros(classes, np.float32)
    b.inits += [numpy_helper.from_array(wf, "classifier.weight"), numpy_helper.from_array(bf, "classifier.bias")]
    b.nodes.append(helper.make_node("Gemm", ["flat", "classifier.weight", "classifier.bias"], ["logits"],
                                    name="classifier", transB=1))
    g = helper.make_graph(b.nodes, "mobilenet_v2",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="edgesdk-benchmarks")
    m.ir_version = 8
    onnx.checker.check_model(m)
    _center_classifier(m, size, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(path))
    return path


def _center_classifier(m, size: int, seed: int) -> None:
    """Centre the pooled features (mean measured on a few synthetic images) inside the classifier, so
    the random head's argmax depends on the input instead of always picking the same class."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    feats = sess.run(["flat"], {"input": make_images(16, size, seed + 1000)})[0].astype(np.float64)
    mean = feats.mean(0)
    inits = {t.name: t for t in m.graph.initializer}
    w2 = numpy_helper.to_array(inits["classifier.weight"])
    b2 = (-(w2.astype(np.float64) @ mean)).astype(np.float32)
    inits["classifier.weight"].CopyFrom(numpy_helper.from_array(w2, "classifier.weight"))
    inits["classifier.bias"].CopyFrom(numpy_helper.from_array(b2, "classifier.bias"))


def make_images(n: int, size: int, seed: int) -> np.ndarray:
    """``n`` smooth synthetic RGB images (low-frequency noise plus blobs), normalised like ImageNet,
    NCHW float32."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, size, size), np.float32)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    for i in range(n):
        low = rng.standard_normal((3, 8, 8)).astype(np.float32)
        img = np.stack([np.kron(c, np.ones((size // 8 + 1, size // 8 + 1), np.float32))[:size, :size] for c in low])
        for _ in range(3):
            cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.3)
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            img += rng.standard_normal((3, 1, 1)).astype(np.float32) * blob * 2
        img += rng.standard_normal(img.shape).astype(np.float32) * 0.1
        # per-image contrast and colour cast, like photos of different scenes
        img = img * rng.uniform(0.3, 1.5) + rng.standard_normal((3, 1, 1)).astype(np.float32) * 0.8
        out[i] = img / 1.5
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="mobilenet_v2.onnx")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(build(Path(args.output), args.size, args.width, seed=args.seed))


if __name__ == "__main__":
    main()
