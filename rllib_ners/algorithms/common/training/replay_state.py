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

from typing import Any, Dict

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.annotations import override
from ray.rllib.utils.from_config import from_config
from ray.rllib.utils.replay_buffers import ReplayBuffer

from rllib_ners.algorithms.common.config.buffer_config_checks import (
    algorithm_buffer_config,
)
from rllib_ners.algorithms.common.config.buffer_types import is_fast_buffer
from rllib_ners.replay_buffers import rllib_states
from rllib_ners.seam.algorithm import LocalReplayBufferHook
from rllib_ners.seam.checkpoints import includes_component
from rllib_ners.utils.package_logs import follow_rllib_log_level
from rllib_ners.utils.rng import global_rng_state, set_global_rng_state

BUFFER_STATE = "replay_buffer"
NERS_UPDATE_STATE = "ners_sampler_update"
RNG_STATE = "global_rng"
EXTRA_STATE = "algorithm_extra"


class ReplayStateMixin(LocalReplayBufferHook):
    """Buffer creation and checkpoint state for an `Algorithm` subclass, ahead of
    the RLlib algorithm class (`LocalReplayBufferHook` refuses the other order)."""

    # True while save_to_path()/restore_from_path() run: the buffer state then
    # goes straight to or comes straight from disk, so our buffers hand out and
    # adopt their arrays without copying them (peak memory +1x storage, not +2x).
    _checkpoint_io = False
    # The NERS sampler's update at episode ends (`NERSSamplerUpdate`), set in
    # `setup()` by an algorithm that replays with NERS; None otherwise.
    ners_sampler_update = None

    @override(Algorithm)
    def setup(self, config) -> None:
        # Before RLlib's setup builds the EnvRunners and Learners, which log
        # the fast paths they take (`log_level="INFO"` shows them).
        follow_rllib_log_level(config.log_level)
        super().setup(config)

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
        return from_config(ReplayBuffer, algorithm_buffer_config(config))

    def _extra_checkpoint_state(self) -> Dict[str, Any]:
        """Algorithm state beyond RLlib's, the buffer's and the sampler's."""
        return {}

    def _set_extra_checkpoint_state(self, state: Dict[str, Any]) -> None:
        """Restores what `_extra_checkpoint_state()` returned."""

    def _buffer_state(self) -> Dict[str, Any]:
        buffer = self.local_replay_buffer
        if is_fast_buffer(buffer):
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
            if is_fast_buffer(self.local_replay_buffer):
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
