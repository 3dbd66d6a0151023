"""db_boxes without OpenCV: the NumPy path (sdk.kernels.pipelines.contours, what a board with only
NumPy runs) vs the OpenCV path, side by side on the real PP-OCRv4 detector's probability map of the
corpus text page (736 x 736) and on that map scaled to 960 x 960 (nearest neighbour). Wall time per
``boxes_in_input`` call, interleaved rounds, medians; the boxes of both paths are checked equal first.

    python benchmarks/db_boxes_numpy.py [--runs 30]

Needs the corpus model ppocr-v4-det (fetched on first use), onnxruntime and OpenCV for the comparison.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _probability_map() -> np.ndarray:
    import onnxruntime as ort

    from sdk import corpus

    if not corpus.is_fetched("ppocr-v4-det") or not corpus.is_fetched():
        corpus.fetch(["ppocr-v4-det"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(corpus.path("ppocr-v4-det")), so, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, corpus.sample_inputs("ppocr-v4-det", 1)[0])[0], np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()

    from sdk.kernels.pipelines import build_step
    from sdk.kernels.pipelines import glue as g

    with_cv2 = build_step("db_boxes")
    real_cv2 = g._cv2
    g._cv2 = lambda: None                      # the NumPy path, as where `import cv2` fails
    try:
        numpy_only = build_step("db_boxes")
    finally:
        g._cv2 = real_cv2
    print("paths: %s | %s" % (with_cv2.device, numpy_only.device))

    prob = _probability_map()
    h, w = prob.shape[-2:]
    idx_y = (np.arange(960) * h // 960)
    idx_x = (np.arange(960) * w // 960)
    maps = {"%dx%d (real)" % (h, w): prob, "960x960 (scaled)": prob[..., idx_y[:, None], idx_x[None, :]]}
    print("%-18s %6s %12s %12s %8s" % ("map", "boxes", "opencv ms", "numpy ms", "ratio"))
    for name, m in maps.items():
        qa, sa = with_cv2.boxes_in_input(m)
        qb, sb = numpy_only.boxes_in_input(m)
        assert len(qa) == len(qb) and np.abs(qa - qb).max() < 1.5 and np.abs(sa - sb).max() < 0.01, name
        times = {"cv2": [], "np": []}
        for _ in range(args.runs):               # interleaved: both see the same machine load
            for key, step in (("cv2", with_cv2), ("np", numpy_only)):
                t0 = time.perf_counter()
                step.boxes_in_input(m)
                times[key].append((time.perf_counter() - t0) * 1e3)
        a, b = statistics.median(times["cv2"]), statistics.median(times["np"])
        print("%-18s %6d %12.2f %12.2f %7.2fx" % (name, len(qa), a, b, b / a))


if __name__ == "__main__":
    main()
