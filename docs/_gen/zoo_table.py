"""The results page's "The zoo table" section and figure, from ``docs/data/zoo/`` (``zoo_runs.py``).

Per entry (a preset on an env, 5 seeds): the interquartile mean of the runs' final greedy returns
with its stratified-bootstrap 95% interval (`tritonrl.toolkit.scores`, 50,000 replicates, seed 0),
the steps to the env's threshold, whether every seed's last three evaluations stay above it, and
the published figures beside it (cited in `ZOO` and `CLEANRL`, not re-run). Used by
``docs/_gen/results.py``; the markdown depends on the data alone, so the docs test re-renders it.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ZOO_PNG = "zoo-curves.png"
REPS = 50_000
CURVE_REPS = 2_000
"""Bootstrap replicates of the table's intervals, and of the figure's bands (one per evaluation)."""
LAST = 3
"""A seed holds the threshold if its last ``LAST`` evaluations are all at or above it."""

THRESHOLDS: dict[str, tuple[float, str]] = {
    "CartPole-v1": (475.0, "registered"),
    "Acrobot-v1": (-100.0, "registered"),
    "MountainCar-v0": (-110.0, "registered"),
    "LunarLander-v3": (200.0, "registered"),
    "InvertedPendulum-v5": (950.0, "registered"),
    "Pendulum-v1": (-250.0, "none registered; the bound of the SAC and TD3 learning tests"),
}
"""The solved score of each env: gymnasium 1.4's ``reward_threshold``, or ours where it has none."""

ZOO_COMMIT = "61a0d1349fa9"
"""rl-baselines3-zoo's ``benchmark.md`` at this commit (2023-04-11): one trained agent per row,
evaluated deterministically over about 150,000 steps; mean ± std over those episodes."""
ZOO: dict[tuple[str, str], tuple[str, float, float, int]] = {
    ("dqn", "CartPole-v1"): ("dqn", 500.0, 0.0, 50_000),
    ("dqn", "Acrobot-v1"): ("dqn", -76.639, 11.752, 100_000),
    ("dqn", "MountainCar-v0"): ("dqn", -100.849, 9.925, 120_000),
    ("dqn", "LunarLander-v3"): ("dqn", 154.382, 79.241, 100_000),
    ("qrdqn", "CartPole-v1"): ("qrdqn", 500.0, 0.0, 50_000),
    ("qrdqn", "Acrobot-v1"): ("qrdqn", -69.135, 9.967, 100_000),
    ("qrdqn", "MountainCar-v0"): ("qrdqn", -106.042, 15.536, 120_000),
    ("ppo", "CartPole-v1"): ("ppo", 500.0, 0.0, 100_000),
    ("ppo", "Acrobot-v1"): ("ppo", -73.506, 18.201, 1_000_000),
    ("ppo", "LunarLander-v3"): ("ppo", 242.119, 31.823, 1_000_000),
    ("ppo-continuous", "Pendulum-v1"): ("ppo", -172.225, 104.159, 100_000),
    ("sac", "Pendulum-v1"): ("sac", -156.995, 88.714, 20_000),
    ("td3", "Pendulum-v1"): ("td3", -151.855, 90.227, 20_000),
}
"""(preset, env) -> (the zoo's algorithm, mean, std, training steps). LunarLander rows are the zoo's
``-v2`` (gymnasium 1.4 has ``-v3`` only)."""

CLEANRL_COMMIT = "fe8d8a03c41a"
"""CleanRL's docs (``docs/rl-algorithms/*.md``, ``docs/benchmark/*.md``) at this commit: the mean ±
std over 3 seeds of the *training* episodes' return at the end, not a greedy evaluation."""
CLEANRL: dict[tuple[str, str], tuple[str, float, float, int]] = {
    ("dqn", "CartPole-v1"): ("dqn.py", 488.69, 16.11, 500_000),
    ("dqn", "Acrobot-v1"): ("dqn.py", -91.54, 7.20, 500_000),
    ("dqn", "MountainCar-v0"): ("dqn.py", -194.95, 8.48, 500_000),
    ("ppo", "CartPole-v1"): ("ppo.py", 490.04, 6.12, 500_000),
    ("ppo", "Acrobot-v1"): ("ppo.py", -86.36, 1.32, 500_000),
    ("ppo-continuous", "InvertedPendulum-v5"): ("ppo_continuous_action.py, -v4", 963.09, 22.20, 1_000_000),
    ("sac", "InvertedPendulum-v5"): ("sac_continuous_action.py, -v4", 909.37, 55.66, 1_000_000),
    ("td3", "InvertedPendulum-v5"): ("td3_continuous_action.py, -v4", 968.99, 25.80, 1_000_000),
}
"""(preset, env) -> (CleanRL script, mean, std, training steps)."""


