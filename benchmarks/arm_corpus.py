"""Every corpus ONNX model through ``validate`` on the emulated aarch64 board, as FP32 ``.onnx`` and
``.ort``: verdict, the least output cosine vs the x86-64 host's FP32 reference, wall time.

The board is the CI tier's (tests/remote/armboard.py: Debian arm64 rootfs from scripts/arm_rootfs.sh
under qemu-user, chrooted loopback sshd). Needs root, qemu-user-static and binfmt_misc, and the
built rootfs. Wall times are EMULATED (qemu on this machine's CPU), never a board's speed: they say
how long the tier would take, nothing about ARM hardware. Slow: minutes per model.

Usage: sudo python benchmarks/arm_corpus.py [--models a,b] [--samples 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPEC = "[run]\nruns = 2\nwarmup = 1\nmin_seconds = 0\n\n[budgets]\nmin_cosine = 0.9999\n"


def main() -> None:
    from sdk import corpus
    from sdk.targets.convert import convert
    from sdk.validation import validate
    from tests.remote.armboard import arm_board_unavailable, profile_text, rootfs_path, start_arm_board
    from tests.remote.sshd import keygen, trust

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    reason = arm_board_unavailable()
    if reason:
        sys.exit(f"error: {reason}")
    names = [n for n in (args.models.split(",") if args.models else corpus.names()) if corpus.get(n).format == "onnx"]
    paths = corpus.fetch(names)
    tmp = Path(tempfile.mkdtemp(prefix="edgesdk-armcorpus-"))
    key = keygen(tmp / "id_ed25519")
    (tmp / "state").mkdir()
    board = start_arm_board(rootfs_path(), key.with_suffix(".pub"), tmp / "state")
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    shutil.copy(key, home / ".ssh" / "id_ed25519")
    trust(home, board.sshd)
    (tmp / "boards").mkdir()
    (tmp / "boards" / "arm64-qemu.toml").write_text(profile_text("arm64-qemu", board))
    os.environ["EDGESDK_CORPUS_DIR"] = str(corpus.cache_dir())   # before HOME moves
    os.environ.update(HOME=str(home), EDGESDK_BOARDS_PATH=str(tmp / "boards"))
    os.environ.pop("SSH_AUTH_SOCK", None)
    (tmp / "spec.toml").write_text(SPEC)
    rows = {}
    try:
        for name in names:
            src = Path(paths[name])
            feeds = corpus.sample_inputs(name, args.samples, seed=1)
            npz = tmp / f"{name}.npz"
            np.savez(npz, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
            ort_path = tmp / f"{name}.ort"
            convert(src, ort_path)
            row = {}
            for label, model in (("fp32 .onnx", src), (".ort", ort_path)):
                t0 = time.monotonic()
                try:
                    r = validate(str(model), ["arm64-qemu"], data=str(npz), spec=str(tmp / "spec.toml"),
                                 reference_model=str(src))
                    b = r.boards[0]
                    cos = min((m["cosine"] for m in (b.compare or {}).values()), default=None)
                    row[label] = {"verdict": b.verdict, "min_cosine": cos, "error": b.error,
                                  "machine": (b.facts or {}).get("machine"), "emulated": bool(b.emulation),
                                  "wall_s_emulated": round(time.monotonic() - t0, 1)}
                except Exception as exc:  # noqa: BLE001 - the table says why
                    row[label] = {"verdict": "error", "error": str(exc).splitlines()[0],
                                  "wall_s_emulated": round(time.monotonic() - t0, 1)}
                print(name, label, json.dumps(row[label]), flush=True)
            rows[name] = row
    finally:
        board.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
