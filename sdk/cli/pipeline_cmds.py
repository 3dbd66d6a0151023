"""``sdk bench MODEL --pipeline detect --data IMAGES``: the stage split (over :mod:`sdk.kernels.pipeline`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional


def run_pipeline_cmd(kind: str, model: str, *, data: Optional[str], target: str, target_options: Dict[str, Any],
                     shapes: Dict[str, Any], frames: int, warmup: int, device: str,
                     json_path: Optional[str], report: Optional[str]) -> None:
    from ..errors import InputError
    from ..kernels.pipeline import PipelineConfig, run_pipeline
    from ._common import console, fmt_ms, write_json

    if not data:
        raise InputError("--pipeline needs --data: a folder of images")
    size = None
    if shapes:
        if len(shapes) != 1:
            raise InputError("--pipeline takes one --input-shape (the image input)")
        dims = list(next(iter(shapes.values())))
        size = (int(dims[2]), int(dims[3])) if dims[1] == 3 else (int(dims[1]), int(dims[2]))
    cfg = PipelineConfig(data=data, target=target, target_options=target_options, input_size=size,
                         frames=frames, warmup=warmup, device=device)
    doc = run_pipeline(kind, model, cfg).to_dict(samples=True)
    if json_path == "-":
        write_json("-", doc)
        return
    from rich.table import Table

    sm = doc["stages_ms"]
    t = Table(title=f"{Path(model).name}: {kind} pipeline, {doc['pipeline']['frames']} frames of "
                    f"{doc['pipeline']['images']} images")
    for col in ("stage", "where", "mean ms", "p50 ms", "p90 ms", "share"):
        t.add_column(col, justify="right" if col.endswith(("ms", "share")) else "left")
    where = doc["pipeline"]["devices"]
    for s in list(doc["pipeline"]["stages"]) + ["end_to_end"]:
        st = sm[s]
        t.add_row(s, where.get(s, ""), fmt_ms(st["mean"]), fmt_ms(st["p50"]), fmt_ms(st["p90"]), f"{st['share']:.0%}")
    c = console()
    c.print(t)
    if doc["pipeline"].get("why_not_cuda"):
        c.print(f"pre/post-processing on the CPU: {doc['pipeline']['why_not_cuda']}", markup=False)
    if json_path:
        write_json(json_path, doc)
        c.print(f"wrote {json_path}")
    if report:
        from ..reports.perf_html import pipeline_html

        Path(report).parent.mkdir(parents=True, exist_ok=True)
        from ._common import write_text_atomic

        write_text_atomic(report, pipeline_html(doc), "--report")
        c.print(f"wrote {report}")
