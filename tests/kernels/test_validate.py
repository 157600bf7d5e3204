"""tritonrl.kernels.validate: the one argument-check dialect of every op."""

from __future__ import annotations

import math

import pytest
import torch
from tritonrl.kernels.validate import (
    check_field,
    check_int,
    check_real,
    check_tensor,
    describe_interval,
    in_interval,
    parse_interval,
)


def test_check_tensor_names_the_argument_and_what_is_wrong() -> None:
    t = torch.zeros(3, 4)
    got = check_tensor("w", t, dtype=torch.float32, ndim=2, shape=(3, 4), device=t.device, contiguous=True)
    assert got is t
    with pytest.raises(TypeError, match="^w must be a torch.Tensor, got list$"):
        check_tensor("w", [1.0])
    with pytest.raises(ValueError, match=r"^w must be 1-D or 3-D, got shape \(3, 4\)$"):
        check_tensor("w", t, ndim=(1, 3))
    with pytest.raises(ValueError, match=r"^w must have shape \[O, I\] = \(4, 3\), got \(3, 4\)$"):
        check_tensor("w", t, shape=(4, 3), what="[O, I]")
    with pytest.raises(TypeError, match=r"^w must have dtype bfloat16 \(x's dtype\), got float32$"):
        check_tensor("w", t, dtype=torch.bfloat16, dtype_note="(x's dtype)")
    with pytest.raises(TypeError, match="^w must have dtype int64, int32, got float32$"):
        check_tensor("w", t, dtype=(torch.int64, torch.int32, torch.int64))
    with pytest.raises(ValueError, match="^w is on meta but tree.sums is on cpu$"):
        check_tensor("w", t.to("meta"), device=torch.device("cpu"), device_of="tree.sums")
    with pytest.raises(ValueError, match=r"^w must be contiguous \(strides \(1, 4\)\)$"):
        check_tensor("w", t.T, contiguous=True)


def test_check_tensor_reads_metadata_only() -> None:
    # meta tensors hold no data: every check passes or fails without reading an element
    t = torch.empty(2, 5, device="meta")
    check_tensor("x", t, dtype=torch.float32, shape=(2, 5), device=torch.device("meta"), contiguous=True)


def test_check_int() -> None:
    assert check_int("n", 3, low=1) == 3
    for bad in (0, -1, 2.0, True, "3", None):
        with pytest.raises(ValueError, match=f"^n must be a positive int, got {bad!r}$"):
            check_int("n", bad, low=1)
    with pytest.raises(ValueError, match="^start must be a non-negative int, got -1$"):
        check_int("start", -1, low=0)
    with pytest.raises(ValueError, match=r"^size must be an int in \[1, 32\], got 33$"):
        check_int("size", 33, low=1, high=32)


def test_check_real() -> None:
    assert check_real("beta", 0) == 0.0 and check_real("eps", 1e-6, positive=True) == 1e-6
    for bad in (math.nan, math.inf, True, "1", None):
        with pytest.raises(ValueError, match="^beta must be a finite number"):
            check_real("beta", bad)
    with pytest.raises(ValueError, match="^eps must be > 0, got 0.0$"):
        check_real("eps", 0.0, positive=True)
    with pytest.raises(ValueError, match="^alpha must be >= 0, got -0.5$"):
        check_real("alpha", -0.5)


def test_intervals() -> None:
    assert parse_interval("(0, 1]") == (0.0, False, 1.0, True)
    assert parse_interval("[1, inf)") == (1.0, True, math.inf, False)
    assert in_interval(1.0, "(0, 1]") and not in_interval(0.0, "(0, 1]")
    assert in_interval(-5.0, "(-inf, inf)") and not in_interval(math.inf, "(-inf, inf)")
    assert [describe_interval(s) for s in ("[1, inf)", "(0, inf)", "(-inf, 2]", "(0, 1]")] == [
        ">= 1",
        "> 0",
        "<= 2",
        "in (0,1]",
    ]
    with pytest.raises(ValueError, match="^bad interval '0..1'"):
        parse_interval("0..1")


def test_check_field_names_the_field_as_set_writes_it() -> None:
    np = pytest.importorskip("numpy")
    check_field("lr", 3e-4, "(0, inf)")
    check_field("batch_size", np.int64(32), "[1, inf)", integer=True)  # numpy numbers are numbers
    check_field("hidden", (64, 64), "[1, inf)", integer=True, each=True)
    cases = [
        (("lr", math.inf, "(0, inf)"), {}, "lr=inf must be a finite number"),
        (("lr", "1e-3", "(0, inf)"), {}, "lr='1e-3' must be a number"),
        (("batch_size", True, "[1, inf)"), {"integer": True}, "batch_size=True must be an int"),
        (("torso_width", 1.5, "[1, inf)"), {"integer": True}, "torso_width=1.5 must be an int"),
        (("gamma", 1.5, "[0, 1]"), {}, r"gamma=1.5 must be in \[0,1\]"),
        (("eps", 0.0, "(0, inf)"), {}, "eps=0.0 must be > 0"),
        (("hidden", (64, 0), "[1, inf)"), {"integer": True, "each": True}, r"hidden=\(64, 0\): each item"),
        (
            ("hidden", [64, 1.5], "[1, inf)"),
            {"integer": True, "each": True},
            r"hidden=\[64, 1.5\] must be an int",
        ),
    ]
    for args, kw, message in cases:
        with pytest.raises(ValueError, match=f"^{message}"):
            check_field(*args, **kw)
