"""Writer of the episode buffer: stores episode chunks in the ring (no Ray).

A *chunk* is a dict read from an episode fragment (see `episode_adapter`):
`id`, `len` (steps `n`), `t_started`, `obs` (`n + 1` rows), `infos` (`n + 1`),
`actions`, `rewards` (`n` rows), `extra` (name -> `n` rows), the episode's
`terminated`/`truncated`/`done` flags.

A chunk whose episode has a stored tail (an earlier chunk of the same `id`)
*continues* it: the tail becomes the chunk's first step in place, so the chunk
takes `n` new slots instead of `n + 1` (see `ring_storage`). A chunk marked
`fresh` never continues a stored tail. A whole `add()` call is written with one
scatter per field.

A call that brings more observations than the ring holds keeps its newest
steps (`newest_that_fit`): the same steps the ring would hold had the chunks
arrived one by one, oldest slots overwritten first.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

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
                written_now.get(chunk["id"]) or storage.open_episodes[chunk["id"]]
            )
            storage.tail_slot_to_episode_id.pop(old_tail, None)
            mine = new_slots[offset : offset + n]
            obs_slots.append(mine)
            obs_rows.append(np.arange(1, n + 1))
            prev_slots.append(np.concatenate([[old_tail], mine[:-1]]))
            step_slots.append(np.concatenate([[old_tail], mine[:-1]]))
            next_slots.append(mine)
            # The old tail stops being a tail.
            storage.num_tails -= 1
            storage.steps_per_episode[uid] += n
        else:
            uid = storage.next_uid
            storage.next_uid += 1
            # A stored fragment of this episode that is not continued stays as
            # it is, but can no longer be continued.
            stale = storage.open_episodes.pop(chunk["id"], None)
            if stale is not None:
                storage.tail_slot_to_episode_id.pop(stale[1], None)
            storage.steps_per_episode[uid] = n
            storage.episode_ids[uid] = chunk["id"]
            storage.num_episodes_added_lifetime += 1
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
            storage.open_episodes.pop(chunk["id"], None)
        else:
            storage.open_episodes[chunk["id"]] = (uid, tail)
            storage.tail_slot_to_episode_id[tail] = chunk["id"]

    # One scatter per field for the whole call.
    all_obs_slots = np.concatenate(obs_slots)
    all_step_slots = np.concatenate(step_slots)
    storage.obs[all_obs_slots] = np.concatenate(
        [c["obs"][rows] for c, rows in zip(chunks, obs_rows)]
    )
    storage.infos[all_obs_slots] = np.concatenate(
        [object_column(c["infos"])[rows] for c, rows in zip(chunks, obs_rows)]
    )
    storage.ts[all_obs_slots] = np.concatenate([c["obs_ts"] for c in chunks])
    storage.episode_uid[all_obs_slots] = np.concatenate(
        [np.full(len(s), c["uid"]) for c, s in zip(chunks, obs_slots)]
    )
    storage.occupied[all_obs_slots] = True
    storage.prev[all_obs_slots] = np.concatenate(prev_slots)
    storage.stamp[all_obs_slots] = storage.num_slots_written + np.arange(
        len(all_obs_slots)
    )
    tails = np.asarray(tail_slots, dtype=np.int64)
    storage.is_transition[tails] = False
    storage.next[tails] = -1
    storage.terminated[tails] = False
    storage.truncated[tails] = False

    storage.is_transition[all_step_slots] = True
    storage.next[all_step_slots] = np.concatenate(next_slots)
    storage.actions[all_step_slots] = np.concatenate([c["actions"] for c in chunks])
    storage.rewards[all_step_slots] = np.concatenate([c["rewards"] for c in chunks])
    ends = np.concatenate([np.arange(c["len"]) == c["len"] - 1 for c in chunks])
    storage.terminated[all_step_slots] = ends & np.concatenate(
        [np.full(c["len"], c["terminated"]) for c in chunks]
    )
    storage.truncated[all_step_slots] = ends & np.concatenate(
        [np.full(c["len"], c["truncated"]) for c in chunks]
    )
    for key, column in storage.extra.items():
        column[all_step_slots] = np.concatenate([c["extra"][key] for c in chunks])

    storage.num_transitions += int(sum(c["len"] for c in chunks))
    storage.num_tails += len(chunks)
    storage.advance(new_slots.shape[0])
    return all_obs_slots, all_step_slots
