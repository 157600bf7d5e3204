"""Shared assertions, inputs and guards for tests (kernel tolerances, noisy layers, host reads,
one metrics row per step)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily
from tritonrl.kernels.noisy_head import NoisyParams


def metric_steps(path: str | Path) -> list[int]:
    """The ``global_step`` of every row of a ``metrics.csv`` whose first cell is an integer (lines
    a kill damaged are skipped: :func:`tritonrl.toolkit.logger.repair_csv` drops those)."""
    steps = []
    for line in Path(path).read_text().splitlines()[1:]:
        try:
            steps.append(int(line.split(",", 1)[0]))
        except ValueError:
            continue
    return steps


def assert_one_row_per_step(path: str | Path) -> list[int]:
    """Fail unless every ``global_step`` of ``path`` (a ``metrics.csv``) is on one row; the steps."""
    steps = metric_steps(path)
    twice = sorted({s for s in steps if steps.count(s) > 1})
    assert not twice, f"{path}: global_step {twice} on more than one row"
    return steps


# bf16 keeps 8 bits of mantissa: one rounding costs up to 2**-8 relative.
BF16_EPS = 2.0**-8


def assert_bf16_close(
    out: torch.Tensor,
    ref_f32: torch.Tensor,
    torch_bf16: torch.Tensor,
    *,
    k: float = 2.0,
    atol: float = 1e-3,
    name: str = "output",
) -> None:
    """Bound a bf16 kernel's error by what bf16 itself costs (CONTRIBUTING.md, "Tests").

    ``max|out - ref| <= k * max|torch_bf16 - ref| + atol``: the kernel may not be worse than
    ``k`` times plain torch computing the same thing in bf16. ``atol`` covers outputs where torch
    bf16 happens to be exact.
    """
    ref = ref_f32.float()
    err = (out.float() - ref).abs().max().item()
    base = (torch_bf16.float() - ref).abs().max().item()
    assert err <= k * base + atol, (
        f"{name}: kernel error {err:.3e} > {k} x torch-bf16 error {base:.3e} + {atol:.1e}"
    )


def assert_grads_close(
    got: Sequence[torch.Tensor | None],
    want: Sequence[torch.Tensor | None],
    exact: Sequence[torch.Tensor | None],
    *,
    rtol: float,
    atol: float,
) -> None:
    """Gradients of a path (``got``) against the reference's (``want``), both in the inputs' dtype;
    ``exact``: the reference's gradients in f64 from the same inputs (``want`` itself for f64).

    f64: ``assert_close`` at ``rtol``/``atol``. f32: a gradient summed over every step (a scan's
    ``A``, ``dt_bias`` or ``D`` of one head) can cancel, and then neither order of summation holds
    ``rtol`` of the result: ``max|got - exact| <= 4 * max|want - exact| + atol + rtol * max|exact|``
    (the path at most 4x as far from f64 as the f32 reference is). An input with no gradient on
    the reference's side (cut off by a clamp) must get none, or zeros."""
    for a, b, e in zip(got, want, exact, strict=True):
        if b is None:
            assert a is None or not a.any()
            continue
        assert a is not None and e is not None
        if b.dtype == torch.float64:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
            continue
        err = (a.double() - e).abs().max().item()
        base = (b.double() - e).abs().max().item()
        bound = 4 * base + atol + rtol * e.abs().max().item()
        assert err <= bound, f"gradient error {err:.3e} > {bound:.3e} (f32 reference's own: {base:.3e})"


def nan_like(t: torch.Tensor) -> torch.Tensor:
    """A fresh buffer like ``t`` filled with NaN, so unwritten elements fail comparisons."""
    return torch.full_like(t, float("nan"))


def make_layer(
    o: int,
    i: int,
    gen: torch.Generator,
    *,
    lead: tuple[int, ...] = (),
    bias: bool = True,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> NoisyParams:
    """Random layer tensors; weights and biases are leaves that require grad, noise does not."""

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype).requires_grad_()

    def noise(*shape: int) -> torch.Tensor:
        u = torch.randn(*shape, generator=gen)
        return (u.sign() * u.abs().sqrt()).to(device=device, dtype=dtype)

    s = 1.0 / math.sqrt(i)
    return NoisyParams(
        leaf(torch.randn(*lead, o, i, generator=gen) * s),
        leaf((0.5 + torch.rand(*lead, o, i, generator=gen)) * s),
        leaf(torch.randn(*lead, o, generator=gen) * 0.1) if bias else None,
        leaf((0.5 + torch.rand(*lead, o, generator=gen)) * s) if bias else None,
        noise(*lead, i),
        noise(*lead, o),
    )


