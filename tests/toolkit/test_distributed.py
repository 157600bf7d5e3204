"""The data-parallel context: collectives on 2 gloo ranks, checks, and the single-process context."""

from __future__ import annotations

import pytest
import torch
from dist_run import run_ranks
from tritonrl.toolkit import distributed
from tritonrl.toolkit.distributed import SINGLE_PROCESS, DistContext, DistributedError


def _collectives(ctx: DistContext) -> dict:
    r = ctx.rank
    f32 = torch.tensor([1.0, 2.0]) * (r + 1)
    bf16 = torch.full((3,), float(r + 1), dtype=torch.bfloat16)
    ctx.all_reduce_mean_([f32, None, bf16])
    s = ctx.all_reduce_sum_(torch.tensor([float(r), 1.0]))
    w = torch.full((2,), float(r))
    ctx.broadcast_tensors_([w])
    return {
        "rank": r,
        "main": ctx.is_main,
        "backend": ctx.backend,
        "mean": f32,
        "bf16": bf16,
        "sum": s,
        "broadcast": w,
        "object": ctx.broadcast_object({"from": r}),
        "gathered": ctx.all_gather_objects(r * 10),
        "any": ctx.any(r == 1),
        "none": ctx.any(False),
    }


def _mismatch(ctx: DistContext) -> str:
    try:
        ctx.check_same("agent config", {"lr": 1e-3 * (ctx.rank + 1)})
    except DistributedError as exc:
        return str(exc)
    return "no error"


def _shard(ctx: DistContext) -> tuple[int, str]:
    try:
        ctx.shard(5, "--num-envs")
    except DistributedError as exc:
        return ctx.shard(8, "--num-envs"), str(exc)
    return -1, "no error"


def test_collectives_on_two_ranks() -> None:
    res = run_ranks(_collectives, 2)
    for r, out in enumerate(res):
        assert out["rank"] == r and out["main"] == (r == 0) and out["backend"] == "gloo"
        # mean of [1, 2] and [2, 4]: exact in f32
        # exact: halves of small integers
        torch.testing.assert_close(out["mean"], torch.tensor([1.5, 3.0]), rtol=0, atol=0)
        # bf16 averaged in f32 and rounded once: 1.5 is exact in bf16
        assert out["bf16"].dtype == torch.bfloat16
        # exact: 1.5 is a bf16 value
        torch.testing.assert_close(out["bf16"].float(), torch.full((3,), 1.5), rtol=0, atol=0)
        # exact: small integers
        torch.testing.assert_close(out["sum"], torch.tensor([1.0, 2.0]), rtol=0, atol=0)
        torch.testing.assert_close(out["broadcast"], torch.zeros(2), rtol=0, atol=0)  # exact: a copy
        assert out["object"] == {"from": 0}
        assert out["gathered"] == [0, 10]
        assert out["any"] is True and out["none"] is False


def test_mismatched_config_is_an_error_on_every_rank() -> None:
    for msg in run_ranks(_mismatch, 2):
        assert "agent config differs across ranks" in msg
        assert "rank 0 has" in msg and "rank 1 has" in msg


def test_shard_needs_a_divisible_count() -> None:
    for share, msg in run_ranks(_shard, 2):
        assert share == 4
        assert "--num-envs=5 is not divisible by the world size 2" in msg


def test_single_process_context_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ctx = distributed.init_distributed("cpu")
    assert ctx == SINGLE_PROCESS and not ctx.enabled and ctx.is_main
    t = torch.tensor([3.0])
    ctx.all_reduce_mean_([t])
    ctx.check_same("x", {"a": 1})
    assert ctx.all_reduce_sum_(t) is t and t.item() == 3.0
    assert ctx.all_gather_objects("a") == ["a"] and ctx.broadcast_object(5) == 5
    assert ctx.any(True) and not ctx.any(False)
    assert ctx.shard(7, "n") == 7
    assert distributed.current() is ctx


def test_launch_errors_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(DistributedError, match="RANK is not set: start data-parallel runs with torchrun"):
        distributed.init_distributed("cpu")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("TRITONRL_DIST_TIMEOUT", "soon")
    with pytest.raises(DistributedError, match="TRITONRL_DIST_TIMEOUT='soon' is not a number"):
        distributed.init_distributed("cpu")
    with pytest.raises(DistributedError, match="finite number of seconds > 0"):
        distributed.init_distributed("cpu", timeout_s=0)
    assert not distributed.current().enabled  # nothing was joined


def test_mean_of_integers_is_refused() -> None:
    ctx = DistContext(rank=0, world_size=2, backend="gloo")  # refuses before any collective
    with pytest.raises(TypeError, match="floating-point"):
        ctx.all_reduce_mean_([torch.tensor([1, 2])])
