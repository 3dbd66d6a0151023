"""GPU detection post-processing: edgesdk's kernels (sdk.kernels.GpuYoloPostprocessor) vs the usual
PyTorch path (decode, threshold, stable sort, top max_candidates, torchvision.ops.batched_nms, top
max_detections), side by side on one GPU. The prediction is already on the device for both; the
detections are copied back to the host; wall time per call (both synchronise), interleaved rounds,
medians. Goal (issue 13): ours >= 1.5x torchvision at 1000, 8400, 25200 and 50000 rows x 1, 10, 80
classes.

    python benchmarks/gpu_postprocess.py [--backend auto] [--runs 50] [--quick]

Needs a GPU, NumPy, a CUDA backend, and torch + torchvision with CUDA for the comparison.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List

import numpy as np
from gputiming import median_interleaved

ROWS = (1000, 8400, 25200, 50000)
CLASSES = (1, 10, 80)
SCORE, IOU, MAX_DET, MAX_CAND = 0.25, 0.45, 300, 4096


def _torch_post(torch: Any, tv_ops: Any) -> Callable[[Any], Dict[str, np.ndarray]]:
    def run(p):
        scores, cls = p[:, 4:].max(dim=1)
        idx = torch.nonzero(scores > SCORE).squeeze(1)
        s = scores[idx]
        order = torch.sort(s, descending=True, stable=True).indices[:MAX_CAND]  # ties: row order
        idx, s = idx[order], s[order]
        r = p[idx, :4]
        hw, hh = r[:, 2] * 0.5, r[:, 3] * 0.5
        boxes = torch.stack([r[:, 0] - hw, r[:, 1] - hh, r[:, 0] + hw, r[:, 1] + hh], dim=1)
        keep = tv_ops.batched_nms(boxes, s, cls[idx], IOU)[:MAX_DET]
        return {"rows": idx[keep].cpu().numpy(), "boxes": boxes[keep].cpu().numpy(), "scores": s[keep].cpu().numpy()}

    return run


def run(backend: Any, runs: int = 50, quick: bool = False) -> List[Dict[str, Any]]:
    """One row per (rows, classes): medians (ms) of ours and torchvision's, their ratio, and whether
    both kept the same source rows."""
    from sdk.kernels.postprocess import GpuYoloPostprocessor
    from sdk.kernels.reference import PostprocessSpec, synthetic_yolo_output

    try:
        import torch
        import torchvision.ops as tv_ops

        has_torch = torch.cuda.is_available()
    except ImportError:
        torch, tv_ops, has_torch = None, None, False
    spec = PostprocessSpec(score_threshold=SCORE, iou_threshold=IOU, max_detections=MAX_DET,
                           max_candidates=MAX_CAND, has_objectness=False)
    out = []
    for n in ROWS:
        for classes in ((10,) if quick else CLASSES):
            pred = synthetic_yolo_output(n, classes, False, seed=n + classes)
            with GpuYoloPostprocessor(spec, n, pred.shape[1], backend=backend) as post:
                dev = backend.to_device(pred)
                fns: Dict[str, Callable[[], Any]] = {"edgesdk": lambda: (post.launch(dev), post.fetch())[1]}
                if has_torch:
                    tp = torch.from_numpy(pred).cuda()
                    tpost = _torch_post(torch, tv_ops)
                    fns["torchvision"] = lambda: tpost(tp)
                med = median_interleaved(fns, runs)
                ours = fns["edgesdk"]()
                row = {"rows": n, "classes": classes, "edgesdk_ms": med["edgesdk"], "kept": len(ours)}
                if has_torch:
                    theirs = fns["torchvision"]()
                    row.update(torchvision_ms=med["torchvision"], ratio=med["torchvision"] / med["edgesdk"],
                               same_rows=bool(np.array_equal(ours.rows, theirs["rows"])))
                dev.free()
            out.append(row)
    return out


def print_table(rows: List[Dict[str, Any]]) -> None:
    print(f"{'rows':>6} {'classes':>7} {'kept':>5} {'edgesdk ms':>10} {'torchvision ms':>14} {'ratio':>6} "
          f"{'>=1.5x':>6} {'same rows':>9}")
    for r in rows:
        tv = r.get("torchvision_ms")
        print(f"{r['rows']:6d} {r['classes']:7d} {r['kept']:5d} {r['edgesdk_ms']:10.3f} "
              f"{tv if tv is not None else float('nan'):14.3f} {r.get('ratio', float('nan')):6.2f} "
              f"{('yes' if r['ratio'] >= 1.5 else 'NO') if tv is not None else '-':>6} "
              f"{str(r.get('same_rows', '-')):>9}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="10 classes only")
    args = ap.parse_args()
    from sdk.targets.cuda import get_backend

    with get_backend(args.backend) as backend:
        print(f"post-processing on {backend.name}: score > {SCORE}, IoU {IOU}, <= {MAX_CAND} candidates, "
              f"<= {MAX_DET} detections; median of {args.runs} interleaved runs")
        print_table(run(backend, args.runs, args.quick))


if __name__ == "__main__":
    main()
