"""Which multi-agent episode each stored agent episode belongs to (no Ray).

The multi-agent buffer stores each agent's steps in the buffer of the module
the agent maps to, as that agent's own episode (an *agent episode*, RLlib's
`SingleAgentEpisode` with its own id). `AgentEpisodeOwners` keeps, while an
agent episode is stored, its owner (multi-agent episode id, agent id) and its
number of stored fragments (1, but for an add that overflowed the ring), and
per multi-agent episode the number of its agent episodes stored: a
multi-agent episode counts as stored while any of its agent episodes is, and
as evicted when the last one goes, as RLlib counts them.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Tuple

import numpy as np

from rllib_ners.replay_buffers.bookkeeping import AddTally
from rllib_ners.replay_buffers.writer import AddedSteps

Owner = Tuple[str, Any]


def _count_off(counts: Dict[str, int], key: str) -> bool:
    """Counts one `key` off; True (and drops it) when none is left."""
    left = counts[key] - 1
    if left:
        counts[key] = left
        return False
    del counts[key]
    return True


class AgentEpisodeOwners:
    """The owners of the stored agent episodes, and the multi-agent episodes
    stored, added and evicted (see the module docstring)."""

    def __init__(self):
        self.owner_of: Dict[str, Owner] = {}
        self.fragments: Dict[str, int] = {}
        self.stored_agent_episodes: Dict[str, int] = {}
        # Stored steps (transitions) per agent over all module buffers, kept
        # up to date per add (the metrics read it at every `get_metrics()`).
        self.steps_stored: Dict[Any, int] = {}
        # Agent episodes a running add() is about to store: id -> owner.
        self.incoming: Dict[str, Owner] = {}
        self.num_episodes_added = 0
        self.num_episodes_evicted = 0

    def owners(self, agent_episode_ids: Iterable[str]) -> List[Owner]:
        """`(multi-agent episode id, agent id)` of each stored agent episode."""
        return [self.owner_of[agent_episode] for agent_episode in agent_episode_ids]

    def changed(self, module_id: Any, added: AddedSteps, tally: AddTally) -> None:
        """A module buffer's `add_chunks()` evicted steps (the last ones of the
        agent episodes `added.evicted_episodes`) and stored the `added.kept`
        chunks (each marked with its `source`, `(episode position, agent
        id)`), the agent episodes `added.new_episodes` anew (those must be
        `incoming`); counts them into `tally` and the steps stored per agent."""
        steps = self.steps_stored
        for agent_episode, num_steps in added.steps_evicted.items():
            agent_id = self.owner_of[agent_episode][1]
            steps[agent_id] -= num_steps
        for chunk in added.kept:
            agent_id = chunk["source"][1]
            steps[agent_id] = steps.get(agent_id, 0) + chunk["len"]
        for agent_id in [agent_id for agent_id, n in steps.items() if n == 0]:
            del steps[agent_id]  # listed while it has steps stored, as counted
        for agent_episode in added.evicted_episodes:
            episode_id, agent_id = self.owner_of[agent_episode]
            tally.agent_episodes_evicted[agent_id] += 1
            tally.module_episodes_evicted[module_id] += 1
            if _count_off(self.fragments, agent_episode):
                del self.owner_of[agent_episode]
                if _count_off(self.stored_agent_episodes, episode_id):
                    self.num_episodes_evicted += 1
                    tally.episodes_evicted += 1
        for agent_episode in added.new_episodes:
            episode_id, agent_id = self.incoming[agent_episode]
            tally.agent_episodes_added[agent_id] += 1
            tally.module_episodes_added[module_id] += 1
            if self.fragments.get(agent_episode, 0) == 0:
                self.owner_of[agent_episode] = (episode_id, agent_id)
                if self.stored_agent_episodes.get(episode_id, 0) == 0:
                    self.num_episodes_added += 1
                    tally.episodes_added += 1
                self.stored_agent_episodes[episode_id] = (
                    self.stored_agent_episodes.get(episode_id, 0) + 1
                )
            self.fragments[agent_episode] = self.fragments.get(agent_episode, 0) + 1

    def count_steps_stored(self, storages: Iterable[Any]) -> Dict[Any, int]:
        """Stored steps (transitions) per agent, counted afresh from the module
        buffers' `RingStorage`s (a sort of every stored step): to set
        `steps_stored` after a restore, and to check it."""
        counts: Dict[Any, int] = {}
        for storage in storages:
            uids, steps = np.unique(
                storage.episode_uid[storage.is_transition], return_counts=True
            )
            ids = [storage.episode_ids[uid] for uid in uids.tolist()]
            for (_, agent_id), num_steps in zip(self.owners(ids), steps.tolist()):
                counts[agent_id] = counts.get(agent_id, 0) + num_steps
        return counts

    def count_episodes_evicted_before(self, num_episodes: int) -> None:
        """Counts `num_episodes` multi-agent episodes that a memory loaded into
        the buffer (RLlib's state) had evicted: added and evicted."""
        self.num_episodes_evicted += num_episodes
        self.num_episodes_added += num_episodes

    def counts_match(self, stored_agent_episode_ids: Iterable[str]) -> bool:
        """Whether the per multi-agent episode counts are those of the agent
        episodes the module buffers hold (each id once per module)."""
        stored: Dict[str, int] = {}
        for agent_episode in stored_agent_episode_ids:
            episode_id = self.owner_of[agent_episode][0]
            stored[episode_id] = stored.get(episode_id, 0) + 1
        return stored == self.stored_agent_episodes
