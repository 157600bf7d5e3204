"""A training run's state in a checkpoint: its sections, the agent's entry, RNG states, and the checked,
dtype-casting load of tensors into a module.

The file format is [`tritonrl.toolkit.checkpoint`][tritonrl.toolkit.checkpoint]. A core module. Guide:
docs/pages/checkpoints.md.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np
import torch
from tritonrl.toolkit.checkpoint import CheckpointError, brief

__all__ = [
    "agent_state",
    "capture_rng_state",
    "check_module_tensors",
    "check_rng_state",
    "generator_state_fits",
    "load_into_module",
    "nonfinite_entry",
    "restore_rng_state",
    "section",
    "SECTIONS",
    "TRAIN_FORMAT",
    "training_sections",
]


# ----------------------------------------------------------------------------- sections

TRAIN_FORMAT = "tritonrl-train"
"""``format`` entry of a training-run checkpoint (`tritonrl.toolkit.training.loop`): sections
``agent``, ``env``,
``schedule``, ``loop``, ``rng`` and ``meta``."""

SECTIONS = {
    "agent": "the agent section",
    "env": "the environment state section",
    "schedule": "the update schedule section",
    "loop": "the loop counters section",
    "rng": "the random generator states section",
    "meta": "the run identity section",
}
"""The sections of a training-run checkpoint, in words for messages."""
_OPTIONAL_SECTIONS = {"format", "collector", "ranks", "overlap"}  # a collector's state; the other ranks'
# parts; an overlapped run's actor side


def section(state: Any, key: str, where: str, words: str | None = None) -> Any:
    """``state[key]``, or a `CheckpointError` naming the section in words."""
    if not isinstance(state, Mapping) or key not in state:
        what = words or SECTIONS.get(key, "the entry")
        raise CheckpointError(f"{where}: {what} ({key!r}) is missing")
    return state[key]


def training_sections(state: Any, where: str) -> dict:
    """Check the top level of a training-run checkpoint and return it.

    Raises:
        CheckpointError: another format, a section missing, mistyped or unknown, named in words.
    """
    if not isinstance(state, Mapping) or state.get("format") != TRAIN_FORMAT:
        what = (
            "an agent-only save"
            if isinstance(state, Mapping) and isinstance(state.get("agent"), str)
            else "not a training-run checkpoint"
        )
        raise CheckpointError(
            f"{where}: {what} (no format {TRAIN_FORMAT!r}); a run folder's checkpoint is "
            "written by `python -m tritonrl train`"
        )
    for key in SECTIONS:
        value = section(state, key, where)
        if not isinstance(value, Mapping):
            raise CheckpointError(
                f"{where}: {SECTIONS[key]} ({key!r}) is a {type(value).__name__}, not a dict"
            )
    unknown = sorted(str(k) for k in set(state) - set(SECTIONS) - _OPTIONAL_SECTIONS)
    if unknown:
        raise CheckpointError(
            f"{where}: unknown section {brief(unknown[0], 40)} in a training-run checkpoint"
        )
    return dict(state)


def agent_state(state: Any, kind: str, where: str) -> dict:
    """The agent state of ``kind``: a whole agent save, or a training checkpoint's ``agent`` section.

    Raises:
        CheckpointError: another agent kind, or no usable agent section.
    """
    if isinstance(state, Mapping) and state.get("format") == TRAIN_FORMAT:
        state = section(state, "agent", where)
        if not isinstance(state, Mapping):
            raise CheckpointError(
                f"{where}: a training-run checkpoint whose agent section is a "
                f"{type(state).__name__}, not a dict"
            )
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{where}: holds a {type(state).__name__}, not an agent state")
    got = state.get("agent")
    if got != kind:
        if isinstance(got, str):
            what = f"a {brief(got, 40)} agent"
        elif got is None:
            what = "no agent kind (its 'agent' entry is missing)"
        elif isinstance(got, Mapping):
            what = "an 'agent' section but no training-run 'format' entry (a damaged training checkpoint?)"
        else:
            what = f"an 'agent' entry of type {type(got).__name__}"
        raise CheckpointError(f"{where}: holds {what}, not a {kind!r} agent")
    return dict(state)


def generator_state_fits(state: Any, device: torch.device | str) -> bool:
    """Whether a saved generator state restores on ``device`` (``False`` across device types: reseed).

    Raises:
        ValueError: not a 1-D uint8 generator state.
    """
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.dim() != 1:
        got = (
            f"{state.dtype} {tuple(state.shape)}" if isinstance(state, torch.Tensor) else type(state).__name__
        )
        raise ValueError(f"generator state is {got}, not a 1-D uint8 tensor")
    try:
        torch.Generator(device=device).set_state(state.cpu())
        return True
    except RuntimeError:
        if state.numel() in (_CUDA_GENERATOR_BYTES, _CPU_GENERATOR_BYTES):
            return False
        raise ValueError(f"generator state of {state.numel()} bytes fits no device's generator") from None


_CPU_GENERATOR_BYTES = torch.Generator().get_state().numel()
_CUDA_GENERATOR_BYTES = 16  # seed and offset of the Philox generator


# ----------------------------------------------------------------------------- modules


def check_module_tensors(
    module: torch.nn.Module, tensors: Mapping[str, Any], *, where: str = "checkpoint"
) -> None:
    """Raise `CheckpointError` unless ``tensors`` fits ``module.state_dict()`` exactly.

    The same names, shapes and floating kinds, and no NaN or infinity. Touches nothing.
    """
    if not isinstance(tensors, Mapping):
        raise CheckpointError(f"{where}: is a {type(tensors).__name__}, not a dict of tensors")
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        raise CheckpointError(
            f"{where}: does not match {type(module).__name__}"
            + (f"; missing {brief(missing[:4])}{'...' if len(missing) > 4 else ''}" if missing else "")
            + (f"; unexpected {brief(extra[:4])}{'...' if len(extra) > 4 else ''}" if extra else "")
        )
    for name, ref in own.items():
        got = tensors[name]
        if not isinstance(got, torch.Tensor):
            raise CheckpointError(f"{where}: {name} is {type(got).__name__}, expected a tensor")
        if tuple(got.shape) != tuple(ref.shape):
            raise CheckpointError(
                f"{where}: {name} has shape {tuple(got.shape)}, "
                f"{type(module).__name__} expects {tuple(ref.shape)}"
            )
        if ref.is_floating_point() != got.is_floating_point():
            raise CheckpointError(f"{where}: {name} is {got.dtype}, expected {ref.dtype}")
    bad = nonfinite_entry({name: tensors[name] for name in own})
    if bad is not None:
        raise CheckpointError(f"{where}: {bad} holds NaN or infinite values (weights of a diverged run?)")


def nonfinite_entry(state: Any, *, skip: Iterable[str] = ()) -> str | None:
    """The path (``"online.fc.weight"``) of the first floating tensor of ``state`` holding a NaN or an
    infinity, else ``None``.

    Entries whose paths ``skip`` names (``"replay"``) are not looked at. One host sync per device.
    """
    skipped = set(skip)
    found: list[tuple[str, torch.Tensor]] = []

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point() or obj.is_complex():
                found.append((path, obj))
        elif isinstance(obj, Mapping):
            for k, v in obj.items():
                child = f"{path}.{k}" if path else str(k)
                if child not in skipped:
                    walk(v, child)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}.{i}" if path else str(i))

    walk(state, "")
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, t) in enumerate(found):
        by_device.setdefault(t.device, []).append(i)
    bad = []
    for idx in by_device.values():
        flags = torch.stack([found[i][1].isfinite().all() for i in idx])
        if not bool(flags.all()):
            bad.append(idx[int((~flags).nonzero()[0, 0])])
    return found[min(bad)][0] if bad else None


def load_into_module(
    module: torch.nn.Module, tensors: Mapping[str, Any], *, where: str = "checkpoint"
) -> None:
    """Copy ``tensors`` into ``module``, all checked first, floats cast to each entry's dtype and device.

    Raises:
        CheckpointError: names, shapes or kinds differ, or a tensor is not finite; ``module`` untouched.
    """
    check_module_tensors(module, tensors, where=where)
    own = module.state_dict()
    with torch.no_grad():
        for name, ref in own.items():
            ref.copy_(tensors[name].to(device=ref.device, dtype=ref.dtype))


# ----------------------------------------------------------------------------- RNG


def capture_rng_state() -> dict:
    """The global RNG states: torch CPU, every CUDA device (if initialised), numpy, python ``random``."""
    # the legacy global RNG is what we capture; numpy's stub says dict | tuple, legacy=True gives the tuple
    np_state = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())  # noqa: NPY002
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": np_state[0],
            "keys": np_state[1],
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def check_rng_state(state: Any, *, where: str = "RNG state") -> tuple:
    """Check RNG states of `capture_rng_state`; returned staged for `restore_rng_state`.

    Raises:
        CheckpointError: a missing entry or a wrong shape (message starts with ``where``).
    """
    try:
        if not isinstance(state, Mapping):
            raise TypeError(f"not a dict but {type(state).__name__}")
        torch_state, np_s, py = state["torch"], state["numpy"], state["python"]
        if not isinstance(torch_state, torch.Tensor):
            raise TypeError(f"torch state is {type(torch_state).__name__}, not a tensor")
        torch_state = torch_state.to("cpu", torch.uint8)
        torch.Generator().set_state(torch_state)  # scratch: raises on a short or long state
        np_tuple = (
            str(np_s["kind"]),
            np.asarray(np_s["keys"], dtype=np.uint32),
            int(np_s["pos"]),
            int(np_s["has_gauss"]),
            float(np_s["cached_gaussian"]),
        )
        np.random.RandomState().set_state(np_tuple)  # a scratch generator checks the state
        if not isinstance(py, (list, tuple)) or len(py) != 3:
            raise TypeError("python state is not a (version, internal state, gauss) triple")
        py_tuple = (int(py[0]), tuple(int(x) for x in py[1]), None if py[2] is None else float(py[2]))
        random.Random().setstate(py_tuple)  # scratch check
        cuda_states = None
        if "cuda" in state and torch.cuda.is_available():
            cuda_states = [s.to("cpu", torch.uint8) for s in state["cuda"]]
    except KeyError as exc:
        raise CheckpointError(f"{where}: the {exc.args[0]!r} entry is missing") from None
    except (TypeError, ValueError, IndexError, RuntimeError, AttributeError, OverflowError) as exc:
        raise CheckpointError(f"{where}: does not fit ({brief(str(exc), 120)})") from None
    return torch_state, np_tuple, py_tuple, cuda_states


def restore_rng_state(state: Mapping[str, Any], *, where: str = "RNG state") -> None:
    """Put back the RNG states of `capture_rng_state`, all checked first.

    Raises:
        CheckpointError: a missing entry or a wrong shape; no RNG changed.
    """
    torch_state, np_tuple, py_tuple, cuda_states = check_rng_state(state, where=where)
    torch.set_rng_state(torch_state)
    np.random.set_state(np_tuple)  # noqa: NPY002
    random.setstate(py_tuple)
    if cuda_states is not None and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
