"""Frames stored once: the stacked-observation gather of pixel replay.

- :func:`frame_stack_sample`: the stacked observations of a batch of rows of a uint8 frame store,
  masked at episode starts, converted to the training dtype and scaled, in one launch.

Files (the kernel-folder convention, docs/pages/kernels.md): ``api.py`` (the op, validation),
``reference.py`` (the layout, the torch specification and CPU path), ``fused.py`` (the Triton
kernel, imported only when a Triton path runs), ``library.py`` (the op as a torch custom op,
``torch.ops.tritonrl.frame_stack_sample``, for ``torch.compile``).
"""

# library registers torch.ops.tritonrl.frame_stack_sample (what torch.compile traces); the
# package's public names are api.py's: one list, in api.__all__.
from tritonrl.kernels.frame_stack import library  # noqa: F401
from tritonrl.kernels.frame_stack.api import *  # noqa: F403
from tritonrl.kernels.frame_stack.api import __all__  # noqa: F401
