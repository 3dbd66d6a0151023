"""Fused CPU preprocessing (sdk.preprocess.preprocess) vs the usual chain (cv2.resize + cvtColor +
NumPy normalise + transpose), side by side on 1920x1080 frames to 640x640; and the CUDA kernel vs
the CPU path when a GPU is present. Prints medians (ms) and the ratio of medians (goal >= 1.5x).

    python benchmarks/preprocess.py [--runs 50] [--threads N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from sdk.preprocess import PreprocessSpec, preprocess

MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def usual_chain(cv2, img, spec):
    h, w = spec.size
    if spec.resize == "letterbox":
        _, nh, nw, top, left = spec.letterbox_geometry(*img.shape[:2])
        r = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
        r = cv2.copyMakeBorder(r, top, h - nh - top, left, w - nw - left, cv2.BORDER_CONSTANT,
                               value=(spec.pad_value,) * 3)
    else:
        r = cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR)
    r = cv2.cvtColor(r, cv2.COLOR_BGR2RGB)
    x = (r.astype(np.float32) - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))[None]


def median_ms(fn, frames, runs):
    for f in frames[:2]:
        fn(f)
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        fn(frames[i % len(frames)])
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None, help="cv2.setNumThreads (default: OpenCV's choice)")
    args = ap.parse_args()
    import cv2

    if args.threads is not None:
        cv2.setNumThreads(args.threads)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8) for _ in range(4)]
    print(f"1920x1080 BGR uint8 -> 640x640 RGB float32 NCHW, (x-mean)/std; {args.runs} runs, "
          f"cv2 {cv2.__version__}, {cv2.getNumThreads()} OpenCV threads")
    for mode in ("resize", "letterbox"):
        spec = PreprocessSpec(size=(640, 640), resize=mode, mean=MEAN, std=STD)
        np.testing.assert_allclose(preprocess(frames[0], spec), usual_chain(cv2, frames[0], spec), atol=1e-4)
        chain = median_ms(lambda f: usual_chain(cv2, f, spec), frames, args.runs)
        fused = median_ms(lambda f: preprocess(f, spec), frames, args.runs)
        print(f"{mode:9s}  usual chain {chain:7.2f} ms   fused {fused:7.2f} ms   speed-up {chain / fused:5.2f}x "
              f"(goal >= 1.5x)")
    try:
        from sdk.targets.cuda import probe_gpu

        gpu = probe_gpu()
        if not gpu.available:
            print(f"GPU kernel: skipped ({gpu.reason})")
            return
        from sdk.kernels.preprocess import GpuPreprocessor

        for mode in ("resize", "letterbox"):
            spec = PreprocessSpec(size=(640, 640), resize=mode, mean=MEAN, std=STD)
            with GpuPreprocessor(spec) as pre:
                cpu = median_ms(lambda f: preprocess(f, spec), frames, args.runs)
                end_to_end = median_ms(pre, frames, args.runs)
                # kernel alone, CUDA events, image already on the GPU
                pre.to_device(frames[0])
                pre.stream.synchronize()
                b = pre.backend
                e0, e1 = b.event(), b.event()
                ks = []
                for _ in range(args.runs):
                    e0.record(pre.stream)
                    pre.launch(pre._src, 1080, 1920, 1920 * 3, pre._out)
                    e1.record(pre.stream)
                    e1.synchronize()
                    ks.append(e0.elapsed_ms(e1))
                kern = statistics.median(ks)
            print(f"{mode:9s}  GPU ({b.name}, {gpu.devices[0].name}): upload+kernel+download {end_to_end:.3f} ms, "
                  f"kernel {kern:.3f} ms; CPU fused {cpu:.2f} ms -> {cpu / end_to_end:.1f}x / {cpu / kern:.1f}x")
    except Exception as exc:  # report, don't hide, a GPU-side failure
        print(f"GPU kernel: failed: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
