"""A vectorised, drop-in replacement for RLlib's `PrioritizedEpisodeReplayBuffer`.

Storage
-------
Every field lives in a preallocated ring array of `capacity` slots, one slot per
stored observation, kept in the observation's own dtype (uint8 stays uint8). A slot
holding `o_t` of a stored episode also holds that step's transition fields
(`a_t`, `r_t`, terminated/truncated flags after the step, extra model outputs,
timestep `t`) and a pointer `next[slot]` to the slot holding `o_{t+1}`.

The last observation of every stored episode fragment sits in a *tail* slot: it
has no action, priority 0 and can never be drawn. When a later chunk of the same
episode arrives (same `id_`), the tail is turned into a transition in place and
the chunk's new observations are written at the head of the ring. So each
observation is stored once, and an episode costs exactly one slot beyond its
number of steps. `capacity` therefore counts stored observations.

Eviction is first-in-first-out by slot. Because `next` pointers always point to
slots written later, evicting the oldest slot can never leave a dangling pointer;
an episode evicted from its start stays sampleable from its remaining steps.

Sampling
--------
Slots are drawn with probability `p_i = priority_i ** alpha / sum_k priority_k ** alpha`
from a vectorised sum tree (stratified, as in Schaul et al. 2016). The
importance-sampling weight is `w_i = (N * p_i) ** -beta / max_j w_j` with `N` the
number of stored transitions and `max_j w_j = (N * p_min) ** -beta` taken over the
whole buffer (via the min tree), exactly as RLlib and the PER paper do.

n-step returns are *truncated* at the end of the stored data rather than redrawn:
an item whose episode ends (or whose next chunk has not arrived yet) within `n`
steps gets the discounted sum of the rewards that exist and bootstraps from the
last observation reached; its `n_step` column says how many steps it used, and
`terminateds`/`truncateds` are those of the episode's end if it was reached. So
the last `n-1` steps of every episode are trained on (RLlib redraws them, and
never learns from them).

A tuple `n_step=(lo, hi)` draws each item's n uniformly from the *inclusive*
range `{lo, ..., hi}` (RLlib's docstring promises a closed range; its code draws
from `[lo, hi)`).

Frame stacking
--------------
With `frame_stack=k > 1` (image observations, e.g. 84x84x1 Atari frames) every
frame is stored once, in its own dtype, and the k-frame stacks of `obs` and
`new_obs` are rebuilt at sample time by following `prev` pointers back through
the same episode: the stack of `o_t` is `[o_{t-k+1}, ..., o_t]` concatenated
along the last axis, oldest first - exactly what RLlib's
`FrameStackingEnvToModule` feeds the RLModule when acting. Frames before the
episode's first stored frame are zeros (RLlib's `fill=0.0`). A frame whose slot
was evicted or overwritten is never used: a pointer counts only while its slot
is occupied and older than the frame pointing at it, so stacks never mix
episodes, across ring wrap and eviction included.

Contract: as in RLlib, `sample()` and `update_priorities()` alternate: the
priorities passed to `update_priorities` belong to the items of the last sample.
"""

from __future__ import annotations

import logging
from abc import ABCMeta
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    NUM_ENV_STEPS_ADDED_LIFETIME,
    NUM_ENV_STEPS_EVICTED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_STORED,
    NUM_EPISODES_STORED,
)
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers.sum_tree import MinTree, SumTree

logger = logging.getLogger(__name__)

# Metric keys of our own (RLlib's constants are used where one exists).
NUM_PRIORITIES_NONFINITE_LIFETIME = "num_priorities_nonfinite_skipped_lifetime"
NUM_PRIORITIES_STALE_LIFETIME = "num_priorities_stale_skipped_lifetime"
MAX_PRIORITY = "max_priority"
SAMPLED_N_STEP_MEAN = "sampled_n_step_mean"
SAMPLE_BETA = "beta"

# Priorities are floored here so that no stored transition becomes unreachable.
_MIN_PRIORITY = 1e-12

# Columns of `sample_batch()`.
OBS, NEXT_OBS, ACTIONS, REWARDS = "obs", "new_obs", "actions", "rewards"
TERMINATEDS, TRUNCATEDS, WEIGHTS, N_STEP, INDICES = (
    "terminateds",
    "truncateds",
    "weights",
    "n_step",
    "indices",
)
TIMESTEPS = "ts"
NEXT_INDICES = "next_indices"


