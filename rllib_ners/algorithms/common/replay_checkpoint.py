"""Replay buffers in our algorithms: building them and keeping them in checkpoints.

RLlib 2.60 builds an algorithm's replay buffer from `replay_buffer_config` but
(1) crashes when `type` is a class object (and Tune turns dotted strings into
classes on every trial), (2) never seeds the buffer, and (3) never puts the
buffer into checkpoints, whatever `store_buffer_in_checkpoints` says.
`ReplayStateMixin` fixes all three for our algorithms (Rainbow DQN, NERS-DQN,
NERS-SAC, TD3 / DDPG, ACER), lets a run move between RLlib's buffers and ours
on a checkpoint (each takes the other's state, see `rllib_states`), and adds
what exact resume also needs: this process's global RNGs, the NERS sampler
update's state (`self.ners_sampler_update`, when the algorithm has one) and any
extra state an algorithm lists in `_extra_checkpoint_state()`.
"""

from __future__ import annotations

import importlib
import logging
import math
from typing import Any, Dict, List

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.annotations import override
from ray.rllib.utils.from_config import from_config
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.replay_buffers import ReplayBuffer
from ray.util.debug import log_once

from rllib_ners.replay_buffers import rllib_states
from rllib_ners.replay_buffers.ners_episode_buffer import SUPPORTS_NERS_REPLAY_ATTR
from rllib_ners.seam.algorithm import LocalReplayBufferHook
from rllib_ners.seam.checkpoints import includes_component
from rllib_ners.seam.config import raise_config_error
from rllib_ners.utils.checks import is_positive_int
from rllib_ners.utils.rng import global_rng_state, set_global_rng_state

logger = logging.getLogger(__name__)

NERS_BUFFER_TYPE = "rllib_ners.NERSEpisodeReplayBuffer"
FAST_BUFFER_TYPE = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
MULTI_AGENT_FAST_BUFFER_TYPE = "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer"
BUFFER_STATE = "replay_buffer"
NERS_UPDATE_STATE = "ners_sampler_update"
RNG_STATE = "global_rng"
EXTRA_STATE = "algorithm_extra"


def buffer_type_to_string(buffer_type: Any) -> str:
    """A replay buffer `type` as the dotted string RLlib 2.60 needs.

    RLlib tests `"EpisodeReplayBuffer" in type`, which raises a TypeError for a
    class object (and Tune turns strings back into classes on round trips).
    """
    if isinstance(buffer_type, str):
        return buffer_type
    if isinstance(buffer_type, type):
        return f"{buffer_type.__module__}.{buffer_type.__qualname__}"
    raise ValueError(
        f"replay_buffer_config['type'] must be a class or a dotted import path, got "
        f"{buffer_type!r}."
    )


