"""edgesdk: take a trained model to edge devices and prove how it runs there.

The Python API, loaded lazily so ``import sdk`` stays fast and needs no runtime::

    import sdk
    model = sdk.Model.load("model.onnx")
    print(model.inspect())
    with sdk.get_target("onnxruntime", threads=2).open(model) as session:
        outputs = session.run({"x": x})
    result = sdk.benchmark(model, "onnxruntime", runs=200, min_seconds=2)
    print(result.stats.p99_ms)
    with sdk.Board("local") as board:                   # or a Jetson profile: same API over SSH
        print(board.benchmark(model).stats.p50_ms)
"""
from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

_LAZY = {
    "Model": "sdk.model",
    "ModelInfo": "sdk.model",
    "TensorSpec": "sdk.tensors",
    "LatencyStats": "sdk.result",
    "measure_latency": "sdk.bench",
    "EarlyStop": "sdk.bench",
    "random_feed": "sdk.data",
    "load_feeds": "sdk.data",
    "PreprocessSpec": "sdk.preprocess",
    "Target": "sdk.targets",
    "Session": "sdk.targets",
    "Artifact": "sdk.targets",
    "get_target": "sdk.targets",
    "register_target": "sdk.targets",
    "target_names": "sdk.targets",
    "benchmark": "sdk.targets.measure",
    "BenchResult": "sdk.result",
    "compare_results": "sdk.compare",
    "Board": "sdk.remote",
    "run_fleet": "sdk.remote",
    "validate": "sdk.validation",
    "load_spec": "sdk.spec",
    "compare_outputs": "sdk.metrics",
    "check": "sdk.targets.capability",
    "errors": "sdk.errors",
    "EdgeSDKError": "sdk.errors",
    "Pipeline": "sdk.kernels.pipelines",
    "PipelineResult": "sdk.kernels.pipelines",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, also=["__version__"])
