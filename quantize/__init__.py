"""INT8 quantization: streaming calibration, per-target QDQ emission, accuracy report.

Layout (where things go):

- ``stats.py``       streaming histograms that merge exactly (:class:`CalibrationStats`, the artifact)
- ``methods.py``     calibration methods registry: minmax, percentile, entropy, mse (add yours here)
- ``calibrate.py``   the one FP32 pass (ONNX Runtime, activations exposed as outputs, worker threads,
                     adaptive batches; ``calibrate_shard`` maps a shard of samples to mergeable stats)
- ``schemes/``       one module per target scheme (onnxruntime, tensorrt, tflite), in a registry
- ``qdq.py``         QDQ emission and the exportable per-tensor ranges
- ``trtcache.py``    TensorRT calibration cache write/read
- ``accuracy.py``    INT8 vs FP32 report, budget
- ``fallback.py``    layers ranked in one pass, doubling/bisecting float fallback
- ``speed.py``       FP32 vs INT8 host latency (interleaved medians) for the speed-aware plan
- ``fusion.py``      what ONNX Runtime runs: int8 kernels in its optimized graph
- ``bias_correction.py``
- ``api.py``         :func:`quantize`, the Python API behind ``sdk quantize``

Heavy modules (onnx, onnxruntime) load only when a function needs them.
"""
from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "quantize": "sdk.quantize.api",
    "QuantizeResult": "sdk.quantize.api",
    "QuantizeConfig": "sdk.quantize.api",
    "fusion_report": "sdk.quantize.fusion",
    "load_or_calibrate": "sdk.quantize.api",
    "calibrate": "sdk.quantize.calibrate",
    "CalibrationStats": "sdk.quantize.stats",
    "TensorStats": "sdk.quantize.stats",
    "compute_range": "sdk.quantize.methods",
    "method_names": "sdk.quantize.methods",
    "register_method": "sdk.quantize.methods",
    "get_scheme": "sdk.quantize.schemes",
    "scheme_names": "sdk.quantize.schemes",
    "register_scheme": "sdk.quantize.schemes",
    "write_cache": "sdk.quantize.trtcache",
    "read_cache": "sdk.quantize.trtcache",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
