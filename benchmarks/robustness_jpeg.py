"""How close and how fast is the NumPy JPEG corruption (sdk.robustness) next to OpenCV's real
JPEG codec at the same quality? Both sides run in one process on the same images; prints the
median time per image of each and their ratio, and the mean |difference| between the two outputs
relative to the mean |change| the codec itself makes (lower is closer).

Run: python benchmarks/robustness_jpeg.py [--images 40] [--size 224]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    import cv2

    from sdk.robustness import corrupt

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:args.size, 0:args.size]
    images = []
    for i in range(args.images):  # smooth gradients with edges and a little texture, like photos
        base = np.stack([x * (1 + i % 3), y * (2 - i % 2), (x + y) // 2], -1) % 256
        base[args.size // 4: args.size // 2, args.size // 3: args.size // 2 + 20] = 200 + i
        images.append(np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8))
    print(f"{args.images} images {args.size}x{args.size}x3")
    print(f"{'severity':>8} {'quality':>7} {'numpy ms':>9} {'opencv ms':>9} {'ratio':>6} {'diff/change':>11}")
    for sev, q in zip(range(1, 6), (50, 30, 20, 12, 7)):
        t_np, t_cv, rel = [], [], []
        for img in images:
            t0 = time.perf_counter()
            ours = corrupt(img, "jpeg", sev)
            t1 = time.perf_counter()
            ok, buf = cv2.imencode(".jpg", img[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, q])
            real = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]
            t2 = time.perf_counter()
            t_np.append((t1 - t0) * 1e3)
            t_cv.append((t2 - t1) * 1e3)
            change = np.abs(real.astype(float) - img).mean()
            rel.append(np.abs(ours.astype(float) - real).mean() / max(change, 1e-9))
        a, b = statistics.median(t_np), statistics.median(t_cv)
        print(f"{sev:>8} {q:>7} {a:>9.2f} {b:>9.2f} {a / b:>6.1f} {statistics.median(rel):>11.2f}")


if __name__ == "__main__":
    main()
