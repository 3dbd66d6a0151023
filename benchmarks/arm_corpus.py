"""Every corpus ONNX model through ``validate`` on the emulated aarch64 board, as FP32 ``.onnx`` and
``.ort`` (models with fixed input values or a carried state get validate's seeded inputs): verdict, the least output cosine vs the x86-64 host's FP32 reference, wall time.

The board is the CI tier's (tests/remote/armboard.py: Debian arm64 rootfs from scripts/arm_rootfs.sh
under qemu-user, chrooted loopback sshd). Needs root, qemu-user-static and binfmt_misc, and the
built rootfs. Wall times are EMULATED (qemu on this machine's CPU), never a board's speed: they say
how long the tier would take, nothing about ARM hardware. Slow: minutes per model.

With ``--int8``: each model quantized on the host with no flags beyond its input shapes and values
(``sdk.quantize`` defaults, 40 corpus calibration samples), then run by the board's arm64 onnxruntime
on ``--samples`` unseen samples: the corpus task metric of the board's outputs and of the host's INT8
outputs vs the host's FP32, and the least cosine of board vs host INT8 (ARM's int8 kernels vs x86's).
A model that is already INT8 (smart-turn-v3) runs as it is.

Usage: sudo python benchmarks/arm_corpus.py [--models a,b] [--samples 2] [--int8] [--json out.json]
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

SPEC = "[run]\nruns = 1\nwarmup = 0\nmin_seconds = 0\n\n[budgets]\nmin_cosine = 0.9999\n"


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
    ap.add_argument("--int8", action="store_true", help="INT8 from the host's quantizer, run on the board")
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
            if args.int8:
                rows[name] = _int8_row(name, Path(paths[name]), tmp, args.samples)
                print(name, "int8", json.dumps(rows[name]), flush=True)
                continue
            src = Path(paths[name])
            cm = corpus.get(name)
            data = None
            extra: dict = {}
            if cm.input_values or cm.carry:   # a stream with fixed values: validate's seeded inputs, as the tier
                extra = dict(input_shapes=dict(cm.input_shapes) or None, input_values=dict(cm.input_values),
                             carry=dict(cm.carry) or None, limit=args.samples)
            else:                             # corpus samples (their arrays fix the shapes)
                feeds = corpus.sample_inputs(name, args.samples, seed=1)
                data = tmp / f"{name}.npz"
                np.savez(data, **{k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]})
            ort_path = tmp / f"{name}.ort"
            convert(src, ort_path)
            row = {}
            for label, model in (("fp32 .onnx", src), (".ort", ort_path)):
                t0 = time.monotonic()
                try:
                    r = validate(str(model), ["arm64-qemu"], data=str(data) if data else None,
                                 spec=str(tmp / "spec.toml"), reference_model=str(src), **extra)
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


def _int8_row(name: str, src: Path, tmp: Path, samples: int) -> dict:
    """Quantize on the host (defaults), run on the board sample by sample, score against host FP32."""
    from sdk import corpus
    from sdk.corpus.tasks import run_reference
    from sdk.errors import EdgeSDKError
    from sdk.quantize import quantize
    from sdk.remote import Board
    from sdk.validation.runners import HostRunner

    cm = corpus.get(name)
    row: dict = {}
    q = tmp / f"{name}.int8.onnx"
    t0 = time.monotonic()
    try:
        res = quantize(src, corpus.sample_inputs(name, 40, seed=0), output=q, speed_check=False,
                       input_values=dict(cm.input_values) or None, input_shapes=dict(cm.input_shapes) or None)
        rep = res.report
        row.update(quantize_s=round(time.monotonic() - t0, 1), budget_holds=(rep.get("budget") or {}).get("holds"),
                   int8_layers=rep["layers"]["quantized"], layers=rep["layers"]["quantizable"],
                   failures=[f[:120] for f in res.failures])
    except EdgeSDKError as exc:
        if "already quantized" not in str(exc):
            return {"error": str(exc).splitlines()[0]}
        q, row["already_int8"] = src, True
    feeds = corpus.sample_inputs(name, samples, seed=2)
    fp32 = run_reference(str(src), feeds)
    board_outs, host_outs = [], []
    t1 = time.monotonic()
    with Board("arm64-qemu") as board, HostRunner() as host:
        for i, f in enumerate(feeds):
            npz = tmp / f"{name}-{i}.npz"
            np.savez(npz, **f)
            b, h = board.infer(str(q), str(npz)), host.infer(str(q), str(npz))
            board_outs.append([np.asarray(b[k], np.float32) for k in b])
            host_outs.append([np.asarray(h[k], np.float32) for k in b])
    cos = [float(np.dot(x.ravel(), y.ravel()) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-30))
           for bs, hs in zip(board_outs, host_outs) for x, y in zip(bs, hs)]
    row.update(board_s_emulated=round(time.monotonic() - t1, 1),
               task_board_vs_host_fp32=round(corpus.metric(name, fp32, board_outs), 4),
               task_host_int8_vs_host_fp32=round(corpus.metric(name, fp32, host_outs), 4),
               min_cosine_board_vs_host_int8=round(min(cos), 5))
    return row


if __name__ == "__main__":
    main()
