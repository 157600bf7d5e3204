"""Overlapped acting and learning: the actor acts while the learner updates.

With ``LoopConfig(overlap=True)`` the learner gets, at each sync point, the steps since the last one, while
the actor acts from a snapshot one interval behind; step counts, never timing, fix what it sees. Learners:
``"process"`` (forked, CPU), ``"stream"`` (a CUDA stream), ``"inline"`` (the oracle). Layer: training. Guide:
docs/pages/training.md.
"""

from __future__ import annotations

import io
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp
from tritonrl.toolkit.acting import SnapshotActor, actor_generator
from tritonrl.toolkit.agent import LaggedActor, OverlapAgent
from tritonrl.toolkit.training.base import OVERLAP_LEARNERS as LEARNERS

__all__ = [
    "LearnerProcessError",
    "Overlap",
    "SnapshotActor",
    "FIELDS",
    "actor_generator",
    "LEARNERS",
    "check_overlap",
    "feed_staged",
    "resolve_learner",
    "sync_period",
]

_Metrics = list[tuple[tuple[str, ...], np.ndarray]]  # one (names, f32 values) per metric dict
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
"""The fields of a staged vector step, in ``agent.observe``'s order."""
_POLL_S = 0.5  # how often a wait for the learner process checks that it is still alive
_SPIN_S = 0.005
"""How long either side of the process learner polls for the other's message before a blocking wait:
frequent hand-overs then wake no sleeping process, and a longer wait costs at most this much of a core."""


def _spin(conn: Any, seconds: float) -> bool:
    """Poll ``conn`` without blocking for up to ``seconds``: ``True`` once a message is ready."""
    if conn.poll(0):
        return True
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if conn.poll(0):
            return True
    return False


class LearnerProcessError(RuntimeError):
    """The learner process raised (traceback in `child_traceback`) or died."""

    def __init__(self, message: str, child_traceback: str = "") -> None:
        super().__init__(message)
        self.child_traceback = child_traceback


class _Staging:
    """The vector steps of one sync interval, one ``[capacity, E, ...]`` tensor per field, never read back."""

    def __init__(self, first: Mapping[str, torch.Tensor], capacity: int, shared: bool) -> None:
        self.capacity = capacity
        self.rows = 0
        self.names = tuple(first)
        self.extras = self.names[len(FIELDS) :]
        self.fields: dict[str, torch.Tensor] = {}
        for name in self.names:
            x = first[name]
            t = torch.empty((capacity, *x.shape), dtype=x.dtype, device=x.device)
            self.fields[name] = t.share_memory_() if shared and t.is_cpu else t
        # per field: a numpy view (CPU) or None (written with copy_)
        self._views = [t.numpy() if t.is_cpu else None for t in self.fields.values()]

    def add(self, values: Sequence[Any]) -> None:
        """Stage one vector step (``values`` in the order of `names`: tensors or arrays)."""
        row = self.rows
        if row == self.capacity:
            raise RuntimeError(f"overlap staging holds {self.capacity} vector steps already")
        for view, t, x in zip(self._views, self.fields.values(), values, strict=True):
            if view is None:
                t[row].copy_(torch.as_tensor(x))
            else:
                view[row] = (x.numpy() if x.is_cpu else x.cpu().numpy()) if isinstance(x, torch.Tensor) else x
        self.rows = row + 1

    def feed(self, agent: Any, rows: int) -> None:
        """``agent.observe`` the first ``rows`` staged steps, in order."""
        f = self.fields
        many = getattr(agent, "observe_steps", None)
        if many is not None:
            many(*(f[name][:rows] for name in FIELDS), **{name: f[name][:rows] for name in self.extras})
            return
        if self.extras:
            raise TypeError(f"overlap: {type(agent).__name__} stages {self.extras} but has no observe_steps")
        for i in range(rows):
            agent.observe(
                f["obs"][i],
                f["action"][i],
                f["reward"][i],
                f["next_obs"][i],
                f["terminated"][i],
                f["truncated"][i],
            )


