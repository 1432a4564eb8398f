"""Moving a replay memory between RLlib's episode buffers and ours.

RLlib's `EpisodeReplayBuffer` and `PrioritizedEpisodeReplayBuffer` keep their
memory as a deque of `SingleAgentEpisode`s, an index list `_indices` of
`(episode index, step, [tree index])` and Python-list segment trees; ours keeps
ring arrays (see `ring_storage`). Their `get_state()`s share nothing, so:

* `load_rllib_state(buffer, state)` stores the episodes of an RLlib state in one
  of our buffers, oldest first, and carries over what maps onto ours: each
  step's priority leaf (`priority ** alpha`: RLlib's state holds no `alpha`, so
  build ours with the same one), the max priority, the items of an unanswered
  last `sample()` and the lifetime counters (steps added and sampled, episodes
  evicted). An RLlib episode in progress goes on with its next chunk. Not
  carried over: RLlib's metrics (its own `set_state` drops them too) and its
  random generator (RLlib's state has none; ours keeps its own).
  `load_rllib_multi_agent_state(buffer, state)` does the same for RLlib's
  multi-agent buffers, module by module, along the same path.
* `rllib_state(buffer, rllib_class)` is the way back: the state an RLlib buffer's
  `set_state()` takes, built by adding our stored episodes to a fresh RLlib
  buffer (RLlib's own O(N) Python bookkeeping; a one-off conversion) and
  writing our leaves into the segment trees of its state;
  `rllib_state_from_ours()` does the same from a saved state of ours.

Only RLlib's buffer states are read and written here (their keys are RLlib's
checkpoint format), never an RLlib buffer's attributes; our buffers are reached
through their public methods and parts (`storage`, `sampler`).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
    MultiAgentEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers import episode_adapter, writer
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.ring_storage import RingStorage

logger = logging.getLogger(__name__)

# The smallest leaf a stored transition may have (RLlib floors priorities at
# 1e-12 before the exponent; ours never lets a stored step reach 0).
_MIN_LEAF = 1e-300


def is_rllib_state(state: Any) -> bool:
    """Whether `state` is the `get_state()` of one of RLlib's episode buffers."""
    return isinstance(state, dict) and "episodes" in state and "_indices" in state


def is_rllib_multi_agent_state(state: Any) -> bool:
    return is_rllib_state(state) and "_module_to_indices" in state


def _check_kind(state: Dict[str, Any], buffer, *, multi_agent: bool) -> None:
    """Raises, naming our buffer for the state's kind, unless the state is of
    RLlib's buffer of `buffer`'s kind (single- or multi-agent)."""
    if is_rllib_multi_agent_state(state) == multi_agent:
        return
    kind, ours = (
        ("single-agent", "FastPrioritizedEpisodeReplayBuffer")
        if multi_agent
        else ("multi-agent", "FastMultiAgentPrioritizedEpisodeReplayBuffer")
    )
    raise ValueError(
        f"This is the state of one of RLlib's {kind} buffers; load it into "
        f"rllib_ners.{ours}, not {type(buffer).__name__}."
    )


