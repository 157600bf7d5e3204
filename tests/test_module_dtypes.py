"""Agent building blocks create their parameters in training_dtype(device) when no dtype is given."""

from __future__ import annotations

import pytest
import torch
from tritonrl.agents.factored import BranchingHead
from tritonrl.agents.icm import ICM
from tritonrl.agents.torsos import AttentionTorso, MLPTorso, ResidualMLPTorso, SpectralLinear


def _builders():
    return {
        "BranchingHead": lambda: BranchingHead(8, [2, 3]),
        "ICM": lambda: ICM((4,), [2]),
        "MLPTorso": lambda: MLPTorso(4, width=8),
        "ResidualMLPTorso": lambda: ResidualMLPTorso(4, width=8),
        "AttentionTorso": lambda: AttentionTorso(3, 4, width=8),
        "SpectralLinear": lambda: SpectralLinear(4, 8),
    }


@pytest.mark.parametrize("name", sorted(_builders()))
@pytest.mark.parametrize(("env", "dtype"), [("f32", torch.float32), ("bf16", torch.bfloat16)])
def test_default_dtype_follows_policy(
    name: str, env: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", env)
    module = _builders()[name]()
    dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
    assert dtypes == {dtype}, f"{name}: parameters in {dtypes}, policy says {dtype}"
