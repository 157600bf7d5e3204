"""Write ``docs/pages/results.md`` and its figures from the stored data under ``docs/data/``.

Inputs (nothing is measured here):

- ``docs/data/bench.json``: ``tritonrl bench --quick --json docs/data/bench.json`` (rows, machine, date);
- ``docs/data/learning/``: the learning runs of ``docs/_gen/runs.py`` (``<group>-s<seed>.csv`` metrics,
  ``<group>-s<seed>.test.json`` market test reports, ``meta.json``);
- ``docs/data/peers/`` (optional): the runs of ``docs/_gen/peer_runs.py`` beside the unmodified
  CleanRL scripts (``<impl>-<group>-s<seed>.csv`` training episodes, ``meta.json``);
- ``docs/data/minatar/`` (optional): the MinAtar runs of ``docs/_gen/minatar_runs.py``
  (``<group>-s<seed>.csv`` metrics, ``meta.json``);
- ``docs/data/zoo/`` (optional): the zoo table's runs of ``docs/_gen/zoo_runs.py`` (section and figure:
  ``docs/_gen/zoo_table.py``).

Outputs: ``results.md`` in the pages folder and PNGs under ``img/results/`` beside it (the learning
curves, one ratio chart per benchmark)::

    python docs/_gen/results.py [--data docs/data] [--pages docs/pages]

The markdown depends on the data alone (:func:`render`, no matplotlib), so a test can regenerate it
and compare it with the committed page; the figures need matplotlib (:func:`draw`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
PAGES = ROOT / "docs" / "pages"
IMG = "img/results"
"""Figures' folder, relative to the pages folder (and so to ``results.md``)."""
CURVES_PNG = "learning-curves.png"
CURVE_COLUMNS = 3  # panels per row of the learning-curve figure
PEERS_PNG = "peer-curves.png"
PEER_IMPLS = ("tritonrl", "cleanrl")
PEER_BINS = 10
"""Windows of training episodes per run in the peer table and figure (the last one is the final score)."""
EVAL = "eval/mean_return"
TRAIN = "charts/episodic_return"
TRAIN_LENGTH = "charts/episodic_length"
MINATAR_PNG = "minatar-curves.png"
MINATAR_STEPS = (100_000, 250_000)
"""The steps at which the MinAtar table compares (those a group's budget reaches)."""
MINATAR_WINDOW = 0.1
"""The MinAtar score at step S: the training return over the steps (S - 0.1 S, S]."""
PUBLISHED_DQN: dict[tuple[str, int], tuple[float, float]] = {
    ("MinAtar/Breakout-v0", 100_000): (4.0, 5.5),
    ("MinAtar/Breakout-v0", 250_000): (6.5, 7.5),
    ("MinAtar/SpaceInvaders-v0", 100_000): (15.0, 21.0),
    ("MinAtar/SpaceInvaders-v0", 250_000): (21.0, 24.0),
}
"""Young & Tian (2019), DQN's learning curves (the MinAtar repository's ``img/learning_curves.gif``:
the training return as a moving average over 100 episodes, mean of 30 runs, all 6 actions, sticky
actions 0.1): the range the curve spans at the step, read off the figure (there is no table)."""


def _zoo() -> Any:
    """``docs/_gen/zoo_table.py`` as a module (it lives beside this file, outside the packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tritonrl_docs_zoo_table", Path(__file__).with_name("zoo_table.py")
    )
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return module


@dataclass
class Group:
    """One preset on one environment over several seeds: each seed's ``(step, eval return)`` points."""

    name: str
    agent: str
    env: str
    steps: int
    eval_every: int
    threshold: float | None
    curves: dict[int, list[tuple[int, float]]]
    reports: dict[int, dict[str, Any]]
    wall_s: dict[int, float]
    flags: tuple[str, ...] = ()
    """Extra ``train`` flags of its runs (``--overlap``)."""
    machine: dict[str, Any] | None = None
    """Where and when its runs ran, if apart from the others (``runs.py --only``); None: ``meta.json``'s."""

    @property
    def label(self) -> str:
        """The preset and its extra flags, as the tables name the group."""
        return " ".join((self.agent, *self.flags))

    @property
    def mode(self) -> str:
        """``overlapped`` or ``sequential`` (the loop that ran it)."""
        return "overlapped" if "--overlap" in self.flags else "sequential"


