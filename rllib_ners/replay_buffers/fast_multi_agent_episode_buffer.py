"""A vectorised drop-in for RLlib's `MultiAgentPrioritizedEpisodeReplayBuffer`.

`FastMultiAgentPrioritizedEpisodeReplayBuffer` keeps one
`FastPrioritizedEpisodeReplayBuffer` per RLModule (created when the module's
first steps arrive): its own ring of `capacity` observation slots, its own sum
and min trees, its own random generator. `add()` splits each
`MultiAgentEpisode` chunk into its agents' `SingleAgentEpisode` chunks and adds
them, one call per module, to the module the agent maps to; chunks of an agent
episode continue each other as in the single-agent buffer.

`sample()` draws, for every module (or `modules_to_sample`), `num_items`
transitions by that module's priorities and returns them as RLlib does: one
list of 1-step `SingleAgentEpisode`s carrying `agent_id`, `module_id` and
`multi_agent_episode_id`, so RLlib's learner connectors build one batch per
module. `update_priorities(priorities, module_id)` answers one module's part of
the last sample. `sample_batch()` is the columnar path: numpy columns per
module.

Replay mode "independent" (RLlib's default, and what DQN and SAC sample with)
is the only one: "synchronized"/"lockstep" replay draws whole env steps, which
per-module priority trees cannot weigh; asking for it raises.

Counting differs where modules evict on their own: `capacity` is per module,
and the step counters without a `module_id` (`get_num_timesteps()`,
`len()`) count stored agent steps over all modules, where RLlib counts env
steps. A multi-agent episode is stored while any of its agents has a stored
step, and evicted when the last one goes.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
    MultiAgentEpisodeReplayBuffer,
)
from ray.rllib.utils.replay_buffers.multi_agent_prioritized_episode_buffer import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
)
from ray.rllib.utils.typing import ModuleID

from rllib_ners.replay_buffers import (
    buffer_metrics,
    buffer_state,
    episode_adapter,
    rllib_states,
    writer,
)
from rllib_ners.replay_buffers.agent_episodes import AgentEpisodeOwners
from rllib_ners.replay_buffers.bookkeeping import AddTally
from rllib_ners.replay_buffers.buffer_metrics import (
    MAX_PRIORITY,
    SAMPLE_BETA,
    log_latest,
)
from rllib_ners.replay_buffers.buffer_settings import (
    INDEPENDENT,
    check_no_unknown_settings,
    check_replay_mode,
    check_weight,
)
from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
    FastPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.priority_sampler import MIN_PRIORITY
from rllib_ners.replay_buffers.ring_replay_buffer import (
    RLLIB_STORAGE_CAPACITY,
    RLlibTypeString,
)
from rllib_ners.seam.replay import log_add_metrics, log_sample_metrics
from rllib_ners.utils.checks import is_positive_int

# The constructor's settings, as the error for an unknown one lists them.
SETTINGS = (
    "capacity",
    "replay_mode",
    "batch_size_B",
    "batch_length_T",
    "alpha",
    "beta",
    "beta_final",
    "beta_annealing_timesteps",
    "min_priority",
    "seed",
    "frame_stack",
    "metrics_num_episodes_for_smoothing",
)
# A module buffer's capacity for the settings check at construction: a large
# capacity is checked, not allocated.
_PROBE_CAPACITY = 16


def _module_seed(seed: Optional[int], module_id: ModuleID) -> Optional[List[int]]:
    """A module's seed: the buffer's seed and a stable hash of the module id, so
    a module draws the same whichever modules exist and in what order."""
    if seed is None:
        return None
    return [int(seed), zlib.crc32(str(module_id).encode())]


class _ModuleReplayBuffer(FastPrioritizedEpisodeReplayBuffer):
    """One module's buffer: gives sampled episodes their agent, module and
    multi-agent episode ids."""

    module_id: ModuleID
    owners: AgentEpisodeOwners

    @override(FastPrioritizedEpisodeReplayBuffer)
    def episode_identities(self, slots: np.ndarray) -> Dict[str, list]:
        episode_ids = self.storage.episode_ids
        # One dict lookup per item: the item's SingleAgentEpisode is built in a
        # per-item loop anyway (RLlib's API is one episode per item).
        ids = [episode_ids[uid] for uid in self.storage.episode_uid[slots].tolist()]
        owners = self.owners.owners(ids)
        return {
            "id_": ids,
            "agent_id": [agent_id for _, agent_id in owners],
            "module_id": [self.module_id] * len(ids),
            "multi_agent_episode_id": [episode_id for episode_id, _ in owners],
        }


class FastMultiAgentPrioritizedEpisodeReplayBuffer(
    MultiAgentPrioritizedEpisodeReplayBuffer, metaclass=RLlibTypeString
):
    """Prioritised multi-agent replay: one fast buffer and priority tree per module.

    A subclass of RLlib's `MultiAgentPrioritizedEpisodeReplayBuffer`, so that
    stock multi-agent DQN and SAC treat it as theirs and route each module's
    TD errors to `update_priorities(td_errors, module_id)` (what else RLlib
    forces: `ring_replay_buffer.RingReplayBuffer`). As in RLlib, `sample()`
    and `update_priorities()` alternate (per module).

    ```python
    from ray.rllib.algorithms.dqn import DQNConfig

    config = (
        DQNConfig()
        .environment("ma_cartpole")
        .multi_agent(
            policies={"p0", "p1"},
            policy_mapping_fn=lambda agent_id, *args, **kwargs: f"p{agent_id}",
        )
        .training(
            replay_buffer_config={
                "type": "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer",
                "capacity": 50000,
                "alpha": 0.6,
                "beta": 0.4,
            }
        )
    )
    ```

    Args:
        capacity: Observation slots per module (see `ring_storage`).
        replay_mode: "independent" (the only mode served, see the module
            docstring).
        seed: Seed of the module buffers' generators (each module's is derived
            from it and the module id).

    The other arguments (`batch_size_B`, `batch_length_T`, `alpha`, `beta`,
    `frame_stack`, `beta_final`, `beta_annealing_timesteps`, `min_priority`,
    `metrics_num_episodes_for_smoothing`) mean what they mean in
    `FastPrioritizedEpisodeReplayBuffer`, for every module.
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
        replay_mode: str = INDEPENDENT,
        frame_stack: int = 1,
        beta_final: Optional[float] = None,
        beta_annealing_timesteps: Optional[int] = None,
        min_priority: float = MIN_PRIORITY,
        **kwargs,
    ):
        if kwargs.get("sampler") not in (None, "priority"):
            raise ValueError(
                f"{type(self).__name__} replays with PER's sampler only, got "
                f"sampler={kwargs['sampler']!r}: ReLo and LaBER need a Learner "
                f"that sends their feedback per module, which none does yet. "
                f"Remove `sampler` from `replay_buffer_config`, or train a "
                f"single-agent config."
            )
        kwargs.pop("sampler", None)
        check_no_unknown_settings(kwargs, type(self).__name__, SETTINGS)
        check_replay_mode(replay_mode)
        self.replay_mode = replay_mode
        self._seed = seed
        self._module_settings = {
            "batch_size_B": batch_size_B,
            "batch_length_T": batch_length_T,
            "alpha": alpha,
            "beta": beta,
            "frame_stack": frame_stack,
            "beta_final": beta_final,
            "beta_annealing_timesteps": beta_annealing_timesteps,
            "min_priority": min_priority,
            "metrics_num_episodes_for_smoothing": metrics_num_episodes_for_smoothing,
        }
        # Checks every setting now (a module's buffer is built with its data),
        # on a small probe: a large capacity is checked, not allocated.
        probe_capacity = (
            min(capacity, _PROBE_CAPACITY) if is_positive_int(capacity) else capacity
        )
        FastPrioritizedEpisodeReplayBuffer(probe_capacity, **self._module_settings)
        self._module_buffers: Dict[ModuleID, _ModuleReplayBuffer] = {}
        super().__init__(
            RLLIB_STORAGE_CAPACITY,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            alpha=alpha,
            metrics_num_episodes_for_smoothing=metrics_num_episodes_for_smoothing,
        )
        self.capacity = int(capacity)
        self._owners = AgentEpisodeOwners()
        self._num_env_steps_added = 0
        self._num_agent_steps_added = 0
        self.sampled_timesteps_per_module: Dict[ModuleID, int] = defaultdict(int)
        # Counts since the last get_metrics() (RLlib logs them per add()).
        self._add_tally = AddTally()
        # Stored steps per agent at the last get_metrics(): each module evicts
        # on its own, so an agent's evicted steps are what it lost since.
        self._agent_steps_reported: Dict[Any, int] = {}

    # ---------------------------------------------------------------- modules
    def module_buffer(self, module_id: ModuleID) -> FastPrioritizedEpisodeReplayBuffer:
        """The buffer holding `module_id`'s steps (its `episodes`, priorities)."""
        if module_id not in self._module_buffers:
            raise ValueError(
                f"No steps of module {module_id!r} are stored; stored modules: "
                f"{sorted(self._module_buffers)}."
            )
        return self._module_buffers[module_id]

    def _module_buffer_for(self, module_id: ModuleID) -> _ModuleReplayBuffer:
        buffer = self._module_buffers.get(module_id)
        if buffer is None:
            buffer = _ModuleReplayBuffer(
                self.capacity,
                seed=_module_seed(self._seed, module_id),
                **self._module_settings,
            )
            buffer.module_id, buffer.owners = module_id, self._owners
            self._module_buffers[module_id] = buffer
        return buffer

    @override(MultiAgentEpisodeReplayBuffer)
    def get_module_ids(self) -> List[ModuleID]:
        return list(self._module_buffers)

    # -------------------------------------------------------------------- add
    @override(MultiAgentPrioritizedEpisodeReplayBuffer)
    def add(
        self,
        episodes: Union[List[MultiAgentEpisode], MultiAgentEpisode],
        weight: Optional[Union[float, Dict[ModuleID, float]]] = None,
    ) -> None:
        """Adds each agent's chunk to the buffer of the module it maps to.

        Args:
            episodes: `MultiAgentEpisode` chunks, as EnvRunners send them.
            weight: Priority of the new steps: one for all modules or one per
                module; defaults to each module's running max priority.
        """
        episodes = episode_adapter.episodes_to_add(
            episodes, MultiAgentEpisode, type(self)
        )
        if weight is not None and not isinstance(weight, dict):
            weight = dict.fromkeys(self._modules_of(episodes), weight)
        for module_weight in (weight or {}).values():
            check_weight(module_weight)
        self.add_episodes(episodes, weight or {})

    @staticmethod
    def _modules_of(episodes: List[MultiAgentEpisode]) -> set:
        return {
            episode.module_for(agent_id)
            for episode in episodes
            for agent_id in episode.agent_episodes
        }

    def add_episodes(
        self,
        episodes: List[MultiAgentEpisode],
        weights: Optional[Dict[ModuleID, float]] = None,
    ) -> Dict[Tuple[int, Any], np.ndarray]:
        """What `add()` does, saying where each agent's steps went (for
        RLlib-state loading): every agent's chunk goes to its module's buffer,
        one call per module.

        Returns:
            `(episode position, agent id)` -> the module slots of that chunk's
            steps (-1: not kept, as for steps beyond the capacity).
        """
        per_module = self._chunks_per_module(episodes)
        slots_of = {}
        try:
            for module_id, chunks in per_module.items():
                buffer = self._module_buffer_for(module_id)
                added = buffer.add_chunks(chunks, (weights or {}).get(module_id))
                self._owners.changed(module_id, added, self._add_tally)
                slots_of.update(writer.step_slots_by_source(chunks, added))
        finally:
            self._owners.incoming.clear()
        return slots_of

    def _chunks_per_module(
        self, episodes: List[MultiAgentEpisode]
    ) -> Dict[ModuleID, List[dict]]:
        """Each module's agent chunks of `episodes` (each marked with its
        `(episode position, agent id)`), counting the steps added and noting
        each agent episode's owner as incoming."""
        per_module: Dict[ModuleID, List[dict]] = defaultdict(list)
        tally = self._add_tally
        # One pass per episode and agent: RLlib hands the episodes over as a
        # list of objects; each module's chunks are then written in one call.
        for k, episode in enumerate(episodes):
            self._num_env_steps_added += episode.env_steps()
            tally.env_steps += episode.env_steps()
            for agent_id, agent_episode in episode.agent_episodes.items():
                if len(agent_episode) == 0:
                    continue
                module_id = episode.module_for(agent_id)
                chunk = episode_adapter.read_chunk(agent_episode)
                chunk["source"] = (k, agent_id)
                per_module[module_id].append(chunk)
                self._owners.incoming[agent_episode.id_] = (episode.id_, agent_id)
                steps = len(agent_episode)
                self._num_agent_steps_added += steps
                tally.agent_steps[agent_id] += steps
                tally.module_steps[module_id] += steps
        return per_module

    # ----------------------------------------------------------------- sample
    def _modules_to_sample(self, modules_to_sample) -> List[ModuleID]:
        # None or an empty list: every module with data, as RLlib's buffer.
        if not modules_to_sample:
            modules = [m for m, b in self._module_buffers.items() if len(b)]
            if not modules:
                raise ValueError(
                    "Cannot sample from an empty replay buffer: add episodes first "
                    "(or raise `num_steps_sampled_before_learning_starts`)."
                )
            return modules
        modules = list(modules_to_sample)
        for module_id in modules:
            self.module_buffer(module_id)  # raises, naming the stored modules
        return modules

    @override(MultiAgentPrioritizedEpisodeReplayBuffer)
    def sample(
        self,
        num_items: Optional[int] = None,
        *,
        batch_size_B: Optional[int] = None,
        batch_length_T: Optional[int] = None,
        n_step: Optional[Union[int, Tuple[int, int]]] = 1,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        replay_mode: str = INDEPENDENT,
        modules_to_sample: Optional[List[ModuleID]] = None,
        beta: Optional[float] = None,
        to_numpy: bool = False,
        **kwargs,
    ) -> List[SingleAgentEpisode]:
        """Samples `num_items` transitions per module, each by its priorities.

        Returns RLlib's list of 1-step `SingleAgentEpisode`s (module by
        module), with `weights`, `n_step` and `buffer_index` in their extra
        model outputs; with `batch_length_T > 1` sequences, as the
        single-agent buffer's `sample()`.
        """
        check_replay_mode(replay_mode)
        episode_adapter.check_batch_size_arguments(num_items, batch_size_B)
        num_items = num_items or batch_size_B or self.batch_size_B
        episodes = []
        for module_id in self._modules_to_sample(modules_to_sample):
            episodes.extend(
                self._module_buffers[module_id].sample(
                    num_items,
                    batch_length_T=batch_length_T,
                    n_step=n_step,
                    gamma=gamma,
                    beta=beta,
                    include_infos=include_infos,
                    include_extra_model_outputs=include_extra_model_outputs,
                    to_numpy=to_numpy,
                    **kwargs,
                )
            )
            self.sampled_timesteps_per_module[module_id] += num_items
        self.sampled_timesteps += num_items
        return episodes

    def sample_batch(
        self,
        num_items: Optional[int] = None,
        *,
        n_step: Union[int, Tuple[int, int], None] = 1,
        gamma: float = 0.99,
        beta: Optional[float] = None,
        include_extra_model_outputs: bool = False,
        modules_to_sample: Optional[List[ModuleID]] = None,
    ) -> Dict[ModuleID, Dict[str, np.ndarray]]:
        """Columnar fast path: per module, the columns of the single-agent
        buffer's `sample_batch()` (`indices` are that module's slots)."""
        episode_adapter.check_batch_size_arguments(num_items, None)
        num_items = num_items or self.batch_size_B
        batches = {}
        for module_id in self._modules_to_sample(modules_to_sample):
            batches[module_id] = self._module_buffers[module_id].sample_batch(
                num_items,
                n_step=n_step,
                gamma=gamma,
                beta=beta,
                include_extra_model_outputs=include_extra_model_outputs,
            )
            self.sampled_timesteps_per_module[module_id] += num_items
        self.sampled_timesteps += num_items
        return batches

    def item_columns(
        self, module_id: ModuleID, batch: Dict[str, np.ndarray]
    ) -> Dict[str, np.ndarray]:
        """The per-item columns `sample()` adds for `module_id`'s items."""
        return self.module_buffer(module_id).item_columns(batch)

    # ------------------------------------------------------------ priorities
    @override(MultiAgentPrioritizedEpisodeReplayBuffer)
    def update_priorities(self, priorities, module_id: ModuleID = None) -> None:
        """Sets new priorities for `module_id`'s items of the last sample."""
        if module_id is None:
            raise ValueError(
                "update_priorities() of a multi-agent buffer needs the `module_id` "
                "whose items the priorities belong to (RLlib's DQN passes it)."
            )
        self.module_buffer(module_id).update_priorities(priorities)

    # ---------------------------------------------------------------- counters
    # RLlib's counters; without a module id the step counts are agent steps
    # over all modules (each module's ring evicts on its own).
    @override(MultiAgentEpisodeReplayBuffer)
    def get_num_timesteps(self, module_id: Optional[ModuleID] = None) -> int:
        if module_id:
            return self._module_count(module_id, "get_num_timesteps")
        return self.get_num_agent_timesteps()

    @override(MultiAgentEpisodeReplayBuffer)
    def get_num_agent_timesteps(self) -> int:
        return sum(len(buffer) for buffer in self._module_buffers.values())

    @override(EpisodeReplayBuffer)
    def __len__(self) -> int:
        return self.get_num_agent_timesteps()

    @override(MultiAgentEpisodeReplayBuffer)
    def get_num_episodes(self, module_id: Optional[ModuleID] = None) -> int:
        if module_id:
            return self._module_count(module_id, "get_num_episodes")
        return len(self._owners.stored_agent_episodes)

    @override(MultiAgentEpisodeReplayBuffer)
    def get_num_episodes_evicted(self, module_id: Optional[ModuleID] = None) -> int:
        if module_id:
            return self._module_count(module_id, "get_num_episodes_evicted")
        return self._owners.num_episodes_evicted

    @override(MultiAgentEpisodeReplayBuffer)
    def get_added_timesteps(self, module_id: Optional[ModuleID] = None) -> int:
        if module_id:
            return self._module_count(module_id, "get_added_timesteps")
        return self._num_env_steps_added

    @override(MultiAgentEpisodeReplayBuffer)
    def get_added_agent_timesteps(self) -> int:
        return self._num_agent_steps_added

    @override(MultiAgentEpisodeReplayBuffer)
    def get_sampled_timesteps(self, module_id: Optional[ModuleID] = None) -> int:
        if module_id:
            return self.sampled_timesteps_per_module[module_id]
        return self.sampled_timesteps

    def _module_count(self, module_id: ModuleID, counter: str) -> int:
        buffer = self._module_buffers.get(module_id)
        return 0 if buffer is None else getattr(buffer, counter)()

    # ---------------------------------------------------------------- episodes
    @property
    @override(EpisodeReplayBuffer)
    def episodes(self):
        raise AttributeError(
            f"{type(self).__name__} keeps no MultiAgentEpisode objects: each "
            f"module's agent episodes are in buffer.module_buffer(module_id)"
            f".episodes (SingleAgentEpisodes)."
        )

    @episodes.setter
    @override(EpisodeReplayBuffer)
    def episodes(self, value) -> None:
        # Takes the empty deque RLlib's `__init__` assigns.
        if len(value):
            raise ValueError(f"{type(self).__name__}.episodes cannot be assigned.")

    @property
    @override(EpisodeReplayBuffer)
    def episode_id_to_index(self):
        raise AttributeError(
            f"{type(self).__name__} keeps no episode index; see "
            f"buffer.module_buffer(module_id).episode_id_to_index."
        )

    @episode_id_to_index.setter
    @override(EpisodeReplayBuffer)
    def episode_id_to_index(self, value) -> None:
        if len(value):
            raise ValueError(
                f"{type(self).__name__}.episode_id_to_index cannot be assigned."
            )

    # ---------------------------------------------------------------- metrics
    @override(EpisodeReplayBuffer)
    def get_metrics(self) -> Dict[str, Any]:
        """RLlib's multi-agent buffer metrics (per agent and module), plus each
        module's max priority and beta under `(key, module_id)`."""
        tally, self._add_tally = self._add_tally, AddTally()
        steps_evicted = {
            module_id: buffer.take_lifetime_deltas()["steps_evicted"]
            for module_id, buffer in self._module_buffers.items()
        }
        log_add_metrics(
            self,
            **buffer_metrics.multi_agent_add_counts(
                tally, steps_evicted, self._take_agent_steps_evicted(tally)
            ),
        )
        samples = {
            module_id: buffer.take_sample_tally()
            for module_id, buffer in self._module_buffers.items()
        }
        samples = {m: t for m, t in samples.items() if t.steps}
        if samples:
            log_sample_metrics(
                self, **buffer_metrics.multi_agent_sample_counts(samples)
            )
        for module_id, buffer in self._module_buffers.items():
            log_latest(
                self.metrics, (MAX_PRIORITY, module_id), buffer.sampler.max_priority
            )
            log_latest(self.metrics, (SAMPLE_BETA, module_id), buffer.current_beta())
        return self.metrics.reduce()

    def _take_agent_steps_evicted(self, tally: AddTally) -> Dict[Any, int]:
        """Each agent's steps evicted (or dropped by an overflowing add) since
        the last call: its stored steps then, plus those added since, minus
        those stored now. Every agent with evicted episodes is listed (RLlib's
        metrics look each up)."""
        stored = dict(self._owners.steps_stored)
        agents = (
            set(stored)
            | set(self._agent_steps_reported)
            | set(tally.agent_steps)
            | set(tally.agent_episodes_evicted)
        )
        evicted = {
            agent_id: self._agent_steps_reported.get(agent_id, 0)
            + tally.agent_steps.get(agent_id, 0)
            - stored.get(agent_id, 0)
            for agent_id in agents
        }
        self._agent_steps_reported = stored
        return evicted

    def _count_agent_steps_stored(self) -> Dict[Any, int]:
        return self._owners.count_steps_stored(
            buffer.storage for buffer in self._module_buffers.values()
        )

    # ------------------------------------------------------------------ state
    @override(MultiAgentPrioritizedEpisodeReplayBuffer)
    def get_state(self, *, copy: bool = True) -> Dict[str, Any]:
        """Every module buffer's state, the agent-episode owners and counters."""
        owners = self._owners
        return {
            "_num_episodes_added": owners.num_episodes_added,
            "_num_episodes_evicted_total": owners.num_episodes_evicted,
            "_num_env_steps_added": self._num_env_steps_added,
            "_num_agent_steps_added": self._num_agent_steps_added,
            "sampled_timesteps": self.sampled_timesteps,
            "capacity": self.capacity,
            "module_buffers": {
                module_id: buffer.get_state(copy=copy)
                for module_id, buffer in self._module_buffers.items()
            },
            "owner_of": dict(owners.owner_of),
            "fragments": dict(owners.fragments),
            "stored_agent_episodes": dict(owners.stored_agent_episodes),
            "sampled_timesteps_per_module": dict(self.sampled_timesteps_per_module),
        }

    @override(MultiAgentPrioritizedEpisodeReplayBuffer)
    def set_state(self, state: Dict[str, Any], *, copy: bool = True) -> None:
        """Restores `get_state()`'s output, or loads the state of RLlib's
        `MultiAgentPrioritizedEpisodeReplayBuffer` /
        `MultiAgentEpisodeReplayBuffer` (see `rllib_states`)."""
        if rllib_states.is_rllib_state(state):
            rllib_states.load_rllib_multi_agent_state(self, state)
            return
        buffer_state.check_a_buffer_state(state)
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"Cannot restore a buffer of capacity {state['capacity']} into one of "
                f"capacity={self.capacity}; build it with the same `capacity`."
            )
        self.clear()
        for module_id, module_state in state["module_buffers"].items():
            self._module_buffer_for(module_id).set_state(module_state, copy=copy)
        owners = self._owners
        owners.num_episodes_added = state["_num_episodes_added"]
        owners.num_episodes_evicted = state["_num_episodes_evicted_total"]
        self._num_env_steps_added = state["_num_env_steps_added"]
        self._num_agent_steps_added = state["_num_agent_steps_added"]
        self.sampled_timesteps = state["sampled_timesteps"]
        owners.owner_of = dict(state["owner_of"])
        owners.fragments = dict(state["fragments"])
        owners.stored_agent_episodes = dict(state["stored_agent_episodes"])
        self.sampled_timesteps_per_module = defaultdict(
            int, state["sampled_timesteps_per_module"]
        )
        owners.steps_stored = self._count_agent_steps_stored()
        # Metrics report what happens from now on (the module buffers' too).
        self._agent_steps_reported = dict(self._owners.steps_stored)

    def carry_over_lifetime_counts(
        self,
        *,
        episodes_evicted: int,
        env_steps_added: int,
        agent_steps_added: int,
        steps_sampled: int,
        steps_sampled_per_module: Dict[ModuleID, int],
        episodes_evicted_per_module: Dict[ModuleID, int],
    ) -> None:
        """The lifetime counts of a memory just loaded from elsewhere (RLlib's
        state): episodes it had evicted (in all and per module) count as added
        and evicted; env and agent steps added (at least those just stored);
        steps sampled (in all and per module)."""
        self._owners.count_episodes_evicted_before(episodes_evicted)
        self._num_env_steps_added = max(env_steps_added, self._num_env_steps_added)
        self._num_agent_steps_added = max(
            agent_steps_added, self._num_agent_steps_added
        )
        self.sampled_timesteps = steps_sampled
        self.sampled_timesteps_per_module.update(steps_sampled_per_module)
        for module_id, evicted in episodes_evicted_per_module.items():
            if module_id in self._module_buffers:
                storage = self._module_buffers[module_id].storage
                storage.count_episodes_evicted_before(evicted)

    def clear(self) -> None:
        """Forgets every module and counter; keeps the settings."""
        self._module_buffers = {}
        self._owners = AgentEpisodeOwners()
        self._num_env_steps_added = self._num_agent_steps_added = 0
        self.sampled_timesteps = 0
        self.sampled_timesteps_per_module = defaultdict(int)
        self._add_tally = AddTally()
        self._agent_steps_reported = {}

    def check_invariants(self) -> None:
        """Raises `RuntimeError` naming what is broken (tests, soak runs)."""
        for buffer in self._module_buffers.values():
            buffer.check_invariants()
        stored = [
            agent_episode
            for buffer in self._module_buffers.values()
            for agent_episode in set(buffer.storage.episode_ids.values())
        ]
        if not self._owners.counts_match(stored):
            raise RuntimeError("Replay buffer invariants broken: episode counts off")
        if self._owners.steps_stored != self._count_agent_steps_stored():
            raise RuntimeError("Replay buffer invariants broken: agent step counts off")