CUT = (
    "**MuJoCo** (Hopper-v5, HalfCheetah-v5, Walker2d-v5): the zoo trains 1M steps; at this machine's "
    "SAC rate (about 60-90 steps/s on one thread with evaluations) 5 seeds of one of them take 15-25 "
    "core-hours, more than the whole budget. The side-by-side SAC runs with CleanRL above (50k steps) "
    "are what there is.",
    "**BipedalWalker-v3 and LunarLanderContinuous-v3**: 0.5-1M-step zoo budgets for SAC and TD3, the "
    "same cost as MuJoCo.",
    "**MountainCarContinuous-v0**: the zoo's SAC and PPO entries explore with gSDE (state-dependent "
    "noise), which the presets do not have, and its TD3 entry runs 300k steps with "
    "Ornstein-Uhlenbeck noise; a translation without them would not be the zoo's settings.",
    "**`ppo` on MountainCar-v0**: the zoo's 1M steps with VecNormalize.",
    "**Budgets below the zoo's**: `dqn` and `double` on Acrobot-v1 run 50k steps (the zoo's 100k); "
    "every other row with a zoo figure runs the zoo's own budget.",
    "**MinAtar**: its own section above (3 seeds, 100k-250k steps).",
)
"""What the table leaves out to fit about 8 core-hours, and why (rendered under it)."""