def load_runs(data: Path = DATA) -> tuple[dict[str, Any], list[Group]]:
    """``meta.json`` and every group's per-seed greedy-evaluation curves (and market test reports).

    Raises:
        FileNotFoundError: ``meta.json`` or a seed's ``.csv`` is missing.
    """
    runs = Path(data) / "learning"
    meta = json.loads((runs / "meta.json").read_text())
    groups = []
    for g in meta["groups"]:
        curves, reports, walls = {}, {}, {}
        for seed in meta["seeds"]:
            stem = f"{g['name']}-s{seed}"
            with (runs / f"{stem}.csv").open() as f:
                curves[seed] = [
                    (int(row["global_step"]), float(row[EVAL])) for row in csv.DictReader(f) if row.get(EVAL)
                ]
            report = runs / f"{stem}.test.json"
            if report.is_file():
                reports[seed] = json.loads(report.read_text())
            walls[seed] = float(meta["wall_s"][stem])
        groups.append(
            Group(
                g["name"],
                g["agent"],
                g["env"],
                int(g["steps"]),
                int(g["eval_every"]),
                g["threshold"],
                curves,
                reports,
                walls,
                tuple(g.get("flags", ())),
                g.get("machine"),
            )  # fmt: skip
        )
    return meta, groups


@dataclass
class PeerGroup:
    """One algorithm on one environment, tritonrl beside the CleanRL script, over several seeds."""

    name: str
    agent: str
    env: str
    steps: int
    episodes: dict[str, dict[int, list[tuple[int, float]]]]
    """``impl -> seed -> (step, training episode return)``."""
    wall_s: dict[str, dict[int, float]]

    def binned(self, impl: str, seed: int) -> list[float | None]:
        """The mean training return in each of :data:`PEER_BINS` equal windows of steps (None
        where no episode ended in a window)."""
        width = self.steps / PEER_BINS
        sums = [[0.0, 0] for _ in range(PEER_BINS)]
        for step, ret in self.episodes[impl][seed]:
            b = min(PEER_BINS - 1, int(step // width))
            sums[b][0] += ret
            sums[b][1] += 1
        return [total / n if n else None for total, n in sums]


def _optional_meta(runs: Path) -> dict[str, Any] | None:
    """``runs/meta.json`` of an optional data folder, ``None`` where it is not stored."""
    meta = runs / "meta.json"
    return json.loads(meta.read_text()) if meta.is_file() else None


def load_peers(data: Path = DATA) -> tuple[dict[str, Any], list[PeerGroup]] | None:
    """``peers/meta.json`` and every group's per-implementation, per-seed training episodes;
    ``None`` where no peer runs are stored.

    Raises:
        FileNotFoundError: a run named by ``meta.json`` is missing.
    """
    runs = Path(data) / "peers"
    meta = _optional_meta(runs)
    if meta is None:
        return None
    groups = []
    for g in meta["groups"]:
        episodes: dict[str, dict[int, list[tuple[int, float]]]] = {}
        walls: dict[str, dict[int, float]] = {}
        for impl in PEER_IMPLS:
            episodes[impl], walls[impl] = {}, {}
            for seed in meta["seeds"]:
                stem = f"{impl}-{g['name']}-s{seed}"
                with (runs / f"{stem}.csv").open() as f:
                    episodes[impl][seed] = [
                        (int(r["global_step"]), float(r["episodic_return"])) for r in csv.DictReader(f)
                    ]
                walls[impl][seed] = float(meta["wall_s"][stem])
        groups.append(PeerGroup(g["name"], g["agent"], g["env"], int(meta["steps"]), episodes, walls))
    return meta, groups


@dataclass
class MinAtarGroup:
    """One pixel preset on one MinAtar game over several seeds: per seed, each log interval's
    training return as ``(step, return, episodes)`` (the mean return of the episodes that ended in
    it and about how many did: the steps since the previous interval with episodes over their mean
    length, exact with one env but for the episodes cut by an interval's end), and the greedy
    evaluations as ``(step, return)``."""

    name: str
    agent: str
    env: str
    steps: int
    train: dict[int, list[tuple[int, float, float]]]
    evals: dict[int, list[tuple[int, float]]]
    wall_s: dict[int, float]

    def score(self, seed: int, step: int) -> float | None:
        """The mean training return of the episodes that ended at steps in
        ``(step - MINATAR_WINDOW * step, step]``: the intervals logged there, each weighted by its
        episodes; None if none was logged."""
        lo = step - MINATAR_WINDOW * step
        rows = [(r, n) for s, r, n in self.train[seed] if lo < s <= step]
        total = sum(n for _, n in rows)
        return sum(r * n for r, n in rows) / total if total > 0 else None

    def eval_at(self, seed: int, step: int) -> float | None:
        """The greedy evaluation logged nearest to ``step`` (None without one)."""
        if not self.evals[seed]:
            return None
        return min(self.evals[seed], key=lambda p: abs(p[0] - step))[1]


def load_minatar(data: Path = DATA) -> tuple[dict[str, Any], list[MinAtarGroup]] | None:
    """``minatar/meta.json`` and every group's per-seed training returns and greedy evaluations;
    ``None`` where no MinAtar runs are stored.

    Raises:
        FileNotFoundError: a run named by ``meta.json`` is missing.
    """
    runs = Path(data) / "minatar"
    meta = _optional_meta(runs)
    if meta is None:
        return None
    groups = []
    for g in meta["groups"]:
        train: dict[int, list[tuple[int, float, float]]] = {}
        evals: dict[int, list[tuple[int, float]]] = {}
        walls: dict[int, float] = {}
        for seed in meta["seeds"]:
            stem = f"{g['name']}-s{seed}"
            with (runs / f"{stem}.csv").open() as f:
                rows = list(csv.DictReader(f))
            train[seed], before = [], 0
            for r in rows:
                step = int(r["global_step"])
                if r.get(TRAIN):  # the steps since the last logged episodes were these episodes' (1 env)
                    episodes = (step - before) / max(float(r[TRAIN_LENGTH]), 1.0)
                    train[seed].append((step, float(r[TRAIN]), episodes))
                    before = step
            evals[seed] = [(int(r["global_step"]), float(r[EVAL])) for r in rows if r.get(EVAL)]
            walls[seed] = float(meta["wall_s"][stem])
        groups.append(MinAtarGroup(g["name"], g["agent"], g["env"], int(g["steps"]), train, evals, walls))
    return meta, groups


def load_bench(data: Path = DATA) -> dict[str, Any]:
    """The stored ``tritonrl bench --json`` document."""
    return json.loads((Path(data) / "bench.json").read_text())


def steps_to_threshold(curve: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The first evaluation step whose greedy return reaches ``threshold``; None if none does."""
    return next((step for step, ret in curve if ret >= threshold), None)


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:,.0f}"


def _mean_sd(xs: Sequence[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.1f} ± {sd:.1f}"


def _machine(info: dict[str, Any]) -> str:
    full = info.get("commit") or "unknown"
    commit = full[:12] + (" + uncommitted changes" if full.endswith("+dirty") else "")
    triton = info.get("triton") or "not installed"
    return (
        f"{info['device']}, {info['cpu_count']} CPUs, torch {info['torch']} ({info['torch_threads']} thread"
        f"{'s' if info['torch_threads'] != 1 else ''}), triton {triton}, Python {info['python']}, "
        f"commit {commit}, {info['date'][:10]}"
    )


def _no_tuned(command: str) -> str:
    """``command`` (a ``tritonrl train`` line) with ``--no-tuned`` after ``train``, once."""
    return command if "--no-tuned" in command else command.replace(" train ", " train --no-tuned ", 1)


def _learning_tables(meta: dict[str, Any], groups: Sequence[Group]) -> list[str]:
    seeds = meta["seeds"]
    out = [
        "| preset | env | steps | solved | steps to threshold, per seed |"
        " median | final return (mean ± sd) | wall, median |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for g in groups:
        finals = [g.curves[s][-1][1] for s in seeds]
        wall = f"{statistics.median(g.wall_s.values()):.0f} s"
        if g.threshold is None:
            out.append(
                f"| `{g.label}` | `{g.env}` | {g.steps:,} | (no threshold) | | "
                f"| {_mean_sd(finals)} | {wall} |"
            )
            continue
        hits = [steps_to_threshold(g.curves[s], g.threshold) for s in seeds]
        reached = [h for h in hits if h is not None]
        per_seed = ", ".join("not reached" if h is None else f"{h:,}" for h in hits)
        median = f"{statistics.median(reached):,.0f}" if len(reached) == len(hits) else "n/a"
        out.append(
            f"| `{g.label}` | `{g.env}` | {g.steps:,} | {len(reached)}/{len(hits)} (≥ {g.threshold:g}) "
            f"| {per_seed} | {median} | {_mean_sd(finals)} | {wall} |"
        )
    return out


def _market_tables(groups: Sequence[Group]) -> list[str]:
    out: list[str] = []
    for g in groups:
        if not g.reports:
            continue
        period = next(iter(g.reports.values()))["period"]
        out += [
            f"### `{g.label}` on `{g.env}`: the held-out test period",
            "",
            f"The test period ({period['start'][:10]} to {period['end'][:10]}, "
            f"{period['decisions']} decisions) "
            "follows the training and validation periods and is scored once, at the end of each run. "
            "Random: the mean over "
            f"{next(iter(g.reports.values()))['random'].get('runs', 'several')} uniformly random policies.",
            "",
            "| seed | return | Sharpe (± s.e.) | max drawdown | turnover "
            "| buy and hold: return, Sharpe "
            "| random: Sharpe |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for seed, r in sorted(g.reports.items()):
            a, b, rnd = r["agent"], r["buy_and_hold"], r["random"]
            out.append(
                f"| {seed} | {a['total_return']:+.1%} | {a['sharpe']:.2f} ± {r['sharpe_stderr']:.2f} "
                f"| {a['max_drawdown']:.1%} | {a['turnover']:.0f} "
                f"| {b['total_return']:+.1%}, {b['sharpe']:.2f} "
                f"| {rnd['sharpe']:.2f} |"
            )
        out.append("")
    return out


def _peer_section(peers: tuple[dict[str, Any], list[PeerGroup]] | None) -> list[str]:
    if peers is None:
        return []
    meta, groups = peers
    seeds = meta["seeds"]
    last = f"{meta['steps'] * (PEER_BINS - 1) // PEER_BINS:,}-{meta['steps']:,}"
    commit = (meta.get("cleanrl_commit") or "unknown")[:12]
    out = [
        "## Side by side with CleanRL",
        "",
        f"The preset and the unmodified CleanRL script of the same algorithm (CleanRL commit `{commit}`, "
        f"at its defaults), {meta['steps']:,} environment steps, {len(seeds)} seeds "
        f"({', '.join(map(str, seeds))}), one CPU thread each, two runs at a time "
        "(`docs/_gen/peer_runs.py`). Both score the **training** episodes (the exploring policy's "
        "return, what CleanRL reports); tritonrl logs the mean of the episodes that ended in each log "
        "interval. CleanRL's scripts pin gymnasium 0.29, which has the MuJoCo `-v4` tasks only, so "
        "both sides ran `-v4`. The figure shows the mean training return in windows of "
        f"{meta['steps'] // PEER_BINS:,} steps, the line the mean over seeds, the band their range.",
        "",
        f"![Training return against environment steps, tritonrl beside CleanRL]({IMG}/{PEERS_PNG})",
        "",
        f"| algorithm | env | implementation | return over steps {last}, per seed | mean ± sd "
        "| wall, median |",
        "| --- | --- | --- | --- | ---: | ---: |",
    ]
    for g in groups:
        for impl in PEER_IMPLS:
            finals = [g.binned(impl, s)[-1] for s in seeds]
            scored = [f for f in finals if f is not None]
            per_seed = ", ".join("n/a" if f is None else f"{f:,.0f}" for f in finals)
            wall = statistics.median(g.wall_s[impl].values())
            name = "tritonrl `" + g.agent + "`" if impl == "tritonrl" else "CleanRL"
            mean = _mean_sd(scored) if scored else "n/a"
            out.append(f"| {g.agent.upper()} | `{g.env}` | {name} | {per_seed} | {mean} | {wall:,.0f} s |")
    out += [
        "",
        f"Where: {_machine(meta['machine'])}. The wall times are not a speed comparison: the runs "
        "shared the machine with each other and with other jobs, and tritonrl's include its greedy "
        "evaluations (5 episodes every tenth of the run); `benchmarks/sac_loop.py` times the two "
        "loops side by side ([SAC and TD3](sac.md#speed)).",
        "",
    ]
    return out


def _minatar_section(runs: tuple[dict[str, Any], list[MinAtarGroup]] | None) -> list[str]:
    if runs is None:
        return []
    meta, groups = runs
    seeds = meta["seeds"]
    core_hours = sum(statistics.median(g.wall_s.values()) / g.steps * 1e6 * len(seeds) for g in groups) / 3600
    out = [
        "## MinAtar",
        "",
        f"`dqn-minatar` and `rainbow-minatar` ([Pixel observations](pixels.md#presets)) on two MinAtar "
        f"games, {len(seeds)} seeds ({', '.join(map(str, seeds))}), one CPU thread each, two runs at a "
        "time (`docs/_gen/minatar_runs.py`). The games are the `-v0` ids (all 6 actions, sticky "
        "actions 0.1), as in the runs Young & Tian (2019) published. Their DQN ran 5M steps (frames, "
        "in MinAtar); this machine gives "
        + ", ".join(sorted({f"`{g.agent}` {g.steps:,}" for g in groups}))
        + " steps per run (the table's last column gives the minutes; at those rates, 1M steps of "
        f"every group and seed would take about {core_hours:.0f} core-hours), so the table compares at "
        "the same step, early in the published curves.",
        "",
        "The score at step S is the **training** return (the exploring policy's, what the paper "
        f"plots) of the episodes that ended in the last {MINATAR_WINDOW:.0%} of the steps up to S (from "
        "the log intervals there: each logs the mean return and length of the episodes that ended "
        "in it, weighted here by its steps over that length); the paper plots a moving "
        "average over 100 episodes, which spans a similar number of steps on these games. The "
        "published column is the range DQN's curve spans at that step in the paper's figure (the "
        "MinAtar repository's `img/learning_curves.gif`: the mean of 30 runs; read off the figure, "
        "there is no table). Differences to keep in mind: the presets use Adam at the paper's "
        "learning rate where DQN used centred RMSProp; no Rainbow curve at these steps was published "
        "for these settings, so `rainbow-minatar` stands beside DQN's.",
        "",
        f"![Training return against environment steps on MinAtar]({IMG}/{MINATAR_PNG})",
        "",
        "| game | preset | step | training return, per seed | mean ± sd | Young & Tian's DQN "
        "| greedy eval. (mean ± sd) | wall, median |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for g in sorted(groups, key=lambda g: (g.env, g.agent)):
        for step in (s for s in MINATAR_STEPS if s <= g.steps):
            scores = [g.score(seed, step) for seed in seeds]
            scored = [x for x in scores if x is not None]
            per_seed = ", ".join("n/a" if x is None else f"{x:.1f}" for x in scores)
            published = PUBLISHED_DQN.get((g.env, step))
            pub = "n/a" if published is None else f"{published[0]:g} to {published[1]:g}"
            evals = [x for x in (g.eval_at(seed, step) for seed in seeds) if x is not None]
            wall = statistics.median(g.wall_s.values()) / 60
            out.append(
                f"| `{g.env}` | `{g.agent}` | {step:,} | {per_seed} | "
                f"{_mean_sd(scored) if scored else 'n/a'} | {pub} | "
                f"{_mean_sd(evals) if evals else 'n/a'} | {wall:.0f} min |"
            )
    out += [
        "",
        f"Where: {_machine(meta['machine'])}. The greedy evaluations play 10 whole games with the "
        "exploration off; the wall times include them and were taken two runs at a time.",
        "",
    ]
    return out


def _bench_tables(bench: dict[str, Any]) -> list[str]:
    out: list[str] = []
    rows = bench["rows"]
    for name in dict.fromkeys(r["benchmark"] for r in rows):
        mine = [r for r in rows if r["benchmark"] == name]
        out += [f"### `{name}`", ""]
        if any(r["ratio"] not in (None, 1.0) for r in mine):  # the rule of plot_ratios
            out += [f"![{name}: ratios against the baseline]({IMG}/bench-{name}.png)", ""]
        out += [
            "| case | implementation | value | unit | ratio | note |",
            "| --- | --- | ---: | --- | ---: | --- |",
        ]
        for r in mine:
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}×"
            note = r["note"].replace("|", "\\|")
            out.append(f"| {r['case']} | {r['impl']} | {_num(r['value'])} | {r['unit']} | {ratio} | {note} |")
        out.append("")
    skipped = bench.get("skipped") or {}
    if skipped:
        out += ["Skipped: " + "; ".join(f"`{k}` ({v})" for k, v in sorted(skipped.items())) + ".", ""]
    return out


def render(data: Path = DATA) -> str:
    """The whole ``results.md`` from the stored data (deterministic: the same data, the same text)."""
    meta, groups = load_runs(data)
    bench = load_bench(data)
    lines = [
        "# Results",
        "",
        "<!-- Generated by docs/_gen/results.py from docs/data/: edit those, not this page. -->",
        "",
        "How well the presets learn and how fast the pieces run, measured once and stored: "
        "`docs/_gen/runs.py` made the learning runs, `tritonrl bench --quick --json docs/data/bench.json` "
        "the speed table, and `docs/_gen/results.py` wrote this page and its figures from them. "
        "CI rebuilds the page from the stored data and checks it matches; it does not re-measure. "
        "The machine is small and was shared with other work while these ran: compare rows of one "
        "table with each other (they ran side by side), and take absolute numbers as orders of magnitude.",
        "",
        '!!! note "Where and when"',
        f"    Learning runs: {_machine(meta['machine'])}.",
        "",
        *(
            f"    `{g.label}` on `{g.env}`, run apart (its wall times do not compare with the other rows'): "
            f"{_machine(g.machine)}.\n"
            for g in groups
            if g.machine
        ),
        f"    Benchmarks: {_machine(bench['run'])}; `--quick` cases.",
        "",
        "## Learning curves",
        "",
        f"Each preset on its reference environment, {len(meta['seeds'])} seeds "
        f"({', '.join(map(str, meta['seeds']))}), a fixed number of environment steps (an explicit "
        "`--eval-every`, so no run stops early at the solved score). The curve is the greedy evaluation "
        "return (`eval/mean_return` in `metrics.csv`: 10 episodes on CartPole and Pendulum; on the market "
        "env, the log return over the validation period); the line is the mean over seeds, the band their "
        "minimum to maximum. `--overlap` runs the same preset and budget overlapped (the learner in "
        "a second process, acting one sync interval behind: [Training](training.md)); its curve "
        "shares the sequential run's panel.",
        "",
        "![Greedy evaluation return against environment steps, mean and range over seeds]"
        f"({IMG}/{CURVES_PNG})",
        "",
        "## Steps to threshold",
        "",
        "The first greedy evaluation at or above the environment's solved score (CartPole-v1: 475; "
        "Pendulum-v1: -250, the bound of the SAC and TD3 learning tests). "
        "An evaluation runs once per `--eval-every` steps (at the first rollout or flush boundary "
        "past it), so each count is an upper bound.",
        "",
        *_learning_tables(meta, groups),
        "",
        "Reproduce one run (the commands are in `docs/data/learning/meta.json`; the table measures the "
        "presets, and `--no-tuned` keeps a preset's own settings where it has an entry for the env: "
        "`ppo` on CartPole-v1, `sac` and `td3` on Pendulum-v1):",
        "",
        "```bash",
        _no_tuned(
            meta["commands"][0]
            .replace("python -m tritonrl.toolkit", "tritonrl")  # runs recorded before `python -m tritonrl`
            .replace("python -m tritonrl", "tritonrl")
            .replace("RUN_DIR", "runs/ppo-s1")
        ),
        "```",
        "",
        *_market_tables(groups),
        *_peer_section(load_peers(data)),
        *_minatar_section(load_minatar(data)),
        *_zoo().section(_zoo().load_zoo(data), IMG, _zoo().load_zoo_peers(data), _zoo().load_heldout(data)),
        "## Throughput against the peers",
        "",
        "Every row of `tritonrl bench --quick`; `ratio` is the speed against the row's baseline in the "
        "same process (`> 1`: faster; the note names the baseline where the case has several). "
        + (
            "These were measured on a CPU: the Triton kernels run on a GPU only, so the ratios here "
            "compare the torch paths: eager against `torch.compile`, the project's loops against "
            "single-file reference loops, its replay against cpprb, its batched market env against "
            "gym-anytrading. `bash benchmarks/gpu-check.sh` measures the kernels on a GPU."
            if not bench["run"].get("cuda")
            else "Measured on a GPU: the Triton kernels against their peers."
        ),
        "",
        *_bench_tables(bench),
    ]
    return "\n".join(lines).rstrip() + "\n"


def draw(data: Path = DATA, img_dir: Path = PAGES / IMG) -> list[Path]:
    """The page's figures into ``img_dir``: ``learning-curves.png`` and ``bench-<name>.png``.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, groups = load_runs(data)
    img_dir = Path(img_dir)
    img_dir.mkdir(parents=True, exist_ok=True)
    panels: dict[tuple[str, str], list[Group]] = {}  # the modes of a preset on an env share a panel
    for g in groups:
        panels.setdefault((g.agent, g.env), []).append(g)
    cols = min(CURVE_COLUMNS, len(panels))  # a grid, readable at the page's width
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    seeds = meta["seeds"]
    for ax, ((agent, env), members) in zip(axes.flat, panels.items(), strict=False):
        for g in members:
            steps = [s for s, _ in g.curves[seeds[0]]]
            n = min(len(g.curves[s]) for s in seeds)
            values = [[g.curves[s][i][1] for s in seeds] for i in range(n)]
            x = steps[:n]
            ax.fill_between(x, [min(v) for v in values], [max(v) for v in values], alpha=0.2, linewidth=0)
            ax.plot(x, [statistics.mean(v) for v in values], linewidth=1.8, label=g.mode)
        threshold = members[0].threshold
        if threshold is not None:
            ax.axhline(threshold, color="gray", linestyle="--", linewidth=0.8)
        if len(members) > 1:
            ax.legend(fontsize=7)
        ax.set_title(f"{agent} on {env}", fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.set_ylabel("greedy return" if threshold is not None else "validation log return", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"mean and min-max over {len(meta['seeds'])} seeds", fontsize=8)
    fig.tight_layout()
    written = [img_dir / CURVES_PNG]
    fig.savefig(written[0], dpi=100)
    plt.close(fig)
    peers = load_peers(data)
    if peers is not None:
        written.append(_draw_peers(plt, *peers, img_dir / PEERS_PNG))
    minatar = load_minatar(data)
    if minatar is not None:
        written.append(_draw_minatar(plt, *minatar, img_dir / MINATAR_PNG))
    zoo = _zoo()
    zoo_runs = zoo.load_zoo(data)
    if zoo_runs is not None:
        written.append(zoo.draw(plt, zoo_runs, img_dir / zoo.ZOO_PNG))

    from tritonrl.cli.bench import Row, plot_ratios

    bench = load_bench(data)
    rows = [
        Row(r["benchmark"], r["case"], r["impl"], r["value"] if r["value"] is not None else math.nan,
            r["unit"], r["ratio"], r["note"])
        for r in bench["rows"]
    ]  # fmt: skip
    tmp = img_dir / ".bench"
    for path in plot_ratios(rows, tmp, subtitle=f"{bench['run']['device']}, {bench['run']['date'][:10]}"):
        written.append(path.replace(img_dir / f"bench-{path.name}"))
    tmp.rmdir()
    return written


def _draw_peers(plt: Any, meta: dict[str, Any], groups: list[PeerGroup], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.4), squeeze=False)
    seeds = meta["seeds"]
    width = meta["steps"] // PEER_BINS
    x = [width * (b + 1) for b in range(PEER_BINS)]
    for ax, g in zip(axes[0], groups, strict=True):
        for impl in PEER_IMPLS:
            cols = [g.binned(impl, s) for s in seeds]
            keep = [b for b in range(PEER_BINS) if all(c[b] is not None for c in cols)]
            values = [[float(c[b]) for c in cols] for b in keep]  # type: ignore[arg-type]
            xs = [x[b] for b in keep]
            ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values], alpha=0.2, linewidth=0)
            label = "tritonrl" if impl == "tritonrl" else "CleanRL"
            ax.plot(xs, [statistics.mean(v) for v in values], linewidth=1.8, label=label)
        ax.legend(fontsize=7)
        ax.set_title(f"{g.agent} on {g.env}", fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.set_ylabel("training episode return", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"mean and min-max over {len(seeds)} seeds", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_minatar(plt: Any, meta: dict[str, Any], groups: list[MinAtarGroup], path: Path) -> Path:
    seeds = meta["seeds"]
    envs = list(dict.fromkeys(g.env for g in groups))
    fig, axes = plt.subplots(1, len(envs), figsize=(4.6 * len(envs), 3.4), squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        for g in (g for g in groups if g.env == env):
            # each seed's interval means on a common grid of log steps, smoothed over MINATAR_WINDOW
            common = sorted(set.intersection(*(set(row[0] for row in g.train[seed]) for seed in seeds)))
            values = [[g.score(seed, step) for seed in seeds] for step in common]
            keep = [(x, v) for x, v in zip(common, values, strict=True) if None not in v]
            xs = [x for x, _ in keep]
            ax.fill_between(xs, [min(v) for _, v in keep], [max(v) for _, v in keep], alpha=0.2, linewidth=0)
            ax.plot(xs, [statistics.mean(v) for _, v in keep], linewidth=1.8, label=g.agent)
        pub = sorted((step, r) for (e, step), r in PUBLISHED_DQN.items() if e == env)
        if pub:
            mid = [(lo + hi) / 2 for _, (lo, hi) in pub]
            err = [[m - lo for m, (_, (lo, _)) in zip(mid, pub, strict=True)],
                   [hi - m for m, (_, (_, hi)) in zip(mid, pub, strict=True)]]  # fmt: skip
            ax.errorbar([s for s, _ in pub], mid, yerr=err, fmt="o", color="black", markersize=4,
                        capsize=3, label="Young & Tian DQN (read off)")  # fmt: skip
        ax.legend(fontsize=7)
        ax.set_title(env, fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.set_ylabel(f"training return (last {MINATAR_WINDOW:.0%} of steps)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"mean and min-max over {len(seeds)} seeds", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Write the page and its figures; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="stored data (default docs/data)")
    parser.add_argument(
        "--pages", type=Path, default=PAGES, help="the site's pages folder (default docs/pages)"
    )
    args = parser.parse_args(argv)
    (args.pages / "results.md").write_text(render(args.data))
    figures = draw(args.data, args.pages / IMG)
    print(f"wrote {args.pages / 'results.md'} and {len(figures)} figures in {args.pages / IMG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
