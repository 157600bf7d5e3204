"""Random inputs for the Mamba2 scan tests (shared by the torch-path and kernel test files)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Case:
    batch: int = 2
    length: int = 37
    nheads: int = 4
    headdim: int = 5
    ngroups: int = 2
    dstate: int = 3
    d_mode: str = "h"  # "none", "h" ([H]) or "hp" ([H, P])
    gate: bool = True
    bias: bool = True
    init: bool = True
    resets: str = "random"  # "none", "random" (incl. t=0 and the last step), "all"
    softplus: bool = True
    limit: tuple[float, float] = (0.0, math.inf)
    seed: int = 0


def make_inputs(case: Case, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Keyword arguments of ``mamba2_scan`` for ``case``: data in ``dtype``, params float32.

    Values are drawn in float32 (then cast), so the same seed gives the same numbers in every
    dtype; A in [-2, -0.1] keeps the state decaying like a trained model's.
    """
    b, L, H, P, G, N = case.batch, case.length, case.nheads, case.headdim, case.ngroups, case.dstate
    g = torch.Generator().manual_seed(case.seed)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    param_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    kw: dict = {
        "x": rnd(b, L, H, P).to(device, dtype),
        "dt": rnd(b, L, H).to(device, dtype),
        "A": (-0.1 - 1.9 * torch.rand(H, generator=g)).to(device, param_dtype),
        "B": rnd(b, L, G, N, scale=0.7).to(device, dtype),
        "C": rnd(b, L, G, N, scale=0.7).to(device, dtype),
        "dt_softplus": case.softplus,
        "dt_limit": case.limit,
    }
    if case.d_mode == "h":
        kw["D"] = rnd(H).to(device, param_dtype)
    elif case.d_mode == "hp":
        kw["D"] = rnd(H, P).to(device, param_dtype)
    if case.gate:
        kw["z"] = rnd(b, L, H, P).to(device, dtype)
    if case.bias:
        kw["dt_bias"] = rnd(H, scale=0.5).to(device, param_dtype)
    if case.init:
        kw["initial_states"] = rnd(b, H, P, N).to(device, param_dtype)
    if case.resets == "random":
        r = torch.rand(b, L, generator=g) < 0.15
        if b > 1:
            r[0, 0] = True  # a reset at t = 0 (row 0), while the last row keeps its initial state
            r[-1, 0] = False
        r[-1, -1] = True
        kw["resets"] = r.to(device)
    elif case.resets == "all":
        kw["resets"] = torch.ones(b, L, dtype=torch.bool, device=device)
    return kw


GRAD_KEYS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


def ref_call(fn, kw: dict, chunk_size: int, return_final_states: bool = True):
    """Call the positional reference ``fn`` (mamba2_scan_ref's signature) with ``kw``."""
    return fn(
        kw["x"],
        kw["dt"],
        kw["A"],
        kw["B"],
        kw["C"],
        kw.get("D"),
        kw.get("z"),
        kw.get("dt_bias"),
        kw["dt_softplus"],
        kw["dt_limit"],
        kw.get("initial_states"),
        kw.get("resets"),
        chunk_size,
        return_final_states,
    )


def with_grad(kw: dict) -> tuple[dict, list[str]]:
    """A copy of ``kw`` whose differentiable tensors are fresh leaves requiring grad."""
    out = dict(kw)
    names = [k for k in GRAD_KEYS if kw.get(k) is not None]
    for k in names:
        out[k] = kw[k].detach().clone().requires_grad_(True)
    return out, names
