"""Calibration on Ray against threads at equal parallelism, and a model of time vs workers.

A real corpus detector (nudenet 320n, YOLOv8n, dynamic input) calibrated at ``--size`` over N
samples (seeded augmentations of the corpus photos, ``corpus.write_image_folder``), with
``--executor threads`` and ``ray`` at 1 and 2 workers. Equal parallelism: every configuration has the same cores in all
(threads: ``cores // workers`` intra-op threads per session; Ray: ``cpus_per_worker`` the same).
Ray is started once (its start-up is reported, not counted); a run's Ray time includes creating
the actors and loading their sessions. Rounds interleave the configurations; medians are printed,
with the ratio Ray / threads (goal: <= 1.3) and whether the statistics are identical.

The model of time vs workers, from the per-shard times of the Ray runs::

    T(W) = start + ceil(S / W) * t_shard + S * t_merge

(``start``: actor start and session load; ``t_shard``: median shard time at 1 worker;
``t_merge``: driver time per shard), checked against the 2-worker run and extrapolated.

    python benchmarks/ray_calibration.py [--samples 256 1024] [--size 640] [--rounds 1]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple



def corpus_files() -> Path:
    """nudenet 320n from the corpus (fetched once from its pinned wheel, then cached)."""
    from sdk import corpus

    return corpus.fetch(["nudenet-320n"])["nudenet-320n"]


def data_folder(root: Path, n: int, size: int) -> Path:
    """``n`` seeded augmentations (crop, flip, scale) of the corpus photos."""
    from sdk import corpus

    d = root / f"n{n}"
    d.mkdir()
    corpus.write_image_folder(d, n, seed=0, size=size)
    return d


def run(model: Any, folder: Path, size: int, executor: str, workers: int, cores: int) -> Tuple[float, Any, Dict]:
    from sdk.preprocess import PreprocessSpec
    from sdk.quantize.calibrate import calibrate
    from sdk.quantize.executors import get_executor
    from sdk.sources import open_source

    src = open_source(folder, model.inputs, PreprocessSpec(size=(size, size), layout="NCHW", dtype="float32"))
    opts = {"cpus_per_worker": max(1, cores // workers)} if executor == "ray" else {}
    ex = get_executor(executor, **opts)
    t = time.perf_counter()
    stats = calibrate(model, src, workers=workers, total=len(src), executor=ex)
    return time.perf_counter() - t, stats, dict(getattr(ex, "last_run", {}))


def same(a: Any, b: Any) -> bool:
    import numpy as np

    return a.samples == b.samples and all(
        np.array_equal(x.hist, b.tensors[n].hist) and x.min == b.tensors[n].min and x.max == b.tensors[n].max
        and (x.channel_sum is None or np.array_equal(x.channel_sum, b.tensors[n].channel_sum))
        for n, x in a.tensors.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--extrapolate", type=int, default=50000, help="samples for the model's table")
    args = ap.parse_args()
    import ray

    from sdk.model import Model

    model_path = corpus_files()
    model = Model.load(model_path)
    cores = args.cores = max(args.workers)
    t = time.perf_counter()
    ray.init(address="local", num_cpus=cores, include_dashboard=False, object_store_memory=200 * 1024 * 1024,
             logging_level="ERROR")
    startup = time.perf_counter() - t
    print(f"model {model_path.name} (corpus nudenet-320n) at {args.size}x{args.size}, augmented corpus photos; "
          f"{os.cpu_count()} cores here; Ray start-up {startup:.1f} s (not counted below)")
    try:
        with tempfile.TemporaryDirectory(prefix="edgesdk-raybench-") as tmp:
            for n in args.samples:
                bench(model, data_folder(Path(tmp), n, args.size), n, args, cores)
    finally:
        ray.shutdown()


def bench(model: Any, folder: Path, n: int, args: Any, cores: int) -> None:
    times: Dict[Tuple[str, int], List[float]] = {}
    notes: Dict[int, List[Dict]] = {}
    ref = None
    identical = True
    for _ in range(args.rounds):
        for w in args.workers:
            for ex in ("threads", "ray"):
                secs, stats, note = run(model, folder, args.size, ex, w, cores)
                times.setdefault((ex, w), []).append(secs)
                if ex == "ray":
                    notes.setdefault(w, []).append(note)
                ref = ref or stats
                identical = identical and same(ref, stats)
    print(f"\nN = {n} samples ({args.rounds} round(s), medians)")
    print(f"{'workers':>7} {'threads s':>10} {'ray s':>8} {'ray/threads':>11} {'actors up s':>11} "
          f"{'ray-up/threads':>14} {'shards':>6} {'shard s':>8}")
    for w in args.workers:
        th, ry = statistics.median(times[("threads", w)]), statistics.median(times[("ray", w)])
        up = statistics.median(nt["actors_ready_s"] for nt in notes[w])
        shard_s = statistics.median(s for nt in notes[w] for s in nt["shard_seconds"])
        print(f"{w:>7} {th:>10.1f} {ry:>8.1f} {ry / th:>11.2f} {up:>11.1f} {(ry - up) / th:>14.2f} "
              f"{notes[w][0]['shards']:>6} {shard_s:>8.2f}")
    print("ray s: the whole calibrate() call with Ray already running; actors up: creating the actors "
          "(worker processes, imports, session loads); ray-up/threads: the overhead start-up aside (goal <= 1.3)")
    print(f"statistics identical across all runs: {'yes' if identical else 'NO'}")
    model_of_time(notes, n, args)


def model_of_time(notes: Dict[int, List[Dict]], n: int, args: Any) -> None:
    """T(W) = up + max(ceil(S/W) x t_shard, S x t_driver) for actors of one CPU each (the runs with
    the most workers here): the driver's get + merge of a shard overlaps the workers' shards and
    bounds the rate once the workers outrun it."""
    w_fit = max(notes)
    fit = notes[w_fit][0]
    shards, per = fit["shards"], fit["shard_samples"][0]
    t_shard = statistics.median(fit["shard_seconds"])
    up = statistics.median(nt["actors_ready_s"] for nt in notes[w_fit])
    t_driver = statistics.median(nt["driver_s"] / nt["shards"] for ns in notes.values() for nt in ns)

    def predict(s: int, w: int) -> float:
        return up + max(math.ceil(s / w) * t_shard, s * t_driver)

    print(f"model (actors of {args.cores // w_fit} CPU): T(W) = {up:.2f} s (actors up) + max(ceil(S/W) x "
          f"{t_shard:.2f} s, S x {t_driver:.3f} s), S = {shards} shards of {per} samples "
          f"(fitted on the {w_fit}-worker run's shards)")
    print(f"  W = {w_fit}: predicted {predict(shards, w_fit):.1f} s, measured {fit['run_s']:.1f} s")
    s_big = math.ceil(args.extrapolate / per)
    row = ", ".join(f"W={w}: {predict(s_big, w):.0f} s" for w in (1, 4, 16, 64, 256))
    ceiling = t_shard / max(t_driver, 1e-9)
    print(f"  {args.extrapolate} samples ({s_big} shards): {row}; the driver's merging caps the gain near "
          f"W = {ceiling:.0f} (t_shard / t_driver) unless shards grow")


if __name__ == "__main__":
    main()