def _pack(metrics: Sequence[Mapping[str, torch.Tensor]]) -> _Metrics:
    """Metric dicts as ``(names, f32 values)`` pairs, so the logged bits do not depend on the learner."""
    out: _Metrics = []
    for m in metrics:
        names = tuple(m)
        values = torch.stack([torch.as_tensor(m[k], dtype=torch.float32).detach().reshape(()) for k in names])
        out.append((names, values.cpu().numpy()))
    return out


def _unpack(packed: _Metrics) -> list[dict[str, torch.Tensor]]:
    return [{k: torch.tensor(v) for k, v in zip(names, values, strict=True)} for names, values in packed]


def _due(
    agent: Any, schedule: Any, staging: _Staging, rows: int, step: int
) -> list[Mapping[str, torch.Tensor]]:
    """One learner round: store the staged steps, run the updates due; their metrics, unread."""
    staging.feed(agent, rows)
    if _on_policy(schedule):
        due: list[Mapping[str, torch.Tensor]] = []
        for _ in range(rows):
            due += schedule.after_step(agent, step)
        return due
    return list(schedule.after_step(agent, step))


def _round(agent: Any, schedule: Any, staging: _Staging, rows: int, step: int) -> _Metrics:
    """`_due`, its metrics packed (read on the host)."""
    return _pack(_due(agent, schedule, staging, rows, step))


def feed_staged(agent: Any, schedule: Any, staged: Mapping[str, torch.Tensor], step: int) -> None:
    """Store an overlapped checkpoint's staged steps in a sequential resumed run."""
    rows = int(staged["obs"].shape[0])
    many = getattr(agent, "observe_steps", None)
    if many is not None:
        extras = {name: t for name, t in staged.items() if name not in FIELDS}
        many(*(staged[name] for name in FIELDS), **extras)
    else:
        for i in range(rows):
            agent.observe(*(staged[name][i] for name in FIELDS))
    if _on_policy(schedule):
        for _ in range(rows):
            schedule.after_step(agent, step)


def _on_policy(schedule: Any) -> bool:
    return getattr(schedule, "train_freq", None) is None and hasattr(schedule, "rollout_steps")


def sync_period(schedule: Any, step_size: int) -> int:
    """Env steps between two sync points: ``train_freq``, or ``rollout_steps * step_size``.

    Raises:
        ValueError: a schedule with neither.
    """
    period = getattr(schedule, "train_freq", None)
    if isinstance(period, int) and period >= 1:
        return period
    rollout = getattr(schedule, "rollout_steps", None)
    if isinstance(rollout, int) and rollout >= 1:
        return rollout * step_size
    raise ValueError("overlap needs an off-policy schedule (train_freq) or an on-policy one (rollout_steps)")


class _InlineLearner:
    """The lagged semantics in this process, synchronously."""

    def __init__(self, agent: Any, schedule: Any, stagings: Sequence[_Staging]) -> None:
        self.agent, self.schedule, self.stagings = agent, schedule, stagings
        self.pending: _Metrics = []

    def weights(self) -> Sequence[torch.Tensor]:
        return self.agent.learner_tensors()

    def start(self, which: int, rows: int, step: int) -> None:
        self.pending = _round(self.agent, self.schedule, self.stagings[which], rows, step)

    def finish(self) -> _Metrics:
        out, self.pending = self.pending, []
        return out

    def fetch_state(self) -> None:
        """The agent here is the learner: nothing to fetch."""

    def settle(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        """Nothing to stop."""


class _StreamLearner:
    """The lagged semantics with the learner's device work on a CUDA stream of its own (off CUDA: inline)."""

    def __init__(self, agent: Any, schedule: Any, stagings: Sequence[_Staging]) -> None:
        self.agent, self.schedule, self.stagings = agent, schedule, stagings
        device = torch.device(getattr(agent, "device", "cpu"))
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.pending: list[Mapping[str, torch.Tensor]] = []

    def weights(self) -> Sequence[torch.Tensor]:
        return self.agent.learner_tensors()

    def start(self, which: int, rows: int, step: int) -> None:
        stream = self.stream
        if stream is None:
            self.pending = _due(self.agent, self.schedule, self.stagings[which], rows, step)
            return
        # after what is queued on the current stream: the snapshot's copy of the weights this
        # round changes, and anything the actor left on the device
        stream.wait_stream(torch.cuda.current_stream(stream.device))
        with torch.cuda.stream(stream):
            self.pending = _due(self.agent, self.schedule, self.stagings[which], rows, step)

    def settle(self) -> None:
        """Order the current stream after the learner's round (the host does not wait)."""
        if self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)

    def finish(self) -> _Metrics:
        self.settle()
        out, self.pending = _pack(self.pending), []  # reads the metrics: waits for the round
        return out

    def fetch_state(self) -> None:
        """The agent here is the learner: nothing to fetch."""
        self.settle()

    def close(self) -> None:
        """Let the last round finish before its tensors are used or freed elsewhere."""
        self.settle()


