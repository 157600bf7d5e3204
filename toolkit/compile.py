"""``torch.compile`` of the learner step and the acting forward: one switch, one helper.

Every agent config has a resumable ``compile`` field: ``"none"`` (eager), ``"default"``
(``torch.compile(fn, fullgraph=True, dynamic=False)``) or ``"reduce-overhead"`` (the same plus CUDA
graphs on CUDA; on a CPU exactly ``"default"``). :class:`Compiled` wraps each compiled region (the
loss with its backward, the optimizer step, the acting forward); draws from the agents'
generators stay outside, passed in as tensors. Under CUDA graphs a replay overwrites the previous
outputs: :class:`Compiled` marks each step's start and the agents copy what outlives a step with
:func:`escape`. What each agent compiles, the rules and the measured effect: docs/pages/speed.md
("The compile switch").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from tritonrl.toolkit import pytree

__all__ = ["COMPILE_MODES", "CompileMode", "Compiled", "escape"]

CompileMode = Literal["none", "default", "reduce-overhead"]
COMPILE_MODES: tuple[str, ...] = ("none", "default", "reduce-overhead")
"""The values of the agents' ``compile`` config field."""


# Inductor options of every compiled region. size_asserts: the generated wrapper re-checks each
# input's sizes and strides on every call (65 checks per DQN update, ~25 us on a CPU), which
# Dynamo's guards have already checked before the call.
_OPTIONS = {"size_asserts": False}


class Compiled:
    """``fn`` run eagerly (``mode="none"``) or through ``torch.compile`` (static shapes).

    Args:
        fn: the function (often a bound method; Dynamo guards on the attributes it reads).
        mode: one of :data:`COMPILE_MODES`.
        device: where the function's tensors live (CUDA graphs only on CUDA).
        fullgraph: refuse graph breaks (an unsupported call raises at the first call instead of
            silently splitting the region). Every region of the agents traces whole: the kernel
            ops are torch custom ops where a Triton kernel runs, their torch references (plain
            torch) elsewhere (:func:`tritonrl.kernels.library.traces_reference`).

    Raises:
        ValueError: an unknown ``mode``.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        mode: str,
        device: torch.device | str,
        *,
        fullgraph: bool = True,
    ) -> None:
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile={mode!r} is not one of {COMPILE_MODES}")
        self.fn = fn
        self.mode = mode
        self.fullgraph = fullgraph
        self.cudagraphs = mode == "reduce-overhead" and torch.device(device).type == "cuda"
        """Whether the compiled function is replayed as a CUDA graph (its outputs then live in
        graph-owned memory, overwritten by the next replay: see :func:`escape`)."""
        if mode == "none":
            self._call = fn
        else:
            # torch.compile takes a mode or options, not both: the mode's options, plus ours
            options = {**torch._inductor.list_mode_options(mode), **_OPTIONS}
            self._call = torch.compile(
                _own_code(fn), fullgraph=self.fullgraph, dynamic=False, options=options
            )

    @property
    def compiled(self) -> bool:
        """Whether calls go through ``torch.compile``."""
        return self.mode != "none"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` (compiled on the first call for each new set of shapes and settings)."""
        return self._call(*args, **kwargs)

    def step_begin(self) -> None:
        """Mark the start of a new step for CUDA-graph replays (a no-op without CUDA graphs).

        Call it once per update (or act) before the first compiled call: outputs of the previous
        step's replays may be overwritten from then on.
        """
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function that calls ``fn``, with a code object of its own.

    Dynamo keeps compiled code per code object, at most ``torch._dynamo.config.recompile_limit``
    (8) entries each; a method compiled for every agent would share one code object among all
    agents of a process, and the ninth agent of another shape would fail (``fullgraph=True``
    turns the recompile limit into an error). With a code object per :class:`Compiled`, each agent
    has its own limit (Inductor's graph cache still serves agents of equal shapes).
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    call.__code__ = call.__code__.replace()  # an equal code object, but its own
    return call


def escape(tree: Any, compiled: Compiled) -> Any:
    """``tree`` (a nest of tensors), made safe to keep past the current step.

    With CUDA graphs (:attr:`Compiled.cudagraphs`) each tensor is cloned out of the graph's memory
    (a device copy, no host sync); otherwise ``tree`` is returned as it is.
    """
    if not compiled.cudagraphs:
        return tree
    return pytree.tree_map(torch.clone, tree)
