"""CUDA pre/post-processing kernels with CPU references."""
