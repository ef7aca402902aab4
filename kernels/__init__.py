"""Triton kernels (quantize/dequantize, decode steps) beside their torch references."""
