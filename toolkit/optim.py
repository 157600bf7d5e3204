"""Optimizers that keep bf16 training from losing its updates: f32 master weights.

A small Adam step on a bf16 weight rounds away;
[`MasterWeightOptimizer`][tritonrl.toolkit.optim.MasterWeightOptimizer] steps f32 copies and rounds them back
into the parameters. Also the agents' learner step
([`clip_and_step`][tritonrl.toolkit.optim.MasterWeightOptimizer.clip_and_step]) and the gradient average
across ranks. Imports torch and toolkit root modules only. Guide: docs/pages/precision.md.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch.optim.adam import adam
from tritonrl.toolkit.compile import Compiled
from tritonrl.toolkit.distributed import DistContext

__all__ = ["MasterWeightOptimizer", "polyak_"]


class MasterWeightOptimizer:
    """Wrap ``optimizer_cls`` so low-precision parameters are updated through f32 master copies.

    Args:
        optimizer_cls: a ``torch.optim.Optimizer`` subclass (Adam, AdamW, SGD, ...).
        compile: how [`clip_and_step`][tritonrl.toolkit.optim.MasterWeightOptimizer.clip_and_step] runs
            (`COMPILE_MODES`); compiled needs fused Adam.
        dist: the data-parallel context whose gradients are averaged before each step; ``None``: none.
        **kwargs: passed to ``optimizer_cls`` (``lr``, ``eps``, ...).

    Raises:
        ValueError: empty ``params`` or one not requiring grad, or a bad ``compile``.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam,
        *,
        compile: str = "none",
        dist: DistContext | None = None,
        **kwargs: Any,
    ) -> None:
        self.dist = dist if dist is not None and dist.enabled else None
        """The context whose ranks' gradients are averaged (``None``: a single process)."""
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
        self._averaged = False  # this step's gradients are averaged across the ranks
        group = self.optimizer.param_groups[0]
        self._fused_adam = type(self.optimizer) is torch.optim.Adam and bool(group.get("fused"))
        if compile != "none" and not self._fused_adam:
            raise ValueError(
                f"compile={compile!r} needs torch.optim.Adam with fused=True, got "
                f"{optimizer_cls.__name__} (fused={group.get('fused')})"
            )
        # clip_and_step reads the learning rate from this 0-d tensor (set_lr fills it): a Python
        # float would be a constant of a compiled graph, recompiled at every change.
        self._lr = torch.tensor(float(group["lr"]), dtype=torch.float32, device=self.params[0].device)
        self._step = Compiled(
            functools.partial(
                _adam_step,
                betas=tuple(group["betas"]) if "betas" in group else (0.9, 0.999),
                eps=float(group.get("eps", 1e-8)),
                weight_decay=float(group.get("weight_decay", 0.0)),
                amsgrad=bool(group.get("amsgrad", False)),
                maximize=bool(group.get("maximize", False)),
            ),
            compile,
            self.params[0].device,
        )

    @property
    def has_masters(self) -> bool:
        """True when at least one parameter is optimized through an f32 copy."""
        return any(m is not p for m, p in zip(self.masters, self.params, strict=True))

    @property
    def param_groups(self) -> list[dict]:
        """The inner optimizer's param groups (to read or set ``lr``)."""
        return self.optimizer.param_groups

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every param group (a device fill, no sync)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self._lr.fill_(lr)

    def zero_grad(self) -> None:
        """Drop the gradients of the parameters and of the masters (call it before each backward)."""
        for p, m in zip(self.params, self.masters, strict=True):
            p.grad = None
            m.grad = None
        self._gathered = False
        self._averaged = False

    def _gather_grads(self) -> None:
        """Copy the parameters' gradients into the f32 masters, once per step."""
        if self._gathered:
            return
        for p, m in zip(self.params, self.masters, strict=True):
            if m is not p:
                m.grad = None if p.grad is None else p.grad.float()
        self._gathered = True

    def _average_grads(self) -> None:
        """Average the f32 master gradients across the ranks, once per step (no-op in one process)."""
        if self.dist is None or self._averaged:
            return
        self._gather_grads()
        self.dist.all_reduce_mean_([m.grad for m in self.masters])
        self._averaged = True

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the global f32 gradient norm (over the masters, averaged across ranks) to ``max_norm``.

        Returns:
            the norm before clipping, an f32 scalar tensor on the parameters' device (no sync).
        """
        self._gather_grads()
        self._average_grads()
        grads = [m.grad for m in self.masters if m.grad is not None]
        if not grads or len({(g.device, g.dtype) for g in grads}) != 1:
            return torch.nn.utils.clip_grad_norm_(self.masters, max_norm)
        # One device and dtype (the usual case): torch's foreach computation, written out, without
        # its per-call grouping and wrappers.
        with torch.no_grad():
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
            torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total

    def step(self) -> None:
        """One optimizer step on the f32 masters, then round them into the parameters."""
        self._gather_grads()
        self._average_grads()
        self.optimizer.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters, strict=True):
                if m is not p:
                    p.copy_(m)
        self._gathered = False
        self._averaged = False

    def clip_and_step(self, max_norm: float | None) -> torch.Tensor | None:
        """Clip the global gradient norm to ``max_norm`` and take one Adam step, without host reads.

        [`clip_grad_norm_`][tritonrl.toolkit.optim.MasterWeightOptimizer.clip_grad_norm_] then
        [`step`][tritonrl.toolkit.optim.MasterWeightOptimizer.step] as one function of tensors (fused Adam
        eager, foreach compiled).

        Returns:
            the f32 0-d norm before clipping; ``None`` when ``max_norm`` is ``None`` (no clip).

        Raises:
            TypeError: the inner optimizer is not a fused Adam.
        """
        if not self._fused_adam:
            raise TypeError(
                "clip_and_step needs torch.optim.Adam with fused=True; use clip_grad_norm_ and step"
            )
        steps, exp_avgs, exp_avg_sqs, max_sqs = self._adam_state()
        grads = [p.grad for p in self.params]
        if self.dist is not None:
            grads = [None if g is None else g.float() for g in grads]  # f32 grads: themselves
            self.dist.all_reduce_mean_(grads)
        # eager: the float learning rate, as step() passes it; compiled: the tensor (see __init__)
        lr = self._lr if self._step.compiled else self.optimizer.param_groups[0]["lr"]
        norm = self._step(
            self.params, self.masters, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, lr, max_norm
        )
        self._gathered = False
        self._averaged = False
        return norm

    def _adam_state(
        self,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """Adam's per-master state lists, as fused Adam creates them (f32 device ``step``, zero moments)."""
        amsgrad = bool(self.optimizer.param_groups[0]["amsgrad"])
        steps, exp_avgs, exp_avg_sqs, max_sqs = [], [], [], []
        for m in self.masters:
            state = self.optimizer.state[m]
            if len(state) == 0:
                state["step"] = torch.zeros((), dtype=torch.float32, device=m.device)
                state["exp_avg"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                if amsgrad:
                    state["max_exp_avg_sq"] = torch.zeros_like(m, memory_format=torch.preserve_format)
            if self._step.cudagraphs:  # mutated in place by the graph: inputs at fixed addresses
                for t in (m, *state.values()):
                    torch._dynamo.mark_static_address(t)
            steps.append(state["step"])
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if amsgrad:
                max_sqs.append(state["max_exp_avg_sq"])
        return steps, exp_avgs, exp_avg_sqs, max_sqs

    def state_dict(self) -> dict[str, Any]:
        """Inner optimizer state plus the f32 masters (``None`` where the parameter is f32)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "masters": [
                None if m is p else m.detach().clone() for m, p in zip(self.masters, self.params, strict=True)
            ],
        }

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` unless ``state`` fits (masters, ids, per-parameter state, settings)."""
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
        """Load a `state_dict` (any parameter dtype) after the parameters were loaded.

        Raises:
            ValueError: the state does not fit (checked before anything changes).
        """
        self.check_state_dict(state)
        inner = state["optimizer"]
        # Moments are cast to the masters' dtype (f32) by torch's load_state_dict, which keeps a
        # tensor that needs no cast: copy those, or a live agent's state_dict() loaded into another
        # agent would leave both stepping the same moments. Each copy takes its master's memory
        # layout (a channels-last conv weight keeps channels-last moments, as a fresh run creates
        # them), so that the resumed steps are the same computation as the uninterrupted ones.
        self.optimizer.load_state_dict(inner)
        for master, per_param in self.optimizer.state.items():
            for key, value in per_param.items():
                if isinstance(value, torch.Tensor):
                    same = value.shape == master.shape and value.dtype == master.dtype
                    per_param[key] = torch.empty_like(master).copy_(value) if same else value.clone()
        self._lr.fill_(float(self.optimizer.param_groups[0]["lr"]))
        with torch.no_grad():
            for p, m, saved in zip(self.params, self.masters, state["masters"], strict=True):
                source = saved if saved is not None else p
                m.copy_(source.to(device=m.device, dtype=m.dtype))
                if m is not p:
                    p.copy_(m)


@torch.no_grad()
def _adam_step(
    params: Sequence[torch.Tensor],
    masters: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    max_exp_avg_sqs: Sequence[torch.Tensor],
    steps: Sequence[torch.Tensor],
    lr: float | torch.Tensor,
    max_norm: float | None,
    *,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    amsgrad: bool,
    maximize: bool,
) -> torch.Tensor | None:
    """The body of `MasterWeightOptimizer.clip_and_step`: the f32 norm (``None`` unclipped)."""
    keep = [i for i, g in enumerate(grads) if g is not None]
    if not keep:
        return None if max_norm is None else torch.zeros((), dtype=torch.float32, device=steps[0].device)
    g32 = [grads[i].float() for i in keep]  # type: ignore[union-attr]  # a no-op for f32 gradients
    total = None
    if max_norm is not None:
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(g32, 2.0)), 2.0)
        g32 = list(torch._foreach_mul(g32, torch.clamp(max_norm / (total + 1e-6), max=1.0)))
    compiling = torch.compiler.is_compiling()
    if compiling and not (amsgrad or maximize or weight_decay):
        _adam_traced(
            [masters[i] for i in keep],
            g32,
            [exp_avgs[i] for i in keep],
            [exp_avg_sqs[i] for i in keep],
            [steps[i] for i in keep],
            lr,
            betas,
            eps,
        )
    else:
        adam(
            [masters[i] for i in keep],
            g32,
            [exp_avgs[i] for i in keep],
            [exp_avg_sqs[i] for i in keep],
            [max_exp_avg_sqs[i] for i in keep] if amsgrad else [],
            [steps[i] for i in keep],
            # eager: the fused kernel (no host read of `step`); compiled: foreach ops (the fused
            # kernel is opaque to Dynamo), capturable so that `step` stays a device tensor
            foreach=compiling,
            capturable=compiling,
            fused=not compiling,
            amsgrad=amsgrad,
            beta1=betas[0],
            beta2=betas[1],
            lr=lr,
            weight_decay=weight_decay,
            eps=eps,
            maximize=maximize,
        )
    low = [i for i in keep if masters[i] is not params[i]]
    if low:
        torch._foreach_copy_([params[i] for i in low], [masters[i] for i in low])
    return total


