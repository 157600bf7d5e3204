"""The frame-stack gather: the reference against a plain-Python model of the layout, the Triton
kernel against the reference (interpreter, and CUDA at Atari sizes with ``--gpu``), validation,
and ``torch.compile``.

Every value is one f32 product of a byte and the weight (``scale`` rounded to the output dtype),
rounded once to the output dtype: for bf16 the product itself is exact in f32 (8 x 8 significant
bits), so every implementation that rounds to nearest even agrees bit for bit. The Triton
interpreter's f32 -> bf16 cast truncates instead (``triton/runtime/interpreter.py``, ``cast_impl``
passes no rounding mode): its bf16 results are within one bf16 ulp (``2**-7`` relative) there.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tritonrl.kernels.frame_stack import FRAME_STACK_SAMPLE, frame_stack_sample, stack_rows
from tritonrl.kernels.frame_stack.reference import frame_stack_sample_ref

DTYPES = (torch.float32, torch.bfloat16)
BF16_ULP = 2.0**-7  # relative spacing of bf16 (8 significant bits)


@pytest.fixture(autouse=True)
def _fresh():
    FRAME_STACK_SAMPLE.reset()
    yield
    FRAME_STACK_SAMPLE.reset()


def model(frames, depth, rows, ring, stack, dtype, scale) -> torch.Tensor:
    """The layout as a plain-Python loop: env ``r // ring``, slot ``r % ring``; the frame ``back``
    steps earlier sits at slot ``(slot - back) mod ring``; zeros when ``back >= depth[r]``."""
    weight = torch.tensor(scale, dtype=torch.float32).to(dtype).float()
    P = frames.shape[1]
    out = torch.zeros(len(rows), stack, P, dtype=dtype)
    for m, r in enumerate(rows.tolist()):
        env, slot = divmod(r, ring)
        for j in range(stack):
            back = stack - 1 - j
            if back < int(depth[r]):
                src = env * ring + (slot - back) % ring
                out[m, j] = (frames[src].float() * weight).to(dtype)
    return out


def store(E: int, ring: int, P: int, gen: torch.Generator, device: str = "cpu"):
    frames = torch.randint(0, 256, (E * ring, P), dtype=torch.uint8, generator=gen)
    depth = torch.randint(0, ring + 3, (E * ring,), dtype=torch.int32, generator=gen)
    return frames.to(device), depth.to(device)


# ----------------------------------------------------------------------------- the reference


@given(
    E=st.integers(1, 4),
    ring=st.integers(1, 9),
    P=st.integers(1, 20),
    stack_frac=st.floats(0.0, 1.0),
    M=st.integers(0, 12),
    dtype=st.sampled_from(DTYPES),
    scale=st.sampled_from([1.0 / 255.0, 1.0, 0.0, 0.37, 3.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_reference_matches_the_loop_model(
    E: int, ring: int, P: int, stack_frac: float, M: int, dtype: torch.dtype, scale: float, seed: int
) -> None:
    stack = 1 + int(stack_frac * (ring - 1))
    gen = torch.Generator().manual_seed(seed)
    frames, depth = store(E, ring, P, gen)
    rows = torch.randint(0, E * ring, (M,), generator=gen)
    out = frame_stack_sample(frames, depth, rows, ring=ring, stack=stack, dtype=dtype, scale=scale)
    assert out.dtype == dtype and out.shape == (M, stack, P)
    # exact: the same f32 product of a byte and the same weight, rounded once to dtype
    torch.testing.assert_close(out, model(frames, depth, rows, ring, stack, dtype, scale), rtol=0, atol=0)
    assert FRAME_STACK_SAMPLE.last_backend == "torch"


# Two envs of ring 5; frame r holds the byte r + 1 everywhere, so each output frame names its source.
@pytest.mark.parametrize(
    "row, stack, depth_at_row, sources",
    [
        (3, 4, 9, [0, 1, 2, 3]),  # a full stack inside env 0, no wrap
        (3, 4, 2, [None, None, 2, 3]),  # the episode started at slot 2: two zero frames first
        (6, 4, 9, [8, 9, 5, 6]),  # env 1, slot 1: wraps to slots 3, 4 of the same ring
        (5, 3, 1, [None, None, 5]),  # an episode's first frame: only itself
        (9, 1, 1, [9]),  # stack 1: the frame itself
        (0, 5, 5, [1, 2, 3, 4, 0]),  # stack == ring: the whole ring, oldest first
    ],
)
def test_boundary_layouts(row: int, stack: int, depth_at_row: int, sources: list[int | None]) -> None:
    frames = (torch.arange(10, dtype=torch.uint8) + 1)[:, None].repeat(1, 3)
    depth = torch.full((10,), 9, dtype=torch.int32)
    depth[row] = depth_at_row
    rows = torch.tensor([row, 7])  # another env's row in the same batch
    out = frame_stack_sample(frames, depth, rows, ring=5, stack=stack, dtype=torch.float32, scale=1.0)
    got = [None if bool((f == 0).all()) else int(f[0]) - 1 for f in out[0]]
    assert got == sources
    assert bool((out[0] == out[0][:, :1]).all())  # every pixel of a frame alike
    assert out[1, -1, 0] == 8.0  # row 7 (env 1, slot 2) ends with itself
    src = stack_rows(rows, 5, stack)[0].tolist()
    assert [s for s, want in zip(src, sources, strict=True) if want is not None] == [
        want for want in sources if want is not None
    ]


def test_every_byte_value_in_both_dtypes() -> None:
    """All 256 bytes times 1/255 (the default scale) and a few others, f32 and bf16."""
    frames = torch.arange(256, dtype=torch.uint8).repeat(4, 1)  # one env, ring 4
    depth = torch.full((4,), 4, dtype=torch.int32)
    rows = torch.tensor([3, 1])
    for dtype in DTYPES:
        for scale in (1.0 / 255.0, 1.0, 0.1, 255.0):
            out = frame_stack_sample(frames, depth, rows, ring=4, stack=4, dtype=dtype, scale=scale)
            # exact: the same f32 product of a byte and the same weight, rounded once to dtype
            torch.testing.assert_close(out, model(frames, depth, rows, 4, 4, dtype, scale), rtol=0, atol=0)
    out = frame_stack_sample(frames, depth, rows, ring=4, stack=4, dtype=torch.float32)
    assert out.min() == 0.0 and out.max() == 1.0  # 255 * f32(1/255) rounds to 1


# ----------------------------------------------------------------------------- Triton vs reference


def _assert_kernel_equals_reference(out: torch.Tensor, ref: torch.Tensor, interpreted: bool) -> None:
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype == torch.bfloat16 and interpreted:
        # the interpreter truncates f32 -> bf16: at most one bf16 ulp below the rounded value
        torch.testing.assert_close(out.float(), ref.float(), rtol=BF16_ULP, atol=0)
        assert bool((out.float() <= ref.float()).all())
    else:
        # exact: one f32 product of a byte and the same weight, rounded to nearest even once
        torch.testing.assert_close(out, ref, rtol=0, atol=0)


@pytest.mark.parametrize(
    "E, ring, P, stack, M",
    [
        (1, 1, 1, 1, 1),
        (3, 7, 37, 4, 11),  # odd sizes, one block
        (2, 5, 130, 5, 9),  # two blocks of 128, stack == ring
        (2, 3, 1030, 2, 3),  # blocks of 1024, the last one of 6 pixels
        (2, 4, 16, 3, 0),  # an empty batch
    ],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_triton_matches_reference(
    kernel_device: str, E: int, ring: int, P: int, stack: int, M: int, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(E * 1000 + P)
    frames, depth = store(E, ring, P, gen, kernel_device)
    rows = torch.randint(0, E * ring, (M,), generator=gen).to(kernel_device)
    for scale in (1.0 / 255.0, 0.37):
        out = frame_stack_sample(frames, depth, rows, ring=ring, stack=stack, dtype=dtype, scale=scale)
        assert FRAME_STACK_SAMPLE.last_backend == "triton"
        ref = frame_stack_sample_ref(frames.cpu(), depth.cpu(), rows.cpu(), ring, stack, dtype, scale)
        _assert_kernel_equals_reference(out.cpu(), ref, kernel_device == "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("B", [32, 256])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
def test_gpu_parity_atari(B: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Atari sizes: 84 x 84 frames, stack 4, 8 envs of 2500 slots, the obs and next obs of B rows."""
    E, ring, P = 8, 2500, 84 * 84
    gen = torch.Generator().manual_seed(B)
    frames, depth = store(E, ring, P, gen, "cuda")
    depth.clamp_(max=6)  # many episode starts inside a stack
    rows = torch.randint(0, E * ring, (B,), generator=gen)
    rows = torch.cat([rows, (rows // ring) * ring + (rows + 1) % ring]).cuda()
    out = {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv("TRITONRL_BACKEND", backend)
        out[backend] = frame_stack_sample(frames, depth, rows, ring=ring, stack=4, dtype=dtype)
        assert FRAME_STACK_SAMPLE.last_backend == backend
    assert out["triton"].shape == (2 * B, 4, P)
    _assert_kernel_equals_reference(out["triton"], out["torch"], interpreted=False)


# ----------------------------------------------------------------------------- validation


def _bad_calls() -> dict[str, tuple[dict, type[Exception], str]]:
    frames = torch.zeros(12, 5, dtype=torch.uint8)
    depth = torch.ones(12, dtype=torch.int32)
    rows = torch.zeros(3, dtype=torch.int64)
    return {
        "frames-dtype": (dict(frames=frames.float()), TypeError, "^frames must have dtype"),
        "frames-ndim": (dict(frames=frames[None]), ValueError, "^frames must be"),
        "frames-contiguous": (
            dict(frames=torch.zeros(12, 10, dtype=torch.uint8)[:, ::2]),
            ValueError,
            "^frames must be contiguous",
        ),
        "depth-dtype": (dict(depth=depth.long()), TypeError, "^depth must have dtype"),
        "depth-shape": (dict(depth=depth[:5]), ValueError, "^depth must have shape"),
        "depth-device": (dict(depth=depth.to("meta")), ValueError, "^depth is on meta"),
        "rows-dtype": (dict(rows=rows.int()), TypeError, "^rows must have dtype"),
        "rows-ndim": (dict(rows=rows[None]), ValueError, "^rows must be"),
        "ring-divides": (dict(ring=5), ValueError, "^ring=5 must divide"),
        "ring-positive": (dict(ring=0), ValueError, "^ring must be"),
        "stack-low": (dict(stack=0), ValueError, "^stack must be"),
        "stack-high": (dict(stack=5), ValueError, "^stack must be"),
        "dtype": (dict(dtype=torch.float16), TypeError, "^dtype must be float32 or bfloat16"),
        "scale-negative": (dict(scale=-1.0), ValueError, "^scale must be >= 0"),
        "scale-nan": (dict(scale=float("nan")), ValueError, "^scale must be a finite number"),
        "scale-inf": (dict(scale=float("inf")), ValueError, "^scale must be a finite number"),
    }


_BAD = _bad_calls()


@pytest.mark.parametrize("case", list(_BAD))
def test_bad_arguments_raise(case: str) -> None:
    kw: dict = dict(
        frames=torch.zeros(12, 5, dtype=torch.uint8),
        depth=torch.ones(12, dtype=torch.int32),
        rows=torch.zeros(3, dtype=torch.int64),
        ring=4,
        stack=2,
        dtype=torch.float32,
    )
    change, exc, match = _BAD[case]
    kw.update(change)
    with pytest.raises(exc, match=match):
        frame_stack_sample(**kw)
    assert FRAME_STACK_SAMPLE.counts == {}


# ----------------------------------------------------------------------------- torch.compile


def test_compiled_matches_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fullgraph=True`` on CPU: the traced call is the custom op (the same reference runs inside
    it), for two batch sizes."""
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    frames, depth = store(3, 6, 20, gen)

    def sample(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        obs = frame_stack_sample(frames, depth, rows, ring=6, stack=4, dtype=torch.bfloat16)
        f32 = frame_stack_sample(frames, depth, rows, ring=6, stack=4, dtype=torch.float32)
        return obs, f32 * 2.0

    compiled = torch.compile(sample, fullgraph=True, backend="aot_eager")
    for M in (6, 10):
        rows = torch.randint(0, 18, (M,), generator=gen)
        eager, comp = sample(rows), compiled(rows)
        for a, b in zip(eager, comp, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape == (M, 4, 20)
            # exact: both run the same reference (inside the op when compiled); * 2 is exact
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert FRAME_STACK_SAMPLE.counts == {"torch": 8}


@pytest.mark.parametrize("chunk_bytes", [1, 40 * 50, 1 << 18])  # chunks of 32 and 40 frames, one chunk
def test_reference_chunks_change_nothing(chunk_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU path goes through the frames in chunks (uneven last chunk included): the same values."""
    from tritonrl.kernels.frame_stack import reference

    monkeypatch.setattr(reference, "_CHUNK_BYTES", chunk_bytes)
    gen = torch.Generator().manual_seed(chunk_bytes)
    frames, depth = store(4, 9, 50, gen)
    rows = torch.randint(0, 36, (37,), generator=gen)  # 111 frames
    for dtype in DTYPES:
        out = frame_stack_sample(frames, depth, rows, ring=9, stack=3, dtype=dtype)
        # exact: the same f32 product of a byte and the same weight, rounded once to dtype
        torch.testing.assert_close(out, model(frames, depth, rows, 9, 3, dtype, 1.0 / 255.0), rtol=0, atol=0)


def test_compiled_runs_the_triton_kernel(kernel_device: str) -> None:
    """Under the interpreter (and on CUDA with ``--gpu``) the compiled call's custom op launches
    the same Triton kernel as the eager call."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(2)
    frames, depth = store(2, 5, 33, gen, kernel_device)
    rows = torch.randint(0, 10, (7,), generator=gen).to(kernel_device)

    def sample(rows: torch.Tensor) -> torch.Tensor:
        return frame_stack_sample(frames, depth, rows, ring=5, stack=3, dtype=torch.bfloat16)

    eager = sample(rows)
    comp = torch.compile(sample, fullgraph=True, backend="aot_eager")(rows)
    # exact: the same launcher with the same launch configuration
    torch.testing.assert_close(comp, eager, rtol=0, atol=0)
    assert FRAME_STACK_SAMPLE.counts == {"triton": 2}
