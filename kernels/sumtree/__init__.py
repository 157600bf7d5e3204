"""Prioritized-replay sum tree on the device: stratified sampling, IS weights, priority updates.

- :func:`per_sample`: ``B`` stratified samples by tree descent, with importance weights;
- :func:`per_update`: new priorities ``|td| + eps`` for a batch of leaves, validated on the device;
- :func:`per_insert`: a range of fresh leaves gets the running maximum priority;
- :func:`rebuild`, :func:`new_sumtree`, :func:`leaves`, :func:`total`: building and reading a tree.

Files (the kernel-folder convention, docs/pages/kernels.md): ``api.py`` (ops, validation, public
functions), ``reference.py`` (the layout, the rules and a plain-loop oracle of them), ``cpu.py``
(the eager paths the ops run without Triton: tuned numpy on a CPU tree, torch ops elsewhere),
``fused.py`` (the Triton kernels, imported only when a Triton path runs), ``library.py`` (the ops as
torch custom ops, ``torch.ops.tritonrl.*``, for ``torch.compile``).
"""

# library registers torch.ops.tritonrl.per_sample / per_update / per_insert (what torch.compile
# traces); the package's public names are api.py's: one list, in api.__all__.
from tritonrl.kernels.sumtree import library  # noqa: F401
from tritonrl.kernels.sumtree.api import *  # noqa: F403
from tritonrl.kernels.sumtree.api import __all__  # noqa: F401