# ------------------------------------------------------------- RLlib -> ours
# Both loaders share one path: clear the buffer, store RLlib's episodes as
# chunks (`add_chunks`, which says where each step went), put RLlib's priority
# leaves onto those slots (`_load_leaves`) and carry the counters over.
def load_rllib_state(buffer, state: Dict[str, Any]) -> None:
    """Replaces `buffer`'s memory with that of an RLlib single-agent state.

    Args:
        buffer: A `FastPrioritizedEpisodeReplayBuffer` (or subclass).
        state: `EpisodeReplayBuffer.get_state()` or
            `PrioritizedEpisodeReplayBuffer.get_state()`.
    """
    _check_kind(state, buffer, multi_agent=False)
    episodes = [SingleAgentEpisode.from_state(s) for s in state["episodes"]]
    buffer.clear()
    chunks = [
        _chunk_from(episode, source=k)
        for k, episode in enumerate(episodes)
        if len(episode) > 0
    ]
    slots_of = writer.step_slots_by_source(chunks, buffer.add_chunks(chunks))
    # Our slot of every step of `episodes`, concatenated (-1: not kept).
    flat_slots = np.concatenate(
        [np.zeros(0, np.int64)]
        + [slots_of.get(k, np.zeros(0, np.int64)) for k in range(len(episodes))]
    )
    num_given = flat_slots.shape[0]
    stored = buffer.get_num_timesteps()
    if stored < num_given:
        logger.warning(
            "The RLlib buffer state holds %d steps in %d episodes; this buffer's "
            "capacity=%d observation slots keeps the newest %d of them (each "
            "episode also needs a slot for its last observation). Build it with "
            "capacity >= %d to keep them all.",
            num_given,
            len(episodes),
            buffer.capacity,
            stored,
            num_given + len(episodes),
        )
    if "_sum_segment" in state and buffer.takes_rllib_priorities:
        _load_priorities(buffer, state, episodes, flat_slots)
    buffer.carry_over_lifetime_counts(
        episodes_evicted=int(state["_num_episodes_evicted"]),
        steps_added=max(int(state["_num_timesteps_added"]), num_given),
        steps_sampled=int(state["sampled_timesteps"]),
    )


def _chunk_from(episode: SingleAgentEpisode, *, source) -> dict:
    """`episode_adapter.read_chunk(episode)`, marked with where it came from."""
    chunk = episode_adapter.read_chunk(episode)
    chunk["source"] = source
    return chunk


def _load_leaves(
    sampler: PrioritySampler,
    slots: np.ndarray,
    leaves: np.ndarray,
    max_priority: Optional[float],
) -> None:
    """RLlib's leaves onto our `slots` (-1: a step not kept) and its max
    priority, if it has one."""
    kept = slots >= 0
    sampler.set_leaves(slots[kept], np.maximum(leaves[kept], _MIN_LEAF))
    if max_priority is not None:
        sampler.max_priority = float(max_priority)