def _check_positive_int(name: str, value, *, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(
            f"`{name}` must be an integer >= {low}, got {name}={value!r}. "
            f"Set it in `replay_buffer_config` or the buffer's constructor."
        )
    return int(value)


def _check_beta(beta) -> float:
    if beta is None:
        return 0.0
    if not (0.0 <= float(beta) <= 1.0):
        raise ValueError(
            f"`beta` must lie in [0, 1], got beta={beta!r}. It is the importance-"
            f"sampling exponent: 0 means no correction, 1 full correction."
        )
    return float(beta)


def _copy_if_array(value):
    return value.copy() if isinstance(value, np.ndarray) else value


def _same(value):
    return value


def normalize_n_step(n_step) -> Tuple[int, int]:
    """Returns the inclusive `(lo, hi)` range for an int or tuple `n_step`."""
    if n_step is None:
        return 1, 1
    if isinstance(n_step, (tuple, list)):
        if len(n_step) != 2:
            raise ValueError(
                f"`n_step` must be an int or a (lo, hi) pair, got n_step={n_step!r}."
            )
        lo = _check_positive_int("n_step[0]", n_step[0])
        hi = _check_positive_int("n_step[1]", n_step[1])
        if lo > hi:
            raise ValueError(
                f"`n_step` range is reversed: n_step={tuple(n_step)!r}. Give it as "
                f"(lo, hi) with lo <= hi; both ends are inclusive."
            )
        return lo, hi
    n = _check_positive_int("n_step", n_step)
    return n, n


class _EpisodeReplayBufferMeta(ABCMeta):
    """Lets a buffer *class* pass RLlib 2.60's substring test on its `type`.

    `Algorithm._create_local_replay_buffer_if_necessary` evaluates
    `"EpisodeReplayBuffer" in replay_buffer_config["type"]`, which raises a
    TypeError for a class object. Users may pass the class, and Ray Tune turns
    a dotted `type` string back into the class on every trial (RLlib's
    `AlgorithmConfig.update_from_dict`), so stock DQN under Tune hits it too.
    Answering `in` on the class with its dotted path keeps both working.
    """

    def __contains__(cls, item) -> bool:
        return isinstance(item, str) and item in f"{cls.__module__}.{cls.__qualname__}"


class FastPrioritizedEpisodeReplayBuffer(
    PrioritizedEpisodeReplayBuffer, metaclass=_EpisodeReplayBufferMeta
):
    """Prioritised episode replay with ring storage and vectorised trees.

    A subclass of RLlib's `PrioritizedEpisodeReplayBuffer` so that stock DQN and
    SAC route their TD errors to `update_priorities()`, but none of the parent's
    storage is used: the parent's Python-list segment trees are never allocated.

    .. code-block:: python

        from ray.rllib.algorithms.dqn import DQNConfig

        config = DQNConfig().training(
            replay_buffer_config={
                "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
                "capacity": 50000,
                "alpha": 0.6,
                "beta": 0.4,
            }
        )

    Args:
        capacity: Number of observation slots (see the module docstring: every
            stored episode fragment uses one slot beyond its steps).
        batch_size_B: Default number of items (or sequences) per `sample()`.
        batch_length_T: Default sequence length; 1 samples single transitions.
        alpha: Priority exponent, `p_i ~ priority_i ** alpha`; 0 is uniform.
        beta: Default importance-sampling exponent for `sample()` when the caller
            passes none (DQN passes `replay_buffer_config["beta"]`).
        metrics_num_episodes_for_smoothing: Window for the smoothed buffer metrics.
        seed: Seed of the buffer's own random generator (sampling and n-step draws).
        frame_stack: Number of frames `k` in each sampled observation. With
            `k > 1` the observations must be images, `(H, W)` or `(H, W, C)`
            (one frame per step); each is stored once and `obs`/`new_obs` come
            out as `(H, W, k * C)` stacks (see "Frame stacking" above).
        beta_final: With `beta_annealing_timesteps`, the importance-sampling
            exponent rises linearly from `beta` to `beta_final` over that many
            env steps added after the first sample (PER / data-efficient
            Rainbow: 0.4 -> 1 over the run). `sample()` callers must then pass
            no beta or the initial `beta` (RLlib's DQN passes the config's).
        beta_annealing_timesteps: Length of the annealing, in added env steps.
    """

    def __init__(
        self,
        capacity: int = 10000,
        *,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        alpha: float = 1.0,
        beta: float = 0.0,
        metrics_num_episodes_for_smoothing: int = 100,
        seed: Optional[int] = None,
        frame_stack: int = 1,
        beta_final: Optional[float] = None,
        beta_annealing_timesteps: Optional[int] = None,
        **kwargs,
    ):
        if kwargs:
            raise ValueError(
                f"Unknown replay buffer settings {sorted(kwargs)} for "
                f"{type(self).__name__}. Remove them from `replay_buffer_config`; "
                f"known settings are capacity, batch_size_B, batch_length_T, alpha, "
                f"beta, beta_final, beta_annealing_timesteps, seed, frame_stack, "
                f"metrics_num_episodes_for_smoothing."
            )
        capacity = _check_positive_int("capacity", capacity)
        if capacity < 2:
            raise ValueError(
                f"`capacity` must be at least 2 (one step and its next observation), "
                f"got capacity={capacity}."
            )
        batch_size_B = _check_positive_int("batch_size_B", batch_size_B)
        batch_length_T = _check_positive_int("batch_length_T", batch_length_T)
        self._frame_stack = _check_positive_int("frame_stack", frame_stack)
        if not (np.isfinite(alpha) and alpha >= 0.0):
            raise ValueError(
                f"`alpha` must be a finite number >= 0, got alpha={alpha!r}. "
                f"0 samples uniformly, 1 fully by priority."
            )
        self._default_beta = _check_beta(beta)
        if (beta_final is None) != (beta_annealing_timesteps is None):
            raise ValueError(
                f"Beta annealing needs both `beta_final` and "
                f"`beta_annealing_timesteps` in `replay_buffer_config`, got "
                f"beta_final={beta_final!r}, "
                f"beta_annealing_timesteps={beta_annealing_timesteps!r}."
            )
        self._beta_final = None if beta_final is None else _check_beta(beta_final)
        self._beta_annealing_timesteps = (
            None
            if beta_annealing_timesteps is None
            else _check_positive_int(
                "beta_annealing_timesteps", beta_annealing_timesteps
            )
        )
        # Env steps added when the first sample was drawn (annealing starts).
        self._beta_anneal_start: Optional[int] = None
        # Deliberately skip PrioritizedEpisodeReplayBuffer.__init__: it allocates
        # two Python-list segment trees of 2 * 2**ceil(log2(capacity)) nodes and a
        # deque of all leaf ids, none of which we use.
        EpisodeReplayBuffer.__init__(
            self,
            capacity,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing,
        )
        self._alpha = float(alpha)
        self._seed = seed
        self.rng = np.random.default_rng(seed)

        self._sum_tree = SumTree(capacity)
        self._min_tree = MinTree(capacity)
        self._max_priority = 1.0

        # Slot bookkeeping (always allocated: small integer arrays).
        self._next = np.full(capacity, -1, dtype=np.int64)
        # Slot of the previous observation of the same episode (-1: none stored);
        # only valid while that slot is occupied and older (see _stacked_frames).
        self._prev = np.full(capacity, -1, dtype=np.int64)
        self._is_transition = np.zeros(capacity, dtype=bool)
        self._occupied = np.zeros(capacity, dtype=bool)
        self._episode_uid = np.full(capacity, -1, dtype=np.int64)
        self._stamp = np.full(capacity, -1, dtype=np.int64)
        self._ts = np.zeros(capacity, dtype=np.int64)
        self._rewards = np.zeros(capacity, dtype=np.float64)
        self._terminated = np.zeros(capacity, dtype=bool)
        self._truncated = np.zeros(capacity, dtype=bool)
        # Field arrays whose shape and dtype come from the first episode added.
        self._obs: Optional[np.ndarray] = None
        self._actions: Optional[np.ndarray] = None
        self._infos = np.empty(capacity, dtype=object)
        self._extra: Dict[str, np.ndarray] = {}
        self._observation_space = None
        self._action_space = None

        self._write_pos = 0
        self._num_slots_written = 0
        self._num_transitions = 0
        self._num_tails = 0
        self._next_uid = 0
        # Episode id -> (uid, tail slot) for fragments that may still continue.
        self._open_episodes: Dict[str, Tuple[int, int]] = {}
        self._tail_slot_to_episode_id: Dict[int, str] = {}

        self._last_sampled_indices = np.zeros(0, dtype=np.int64)
        self._last_sampled_stamps = np.zeros(0, dtype=np.int64)
        # (step slots, chunk lengths) of the last add(), for recent_sequences().
        self._last_added_steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._num_steps_added_lifetime = 0
        self._num_steps_evicted_lifetime = 0
        self._num_steps_sampled_lifetime = 0
        self._num_nonfinite_priorities = 0
        self._num_stale_priorities = 0
        self._warned_nonfinite = False
        self._sampled_n_step_mean = 0.0

    # ------------------------------------------------------------------ sizes
    @override(EpisodeReplayBuffer)
    def __len__(self) -> int:
        return self._num_transitions

    @override(EpisodeReplayBuffer)
    def get_num_timesteps(self) -> int:
        """Number of stored transitions that can be sampled."""
        return self._num_transitions

    @override(EpisodeReplayBuffer)
    def get_num_episodes(self) -> int:
        """Number of stored episode fragments (each has exactly one tail slot)."""
        return self._num_tails

    @override(EpisodeReplayBuffer)
    def get_added_timesteps(self) -> int:
        return self._num_steps_added_lifetime

    @property
    def alpha(self) -> float:
        return self._alpha

    # -------------------------------------------------------------------- add
    @override(PrioritizedEpisodeReplayBuffer)
    def add(
        self,
        episodes: Union[List[SingleAgentEpisode], SingleAgentEpisode],
        weight: Optional[float] = None,
    ) -> None:
        """Stores episode chunks; chunks continuing a stored episode are joined.

        Args:
            episodes: One `SingleAgentEpisode` or a list of them (complete episodes
                or chunks as EnvRunners send them).
            weight: Priority for the new transitions; defaults to the running max
                priority, so new data is sampled at least once soon.
        """
        if isinstance(episodes, SingleAgentEpisode):
            episodes = [episodes]
        if weight is not None and not (np.isfinite(weight) and weight > 0):
            raise ValueError(f"`weight` must be a finite number > 0, got {weight!r}.")
        chunks = [self._read_chunk(e) for e in episodes if len(e) > 0]
        if not chunks:
            self._last_added_steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            return
        self._ensure_storage(chunks[0])
        continuing = self._plan_continuations(chunks)
        num_new = self._num_new_slots(chunks, continuing)
        if num_new > self.capacity:
            raise ValueError(
                f"add() got {num_new} new observations, more than the buffer's "
                f"capacity={self.capacity}. Increase `capacity` in "
                f"`replay_buffer_config`."
            )
        new_slots = (self._write_pos + np.arange(num_new)) % self.capacity
        self._evict(new_slots)

        obs_slots, obs_rows, prev_slots = [], [], []
        step_slots, next_slots = [], []
        tail_slots = []
        offset = 0
        # Fragments written earlier in this very call: id -> (uid, tail slot).
        written_now: Dict[str, Tuple[int, int]] = {}
        for chunk, cont in zip(chunks, continuing):
            n = chunk["len"]
            if cont:
                uid, old_tail = (
                    written_now.get(chunk["id"]) or self._open_episodes[chunk["id"]]
                )
                self._tail_slot_to_episode_id.pop(old_tail, None)
                mine = new_slots[offset : offset + n]
                obs_slots.append(mine)
                obs_rows.append(np.arange(1, n + 1))
                prev_slots.append(np.concatenate([[old_tail], mine[:-1]]))
                step_slots.append(np.concatenate([[old_tail], mine[:-1]]))
                next_slots.append(mine)
                # The old tail stops being a tail.
                self._num_tails -= 1
            else:
                uid = self._next_uid
                self._next_uid += 1
                mine = new_slots[offset : offset + n + 1]
                obs_slots.append(mine)
                obs_rows.append(np.arange(n + 1))
                prev_slots.append(np.concatenate([[-1], mine[:-1]]))
                step_slots.append(mine[:-1])
                next_slots.append(mine[1:])
            offset += len(mine)
            tail = int(mine[-1])
            tail_slots.append(tail)
            written_now[chunk["id"]] = (uid, tail)
            chunk["uid"] = uid
            chunk["obs_ts"] = chunk["t_started"] + obs_rows[-1]
            if chunk["done"]:
                self._open_episodes.pop(chunk["id"], None)
            else:
                self._open_episodes[chunk["id"]] = (uid, tail)
                self._tail_slot_to_episode_id[tail] = chunk["id"]

        # One scatter per field for the whole call.
        all_obs_slots = np.concatenate(obs_slots)
        all_step_slots = np.concatenate(step_slots)
        self._obs[all_obs_slots] = np.concatenate(
            [c["obs"][rows] for c, rows in zip(chunks, obs_rows)]
        )
        self._infos[all_obs_slots] = np.concatenate(
            [self._object_column(c["infos"])[rows] for c, rows in zip(chunks, obs_rows)]
        )
        self._ts[all_obs_slots] = np.concatenate([c["obs_ts"] for c in chunks])
        self._episode_uid[all_obs_slots] = np.concatenate(
            [np.full(len(s), c["uid"]) for c, s in zip(chunks, obs_slots)]
        )
        self._occupied[all_obs_slots] = True
        self._prev[all_obs_slots] = np.concatenate(prev_slots)
        self._stamp[all_obs_slots] = self._num_slots_written + np.arange(
            len(all_obs_slots)
        )
        tails = np.asarray(tail_slots, dtype=np.int64)
        self._is_transition[tails] = False
        self._next[tails] = -1
        self._terminated[tails] = False
        self._truncated[tails] = False

        self._is_transition[all_step_slots] = True
        self._next[all_step_slots] = np.concatenate(next_slots)
        self._actions[all_step_slots] = np.concatenate([c["actions"] for c in chunks])
        self._rewards[all_step_slots] = np.concatenate([c["rewards"] for c in chunks])
        ends = np.concatenate([np.arange(c["len"]) == c["len"] - 1 for c in chunks])
        self._terminated[all_step_slots] = ends & np.concatenate(
            [np.full(c["len"], c["terminated"]) for c in chunks]
        )
        self._truncated[all_step_slots] = ends & np.concatenate(
            [np.full(c["len"], c["truncated"]) for c in chunks]
        )
        for key, column in self._extra.items():
            column[all_step_slots] = np.concatenate(
                [self._extra_column(c, key, column) for c in chunks]
            )

        priority = (
            self._max_priority if weight is None else float(weight)
        ) ** self._alpha
        # Written slots plus the reused tails of continued episodes.
        touched = np.union1d(all_obs_slots, all_step_slots)
        self._set_leaves(touched, np.where(self._is_transition[touched], priority, 0.0))

        num_steps = int(sum(c["len"] for c in chunks))
        self._num_transitions += num_steps
        self._num_tails += len(chunks)
        self._num_steps_added_lifetime += num_steps
        self._num_timesteps_added += num_steps
        self._num_slots_written += num_new
        self._write_pos = (self._write_pos + num_new) % self.capacity
        self._last_added_steps = (
            all_step_slots,
            np.array([c["len"] for c in chunks], dtype=np.int64),
        )
        self._after_add(all_step_slots, chunks)

    def _after_add(self, step_slots: np.ndarray, chunks: List[dict]) -> None:
        """Hook for subclasses: `step_slots` just became (or were reset as) steps."""

    @staticmethod
    def _object_column(items: list) -> np.ndarray:
        column = np.empty(len(items), dtype=object)
        column[:] = items
        return column

    def _read_chunk(self, episode: SingleAgentEpisode) -> dict:
        n = len(episode)
        obs = np.asarray(episode.get_observations(slice(0, n + 1)))
        infos = episode.get_infos(slice(0, n + 1))
        return {
            "id": episode.id_,
            "len": n,
            "t_started": int(episode.t_started),
            "obs": obs,
            "infos": list(infos) if infos is not None else [{}] * (n + 1),
            "actions": np.asarray(episode.get_actions(slice(0, n))),
            "rewards": np.asarray(episode.get_rewards(slice(0, n)), dtype=np.float64),
            "terminated": bool(episode.is_terminated),
            "truncated": bool(episode.is_truncated),
            "done": bool(episode.is_done),
            "episode": episode,
        }

    def _extra_column(self, chunk: dict, key: str, column: np.ndarray) -> np.ndarray:
        episode = chunk["episode"]
        if key in episode.extra_model_outputs:
            return np.asarray(
                episode.get_extra_model_outputs(key, slice(0, chunk["len"]))
            ).reshape((chunk["len"],) + column.shape[1:])
        # EnvRunners always send the same keys; random-action warm-up chunks may
        # carry none, and those steps get zeros (documented in `sample()`).
        return np.zeros((chunk["len"],) + column.shape[1:], dtype=column.dtype)

    def _ensure_storage(self, chunk: dict) -> None:
        if self._obs is not None:
            return
        episode = chunk["episode"]
        self._observation_space = episode.observation_space
        self._action_space = episode.action_space
        obs, actions = chunk["obs"], chunk["actions"]
        if self._frame_stack > 1 and obs.ndim not in (3, 4):
            raise ValueError(
                f"`frame_stack={self._frame_stack}` stacks image frames, but the "
                f"observations have shape {obs.shape[1:]}, not (H, W) or (H, W, C). "
                f"Remove `frame_stack` from `replay_buffer_config` (or set it to 1) "
                f"for non-image observations."
            )
        self._obs = np.zeros((self.capacity,) + obs.shape[1:], dtype=obs.dtype)
        self._actions = np.zeros(
            (self.capacity,) + actions.shape[1:], dtype=actions.dtype
        )
        for key in episode.extra_model_outputs.keys():
            values = np.asarray(episode.get_extra_model_outputs(key, slice(0, 1)))
            self._extra[key] = np.zeros(
                (self.capacity,) + values.shape[1:], dtype=values.dtype
            )

    # --------------------------------------------------------- frame stacks
    @property
    def frame_stack(self) -> int:
        return self._frame_stack

    @property
    def sampled_observation_space(self):
        """Observation space of sampled `obs`: the stored one, or its k-stack."""
        space = self._observation_space
        if self._frame_stack == 1 or space is None:
            return space
        import gymnasium as gym

        def stack(bound):
            bound = np.asarray(bound)
            if bound.ndim == 2:
                bound = bound[..., None]
            return np.concatenate([bound] * self._frame_stack, axis=-1)

        return gym.spaces.Box(
            low=stack(space.low), high=stack(space.high), dtype=space.dtype
        )

    def _observations_at(self, slots: np.ndarray) -> np.ndarray:
        """Observations at `slots` (any shape), k-frame stacks if `frame_stack`."""
        if self._frame_stack == 1:
            return self._obs[slots]
        return self._stacked_frames(slots)

    def _stacked_frames(self, slots: np.ndarray) -> np.ndarray:
        """`[..., H, W, k * C]` stacks ending at `slots`, oldest frame first.

        Walks `prev` pointers k - 1 times for all items at once. A pointer is
        followed only while its slot is occupied and was written before the
        current one (`stamp` grows with every write), so an evicted or
        overwritten frame - possibly of another episode now - is never used;
        missing frames are zeros, as in RLlib's frame stacking when acting.
        """
        k = self._frame_stack
        flat = np.asarray(slots, dtype=np.int64).reshape(-1)
        index = np.empty((k, flat.size), dtype=np.int64)
        valid = np.ones((k, flat.size), dtype=bool)
        index[k - 1] = flat
        for j in range(k - 2, -1, -1):
            current = index[j + 1]
            prev = self._prev[current]
            # -1 (none) wraps to the last slot in take(); masked out just below.
            ok = valid[j + 1] & (prev >= 0)
            ok &= self._occupied.take(prev) & (
                self._stamp.take(prev) < self._stamp[current]
            )
            index[j] = np.where(ok, prev, current)
            valid[j] = ok
        frame_shape = self._obs.shape[1:]
        channels = frame_shape[2] if len(frame_shape) == 3 else 1
        height, width = frame_shape[:2]
        out = np.empty((flat.size, height, width, k * channels), dtype=self._obs.dtype)
        for j in range(k):
            frames = self._obs[index[j]].reshape(flat.size, height, width, channels)
            if not valid[j].all():
                frames[~valid[j]] = 0
            out[..., j * channels : (j + 1) * channels] = frames
        return out.reshape(np.shape(slots) + out.shape[1:])

    def _plan_continuations(self, chunks: List[dict]) -> List[bool]:
        """Decides which chunks can reuse their episode's stored tail slot.

        A tail counts only if it still belongs to that episode and is not among
        the slots this very call will overwrite; dropping a continuation needs one
        more slot, so the check repeats until it is stable (it only ever flips
        chunks from continuing to fresh, so it ends).
        """
        continuing = []
        # A later chunk of an episode whose earlier chunk is in the same call
        # continues that chunk's new tail (unless the earlier one ended it).
        in_call = {}
        for i, chunk in enumerate(chunks):
            entry = self._open_episodes.get(chunk["id"])
            ok = (
                entry is not None
                and self._occupied[entry[1]]
                and self._episode_uid[entry[1]] == entry[0]
                and not self._is_transition[entry[1]]
            )
            if chunk["id"] in in_call:
                ok = not chunks[in_call[chunk["id"]]]["done"]
            continuing.append(bool(ok))
            in_call[chunk["id"]] = i
        first_of_id = {}
        for i, chunk in enumerate(chunks):
            first_of_id.setdefault(chunk["id"], i)
        while True:
            num_new = self._num_new_slots(chunks, continuing)
            changed = False
            for i, chunk in enumerate(chunks):
                # Only continuations of *stored* tails can be overwritten here.
                if continuing[i] and first_of_id[chunk["id"]] == i:
                    tail = self._open_episodes[chunk["id"]][1]
                    if (tail - self._write_pos) % self.capacity < num_new:
                        continuing[i] = False
                        changed = True
            if not changed:
                return continuing

    @staticmethod
    def _num_new_slots(chunks: List[dict], continuing: List[bool]) -> int:
        """A fresh fragment needs a slot per step plus its tail; a continuation
        reuses its predecessor's tail as the first step's observation."""
        return sum(c["len"] + (0 if cont else 1) for c, cont in zip(chunks, continuing))

    def _evict(self, slots: np.ndarray) -> None:
        occupied = self._occupied[slots]
        if not occupied.any():
            return
        evicted = slots[occupied]
        was_step = self._is_transition[evicted]
        num_steps = int(was_step.sum())
        self._num_transitions -= num_steps
        self._num_tails -= int((~was_step).sum())
        self._num_steps_evicted_lifetime += num_steps
        for tail in evicted[~was_step]:
            episode_id = self._tail_slot_to_episode_id.pop(int(tail), None)
            if episode_id is not None:
                self._open_episodes.pop(episode_id, None)
        self._occupied[evicted] = False
        self._is_transition[evicted] = False
        self._episode_uid[evicted] = -1
        self._next[evicted] = -1
        self._prev[evicted] = -1
        self._on_evict(evicted)

    def _on_evict(self, slots: np.ndarray) -> None:
        """Hook for subclasses: `slots` are being overwritten."""

    def _set_leaves(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Writes `priority ** alpha` values (>= 0) to both trees; last write wins.

        Both trees share the capacity and so the block layout: the indices are
        deduplicated and mapped to blocks once for the pair. Zero (non-transition
        slots) is +inf in the min tree, so it never counts as the minimum.
        """
        slots, values = self._sum_tree.last_writes(
            np.asarray(slots, dtype=np.int64), np.asarray(values, dtype=np.float64)
        )
        blocks = self._sum_tree.blocks_of(slots)
        self._sum_tree.assign_unique(slots, values, blocks)
        self._min_tree.assign_unique(
            slots, np.where(values > 0.0, values, np.inf), blocks
        )

    # ----------------------------------------------------------------- sample
    def _draw(self, num_items: int, beta: float) -> Tuple[np.ndarray, np.ndarray]:
        """Draws slots by priority and returns `(slots, importance weights)`."""
        if self._num_transitions == 0:
            raise ValueError(
                "Cannot sample from an empty replay buffer: add episodes first (or "
                "raise `num_steps_sampled_before_learning_starts`)."
            )
        slots = self._sum_tree.sample_stratified(num_items, self.rng)
        # w_i = (N p_i) ** -beta / (N p_min) ** -beta with p = leaf / total: N and
        # the total cancel, leaving (leaf_i / leaf_min) ** -beta (fewer numpy calls).
        ratio = self._sum_tree[slots]
        ratio /= self._min_tree.min()
        weights = ratio ** (-beta)
        self._last_sampled_indices = slots
        self._last_sampled_stamps = self._stamp[slots]
        self._num_steps_sampled_lifetime += num_items
        self.sampled_timesteps += num_items
        return slots, weights.astype(np.float32)

    def _resolve_beta(self, beta: Optional[float]) -> float:
        """The importance-sampling exponent of this sample (annealed, if set)."""
        if self._beta_annealing_timesteps is None:
            return self._default_beta if beta is None else _check_beta(beta)
        if beta is not None and not np.isclose(beta, self._default_beta):
            raise ValueError(
                f"sample(beta={beta!r}) conflicts with the buffer's beta annealing "
                f"({self._default_beta} -> {self._beta_final}); pass no beta, or "
                f"remove `beta_final`/`beta_annealing_timesteps` from "
                f"`replay_buffer_config`."
            )
        if self._beta_anneal_start is None:
            self._beta_anneal_start = self._num_steps_added_lifetime
        return self.current_beta()

    def current_beta(self) -> float:
        """`beta` now: annealed linearly over the env steps added since the
        first sample, or the constant `beta` without annealing."""
        if self._beta_annealing_timesteps is None or self._beta_anneal_start is None:
            return self._default_beta
        done = self._num_steps_added_lifetime - self._beta_anneal_start
        fraction = min(1.0, done / self._beta_annealing_timesteps)
        return self._default_beta + fraction * (self._beta_final - self._default_beta)

    def _draw_n_steps(self, num_items: int, n_step) -> np.ndarray:
        lo, hi = normalize_n_step(n_step)
        if lo == hi:
            return np.full(num_items, lo, dtype=np.int64)
        return self.rng.integers(lo, hi + 1, size=num_items)

    def _n_step_transitions(
        self, slots: np.ndarray, n_steps: np.ndarray, gamma: float
    ) -> Dict[str, np.ndarray]:
        """Follows each item up to its n steps forward, all steps at once.

        The `next` pointers are chased `n - 1` times into a `[n, B]` path (past a
        stop the path runs into garbage, which is masked out). Step `k` counts
        while every earlier step `j < k` neither ended its episode nor led to a
        tail slot, and `k < n_steps`. Returns are summed in step order, as a
        sequential loop would. A fixed ~20 numpy calls, instead of ~12 per step.
        """
        n_max = int(n_steps.max())
        if n_max == 1:
            last = slots.copy()
            returns = self._rewards[slots]
            used = np.ones(slots.shape, dtype=np.int64)
        else:
            path = np.empty((n_max,) + slots.shape, dtype=np.int64)
            path[0] = slots
            for k in range(1, n_max):
                # `next` is -1 after a tail; take() wraps it to a valid (masked) slot.
                self._next.take(path[k - 1], out=path[k])
            here, there = path[:-1], path[1:]
            ended = self._terminated.take(here) | self._truncated.take(here)
            # bool `a > b` is `a & ~b`: the step after `here` is a stored transition
            # and `here` did not end the episode.
            active = self._is_transition.take(there) > ended
            if n_steps.min() < n_max:
                active &= np.arange(1, n_max)[:, None] < n_steps
            np.logical_and.accumulate(active, axis=0, out=active)
            discounts = [1.0]
            for _ in range(1, n_max):
                discounts.append(discounts[-1] * gamma)
            rewards = self._rewards.take(path)
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
            "next_slot": self._next[last],
            TERMINATEDS: self._terminated[last],
            TRUNCATEDS: self._truncated[last],
        }

    def sample_batch(
        self,
        num_items: Optional[int] = None,
        *,
        n_step: Union[int, Tuple[int, int], None] = 1,
        gamma: float = 0.99,
        beta: Optional[float] = None,
        include_extra_model_outputs: bool = False,
    ) -> Dict[str, np.ndarray]:
        """Columnar fast path: the same transitions as `sample()`, as numpy columns.

        Returns a dict with `obs`, `new_obs` (the observation `n_step` steps later),
        `actions`, `rewards` (discounted n-step return), `terminateds`,
        `truncateds`, `weights`, `n_step`, `indices` (buffer slots, the keys for
        `update_priorities`) and `ts` (timestep of `obs` in its episode); with
        `include_extra_model_outputs` also every stored extra model output at `t`.
        """
        num_items = _check_positive_int(
            "num_items", num_items if num_items is not None else self.batch_size_B
        )
        beta = self._resolve_beta(beta)
        self._check_gamma(gamma)
        n_steps = self._draw_n_steps(num_items, n_step)
        slots, weights = self._draw(num_items, beta)
        return self._gather(slots, weights, n_steps, gamma, include_extra_model_outputs)

    def _transition_columns(self, slots, n_steps, gamma) -> Dict[str, np.ndarray]:
        """The n-step transitions starting at `slots`, as numpy columns."""
        walk = self._n_step_transitions(slots, n_steps, gamma)
        return {
            OBS: self._observations_at(slots),
            NEXT_OBS: self._observations_at(walk["next_slot"]),
            ACTIONS: self._actions[slots],
            REWARDS: walk[REWARDS].astype(np.float32),
            TERMINATEDS: walk[TERMINATEDS],
            TRUNCATEDS: walk[TRUNCATEDS],
            N_STEP: walk[N_STEP],
            INDICES: slots,
            NEXT_INDICES: walk["next_slot"],
            TIMESTEPS: self._ts[slots],
        }

    def _gather(self, slots, weights, n_steps, gamma, include_extra_model_outputs):
        batch = self._transition_columns(slots, n_steps, gamma)
        batch[WEIGHTS] = weights
        self._sampled_n_step_mean = float(batch[N_STEP].mean())
        if include_extra_model_outputs:
            for key, column in self._extra.items():
                batch[key] = column[slots]
        return batch

    @staticmethod
    def _check_gamma(gamma) -> None:
        if not (0.0 <= float(gamma) <= 1.0):
            raise ValueError(f"`gamma` must lie in [0, 1], got gamma={gamma!r}.")

    @override(PrioritizedEpisodeReplayBuffer)
    def sample(
        self,
        num_items: Optional[int] = None,
        *,
        batch_size_B: Optional[int] = None,
        batch_length_T: Optional[int] = None,
        n_step: Optional[Union[int, Tuple[int, int]]] = None,
        beta: Optional[float] = None,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        to_numpy: bool = False,
        **kwargs,
    ) -> List[SingleAgentEpisode]:
        """Samples 1-step episodes (n-step transitions) or sequences, by priority.

        With `batch_length_T` of 0/None/1 (the default) returns `num_items`
        single-step episodes `(o_t, a_t, R_t^n, o_{t+n})` exactly as RLlib's
        `PrioritizedEpisodeReplayBuffer` does, with `weights` and `n_step` in the
        extra model outputs (plus `buffer_index`, the slot for priority updates).

        With `batch_length_T=T > 1` returns `batch_size_B` (or `num_items // T`)
        contiguous slices of at most `T` steps inside one episode, their start
        drawn by priority, carrying every extra model output (e.g.
        `action_dist_inputs`, `action_logp`) plus per-step `weights`. `n_step`
        must then be 1. Slices are shorter where the stored episode ends first.

        Keyword arguments RLlib passes for other buffers (`sample_episodes`,
        `lookback`, `min_batch_length_T`) are accepted; a non-zero `lookback` or
        `min_batch_length_T` raises, since these are not supported here.
        """
        self._check_unsupported_sample_kwargs(kwargs)
        T = batch_length_T if batch_length_T is not None else self.batch_length_T
        if beta is not None:
            _check_beta(beta)
        self._check_gamma(gamma)
        if T and T > 1:
            if normalize_n_step(n_step) != (1, 1):
                raise ValueError(
                    f"Sequence sampling (batch_length_T={T}) needs n_step=1, got "
                    f"n_step={n_step!r}."
                )
            B = batch_size_B or (num_items // T if num_items else self.batch_size_B)
            B = _check_positive_int("batch_size_B", B)
            batch = self.sample_sequences(B, T, beta=beta, include_infos=include_infos)
            return self._sequences_to_episodes(batch, include_infos)

        num_items = num_items or batch_size_B or self.batch_size_B
        batch = self.sample_batch(
            num_items,
            n_step=n_step,
            gamma=gamma,
            beta=beta,
            include_extra_model_outputs=include_extra_model_outputs,
        )
        return self._batch_to_episodes(
            batch, include_infos, include_extra_model_outputs, to_numpy
        )

    @staticmethod
    def _check_unsupported_sample_kwargs(kwargs: dict) -> None:
        known = {"sample_episodes", "lookback", "min_batch_length_T"}
        unknown = set(kwargs) - known
        if unknown:
            raise ValueError(f"Unknown `sample()` arguments: {sorted(unknown)}.")
        if kwargs.get("lookback") or kwargs.get("min_batch_length_T"):
            raise ValueError(
                "`lookback` and `min_batch_length_T` (stateful modules, burn-in) are "
                "not supported by this buffer; use a stateless RLModule."
            )

    def _batch_to_episodes(self, batch, include_infos, include_extra, to_numpy):
        slots = batch[INDICES]
        infos = None
        if include_infos:
            infos = list(
                zip(
                    self._infos[slots],
                    self._infos[batch[NEXT_INDICES]],
                )
            )
        extra_keys = list(self._extra) if include_extra else []
        episodes = []
        obs, new_obs, actions = batch[OBS], batch[NEXT_OBS], batch[ACTIONS]
        rewards, weights, n_steps = (
            batch[REWARDS].tolist(),
            batch[WEIGHTS],
            batch[N_STEP],
        )
        terminateds, truncateds = (
            batch[TERMINATEDS].tolist(),
            batch[TRUNCATEDS].tolist(),
        )
        ts = batch[TIMESTEPS].tolist()
        item_columns = self.item_columns(batch)
        observation_space = self.sampled_observation_space
        for i in range(len(slots)):
            extra = {"weights": [weights[i]], "n_step": [n_steps[i]]}
            for name, column in item_columns.items():
                extra[name] = [column[i]]
            for key in extra_keys:
                extra[key] = [batch[key][i]]
            episode = SingleAgentEpisode(
                observations=[obs[i], new_obs[i]],
                observation_space=observation_space,
                infos=list(infos[i]) if infos is not None else None,
                actions=[actions[i]],
                action_space=self._action_space,
                rewards=[rewards[i]],
                terminated=terminateds[i],
                truncated=truncateds[i],
                extra_model_outputs=extra,
                len_lookback_buffer=0,
                t_started=ts[i],
            )
            if to_numpy:
                episode.to_numpy()
            episodes.append(episode)
        return episodes

    def item_columns(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Per-item values that `sample()` adds to each episode's extra model
        outputs, so that RLlib's learner connector turns them into batch columns.
        """
        return {"buffer_index": batch[INDICES]}

    # ------------------------------------------------------------ sequences
    def sample_sequences(
        self,
        batch_size_B: int,
        batch_length_T: int,
        *,
        beta: Optional[float] = None,
        include_infos: bool = False,
    ) -> Dict[str, np.ndarray]:
        """Columnar sequences: `[B, T]` arrays plus a `mask` of valid steps.

        Starts are drawn by priority; each row follows its episode forward for up
        to `T` steps and stops early at the episode's stored end. `obs` has
        `T + 1` columns: `obs[:, k]` is the observation before step `k`, and
        `obs[b, lengths[b]]` the observation after the row's last step (for
        bootstrapping); from there on every column repeats it, so `obs[:, T]`
        is each row's bootstrap observation. Other padding repeats the last
        valid entry; `rewards` are 0 and the flags False at padded steps.
        """
        B = _check_positive_int("batch_size_B", batch_size_B)
        T = _check_positive_int("batch_length_T", batch_length_T)
        beta = self._resolve_beta(beta)
        starts, weights = self._draw(B, beta)
        return self._sequence_columns(starts, weights, T, include_infos=include_infos)

    def recent_sequences(
        self, batch_length_T: int, *, include_infos: bool = False
    ) -> Dict[str, np.ndarray]:
        """The steps of the last `add()` call, cut into sequences of at most `T`.

        For on-policy updates (ACER): every chunk of the last `add()` is split at
        `0, T, 2T, ...` into rows that stay inside the chunk; the columns are
        those of `sample_sequences()` with `weights` 1. Does not count as a
        sample (no priority update is expected after it).
        """
        T = _check_positive_int("batch_length_T", batch_length_T)
        step_slots, chunk_lengths = self._last_added_steps
        if step_slots.size == 0:
            raise ValueError(
                "recent_sequences() needs steps from a preceding add() call; the "
                "last add() stored none."
            )
        # Row r covers chunk positions [r_start, r_start + r_len).
        pieces = -(-chunk_lengths // T)
        chunk_of_row = np.repeat(np.arange(chunk_lengths.size), pieces)
        chunk_offsets = np.concatenate([[0], np.cumsum(chunk_lengths)[:-1]])
        first_row = np.concatenate([[0], np.cumsum(pieces)[:-1]])
        piece = np.arange(pieces.sum()) - first_row[chunk_of_row]
        row_start = piece * T
        max_lengths = np.minimum(T, chunk_lengths[chunk_of_row] - row_start)
        starts = step_slots[chunk_offsets[chunk_of_row] + row_start]
        weights = np.ones(starts.size, dtype=np.float32)
        return self._sequence_columns(
            starts, weights, T, max_lengths=max_lengths, include_infos=include_infos
        )

    def _sequence_columns(
        self,
        starts: np.ndarray,
        weights: np.ndarray,
        T: int,
        *,
        max_lengths: Optional[np.ndarray] = None,
        include_infos: bool = False,
    ) -> Dict[str, np.ndarray]:
        """Follows every start forward for up to `T` (or `max_lengths`) steps."""
        B = starts.shape[0]
        step_slots = np.empty((B, T), dtype=np.int64)
        mask = np.zeros((B, T), dtype=bool)
        current = starts.copy()
        active = np.ones(B, dtype=bool)
        for k in range(T):
            step_slots[:, k] = current
            mask[:, k] = active
            nxt = self._next[current]
            ended = self._terminated[current] | self._truncated[current]
            active = active & ~ended & self._is_transition[nxt]
            if max_lengths is not None:
                active &= k + 1 < max_lengths
            current = np.where(active, nxt, current)
        lengths = mask.sum(axis=1)
        bootstrap = self._next[step_slots[np.arange(B), lengths - 1]]
        # Column j holds the observation before step j; from the row's length on
        # that is the bootstrap observation after its last step (padding too).
        after_end = np.arange(T + 1)[None, :] >= lengths[:, None]
        obs_slots = np.where(
            after_end,
            bootstrap[:, None],
            np.concatenate([step_slots, bootstrap[:, None]], axis=1),
        )
        batch = {
            OBS: self._observations_at(obs_slots),
            ACTIONS: self._actions[step_slots],
            REWARDS: np.where(mask, self._rewards[step_slots], 0.0).astype(np.float32),
            TERMINATEDS: mask & self._terminated[step_slots],
            TRUNCATEDS: mask & self._truncated[step_slots],
            "mask": mask,
            "lengths": lengths,
            WEIGHTS: weights,
            INDICES: starts,
            "step_indices": step_slots,
            TIMESTEPS: self._ts[step_slots],
        }
        for key, column in self._extra.items():
            batch[key] = column[step_slots]
        if include_infos:
            batch["infos"] = self._infos[obs_slots]
        return batch

    def _sequences_to_episodes(self, batch, include_infos) -> List[SingleAgentEpisode]:
        episodes = []
        for b in range(len(batch[INDICES])):
            L = int(batch["lengths"][b])
            extra = {key: batch[key][b, :L] for key in self._extra}
            extra["weights"] = np.full(L, batch[WEIGHTS][b], dtype=np.float32)
            episodes.append(
                SingleAgentEpisode(
                    observations=list(batch[OBS][b, : L + 1]),
                    observation_space=self.sampled_observation_space,
                    infos=list(batch["infos"][b, : L + 1]) if include_infos else None,
                    actions=list(batch[ACTIONS][b, :L]),
                    action_space=self._action_space,
                    rewards=list(batch[REWARDS][b, :L]),
                    terminated=bool(batch[TERMINATEDS][b, L - 1]),
                    truncated=bool(batch[TRUNCATEDS][b, L - 1]),
                    extra_model_outputs={k: list(v) for k, v in extra.items()},
                    len_lookback_buffer=0,
                    t_started=int(batch[TIMESTEPS][b, 0]),
                )
            )
        return episodes

    # ------------------------------------------------------------ priorities
    @override(PrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id: Optional[str] = None) -> None:
        """Sets new priorities for the items of the last `sample()` call.

        Non-finite or negative values are skipped (the item keeps its priority),
        counted in `num_priorities_nonfinite_skipped_lifetime` and warned about
        once. Items whose slot was overwritten since the sample are skipped too.
        """
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        slots, stamps = self._take_last_sample(priorities.shape[0])
        self.update_priorities_at(slots, priorities, stamps)

    def _take_last_sample(self, num_values: int) -> Tuple[np.ndarray, np.ndarray]:
        """The last sample's slots and stamps, forgotten once handed out.

        Raises (and keeps them) unless `num_values` matches the sample's size.
        """
        slots, stamps = self._last_sampled_indices, self._last_sampled_stamps
        if num_values != slots.shape[0]:
            raise ValueError(
                f"update_priorities() got {num_values} values for {slots.shape[0]} "
                f"sampled items: call it once after each sample(), with one value "
                f"per sampled item, in order."
            )
        self._last_sampled_indices = np.zeros(0, dtype=np.int64)
        self._last_sampled_stamps = np.zeros(0, dtype=np.int64)
        return slots, stamps

    def update_priorities_at(
        self, slots, priorities, stamps: Optional[np.ndarray] = None
    ) -> np.ndarray:
        """Sets priorities at explicit buffer slots; returns the applied mask."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if slots.shape == priorities.shape and slots.shape[0] > 0:
            # Fast path for the usual call (right after a sample): every priority
            # finite and >= 0 and every slot still holding its sampled transition.
            # min() is NaN if any value is, so `p_min >= 0` also rejects NaNs.
            p_min, p_max = priorities.min(), priorities.max()
            if (
                p_min >= 0.0
                and p_max < np.inf
                and self._is_transition[slots].all()
                and (stamps is None or (self._stamp[slots] == stamps).all())
            ):
                self._max_priority = max(
                    self._max_priority, float(p_max), _MIN_PRIORITY
                )
                if p_min < _MIN_PRIORITY:
                    priorities = np.maximum(priorities, _MIN_PRIORITY)
                self._set_leaves(slots, priorities**self._alpha)
                return np.ones(slots.shape, dtype=bool)
        valid = np.isfinite(priorities) & (priorities >= 0.0)
        num_bad = int((~valid).sum())
        if num_bad:
            self._num_nonfinite_priorities += num_bad
            if not self._warned_nonfinite:
                logger.warning(
                    "%d non-finite or negative priorities were skipped (e.g. NaN TD "
                    "errors); the items keep their old priority. Counted in the "
                    "replay buffer metric %r; this warning is shown once.",
                    num_bad,
                    NUM_PRIORITIES_NONFINITE_LIFETIME,
                )
                self._warned_nonfinite = True
        live = self._is_transition[slots]
        if stamps is not None:
            live &= self._stamp[slots] == stamps
        self._num_stale_priorities += int((valid & ~live).sum())
        apply = valid & live
        if apply.any():
            new = np.maximum(priorities[apply], _MIN_PRIORITY)
            self._max_priority = max(self._max_priority, float(new.max()))
            self._set_leaves(slots[apply], new**self._alpha)
        return apply

    def get_priorities(self, slots) -> np.ndarray:
        """The current `priority ** alpha` of the given slots."""
        return np.asarray(self._sum_tree[np.asarray(slots, dtype=np.int64)])

    # ---------------------------------------------------------------- metrics
    @override(EpisodeReplayBuffer)
    def get_metrics(self) -> Dict[str, Any]:
        m = self.metrics
        m.log_value(
            NUM_ENV_STEPS_STORED, self._num_transitions, reduce="mean", window=1
        )
        m.log_value(NUM_EPISODES_STORED, self._num_tails, reduce="mean", window=1)
        m.log_value(MAX_PRIORITY, self._max_priority, reduce="mean", window=1)
        m.log_value(SAMPLE_BETA, self.current_beta(), reduce="mean", window=1)
        m.log_value(
            SAMPLED_N_STEP_MEAN, self._sampled_n_step_mean, reduce="mean", window=1
        )
        for key, value in (
            (NUM_ENV_STEPS_ADDED_LIFETIME, self._num_steps_added_lifetime),
            (NUM_ENV_STEPS_EVICTED_LIFETIME, self._num_steps_evicted_lifetime),
            (NUM_ENV_STEPS_SAMPLED_LIFETIME, self._num_steps_sampled_lifetime),
            (NUM_PRIORITIES_NONFINITE_LIFETIME, self._num_nonfinite_priorities),
            (NUM_PRIORITIES_STALE_LIFETIME, self._num_stale_priorities),
        ):
            # Monotone counters: the latest value is the largest one.
            m.log_value(key, value, reduce="max", window=1)
        self._log_extra_metrics(m)
        return m.reduce()

    def _log_extra_metrics(self, metrics) -> None:
        """Hook for subclasses to add their metrics."""

    def storage_nbytes(self) -> int:
        """Bytes held by the buffer's numpy arrays (storage, bookkeeping, trees).

        Object arrays (`infos`) count their pointers only, not the dicts.
        """
        owners = (self, self._sum_tree, self._min_tree)
        arrays = [
            value
            for owner in owners
            for value in vars(owner).values()
            if isinstance(value, np.ndarray)
        ]
        arrays += list(self._extra.values())
        return int(sum(array.nbytes for array in arrays))

    # ------------------------------------------------------------------ state
    _STATE_ARRAYS = (
        "_next",
        "_prev",
        "_is_transition",
        "_occupied",
        "_episode_uid",
        "_stamp",
        "_ts",
        "_rewards",
        "_terminated",
        "_truncated",
        "_obs",
        "_actions",
        "_infos",
        "_last_sampled_indices",
        "_last_sampled_stamps",
    )
    _STATE_SCALARS = (
        "_alpha",
        "_default_beta",
        "_beta_final",
        "_beta_annealing_timesteps",
        "_beta_anneal_start",
        "_max_priority",
        "_write_pos",
        "_num_slots_written",
        "_num_transitions",
        "_num_tails",
        "_next_uid",
        "_num_steps_added_lifetime",
        "_num_steps_evicted_lifetime",
        "_num_steps_sampled_lifetime",
        "_num_nonfinite_priorities",
        "_num_stale_priorities",
        "_num_timesteps_added",
        "sampled_timesteps",
        "_observation_space",
        "_action_space",
    )

    @override(PrioritizedEpisodeReplayBuffer)
    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        """Everything needed to resume: storage, trees, RNG, counters.

        Args:
            copy: Copy the arrays, so that the state stays as it is while the
                buffer goes on adding. False hands out the live arrays, for a
                checkpoint written at once: no second copy of the storage (a
                100k Atari buffer is ~0.7 GB) is made at save time.
        """
        take = _copy_if_array if copy else _same
        state = {name: take(getattr(self, name)) for name in self._STATE_ARRAYS}
        state.update({name: getattr(self, name) for name in self._STATE_SCALARS})
        state["capacity"] = self.capacity
        state["frame_stack"] = self._frame_stack
        state["_extra"] = {key: take(column) for key, column in self._extra.items()}
        state["_open_episodes"] = dict(self._open_episodes)
        state["_tail_slot_to_episode_id"] = dict(self._tail_slot_to_episode_id)
        state["sum_tree"] = self._sum_tree.get_state()
        state["min_tree"] = self._min_tree.get_state()
        state["rng"] = self.rng.bit_generator.state
        return state

    @override(PrioritizedEpisodeReplayBuffer)
    def set_state(self, state: Dict[str, Any], *, copy: bool = True) -> None:
        """Restores `get_state()`'s output; `copy=False` adopts its arrays (for a
        state just loaded from a checkpoint that nothing else holds)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"Cannot restore a buffer of capacity {state['capacity']} into one of "
                f"capacity={self.capacity}; build it with the same `capacity`."
            )
        if int(state.get("frame_stack", 1)) != self._frame_stack:
            raise ValueError(
                f"Cannot restore a buffer saved with frame_stack="
                f"{state.get('frame_stack', 1)} into one with frame_stack="
                f"{self._frame_stack}; build it with the same `frame_stack`."
            )
        take = _copy_if_array if copy else _same
        for name in self._STATE_ARRAYS + self._STATE_SCALARS:
            setattr(self, name, take(state[name]))
        self._extra = {k: take(v) for k, v in state["_extra"].items()}
        self._open_episodes = dict(state["_open_episodes"])
        self._tail_slot_to_episode_id = dict(state["_tail_slot_to_episode_id"])
        self._sum_tree.set_state(state["sum_tree"])
        self._min_tree.set_state(state["min_tree"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]
        self._last_added_steps = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    # ------------------------------------------------------------- invariants
    def check_invariants(self) -> None:
        """Raises `RuntimeError` naming every broken invariant, if any.

        Used by tests and the soak benchmark: the trees equal their leaves, only
        stored transitions have priority, and every pointer reaches stored data of
        the same episode.
        """
        leaves = self._sum_tree.leaves
        problems = []
        if not np.isclose(self._sum_tree.total(), leaves.sum(), rtol=1e-9, atol=1e-12):
            problems.append("sum tree total differs from the sum of its leaves")
        if np.any(leaves[~self._is_transition] != 0.0):
            problems.append("a non-transition slot has a priority")
        if np.any(leaves[self._is_transition] <= 0.0):
            problems.append("a stored transition has priority 0")
        steps = np.flatnonzero(self._is_transition)
        if steps.size and not np.all(self._occupied[self._next[steps]]):
            problems.append("a transition points at an evicted next observation")
        if steps.size and not np.all(
            self._episode_uid[self._next[steps]] == self._episode_uid[steps]
        ):
            problems.append("a transition points into another episode")
        if int(self._is_transition.sum()) != self._num_transitions:
            problems.append("transition count is off")
        if int((self._occupied & ~self._is_transition).sum()) != self._num_tails:
            problems.append("tail count is off")
        if problems:
            raise RuntimeError(
                "Replay buffer invariants broken: " + "; ".join(problems)
            )
