"""Writer of the episode buffer: stores episode chunks in the ring (no Ray).

A *chunk* is a dict read from an episode fragment (see `episode_adapter`):
`id`, `len` (steps `n`), `t_started`, `obs` (`n + 1` rows), `infos` (`n + 1`),
`actions`, `rewards` (`n` rows), `extra` (name -> `n` rows), the episode's
`terminated`/`truncated`/`done` flags (plus what `episode_adapter` sizes
the storage from: the spaces and the extra outputs as the episode gave them).

A chunk whose episode has a stored tail (an earlier chunk of the same `id`)
*continues* it: the tail becomes the chunk's first step in place, so the chunk
takes `n` new slots instead of `n + 1` (see `ring_storage`). A chunk marked
`fresh` never continues a stored tail. A whole `add()` call is written with one
scatter per field.

A call that brings more observations than the ring holds keeps its newest
steps (`newest_that_fit`): the same steps the ring would hold had the chunks
arrived one by one, oldest slots overwritten first.

One call: `fit_to_ring` decides what is written (`count_dropped` counts the
rest), the storage evicts the slots it takes, `write_chunks` writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Tuple

import numpy as np

from rllib_ners.replay_buffers.ring_storage import RingStorage


def object_column(items: list) -> np.ndarray:
    """A 1-d object array of `items` (dicts stay dicts, not nested arrays)."""
    column = np.empty(len(items), dtype=object)
    column[:] = items
    return column


def num_new_slots(chunks: List[dict], continuing: List[bool]) -> int:
    """A fresh fragment needs a slot per step plus its tail; a continuation
    reuses its predecessor's tail as the first step's observation."""
    return sum(c["len"] + (0 if cont else 1) for c, cont in zip(chunks, continuing))


def plan_continuations(storage: RingStorage, chunks: List[dict]) -> List[bool]:
    """Decides which chunks can reuse their episode's stored tail slot.

    A tail counts only if it still belongs to that episode and its fragment
    keeps a transition: the newest one (`prev[tail]`, older than the tail) must
    not be among the slots this very call will overwrite, or the fragment is
    closed (see `ring_storage`). Dropping a continuation needs one more slot,
    so the check repeats until it is stable (it only ever flips chunks from
    continuing to fresh, so it ends).
    """
    continuing = []
    # A later chunk of an episode whose earlier chunk is in the same call
    # continues that chunk's new tail (unless the earlier one ended it).
    in_call = {}
    for i, chunk in enumerate(chunks):
        entry = storage.open_episodes.get(chunk["id"])
        ok = (
            not chunk.get("fresh", False)
            and entry is not None
            and storage.occupied[entry[1]]
            and storage.episode_uid[entry[1]] == entry[0]
            and not storage.is_transition[entry[1]]
        )
        if chunk["id"] in in_call:
            ok = not chunks[in_call[chunk["id"]]]["done"]
        continuing.append(bool(ok))
        in_call[chunk["id"]] = i
    first_of_id = {}
    for i, chunk in enumerate(chunks):
        first_of_id.setdefault(chunk["id"], i)
    while True:
        num_new = num_new_slots(chunks, continuing)
        changed = False
        for i, chunk in enumerate(chunks):
            # Only continuations of *stored* tails can be overwritten here.
            if continuing[i] and first_of_id[chunk["id"]] == i:
                tail = storage.open_episodes[chunk["id"]][1]
                newest_step = storage.prev[tail]
                if (newest_step - storage.write_pos) % storage.capacity < num_new:
                    continuing[i] = False
                    changed = True
        if not changed:
            return continuing


def newest_that_fit(chunks: List[dict], capacity: int) -> List[dict]:
    """The newest steps of `chunks` that `capacity` fresh slots hold.

    Walks the chunks from the newest back. A chunk costs its steps plus one
    slot for its first observation, unless a later kept chunk of the same
    episode continues it (that chunk then needs no slot for its first
    observation). The chunk that no longer fits whole keeps its newest steps;
    older chunks are dropped. Kept chunks never continue a stored tail (the
    ring is overwritten to make room for them): each episode's first kept
    chunk is marked `fresh`.

    Returns:
        The kept chunks, in order; a cut chunk is a new dict whose rows start
        `first_step` steps into the original.
    """
    kept: List[dict] = []
    budget = capacity
    later_ids = set()
    for chunk in reversed(chunks):
        feeds_later = chunk["id"] in later_ids and not chunk["done"]
        first_obs = 0 if feeds_later else 1
        if chunk["len"] + first_obs <= budget:
            kept.append(chunk)
            budget -= chunk["len"] + first_obs
            later_ids.add(chunk["id"])
            continue
        if budget - first_obs >= 1:
            kept.append(newest_steps(chunk, budget - first_obs))
        break
    kept.reverse()
    seen = set()
    for chunk in kept:
        if chunk["id"] not in seen:
            chunk["fresh"] = True
            seen.add(chunk["id"])
    return kept


def newest_steps(chunk: dict, num_steps: int) -> dict:
    """A copy of `chunk` holding only its newest `num_steps` steps."""
    first = chunk["len"] - num_steps
    cut = dict(chunk)
    cut.update(
        len=num_steps,
        first_step=first,
        t_started=chunk["t_started"] + first,
        obs=chunk["obs"][first:],
        infos=chunk["infos"][first:],
        actions=chunk["actions"][first:],
        rewards=chunk["rewards"][first:],
        extra={key: values[first:] for key, values in chunk["extra"].items()},
    )
    return cut


def fit_to_ring(
    storage: RingStorage, chunks: List[dict]
) -> Tuple[List[dict], List[bool]]:
    """The chunks to write and which of them continue a stored tail.

    All of `chunks` when their new observations fit the ring; else their
    newest steps that do (`newest_that_fit`), none of them continuing.
    """
    continuing = plan_continuations(storage, chunks)
    if num_new_slots(chunks, continuing) <= storage.capacity:
        return chunks, continuing
    kept = newest_that_fit(chunks, storage.capacity)
    return kept, plan_continuations(storage, kept)


def count_dropped(storage: RingStorage, chunks: List[dict], kept: List[dict]) -> int:
    """Counts the steps of `chunks` that `kept` lacks as evicted, and episodes
    of which nothing was kept nor stored before as added and evicted; returns
    the number of kept steps."""
    num_kept = sum(c["len"] for c in kept)
    storage.num_steps_evicted_lifetime += sum(c["len"] for c in chunks) - num_kept
    kept_ids = {c["id"] for c in kept}
    lost = {
        c["id"]
        for c in chunks
        if c["id"] not in kept_ids and c["id"] not in storage.open_episodes
    }
    storage.num_episodes_added_lifetime += len(lost)
    storage.num_episodes_evicted_lifetime += len(lost)
    return num_kept


class AddedSteps(NamedTuple):
    """Where the chunks of one `add()` call went."""

    # The chunks stored (a cut chunk: its newest steps, see `newest_that_fit`).
    kept: List[dict]
    # The slots of the kept chunks' steps, in chunk order.
    step_slots: np.ndarray
    # Ids of the episodes whose last stored transition this call overwrote.
    evicted_episodes: List[str]
    # Ids of the episodes this call stored anew (not continuing a stored one).
    new_episodes: List[str]
    # Per episode id, its transitions this call overwrote.
    steps_evicted: Dict[str, int]


def step_slots_by_source(
    chunks: List[dict], added: AddedSteps
) -> Dict[Any, np.ndarray]:
    """Per chunk `source` (a key the caller set on each chunk), the slot of
    each of the chunk's steps; -1 where a step was not kept."""
    slots_of = {c["source"]: np.full(c["len"], -1, np.int64) for c in chunks}
    position = 0
    for chunk in added.kept:
        first, n = chunk.get("first_step", 0), chunk["len"]
        slots = added.step_slots[position : position + n]
        slots_of[chunk["source"]][first : first + n] = slots
        position += n
    return slots_of