def resolve_buffer_class(buffer_type: Any) -> type:
    """Imports a buffer type given as a class, a dotted path or an RLlib short name."""
    if isinstance(buffer_type, type):
        return buffer_type
    name = buffer_type_to_string(buffer_type)
    module_name, _, class_name = name.rpartition(".")
    try:
        if not module_name:
            module = importlib.import_module("ray.rllib.utils.replay_buffers")
        else:
            module = importlib.import_module(module_name)
        return getattr(module, class_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(
            f"Unknown replay buffer type {name!r} in replay_buffer_config['type']: "
            f"{error}. Use e.g. '{NERS_BUFFER_TYPE}' or '{FAST_BUFFER_TYPE}'."
        ) from None


def our_replay_buffer_config(
    config, *, who: str, example: str, replays: str, use: str
) -> Dict[str, Any]:
    """`config.replay_buffer_config` with `type` as a dotted string, after checking
    that it names one of this package's buffers; raises a config error
    (`raise_config_error`) otherwise.

    For algorithms that only replay from our buffers (ACER, NERS-SAC): `who`
    names the algorithm, `example` is a working `replay_buffer_config`,
    `replays` says how it replays ("replays from") and `use` lists the buffer
    types to use instead.
    """
    buffer_config = config.replay_buffer_config
    if not isinstance(buffer_config, dict) or "type" not in buffer_config:
        raise_config_error(
            config,
            f"{who} needs replay_buffer_config with a 'type', got "
            f"{buffer_config!r}; e.g. {example}.",
        )
    try:
        buffer_class = resolve_buffer_class(buffer_config["type"])
    except ValueError as error:
        raise_config_error(config, str(error))
    if not _is_fast_buffer(buffer_class):
        raise_config_error(
            config,
            f"{who} {replays} this package's buffers; got "
            f"replay_buffer_config['type']={buffer_config['type']!r}. Use {use}.",
        )
    return dict(buffer_config, type=buffer_type_to_string(buffer_config["type"]))


# Capacity of the probe buffer `check_replay_buffer_config` builds: its other
# settings are checked as given, without allocating the whole replay memory.
_PROBE_CAPACITY = 1024


def check_replay_buffer_config(config) -> None:
    """Checks `config.replay_buffer_config` for one of our buffers in `validate()`.

    Builds a small probe of the buffer class with the given settings, so that a
    bad alpha, beta, capacity, n-step range or an unknown key fails here, naming
    the setting, before any EnvRunner or Learner starts (not later, from inside
    `build_algo()`). RLlib's own buffer types are left to RLlib.
    """
    buffer_config = dict(config.replay_buffer_config or {})
    if "type" not in buffer_config:
        return
    try:
        buffer_class = resolve_buffer_class(buffer_config.pop("type"))
    except ValueError as error:
        raise_config_error(config, str(error))
    warn_if_batch_exceeds_capacity(config, buffer_config.get("capacity"))
    if not _is_fast_buffer(buffer_class):
        # RLlib's buffers check these with bare asserts, deep inside Ray.
        check_common_replay_settings(config, buffer_config, buffer_class.__name__)
        return
    _check_agents_fit_buffer(config, buffer_class)
    capacity = buffer_config.get("capacity")
    if isinstance(capacity, int) and not isinstance(capacity, bool) and capacity > 2:
        buffer_config["capacity"] = min(capacity, _PROBE_CAPACITY)
    if _is_ners_buffer(buffer_class):
        buffer_config["scored_by_ners_learner"] = True  # checked at build time
    try:
        buffer_class(**buffer_config)
    except (ValueError, TypeError) as error:
        raise_config_error(
            config,
            f"Bad replay_buffer_config for {buffer_class.__name__}: {error} Fix it "
            f"with config.training(replay_buffer_config={{...}}).",
        )


def check_common_replay_settings(config, buffer_config: dict, buffer_name: str):
    """`capacity` (an int >= 1), `alpha` (>= 0) and `beta` (in [0, 1]) of any
    prioritized or uniform buffer, checked in `validate()`."""

    def fail(setting: str, value, rule: str) -> None:
        raise_config_error(
            config,
            f"replay_buffer_config['{setting}']={value!r} for {buffer_name}: "
            f"{rule}. Fix it with config.training(replay_buffer_config={{...}}).",
        )

    capacity = buffer_config.get("capacity")
    if capacity is not None and not is_positive_int(capacity):
        fail("capacity", capacity, "it must be an integer >= 1")
    alpha = buffer_config.get("alpha")
    if alpha is not None and not (_is_number(alpha) and alpha >= 0):
        fail("alpha", alpha, "the priority exponent must be a finite number >= 0")
    beta = buffer_config.get("beta")
    if beta is not None and not (_is_number(beta) and 0 <= beta <= 1):
        fail("beta", beta, "the importance-sampling exponent must lie in [0, 1]")


def _is_number(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def warn_if_batch_exceeds_capacity(config, capacity) -> None:
    """Warns once when a train batch holds more transitions than the buffer:
    every batch then repeats transitions (a setting rarely meant)."""
    batch = config.train_batch_size_per_learner
    if (
        is_positive_int(capacity)
        and is_positive_int(batch)
        and batch > capacity
        and log_once(f"rllib_ners_batch_exceeds_capacity_{batch}_{capacity}")
    ):
        logger.warning(
            "train_batch_size_per_learner=%d exceeds the replay buffer's "
            "capacity=%d: every batch repeats stored transitions. Raise "
            "replay_buffer_config['capacity'] or lower the batch size.",
            batch,
            capacity,
        )


def _check_agents_fit_buffer(config, buffer_class: type) -> None:
    """A multi-agent config needs the multi-agent buffer, a single-agent config
    the single-agent one; NERS replay is single-agent only."""
    from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
        MultiAgentEpisodeReplayBuffer,
    )

    multi_agent_buffer = issubclass(buffer_class, MultiAgentEpisodeReplayBuffer)
    if config.is_multi_agent and _is_ners_buffer(buffer_class):
        raise_config_error(
            config,
            f"{buffer_class.__name__} (NERS replay) supports single-agent setups "
            f"only; remove the multi_agent() policies, or for prioritized replay "
            f"per module set replay_buffer_config['type'] to "
            f"'{MULTI_AGENT_FAST_BUFFER_TYPE}'.",
        )
    if config.is_multi_agent and not multi_agent_buffer:
        raise_config_error(
            config,
            f"This multi-agent config needs a multi-agent replay buffer, got "
            f"{buffer_class.__name__}; set replay_buffer_config['type'] to "
            f"'{MULTI_AGENT_FAST_BUFFER_TYPE}'.",
        )
    if not config.is_multi_agent and multi_agent_buffer:
        raise_config_error(
            config,
            f"{buffer_class.__name__} replays multi-agent episodes, but this config "
            f"is single-agent; set replay_buffer_config['type'] to "
            f"'{FAST_BUFFER_TYPE}' (or add config.multi_agent(...) policies).",
        )


def pop_priority_rows(learner_results) -> Any:
    """The per-item rows the Learners logged under RLlib's TD-error key (TD
    errors, or NERS `[score, delta, q, position]` rows), concatenated Learner by
    Learner, and removed from the results so that they are never logged. None
    if no Learner logged any."""
    rows = [
        item
        for result in learner_results
        for module_results in result.values()
        if isinstance(module_results, dict) and TD_ERROR_KEY in module_results
        for item in _logged_arrays(module_results.pop(TD_ERROR_KEY))
    ]
    return np.concatenate(rows) if rows else None


def _logged_arrays(stats) -> List[np.ndarray]:
    """The values logged into an RLlib 2.60 item-series stat, one array each.

    Read from `stats.items`, not `peek()`: peek() turns the logged tensors into
    nested Python lists (`tolist()`), element by element, about 10 ms per
    update for a batch of 256 NERS rows. The items are the same values.
    """
    items = getattr(stats, "items", None)
    if items is None:
        items = stats.peek()
    return [np.asarray(convert_to_numpy(item)) for item in items]


def _is_fast_buffer(obj_or_class: Any) -> bool:
    """One of this package's buffers (single- or multi-agent)."""
    from rllib_ners.replay_buffers.fast_multi_agent_episode_buffer import (
        FastMultiAgentPrioritizedEpisodeReplayBuffer,
    )
    from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
        FastPrioritizedEpisodeReplayBuffer,
    )

    cls = obj_or_class if isinstance(obj_or_class, type) else type(obj_or_class)
    return issubclass(
        cls,
        (
            FastPrioritizedEpisodeReplayBuffer,
            FastMultiAgentPrioritizedEpisodeReplayBuffer,
        ),
    )


