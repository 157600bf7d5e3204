"""docs/_gen/zoo_table.py: what the zoo table says of an entry (threshold reached, held, collapsed,
the zoo's mean met) on hand-made curves, and that the section renders one row per entry."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "_gen" / "zoo_table.py"


@pytest.fixture(scope="module")
def zoo():
    spec = importlib.util.spec_from_file_location("tritonrl_docs_zoo_table_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _entry(zoo, preset: str, env: str, steps: int, curves: dict[int, list[float]], finals: list[float]):
    every = steps // len(next(iter(curves.values())))
    return zoo.ZooEntry(
        preset,
        env,
        steps,
        None,
        {s: [((i + 1) * every, v) for i, v in enumerate(c)] for s, c in curves.items()},
        {s: {"mean_return": f} for s, f in zip(curves, finals, strict=True)},
        {s: 60.0 for s in curves},
        "python -m tritonrl train --agent X --run-dir RUN_DIR",
    )


def test_reached_held_and_collapsed(zoo) -> None:
    curves = {
        1: [100, 480, 500, 500, 490],  # reached at 20k, held
        2: [100, 200, 500, 300, 500],  # reached at 30k, one of its last three below: collapsed
        3: [100, 200, 300, 400, 450],  # never reached: not a collapse
    }
    e = _entry(zoo, "dqn", "CartPole-v1", 50_000, curves, [500.0, 480.0, 450.0])
    assert [e.reached(s) for s in (1, 2, 3)] == [20_000, 30_000, None]
    assert [e.holds(s) for s in (1, 2, 3)] == [True, False, False]
    v = zoo.verdicts(e)
    assert v["held"] == 1 and v["collapsed"] == [2]
    assert v["iqm"][0] == pytest.approx((500 + 480 + 450) / 3)  # 3 runs: floor(0.75) = 0 cut, the mean
    assert v["zoo_met"] is False  # the zoo's 500 at 50k


def test_a_seed_that_reaches_the_threshold_within_its_last_evaluations_is_late_not_collapsed(zoo) -> None:
    curves = {
        1: [100, 100, 100, 500, 500],  # reached at 40k, inside its last three, and stayed: late
        2: [500, 100, 100, 100, 100],  # reached at 10k, below from 20k on: collapsed
        3: [100, 100, 480, 470, 500],  # reached at 30k, 470 after it: collapsed (and late is not)
        4: [100, 100, 100, 100, 500],  # reached at the last evaluation: late
    }
    e = _entry(zoo, "dqn", "CartPole-v1", 50_000, curves, [500.0, 100.0, 500.0, 500.0])
    assert [e.fell_back(s) for s in (1, 2, 3, 4)] == [False, True, True, False]
    v = zoo.verdicts(e)
    assert v["held"] == 0 and v["collapsed"] == [2, 3] and v["late"] == [1, 4]
    lines = zoo.section(({"seeds": [1, 2, 3, 4], "jobs": 2, "episodes": 30}, [e]), "img")
    summary = next(line for line in lines if line.startswith("Entries whose IQM"))
    assert "**0 of 4**" in summary and "seed 2, `dqn` on `CartPole-v1` seed 3. Late:" in summary


def test_the_zoo_is_met_only_at_its_budget_or_less(zoo) -> None:
    curves = {s: [-90.0, -80.0, -75.0] for s in (1, 2, 3, 4, 5)}
    finals = [-70.0, -72.0, -74.0, -76.0, -78.0]  # IQM -74, above the zoo's -76.6 at 100k
    assert zoo.verdicts(_entry(zoo, "dqn", "Acrobot-v1", 50_000, curves, finals))["zoo_met"] is True
    assert zoo.verdicts(_entry(zoo, "dqn", "Acrobot-v1", 200_000, curves, finals))["zoo_met"] is False
    assert zoo.verdicts(_entry(zoo, "double", "Acrobot-v1", 50_000, curves, finals))["zoo_met"] is None


def test_section_has_a_row_per_entry_and_lists_collapses(zoo) -> None:
    held = _entry(zoo, "ppo", "CartPole-v1", 100_000, {s: [500.0] * 4 for s in (1, 2)}, [500.0, 500.0])
    fell = _entry(zoo, "dqn", "CartPole-v1", 50_000, {1: [500, 100, 500], 2: [500] * 3}, [100.0, 500.0])
    lines = zoo.section(({"seeds": [1, 2], "jobs": 2, "episodes": 30}, [held, fell]), "img")
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == 2 and rows[0].startswith("| `ppo` | `CartPole-v1` | preset | 100k |")
    assert "| 2/2 |" in rows[0] and "| 1/2 |" in rows[1]
    assert any("`dqn` on `CartPole-v1` seed 1" in line for line in lines)
    assert zoo.section(None, "img") == []


def test_sb3_re_runs_render_beside_the_dqn_entry(zoo, tmp_path: Path) -> None:
    """A stored ``sb3-<env>.json`` loads, and renders as one row beside this package's `dqn` row."""
    import json

    (tmp_path / "zoo").mkdir()
    runs = [
        {"seed": s, "final": f, "evals": [[25_000, 500.0], [50_000, last]], "wall_s": 100.0}
        for s, f, last in ((1, 500.0, 500.0), (2, 120.0, 90.0), (3, 480.0, 480.0))
    ]
    record = {"env": "CartPole-v1", "sb3": "2.9.2", "steps": 50_000, "runs": runs}
    (tmp_path / "zoo" / "sb3-CartPole-v1.json").write_text(json.dumps(record))
    peers = zoo.load_zoo_peers(tmp_path)
    assert len(peers) == 1 and peers[0].finals == {1: 500.0, 2: 120.0, 3: 480.0}
    ours = _entry(zoo, "dqn", "CartPole-v1", 50_000, {1: [500, 500], 2: [500, 100], 3: [100, 200]}, [1, 2, 3])
    rows = [line for line in zoo.peer_lines(peers, [ours]) if line.startswith("| `CartPole-v1`")]
    assert rows[0].startswith("| `CartPole-v1` | Stable-Baselines3 2.9.2 | 50k | 366.7 (")  # 3 runs: the mean
    assert rows[0].endswith("| 500, 120, 480 | 25k (3/3) | 2/3 | 2/3 |")  # second half: 500, 90, 480
    assert rows[1].startswith("| `CartPole-v1` | tritonrl `dqn` | 50k | 2.0 (")
    assert rows[1].endswith("| 25k (2/3) | 1/3 | 1/3 |")  # second half: 500, 100, 200
    assert zoo.peer_lines([], [ours]) == [] and zoo.load_zoo_peers(tmp_path / "none") == []


