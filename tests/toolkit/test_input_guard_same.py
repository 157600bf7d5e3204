"""``InputGuard.same``: an argument that must equal what the agent holds for it (PPO's action
against the one ``act`` sampled), checked at once on the host and deferred on an accelerator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tritonrl.toolkit.checks import ActionRule, InputGuard

FIX = "pass that action"


def _guard(mode: str = "auto") -> InputGuard:
    return InputGuard("PPOAgent", ActionRule.discrete(3), mode=mode)


@pytest.mark.parametrize("kind", ["tensor", "numpy", "list", "int32", "bf16-box"])
def test_equal_values_pass_in_any_container(kind: str) -> None:
    expected = torch.tensor([[0.5, -1.0], [1.0, 0.25]]) if kind == "bf16-box" else torch.tensor([0, 2, 1])
    given = {
        "tensor": expected.clone(),
        "numpy": expected.numpy().copy(),
        "list": expected.tolist(),
        "int32": expected.int(),
        "bf16-box": expected.bfloat16(),  # these values are exact in bf16
    }[kind]
    _guard().same("observe", "action", given, expected, "the action act returned", FIX)


def test_the_rows_that_differ_are_named_in_one_line() -> None:
    expected = torch.zeros(12, dtype=torch.int64)
    given = expected.clone()
    given[[1, 4]] = 2
    with pytest.raises(
        ValueError, match=r"^PPOAgent\.observe: action differs in rows \[1, 4\] from it; fix$"
    ):
        _guard().same("observe", "action", given, expected, "it", "fix")
    with pytest.raises(ValueError, match=r"rows \[0, 1, 2, 3, 4, 5, 6, 7, \.\.\. \(12 rows\)\]"):
        _guard().same("observe", "action", np.ones(12, np.int64), expected, "it", "fix")


def test_the_action_act_returned_is_not_compared_again() -> None:
    g = _guard("deferred")
    action = torch.tensor([0, 1])
    g.acted(action)
    g.same("observe", "action", action, torch.tensor([2, 2]), "it", "fix")  # the same tensor: no check
    assert not g.pending
    action.add_(1)  # modified in place since: checked
    g.same("observe", "action", action, torch.tensor([2, 2]), "it", "fix")
    assert g.pending


def test_deferred_comparisons_raise_at_check_and_stay_failed() -> None:
    g = _guard("deferred")
    expected = torch.tensor([0, 1])
    g.same("observe", "action", expected.clone(), expected, "it", FIX)
    g.check()  # equal so far
    g.same("observe", "action", torch.tensor([0, 2]), expected, "it", FIX)  # no error: deferred
    g.same("observe", "action", expected.clone(), expected, "it", FIX)  # a later good step clears nothing
    match = (
        r"^PPOAgent\.observe: action differed from it at a step since the last check \(deferred check "
        r"on cpu, without a per-step sync; set agent\.inputs\.mode = 'eager' to find the rows\); "
        r"pass that action$"
    )
    for _ in range(2):
        with pytest.raises(ValueError, match=match):
            g.check()
