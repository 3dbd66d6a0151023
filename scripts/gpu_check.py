#!/usr/bin/env python3
"""One short run on any CUDA machine that checks and times the GPU side of edgesdk.

Installs nothing. Needs NumPy and one CUDA backend (cuda-python alone is enough; pycuda is used
too when present); OpenCV, pytest and TensorRT are used when present. Works from a plain checkout
(the package layout is assembled in a temporary folder when ``sdk`` is not installed).

1. the driver probe: GPU, compute capability, driver CUDA version;
2. each kernel against its CPU reference on random inputs of many sizes, timed with CUDA events
   (medians), next to the CPU path;
3. the tests marked ``gpu`` / ``tensorrt`` (pytest), when pytest is installed.

    python scripts/gpu_check.py [--backend cuda-python] [--runs 30] [--no-tests] [--quick]

Exit status 0 when every comparison and test passed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_LAYOUT = {"targets": "targets", "kernels": "kernels", "quantize": "quantize", "remote": "remote", "boards": "boards"}


def _import_path() -> str:
    """Make ``import sdk`` work from the checkout; returns the folder to put on PYTHONPATH."""
    try:
        import sdk.targets  # noqa: F401  installed (pip install -e .)

        return ""
    except ImportError:
        pass
    tmp = Path(tempfile.mkdtemp(prefix="edgesdk-gpu-check-"))
    pkg = tmp / "sdk"
    pkg.mkdir()
    for entry in (ROOT / "sdk").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for name, folder in _LAYOUT.items():
        if (ROOT / folder).is_dir() and not (pkg / name).exists():
            (pkg / name).symlink_to(ROOT / folder)
    sys.path.insert(0, str(tmp))
    return str(tmp)


def median_events(backend, stream, fn, runs):
    """Median ms of ``fn()`` enqueued on ``stream``, between two CUDA events."""
    e0, e1 = backend.event(), backend.event()
    fn()
    stream.synchronize()
    out = []
    for _ in range(runs):
        e0.record(stream)
        fn()
        e1.record(stream)
        e1.synchronize()
        out.append(e0.elapsed_ms(e1))
    return statistics.median(out)


def median_wall(fn, runs):
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def check_preprocess(backend, runs, quick):
    import numpy as np

    from sdk.kernels.preprocess import GpuPreprocessor, emulate
    from sdk.preprocess import PreprocessSpec, preprocess, preprocess_reference

    srcs = [(3, 5), (37, 53), (480, 640), (1080, 1920)] + ([] if quick else [(720, 1280), (2160, 3840)])
    sizes = [(64, 64), (640, 640)] + ([] if quick else [(320, 320), (384, 640)])
    rng = np.random.default_rng(0)
    failures = 0
    print("\npreprocess.cu vs preprocess_reference (max |diff|), kernel time (CUDA events, median ms)")
    print(f"  {'source':>10} {'output':>8} {'mode':>9} {'layout/dtype':>13} {'max diff':>9} {'vs emul':>9} "
          f"{'kernel ms':>9} {'CPU ms':>8}")
    for src, size, mode, (layout, dtype) in ((s, z, m, ld) for s in srcs for z in sizes
                                              for m in ("resize", "letterbox")
                                              for ld in (("NCHW", "float32"), ("NHWC", "float16"))):
        img = rng.integers(0, 256, size=src + (3,), dtype=np.uint8)
        spec = PreprocessSpec(size=size, resize=mode, layout=layout, dtype=dtype,
                              mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))
        with GpuPreprocessor(spec, backend=backend) as pre:
            got = pre(img).astype(np.float32)
            kern = median_events(backend, pre.stream,
                                 lambda: pre.launch(pre._src, src[0], src[1], src[1] * 3, pre._out), runs)
        diff = float(np.abs(got - preprocess_reference(img, spec).astype(np.float32)).max())
        demu = float(np.abs(got - emulate(img, spec).astype(np.float32)).max())
        tol = 4e-3 if dtype == "float16" else 1e-4
        ok = diff <= tol
        failures += not ok
        cpu = median_wall(lambda: preprocess(img, spec), max(3, runs // 3)) if src == (1080, 1920) else float("nan")
        print(f"  {'x'.join(map(str, src)):>10} {'x'.join(map(str, size)):>8} {mode:>9} {layout + '/' + dtype[5:]:>13} "
              f"{diff:9.2e} {demu:9.2e} {kern:9.4f} {cpu:8.2f}{'' if ok else '  MISMATCH'}")
    return failures


def check_postprocess(backend, runs, quick):
    import numpy as np

    from sdk.kernels.postprocess import GpuYoloPostprocessor
    from sdk.kernels.reference import PostprocessSpec, synthetic_yolo_output, yolo_postprocess

    cases = [(100, 3, True, False), (1000, 1, False, False), (8400, 80, False, True), (25200, 80, True, False)]
    if not quick:
        cases += [(5000, 20, True, True), (25200, 1, True, False), (50000, 10, False, False)]
    failures = 0
    print("\npostprocess.cu vs yolo_postprocess (identical rows/classes/scores/boxes), 3 kernels (median ms)")
    print(f"  {'rows':>6} {'classes':>7} {'obj':>4} {'transp':>6} {'thr':>5} {'kept':>5} {'same':>5} "
          f"{'GPU ms':>8} {'CPU ms':>8}")
    for n, classes, obj, transposed in cases:
        pred = synthetic_yolo_output(n, classes, obj, seed=n + classes)
        fields = pred.shape[1]
        arg = np.ascontiguousarray(pred.T) if transposed else pred
        for thr in (0.05, 0.25):
            spec = PostprocessSpec(score_threshold=thr, iou_threshold=0.45, max_detections=300, max_candidates=4096,
                                   has_objectness=obj, transposed=transposed)
            with GpuYoloPostprocessor(spec, n, fields, backend=backend) as post:
                got = post(arg)
                gpu_ms = median_events(backend, post.stream, lambda: post.launch(post._pred), runs)
            want = yolo_postprocess(arg, spec)
            same = (got.rows.tolist() == want.rows.tolist() and got.classes.tolist() == want.classes.tolist()
                    and np.array_equal(got.scores, want.scores) and np.array_equal(got.boxes, want.boxes))
            failures += not same
            cpu_ms = median_wall(lambda: yolo_postprocess(arg, spec), max(3, runs // 5))
            print(f"  {n:6d} {classes:7d} {str(obj):>4} {str(transposed):>6} {thr:5.2f} {len(got):5d} "
                  f"{'yes' if same else 'NO':>5} {gpu_ms:8.3f} {cpu_ms:8.2f}")
    return failures


def run_tests(pythonpath: str) -> int:
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("\ntests: skipped (pytest is not installed)")
        return 0
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    targets = [str(ROOT / "tests" / "kernels"), str(ROOT / "tests" / "targets" / "test_cuda.py")]
    targets += [str(p) for p in sorted((ROOT / "tests" / "targets").glob("test_tensorrt*.py"))]
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu or tensorrt", "-p", "no:cacheprovider",
           "--rootdir", str(ROOT), *targets]
    print("\n$ " + " ".join(cmd[2:]), flush=True)
    return subprocess.run(cmd, cwd=str(ROOT), env=env).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description="Check and time the GPU kernels and the TensorRT target.")
    ap.add_argument("--backend", default="auto", help="auto | cuda-python | pycuda | all")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="fewer sizes")
    ap.add_argument("--no-tests", action="store_true")
    args = ap.parse_args()
    pythonpath = _import_path()

    from sdk.targets.cuda import get_backend, installed_backends, probe_gpu

    gpu = probe_gpu()
    print(f"python {sys.version.split()[0]}; CUDA backends installed: {', '.join(installed_backends()) or 'none'}")
    if not gpu.available:
        print(f"no GPU: {gpu.reason}")
        return 2
    for d in gpu.devices:
        print(f"GPU {d.index}: {d.name}, compute capability {d.compute_capability[0]}.{d.compute_capability[1]}, "
              f"{d.memory_mib} MiB; driver CUDA {gpu.driver_version}")
    try:
        import tensorrt

        print(f"TensorRT {tensorrt.__version__}")
    except ImportError:
        print("TensorRT: not installed (tensorrt tests will skip)")
    names = installed_backends() if args.backend == "all" else [args.backend]
    failures = 0
    for name in names:
        with get_backend(name) as backend:
            print(f"\n== backend {backend.name} ==")
            failures += check_preprocess(backend, args.runs, args.quick)
            failures += check_postprocess(backend, args.runs, args.quick)
    rc = 0 if args.no_tests else run_tests(pythonpath)
    print(f"\nkernel comparisons failed: {failures}; tests exit status: {rc}")
    return 1 if failures or rc else 0


if __name__ == "__main__":
    sys.exit(main())
