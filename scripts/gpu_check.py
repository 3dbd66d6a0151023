#!/usr/bin/env python3
"""One short run (< 5 minutes) on any CUDA machine that checks and times the GPU side of edgesdk,
and prints one summary table.

Installs nothing. Needs NumPy and one CUDA backend (cuda-python or pycuda; every installed one is
run, and one that fails does not stop the others); OpenCV, pytest, torch/torchvision and TensorRT
are used when present. Checks the checkout it belongs to, whatever is installed: ``sdk`` is imported from this checkout
(from a package tree assembled in a temporary folder when the copy lost its symbolic links), or
from the installed package when the script stands alone; the tests run from a temporary folder
(copies of tests/ and examples/), never from the checkout root.

1. the driver probe: GPU, compute capability, driver CUDA version;
2. per backend: each kernel against its CPU reference on random inputs of many sizes (the
   post-processing must give identical detections), timed with CUDA events next to the CPU path;
3. per backend: benchmarks/gpu_postprocess.py (vs torchvision) and benchmarks/gpu_preprocess.py
   (zero-copy vs torch), when torch with CUDA is installed;
4. the TensorRT API table against the installed TensorRT, when there is one;
5. the GPU, TensorRT and CUDA-API tests (pytest), with their counts.

    python scripts/gpu_check.py [--backend all] [--runs 30] [--quick] [--no-tests] [--no-bench] [--budget-s 290]
                                [--json results.json]

Exit status 0 when every comparison and test passed; 2 when there is no GPU.
"""
from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
_LAYOUT = ("targets", "kernels", "quantize", "remote", "boards")
_T0 = time.perf_counter()


def _complete_sdk(first: Optional[str]) -> bool:
    """Can ``sdk`` with its CUDA layer and kernels be imported (with ``first`` on sys.path[0])?"""
    for name in [m for m in sys.modules if m == "sdk" or m.startswith("sdk.")]:
        del sys.modules[name]
    if first is not None:
        sys.path.insert(0, first)
    try:
        import sdk.kernels.postprocess  # noqa: F401
        import sdk.targets.cuda  # noqa: F401

        return True
    except ImportError:
        if first is not None:
            sys.path.remove(first)
        for name in [m for m in sys.modules if m == "sdk" or m.startswith("sdk.")]:
            del sys.modules[name]
        return False


def import_path() -> str:
    """Make ``import sdk`` import THIS checkout's package; returns the folder for PYTHONPATH.

    The checkout root when its ``sdk`` is complete (its symbolic links intact); else a package
    tree assembled in a temporary folder from the checkout's folders (a copy that lost its links);
    else (no package next to this script) the installed one, "".
    """
    if not (ROOT / "sdk" / "__init__.py").is_file():
        if _complete_sdk(None):
            return ""
        raise SystemExit("error: no sdk package next to this script and none installed")
    if _complete_sdk(str(ROOT)):
        return str(ROOT)
    tmp = Path(tempfile.mkdtemp(prefix="edgesdk-gpu-check-"))
    atexit.register(shutil.rmtree, str(tmp), True)  # links only: the checkout is never touched
    pkg = tmp / "sdk"
    pkg.mkdir()
    for entry in (ROOT / "sdk").iterdir():
        if entry.name not in _LAYOUT:
            (pkg / entry.name).symlink_to(entry.resolve())
    for name in _LAYOUT:
        if (ROOT / name).is_dir():
            (pkg / name).symlink_to(ROOT / name)
    if not _complete_sdk(str(tmp)):
        raise SystemExit(f"error: cannot import sdk from the checkout {ROOT}")
    return str(tmp)


def median_events(backend: Any, stream: Any, fn: Callable[[], Any], runs: int) -> float:
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