def _learner_main(agent: Any, schedule: Any, conn: Any, other_end: Any, stagings: Any, weights: Any) -> None:
    """The learner process: observe, update, publish the weights; exceptions go back."""
    other_end.close()  # the main process's end: an EOF on ``conn`` then means the main process is gone
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(1)
    try:
        while True:
            _spin(conn, _SPIN_S)  # then a blocking read: the next sync point is seldom far
            msg = conn.recv()
            if msg[0] == "sync":
                _, which, rows, step = msg
                packed = _round(agent, schedule, stagings[which], rows, step)
                with torch.no_grad():
                    for dst, src in zip(weights, agent.learner_tensors(), strict=True):
                        dst.copy_(src)
                conn.send(("done", packed))
            elif msg[0] == "state":
                buf = io.BytesIO()
                torch.save({"agent": agent.state_dict(), "schedule": schedule.state_dict()}, buf)
                conn.send(("state", buf.getvalue()))
            else:  # "stop"
                return
    except EOFError:
        return
    except BaseException as exc:  # everything goes back to the main process
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        except OSError:
            pass


class _ProcessLearner:
    """The lagged semantics with the agent's update side in a child process (module doc)."""

    def __init__(self, agent: Any, schedule: Any, stagings: Sequence[_Staging]) -> None:
        self.agent, self.schedule = agent, schedule
        self.shared = [t.detach().clone().share_memory_() for t in agent.learner_tensors()]
        ctx = mp.get_context("fork")
        self.conn, child_end = ctx.Pipe()
        self.proc = ctx.Process(
            target=_learner_main,
            args=(agent, schedule, child_end, self.conn, stagings, self.shared),
            name="tritonrl-learner",
            daemon=True,  # never outlives the main process
        )
        self.proc.start()
        child_end.close()
        self.outstanding = False

    def weights(self) -> Sequence[torch.Tensor]:
        return self.shared

    def _recv(self) -> Any:
        while not (_spin(self.conn, _SPIN_S) or self.conn.poll(_POLL_S)):
            if not self.proc.is_alive():
                raise LearnerProcessError(f"the learner process exited (code {self.proc.exitcode})")
        try:
            msg = self.conn.recv()
        except EOFError:
            self.proc.join(1.0)
            raise LearnerProcessError(f"the learner process exited (code {self.proc.exitcode})") from None
        if msg[0] == "error":
            raise LearnerProcessError(f"learner process: {msg[1]}", msg[2])
        return msg

    def start(self, which: int, rows: int, step: int) -> None:
        self.conn.send(("sync", which, rows, step))
        self.outstanding = True

    def finish(self) -> _Metrics:
        if not self.outstanding:
            return []
        self.outstanding = False
        return self._recv()[1]

    def settle(self) -> None:
        """This process's agent is not the learner: nothing to order."""

    def fetch_state(self) -> None:
        """Load the learner's whole state (agent and schedule) into this process's copies."""
        self.conn.send(("state",))
        state = torch.load(io.BytesIO(self._recv()[1]), weights_only=False)
        self.agent.load_state_dict(state["agent"])
        self.schedule.load_state_dict(state["schedule"])

    def close(self) -> None:
        """Stop the learner process (asked first, then terminated); idempotent."""
        if self.proc.is_alive():
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            self.proc.join(5.0)
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join(5.0)
        self.conn.close()


