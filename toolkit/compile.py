"""``torch.compile`` of the learner step and the acting forward: one switch, one helper.

The agents' ``compile`` field is ``"none"``, ``"default"`` (fullgraph, static shapes) or ``"reduce-overhead"``
(plus CUDA graphs on CUDA). `Compiled` wraps each region; `escape` copies what must outlive a
CUDA-graph step. Imports torch and toolkit root modules only. Rules and what each agent compiles:
docs/pages/speed.md ("The compile switch").
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
# input's sizes and strides on every call, which Dynamo's guards have already checked.
_OPTIONS = {"size_asserts": False}


class Compiled:
    """``fn`` run eagerly (``mode="none"``) or through ``torch.compile`` (static shapes).

    Args:
        fn: the function (often a bound method; Dynamo guards on the attributes it reads).
        device: where the function's tensors live (CUDA graphs only on CUDA).
        fullgraph: refuse graph breaks, so an unsupported call raises at the first call.

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
        graph-owned memory, overwritten by the next replay: see `escape`)."""
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
        """Mark a step's start for CUDA-graph replays: the previous step's outputs may be overwritten."""
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function that calls ``fn`` with a code object of its own: a recompile limit per agent."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    call.__code__ = call.__code__.replace()  # an equal code object, but its own
    return call


def escape(tree: Any, compiled: Compiled) -> Any:
    """``tree`` (a nest of tensors), cloned out of CUDA-graph memory where needed, to keep past the step."""
    if not compiled.cudagraphs:
        return tree
    return pytree.tree_map(torch.clone, tree)
