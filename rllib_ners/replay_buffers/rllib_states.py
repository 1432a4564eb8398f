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
* `rllib_state(buffer, rllib_class)` is the way back: the state an RLlib buffer's
  `set_state()` takes, built by adding our stored episodes to a fresh RLlib
  buffer (RLlib's own O(N) Python bookkeeping; a one-off conversion) and
  writing our leaves into its segment trees; `rllib_state_from_ours()` does
  the same from a saved state of ours.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers import episode_adapter

logger = logging.getLogger(__name__)

# The smallest leaf a stored transition may have (RLlib floors priorities at
# 1e-12 before the exponent; ours never lets a stored step reach 0).
_MIN_LEAF = 1e-300


def is_rllib_state(state: Any) -> bool:
    """Whether `state` is the `get_state()` of one of RLlib's episode buffers."""
    return isinstance(state, dict) and "episodes" in state and "_indices" in state


def is_rllib_multi_agent_state(state: Any) -> bool:
    return is_rllib_state(state) and "_module_to_indices" in state


# ------------------------------------------------------------- RLlib -> ours
def load_rllib_state(buffer, state: Dict[str, Any]) -> None:
    """Replaces `buffer`'s memory with that of an RLlib single-agent state.

    Args:
        buffer: A `FastPrioritizedEpisodeReplayBuffer` (or subclass).
        state: `EpisodeReplayBuffer.get_state()` or
            `PrioritizedEpisodeReplayBuffer.get_state()`.
    """
    if is_rllib_multi_agent_state(state):
        raise ValueError(
            f"This is the state of one of RLlib's multi-agent buffers; load it into "
            f"rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer, not "
            f"{type(buffer).__name__}."
        )
    episodes = [SingleAgentEpisode.from_state(s) for s in state["episodes"]]
    buffer._clear()
    chunks = []
    for k, episode in enumerate(episodes):
        if len(episode) > 0:
            chunk = episode_adapter.read_chunk(episode)
            chunk["source"] = k
            chunks.append(chunk)
    kept, step_slots = buffer._add_chunks(chunks, weight=None)
    flat_slots = _step_slots_of_episodes(episodes, kept, step_slots)

    stored = buffer.get_num_timesteps()
    num_given = sum(len(e) for e in episodes)
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
    if "_sum_segment" in state and buffer._takes_rllib_priorities:
        _load_priorities(buffer, state, episodes, flat_slots)

    evicted_before = int(state["_num_episodes_evicted"])
    storage = buffer._storage
    storage.num_episodes_evicted_lifetime += evicted_before
    storage.num_episodes_added_lifetime += evicted_before
    added = max(int(state["_num_timesteps_added"]), num_given)
    buffer._num_steps_added_lifetime = buffer._num_timesteps_added = added
    storage.num_steps_evicted_lifetime = added - stored
    buffer.sampled_timesteps = int(state["sampled_timesteps"])
    buffer._num_steps_sampled_lifetime = buffer.sampled_timesteps


def _step_slots_of_episodes(
    episodes: List[SingleAgentEpisode], kept: List[dict], step_slots: np.ndarray
) -> np.ndarray:
    """Our slot of every step of `episodes`, concatenated (-1: not kept)."""
    lengths = np.array([len(e) for e in episodes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.full(int(offsets[-1]), -1, dtype=np.int64)
    position = 0
    for chunk in kept:
        n = chunk["len"]
        start = offsets[chunk["source"]] + chunk.get("first_step", 0)
        flat[start : start + n] = step_slots[position : position + n]
        position += n
    return flat


def _load_priorities(buffer, state, episodes, flat_slots: np.ndarray) -> None:
    """RLlib's leaves onto our slots, its max priority, its last sample."""
    triples = np.asarray(state["_indices"], dtype=np.int64).reshape(-1, 3)
    if triples.shape[0] == 0:
        return
    lengths = np.array([len(e) for e in episodes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    episode_index = triples[:, 0] - int(state["_num_episodes_evicted"])
    slots = flat_slots[offsets[episode_index] + triples[:, 1]]
    tree_values = np.asarray(state["_sum_segment"], dtype=np.float64)
    tree_capacity = tree_values.shape[0] // 2
    leaves = tree_values[tree_capacity + triples[:, 2]]
    kept = slots >= 0
    buffer._sampler.set_leaves(slots[kept], np.maximum(leaves[kept], _MIN_LEAF))
    buffer._sampler.max_priority = float(state["_max_priority"])

    last = np.asarray(state.get("_last_sampled_indices") or [], dtype=np.int64)
    if last.size:
        order = np.argsort(triples[:, 2])
        found = order[np.searchsorted(triples[order, 2], last)]
        last_slots = slots[found]
        if np.all(last_slots >= 0):
            buffer._last_sampled_indices = last_slots
            buffer._last_sampled_stamps = buffer._storage.stamp[last_slots]


# ------------------------------------------------------------- ours -> RLlib
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
    from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
        MultiAgentEpisodeReplayBuffer,
    )

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
    stored = episode_adapter.stored_episodes_with_slots(buffer._storage)
    episodes = [episode for episode, _ in stored]
    capacity = max(buffer.capacity, buffer.get_num_timesteps(), 1)
    if prioritized:
        target = rllib_class(capacity=capacity, alpha=buffer.alpha)
    else:
        target = rllib_class(capacity=capacity)
    if episodes:
        target.add(episodes)
    if prioritized and episodes:
        _write_rllib_trees(buffer, target, [slots for _, slots in stored])
    state = target.get_state()
    # Our counters, and RLlib's episode indices offset by the evicted episodes.
    evicted = buffer.get_num_episodes_evicted()
    state["_num_episodes_evicted"] = evicted
    state["episode_id_to_index"] = [
        (episode_id, index + evicted)
        for episode_id, index in state["episode_id_to_index"]
    ]
    state["_indices"] = [(e + evicted, *rest) for e, *rest in state["_indices"]]
    state["_num_timesteps_added"] = buffer.get_added_timesteps()
    state["sampled_timesteps"] = buffer.get_sampled_timesteps()
    return state


def rllib_state_from_ours(state: Dict[str, Any], rllib_class: type) -> Dict[str, Any]:
    """The `get_state()` of one of our single-agent buffers as the state of
    `rllib_class` (see `rllib_state`), for a checkpoint of ours resumed with
    RLlib's buffer. Priorities go over as stored (NERS scores for a NERS
    buffer's state)."""
    from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
        FastPrioritizedEpisodeReplayBuffer,
    )

    if "module_buffers" in state:
        raise ValueError(
            "RLlib's buffers cannot take the state of "
            "FastMultiAgentPrioritizedEpisodeReplayBuffer (no conversion to "
            "RLlib's multi-agent layout); resume this run with our multi-agent "
            "buffer type."
        )
    buffer = FastPrioritizedEpisodeReplayBuffer(
        int(state["capacity"]),
        alpha=float(state["_alpha"]),
        frame_stack=int(state.get("frame_stack", 1)),
    )
    buffer.set_state(state)
    return rllib_state(buffer, rllib_class)


def _write_rllib_trees(buffer, target, step_slots: List[np.ndarray]) -> None:
    """Our leaves into the RLlib buffer's sum and min trees, its max priority
    and our unanswered last sample as its `_last_sampled_indices`."""
    triples = np.asarray(target._indices, dtype=np.int64)
    flat = np.concatenate(step_slots)
    offsets = np.concatenate([[0], np.cumsum([s.size for s in step_slots])])
    slots = flat[offsets[triples[:, 0]] + triples[:, 1]]
    leaves = buffer.get_priorities(slots)
    for tree, neutral, reduce in (
        (target._sum_segment, 0.0, np.add),
        (target._min_segment, float("inf"), np.minimum),
    ):
        heap = np.full(2 * tree.capacity, neutral, dtype=np.float64)
        heap[tree.capacity + triples[:, 2]] = leaves
        # Internal node i reduces its children 2i and 2i + 1, level by level.
        width = tree.capacity
        while width > 1:
            children = heap[width : 2 * width]
            heap[width // 2 : width] = reduce(children[0::2], children[1::2])
            width //= 2
        tree.set_state(heap.tolist())
    target._max_priority = float(buffer._sampler.max_priority)
    tree_of_slot = dict(zip(slots.tolist(), triples[:, 2].tolist()))
    last = buffer._last_sampled_indices.tolist()
    if all(slot in tree_of_slot for slot in last):
        target._last_sampled_indices = [tree_of_slot[slot] for slot in last]


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
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    if not is_rllib_multi_agent_state(state):
        raise ValueError(
            f"This is the state of one of RLlib's single-agent buffers; load it into "
            f"rllib_ners.FastPrioritizedEpisodeReplayBuffer, not "
            f"{type(buffer).__name__}."
        )
    episodes = [MultiAgentEpisode.from_state(s) for s in state["episodes"]]
    buffer._clear()
    slots_of = buffer._add_episodes(episodes, {})
    evicted_before = int(state["_num_episodes_evicted"])
    trees = dict(state.get("_module_to_sum_segment", []))
    max_priorities = dict(state.get("_module_to_max_priority", []))
    for module_id, indices in state["_module_to_indices"]:
        module = buffer._module_buffers.get(module_id)
        if module is None or module_id not in trees or not indices:
            continue
        if not module._takes_rllib_priorities:
            continue
        # (multi-agent episode index, agent id, agent step, tree index) per step.
        slots, tree_indices = [], []
        for episode_index, agent_id, step, tree_index in indices:
            chunk_slots = slots_of.get((episode_index - evicted_before, agent_id))
            slot = -1 if chunk_slots is None else chunk_slots[step]
            slots.append(slot)
            tree_indices.append(tree_index)
        slots = np.asarray(slots, dtype=np.int64)
        tree = trees[module_id]
        values = np.asarray(tree.value, dtype=np.float64)
        leaves = values[tree.capacity + np.asarray(tree_indices, dtype=np.int64)]
        kept = slots >= 0
        module._sampler.set_leaves(slots[kept], np.maximum(leaves[kept], _MIN_LEAF))
        if module_id in max_priorities:
            module._sampler.max_priority = float(max_priorities[module_id])
    buffer._num_episodes_evicted_total += evicted_before
    buffer._num_episodes_added += evicted_before
    buffer._num_env_steps_added = max(
        int(state["_num_timesteps_added"]), buffer._num_env_steps_added
    )
    buffer._num_agent_steps_added = max(
        int(state["_num_agent_timesteps_added"]), buffer._num_agent_steps_added
    )
    buffer.sampled_timesteps = int(state["sampled_timesteps"])
    for module_id, sampled in dict(state["sampled_timesteps_per_module"]).items():
        buffer.sampled_timesteps_per_module[module_id] = sampled
    for module_id, evicted in dict(state["_num_module_episodes_evicted"]).items():
        if module_id in buffer._module_buffers:
            storage = buffer._module_buffers[module_id]._storage
            storage.num_episodes_evicted_lifetime += evicted
            storage.num_episodes_added_lifetime += evicted