def resolve_learner(learner: str, device: torch.device | str) -> str:
    """The learner for ``device``: ``learner`` itself, or for ``"auto"`` ``"stream"`` on CUDA, else
    ``"process"``.

    Raises:
        ValueError: ``learner`` is not one of [`LEARNERS`][tritonrl.toolkit.training.overlap.LEARNERS].
    """
    if learner not in LEARNERS:
        raise ValueError(f"overlap_learner must be one of {', '.join(map(repr, LEARNERS))}, got {learner!r}")
    if learner != "auto":
        return learner
    return "stream" if torch.device(device).type == "cuda" else "process"


def check_overlap(
    agent: Any, schedule: Any, collector: Any = None, distributed: bool = False, learner: str = "auto"
) -> None:
    """Raise ``ValueError`` unless an overlapped run can train ``agent`` with ``schedule`` and ``learner``."""
    if collector is not None or distributed:
        raise ValueError("overlap steps the env itself: not with a collector or a data-parallel run")
    if not isinstance(agent, OverlapAgent):
        raise ValueError(f"overlap: {type(agent).__name__} has no lagged_actor()/learner_tensors()")
    sync_period(schedule, 1)
    check = getattr(agent, "check_lagged", None)
    if check is not None:  # what the agent itself cannot do lagged (recurrent PPO, ...)
        check()
    device = torch.device(getattr(agent, "device", "cpu"))
    if resolve_learner(learner, device) == "process" and device.type != "cpu":
        raise ValueError(
            f"overlap_learner='process' forks the learner, which works for an agent on the CPU only; "
            f"this one is on {device}: use 'stream' (or 'auto')"
        )