@dataclass
class ZooEntry:
    """One preset on one env over the seeds: the evaluation curves, final evaluations and walls."""

    preset: str
    env: str
    steps: int
    tuned: str | None
    curves: dict[int, list[tuple[int, float]]]
    finals: dict[int, dict[str, Any]]
    wall_s: dict[int, float]
    command: str

    @property
    def threshold(self) -> float:
        return THRESHOLDS[self.env][0]

    def scores(self) -> list[float]:
        """Each seed's final greedy return (the mean over its held-out episodes)."""
        return [float(self.finals[s]["mean_return"]) for s in sorted(self.finals)]

    def reached(self, seed: int) -> int | None:
        """The step of the seed's first evaluation at or above the threshold (None: never)."""
        return next((step for step, v in self.curves[seed] if v >= self.threshold), None)

    def holds(self, seed: int) -> bool:
        """Whether the seed's last `LAST` evaluations are all at or above the threshold."""
        return all(v >= self.threshold for _, v in self.curves[seed][-LAST:])

    def held(self) -> int:
        """How many seeds hold the threshold (`holds`)."""
        return sum(self.holds(s) for s in self.curves)

    def second_half(self) -> tuple[int, int]:
        """``(at or above the threshold, all)`` of every seed's evaluations after half the budget."""
        after = [v for c in self.curves.values() for t, v in c if t > self.steps // 2]
        return sum(v >= self.threshold for v in after), len(after)

    def fell_back(self, seed: int) -> bool:
        """Whether one of the seed's last `LAST` evaluations is below the threshold after an earlier
        one at or above it (a collapse; a seed that reaches it within them and stays: late)."""
        first = self.reached(seed)
        return first is not None and any(
            step > first and v < self.threshold for step, v in self.curves[seed][-LAST:]
        )

    def late(self, seed: int) -> bool:
        """Whether the seed first reached the threshold within its last `LAST` evaluations and stayed."""
        return self.reached(seed) is not None and not self.holds(seed) and not self.fell_back(seed)


def _read_curve(path: Path) -> list[tuple[int, float]]:
    """A stored curve CSV (``global_step``, ``eval/mean_return``) as ``(step, return)`` pairs."""
    with path.open() as f:
        return [(int(r["global_step"]), float(r["eval/mean_return"])) for r in csv.DictReader(f)]


def load_zoo(data: Path) -> tuple[dict[str, Any], list[ZooEntry]] | None:
    """``zoo/meta.json`` and every stored entry; ``None`` where no zoo runs are stored.

    Raises:
        FileNotFoundError: a run named by ``meta.json`` is missing.
    """
    runs = Path(data) / "zoo"
    if not (runs / "meta.json").is_file():
        return None
    meta = json.loads((runs / "meta.json").read_text())
    entries = []
    for e in meta["entries"].values():
        curves, finals, walls = {}, {}, {}
        for seed in meta["seeds"]:
            stem = f"{e['preset']}-{e['env']}-s{seed}"
            curves[seed] = _read_curve(runs / f"{stem}.csv")
            finals[seed] = json.loads((runs / f"{stem}.eval.json").read_text())
            walls[seed] = float(e["wall_s"][str(seed)])
        entries.append(
            ZooEntry(e["preset"], e["env"], int(e["steps"]), e["tuned"], curves, finals, walls, e["command"])
        )
    return meta, entries


@dataclass
class ZooPeer:
    """Stable-Baselines3 itself at the zoo's settings on one env, re-run here (``zoo_peer.py``)."""

    env: str
    version: str
    steps: int
    curves: dict[int, list[tuple[int, float]]]
    finals: dict[int, float]
    wall_s: dict[int, float]


def load_zoo_peers(data: Path) -> list[ZooPeer]:
    """Every ``zoo/sb3-<env>.json`` stored by ``docs/_gen/zoo_peer.py`` (none: an empty list)."""
    peers = []
    for path in sorted((Path(data) / "zoo").glob("sb3-*.json")):
        d = json.loads(path.read_text())
        runs = {int(r["seed"]): r for r in d["runs"]}
        peers.append(
            ZooPeer(
                d["env"],
                d["sb3"],
                int(d["steps"]),
                {s: [(int(t), float(v)) for t, v in r["evals"]] for s, r in runs.items()},
                {s: float(r["final"]) for s, r in runs.items()},
                {s: float(r["wall_s"]) for s, r in runs.items()},
            )
        )
    return peers


def peer_lines(peers: list[ZooPeer], entries: list[ZooEntry]) -> list[str]:
    """The table of SB3 re-runs beside this package's ``dqn`` entry on the same env (none: no lines)."""
    if not peers:
        return []
    ours = {e.env: e for e in entries if e.preset == "dqn"}
    out = [
        "### The zoo's settings in Stable-Baselines3, re-run here",
        "",
        "The zoo's figure is one trained agent. To tell the settings from that agent, "
        "`docs/_gen/zoo_peer.py` trains Stable-Baselines3's own DQN at the zoo's settings on the same "
        "seeds, budgets and evaluation schedule as the table (its own venv, one torch thread), beside the "
        "`dqn` rows above, whose entries anneal the rate to 0 where the zoo holds it (on CartPole-v1 "
        "the zoo's settings 256 wide on 4 environments with 3-step returns, the rate from 1e-3 where the "
        "zoo holds 2.3e-3 on one; on MountainCar-v0 the zoo's settings with 3-step returns). "
        "The last column counts the evaluations in the second half of the runs at or "
        "above the threshold, over all seeds: how much of the time each side holds it, where the "
        "held column says only where the runs happened to end.",
        "",
        "| env | implementation | steps | final return, IQM (95% interval) | per seed | steps to threshold "
        "| held | second half at threshold |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for p in peers:
        sb3 = ZooEntry(
            "dqn",
            p.env,
            p.steps,
            None,
            p.curves,
            {s: {"mean_return": f} for s, f in p.finals.items()},
            p.wall_s,
            "",
        )
        sides = [(f"Stable-Baselines3 {p.version}", sb3)]
        if p.env in ours:
            sides.append(("tritonrl `dqn`", ours[p.env]))
        for name, e in sides:
            est, lo, hi = _interval(e.scores())
            seeds = sorted(e.curves)
            at, evals = e.second_half()
            out.append(
                f"| `{p.env}` | {name} | {_steps(e.steps)} | {est:.1f} ({lo:.1f} .. {hi:.1f}) | "
                f"{', '.join(f'{v:.0f}' for v in e.scores())} | {_steps_to([e.reached(s) for s in seeds])} | "
                f"{e.held()}/{len(seeds)} | {at}/{evals} |"
            )
    table_seeds = max((len(e.curves) for e in entries), default=0)
    short = [
        f"{p.env} ran seeds {', '.join(map(str, sorted(p.finals)))}"
        for p in peers
        if len(p.finals) < table_seeds
    ]
    if short:
        out += ["", f"Stable-Baselines3 on {'; on '.join(short)}: the others did not fit the session's time."]
    return [*out, ""]


def load_heldout(data: Path) -> tuple[list[int], list[tuple[str, ZooEntry]]] | None:
    """``zoo/heldout.json``'s seeds and its runs as ``(settings, entry)`` pairs (``"tuned"`` first, then
    ``"preset"``, per entry); ``None`` where none are stored."""
    path = Path(data) / "zoo" / "heldout.json"
    if not path.is_file():
        return None
    held = json.loads(path.read_text())
    seeds = [int(s) for s in held["seeds"]]
    out = []
    folder = Path(data) / "zoo" / "heldout"
    for e in held["entries"].values():
        for settings in ("tuned", "preset"):
            curves = {s: _read_curve(folder / f"{e['preset']}-{e['env']}-s{s}-{settings}.csv") for s in seeds}
            walls = {int(s): float(w) for s, w in e["wall_s"][settings].items()}
            entry = ZooEntry(e["preset"], e["env"], int(e["steps"]), settings, curves, {}, walls, "")
            out.append((settings, entry))
    return seeds, out


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def heldout_lines(
    heldout: tuple[list[int], list[tuple[str, ZooEntry]]] | None, entries: list[ZooEntry]
) -> list[str]:
    """The entries picked on the table's seeds, re-run on others at the entry and at the preset."""
    if not heldout:
        return []
    seeds, runs = heldout
    table = {(e.preset, e.env): e for e in entries}
    tuned = [e for settings, e in runs if settings == "tuned"]
    names = _and([f"`{e.preset}`" for e in tuned])
    # the table's first line of an entry lists its overrides, ", "-separated
    three = [
        e
        for e in tuned
        if re.search(r"\bn_step=3\b", getattr(table.get((e.preset, e.env)), "tuned", None) or "")
    ]
    owners = _and([f"`{e.preset}`'s" for e in three])
    three_step = f", {owners} with 3-step returns" if three else ""
    out = [
        "### The sweeps' entries on other seeds",
        "",
        f"The entries of {names} on CartPole-v1 (the preset 256 wide, its rate annealed to 0{three_step}) "
        "were picked on the table's seeds 1-5 and on probes over seeds 6-10, so the table's held column is "
        "measured where they were chosen. `zoo_runs.py heldout` re-runs each on seeds "
        f"{seeds[0]}-{seeds[-1]} at the entry and at the preset's own settings (`--no-tuned`), same budget "
        "and evaluations:",
        "",
        "| preset | env | settings | held, seeds 1-5 (the table) | held, seeds "
        f"{seeds[0]}-{seeds[-1]} | steps to threshold | collapsed | second half at threshold |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    totals = {"tuned": [0, 0], "preset": [0, 0], "table": [0, 0]}
    for settings, e in runs:
        ss = sorted(e.curves)
        reached = [e.reached(s) for s in ss]
        held, fell, (at, evals) = e.held(), sum(e.fell_back(s) for s in ss), e.second_half()
        ref = table.get((e.preset, e.env)) if settings == "tuned" else None
        first = "—"
        if ref is not None:
            first = f"{ref.held()}/{len(ref.curves)}"
            totals["table"][0] += ref.held()
            totals["table"][1] += len(ref.curves)
        totals[settings][0] += held
        totals[settings][1] += len(ss)
        out.append(
            f"| `{e.preset}` | `{e.env}` | {'entry' if settings == 'tuned' else 'preset'} | {first} | "
            f"{held}/{len(ss)} | {_steps_to(reached)} | {fell} | {at}/{evals} |"
        )
    (th, tn), (ph, pn), (eh, en) = totals["tuned"], totals["preset"], totals["table"]
    out += [
        "",
        f"Held on seeds {seeds[0]}-{seeds[-1]}: the entries **{th} of {tn}** runs, "
        f"the presets **{ph} of {pn}** (on seeds 1-5 the entries held {eh} of {en}).",
        "",
    ]
    return out


def _interval(scores: list[float], reps: int = REPS) -> tuple[float, float, float]:
    from tritonrl.toolkit.scores import bootstrap_interval

    return bootstrap_interval("iqm", scores, reps=reps, seed=0)


def _steps(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def _steps_to(reached: list[int | None]) -> str:
    """The median step at which the seeds that got there reached the threshold, and how many did."""
    hits = [r for r in reached if r is not None]
    return f"{_steps(int(statistics.median(hits)))} ({len(hits)}/{len(reached)})" if hits else "not reached"


def _published(table: dict[tuple[str, str], tuple[str, float, float, int]], e: ZooEntry) -> str:
    ref = table.get((e.preset, e.env))
    if ref is None:
        return "—"
    name, mean, sd, steps = ref
    return f"{mean:.1f} ± {sd:.1f} at {_steps(steps)} ({name})"


def verdicts(e: ZooEntry) -> dict[str, Any]:
    """What the table says of an entry: its IQM and interval, the seeds that reached the threshold
    and held it, the collapses (`ZooEntry.fell_back`), the late (reached within the last evaluations,
    then held) and the comparison with the zoo."""
    est, lo, hi = _interval(e.scores())
    seeds = sorted(e.curves)
    reached = [e.reached(s) for s in seeds]
    zoo = ZOO.get((e.preset, e.env))
    return {
        "iqm": (est, lo, hi),
        "reached": reached,
        "held": e.held(),
        "collapsed": [s for s in seeds if e.fell_back(s)],
        "late": [s for s in seeds if e.late(s)],
        "zoo_met": None if zoo is None else bool(est >= zoo[1] and e.steps <= zoo[3]),
    }


def section(
    runs: tuple[dict[str, Any], list[ZooEntry]] | None,
    img: str,
    peers: list[ZooPeer] | None = None,
    heldout: tuple[list[int], list[tuple[str, ZooEntry]]] | None = None,
) -> list[str]:
    """The section's markdown lines (none without stored runs); ``peers``: the SB3 re-runs;
    ``heldout``: the sweeps' entries on other seeds (`load_heldout`)."""
    if runs is None:
        return []
    meta, entries = runs
    rows, met, published, collapses, lates, runs_n, held_n = [], 0, 0, [], [], 0, 0
    for e in entries:
        v = verdicts(e)
        est, lo, hi = v["iqm"]
        steps_to = _steps_to(v["reached"])
        if v["zoo_met"] is not None:
            published += 1
            met += v["zoo_met"]
        collapses += [f"`{e.preset}` on `{e.env}` seed {s}" for s in v["collapsed"]]
        lates += [f"`{e.preset}` on `{e.env}` seed {s}" for s in v["late"]]
        runs_n, held_n = runs_n + len(e.curves), held_n + v["held"]
        zoo = _published(ZOO, e)
        if v["zoo_met"] is not None:
            zoo += " **met**" if v["zoo_met"] else " not met"
        wall = statistics.median(e.wall_s.values())
        rows.append(
            f"| `{e.preset}` | `{e.env}` | {'tuned' if e.tuned else 'preset'} | {_steps(e.steps)} | "
            f"{est:.1f} ({lo:.1f} .. {hi:.1f}) | {steps_to} | {v['held']}/{len(e.curves)} | {zoo} | "
            f"{_published(CLEANRL, e)} | {wall / 60:.1f} min |"
        )
    core_hours = sum(sum(e.wall_s.values()) for e in entries) / 3600
    seeds = meta["seeds"]
    thresholds = ", ".join(
        f"{env} {t:g}" + ("" if why == "registered" else f" ({why})") for env, (t, why) in THRESHOLDS.items()
    )
    return [
        "## The zoo table",
        "",
        f"{len(entries)} (preset, env) entries, {len(seeds)} seeds each ({', '.join(map(str, seeds))}), "
        "each at its tuned settings where the package has an entry (`agents/*/tuned.py`, from "
        "rl-baselines3-zoo's files: [Training](training.md#per-environment-settings)), else at the "
        f"preset's. One torch thread a run, up to {meta['jobs']} runs at a time (`docs/_gen/zoo_runs.py`): "
        f"the runs' walls sum to {core_hours:.1f} hours. The wall column is each run's own time on a "
        "machine it shared with other runs and jobs (at times three processes to a core): not a speed "
        "figure.",
        "",
        f"- **Final return**: each run's last checkpoint played greedily over {meta['episodes']} "
        "episodes on held-out seeds (`tritonrl evaluate`), its mean the run's score; the column gives "
        "the interquartile mean over seeds with its 95% stratified-bootstrap interval "
        f"({REPS:,} replicates; with 5 runs the IQM is the mean of the middle three).",
        f"- **Steps to threshold**: the first greedy evaluation during training (10 episodes) at or "
        f"above the solved score ({thresholds}); the median over the seeds that reached it.",
        f"- **Held**: seeds whose last {LAST} evaluations are all at or above the threshold. A seed with "
        f"one of its last {LAST} below the threshold after an evaluation at or above it has *collapsed*; "
        "one that first reached it within them and stayed is *late*.",
        f"- **Zoo**: rl-baselines3-zoo's `benchmark.md` (commit `{ZOO_COMMIT}`): one agent per row, "
        "evaluated deterministically, mean ± std over its episodes, at its own budget; **met** when this "
        "entry's IQM is at or above that mean at the zoo's budget or less. "
        f"**CleanRL**: its docs (commit `{CLEANRL_COMMIT}`), the training episodes' return over 3 seeds "
        "at its budget (not a greedy evaluation). Both are cited, not re-run.",
        "",
        f"![Greedy evaluation return against environment steps per entry, IQM over seeds with its "
        f"95% bootstrap band]({img}/{ZOO_PNG})",
        "",
        "| preset | env | settings | steps | final return, IQM (95% interval) | steps to threshold | held | "
        "zoo | CleanRL | wall a run, median |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: |",
        *rows,
        "",
        f"Entries whose IQM reaches the zoo's published mean at the zoo's budget or less: **{met} of "
        f"{published}** that the zoo publishes. Runs that held the threshold over their last {LAST} "
        f"evaluations: **{held_n} of {runs_n}**. Collapses: "
        + (", ".join(collapses) if collapses else "**none**")
        + ". Late: "
        + (", ".join(lates) if lates else "none")
        + ".",
        "",
        *peer_lines(peers or [], entries),
        *heldout_lines(heldout, entries),
        "Left out to fit the budget:",
        "",
        *(f"- {line}" for line in CUT),
        "",
        "Reproduce one entry (the commands are in `docs/data/zoo/meta.json`), then evaluate its runs:",
        "",
        "```bash",
        entries[0].command.replace("python -m tritonrl", "tritonrl").replace("RUN_DIR", "runs/zoo/s1")
        if entries
        else "",
        "tritonrl evaluate runs/zoo/s1 runs/zoo/s2 runs/zoo/s3 runs/zoo/s4 runs/zoo/s5",
        "```",
        "",
    ]


def draw(plt: Any, runs: tuple[dict[str, Any], list[ZooEntry]], path: Path, columns: int = 4) -> Path:
    """One panel per entry: the IQM over seeds of each evaluation, its bootstrap band, the threshold."""
    _, entries = runs
    cols = min(columns, len(entries))
    rows = math.ceil(len(entries) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for ax in axes.flat[len(entries) :]:
        ax.set_visible(False)
    for ax, e in zip(axes.flat, entries, strict=False):
        seeds = sorted(e.curves)
        n = min(len(e.curves[s]) for s in seeds)
        x = [e.curves[seeds[0]][i][0] for i in range(n)]
        bands = [_interval([e.curves[s][i][1] for s in seeds], CURVE_REPS) for i in range(n)]
        ax.fill_between(x, [b[1] for b in bands], [b[2] for b in bands], alpha=0.25, linewidth=0)
        ax.plot(x, [b[0] for b in bands], linewidth=1.6)
        ax.axhline(e.threshold, color="gray", linestyle="--", linewidth=0.8)
        ax.set_title(f"{e.preset} on {e.env}", fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.set_ylabel("greedy return", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("IQM over 5 seeds and its 95% stratified-bootstrap band; dashed: the threshold", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.985))  # the title above the first row's
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
