"""Ring storage of the prioritized episode buffer (numpy only, no Ray).

Every field lives in a preallocated ring array of `capacity` slots, one slot per
stored observation, kept in the observation's own dtype (uint8 stays uint8). A
slot holding `o_t` of a stored episode also holds that step's transition fields
(`a_t`, `r_t`, terminated/truncated flags after the step, extra model outputs,
timestep `t`) and a pointer `next[slot]` to the slot holding `o_{t+1}`.

The last observation of every stored episode fragment sits in a *tail* slot: it
has no action, priority 0 and can never be drawn. When a later chunk of the same
episode arrives (same `id_`), the tail is turned into a transition in place and
the chunk's new observations are written at the head of the ring (see
`writer`). So each observation is stored once, and an episode costs exactly one
slot beyond its number of steps. `capacity` therefore counts stored
observations.

Eviction is first-in-first-out by slot. Because `next` pointers always point to
slots written later, evicting the oldest slot can never leave a dangling
pointer; an episode evicted from its start stays sampleable from its remaining
steps.

Episodes are counted as RLlib's buffers count them: each stored *fragment*
(`uid`) is one episode, stored while at least one of its transitions is. Once
its last transition is evicted the episode counts as evicted and is closed: a
later chunk of it starts a new fragment, a new episode (RLlib likewise stores a
chunk of an evicted episode as a new episode).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

# Counters that states saved by earlier versions lack (`set_state` rebuilds them).
_COUNTERS_ADDED_LATER = ("num_episodes_added_lifetime", "num_episodes_evicted_lifetime")


def copy_if_array(value):
    """A copy of a numpy array; any other value as it is."""
    return value.copy() if isinstance(value, np.ndarray) else value


def same(value):
    """The value itself (`get_state(copy=False)`)."""
    return value


class RingStorage:
    """The ring arrays of `capacity` observation slots and their bookkeeping.

    Checkpoints name every attribute with a leading underscore (`next` is saved
    as `_next`): the names the buffer's state has always used.
    """

    # Saved as numpy arrays (copied unless `copy=False`).
    STATE_ARRAYS = (
        "next",
        "prev",
        "is_transition",
        "occupied",
        "episode_uid",
        "stamp",
        "ts",
        "rewards",
        "terminated",
        "truncated",
        "obs",
        "actions",
        "infos",
    )
    # Saved as they are.
    STATE_SCALARS = (
        "write_pos",
        "num_slots_written",
        "num_transitions",
        "num_tails",
        "next_uid",
        "num_steps_evicted_lifetime",
        "num_episodes_added_lifetime",
        "num_episodes_evicted_lifetime",
        "observation_space",
        "action_space",
    )

    def __init__(self, capacity: int):
        self.capacity = capacity
        # Slot bookkeeping (always allocated: small integer arrays).
        self.next = np.full(capacity, -1, dtype=np.int64)
        # Slot of the previous observation of the same episode (-1: none stored);
        # only valid while that slot is occupied and older (see `frame_stack`).
        self.prev = np.full(capacity, -1, dtype=np.int64)
        self.is_transition = np.zeros(capacity, dtype=bool)
        self.occupied = np.zeros(capacity, dtype=bool)
        self.episode_uid = np.full(capacity, -1, dtype=np.int64)
        # Grows with every slot written: orders slots by age across ring wraps.
        self.stamp = np.full(capacity, -1, dtype=np.int64)
        self.ts = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float64)
        self.terminated = np.zeros(capacity, dtype=bool)
        self.truncated = np.zeros(capacity, dtype=bool)
        # Field arrays whose shape and dtype come from the first episode added.
        self.obs: Optional[np.ndarray] = None
        self.actions: Optional[np.ndarray] = None
        self.infos = np.empty(capacity, dtype=object)
        self.extra: Dict[str, np.ndarray] = {}
        self.observation_space = None
        self.action_space = None

        self.write_pos = 0
        self.num_slots_written = 0
        self.num_transitions = 0
        self.num_tails = 0
        self.next_uid = 0
        self.num_steps_evicted_lifetime = 0
        self.num_episodes_added_lifetime = 0
        self.num_episodes_evicted_lifetime = 0
        # Episode id -> (uid, tail slot) for fragments that may still continue.
        self.open_episodes: Dict[str, Tuple[int, int]] = {}
        self.tail_slot_to_episode_id: Dict[int, str] = {}
        # Stored fragments: uid -> number of stored transitions, and uid -> the
        # episode id it belongs to. A fragment leaves both with its last
        # transition.
        self.steps_per_episode: Dict[int, int] = {}
        self.episode_ids: Dict[int, str] = {}

    # ------------------------------------------------------------ allocation
    @property
    def allocated(self) -> bool:
        """Whether the field arrays exist (they do after the first `add()`)."""
        return self.obs is not None

    def allocate(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        extra: Dict[str, np.ndarray],
    ) -> None:
        """Allocates the field arrays like the rows of the given sample arrays.

        Args:
            obs: Observations, `[n, ...]`; each slot holds one row.
            actions: Actions, `[n, ...]`.
            extra: Extra model output name -> values `[n, ...]`.
        """
        self.obs = np.zeros((self.capacity,) + obs.shape[1:], dtype=obs.dtype)
        self.actions = np.zeros(
            (self.capacity,) + actions.shape[1:], dtype=actions.dtype
        )
        for key, values in extra.items():
            self.extra[key] = np.zeros(
                (self.capacity,) + values.shape[1:], dtype=values.dtype
            )

    # -------------------------------------------------------------- eviction
    def head_slots(self, num_new: int) -> np.ndarray:
        """The next `num_new` slots to write, from the head of the ring."""
        return (self.write_pos + np.arange(num_new)) % self.capacity

    def advance(self, num_new: int) -> None:
        """Moves the head past `num_new` slots just written."""
        self.num_slots_written += num_new
        self.write_pos = (self.write_pos + num_new) % self.capacity

    def evict(self, slots: np.ndarray) -> Tuple[np.ndarray, List[str], Dict[str, int]]:
        """Frees the occupied ones among `slots`.

        Returns:
            The freed slots (maybe none); the ids of the episodes whose last
            stored transition was among them (now counted as evicted); and
            per episode touched, the number of its transitions freed.
        """
        occupied = self.occupied[slots]
        if not occupied.any():
            return slots[:0], [], {}
        evicted = slots[occupied]
        was_step = self.is_transition[evicted]
        num_steps = int(was_step.sum())
        self.num_transitions -= num_steps
        self.num_tails -= int((~was_step).sum())
        self.num_steps_evicted_lifetime += num_steps
        for tail in evicted[~was_step]:
            episode_id = self.tail_slot_to_episode_id.pop(int(tail), None)
            if episode_id is not None:
                self.open_episodes.pop(episode_id, None)
        finished, steps_freed = self._forget_steps(evicted[was_step])
        self.occupied[evicted] = False
        self.is_transition[evicted] = False
        self.episode_uid[evicted] = -1
        self.next[evicted] = -1
        self.prev[evicted] = -1
        return evicted, finished, steps_freed

    def _forget_steps(self, steps: np.ndarray) -> Tuple[List[str], Dict[str, int]]:
        """Counts evicted transitions off their fragments; closes and returns
        (the ids of) the fragments left without any, and the transitions
        freed per fragment id."""
        if steps.size == 0:
            return [], {}
        uids, counts = np.unique(self.episode_uid[steps], return_counts=True)
        finished, steps_freed = [], {}
        # One iteration per episode touched by this eviction, not per step.
        for uid, count in zip(uids.tolist(), counts.tolist()):
            episode_id = self.episode_ids[uid]
            steps_freed[episode_id] = steps_freed.get(episode_id, 0) + count
            left = self.steps_per_episode[uid] - count
            if left > 0:
                self.steps_per_episode[uid] = left
                continue
            del self.steps_per_episode[uid]
            del self.episode_ids[uid]
            finished.append(episode_id)
            # A tail without transitions left is never continued: the next
            # chunk of this episode starts a new fragment (a new episode).
            entry = self.open_episodes.get(episode_id)
            if entry is not None and entry[0] == uid:
                del self.open_episodes[episode_id]
                self.tail_slot_to_episode_id.pop(entry[1], None)
        self.num_episodes_evicted_lifetime += len(finished)
        return finished, steps_freed

    @property
    def num_episodes(self) -> int:
        """Stored episodes: fragments with at least one stored transition."""
        return len(self.steps_per_episode)

    def count_episodes_evicted_before(self, num_episodes: int) -> None:
        """Counts `num_episodes` episodes that the memory loaded into this
        storage (RLlib's buffer state) had evicted: added and evicted."""
        self.num_episodes_added_lifetime += num_episodes
        self.num_episodes_evicted_lifetime += num_episodes

    def broken_invariants(self, leaves: np.ndarray) -> List[str]:
        """What is wrong (nothing: an empty list), given the priority leaves.

        Only stored transitions have priority, every pointer reaches stored
        data of the same episode, and the counts match the flags.
        """
        problems = []
        is_step = self.is_transition
        if np.any(leaves[~is_step] != 0.0):
            problems.append("a non-transition slot has a priority")
        if np.any(leaves[is_step] <= 0.0):
            problems.append("a stored transition has priority 0")
        steps = np.flatnonzero(is_step)
        if steps.size and not np.all(self.occupied[self.next[steps]]):
            problems.append("a transition points at an evicted next observation")
        if steps.size and not np.all(
            self.episode_uid[self.next[steps]] == self.episode_uid[steps]
        ):
            problems.append("a transition points into another episode")
        if int(is_step.sum()) != self.num_transitions:
            problems.append("transition count is off")
        if int((self.occupied & ~is_step).sum()) != self.num_tails:
            problems.append("tail count is off")
        uids, counts = np.unique(self.episode_uid[steps], return_counts=True)
        if dict(zip(uids.tolist(), counts.tolist())) != self.steps_per_episode:
            problems.append("per-episode transition counts are off")
        if set(self.episode_ids) != set(self.steps_per_episode):
            problems.append("episode ids are off")
        return problems

    # ------------------------------------------------------------------ state
    def nbytes(self) -> int:
        """Bytes of the arrays; object arrays (`infos`) count pointers only."""
        arrays = [v for v in vars(self).values() if isinstance(v, np.ndarray)]
        arrays += list(self.extra.values())
        return int(sum(array.nbytes for array in arrays))

    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        """The arrays and counters under their checkpoint names (`_next`, ...)."""
        take = copy_if_array if copy else same
        state = {f"_{name}": take(getattr(self, name)) for name in self.STATE_ARRAYS}
        state.update({f"_{name}": getattr(self, name) for name in self.STATE_SCALARS})
        state["_extra"] = {key: take(column) for key, column in self.extra.items()}
        state["_open_episodes"] = dict(self.open_episodes)
        state["_tail_slot_to_episode_id"] = dict(self.tail_slot_to_episode_id)
        state["_steps_per_episode"] = dict(self.steps_per_episode)
        state["_episode_ids"] = dict(self.episode_ids)
        return state

    def set_state(self, state: Dict[str, Any], *, copy: bool = True) -> None:
        """Restores `get_state()`'s output; `copy=False` adopts its arrays.

        States saved before the episode counters existed restore them from the
        slots: counts per fragment, ids of open fragments (others get their
        uid as id), 0 episodes evicted.
        """
        take = copy_if_array if copy else same
        for name in self.STATE_ARRAYS + self.STATE_SCALARS:
            key = f"_{name}"
            if key in state or name not in _COUNTERS_ADDED_LATER:
                setattr(self, name, take(state[key]))
        self.extra = {k: take(v) for k, v in state["_extra"].items()}
        self.open_episodes = dict(state["_open_episodes"])
        self.tail_slot_to_episode_id = dict(state["_tail_slot_to_episode_id"])
        if "_steps_per_episode" in state:
            self.steps_per_episode = dict(state["_steps_per_episode"])
            self.episode_ids = dict(state["_episode_ids"])
            return
        uids, counts = np.unique(
            self.episode_uid[self.is_transition], return_counts=True
        )
        self.steps_per_episode = dict(zip(uids.tolist(), counts.tolist()))
        id_of_open = {uid: key for key, (uid, _) in self.open_episodes.items()}
        self.episode_ids = {uid: id_of_open.get(uid, str(uid)) for uid in uids.tolist()}
        self.num_episodes_added_lifetime = len(self.steps_per_episode)
        self.num_episodes_evicted_lifetime = 0
