"""The Triton backend: convolution kernels for NVIDIA GPUs (and Triton's interpreter).

Importing this package imports nothing heavy; torch and triton load with the modules
that need them (backend.py and the kernel modules), so the NumPy path never does.
"""
