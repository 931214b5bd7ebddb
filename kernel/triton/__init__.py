"""The Triton kernels: the portable path (every GPU, every Triton, the CPU interpreter). The map: :mod:`kernel`."""