def median_wall(fn: Callable[[], Any], runs: int) -> float:
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def check_preprocess(backend: Any, runs: int, quick: bool, srcs: Optional[List[Tuple[int, int]]] = None,
                     sizes: Optional[List[Tuple[int, int]]] = None) -> Dict[str, Any]:
    import numpy as np

    from sdk.kernels.preprocess import GpuPreprocessor, emulate
    from sdk.preprocess import PreprocessSpec, preprocess, preprocess_reference

    srcs = srcs or [(3, 5), (37, 53), (480, 640), (1080, 1920)] + ([] if quick else [(720, 1280), (2160, 3840)])
    sizes = sizes or [(64, 64), (640, 640)] + ([] if quick else [(320, 320), (384, 640)])
    rng = np.random.default_rng(0)
    res: Dict[str, Any] = {"cases": 0, "failed": 0, "kernel_ms_1080p": None, "cpu_ms_1080p": None,
                           "digest": hashlib.sha256()}
    print(f"\npreprocess.cu vs preprocess_reference on {backend.name}: max |diff|, kernel ms (CUDA events)")
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
        res["digest"].update(got.tobytes())  # the backends must agree bit for bit
        diff = float(np.abs(got - preprocess_reference(img, spec).astype(np.float32)).max())
        demu = float(np.abs(got - emulate(img, spec).astype(np.float32)).max())
        ok = diff <= (4e-3 if dtype == "float16" else 1e-4)
        res["cases"] += 1
        res["failed"] += not ok
        if src == (1080, 1920) and size == (640, 640) and mode == "letterbox" and layout == "NCHW":
            res["kernel_ms_1080p"] = kern
            res["cpu_ms_1080p"] = median_wall(lambda: preprocess(img, spec), max(3, runs // 3))
        if not ok or not quick:
            print(f"  {'x'.join(map(str, src)):>10} -> {'x'.join(map(str, size)):>8} {mode:>9} {layout}/{dtype:<8} "
                  f"diff {diff:8.2e} vs emulation {demu:8.2e} kernel {kern:8.4f} ms{'' if ok else '  MISMATCH'}")
    print(f"  {res['cases'] - res['failed']}/{res['cases']} within tolerance; 1080p->640 letterbox: kernel "
          f"{_fmt(res['kernel_ms_1080p'], '.4f')} ms, CPU {_fmt(res['cpu_ms_1080p'], '.2f')} ms")
    return res


def check_postprocess(backend: Any, runs: int, quick: bool,
                      cases: Optional[List[Tuple[int, int, bool, bool]]] = None) -> Dict[str, Any]:
    import numpy as np

    from sdk.kernels.postprocess import GpuYoloPostprocessor, emulate
    from sdk.kernels.reference import PostprocessSpec, synthetic_yolo_output, yolo_postprocess

    if cases is None:
        cases = [(100, 3, True, False), (1000, 1, False, False), (8400, 80, False, True), (25200, 80, True, False)]
        if not quick:
            cases += [(5000, 20, True, True), (25200, 1, True, False), (50000, 10, False, False)]
    res: Dict[str, Any] = {"cases": 0, "failed": 0, "rows": [], "digest": hashlib.sha256()}
    print(f"\npostprocess.cu vs yolo_postprocess on {backend.name}: identical detections; GPU ms (CUDA events)")
    print(f"  {'rows':>6} {'classes':>7} {'obj':>4} {'transp':>6} {'thr':>5} {'kept':>5} {'same':>5} "
          f"{'GPU ms':>8} {'CPU ms':>8}")
    for n, classes, obj, transposed in cases:
        pred = synthetic_yolo_output(n, classes, obj, seed=n + classes)
        arg = np.ascontiguousarray(pred.T) if transposed else pred
        for thr in (0.05, 0.25):
            spec = PostprocessSpec(score_threshold=thr, iou_threshold=0.45, max_detections=300, max_candidates=4096,
                                   has_objectness=obj, transposed=transposed)
            with GpuYoloPostprocessor(spec, n, pred.shape[1], backend=backend) as post:
                got = post(arg)
                gpu_ms = median_events(backend, post.stream, lambda: post.launch(post._pred), runs)
            want = yolo_postprocess(arg, spec)
            for f in ("rows", "classes", "scores", "boxes"):
                res["digest"].update(getattr(got, f).tobytes())
            same = all(np.array_equal(getattr(got, f), getattr(want, f)) for f in ("rows", "classes", "scores", "boxes"))
            if n <= 8400 and not same:  # say whether the algorithm or the CUDA code is off
                same_emul = all(np.array_equal(getattr(emulate(arg, spec), f), getattr(want, f))
                                for f in ("rows", "classes", "scores", "boxes"))
                print(f"  (NumPy emulation of the kernels {'agrees' if same_emul else 'DISAGREES'} with the reference)")
            res["cases"] += 1
            res["failed"] += not same
            cpu_ms = median_wall(lambda: yolo_postprocess(arg, spec), max(3, runs // 10))
            res["rows"].append((n, classes, gpu_ms, cpu_ms))
            print(f"  {n:6d} {classes:7d} {str(obj):>4} {str(transposed):>6} {thr:5.2f} {len(got):5d} "
                  f"{'yes' if same else 'NO':>5} {gpu_ms:8.3f} {cpu_ms:8.2f}")
    return res


def _load_benchmark(name: str) -> Any:
    if str(ROOT / "benchmarks") not in sys.path:  # the scripts import their shared helpers (gputiming)
        sys.path.insert(0, str(ROOT / "benchmarks"))
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"edgesdk_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def run_benchmarks(backend: Any, quick: bool) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    post = _load_benchmark("gpu_postprocess")
    print(f"\nbenchmarks/gpu_postprocess.py on {backend.name} (wall ms per call, medians)")
    rows = post.run(backend, runs=20 if quick else 50, quick=quick)
    post.print_table(rows)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    out["post_min_ratio"] = min(ratios) if ratios else None
    out["post_same_rows"] = sum(bool(r.get("same_rows")) for r in rows), len(rows)
    pre = _load_benchmark("gpu_preprocess")
    print(f"\nbenchmarks/gpu_preprocess.py on {backend.name} (wall ms per 1080p frame, medians)")
    res = pre.run(backend, runs=50 if quick else 100)
    pre.print_result(res)
    out["pre"] = res
    return out


def check_tensorrt() -> Optional[Dict[str, Any]]:
    try:
        import tensorrt
    except ImportError:
        print("\nTensorRT: not installed (API table and TensorRT tests skipped)")
        return None
    from sdk.targets.tensorrt.api import check_api
    from sdk.targets.tensorrt.build import capabilities

    rep = check_api(tensorrt)
    caps = capabilities(tensorrt)
    print(f"\nTensorRT {rep.version}: {len(rep.checked)} names checked, missing {rep.missing or 'none'}, "
          f"bad calls {rep.bad_calls or 'none'}; capabilities {caps}")
    return {"version": rep.version, "ok": rep.ok, "checked": len(rep.checked)}


def run_backend(name: str, args: argparse.Namespace) -> Dict[str, Any]:
    """Every check on one backend; an error is recorded, never raised; the backend is always closed."""
    from sdk.targets.cuda import get_backend

    row: Dict[str, Any] = {"backend": name, "error": None}
    backend = None
    try:
        backend = get_backend(name)
        print(f"\n== backend {backend.name} ==", flush=True)
        row["pre"] = check_preprocess(backend, args.runs, args.quick)
        row["post"] = check_postprocess(backend, args.runs, args.quick)
        if not args.no_bench:
            row["bench"] = run_benchmarks(backend, args.quick)
    except Exception as exc:  # noqa: BLE001 - report and go on to the next backend
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        traceback.print_exc()
    finally:
        if backend is not None:
            backend.close()
    return row


def run_tests(pythonpath: str, timeout_s: float, log: Optional[Path] = None) -> Dict[str, Any]:
    """The GPU/TensorRT/CUDA-API tests from a temporary folder (copies of tests/ and examples/);
    pytest's whole output goes to ``log`` when given."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("\ntests: skipped (pytest is not installed)")
        return {"status": "pytest not installed"}
    _corpus_or_say_so()
    work = Path(tempfile.mkdtemp(prefix="edgesdk-gpu-tests-"))
    try:
        shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        if (ROOT / "examples").is_dir():
            shutil.copytree(ROOT / "examples", work / "examples")
        (work / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n    tensorrt: needs TensorRT\n"
                                         "    ssh: needs sshd\n    slow: slow\naddopts = -ra\n")
        files = ["tests/kernels", "tests/targets/test_cuda.py", "tests/targets/test_cuda_api.py"]
        files += [f"tests/targets/{p.name}" for p in sorted((ROOT / "tests" / "targets").glob("test_tensorrt*.py"))]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
        # the simulated-GPU tests are for machines without one: here the real GPU tests run instead
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not simulated_gpu", *files]
        print(f"\n$ (cd {work} && python {' '.join(cmd[1:])})", flush=True)
        try:
            proc = subprocess.run(cmd, cwd=str(work), env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {timeout_s:.0f} s", "rc": 1}
        if log is not None:
            log.write_text(proc.stdout + proc.stderr)
            print(f"pytest's whole output: {log}")
        tail = proc.stdout.strip().splitlines()
        print("\n".join(tail[-25:]))
        counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", tail[-1] if tail else "")}
        return {"status": "ran", "rc": proc.returncode, **counts}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _corpus_or_say_so() -> None:
    """The kernel tests run the corpus models and photos: fetch them when missing, and where that
    fails (a GPU machine without network) say which fix those tests' failures need."""
    from sdk import corpus

    if corpus.is_fetched():
        return
    try:
        corpus.fetch()
    except Exception as exc:  # noqa: BLE001 - the tests say the rest
        print(f"\nwarning: the model corpus is not in {corpus.cache_dir()} and cannot be fetched here "
              f"({str(exc).splitlines()[0][:160]}): the tests that use it fail. Fix: python scripts/fetch_corpus.py "
              "on a machine with network, then copy that folder here (or set EDGESDK_CORPUS_DIR)")


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def summary(gpu: Any, rows: List[Dict[str, Any]], trt: Optional[Dict[str, Any]], tests: Dict[str, Any]) -> int:
    """Print the one summary table; return the number of failures."""
    failures = 0
    goals: List[str] = []
    print("\n" + "=" * 108)
    d = gpu.devices[0]
    print(f"SUMMARY  {d.name} (sm_{d.compute_capability[0]}{d.compute_capability[1]}), driver CUDA "
          f"{gpu.driver_version}, {time.perf_counter() - _T0:.0f} s")
    print(f"{'backend':<12} {'preprocess':>10} {'postprocess':>11} {'pre kernel':>10} {'pre CPU':>8} "
          f"{'post/torchv':>11} {'same rows':>9} {'zero-copy/torch':>15} {'/torch pinned':>13}  error")
    for r in rows:
        pre, post, bench = r.get("pre") or {}, r.get("post") or {}, r.get("bench") or {}
        failures += bool(r["error"]) + pre.get("failed", 0) + post.get("failed", 0)
        p = bench.get("pre") or {}
        failures += bool(p.get("banded_max_abs_diff", 0.0) > 0.0)  # banded preprocessing must equal one launch
        same = bench.get("post_same_rows")
        print(f"{r['backend']:<12} {_cases(pre):>10} {_cases(post):>11} {_fmt(pre.get('kernel_ms_1080p'), '.4f'):>10} "
              f"{_fmt(pre.get('cpu_ms_1080p'), '.2f'):>8} {_ratio(bench.get('post_min_ratio'), ' min'):>11} "
              f"{(f'{same[0]}/{same[1]}' if same else '-'):>9} "
              f"{_ratio(p.get('zero_copy_vs_torch_pageable')):>15} "
              f"{_ratio(p.get('zero_copy_vs_torch_pinned')):>13}  {r['error'] or ''}")
        if bench.get("post_min_ratio") is not None and p.get("zero_copy_vs_torch_pinned") is not None:
            goals.append(f"{r['backend']}: post-processing >= 1.5x torchvision "
                         f"{_yes(bench['post_min_ratio'] >= 1.5)}, zero-copy >= 2x torch pageable "
                         f"{_yes(p['zero_copy_vs_torch_pageable'] >= 2.0)}, <= 1.3x torch pinned "
                         f"{_yes(p['zero_copy_vs_torch_pinned'] <= 1.3)}")
    digests = {r["backend"]: (r["pre"]["digest"].hexdigest(), r["post"]["digest"].hexdigest())
               for r in rows if r.get("pre") and r.get("post")}
    if len(digests) > 1:
        agree = len(set(digests.values())) == 1
        failures += not agree
        print(f"{' and '.join(digests)} give {'identical' if agree else 'DIFFERENT'} outputs on every case")
    if trt is not None:
        failures += not trt["ok"]
        print(f"TensorRT {trt['version']}: API table {'ok' if trt['ok'] else 'MISMATCH'} ({trt['checked']} names)")
    failures += bool(tests.get("rc"))
    print("tests: " + (", ".join(f"{k} {v}" for k, v in tests.items() if k not in ("status", "rc")) or tests["status"])
          + (f" (exit status {tests['rc']})" if "rc" in tests else ""))
    for line in goals or ["goals: not measured (torch with CUDA, torchvision not installed)"]:
        print(f"goals {line}")
    print(f"result: {'PASS' if not failures else f'{failures} FAILURE(S)'}")
    return failures


def write_json(path: Path, gpu: Any, rows: List[Dict[str, Any]], trt: Optional[Dict[str, Any]],
               tests: Dict[str, Any], failures: int) -> None:
    """The run's figures as one JSON document (each output digest as its hex string)."""
    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if hasattr(v, "hexdigest"):
            return v.hexdigest()
        return v

    d = gpu.devices[0]
    doc = {"gpu": d.name, "compute_capability": list(d.compute_capability), "driver_cuda": gpu.driver_version,
           "python": sys.version.split()[0], "wall_s": time.perf_counter() - _T0, "backends": plain(rows),
           "tensorrt": trt, "tests": tests, "failures": failures}
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(f"figures written to {path}")


def _ratio(v: Optional[float], suffix: str = "") -> str:
    return "-" if v is None else f"{v:.2f}x{suffix}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _cases(res: Dict[str, Any]) -> str:
    return f"{res['cases'] - res['failed']}/{res['cases']}" if res else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description="Check and time the GPU kernels and the TensorRT target.")
    ap.add_argument("--backend", default="all", help="all (every installed backend) | cuda-python | pycuda")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-bench", action="store_true", help="skip the torch/torchvision benchmarks")
    ap.add_argument("--budget-s", type=float, default=290.0,
                    help="the whole run's time budget: the pytest step gets what is left (at least 60 s)")
    ap.add_argument("--json", metavar="PATH",
                    help="also write every figure of the run to PATH, and pytest's output beside it (.pytest.txt)")
    args = ap.parse_args()
    pythonpath = import_path()

    import sdk
    from sdk.targets.cuda import installed_backends, probe_gpu

    gpu = probe_gpu()
    print(f"python {sys.version.split()[0]}; sdk from {Path(sdk.__file__).parent}; CUDA backends installed: "
          f"{', '.join(installed_backends()) or 'none'}")
    if not gpu.available:
        print(f"no GPU: {gpu.reason}")
        return 2
    for d in gpu.devices:
        print(f"GPU {d.index}: {d.name}, compute capability {d.compute_capability[0]}.{d.compute_capability[1]}, "
              f"{d.memory_mib} MiB; driver CUDA {gpu.driver_version}")
    names = installed_backends() if args.backend == "all" else [args.backend]
    rows = []
    for name in names:
        rows.append(run_backend(name, args))
        print(f"[{time.perf_counter() - _T0:.0f} s] backend {name} done", flush=True)
    trt = check_tensorrt()
    left = max(60.0, args.budget_s - (time.perf_counter() - _T0))
    log = Path(args.json).with_suffix(".pytest.txt") if args.json else None
    tests = {"status": "not run (--no-tests)"} if args.no_tests else run_tests(pythonpath, left, log)
    failures = summary(gpu, rows, trt, tests)
    if args.json:
        write_json(Path(args.json), gpu, rows, trt, tests, failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
