"""Pipelines measured as one unit: stages (models) and glue steps (crop, decode, NMS, resize) run
frame by frame, on the host or inside a board's agent (the whole pipeline runs there).

::

    from sdk.kernels.pipelines import Pipeline, RunConfig
    pipe = Pipeline.load("ocr.toml")                  # or Pipeline(PipelineSpec(...))
    result = pipe.run("pages/", RunConfig(frames=20))  # here; board="jetson-nx": on the board
    print(result.p50_ms, result.bounding_stage, result.throughput["overlapped_fps"])
    print(result.outputs_by_input())                  # texts / labels / boxes per input

``sdk pipeline run SPEC --data pages/ [--board B]`` is the same call. The result is one type,
:class:`PipelineResult` (schema ``pipeline-result`` v1), here and on boards.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Union

from .glue import GLUE, Frame, GlueStep, build_step, register_glue
from .result import PipelineResult
from .runner import OpenPipeline, RunConfig, load_images, run_pipeline_spec
from .spec import GlueSpec, PipelineSpec, StageSpec

__all__ = ["Pipeline", "PipelineSpec", "StageSpec", "GlueSpec", "RunConfig", "PipelineResult", "OpenPipeline",
           "GLUE", "GlueStep", "Frame", "register_glue", "build_step", "load_images"]


class Pipeline:
    """A pipeline spec with the calls that run it."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "Pipeline":
        return cls(PipelineSpec.load(path))

    @property
    def name(self) -> str:
        return self.spec.name

    def open(self, workdir: Optional[str] = None) -> OpenPipeline:
        """The sessions and glue steps, open (use as a context manager)."""
        return OpenPipeline(self.spec, workdir)

    def run(self, data: Any, config: Optional[RunConfig] = None, *, board: Any = None, **board_options: Any
            ) -> PipelineResult:
        """Measure the pipeline on ``data`` (a folder of images, a file or a list of files).
        Without ``board``: here. With ``board`` (a name, profile or open :class:`sdk.remote.Board`):
        the models and images are pushed and the whole pipeline runs in the board's agent, with
        power sampled where the board has sensors (``energy``)."""
        cfg = config or RunConfig()
        if board is not None:
            from ...remote import Board

            if isinstance(board, Board):
                return board.pipeline(self.spec, data, cfg, **board_options)
            with Board(board, **board_options) as b:
                return b.pipeline(self.spec, data, cfg)
        from ...hostinfo import host_info

        result = run_pipeline_spec(self.spec, load_images(data), cfg)
        result.host = host_info()
        result.device = {"where": "host"}
        result.energy = {"measured": False, "reason": "energy is measured on boards: run with --board "
                                                      "(local: this machine, through the agent's power sensors)"}
        return result
