"""Optimizers that keep bf16 training from losing its updates.

A bf16 parameter has 8 bits of mantissa: an Adam step of ``lr = 3e-4`` on a weight of size 1 is
below half a unit in the last place, and rounding to nearest throws it away. Training in bf16
therefore keeps **f32 master weights**: the optimizer (its moments included) works on f32
copies, and after each step the bf16 parameters receive the rounded master values.

:class:`MasterWeightOptimizer` wraps any ``torch.optim`` optimizer class that way. Parameters that
already are f32 are optimized in place (no copy, no cost), so one code path serves every device::

    opt = MasterWeightOptimizer(model.parameters(), torch.optim.Adam, lr=3e-4, eps=1e-5)
    opt.zero_grad()
    loss.backward()
    grad_norm = opt.clip_grad_norm_(0.5)   # on the f32 master gradients; returns the f32 norm
    opt.step()                             # f32 update, then bf16 <- round(master)
    opt.set_lr(1e-4)

``state_dict()`` holds the inner optimizer's state plus the f32 masters, so a checkpoint resumes
exactly; ``load_state_dict`` accepts a state saved with a different parameter dtype (masters
become the parameters' values when the new parameters are f32; they are rebuilt from the
parameters when the saved state had none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["MasterWeightOptimizer"]


class MasterWeightOptimizer:
    """Wrap ``optimizer_cls`` so low-precision parameters are updated through f32 master copies.

    Args:
        params: the parameters (an iterable of tensors requiring grad; one param group).
        optimizer_cls: a ``torch.optim.Optimizer`` subclass (Adam, AdamW, SGD, ...).
        **kwargs: passed to ``optimizer_cls`` (``lr``, ``eps``, ...).

    Raises:
        ValueError: ``params`` is empty or holds a parameter that does not require grad.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam,
        **kwargs: Any,
    ) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("params is empty: nothing to optimize")
        for i, p in enumerate(self.params):
            if not p.requires_grad:
                raise ValueError(f"params[{i}] (shape {tuple(p.shape)}) does not require grad")
        # f32 parameters are their own master; others get an f32 copy.
        self.masters = [
            p if p.dtype == torch.float32 else p.detach().float().requires_grad_(True) for p in self.params
        ]
        self.optimizer = optimizer_cls(self.masters, **kwargs)
        self._gathered = False  # master grads hold this step's (possibly clipped) gradients

    @property
    def has_masters(self) -> bool:
        """True when at least one parameter is optimized through an f32 copy."""
        return any(m is not p for m, p in zip(self.masters, self.params, strict=True))

    @property
    def param_groups(self) -> list[dict]:
        """The inner optimizer's param groups (to read or set ``lr``)."""
        return self.optimizer.param_groups

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every param group."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def zero_grad(self) -> None:
        """Drop the gradients of the parameters and of the masters (call it before each backward)."""
        for p, m in zip(self.params, self.masters, strict=True):
            p.grad = None
            m.grad = None
        self._gathered = False

    def _gather_grads(self) -> None:
        """Copy the parameters' gradients into the f32 masters, once per step."""
        if self._gathered:
            return
        for p, m in zip(self.params, self.masters, strict=True):
            if m is not p:
                m.grad = None if p.grad is None else p.grad.float()
        self._gathered = True

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the global gradient norm (computed in f32 on the master gradients) to ``max_norm``.

        Returns:
            the norm before clipping, an f32 scalar tensor on the parameters' device (no sync).
        """
        self._gather_grads()
        grads = [m.grad for m in self.masters if m.grad is not None]
        if not grads or len({(g.device, g.dtype) for g in grads}) != 1:
            return torch.nn.utils.clip_grad_norm_(self.masters, max_norm)
        # One device and dtype (the usual case): torch's foreach computation, written out, without
        # its per-call grouping and wrappers (a third of the cost of a small network's clip).
        with torch.no_grad():
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
            torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total

    def step(self) -> None:
        """One optimizer step on the f32 masters, then round them into the parameters."""
        self._gather_grads()
        self.optimizer.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters, strict=True):
                if m is not p:
                    p.copy_(m)
        self._gathered = False

    def state_dict(self) -> dict[str, Any]:
        """Inner optimizer state plus the f32 masters (``None`` where the parameter is f32)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "masters": [
                None if m is p else m.detach().clone() for m, p in zip(self.masters, self.params, strict=True)
            ],
        }

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` fits these parameters; changes nothing.

        Checks everything :meth:`load_state_dict` and later steps read: the masters (``None`` or a
        floating tensor of the parameter's shape), the param groups (every setting this optimizer
        has, of the same kind; every setting but the learning rate equal to this optimizer's, so
        a checkpoint cannot smuggle in another ``eps`` or ``betas``), the parameter ids, and the
        per-parameter state (tensors of the parameter's shape or scalars, the same entries for
        every parameter, and the entries this optimizer keeps once it has stepped).
        """
        if not isinstance(state, Mapping) or not isinstance(state.get("optimizer"), Mapping):
            raise ValueError("optimizer state is missing its 'optimizer' entry")
        inner, masters = state["optimizer"], state.get("masters")
        groups, per_param = inner.get("param_groups"), inner.get("state")
        if not isinstance(masters, list):
            raise ValueError("optimizer state is missing its 'masters' list")
        if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
            raise ValueError("optimizer state is missing its 'param_groups' list")
        if not isinstance(per_param, Mapping):
            raise ValueError("optimizer state is missing its per-parameter 'state'")
        if len(masters) != len(self.params):
            raise ValueError(f"optimizer state has {len(masters)} parameters, expected {len(self.params)}")
        own_groups = self.optimizer.param_groups
        if len(groups) != len(own_groups):
            raise ValueError(f"optimizer state has {len(groups)} param groups, expected {len(own_groups)}")
        ids: list[Any] = []
        for g, own in zip(groups, own_groups, strict=True):
            if not isinstance(g.get("params"), list):
                raise ValueError("optimizer param group lacks its 'params' list")
            ids.extend(g["params"])
            for key, mine in own.items():
                if key == "params":
                    continue
                if key not in g:
                    raise ValueError(f"optimizer param group lacks setting {key!r}")
                if not _same_setting(key, g[key], mine):
                    raise ValueError(
                        f"optimizer setting {key}={_brief(g[key])} does not fit this "
                        f"optimizer's {_brief(mine)}"
                    )
        if len(ids) != len(self.params):
            raise ValueError(
                f"optimizer state has {len(ids)} parameters in {len(groups)} groups, expected "
                f"{len(self.params)} in {len(own_groups)}"
            )
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"optimizer parameter ids {_brief(ids)} are not distinct ints")
        if set(per_param) - set(ids):
            extra = sorted(map(str, set(per_param) - set(ids)))
            raise ValueError(f"optimizer state has entries {_brief(extra)} for parameters it does not list")
        keys = {tuple(sorted(map(str, v))) if isinstance(v, Mapping) else None for v in per_param.values()}
        own_keys = {tuple(sorted(map(str, v))) for v in self.optimizer.state.values()}
        if per_param and (
            len(per_param) != len(ids) or len(keys) != 1 or None in keys or (own_keys and keys != own_keys)
        ):
            raise ValueError(
                "optimizer per-parameter state is incomplete (parameters with different or missing entries)"
            )
        for i, (saved_id, p) in enumerate(zip(ids, self.params, strict=True)):
            m = masters[i]
            if m is not None and (
                not isinstance(m, torch.Tensor)
                or not m.is_floating_point()
                or tuple(m.shape) != tuple(p.shape)
            ):
                got = tuple(m.shape) if isinstance(m, torch.Tensor) else type(m).__name__
                raise ValueError(f"optimizer master {i} is {got}, expected a float tensor {tuple(p.shape)}")
            for key, value in per_param.get(saved_id, {}).items():
                if not isinstance(value, torch.Tensor):
                    raise ValueError(
                        f"optimizer state {key!r} of parameter {i} is a {type(value).__name__}, not a tensor"
                    )
                if value.dim() > 0 and value.shape != p.shape:
                    raise ValueError(
                        f"optimizer state {key!r} of parameter {i} has shape "
                        f"{tuple(value.shape)}, expected {tuple(p.shape)}"
                    )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a state from :meth:`state_dict`, possibly saved with another parameter dtype.

        Call it after the parameters themselves were loaded. Saved masters replace the current
        masters (or the f32 parameters themselves, which then get the exact f32 values); without
        saved masters the masters are rebuilt from the parameters.

        Raises:
            ValueError: the state does not fit (checked before anything changes).
        """
        self.check_state_dict(state)
        inner = state["optimizer"]
        # Moments are cast to the masters' dtype (f32) by torch's load_state_dict.
        self.optimizer.load_state_dict(inner)
        with torch.no_grad():
            for p, m, saved in zip(self.params, self.masters, state["masters"], strict=True):
                source = saved if saved is not None else p
                m.copy_(source.to(device=m.device, dtype=m.dtype))
                if m is not p:
                    p.copy_(m)


def _brief(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _same_setting(key: str, saved: Any, mine: Any) -> bool:
    """A saved param-group setting fits: the learning rate is any number (a schedule or a resume
    sets it), every other setting equals this optimizer's (tuples may come back as lists)."""

    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if key in ("lr", "initial_lr"):
        return number(saved) or isinstance(saved, torch.Tensor) and saved.numel() == 1
    if isinstance(mine, tuple):
        return (
            isinstance(saved, (list, tuple))
            and len(saved) == len(mine)
            and all(_same_setting("", s, m) for s, m in zip(saved, mine, strict=True))
        )
    if number(mine):
        return number(saved) and float(saved) == float(mine)
    return type(saved) is type(mine) and saved == mine