class Overlap:
    """The loop's side of an overlapped run: act and stage each vector step, sync at each sync point.

    Args:
        step_env: the env's step (``actions -> Transition``).
        step_size: global env steps per vector step (``num_envs``).
        learner: one of [`LEARNERS`][tritonrl.toolkit.training.overlap.LEARNERS] (`resolve_learner`).

    Raises:
        ValueError: see `check_overlap`.
    """

    def __init__(
        self, agent: Any, schedule: Any, step_env: Callable[[Any], Any], step_size: int, learner: str
    ) -> None:
        check_overlap(agent, schedule, learner=learner)
        period = sync_period(schedule, step_size)
        kind = resolve_learner(learner, getattr(agent, "device", "cpu"))
        self.agent, self.schedule, self.step_env, self.kind = agent, schedule, step_env, kind
        self.period, self.step_size = period, step_size
        self.actor: LaggedActor = agent.lagged_actor()
        self.capacity = -(-period // step_size) + 1  # vector steps between two sync points, at most
        self.stagings: list[_Staging] = []
        self.which = 0  # the staging the actor fills
        self.learner: _InlineLearner | _StreamLearner | _ProcessLearner | None = None
        self.dirty = True  # something happened since the last drain
        self.pending: _Metrics = []  # metrics of the learner's last round, returned at the next sync
        self.restored: dict[str, torch.Tensor] | None = None  # staged rows of a checkpoint, not staged yet

    def step(self, obs: Any) -> Any:
        """Act from the snapshot, step the env, stage the transition; returns the env's transition."""
        action = self.actor(obs)
        extras = self.actor.extras() if hasattr(self.actor, "extras") else {}
        tr = self.step_env(action)
        values = (obs, action, tr.reward, tr.next_obs, tr.terminated, tr.truncated, *extras.values())
        if self.learner is None:  # the first step fixes the staging's shapes; the learner starts once
            names = (*FIELDS, *extras)
            first = {k: torch.as_tensor(v) for k, v in zip(names, values, strict=True)}
            shared = self.kind == "process"
            self.stagings = [_Staging(first, self.capacity, shared) for _ in range(2)]
            if self.kind == "process":
                self.learner = _ProcessLearner(self.agent, self.schedule, self.stagings)
            elif self.kind == "stream":
                self.learner = _StreamLearner(self.agent, self.schedule, self.stagings)
            else:
                self.learner = _InlineLearner(self.agent, self.schedule, self.stagings)
            if self.restored is not None:  # a resumed run: the rows staged when it was saved
                rows = self.restored
                if set(rows) != set(names):
                    raise ValueError(
                        f"overlap: the checkpoint staged the fields {sorted(rows)}, this actor stages "
                        f"{sorted(names)}"
                    )
                for i in range(rows["obs"].shape[0]):
                    self.stagings[self.which].add([rows[name][i] for name in names])
                self.restored = None
        self.stagings[self.which].add(values)
        self.dirty = True
        return tr

    def after_step(self, prev: int, step: int) -> list[dict[str, torch.Tensor]]:
        """At a sync point: `sync`; else nothing."""
        if step // self.period == prev // self.period:
            return []
        return self.sync(step)

    def sync(self, step: int) -> list[dict[str, torch.Tensor]]:
        """Wait for the learner's last round, act from its weights, start the next; returns the last round's
        metrics.

        Raises:
            LearnerProcessError: the learner raised or died.
        """
        learner = self.learner
        if learner is None:
            return []
        packed = self.pending + learner.finish()
        self.pending = []
        self.actor.load(learner.weights())
        staging = self.stagings[self.which]
        learner.start(self.which, staging.rows, step)
        staging.rows = 0
        self.which = 1 - self.which
        return _unpack(packed)

    def drain(self, step: int) -> list[dict[str, torch.Tensor]]:
        """Bring the learner up to ``step`` and load its state here; the metrics not returned yet."""
        if self.learner is None or not self.dirty:
            return []
        out = self.sync(step)
        out += _unpack(self.learner.finish())
        self.actor.load(self.learner.weights())
        self.learner.fetch_state()
        self.dirty = False
        return out

    def eval_policy(self) -> Callable[[Any], torch.Tensor]:
        """Greedy actions from the weights the actor acts with."""
        return self.actor.eval_policy()

    def settle(self) -> None:
        """Order the current stream after the learner's round (before reading the agent)."""
        if self.learner is not None:
            self.learner.settle()

    def state_dict(self) -> dict[str, Any]:
        """The actor side for a checkpoint without draining (actor, ``staged``, ``pending``); the agent gets
        the learner's state.

        Raises:
            LearnerProcessError: the learner raised or died.
        """
        staged: dict[str, torch.Tensor] = {}
        if self.learner is not None:
            if self.dirty:  # else drained: the agent holds the learner's state already
                self.pending += self.learner.finish()
                self.learner.fetch_state()
            staging = self.stagings[self.which]
            staged = {name: staging.fields[name][: staging.rows].clone() for name in staging.names}
        elif self.restored is not None:
            staged = {name: t.clone() for name, t in self.restored.items()}
        pending = [{"names": list(names), "values": torch.from_numpy(v.copy())} for names, v in self.pending]
        return {"actor": self.actor.state_dict(), "staged": staged, "pending": pending}

    def check_state_dict(self, state: Any) -> None:
        """Raise ``ValueError`` unless ``state`` has `state_dict`'s structure and fits this actor."""
        if not isinstance(state, Mapping) or {"actor", "staged", "pending"} - set(state):
            raise ValueError("the overlap section needs 'actor', 'staged' and 'pending'")
        actor, staged = state["actor"], state["staged"]
        if not isinstance(actor, Mapping) or {"snapshot", "generator", "steps"} - set(actor):
            raise ValueError("the overlap section's actor needs 'snapshot', 'generator' and 'steps'")
        snapshot = self.actor.state_dict()["snapshot"]
        saved = actor["snapshot"]
        if not isinstance(saved, (list, tuple)) or [getattr(t, "shape", None) for t in saved] != [
            t.shape for t in snapshot
        ]:
            raise ValueError("the overlap section's actor snapshot does not match the agent's network")
        if not isinstance(staged, Mapping) or (staged and not set(FIELDS) <= set(staged)):
            raise ValueError(f"the overlap section's staged steps need the fields {FIELDS}")
        if not isinstance(state["pending"], (list, tuple)):
            raise ValueError("the overlap section's pending metrics are not a list")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` before the first step; ``ValueError`` if it does not fit."""
        if self.learner is not None:
            raise ValueError("overlap: load_state_dict before the first step only")
        self.actor.load_state_dict(state["actor"])
        staged = dict(state["staged"])
        self.restored = staged if staged and staged["obs"].shape[0] else None
        self.pending = [(tuple(p["names"]), p["values"].numpy()) for p in state["pending"]]

    def close(self) -> None:
        """Stop the learner (no orphan process); idempotent."""
        if self.learner is not None:
            self.learner.close()
