"""Algorithms and their networks, built from `toolkit` and `kernels`."""
