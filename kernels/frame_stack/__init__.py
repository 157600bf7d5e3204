"""Frames stored once: the stacked-observation gather of pixel replay.

[`frame_stack_sample`][tritonrl.kernels.frame_stack.frame_stack_sample] gathers, masks, converts and scales a
batch of stacked observations from a uint8 frame store in one launch. Files follow the op-folder convention;
see docs/pages/kernels.md ("The frame-stack gather").
"""

# library registers torch.ops.tritonrl.frame_stack_sample (what torch.compile traces); the
# package's public names are api.py's: one list, in api.__all__.
from tritonrl.kernels.frame_stack import library  # noqa: F401
from tritonrl.kernels.frame_stack.api import *  # noqa: F403
from tritonrl.kernels.frame_stack.api import __all__  # noqa: F401
