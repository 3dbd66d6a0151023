#!/usr/bin/env python3
"""On a machine with an NVIDIA GPU: check the NVML power source against NVML's own energy counter
under a known GPU load (the edgesdk CUDA post-processing kernels in a loop).

Needs NumPy, nvidia-ml-py (``pip install nvidia-ml-py``) and one CUDA backend (cuda-python or
pycuda). Works from a plain checkout (see scripts/gpu_check.py). Prints one JSON document:

- ``idle`` and ``load`` windows (s on ``time.monotonic``), each with
  - ``counter_j``: the energy counter's difference over the window (what the ``nvml`` source reports
    when the GPU has the counter),
  - ``trapezoid_j``: the trapezoid of ``nvmlDeviceGetPowerUsage`` polled at ``--rate-hz`` over the same
    samples' span, scaled to the window (the fallback for GPUs without a counter),
  - ``ratio``: trapezoid / counter, and the number of samples and distinct power readings;
- ``kernel_launches`` and their rate during the load window.

    python scripts/nvml_energy_check.py [--seconds 4] [--idle-seconds 2] [--rate-hz 100] [--rows 100000]

Exit status 0 when the counter-integrated energy is positive and the load window's mean power is
above the idle window's (the load was seen), 1 otherwise, 2 when the machine has no usable GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import import_path  # noqa: E402  (the checkout's package layout)


def _window(samples, kind_energy, begin, end):
    inside = [s for s in samples if begin < s[0] < end]
    if len(inside) < 2:
        return None
    span = inside[-1][0] - inside[0][0]
    if kind_energy:
        joules = sum(v for v in inside[-1][1].values()) - sum(v for v in inside[0][1].values())
    else:
        joules = 0.0
        for (t0, a), (t1, b) in zip(inside, inside[1:]):
            joules += 0.5 * (sum(a.values()) + sum(b.values())) * (t1 - t0)
    mean_w = joules / span if span > 0 else None
    distinct = len({tuple(sorted(s[1].items())) for s in inside})
    return {"samples": len(inside), "span_s": span, "mean_w": mean_w,
            "energy_j": mean_w * (end - begin) if mean_w is not None else None, "distinct_readings": distinct}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--idle-seconds", type=float, default=2.0)
    ap.add_argument("--rate-hz", type=float, default=100.0)
    ap.add_argument("--rows", type=int, default=100000, help="rows of the synthetic YOLO output per launch")
    args = ap.parse_args()
    import_path()
    from sdk.remote.agent.power import PowerSampler
    from sdk.remote.agent.power.nvml import NvmlSource

    counter, polled = NvmlSource(), NvmlSource()
    if not counter.probe("/") or not polled.probe("/"):
        print(json.dumps({"error": counter.why_not or polled.why_not}))
        return 2
    has_counter = counter.kind == "energy"
    polled.kind = "power"  # the same GPU, read through nvmlDeviceGetPowerUsage
    from sdk.kernels.postprocess import GpuYoloPostprocessor
    from sdk.kernels.reference import PostprocessSpec, synthetic_yolo_output
    from sdk.targets.cuda import get_backend

    backend = get_backend()
    pred = synthetic_yolo_output(args.rows, 80, True, seed=0)
    post = GpuYoloPostprocessor(PostprocessSpec(max_candidates=4096), args.rows, pred.shape[1], backend=backend)
    dev = backend.alloc(pred.nbytes)
    backend.htod(dev, pred, post.stream)
    post.stream.synchronize()
    samplers = [PowerSampler(polled, args.rate_hz)] + ([PowerSampler(counter, args.rate_hz)] if has_counter else [])
    for s in samplers:
        s.start()
    time.sleep(0.3)
    idle = (time.monotonic(), 0.0)
    time.sleep(args.idle_seconds)
    idle = (idle[0], time.monotonic())
    launches = 0
    load_begin = time.monotonic()
    deadline = load_begin + args.seconds
    while time.monotonic() < deadline:
        for _ in range(20):
            post.launch(dev)
        post.stream.synchronize()
        launches += 20
    load = (load_begin, time.monotonic())
    time.sleep(0.3)
    for s in samplers:
        s.stop()
    out = {"gpu": counter.devices, "energy_counter": has_counter, "rate_hz": args.rate_hz,
           "kernel_launches": launches, "launches_per_s": launches / (load[1] - load[0])}
    ok = True
    for name, (b, e) in (("idle", idle), ("load", load)):
        block = {"window_s": e - b, "trapezoid": _window(samplers[0].samples, False, b, e)}
        if has_counter:
            block["counter"] = _window(samplers[1].samples, True, b, e)
            c, t = block["counter"], block["trapezoid"]
            if c and t and c["energy_j"]:
                block["ratio_trapezoid_over_counter"] = t["energy_j"] / c["energy_j"]
        out[name] = block
    key = "counter" if has_counter else "trapezoid"
    idle_w = (out["idle"].get(key) or {}).get("mean_w")
    load_w = (out["load"].get(key) or {}).get("mean_w")
    ok = bool(idle_w and load_w and load_w > idle_w)
    out["verdict"] = "ok: the load was seen above idle" if ok else "FAILED: no power rise under load"
    post.close()
    backend.close()
    print(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
