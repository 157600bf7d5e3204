"""Prioritized-replay sum tree on the device: stratified sampling, IS weights, priority updates.

- :func:`per_sample`: ``B`` stratified samples by tree descent, with importance weights;
- :func:`per_update`: new priorities ``|td| + eps`` for a batch of leaves, validated on the device;
- :func:`per_insert`: a range of fresh leaves gets the running maximum priority;
- :func:`rebuild`, :func:`new_sumtree`, :func:`leaves`, :func:`total`: building and reading a tree.

Files (the kernel-folder convention, docs/pages/kernels.md): ``api.py`` (ops, validation, public
functions), ``reference.py`` (the layout, the torch specification and the tuned CPU path),
``fused.py`` (the Triton kernels, imported only when a Triton path runs).
"""

from tritonrl.kernels.sumtree.api import (
    BAD_INDEX,
    BAD_PRIORITY,
    FANOUT,
    PER_INSERT,
    PER_SAMPLE,
    PER_UPDATE,
    Geometry,
    SumTree,
    geometry,
    leaves,
    leaves_for,
    new_sumtree,
    per_insert,
    per_sample,
    per_update,
    rebuild,
    total,
)

__all__ = [
    "BAD_INDEX",
    "BAD_PRIORITY",
    "FANOUT",
    "PER_INSERT",
    "PER_SAMPLE",
    "PER_UPDATE",
    "Geometry",
    "SumTree",
    "geometry",
    "leaves",
    "leaves_for",
    "new_sumtree",
    "per_insert",
    "per_sample",
    "per_update",
    "rebuild",
    "total",
]
