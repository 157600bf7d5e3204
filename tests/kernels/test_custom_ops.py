"""The kernel ops as torch custom ops (``torch.ops.tritonrl.*``, :mod:`tritonrl.kernels.library`).

- ``torch.library.opcheck`` on every op and backward op (schema and mutations, fake
  implementation, autograd registration, AOT dispatch with dynamic shapes), CPU, f32 and bf16.
- ``torch.compile(fullgraph=True)`` over each public function equals eager mode. On CPU both run
  the torch reference and its autograd (inside the op when compiled): the graph only passes the
  tensors to the opaque op, so outputs and gradients are compared bit for bit (tolerance 0).
- Eager calls take the direct ``KernelOp`` path, compiled calls the custom op (a spy on
  ``KernelOp.dispatch`` tells which); ``op.counts`` records both. (By default
  (``TRITONRL_INLINE_REFERENCE`` unset), compiled CPU calls of the noisy-head and Mamba2 ops trace
  the torch reference itself instead: tested at the end; every other test here sets it to 0.)
- Under the Triton interpreter (and with ``--gpu`` on CUDA) the compiled path runs the Triton
  launchers, forward and backward, and equals eager Triton bit for bit (same launchers, same
  launch configurations, no atomics).
- Bad inputs raise the same errors as before.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
from helpers import make_layer as layer
from mamba2_cases import Case, make_inputs, ref_call, with_grad
from tritonrl.kernels import library, load_all, registry
from tritonrl.kernels.frame_stack import FRAME_STACK_SAMPLE
from tritonrl.kernels.mamba2 import MAMBA2_SCAN, MAMBA2_STEP, mamba2_scan, mamba2_step
from tritonrl.kernels.mamba2.reference import mamba2_scan_ref
from tritonrl.kernels.noisy_head import NOISY_DUELING, NOISY_LINEAR, NoisyParams, noisy_dueling, noisy_linear
from tritonrl.kernels.sumtree import (
    PER_INSERT,
    PER_SAMPLE,
    PER_UPDATE,
    SumTree,
    new_sumtree,
    per_insert,
    per_sample,
    per_update,
)

OPS = torch.ops.tritonrl
KERNEL_OPS = (
    "noisy_linear",
    "noisy_dueling",
    "mamba2_scan",
    "mamba2_step",
    "per_sample",
    "per_update",
    "per_insert",
    "frame_stack_sample",
)
ALL_OPS = (
    NOISY_LINEAR,
    NOISY_DUELING,
    MAMBA2_SCAN,
    MAMBA2_STEP,
    PER_SAMPLE,
    PER_UPDATE,
    PER_INSERT,
    FRAME_STACK_SAMPLE,
)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    # these tests are about the op path: compiled calls take the custom op even where the torch
    # reference would be traced inline (test_compiled_cpu_calls_inline_the_reference covers that)
    monkeypatch.setenv("TRITONRL_INLINE_REFERENCE", "0")
    torch._dynamo.reset()  # each test compiles its own functions (no recompile limit carried over)
    for op in ALL_OPS:
        op.reset()
    yield
    for op in ALL_OPS:
        op.reset()


def compiled(fn: Callable[..., Any], backend: str = "aot_eager") -> Callable[..., Any]:
    return torch.compile(fn, fullgraph=True, backend=backend)


def assert_same(a: Any, b: Any) -> None:
    """Bit-for-bit equality of tensors (or of tuples / lists of them, ``None`` entries kept)."""
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            assert_same(u, v)
        return
    if a is None:
        assert b is None
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b), f"max difference {(a.double() - b.double()).abs().max().item():.3e}"


# ----------------------------------------------------------------------------- inputs


def grad_leaves(*items: Any) -> list[torch.Tensor]:
    """The tensors among ``items`` (layers flattened) that require grad."""
    out = []
    for item in items:
        for t in item if isinstance(item, tuple) else (item,):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                out.append(t)
    return out


def grads(outs: Any, leaves: list[torch.Tensor], seed: int = 1) -> tuple[torch.Tensor | None, ...]:
    """Gradients of ``outs`` (a tensor or a tuple) for random upstream gradients (fixed seed)."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    gen = torch.Generator().manual_seed(seed)
    ups = [torch.randn(o.shape, generator=gen).to(o) for o in outs]
    return torch.autograd.grad(outs, leaves, ups, allow_unused=True)