def _leaves_at(tree_values, tree_indices) -> np.ndarray:
    """The leaves at `tree_indices` of an RLlib segment tree's `value` list
    (`2 * capacity` nodes, the leaves in the upper half)."""
    values = np.asarray(tree_values, dtype=np.float64)
    return values[values.shape[0] // 2 + np.asarray(tree_indices, dtype=np.int64)]


def _load_priorities(buffer, state, episodes, flat_slots: np.ndarray) -> None:
    """RLlib's leaves onto our slots, its max priority, its last sample."""
    triples = np.asarray(state["_indices"], dtype=np.int64).reshape(-1, 3)
    if triples.shape[0] == 0:
        return
    lengths = np.array([len(e) for e in episodes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    episode_index = triples[:, 0] - int(state["_num_episodes_evicted"])
    slots = flat_slots[offsets[episode_index] + triples[:, 1]]
    leaves = _leaves_at(state["_sum_segment"], triples[:, 2])
    _load_leaves(buffer.sampler, slots, leaves, state["_max_priority"])

    last = np.asarray(state.get("_last_sampled_indices") or [], dtype=np.int64)
    if last.size:
        order = np.argsort(triples[:, 2])
        found = order[np.searchsorted(triples[order, 2], last)]
        last_slots = slots[found]
        if np.all(last_slots >= 0):
            buffer.set_last_sample(last_slots)


def load_rllib_multi_agent_state(buffer, state: Dict[str, Any]) -> None:
    """Replaces a `FastMultiAgentPrioritizedEpisodeReplayBuffer`'s memory with
    that of RLlib's `MultiAgentPrioritizedEpisodeReplayBuffer` (or
    `MultiAgentEpisodeReplayBuffer`) state.

    Carried over as in `load_rllib_state`, module by module: the agents'
    steps, each module's priority leaves and max priority, the counters (env
    and agent steps added, steps sampled per module, episodes evicted). Not
    carried over: unanswered last samples (RLlib keeps tree indices per
    module that `update_priorities` would need), metrics, RNG.
    """
    _check_kind(state, buffer, multi_agent=True)
    episodes = [MultiAgentEpisode.from_state(s) for s in state["episodes"]]
    buffer.clear()
    slots_of = buffer.add_episodes(episodes)
    evicted_before = int(state["_num_episodes_evicted"])
    trees = dict(state.get("_module_to_sum_segment", []))
    max_priorities = dict(state.get("_module_to_max_priority", []))
    stored_modules = buffer.get_module_ids()
    for module_id, indices in state["_module_to_indices"]:
        if module_id not in stored_modules or module_id not in trees or not indices:
            continue
        module = buffer.module_buffer(module_id)
        if not module.takes_rllib_priorities:
            continue
        # (multi-agent episode index, agent id, agent step, tree index) per step.
        slots, tree_indices = [], []
        for episode_index, agent_id, step, tree_index in indices:
            chunk_slots = slots_of.get((episode_index - evicted_before, agent_id))
            slots.append(-1 if chunk_slots is None else chunk_slots[step])
            tree_indices.append(tree_index)
        _load_leaves(
            module.sampler,
            np.asarray(slots, dtype=np.int64),
            _leaves_at(trees[module_id].value, tree_indices),
            max_priorities.get(module_id),
        )
    buffer.carry_over_lifetime_counts(
        episodes_evicted=evicted_before,
        env_steps_added=int(state["_num_timesteps_added"]),
        agent_steps_added=int(state["_num_agent_timesteps_added"]),
        steps_sampled=int(state["sampled_timesteps"]),
        steps_sampled_per_module=dict(state["sampled_timesteps_per_module"]),
        episodes_evicted_per_module=dict(state["_num_module_episodes_evicted"]),
    )


# ------------------------------------------------------------- ours -> RLlib
class _Memory(NamedTuple):
    """What a state for RLlib's buffers is built from."""

    storage: RingStorage
    sampler: PrioritySampler
    # Slots of our unanswered last sample.
    last_sampled_slots: np.ndarray
    steps_added: int
    steps_sampled: int


def rllib_state(buffer, rllib_class: Optional[type] = None) -> Dict[str, Any]:
    """The state of an RLlib buffer holding `buffer`'s stored episodes.

    Args:
        buffer: One of our single-agent buffers.
        rllib_class: `PrioritizedEpisodeReplayBuffer` (default; our leaves go
            to its trees) or `EpisodeReplayBuffer` (uniform replay).

    Returns:
        A dict for `rllib_buffer.set_state(...)`; the RLlib buffer should have
        at least `buffer.get_num_timesteps()` capacity (RLlib's state does not
        hold it).
    """
    memory = _Memory(
        buffer.storage,
        buffer.sampler,
        buffer.last_sampled_slots,
        steps_added=buffer.get_added_timesteps(),
        steps_sampled=buffer.get_sampled_timesteps(),
    )
    return _rllib_state_of(memory, rllib_class)


def rllib_state_from_ours(state: Dict[str, Any], rllib_class: type) -> Dict[str, Any]:
    """The `get_state()` of one of our single-agent buffers as the state of
    `rllib_class` (see `rllib_state`), for a checkpoint of ours resumed with
    RLlib's buffer. Priorities go over as stored (NERS scores for a NERS
    buffer's state)."""
    if "module_buffers" in state:
        raise ValueError(
            "RLlib's buffers cannot take the state of "
            "FastMultiAgentPrioritizedEpisodeReplayBuffer (no conversion to "
            "RLlib's multi-agent layout); resume this run with our multi-agent "
            "buffer type."
        )
    capacity = int(state["capacity"])
    storage = RingStorage(capacity)
    storage.set_state(state, copy=False)  # read only
    sampler = PrioritySampler(capacity, alpha=float(state["_alpha"]))
    sampler.set_state(state)
    memory = _Memory(
        storage,
        sampler,
        np.asarray(state["_last_sampled_indices"], dtype=np.int64),
        steps_added=state["_num_steps_added_lifetime"],
        steps_sampled=state["sampled_timesteps"],
    )
    return _rllib_state_of(memory, rllib_class)


def _rllib_state_of(memory: _Memory, rllib_class: Optional[type]) -> Dict[str, Any]:
    """`rllib_class`'s state holding `memory`'s episodes (and priorities)."""
    rllib_class = rllib_class or PrioritizedEpisodeReplayBuffer
    if not (
        isinstance(rllib_class, type)
        and issubclass(rllib_class, EpisodeReplayBuffer)
        and not issubclass(rllib_class, MultiAgentEpisodeReplayBuffer)
    ):
        raise ValueError(
            f"rllib_class must be RLlib's PrioritizedEpisodeReplayBuffer or "
            f"EpisodeReplayBuffer (single-agent states go to single-agent "
            f"buffers), got {rllib_class!r}."
        )
    prioritized = issubclass(rllib_class, PrioritizedEpisodeReplayBuffer)
    storage = memory.storage
    stored = episode_adapter.stored_episodes_with_slots(storage)
    episodes = [episode for episode, _ in stored]
    capacity = max(storage.capacity, storage.num_transitions, 1)
    if prioritized:
        target = rllib_class(capacity=capacity, alpha=memory.sampler.alpha)
    else:
        target = rllib_class(capacity=capacity)
    if episodes:
        target.add(episodes)
    state = target.get_state()
    if prioritized and episodes:
        _write_rllib_priorities(state, memory, [slots for _, slots in stored])
    # Our counters, and RLlib's episode indices offset by the evicted episodes.
    evicted = storage.num_episodes_evicted_lifetime
    state["_num_episodes_evicted"] = evicted
    state["episode_id_to_index"] = [
        (episode_id, index + evicted)
        for episode_id, index in state["episode_id_to_index"]
    ]
    state["_indices"] = [(e + evicted, *rest) for e, *rest in state["_indices"]]
    state["_num_timesteps_added"] = memory.steps_added
    state["sampled_timesteps"] = memory.steps_sampled
    return state


def _write_rllib_priorities(
    state: Dict[str, Any], memory: _Memory, step_slots: List[np.ndarray]
) -> None:
    """Our leaves into the sum and min trees of an RLlib state, our max
    priority, and our unanswered last sample as its `_last_sampled_indices`.

    RLlib's state holds each tree as its `value` list (`2 * capacity` nodes,
    the leaves in the upper half) and each stored step as an `_indices`
    triple `(episode index, step, tree index)`.
    """
    triples = np.asarray(state["_indices"], dtype=np.int64)
    flat = np.concatenate(step_slots)
    offsets = np.concatenate([[0], np.cumsum([s.size for s in step_slots])])
    slots = flat[offsets[triples[:, 0]] + triples[:, 1]]
    leaves = np.asarray(memory.sampler.sum_tree[slots])
    tree_capacity = len(state["_sum_segment"]) // 2
    for key, neutral, reduce in (
        ("_sum_segment", 0.0, np.add),
        ("_min_segment", float("inf"), np.minimum),
    ):
        heap = np.full(2 * tree_capacity, neutral, dtype=np.float64)
        heap[tree_capacity + triples[:, 2]] = leaves
        # Internal node i reduces its children 2i and 2i + 1, level by level.
        width = tree_capacity
        while width > 1:
            children = heap[width : 2 * width]
            heap[width // 2 : width] = reduce(children[0::2], children[1::2])
            width //= 2
        state[key] = heap.tolist()
    state["_max_priority"] = float(memory.sampler.max_priority)
    tree_of_slot = dict(zip(slots.tolist(), triples[:, 2].tolist()))
    last = memory.last_sampled_slots.tolist()
    if all(slot in tree_of_slot for slot in last):
        state["_last_sampled_indices"] = [tree_of_slot[slot] for slot in last]
