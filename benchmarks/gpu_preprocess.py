"""GPU preprocessing of a 1920x1080 BGR uint8 frame to a 640x640 letterboxed RGB float32 NCHW
tensor, (x - mean) / std, left on the GPU: edgesdk's fused kernel (sdk.kernels.GpuPreprocessor)
from a pageable frame, from a frame decoded straight into its pinned input buffer (zero-copy; in
one launch, and in 4 row bands whose uploads overlap the kernel), and from the caller's own
registered memory; vs PyTorch (upload, permute, float, bilinear
interpolate, pad, normalise) from a pageable and from a pre-pinned frame. Wall time per frame
(all synchronise), interleaved rounds, medians. Goals (issue 13): zero-copy >= 2x torch pageable,
and <= 1.3x torch pre-pinned.

    python benchmarks/gpu_preprocess.py [--backend auto] [--runs 100]
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict

import numpy as np
from gputiming import median_interleaved

MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)
BANDS = 4  #: the banded variant: uploads of 4 row bands overlapped with the kernel


def _torch_pre(torch: Any, spec: Any, src_hw) -> Callable[[Any], Any]:
    import torch.nn.functional as F

    _, nh, nw, top, left = spec.letterbox_geometry(*src_hw)
    h, w = spec.size
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
    inv_std = (1.0 / torch.tensor(STD, device="cuda")).view(1, 3, 1, 1)

    def run(frame_host):
        t = frame_host.cuda(non_blocking=True)
        x = t.permute(2, 0, 1)[None].float()
        x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
        out = torch.full((1, 3, h, w), float(spec.pad_value), device="cuda")
        out[:, :, top:top + nh, left:left + nw] = x
        out = (out[:, [2, 1, 0]] - mean) * inv_std  # BGR -> RGB
        torch.cuda.synchronize()
        return out

    return run


def run(backend: Any, runs: int = 100) -> Dict[str, Any]:
    """Medians (ms) of each path, the ratios the goals name, and the max |difference| between ours
    and torch's output (the same work)."""
    from sdk.kernels.preprocess import GpuPreprocessor
    from sdk.preprocess import PreprocessSpec

    spec = PreprocessSpec(size=(640, 640), resize="letterbox", input_order="BGR", color="RGB", layout="NCHW",
                          dtype="float32", mean=MEAN, std=STD)
    frame = np.random.default_rng(0).integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)
    out: Dict[str, Any] = {}
    with GpuPreprocessor(spec, backend=backend) as pre, GpuPreprocessor(spec, backend=backend, bands=BANDS) as banded:
        staging = pre.input_buffer(1080, 1920)
        np.copyto(staging, frame)  # stands for a decoder writing the frame there
        staging_b = banded.input_buffer(1080, 1920)
        np.copyto(staging_b, frame)
        own = np.array(frame)  # the caller's own buffer, page-locked in place
        backend.register_host(own)

        def ours(p, img):
            p.to_device(img)
            p.stream.synchronize()

        fns: Dict[str, Callable[[], Any]] = {
            "edgesdk pageable": lambda: ours(pre, frame),
            "edgesdk zero-copy": lambda: ours(pre, staging),
            f"edgesdk zero-copy {BANDS} bands": lambda: ours(banded, staging_b),
            "edgesdk registered": lambda: ours(pre, own),
        }
        try:
            import torch

            has_torch = torch.cuda.is_available()
        except ImportError:
            has_torch = False
        if has_torch:
            tpre = _torch_pre(torch, spec, frame.shape[:2])
            pageable, pinned = torch.from_numpy(frame), torch.from_numpy(frame).pin_memory()
            fns["torch pageable"] = lambda: tpre(pageable)
            fns["torch pre-pinned"] = lambda: tpre(pinned)
        out["median_ms"] = median_interleaved(fns, runs, warmup=5)
        mine = pre(frame)
        out["banded_max_abs_diff"] = float(np.abs(banded(frame) - mine).max())  # must be 0
        m = out["median_ms"]
        best = min(("edgesdk zero-copy", f"edgesdk zero-copy {BANDS} bands"), key=lambda k: m[k])
        out["best_zero_copy"] = best
        if has_torch:
            ref = tpre(pageable).cpu().numpy()
            out["max_abs_diff_vs_torch"] = float(np.abs(mine - ref).max())
            out["zero_copy_vs_torch_pageable"] = m["torch pageable"] / m[best]
            out["zero_copy_vs_torch_pinned"] = m[best] / m["torch pre-pinned"]
        backend.unregister_host(own)
    return out


def print_result(res: Dict[str, Any]) -> None:
    for name, ms in res["median_ms"].items():
        print(f"  {name:<28} {ms:8.3f} ms")
    print(f"  banded vs one launch: max |diff| {res['banded_max_abs_diff']:.3g} (must be 0)")
    if "zero_copy_vs_torch_pageable" in res:
        a, b = res["zero_copy_vs_torch_pageable"], res["zero_copy_vs_torch_pinned"]
        print(f"  {res['best_zero_copy']} is {a:.2f}x torch pageable (goal >= 2: {'yes' if a >= 2 else 'NO'}); "
              f"{b:.2f}x torch pre-pinned's time (goal <= 1.3: {'yes' if b <= 1.3 else 'NO'}); "
              f"max |ours - torch| {res['max_abs_diff_vs_torch']:.3g}")
    else:
        print("  torch with CUDA not installed: no comparison")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    from sdk.targets.cuda import get_backend

    with get_backend(args.backend) as backend:
        print(f"1920x1080 -> 640x640 letterbox NCHW float32 on {backend.name}; median of {args.runs} interleaved runs")
        print_result(run(backend, args.runs))


if __name__ == "__main__":
    main()