def filled_tree(capacity: int = 100, stored: int = 70, device: str = "cpu") -> SumTree:
    tree = new_sumtree(capacity, device=device)
    per_insert(tree, 0, stored, alpha=0.6)
    gen = torch.Generator().manual_seed(3)
    idx = torch.randperm(stored, generator=gen)[:40].to(device)
    per_update(tree, idx, torch.randn(40, generator=gen).to(device), alpha=0.6, eps=1e-3, size=stored)
    return tree


def clone_tree(tree: SumTree) -> SumTree:
    return SumTree(*(t.clone() for t in tree))


# ----------------------------------------------------------------------------- registration


def test_every_kernel_op_is_a_custom_op() -> None:
    load_all()
    ours = {
        name for name, op in registry().items() if op.torch_impl.__module__.startswith("tritonrl.kernels.")
    }
    assert ours == set(KERNEL_OPS)
    for name in (*KERNEL_OPS, "noisy_linear_backward", "noisy_dueling_backward", "mamba2_scan_backward"):
        assert isinstance(getattr(OPS, name).default, torch._ops.OpOverload), name
    # the sum-tree ops declare the tensors they write
    schema = str(OPS.per_update.default._schema)
    assert all(f"Tensor({a}!)" in schema for a in "abcde"), schema
    assert "Tensor(a!) state" in str(OPS.mamba2_step.default._schema)


# ----------------------------------------------------------------------------- opcheck


def _linear_case(dtype: torch.dtype, **kw: Any) -> tuple:
    gen = torch.Generator().manual_seed(0)
    p = layer(6, 5, gen, dtype=dtype, **kw)
    x = torch.randn(3, 5, generator=gen).to(dtype).requires_grad_()
    return (x, *p)


def _dueling_case(dueling: bool, support: bool) -> tuple:
    gen = torch.Generator().manual_seed(0)
    a, z = 3, 5 if support else 1
    adv = layer(a * z, 7, gen)
    val = layer(z, 7, gen) if dueling else NoisyParams(None)  # type: ignore[arg-type]
    x = torch.randn(4, 2, 7, generator=gen) if dueling else torch.randn(4, 7, generator=gen)
    sup = torch.linspace(-2.0, 2.0, z) if support else None
    return (x.requires_grad_(), *adv, *val, sup, a, z, True, True)


def _scan_args(kw: dict, chunk: int, ret_final: bool, store: bool) -> tuple:
    lo, hi = kw["dt_limit"]
    return (
        *(kw.get(k) for k in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")),
        kw["dt_softplus"],
        lo,
        hi,
        kw.get("initial_states"),
        kw.get("resets"),
        chunk,
        ret_final,
        store,
    )


def _frame_stack_case(dtype: torch.dtype) -> tuple[Any, tuple]:
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (12, 7), dtype=torch.uint8, generator=gen)
    depth = torch.randint(1, 5, (12,), dtype=torch.int32, generator=gen)
    rows = torch.randint(0, 12, (5,), generator=gen)
    return OPS.frame_stack_sample.default, (frames, depth, rows, 4, 3, dtype, 1.0 / 255.0)


