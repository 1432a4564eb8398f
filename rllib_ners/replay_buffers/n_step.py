"""n-step transitions gathered from the ring storage (numpy only, no Ray).

n-step returns are *truncated* at the end of the stored data rather than
redrawn: an item whose episode ends (or whose next chunk has not arrived yet)
within `n` steps gets the discounted sum of the rewards that exist and
bootstraps from the last observation reached; its `n_step` column says how
many steps it used, and `terminateds`/`truncateds` are those of the episode's
end if it was reached. So the last `n-1` steps of every episode are trained on
(RLlib redraws them, and never learns from them).

A tuple `n_step=(lo, hi)` draws each item's n uniformly from the *inclusive*
range `{lo, ..., hi}` (RLlib's docstring promises a closed range; its code
draws from `[lo, hi)`).
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from rllib_ners.replay_buffers.buffer_names import (
    ACTIONS,
    INDICES,
    N_STEP,
    NEXT_INDICES,
    NEXT_OBS,
    OBS,
    REWARDS,
    SAMPLE_FIX,
    TERMINATEDS,
    TIMESTEPS,
    TRUNCATEDS,
)
from rllib_ners.replay_buffers.frame_stack import observations_at
from rllib_ners.replay_buffers.ring_storage import RingStorage
from rllib_ners.utils.checks import check_positive_int


def normalize_n_step(n_step) -> Tuple[int, int]:
    """Returns the inclusive `(lo, hi)` range for an int or tuple `n_step`."""
    if n_step is None:
        return 1, 1
    if isinstance(n_step, (tuple, list)):
        if len(n_step) != 2:
            raise ValueError(
                f"`n_step` must be an int or a (lo, hi) pair, got n_step={n_step!r}."
            )
        lo = check_positive_int("n_step[0]", n_step[0], fix=SAMPLE_FIX)
        hi = check_positive_int("n_step[1]", n_step[1], fix=SAMPLE_FIX)
        if lo > hi:
            raise ValueError(
                f"`n_step` range is reversed: n_step={tuple(n_step)!r}. Give it as "
                f"(lo, hi) with lo <= hi; both ends are inclusive."
            )
        return lo, hi
    n = check_positive_int("n_step", n_step, fix=SAMPLE_FIX)
    return n, n


def check_gamma(gamma) -> None:
    """Raises unless the discount `gamma` lies in `[0, 1]`."""
    if not (0.0 <= float(gamma) <= 1.0):
        raise ValueError(f"`gamma` must lie in [0, 1], got gamma={gamma!r}.")


def draw_n_steps(rng: np.random.Generator, num_items: int, n_step) -> np.ndarray:
    """Each item's n: the constant, or uniform in the inclusive range (one
    `rng.integers` call; none for a constant n)."""
    lo, hi = normalize_n_step(n_step)
    if lo == hi:
        return np.full(num_items, lo, dtype=np.int64)
    return rng.integers(lo, hi + 1, size=num_items)


def n_step_transitions(
    storage: RingStorage, slots: np.ndarray, n_steps: np.ndarray, gamma: float
) -> Dict[str, np.ndarray]:
    """Follows each item up to its n steps forward, all steps at once.

    The `next` pointers are chased `n - 1` times into a `[n, B]` path (past a
    stop the path runs into garbage, which is masked out). Step `k` counts
    while every earlier step `j < k` neither ended its episode nor led to a
    tail slot, and `k < n_steps`. Returns are summed in step order, as a
    sequential loop would. A fixed ~20 numpy calls, instead of ~12 per step.

    Returns:
        `rewards` (float64 n-step returns), `n_step` (steps used), `last` (slot
        of the last step), `next_slot` (the bootstrap observation's slot) and
        the `terminateds`/`truncateds` flags of the last step.
    """
    n_max = int(n_steps.max())
    if n_max == 1:
        last = slots.copy()
        returns = storage.rewards[slots]
        used = np.ones(slots.shape, dtype=np.int64)
    else:
        path = np.empty((n_max,) + slots.shape, dtype=np.int64)
        path[0] = slots
        for k in range(1, n_max):
            # `next` is -1 after a tail; take() wraps it to a valid (masked) slot.
            storage.next.take(path[k - 1], out=path[k])
        here, there = path[:-1], path[1:]
        ended = storage.terminated.take(here) | storage.truncated.take(here)
        # bool `a > b` is `a & ~b`: the step after `here` is a stored transition
        # and `here` did not end the episode.
        active = storage.is_transition.take(there) > ended
        if n_steps.min() < n_max:
            active &= np.arange(1, n_max)[:, None] < n_steps
        np.logical_and.accumulate(active, axis=0, out=active)
        discounts = [1.0]
        for _ in range(1, n_max):
            discounts.append(discounts[-1] * gamma)
        rewards = storage.rewards.take(path)
        rewards[1:] = np.where(
            active, rewards[1:] * np.array(discounts[1:])[:, None], 0.0
        )
        # Reduces row by row (axis 0), i.e. r_0 + g r_1 + g^2 r_2 ... in order.
        returns = rewards.sum(axis=0)
        steps_after_first = active.sum(axis=0)
        used = steps_after_first + 1
        last = path[steps_after_first, np.arange(slots.shape[0])]
    return {
        REWARDS: returns,
        N_STEP: used,
        "last": last,
        "next_slot": storage.next[last],
        TERMINATEDS: storage.terminated[last],
        TRUNCATEDS: storage.truncated[last],
    }


def transition_columns(
    storage: RingStorage,
    slots: np.ndarray,
    n_steps: np.ndarray,
    gamma: float,
    *,
    frame_stack: int = 1,
    frames_channels_first: bool = False,
    device_frames=None,
) -> Dict[str, np.ndarray]:
    """The n-step transitions starting at `slots`, as the columns of
    `sample_batch()` (without `weights`); `rewards` as float32; frame stacks
    laid out channels-first in memory with `frames_channels_first` (see
    `frame_stack.stacked_frames`), or gathered as tensors on a device by
    `device_frames` (a `DeviceFrames`) where it serves the storage."""
    walk = n_step_transitions(storage, slots, n_steps, gamma)
    obs = next_obs = None
    if device_frames is not None and frame_stack > 1:
        # One gather for both: `obs` stacks first, then `new_obs` stacks.
        both = device_frames.stacks(
            storage, np.concatenate([slots, walk["next_slot"]]), frame_stack
        )
        if both is not None:
            obs, next_obs = both[: len(slots)], both[len(slots) :]
    if obs is None:
        layout = {"channels_first": frames_channels_first}
        obs = observations_at(storage, slots, frame_stack, **layout)
        next_obs = observations_at(storage, walk["next_slot"], frame_stack, **layout)
    return {
        OBS: obs,
        NEXT_OBS: next_obs,
        ACTIONS: storage.actions[slots],
        REWARDS: walk[REWARDS].astype(np.float32),
        TERMINATEDS: walk[TERMINATEDS],
        TRUNCATEDS: walk[TRUNCATEDS],
        N_STEP: walk[N_STEP],
        INDICES: slots,
        NEXT_INDICES: walk["next_slot"],
        TIMESTEPS: storage.ts[slots],
    }