def write_chunks(
    storage: RingStorage,
    chunks: List[dict],
    continuing: List[bool],
    new_slots: np.ndarray,
) -> Tuple[np.ndarray, np.ndarray]:
    """Writes `chunks` into the (already evicted) `new_slots`.

    Links each chunk to its episode's stored tail where `continuing`, records
    the open fragments and each fragment's transition count, sets
    `chunk["uid"]` and `chunk["obs_ts"]`, updates the storage counters and
    moves the ring's head.

    Returns:
        `(obs_slots, step_slots)`: the slots that received an observation, and
        the slots that became (or were rewritten as) transitions, in chunk
        order; the latter include the reused tails.
    """
    layout = _lay_out_fragments(storage, chunks, continuing, new_slots)
    obs_slots = np.concatenate(layout.obs_slots)
    step_slots = np.concatenate(layout.step_slots)
    _scatter_observations(storage, chunks, layout, obs_slots)
    # Before the steps: a tail written by this call that a later chunk of the
    # same call continues is among the step slots, and must end a transition.
    _close_tails(storage, np.asarray(layout.tail_slots, dtype=np.int64))
    _scatter_transitions(storage, chunks, layout, step_slots)
    storage.num_transitions += int(sum(c["len"] for c in chunks))
    storage.num_tails += len(chunks)
    storage.advance(new_slots.shape[0])
    return obs_slots, step_slots