def _is_ners_buffer(cls: type) -> bool:
    from rllib_ners.replay_buffers.ners_episode_buffer import NERSEpisodeReplayBuffer

    return isinstance(cls, type) and issubclass(cls, NERSEpisodeReplayBuffer)


class ReplayStateMixin(LocalReplayBufferHook):
    """Buffer creation and checkpoint state for an `Algorithm` subclass (list it
    before the Algorithm class)."""

    # True while save_to_path()/restore_from_path() run: the buffer state then
    # goes straight to or comes straight from disk, so our buffers hand out and
    # adopt their arrays without copying them (peak memory +1x storage, not +2x).
    _checkpoint_io = False
    # The NERS sampler's update at episode ends (`NERSSamplerUpdate`), set in
    # `setup()` by an algorithm that replays with NERS; None otherwise.
    ners_sampler_update = None

    @override(Algorithm)
    def save_to_path(self, *args, **kwargs):
        self._checkpoint_io = True
        try:
            return super().save_to_path(*args, **kwargs)
        finally:
            self._checkpoint_io = False

    @override(Algorithm)
    def restore_from_path(self, *args, **kwargs):
        self._checkpoint_io = True
        try:
            return super().restore_from_path(*args, **kwargs)
        finally:
            self._checkpoint_io = False

    @override(LocalReplayBufferHook)
    def create_local_replay_buffer(self, config):
        """RLlib's buffer building, with `type` accepted as a class object, too."""
        buffer_config = config.get("replay_buffer_config")
        if not buffer_config or buffer_config.get("no_local_replay_buffer"):
            return None
        buffer_config = dict(
            buffer_config, type=buffer_type_to_string(buffer_config["type"])
        )
        if "EpisodeReplayBuffer" in buffer_config["type"]:
            buffer_config["metrics_num_episodes_for_smoothing"] = (
                self.config.metrics_num_episodes_for_smoothing
            )
        buffer_class = resolve_buffer_class(buffer_config["type"])
        # RLlib leaves its buffers unseeded; ours follow `config.debugging(seed=)`
        # unless the buffer config names its own seed, so seeded runs repeat.
        if self.config.seed is not None and _is_fast_buffer(buffer_class):
            buffer_config.setdefault("seed", self.config.seed)
        if _is_ners_buffer(buffer_class):
            # The NERS buffer refuses to be built for a learner that cannot score.
            buffer_config["scored_by_ners_learner"] = bool(
                getattr(self.config.learner_class, SUPPORTS_NERS_REPLAY_ATTR, False)
            )
        return from_config(ReplayBuffer, buffer_config)

    def _extra_checkpoint_state(self) -> Dict[str, Any]:
        """Algorithm state beyond RLlib's, the buffer's and the sampler's."""
        return {}

    def _set_extra_checkpoint_state(self, state: Dict[str, Any]) -> None:
        """Restores what `_extra_checkpoint_state()` returned."""

    def _buffer_state(self) -> Dict[str, Any]:
        buffer = self.local_replay_buffer
        if _is_fast_buffer(buffer):
            return buffer.get_state(copy=not self._checkpoint_io)
        return buffer.get_state()

    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)

        def wanted(name: str) -> bool:
            return includes_component(self, name, components, not_components)

        if self.ners_sampler_update is not None and wanted(NERS_UPDATE_STATE):
            state[NERS_UPDATE_STATE] = self.ners_sampler_update.get_state()
        if (
            self.config.store_buffer_in_checkpoints
            and self.local_replay_buffer is not None
            and wanted(BUFFER_STATE)
        ):
            state[BUFFER_STATE] = self._buffer_state()
        if wanted(RNG_STATE):
            # This process's generators: a local EnvRunner explores with torch's,
            # a local Learner draws noise from it. The buffer has its own RNG.
            state[RNG_STATE] = global_rng_state()
        extra = self._extra_checkpoint_state()
        if extra and wanted(EXTRA_STATE):
            state[EXTRA_STATE] = extra
        return state

    @override(Algorithm)
    def set_state(self, state) -> None:
        super().set_state(state)
        if NERS_UPDATE_STATE in state and self.ners_sampler_update is not None:
            self.ners_sampler_update.set_state(state[NERS_UPDATE_STATE])
        if BUFFER_STATE in state and self.local_replay_buffer is not None:
            if _is_fast_buffer(self.local_replay_buffer):
                self.local_replay_buffer.set_state(
                    state[BUFFER_STATE], copy=not self._checkpoint_io
                )
            else:
                buffer_state = state[BUFFER_STATE]
                if not rllib_states.is_rllib_state(buffer_state):
                    # A checkpoint made with our buffer, resumed with RLlib's.
                    buffer_state = rllib_states.rllib_state_from_ours(
                        buffer_state, type(self.local_replay_buffer)
                    )
                self.local_replay_buffer.set_state(buffer_state)
        if RNG_STATE in state:
            set_global_rng_state(state[RNG_STATE])
        if EXTRA_STATE in state:
            self._set_extra_checkpoint_state(state[EXTRA_STATE])