def _opcheck_cases() -> dict[str, Callable[[], tuple[Any, tuple]]]:
    def linear_bwd() -> tuple:
        x, *p = _linear_case(torch.float32)
        y = OPS.noisy_linear(x, *p, True, True)
        args = [t.detach() for t in (x, y, *p)]
        return OPS.noisy_linear_backward.default, (
            torch.randn_like(y),
            *args,
            True,
            True,
            [True, True, False, True, True],
        )

    def dueling_bwd() -> tuple:
        args = _dueling_case(True, True)
        out, q = OPS.noisy_dueling(*args)
        flat = [t.detach() if isinstance(t, torch.Tensor) else t for t in args[1:14]]
        needs = [True, True, True, False, True, True, False, True, True]
        ups = (torch.randn_like(out), torch.randn_like(q))
        rest = (*flat, *args[14:], needs)
        return OPS.noisy_dueling_backward.default, (*ups, args[0].detach(), out.detach(), *rest)

    def scan(dtype: torch.dtype, case: Case, grad: bool) -> Callable[[], tuple]:
        def make() -> tuple:
            kw = make_inputs(case, dtype)
            if grad:
                kw, _ = with_grad(kw)
            return OPS.mamba2_scan.default, _scan_args(kw, 16, True, grad)

        return make

    def scan_bwd() -> tuple:
        kw = make_inputs(Case(length=19))
        y, hT, hc = OPS.mamba2_scan(*_scan_args(kw, 16, True, True))
        args = _scan_args(kw, 16, True, True)
        ups = (torch.randn_like(y), torch.randn_like(hT))
        return OPS.mamba2_scan_backward.default, (*ups, hc, *args[:13], 16, [True] * 9)

    def step() -> tuple:
        kw = make_inputs(Case(length=1))
        state = torch.randn(2, 4, 5, 3)
        lo, hi = kw["dt_limit"]
        args = (state, kw["x"][:, 0], kw["dt"][:, 0], kw["A"], kw["B"][:, 0], kw["C"][:, 0], kw["D"])
        return OPS.mamba2_step.default, (
            *args,
            kw["z"][:, 0],
            kw["dt_bias"],
            True,
            lo,
            hi,
            kw["resets"][:, 0],
        )

    def update(bad: bool) -> Callable[[], tuple]:
        def make() -> tuple:
            td = torch.randn(8)
            if bad:
                td[2] = float("inf")
            return OPS.per_update.default, (*filled_tree(), torch.randint(0, 70, (8,)), td, 0.6, 1e-3, 70)

        return make

    return {
        "noisy_linear-f32-relu": lambda: (
            OPS.noisy_linear.default,
            (*_linear_case(torch.float32), True, True),
        ),
        "noisy_linear-bf16-grouped": lambda: (
            OPS.noisy_linear.default,
            (*_linear_case(torch.bfloat16, lead=(2,)), True, False),
        ),
        "noisy_linear-nobias-nonoise": lambda: (
            OPS.noisy_linear.default,
            (*_linear_case(torch.float32, bias=False)[:2], None, None, None, None, None, False, False),
        ),
        "noisy_linear_backward": linear_bwd,
        "noisy_dueling-c51": lambda: (OPS.noisy_dueling.default, _dueling_case(True, True)),
        "noisy_dueling-plain": lambda: (OPS.noisy_dueling.default, _dueling_case(False, False)),
        "noisy_dueling_backward": dueling_bwd,
        "mamba2_scan-f32-grad": scan(torch.float32, Case(length=19), True),
        "mamba2_scan-bf16-bare": scan(
            torch.bfloat16, Case(d_mode="none", gate=False, bias=False, init=False, resets="none"), False
        ),
        "mamba2_scan_backward": scan_bwd,
        "mamba2_step": step,
        "per_sample": lambda: (OPS.per_sample.default, (*filled_tree(), torch.rand(8), 0.4, 70)),
        "per_update": update(False),
        "per_update-rejected": update(True),
        "per_insert": lambda: (OPS.per_insert.default, (*filled_tree(), 70, 5, 0.6)),
        "frame_stack_sample-bf16": partial(_frame_stack_case, torch.bfloat16),
        "frame_stack_sample-f32": partial(_frame_stack_case, torch.float32),
    }


_OPCHECK = _opcheck_cases()


@pytest.mark.parametrize("case", list(_OPCHECK))
def test_opcheck(case: str) -> None:
    op, args = _OPCHECK[case]()
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


# ----------------------------------------------------------------------------- compiled == eager