@dataclass
class _Layout:
    """Where one call's chunks go, one entry per chunk: the slots receiving an
    observation and the chunk's rows written there, each observation's `prev`,
    the slots becoming transitions with their `next`, and the new tail."""

    obs_slots: List[np.ndarray] = field(default_factory=list)
    obs_rows: List[np.ndarray] = field(default_factory=list)
    prev_slots: List[np.ndarray] = field(default_factory=list)
    step_slots: List[np.ndarray] = field(default_factory=list)
    next_slots: List[np.ndarray] = field(default_factory=list)
    tail_slots: List[int] = field(default_factory=list)


def _lay_out_fragments(
    storage: RingStorage,
    chunks: List[dict],
    continuing: List[bool],
    new_slots: np.ndarray,
) -> _Layout:
    """Assigns each chunk its slots and updates the fragment bookkeeping
    (one iteration per chunk, not per step)."""
    layout = _Layout()
    offset = 0
    # Fragments written earlier in this very call: id -> (uid, tail slot).
    written_now: Dict[str, Tuple[int, int]] = {}
    for chunk, cont in zip(chunks, continuing):
        n = chunk["len"]
        if cont:
            uid, old_tail = (
                written_now.get(chunk["id"]) or storage.open_episodes[chunk["id"]]
            )
            mine = new_slots[offset : offset + n]
            rows, prev, steps, nexts = _continue_fragment(
                storage, chunk, uid, old_tail, mine
            )
        else:
            mine = new_slots[offset : offset + n + 1]
            uid, (rows, prev, steps, nexts) = _start_fragment(storage, chunk, mine)
        offset += len(mine)
        tail = int(mine[-1])
        layout.obs_slots.append(mine)
        layout.obs_rows.append(rows)
        layout.prev_slots.append(prev)
        layout.step_slots.append(steps)
        layout.next_slots.append(nexts)
        layout.tail_slots.append(tail)
        written_now[chunk["id"]] = (uid, tail)
        chunk["uid"] = uid
        chunk["obs_ts"] = chunk["t_started"] + rows
        if chunk["done"]:
            storage.open_episodes.pop(chunk["id"], None)
        else:
            storage.open_episodes[chunk["id"]] = (uid, tail)
            storage.tail_slot_to_episode_id[tail] = chunk["id"]
    return layout


