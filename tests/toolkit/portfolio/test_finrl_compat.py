"""`PortfolioEnv`'s FinRL mode against FinRL's own ``PortfolioOptimizationEnv``, step for step.

FinRL's file is FinRL 0.3.7's, unmodified (``bash benchmarks/fetch-finrl.sh`` extracts it; its
sha256 is checked by ``benchmarks/_peers_finrl.py``); without it these tests skip. Both envs run
one episode of a synthetic panel from row ``W - 1`` with the same actions: on the simplex (used as
given), off it (FinRL's softmax), tiny trades, and trades the wvm model refuses. Compared per step:
the reward, the portfolio value and the weights after the step (FinRL's ``_final_weights[-1]``).

Tolerances. FinRL run with an f64 ``initial_amount`` carries its value in f64; on the simplex the
two then agree to 1e-9 relative (observed ~1e-15) and our f32 reward to its f32 rounding (2^-24).
Off the simplex NumPy's f32 ``exp`` and torch's differ in the last bit, so each softmax step may
move the value by up to 3 f32 roundings (3 * 2^-24 relative), summed over the episode. With a
Python-number ``initial_amount`` (FinRL's usual call) NumPy >= 2 keeps its value in f32: then 8 f32
roundings per step. Needs NumPy >= 2 (NEP 50: FinRL's f32 terms stay f32).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pd = pytest.importorskip("pandas")
pytest.importorskip("gymnasium")
pytest.importorskip("matplotlib")

from tritonrl.toolkit.bars.panel_sources import synthetic_panel  # noqa: E402
from tritonrl.toolkit.bars.paneldata import upload_panel  # noqa: E402
from tritonrl.toolkit.envs.portfolio import PortfolioEnv, PortfolioEnvConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
T, N, W, FEE, CASH = 120, 4, 5, 0.0025, 1_000_000.0
U = 2.0**-24  # f32 unit roundoff
MODELS = {"wvm": "finrl_wvm", "trf": "finrl_trf", None: "proportional"}

pytestmark = [
    pytest.mark.skipif(
        int(np.__version__.split(".")[0]) < 2,
        reason="FinRL's f32 terms promote to f64 under NumPy 1.x; this mode reproduces NumPy >= 2 (NEP 50)",
    ),
    pytest.mark.filterwarnings("ignore:The inplace keyword"),  # FinRL's terminal report, under pandas 3
]


def _finrl_class() -> type:
    spec = importlib.util.spec_from_file_location("_peers_finrl", ROOT / "benchmarks" / "_peers_finrl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return module.load_finrl_env()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _frame(panel: Any) -> Any:
    """The long frame FinRL reads: date, tic, close, high, low (f64)."""
    t, n = panel.close.shape
    return pd.DataFrame(
        {
            "date": np.repeat(panel.time.astype("datetime64[D]").astype(str), n),
            "tic": np.tile(np.asarray(panel.symbols), t),
            "close": panel.close.reshape(-1),
            "high": panel.high.reshape(-1),
            "low": panel.low.reshape(-1),
        }
    )


def _actions(rng: np.random.Generator, k: int, last: np.ndarray, simplex_only: bool) -> np.ndarray:
    """Step ``k``'s f32 action: cycles through a Dirichlet point (on the simplex), a tiny trade
    away from the held weights ``last``, a mostly-cash point (wvm accepts it), and unless
    ``simplex_only`` an off-simplex vector (FinRL's softmax)."""
    kind = k % (3 if simplex_only else 4)
    if kind == 0:
        return rng.dirichlet(np.ones(N + 1)).astype(np.float32)
    if kind == 1:
        w = np.clip(last + rng.normal(0, 1e-4, N + 1), 0, None)
        return (w / w.sum()).astype(np.float32)
    if kind == 2:
        w = np.concatenate(([0.9], rng.dirichlet(np.ones(N)) * 0.1))
        return (w / w.sum()).astype(np.float32)
    return rng.uniform(-1.0, 2.0, N + 1).astype(np.float32)


def _run(model: str | None, *, f64_value: bool, simplex_only: bool, seed: int, tmp: Path) -> dict[str, Any]:
    """Both envs over one episode: the largest errors against their tolerances, and what ran."""
    finrl_env = _finrl_class()
    panel = synthetic_panel(n=T, assets=N, seed=seed)
    with contextlib.redirect_stdout(io.StringIO()):
        fin = finrl_env(
            _frame(panel),
            np.float64(CASH) if f64_value else CASH,
            comission_fee_model=model,
            comission_fee_pct=FEE,
            time_window=W,
            cwd=str(tmp),
            new_gym_api=True,
        )
        fin.reset()
    config = PortfolioEnvConfig(
        actions="finrl",
        fill="close",
        cost_model=MODELS[model],  # type: ignore[arg-type]
        cost=FEE if model else 0.0,
        window=W,
        random_start=False,
        episode_length=T - W,
        max_drawdown=1.0,
        initial_cash=CASH,
    )
    ours = PortfolioEnv(upload_panel(panel, dtype=torch.float32), 1, config)
    ours.reset(seed=seed)
    rng = np.random.default_rng(seed)
    seen = {"softmax": 0, "refused": 0, "accepted": 0}
    drift = 0.0  # the value tolerance so far (relative)
    value = CASH
    for k in range(T - W):
        last = np.asarray(fin._final_weights[-1], dtype=np.float64)
        a = _actions(rng, k, last, simplex_only)
        softmax = not (math.isclose(np.sum(a), 1, abs_tol=1e-6) and a.min() >= 0)
        seen["softmax"] += softmax
        if model == "wvm" and k > 0:
            w = a if not softmax else np.exp(a) / np.sum(np.exp(a))
            refused = np.abs(w[1:] - last[1:]).sum() * fin._portfolio_value > w[0] * fin._portfolio_value
            seen["refused" if refused else "accepted"] += 1
        with contextlib.redirect_stdout(io.StringIO()):
            _, reward, terminal, _, _ = fin.step(a)
        _, r, _, truncated, info = ours.step(torch.from_numpy(a)[None])
        step_tol = (3 * U if softmax else 0.0) if f64_value else 8 * U
        drift += step_tol
        v_fin, v_ours = float(fin._portfolio_value), float(info["equity"][0]) * CASH
        r64 = math.log(v_ours / value)  # our reward before its f32 cast
        value = v_ours
        w_fin, w_ours = np.asarray(fin._final_weights[-1], np.float64), info["weights"][0].numpy()
        assert not terminal and bool(truncated[0]) == (k == T - W - 1)
        v_tol = 1e-9 + drift
        assert abs(v_ours - v_fin) <= v_tol * v_fin, (k, v_ours, v_fin)
        np.testing.assert_allclose(w_ours, w_fin, rtol=v_tol + step_tol, atol=1e-12, err_msg=f"step {k}")
        r_tol = 2 * drift + 1e-15  # a log ratio errs by at most both values' relative errors
        assert abs(r64 - float(reward)) <= 1e-9 * abs(float(reward)) + r_tol, (k, r64, reward)
        assert abs(float(r[0]) - float(reward)) <= U * abs(float(reward)) + r_tol, (k, r[0], reward)
    with contextlib.redirect_stdout(io.StringIO()):  # FinRL's terminal step: nothing moves
        _, _, terminal, _, _ = fin.step(a)
    assert terminal and float(fin._portfolio_value) == v_fin
    return seen


@pytest.mark.parametrize("model", ["wvm", "trf", None])
def test_on_the_simplex_to_1e_9(model: str | None, tmp_path: Path) -> None:
    seen = _run(model, f64_value=True, simplex_only=True, seed=3, tmp=tmp_path)
    assert seen["softmax"] == 0
    if model == "wvm":
        assert seen["refused"] > 0 and seen["accepted"] > 0, seen


@pytest.mark.parametrize("model", ["wvm", "trf", None])
def test_softmax_actions(model: str | None, tmp_path: Path) -> None:
    seen = _run(model, f64_value=True, simplex_only=False, seed=5, tmp=tmp_path)
    assert seen["softmax"] > 20


@pytest.mark.parametrize("model", ["wvm", "trf", None])
def test_finrl_f32_value(model: str | None, tmp_path: Path) -> None:
    """FinRL as usually called (a Python-number initial amount: its value in f32)."""
    _run(model, f64_value=False, simplex_only=False, seed=7, tmp=tmp_path)


def test_a_wrong_model_is_caught(tmp_path: Path) -> None:
    """The comparison has teeth: FinRL's trf against our wvm fails at the first trade."""
    saved = MODELS["trf"]
    MODELS["trf"] = "finrl_wvm"
    try:
        with pytest.raises(AssertionError):
            _run("trf", f64_value=True, simplex_only=True, seed=3, tmp=tmp_path)
    finally:
        MODELS["trf"] = saved
