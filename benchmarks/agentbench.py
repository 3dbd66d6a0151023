"""Shared by the agent overhead benchmarks: run the board agent's ``bench`` as on a board, in
interleaved rounds, against a SIMULATED Jetson tree (sdk.remote.agent.power.simulate)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

from sdk.remote.agent import build_zipapp
from sdk.remote.agent.power.simulate import SimulatedBoard

MODEL = Path(__file__).resolve().parent.parent / "examples" / "digits" / "digits_cnn.onnx"


def base_request(seconds: float, idle_seconds: float) -> dict:
    """The example model (~10 us per run: the worst case for any overhead), one thread."""
    return {"model_path": str(MODEL), "input_shapes": {"image": [1, 1, 8, 8]}, "runs": 200, "warmup": 50,
            "min_seconds": seconds, "target_options": {"threads": 1}, "idle_seconds": idle_seconds}


def bench(pyz: Path, request: dict) -> dict:
    out = subprocess.run([sys.executable, str(pyz), "bench", "--request", "-"], input=json.dumps(request),
                         stdout=subprocess.PIPE, universal_newlines=True, check=True)
    return json.loads(out.stdout)


def run_interleaved(make_sides: Callable[[Path], Dict[str, dict]], rounds: int,
                    layout: str = "jetson-jp5") -> Dict[str, List[dict]]:
    """``make_sides(board_root)`` gives one agent request per side; each round runs every side once,
    in order, against the simulated tree at ``board_root``. Returns each side's raw results."""
    with tempfile.TemporaryDirectory() as tmp:
        pyz = build_zipapp(Path(tmp) / "agent")
        root = Path(tmp) / "board"
        sides = make_sides(root)
        results: Dict[str, List[dict]] = {k: [] for k in sides}
        with SimulatedBoard(root, layout):
            for _ in range(rounds):
                for side, req in sides.items():
                    results[side].append(bench(pyz, req))
    return results