def _continue_fragment(
    storage: RingStorage, chunk: dict, uid: int, old_tail: int, mine: np.ndarray
) -> Tuple[np.ndarray, ...]:
    """A chunk continuing fragment `uid` at its tail `old_tail`: the tail
    becomes the first step, `mine` (`n` slots) take observations `1..n`.

    Returns the chunk's observation rows, their `prev` slots, its step slots
    and their `next` slots.
    """
    n = chunk["len"]
    storage.tail_slot_to_episode_id.pop(old_tail, None)
    # The old tail stops being a tail.
    storage.num_tails -= 1
    storage.steps_per_episode[uid] += n
    steps = np.concatenate([[old_tail], mine[:-1]])
    return np.arange(1, n + 1), steps, steps, mine


def _start_fragment(
    storage: RingStorage, chunk: dict, mine: np.ndarray
) -> Tuple[int, Tuple[np.ndarray, ...]]:
    """A chunk starting a new fragment in `mine` (`n + 1` slots, the last one
    its tail): its uid, and what `_continue_fragment` returns."""
    n = chunk["len"]
    uid = storage.next_uid
    storage.next_uid += 1
    # A stored fragment of this episode that is not continued stays as it is,
    # but can no longer be continued.
    stale = storage.open_episodes.pop(chunk["id"], None)
    if stale is not None:
        storage.tail_slot_to_episode_id.pop(stale[1], None)
    storage.steps_per_episode[uid] = n
    storage.episode_ids[uid] = chunk["id"]
    storage.num_episodes_added_lifetime += 1
    prev = np.concatenate([[-1], mine[:-1]])
    return uid, (np.arange(n + 1), prev, mine[:-1], mine[1:])


def _scatter_observations(
    storage: RingStorage, chunks: List[dict], layout: _Layout, obs_slots: np.ndarray
) -> None:
    """The per-observation fields, one scatter each for the whole call."""
    rows = layout.obs_rows
    storage.obs[obs_slots] = np.concatenate([c["obs"][r] for c, r in zip(chunks, rows)])
    storage.infos[obs_slots] = np.concatenate(
        [object_column(c["infos"])[r] for c, r in zip(chunks, rows)]
    )
    storage.ts[obs_slots] = np.concatenate([c["obs_ts"] for c in chunks])
    storage.episode_uid[obs_slots] = np.concatenate(
        [np.full(len(s), c["uid"]) for c, s in zip(chunks, layout.obs_slots)]
    )
    storage.occupied[obs_slots] = True
    storage.prev[obs_slots] = np.concatenate(layout.prev_slots)
    storage.stamp[obs_slots] = storage.num_slots_written + np.arange(len(obs_slots))


def _close_tails(storage: RingStorage, tails: np.ndarray) -> None:
    """Each fragment's last observation: no transition, no next, not done."""
    storage.is_transition[tails] = False
    storage.next[tails] = -1
    storage.terminated[tails] = False
    storage.truncated[tails] = False


def _scatter_transitions(
    storage: RingStorage, chunks: List[dict], layout: _Layout, step_slots: np.ndarray
) -> None:
    """The per-step fields, one scatter each for the whole call; only a
    chunk's last step carries its episode's terminated/truncated flag."""
    storage.is_transition[step_slots] = True
    storage.next[step_slots] = np.concatenate(layout.next_slots)
    storage.actions[step_slots] = np.concatenate([c["actions"] for c in chunks])
    storage.rewards[step_slots] = np.concatenate([c["rewards"] for c in chunks])
    ends = np.concatenate([np.arange(c["len"]) == c["len"] - 1 for c in chunks])
    storage.terminated[step_slots] = ends & np.concatenate(
        [np.full(c["len"], c["terminated"]) for c in chunks]
    )
    storage.truncated[step_slots] = ends & np.concatenate(
        [np.full(c["len"], c["truncated"]) for c in chunks]
    )
    for key, column in storage.extra.items():
        column[step_slots] = np.concatenate([c["extra"][key] for c in chunks])
