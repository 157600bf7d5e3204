"""Infrastructure: precision policy, replay buffers, data upload, loops, checkpoints."""

from tritonrl.toolkit.precision import PrecisionError, explain, training_dtype

__all__ = ["PrecisionError", "explain", "training_dtype"]
