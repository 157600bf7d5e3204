"""n-step bookkeeping on the host: which transitions are complete, their returns and discounts.

A transition starting at step ``s`` completes at the first episode end in ``s .. s + n - 1`` or
at ``s + n - 1``; its discount is ``gamma**k``, 0 where the episode terminated. Works on small
numpy arrays; observations stay on the device. See docs/pages/replay.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Commits", "NStepState", "schedule"]


@dataclass
class NStepState:
    """What the host remembers between vector steps (``K = n - 1``).

    Attributes:
        pending: int64 ``[E]``, pending transitions per environment.
        rewards: f64 ``[K, E]``, rewards of the last ``K`` steps, oldest first.
    """

    pending: np.ndarray
    rewards: np.ndarray

    @classmethod
    def empty(cls, n_step: int, num_envs: int) -> NStepState:
        return cls(np.zeros(num_envs, np.int64), np.zeros((n_step - 1, num_envs), np.float64))


@dataclass
class Commits:
    """Transitions completed by ``T`` new steps, in buffer order (timeline: ``K`` old then ``T`` new).

    Attributes:
        start: int64 ``[m]`` flat timeline index ``tau * E + env`` of obs and action.
        end: int64 ``[m]`` flat index among the new steps of the bootstrap ``next_obs``.
        reward: f32 ``[m]`` n-step returns.
        discount: f32 ``[m]``.
        identity: the commits are exactly the new steps in order (``n == 1``).
    """

    start: np.ndarray
    end: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    identity: bool


def schedule(
    state: NStepState,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    n_step: int,
    gamma: float,
) -> tuple[Commits, NStepState]:
    """The commits of ``T`` new steps (arrays ``[T, E]``) and the state after them.

    Adding ``T`` steps at once gives the same buffer as adding them one by one.
    """
    T, E = rewards.shape
    K = n_step - 1
    r = rewards.astype(np.float64, copy=False)
    done = terminated | truncated
    if K == 0:  # every transition is complete at once
        discount = np.where(terminated, 0.0, gamma).astype(np.float32).reshape(-1)
        flat = np.arange(T * E, dtype=np.int64)
        return Commits(flat, flat, r.astype(np.float32).reshape(-1), discount, True), state
    if T == 1:
        return _schedule_one(state, r[0], terminated[0], done[0], n_step, gamma)
    return _schedule_window(state, r, terminated, done, n_step, gamma)


def _schedule_one(
    state: NStepState, r: np.ndarray, terminated: np.ndarray, done: np.ndarray, n_step: int, gamma: float
) -> tuple[Commits, NStepState]:
    """`schedule` of one vector step for ``n_step >= 2``, bit for bit, without timeline arrays."""
    K = n_step - 1
    E = r.shape[0]
    old = state.rewards  # [K, E]
    powers = [gamma ** float(j) for j in range(n_step + 1)]
    starts: list[int] = []
    rets: list[float] = []
    discs: list[float] = []
    pending = state.pending.copy()
    for e in range(E):
        p = int(state.pending[e])
        if done[e]:
            taus = range(K - p, K + 1)
            pending[e] = 0
        elif p == K:
            taus = range(0, 1)
            # pending stays K: the oldest start leaves, the new one joins
        else:
            taus = range(0)
            pending[e] = p + 1
        if not taus:
            continue
        window = [float(old[t, e]) for t in range(K)] + [float(r[e])] + [0.0] * K
        for tau in taus:
            steps = K - tau + 1  # every commit here ends now, at timeline index K
            ret = 0.0
            for j in range(n_step):
                w = window[tau + j] * (powers[j] if j < steps else 0.0)
                ret = w if j == 0 else ret + w
            starts.append(tau * E + e)
            rets.append(ret)
            discs.append(0.0 if terminated[e] else powers[steps])
    m = len(starts)
    commits = Commits(
        start=np.array(starts, dtype=np.int64).reshape(m),
        end=np.array([s % E for s in starts], dtype=np.int64).reshape(m),
        reward=np.array(rets, dtype=np.float64).reshape(m).astype(np.float32),
        discount=np.array(discs, dtype=np.float64).reshape(m).astype(np.float32),
        identity=False,
    )
    rewards = np.empty_like(old)
    rewards[: K - 1] = old[1:]
    rewards[K - 1] = r
    return commits, NStepState(pending, rewards)


def _schedule_window(
    state: NStepState,
    r: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    n_step: int,
    gamma: float,
) -> tuple[Commits, NStepState]:
    """`schedule` for ``n_step >= 2`` over the whole timeline (``[T, E]``)."""
    T, E = r.shape
    K = n_step - 1
    n_tl = K + T
    r_all = np.concatenate([state.rewards, r], axis=0)  # [K+T, E]
    done_all = np.concatenate([np.zeros((K, E), bool), done], axis=0)
    term_all = np.concatenate([np.zeros((K, E), bool), terminated], axis=0)
    tau = np.arange(n_tl, dtype=np.int64)[:, None]  # [K+T, 1]
    active = tau >= (K - state.pending)[None, :]  # pending old starts and every new one
    big = np.int64(n_tl + n_step)
    done_at = np.where(done_all, tau, big)
    next_done = np.minimum.accumulate(done_at[::-1], axis=0)[::-1]  # first done at or after tau
    end = np.minimum(next_done, tau + K)
    commit = active & (end <= n_tl - 1)
    steps = end - tau + 1  # k in [1, n]
    # n-step returns: window j < k of rewards, discounted by gamma**j
    padded = np.concatenate([r_all, np.zeros((K, E))], axis=0)
    window = np.stack([padded[j : j + n_tl] for j in range(n_step)], axis=1)  # [K+T, n, E]
    j = np.arange(n_step)[None, :, None]
    weights = np.where(j < steps[:, None, :], gamma ** j.astype(np.float64), 0.0)
    ret = (window * weights).sum(axis=1)  # [K+T, E]
    end_clip = np.minimum(end, n_tl - 1)
    terminated_at_end = np.take_along_axis(term_all, end_clip, axis=0)
    disc = np.where(terminated_at_end, 0.0, gamma ** steps.astype(np.float64))
    t_idx, e_idx = np.nonzero(commit)
    end_c = end[t_idx, e_idx]
    order = np.lexsort((t_idx, e_idx, end_c))  # by end, then env, then start
    t_idx, e_idx, end_c = t_idx[order], e_idx[order], end_c[order]
    commits = Commits(
        start=t_idx * E + e_idx,
        end=(end_c - K) * E + e_idx,
        reward=ret[t_idx, e_idx].astype(np.float32),
        discount=disc[t_idx, e_idx].astype(np.float32),
        identity=False,
    )
    pending = (active & ~commit).sum(axis=0).astype(np.int64)
    new_state = NStepState(pending, r_all[n_tl - K :].copy())
    return commits, new_state