def _adam_traced(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    lr: float | torch.Tensor,
    betas: tuple[float, float],
    eps: float,
) -> None:
    """Adam (no weight decay, amsgrad, maximize) as torch's, its bias corrections one ``[n]`` tensor."""
    beta1, beta2 = betas
    torch._foreach_add_(steps, 1)
    step = torch.stack(steps)  # [n] f32
    scalars = torch.stack([lr / (1 - beta1**step), (1 - beta2**step).sqrt()])  # [2, n]
    # Inductor inlines a pointwise scalar into every loop that reads it; a reduction it computes
    # once. The max of two equal copies is the value itself, bit for bit.
    step_size, bias_correction2_sqrt = torch.stack([scalars, scalars]).amax(0)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    for i, p in enumerate(params):
        denom = exp_avg_sqs[i].sqrt() / bias_correction2_sqrt[i] + eps
        p.sub_(step_size[i] * exp_avgs[i] / denom)


def _brief(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _same_setting(key: str, saved: Any, mine: Any) -> bool:
    """A saved param-group setting fits: any learning rate, every other setting equal."""

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


def polyak_(
    target: list[torch.Tensor],
    online: list[torch.Tensor],
    tau: float,
    *,
    round_into: list[torch.Tensor] | None = None,
) -> None:
    """Polyak-average ``online`` into ``target`` in place: ``target += tau * (online - target)``
    (one ``_foreach_lerp_``), or copy it when ``tau >= 1``.

    ``round_into``: low-precision tensors that then receive a copy of ``target`` (the agents'
    bf16 target networks, averaged through f32 masters and rounded once). Lists pair up by
    position, of equal shapes.
    """
    if tau >= 1.0:
        torch._foreach_copy_(target, online)
    else:
        torch._foreach_lerp_(target, online, tau)
    if round_into is not None:
        torch._foreach_copy_(round_into, target)