def test_held_out_seeds_render_the_entry_beside_the_preset(zoo, tmp_path: Path) -> None:
    """A stored ``heldout.json`` loads both settings of an entry, and its rows count held runs,
    collapses and the second half's evaluations at the threshold, beside the table's own held."""
    import csv
    import json

    folder = tmp_path / "zoo" / "heldout"
    folder.mkdir(parents=True)
    curves = {
        "tuned": {6: [100.0, 500.0, 500.0, 500.0], 7: [100.0, 500.0, 200.0, 500.0]},  # held; collapsed
        "preset": {6: [100.0, 100.0, 100.0, 100.0], 7: [500.0, 500.0, 500.0, 480.0]},  # never; held
    }
    for settings, runs in curves.items():
        for seed, values in runs.items():
            with (folder / f"dqn-CartPole-v1-s{seed}-{settings}.csv").open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["global_step", "eval/mean_return"])
                w.writerows([((i + 1) * 12_500, v) for i, v in enumerate(values)])
    walls = {"tuned": {"6": 60.0, "7": 61.0}, "preset": {"6": 50.0, "7": 51.0}}
    record = {"dqn/CartPole-v1": {"preset": "dqn", "env": "CartPole-v1", "steps": 50_000, "wall_s": walls}}
    (tmp_path / "zoo" / "heldout.json").write_text(json.dumps({"seeds": [6, 7], "entries": record}))

    held = zoo.load_heldout(tmp_path)
    assert held is not None and held[0] == [6, 7] and [s for s, _ in held[1]] == ["tuned", "preset"]
    table = _entry(zoo, "dqn", "CartPole-v1", 50_000, {1: [500.0] * 4, 2: [100.0] * 4}, [500.0, 100.0])
    lines = zoo.heldout_lines(held, [table])
    rows = [line for line in lines if line.startswith("| `dqn`")]
    assert rows[0] == "| `dqn` | `CartPole-v1` | entry | 1/2 | 1/2 | 25k (2/2) | 1 | 3/4 |"
    assert rows[1] == "| `dqn` | `CartPole-v1` | preset | — | 1/2 | 12.5k (1/2) | 0 | 2/4 |"
    summary = "the entries **1 of 2** runs, the presets **1 of 2** (on seeds 1-5 the entries held 1 of 2)"
    assert any(summary in line for line in lines)
    assert not any("3-step" in line for line in lines)  # the table's entry names no n_step
    three = dataclasses.replace(table, tuned="tuned settings for dqn on CartPole-v1 (x): lr=0.001, n_step=3")
    assert any(
        "annealed to 0, `dqn`'s with 3-step returns)" in line for line in zoo.heldout_lines(held, [three])
    )
    assert zoo.load_heldout(tmp_path / "none") is None and zoo.heldout_lines(None, [table]) == []
