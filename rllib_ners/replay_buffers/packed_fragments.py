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

__all__ = ["PackedFragments", "pack_fragments"]


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

    def env_steps(self) -> int:
        return len(self)

    @property
    def num_fragments(self) -> int:
        return len(self.ids)

    def with_spaces(self, observation_space, action_space) -> PackedFragments:
        """Sets the fragments' spaces (the env's single-agent spaces); returns self."""
        self.observation_space = observation_space
        self.action_space = action_space
        return self

    def chunks(self) -> List[dict]:
        """The fragments as the buffer's chunk dicts (`episode_adapter.read_chunk`
        keys), their arrays views into the columns."""
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


def pack_fragments(episodes: List[Any]) -> Union[PackedFragments, List[Any]]:
    """`episodes` (single-agent fragments, as `sample()` returns them) packed
    into one `PackedFragments`; fragments without steps are left out (the
    buffer stores none of them).

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
    keys = list(fragments[0].extra_model_outputs.keys())
    if any(list(e.extra_model_outputs.keys()) != keys for e in fragments[1:]):
        return episodes
    lengths = np.array([len(episode) for episode in fragments], dtype=np.int64)
    infos: List[dict] = []
    for episode, n in zip(fragments, lengths.tolist()):
        fragment_infos = episode.get_infos(slice(0, n + 1))
        infos += list(fragment_infos) if fragment_infos is not None else [{}] * (n + 1)
    return PackedFragments(
        ids=[episode.id_ for episode in fragments],
        lengths=lengths,
        t_started=np.array([e.t_started for e in fragments], dtype=np.int64),
        terminated=np.array([e.is_terminated for e in fragments], dtype=bool),
        truncated=np.array([e.is_truncated for e in fragments], dtype=bool),
        observations=_joined(
            e.get_observations(slice(0, n + 1)) for e, n in zip(fragments, lengths)
        ),
        infos=infos,
        actions=_joined(e.get_actions(slice(0, n)) for e, n in zip(fragments, lengths)),
        rewards=np.concatenate(
            [
                np.asarray(e.get_rewards(slice(0, n)), dtype=np.float64)
                for e, n in zip(fragments, lengths)
            ]
        ),
        extra_model_outputs={
            key: _joined(
                e.get_extra_model_outputs(key, slice(0, n))
                for e, n in zip(fragments, lengths)
            )
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