@pytest.mark.parametrize(
    "cfg",
    [
        dict(noise=True, activation="relu"),
        dict(noise=False, activation=None, bias=False),
        dict(noise=True, activation=None, lead=(2,)),
    ],
    ids=["relu", "eval-nobias", "grouped"],
)
def test_noisy_linear_compiled_matches_eager(cfg: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    p = layer(6, 9, gen, lead=cfg.get("lead", ()), bias=cfg.get("bias", True))
    x = torch.randn(5, 9, generator=gen, requires_grad=True)

    def f(x: torch.Tensor, p: NoisyParams) -> torch.Tensor:
        return noisy_linear(x, *p, noise=cfg["noise"], activation=cfg["activation"])

    leaves = grad_leaves(x, p if cfg["noise"] else (p.weight_mu, p.bias_mu))
    y = f(x, p)
    y_c = compiled(f)(x, p)
    assert_same(y, y_c)
    assert_same(grads(y, leaves), grads(y_c, leaves))
    assert NOISY_LINEAR.counts == {"torch": 2}


@pytest.mark.parametrize("dueling", [True, False], ids=["dueling-c51", "plain"])
def test_noisy_dueling_compiled_matches_eager(dueling: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    a, z = 4, 5
    adv = layer(a * z, 8, gen)
    val = layer(z, 8, gen) if dueling else None
    x = torch.randn(6, 2, 8, generator=gen) if dueling else torch.randn(6, 8, generator=gen)
    x.requires_grad_()
    support = torch.linspace(-3.0, 3.0, z) if dueling else None

    def f(x: torch.Tensor, adv: NoisyParams, val: NoisyParams | None) -> Any:
        return noisy_dueling(x, adv, val, num_actions=a, atoms=z, support=support, log_softmax=dueling)

    leaves = grad_leaves(x, adv, *((val,) if val is not None else ()))
    out = f(x, adv, val)
    out_c = compiled(f)(x, adv, val)
    assert_same(out, out_c)
    assert isinstance(out_c, tuple) == dueling
    assert_same(grads(out, leaves), grads(out_c, leaves))


def test_mamba2_scan_compiled_matches_eager() -> None:
    kw, names = with_grad(make_inputs(Case(length=37)))

    def f(kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return mamba2_scan(**kw, chunk_size=16, return_final_states=True)

    leaves = [kw[k] for k in names]
    out = f(kw)
    out_c = compiled(f)(kw)
    assert_same(out, out_c)
    assert_same(grads(out, leaves), grads(out_c, leaves))
    with torch.no_grad():  # no gradient wanted: the op stores no chunk states (another graph)
        assert_same(out[0], compiled(lambda kw: mamba2_scan(**kw, chunk_size=16))(kw))


def test_mamba2_step_compiled_matches_eager() -> None:
    kw = make_inputs(Case(length=1))
    args = {k: kw[k][:, 0] for k in ("x", "dt", "B", "C", "z")}
    args.update(A=kw["A"], D=kw["D"], dt_bias=kw["dt_bias"], reset=kw["resets"][:, 0])
    state = torch.randn(2, 4, 5, 3)
    s_e, s_c = state.clone(), state.clone()
    y = mamba2_step(s_e, **args)
    y_c = compiled(mamba2_step)(s_c, **args)
    assert_same(y, y_c)
    assert_same(s_e, s_c)  # the in-place update reached the caller's state
    assert not torch.equal(s_c, state)
    assert MAMBA2_STEP.counts == {"torch": 2}


def test_sumtree_compiled_matches_eager() -> None:
    """A replay step (sample, update, insert) compiled once, replayed on a changing ``start``,
    with a rejected batch (NaN priority) that changes nothing but ``status``."""

    def step(tree: SumTree, u: torch.Tensor, idx: torch.Tensor, td: torch.Tensor, start: int):
        i, w = per_sample(tree, u, 0.4, 70)
        per_update(tree, idx, td, alpha=0.6, eps=1e-3, size=70)
        per_insert(tree, start, 3, alpha=0.6)
        return i, w

    step_c = compiled(step)
    eager, comp = filled_tree(), filled_tree()
    for op in (PER_SAMPLE, PER_UPDATE, PER_INSERT):
        op.reset()
    gen = torch.Generator().manual_seed(5)
    for k in range(4):
        u = torch.rand(16, generator=gen)
        idx = torch.randint(0, 70, (16,), generator=gen)
        td = torch.randn(16, generator=gen, requires_grad=True)  # priorities take no gradient
        if k == 2:
            td = td.detach().clone()
            td[3] = float("nan")
            before = clone_tree(comp)
        assert_same(step(eager, u, idx, td, 70 + 3 * k), step_c(comp, u, idx, td, 70 + 3 * k))
        assert_same(tuple(eager), tuple(comp))
        if k == 2:  # rejected: the leaves and rows did not change (the insert after it did)
            assert comp.status.tolist() == [1, 1]
            assert torch.equal(comp.sums[:70], before.sums[:70])
    assert eager.status.tolist() == [1, 1]
    for op in (PER_SAMPLE, PER_UPDATE, PER_INSERT):
        assert op.counts == {"torch": 8}, op.name


def test_inductor_compiles_noisy_linear_end_to_end() -> None:
    """The default backend (inductor, C++ codegen on CPU) around the opaque op and its backward.
    The op's outputs come from the same reference as eager mode; inductor only computes the
    surrounding ``* 2`` (exact in f32), hence equality."""
    gen = torch.Generator().manual_seed(0)
    p = layer(6, 9, gen)
    x = torch.randn(5, 9, generator=gen, requires_grad=True)

    def f(x: torch.Tensor, p: NoisyParams) -> torch.Tensor:
        return noisy_linear(x, *p, activation="relu") * 2

    leaves = grad_leaves(x, p)
    y = f(x, p)
    y_c = compiled(f, backend="inductor")(x, p)
    assert_same(y, y_c)
    assert_same(grads(y, leaves), grads(y_c, leaves))


def test_eager_calls_skip_the_custom_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager calls run the direct ``KernelOp`` path (the custom op costs more Python than a small
    layer); compiled calls run the custom op, which dispatches through ``KernelOp.dispatch``."""
    ran: list[str] = []
    real = NOISY_LINEAR.dispatch

    def spy(*args: Any) -> Any:
        ran.append("custom op")
        return real(*args)

    monkeypatch.setattr(NOISY_LINEAR, "dispatch", spy)
    x, w = torch.randn(1, 4), torch.randn(3, 4)
    noisy_linear(x, w, noise=False)
    assert ran == [] and NOISY_LINEAR.counts == {"torch": 1}
    compiled(lambda x, w: noisy_linear(x, w, noise=False))(x, w)
    assert ran == ["custom op"] and NOISY_LINEAR.counts == {"torch": 2}


# ----------------------------------------------------------------------------- Triton path


def test_compiled_runs_triton_launchers(kernel_device: str) -> None:
    """Under the interpreter (CPU) or on CUDA with ``--gpu``: the compiled path runs the same
    Triton forward and backward launchers as eager mode (bit for bit), counted as Triton."""
    dev = kernel_device
    gen = torch.Generator().manual_seed(0)
    p = layer(6, 9, gen, device=dev)
    x = torch.randn(5, 9, generator=gen).to(dev).requires_grad_()

    def f(x: torch.Tensor, p: NoisyParams) -> torch.Tensor:
        return noisy_linear(x, *p, activation="relu")

    leaves = grad_leaves(x, p)
    y = f(x, p)
    g = grads(y, leaves)
    assert NOISY_LINEAR.counts == {"triton": 2}  # forward and backward
    y_c = compiled(f)(x, p)
    assert_same(y, y_c)
    assert_same(g, grads(y_c, leaves))
    assert NOISY_LINEAR.counts == {"triton": 4}

    kw, names = with_grad(make_inputs(Case(batch=1, length=21, nheads=2, ngroups=1), device=dev))
    leaves = [kw[k] for k in names]
    out = mamba2_scan(**kw, chunk_size=16, return_final_states=True)
    out_c = compiled(lambda kw: mamba2_scan(**kw, chunk_size=16, return_final_states=True))(kw)
    assert_same(out, out_c)
    g = grads(out, leaves)
    assert_same(g, grads(out_c, leaves))
    # the op called without stored chunk states: its Triton backward recomputes them
    y, hT, hc = OPS.mamba2_scan(*_scan_args(kw, 16, True, False))
    assert hc.numel() == 0
    assert_same(g, grads((y, hT), leaves))
    assert MAMBA2_SCAN.counts == {"triton": 6}  # 3 forwards, 3 backwards (one recomputing the states)
    # the chunk states the Triton forward stores are those the torch reference returns (f32 kernel
    # with IEEE products against the float64 reference: summation order only, as in the parity tests)
    with torch.no_grad():
        hc = OPS.mamba2_scan(*_scan_args(kw, 16, True, True))[2]
        kw64 = {
            k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in kw.items()
        }
        hc64 = ref_call(partial(mamba2_scan_ref, return_chunk_states=True), kw64, 16)[2]
    assert hc.shape == hc64.shape == (1, 2, 2, 5, 3)
    assert (hc.double() - hc64).abs().max() <= 1e-4 * hc64.abs().max()

    tree_e, tree_c = filled_tree(device=dev), filled_tree(device=dev)
    idx = torch.tensor([3, 9, 3, 60], device=dev)
    td = torch.tensor([0.5, -2.0, 1.5, 0.1], device=dev)
    per_update(tree_e, idx, td, alpha=0.6, eps=1e-3, size=70)
    compiled(lambda t, i, d: per_update(t, i, d, alpha=0.6, eps=1e-3, size=70))(tree_c, idx, td)
    assert_same(tuple(tree_e), tuple(tree_c))
    assert PER_UPDATE.last_backend == "triton"


# ----------------------------------------------------------------------------- bad inputs


def _bad_calls() -> dict[str, tuple[Callable[[], Any], type[Exception], str]]:
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    tree = filled_tree()
    kw = make_inputs(Case(length=8))
    return {
        "activation": (lambda: noisy_linear(x, w, noise=False, activation="gelu"), ValueError, "^activation"),
        "dtype": (lambda: noisy_linear(x, w.double(), noise=False), TypeError, "^weight_mu must have dtype"),
        "noise": (lambda: noisy_linear(x, w), ValueError, "^weight_sigma is required"),
        "support": (
            lambda: noisy_dueling(
                x,
                NoisyParams(w),
                num_actions=2,
                atoms=2,
                noise=False,
                log_softmax=False,
                support=torch.zeros(2),
            ),
            ValueError,
            "^support needs log_softmax",
        ),
        "chunk": (lambda: mamba2_scan(**kw, chunk_size=8), ValueError, "^chunk_size"),
        "state": (
            lambda: mamba2_step(
                torch.zeros(2, 4, 5, 3, dtype=torch.float64),
                kw["x"][:, 0],
                kw["dt"][:, 0],
                kw["A"],
                kw["B"][:, 0],
                kw["C"][:, 0],
            ),
            TypeError,
            "^state must have dtype float32",
        ),
        "td_length": (
            lambda: per_update(
                tree, torch.zeros(3, dtype=torch.int64), torch.zeros(2), alpha=0.6, eps=1e-3, size=70
            ),
            ValueError,
            "^td_errors has 2 entries",
        ),
        "insert_range": (
            lambda: per_insert(tree, 120, 9, alpha=0.6),
            ValueError,
            "exceed the tree's 128 leaves",
        ),
        "tree": (
            lambda: per_sample(tree._replace(sums=tree.sums.double()), torch.rand(4), 0.4, 70),
            TypeError,
            "^tree.sums must have dtype float32",
        ),
    }


_BAD = _bad_calls()


@pytest.mark.parametrize("case", list(_BAD))
def test_bad_inputs_still_raise_in_eager_mode(case: str) -> None:
    call, exc, match = _BAD[case]
    with pytest.raises(exc, match=match):
        call()


def test_changed_shape_after_a_good_call_still_raises() -> None:
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    noisy_linear(x, w, noise=False)  # validated and remembered
    with pytest.raises(ValueError, match="^weight_mu has 3 input features"):
        noisy_linear(torch.randn(2, 5), w, noise=False)


def test_bad_input_raises_under_compile() -> None:
    """Validation runs while tracing: the same error, and nothing is compiled for it."""
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    f = torch.compile(lambda x, w: noisy_linear(x, w, noise=False, activation="gelu"), backend="aot_eager")
    with pytest.raises(ValueError, match="^activation must be None or 'relu', got 'gelu'"):
        f(x, w)
    assert NOISY_LINEAR.counts == {}


# ----------------------------------------------------------------------------- inline reference


def test_compiled_cpu_calls_inline_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """With TRITONRL_INLINE_REFERENCE unset (the default: on), a compiled CPU call of the
    noisy-head ops traces the torch reference into the graph (no custom op, no KernelOp dispatch:
    nothing counted) and equals eager bit for bit under aot_eager (the same ops); forcing the
    Triton backend under the interpreter still takes the custom op (the selection is no longer the
    reference)."""
    monkeypatch.delenv("TRITONRL_INLINE_REFERENCE")
    ran: list[str] = []
    for op in (NOISY_LINEAR, NOISY_DUELING):
        real = op.dispatch
        monkeypatch.setattr(op, "dispatch", lambda *a, _real=real, _n=op.name: (ran.append(_n), _real(*a))[1])
    gen = torch.Generator().manual_seed(0)
    p = layer(6, 9, gen)
    adv, val = layer(4 * 5, 6, gen), layer(5, 6, gen)
    x = torch.randn(5, 9, generator=gen, requires_grad=True)
    support = torch.linspace(-3.0, 3.0, 5)

    def f(x: torch.Tensor) -> Any:
        h = noisy_linear(x, *p, activation="relu")
        return noisy_dueling(h, adv, val, num_actions=4, atoms=5, support=support)

    leaves = grad_leaves(x, p, adv, val)
    out = f(x)
    for op in (NOISY_LINEAR, NOISY_DUELING):
        op.reset()
    out_c = compiled(f)(x)
    assert ran == [] and NOISY_LINEAR.counts == {} and NOISY_DUELING.counts == {}
    assert_same(out, out_c)
    assert_same(grads(out, leaves), grads(out_c, leaves))
    assert library.traces_reference(NOISY_LINEAR, torch.device("cpu"))


def test_compiled_cpu_mamba2_calls_inline_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Mamba2 ops inline their reference too: no custom op runs, and scan (with gradients)
    and step equal eager bit for bit under aot_eager (the same ops)."""
    monkeypatch.delenv("TRITONRL_INLINE_REFERENCE")
    ran: list[str] = []
    for op in (MAMBA2_SCAN, MAMBA2_STEP):
        real = op.dispatch
        monkeypatch.setattr(op, "dispatch", lambda *a, _real=real, _n=op.name: (ran.append(_n), _real(*a))[1])
    kw, names = with_grad(make_inputs(Case(length=37)))

    def scan(kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return mamba2_scan(**kw, chunk_size=16, return_final_states=True)

    leaves = [kw[k] for k in names]
    out = scan(kw)
    out_c = compiled(scan)(kw)
    assert_same(out, out_c)
    assert_same(grads(out, leaves), grads(out_c, leaves))
    step = make_inputs(Case(length=1))
    args = {k: step[k][:, 0] for k in ("x", "dt", "B", "C", "z")}
    args.update(A=step["A"], D=step["D"], dt_bias=step["dt_bias"], reset=step["resets"][:, 0])
    state = torch.randn(2, 4, 5, 3)
    s_e, s_c = state.clone(), state.clone()
    assert_same(mamba2_step(s_e, **args), compiled(mamba2_step)(s_c, **args))
    assert_same(s_e, s_c)
    assert ran == [] and MAMBA2_SCAN.counts == {"torch": 1} and MAMBA2_STEP.counts == {"torch": 1}


def test_inline_reference_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRITONRL_INLINE_REFERENCE: on when unset or 1/true/yes/on, off for 0/false/no/off, any other
    value an error naming the variable."""
    monkeypatch.delenv("TRITONRL_INLINE_REFERENCE")
    assert library.inline_reference()
    cases = (("1", True), (" On ", True), ("true", True), ("0", False), ("off", False), ("no", False))
    for value, on in cases:
        monkeypatch.setenv("TRITONRL_INLINE_REFERENCE", value)
        assert library.inline_reference() is on, value
    monkeypatch.setenv("TRITONRL_INLINE_REFERENCE", "sometimes")
    with pytest.raises(ValueError, match="^TRITONRL_INLINE_REFERENCE='sometimes' is not a switch"):
        library.inline_reference()
