"""Episode fragments packed into one numpy column per field: what a remote
EnvRunner ships to the replay buffer (no Ray).

A remote EnvRunner's `sample()` returns `SingleAgentEpisode` fragments, and Ray
pickles each whole: its spaces (a Box image space pickles its bounds), the
lookback the EnvRunner keeps for its own frame stacking and a dozen wrapper
objects. On MsPacman at 4 env steps per fragment that is 23,644 bytes per env
step, 3.35x the frames themselves (`benchmarks/atari_ingest.py`), and the
driver unpickles all of it while the buffer reads only each fragment's own
steps.

`pack_fragments()` runs on the EnvRunner after `sample()`. It keeps what the
buffer reads of each fragment - its `n + 1` observations (uint8 frames as the
env gave them, one per step plus the fragment's first), `n` actions, rewards
and extra model outputs, its infos, id, start and end flags - and joins them
across the fragments into one array per field. Spaces do not travel: the
receiver sets them (`with_spaces()`) from the Algorithm's, which are the
EnvRunners' env spaces. The buffers' `add()` takes a `PackedFragments` as it
takes the episodes and stores the same chunks, in the same order (tested:
equal storage).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Union

import numpy as np

__all__ = ["PackedFragments", "pack_fragments", "read_chunk"]


@dataclass
class PackedFragments:
    """Single-agent episode fragments as joined columns.

    Fragment `i` has `lengths[i]` steps; its rows are consecutive in every
    column: `observations` and `infos` hold `lengths[i] + 1` rows per fragment
    (the last is the observation after its last step), `actions`, `rewards`
    and each of `extra_model_outputs` hold `lengths[i]`.
    """

    ids: List[str]
    lengths: np.ndarray
    t_started: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    observations: np.ndarray
    infos: List[dict]
    actions: np.ndarray
    rewards: np.ndarray
    extra_model_outputs: Dict[str, np.ndarray] = field(default_factory=dict)
    # Not shipped: set by the receiver (`with_spaces`).
    observation_space: Any = None
    action_space: Any = None

    def __len__(self) -> int:
        """Env steps in all fragments (as `len()` of an episode counts them)."""
        return int(self.lengths.sum())

    def with_spaces(self, observation_space, action_space) -> PackedFragments:
        """Sets the fragments' spaces (the env's single-agent spaces); returns self."""
        self.observation_space = observation_space
        self.action_space = action_space
        return self

    def chunks(self) -> List[dict]:
        """The fragments as the buffer's chunk dicts (`read_chunk()`'s keys),
        their arrays views into the columns."""
        if self.observation_space is None or self.action_space is None:
            raise ValueError(
                "PackedFragments need their spaces before a replay buffer can "
                "store them: call packed.with_spaces(observation_space, "
                "action_space) with the env's single-agent spaces."
            )
        step_ends = np.cumsum(self.lengths).tolist()
        chunks = []
        for i, n in enumerate(self.lengths.tolist()):
            end = step_ends[i]
            start = end - n
            # Fragment i's observations start after the i earlier fragments'
            # extra (last) observation.
            obs_start, obs_end = start + i, end + i + 1
            terminated, truncated = bool(self.terminated[i]), bool(self.truncated[i])
            chunks.append(
                {
                    "id": self.ids[i],
                    "len": n,
                    "t_started": int(self.t_started[i]),
                    "obs": self.observations[obs_start:obs_end],
                    "infos": self.infos[obs_start:obs_end],
                    "actions": self.actions[start:end],
                    "rewards": self.rewards[start:end],
                    "terminated": terminated,
                    "truncated": truncated,
                    "done": terminated or truncated,
                    "extra_outputs": {
                        key: column[start:end]
                        for key, column in self.extra_model_outputs.items()
                    },
                    "observation_space": self.observation_space,
                    "action_space": self.action_space,
                }
            )
        return chunks


def read_chunk(episode: Any) -> dict:
    """The fields of a non-empty single-agent episode fragment as the buffer's
    writer takes them (see `writer` for the keys), with its spaces and its
    extra model outputs (name -> `n` rows)."""
    n = len(episode)
    infos = episode.get_infos(slice(0, n + 1))
    return {
        "id": episode.id_,
        "len": n,
        "t_started": int(episode.t_started),
        "obs": np.asarray(episode.get_observations(slice(0, n + 1))),
        "infos": list(infos) if infos is not None else [{}] * (n + 1),
        "actions": np.asarray(episode.get_actions(slice(0, n))),
        "rewards": np.asarray(episode.get_rewards(slice(0, n)), dtype=np.float64),
        "terminated": bool(episode.is_terminated),
        "truncated": bool(episode.is_truncated),
        "done": bool(episode.is_done),
        "extra_outputs": {
            key: episode.get_extra_model_outputs(key, slice(0, n))
            for key in episode.extra_model_outputs.keys()
        },
        "observation_space": episode.observation_space,
        "action_space": episode.action_space,
    }


def pack_fragments(episodes: List[Any]) -> Union[PackedFragments, List[Any]]:
    """`episodes` (single-agent fragments, as `sample()` returns them) packed
    into one `PackedFragments`: their `read_chunk()` fields joined; fragments
    without steps are left out (the buffer stores none of them).

    Returns `episodes` unchanged where packing would not keep what the buffer
    reads: fragments whose extra model outputs name different keys (the buffer
    fills a missing key's steps with zeros, decided per fragment), or anything
    but single-agent episodes.
    """
    fragments = [episode for episode in episodes if len(episode) > 0]
    if not fragments:
        return []
    if not all(_is_single_agent(episode) for episode in fragments):
        return episodes
    chunks = [read_chunk(episode) for episode in fragments]
    keys = list(chunks[0]["extra_outputs"])
    if any(list(chunk["extra_outputs"]) != keys for chunk in chunks[1:]):
        return episodes

    def column(field):
        return [chunk[field] for chunk in chunks]

    return PackedFragments(
        ids=column("id"),
        lengths=np.array(column("len"), dtype=np.int64),
        t_started=np.array(column("t_started"), dtype=np.int64),
        terminated=np.array(column("terminated"), dtype=bool),
        truncated=np.array(column("truncated"), dtype=bool),
        observations=_joined(column("obs")),
        infos=[info for infos in column("infos") for info in infos],
        actions=_joined(column("actions")),
        rewards=_joined(column("rewards")),
        extra_model_outputs={
            key: _joined(outputs[key] for outputs in column("extra_outputs"))
            for key in keys
        },
    )


def _joined(parts) -> np.ndarray:
    parts = [np.asarray(part) for part in parts]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _is_single_agent(episode: Any) -> bool:
    # Duck-typed, to keep Ray out of this module: a MultiAgentEpisode has
    # per-agent episodes, a SingleAgentEpisode a single observation buffer.
    return hasattr(episode, "get_observations") and not hasattr(
        episode, "agent_episodes"
    )