# ----------------------------------------------------------------------------- host reads
# (what tests/agents/test_no_host_sync.py explains: used there and by the market env tests)


class HostReadError(AssertionError):
    """A tensor value was read on the host inside a guarded step."""


class HostReads:
    """Context manager: any host read of a tensor value inside raises :class:`HostReadError`.

    Catches ``aten._local_scalar_dense`` (``.item()``, ``bool``, ``float``, ``int`` of a tensor)
    in a dispatch mode, and calls of ``Tensor.tolist``, ``Tensor.numpy``, ``Tensor.__array__``,
    ``Tensor.cpu`` and ``Tensor.to`` with a ``"cpu"`` string target. ``lifted()`` suspends it
    (for a host implementation of a device op). The sum tree's CPU insert (numpy views of host
    memory; a replay buffer inserts on every step, and on an accelerator the Triton launcher that
    replaces it reads no tensor value) always runs lifted.
    """

    def __init__(self) -> None:
        self._monkeypatch = pytest.MonkeyPatch()
        self.active = False
        guard = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                if func is torch.ops.aten._local_scalar_dense.default and guard.active:
                    raise HostReadError(f"host read of a tensor value ({func}) inside the step")
                return func(*args, **(kwargs or {}))

        self._mode = _Mode()

    def _patch(self) -> None:
        guard = self

        def failing(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                if guard.active:
                    raise HostReadError(f"Tensor.{name}() inside the step")
                return original(t, *args, **kwargs)

            return wrapper

        for name in ("tolist", "numpy", "__array__", "cpu"):
            self._monkeypatch.setattr(torch.Tensor, name, failing(name, getattr(torch.Tensor, name)))
        from tritonrl.kernels.sumtree import cpu as sumtree_cpu

        host_insert = sumtree_cpu._per_insert_cpu

        def insert(*args: Any) -> None:
            with guard.lifted():
                host_insert(*args)

        self._monkeypatch.setattr(sumtree_cpu, "_per_insert_cpu", insert)
        original_to = torch.Tensor.to

        def to(t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            target = kwargs.get("device", args[0] if args else None)
            if guard.active and isinstance(target, str) and target.startswith("cpu"):
                raise HostReadError(f"Tensor.to({target!r}) inside the step")
            return original_to(t, *args, **kwargs)

        self._monkeypatch.setattr(torch.Tensor, "to", to)

    def __enter__(self) -> HostReads:
        self._patch()
        self._mode.__enter__()
        self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.active = False
        self._mode.__exit__(*exc)
        self._monkeypatch.undo()

    @contextlib.contextmanager
    def lifted(self) -> Iterator[None]:
        """Inside: nothing is checked (the dispatch mode is popped, as for a custom op's kernel)."""
        if not self.active:
            yield
            return
        self.active = False
        try:
            with _pop_mode_temporarily():
                yield
        finally:
            self.active = True


def assert_same_tree(a: Any, b: Any, where: str = "state") -> None:
    """``a`` and ``b`` (nested dicts, lists, tuples, tensors, plain values) are equal, tensors
    bit for bit with the same dtype (for runs that must reproduce exactly: the same computation in
    another process, or resumed); ``where`` names the first difference."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where  # exact: the callers compare reproductions of one computation
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_same_tree(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tree(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def metric_rows(path: str | Path) -> list[dict[str, str]]:
    """The rows of a ``metrics.csv`` (a file, or the run folder holding one), without
    ``charts/SPS`` (the clock's): what two reproductions of one run must agree on."""
    import csv

    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    with path.open() as f:
        return [{k: v for k, v in row.items() if k != "charts/SPS"} for row in csv.DictReader(f)]


def overlap_loop(learner: str, run_dir: str | Path | None = None, **fields: Any) -> Any:
    """``LoopConfig`` of an overlapped test run with ``learner``: no plot, no TensorBoard, no
    wall-time checkpoints (each may be overridden in ``fields``, as may ``overlap`` itself)."""
    from tritonrl.toolkit.training.base import LoopConfig

    settings: dict[str, Any] = {"overlap": True, "plot": False, "tensorboard": False, "checkpoint_seconds": 0}
    settings.update(fields)
    return LoopConfig(run_dir=None if run_dir is None else str(run_dir), overlap_learner=learner, **settings)
