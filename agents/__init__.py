"""Algorithms and their networks, built from :mod:`toolkit` and :mod:`kernels`."""
