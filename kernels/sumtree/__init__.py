"""Prioritized-replay sum tree on the device: stratified sampling, IS weights, priority updates.

Files follow the kernel-folder convention (docs/pages/kernels.md): ``api.py`` (ops and public
functions), ``reference.py`` (layout, rules, oracle), ``cpu.py`` (eager paths), ``fused.py``
(Triton kernels), ``library.py`` (custom ops for ``torch.compile``).
"""

# library registers torch.ops.tritonrl.per_sample / per_update / per_insert (what torch.compile
# traces); the package's public names are api.py's: one list, in api.__all__.
from tritonrl.kernels.sumtree import library  # noqa: F401
from tritonrl.kernels.sumtree.api import *  # noqa: F403
from tritonrl.kernels.sumtree.api import __all__  # noqa: F401
