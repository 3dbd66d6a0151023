"""Train the example model: a small CNN on scikit-learn's digits, exported to ONNX.

Pure NumPy training (no deep-learning framework needed), deterministic for a given seed.
Writes, next to this file:
- ``digits_cnn.onnx``: input ``image`` float32 [N,1,8,8] (pixel values / 16), output ``logits`` [N,10]
- ``eval.npz``: the held-out labelled set (``x``, ``y``), never seen in training
- ``calib.npz``: 256 calibration samples from the training split (``x``)
- ``images/``: a few eval samples as PNG files with ``labels.csv`` (for image-folder workflows)

Run: ``python examples/digits/train.py`` (needs scikit-learn; OpenCV for the PNG files).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def im2col(x, k, stride, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (h + 2 * pad - k) // stride + 1
    wo = (w + 2 * pad - k) // stride + 1
    cols = np.empty((n, c, k, k, ho, wo), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * ho * wo, c * k * k), ho, wo


def col2im(cols, shape, k, stride, pad, ho, wo):
    n, c, h, w = shape
    cols = cols.reshape(n, ho, wo, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


class Conv:
    def __init__(self, rng, cin, cout, k=3, stride=1, pad=1):
        self.w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        self.b = np.zeros(cout, np.float32)
        self.k, self.stride, self.pad = k, stride, pad

    def forward(self, x):
        self.x_shape = x.shape
        self.cols, ho, wo = im2col(x, self.k, self.stride, self.pad)
        self.ho, self.wo = ho, wo
        out = self.cols @ self.w.reshape(len(self.b), -1).T + self.b
        return out.reshape(x.shape[0], ho, wo, -1).transpose(0, 3, 1, 2)

    def backward(self, dy):
        cout = len(self.b)
        dy2 = dy.transpose(0, 2, 3, 1).reshape(-1, cout)
        self.dw = (dy2.T @ self.cols).reshape(self.w.shape)
        self.db = dy2.sum(0)
        dcols = dy2 @ self.w.reshape(cout, -1)
        return col2im(dcols, self.x_shape, self.k, self.stride, self.pad, self.ho, self.wo)


def forward(params, x, cache=None):
    c1, c2, wf, bf = params
    h1 = c1.forward(x)
    r1 = np.maximum(h1, 0)
    h2 = c2.forward(r1)
    r2 = np.maximum(h2, 0)
    f = r2.reshape(len(x), -1)
    logits = f @ wf + bf
    if cache is not None:
        cache.update(h1=h1, h2=h2, f=f, r2_shape=r2.shape)
    return logits


def train(seed: int = 0, epochs: int = 40, lr: float = 3e-3, batch: int = 32):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None]
    y = digits.target.astype(np.int64)
    x_tr, x_ev, y_tr, y_ev = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    rng = np.random.default_rng(seed)
    c1, c2 = Conv(rng, 1, 8), Conv(rng, 8, 16, stride=2)
    wf = (rng.standard_normal((256, 10)) * np.sqrt(1.0 / 256)).astype(np.float32)
    bf = np.zeros(10, np.float32)
    params = [c1, c2, wf, bf]
    m = {k: 0.0 for k in ["c1w", "c1b", "c2w", "c2b", "wf", "bf"]}
    v = dict(m)
    step = 0
    for epoch in range(epochs):
        order = rng.permutation(len(x_tr))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            xb, yb = x_tr[idx], y_tr[idx]
            cache = {}
            logits = forward(params, xb, cache)
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            dlogits = p
            dlogits[np.arange(len(yb)), yb] -= 1
            dlogits /= len(yb)
            grads = {"wf": cache["f"].T @ dlogits, "bf": dlogits.sum(0)}
            df = (dlogits @ wf.T).reshape(cache["r2_shape"]) * (cache["h2"] > 0)
            dr1 = c2.backward(df) * (cache["h1"] > 0)
            c1.backward(dr1)
            grads.update(c1w=c1.dw, c1b=c1.db, c2w=c2.dw, c2b=c2.db)
            step += 1
            refs = {"c1w": (c1, "w"), "c1b": (c1, "b"), "c2w": (c2, "w"), "c2b": (c2, "b")}
            for key, g in grads.items():
                m[key] = 0.9 * m[key] + 0.1 * g
                v[key] = 0.999 * v[key] + 0.001 * g * g
                upd = lr * (m[key] / (1 - 0.9 ** step)) / (np.sqrt(v[key] / (1 - 0.999 ** step)) + 1e-8)
                if key in refs:
                    obj, attr = refs[key]
                    setattr(obj, attr, (getattr(obj, attr) - upd).astype(np.float32))
                elif key == "wf":
                    wf -= upd.astype(np.float32)
                else:
                    bf -= upd.astype(np.float32)
        acc = (forward(params, x_ev).argmax(1) == y_ev).mean()
        print(f"epoch {epoch + 1:2d}: eval top-1 {acc * 100:.2f}%")
    return params, (x_tr, y_tr), (x_ev, y_ev)


def export_onnx(params, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c1, c2, wf, bf = params
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(c1.w, "conv1.weight"), (c1.b, "conv1.bias"), (c2.w, "conv2.weight"), (c2.b, "conv2.bias"),
              (np.ascontiguousarray(wf.T), "fc.weight"), (bf, "fc.bias")]]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("Conv", ["relu1", "conv2.weight", "conv2.bias"], ["conv2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("Flatten", ["relu2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="edgesdk-examples", doc_string="CNN trained on sklearn digits")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--epochs", type=int, default=40)
    args = ap.parse_args()
    params, (x_tr, _), (x_ev, y_ev) = train(epochs=args.epochs)
    args.out.mkdir(parents=True, exist_ok=True)
    export_onnx(params, args.out / "digits_cnn.onnx")
    np.savez_compressed(args.out / "eval.npz", x=x_ev.astype(np.float32), y=y_ev.astype(np.int64))
    np.savez_compressed(args.out / "calib.npz", x=x_tr[:256].astype(np.float32))
    try:
        import cv2
    except ImportError:
        print("OpenCV not installed: skipped images/")
    else:
        img_dir = args.out / "images"
        img_dir.mkdir(exist_ok=True)
        lines = ["filename,label"]
        for i in range(32):
            gray = np.clip(np.rint(x_ev[i, 0] * 255), 0, 255).astype(np.uint8)
            name = f"digit_{i:03d}.png"
            cv2.imwrite(str(img_dir / name), cv2.cvtColor(gray, cv2.COLOR_GRAY2BGR))
            lines.append(f"{name},{int(y_ev[i])}")
        (img_dir / "labels.csv").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
