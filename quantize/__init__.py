"""INT8 quantization: streaming calibration, per-target QDQ emission, accuracy report."""
