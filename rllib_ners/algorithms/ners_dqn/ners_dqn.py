"""NERS-DQN: RLlib's DQN (new API stack) with the Neural Experience Replay Sampler.

Oh, Lee, Yang & Hwang, "Learning to Sample with Local and Global Contexts in
Experience Replay Buffer", ICLR 2021.

Per training step this is DQN's own step, with two changes:
  * the replay buffer is `NERSEpisodeReplayBuffer` and the Learner is
    `NERSDQNTorchLearner`, so priorities are learned scores `sigma^alpha`, not TD
    errors, and the buffer keeps the latest TD error / target value per transition;
  * after the step, once `min_episodes_per_update` training episodes have finished,
    the replay reward `r_re` (mean return of this window of episodes minus the
    previous window's) drives one REINFORCE step of the sampler on every Learner.

Two routes lead here: `NERSDQNConfig` (below), or a stock `DQNConfig` passed to
`enable_ners(config)`, which sets the NERS buffer, learner and `NERSCallback`.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Optional, Tuple

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.algorithms.dqn.dqn import DQN, DQNConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils.annotations import override
from ray.rllib.utils.from_config import from_config
from ray.rllib.utils.replay_buffers import ReplayBuffer

from rllib_ners.algorithms.ners_dqn.ners_dqn_learner import (
    LEARNER_CONFIG_NERS_KEY,
)
from rllib_ners.algorithms.ners_dqn.sampler_update import NERSSamplerUpdate
from rllib_ners.algorithms.rainbow.rainbow_dqn import RainbowDQNConfig
from rllib_ners.ners.settings import NERSSettings
from rllib_ners.rng_state import global_rng_state, set_global_rng_state

NERS_BUFFER_TYPE = "rllib_ners.NERSEpisodeReplayBuffer"
_UPDATER_STATE = "ners_sampler_update"
_BUFFER_STATE = "replay_buffer"
_RNG_STATE = "global_rng"


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
            f"{error}. Use e.g. '{NERS_BUFFER_TYPE}'."
        ) from None


def _check_ners_buffer(replay_buffer_config: Optional[dict], setting: str) -> None:
    from rllib_ners.replay_buffers.ners_episode_buffer import NERSEpisodeReplayBuffer

    if not replay_buffer_config or "type" not in replay_buffer_config:
        raise ValueError(f"{setting} needs replay_buffer_config with a 'type'.")
    cls = resolve_buffer_class(replay_buffer_config["type"])
    if not (isinstance(cls, type) and issubclass(cls, NERSEpisodeReplayBuffer)):
        raise ValueError(
            f"{setting} needs a NERS replay buffer, got replay_buffer_config['type']="
            f"{replay_buffer_config['type']!r}. Set it to '{NERS_BUFFER_TYPE}' (or "
            f"use a plain DQNConfig for prioritized or uniform replay)."
        )


class NERSDQNConfig(RainbowDQNConfig):
    """DQN config with the NERS sampler; `.ners(...)` holds the sampler's settings.

    A `RainbowDQNConfig`: its RLModule is `RainbowTorchRLModule`, so `noisy`,
    `sigma0`, `adam_epsilon` and C51/dueling all work (defaults give RLlib's own
    dueling DQN network).

    .. code-block:: python

        from rllib_ners import NERSDQNConfig

        config = (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .training(n_step=3, replay_buffer_config={"capacity": 50000})
            .ners(hidden_size=128, lr=1e-4, train_size=32)
        )
        algo = config.build_algo()
        algo.train()
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or NERSDQN)
        self.ners_config: Dict[str, Any] = NERSSettings().to_dict()
        self.replay_buffer_config = {
            "type": NERS_BUFFER_TYPE,
            "capacity": 50000,
            "alpha": 0.6,
            "beta": 0.4,
        }
        # The replay memory is part of our checkpoints (RLlib 2.60 never saves it).
        self.store_buffer_in_checkpoints = True

    def ners(
        self,
        *,
        hidden_size: Optional[int] = NotProvided,
        encoder: Optional[str] = NotProvided,
        encoder_hiddens: Optional[Tuple[int, ...]] = NotProvided,
        encoder_out_dim: Optional[int] = NotProvided,
        lr: Optional[float] = NotProvided,
        train_size: Optional[int] = NotProvided,
        replay_reward_mode: Optional[str] = NotProvided,
        min_episodes_per_update: Optional[int] = NotProvided,
        timestep_scale: Optional[float] = NotProvided,
        action_encoding: Optional[str] = NotProvided,
        log_eps: Optional[float] = NotProvided,
    ) -> NERSDQNConfig:
        """Sets the NERS sampler's settings; see `rllib_ners.NERSSettings`.

        Args:
            hidden_size: Width of the local/global/score networks (default 128).
            encoder: "separate" (the paper's own state encoder, default) or
                "module" (the RLModule's encoder output, detached).
            encoder_hiddens: Hidden layers of the separate encoder's MLP.
            encoder_out_dim: Output size of the separate encoder (default 32).
            lr: Adam learning rate of the sampler (default 1e-4).
            train_size: |I_train| per REINFORCE step (default 32).
            replay_reward_mode: "train_return" (default) or "eval_return".
            min_episodes_per_update: Finished training episodes per sampler
                update (default 1: every episode end, as in the paper).
            timestep_scale: Divides the in-episode timestep before tanh.
            action_encoding: "one_hot" (default) or "scaled_index".
            log_eps: Epsilon inside the REINFORCE log (default 1e-6).
        """
        for name, value in locals().items():
            if name != "self" and value is not NotProvided:
                self.ners_config[name] = value
        return self

    @override(DQNConfig)
    def validate(self) -> None:
        super().validate()
        if (
            isinstance(self.replay_buffer_config, dict)
            and "type" in self.replay_buffer_config
        ):
            self.replay_buffer_config = dict(
                self.replay_buffer_config,
                type=buffer_type_to_string(self.replay_buffer_config["type"]),
            )
        _check_ners_buffer(self.replay_buffer_config, "NERSDQNConfig")
        try:
            NERSSettings.from_dict(self.ners_config)
        except ValueError as error:
            self._value_error(str(error))
        if self.is_multi_agent:
            self._value_error(
                "NERSDQN supports single-agent setups only; remove the multi_agent() "
                "policies or use a plain DQNConfig."
            )
        if self.ners_config.get("replay_reward_mode") == "eval_return" and not (
            self.evaluation_interval or self.evaluation_num_env_runners
        ):
            self._value_error(
                "NERS replay_reward_mode='eval_return' needs evaluation workers: set "
                "config.evaluation(evaluation_num_env_runners=1, "
                "evaluation_duration=5, evaluation_duration_unit='episodes')."
            )

    @override(DQNConfig)
    def get_default_learner_class(self):
        from rllib_ners.algorithms.ners_dqn.torch.ners_dqn_torch_learner import (
            NERSDQNTorchLearner,
        )

        return NERSDQNTorchLearner


class NERSSamplerMixin:
    """Buffer creation, sampler updates and checkpoint state for NERS algorithms."""

    # True while save_to_path()/restore_from_path() run: the buffer state then
    # goes straight to or comes straight from disk, so the buffer hands out and
    # adopts its arrays without copying them (peak memory +1x storage, not +2x).
    _ners_checkpoint_io = False

    def save_to_path(self, *args, **kwargs):
        self._ners_checkpoint_io = True
        try:
            return super().save_to_path(*args, **kwargs)
        finally:
            self._ners_checkpoint_io = False

    def restore_from_path(self, *args, **kwargs):
        self._ners_checkpoint_io = True
        try:
            return super().restore_from_path(*args, **kwargs)
        finally:
            self._ners_checkpoint_io = False

    def _create_local_replay_buffer_if_necessary(self, config):
        """RLlib's version with `type` accepted as a class object, too."""
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
        # RLlib leaves its buffers unseeded; ours follow `config.debugging(seed=)`
        # unless the buffer config names its own seed, so seeded runs repeat.
        if self.config.seed is not None:
            buffer_config.setdefault("seed", self.config.seed)
        return from_config(ReplayBuffer, buffer_config)

    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(_UPDATER_STATE, components, not_components):
            state[_UPDATER_STATE] = self._ners_update.get_state()
        if self.config.store_buffer_in_checkpoints and self._check_component(
            _BUFFER_STATE, components, not_components
        ):
            state[_BUFFER_STATE] = self.local_replay_buffer.get_state(
                copy=not self._ners_checkpoint_io
            )
        if self._check_component(_RNG_STATE, components, not_components):
            # This process's generators: a local EnvRunner explores with torch's,
            # a local Learner draws noise from it. The buffer has its own RNG.
            state[_RNG_STATE] = global_rng_state()
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        if _UPDATER_STATE in state:
            self._ners_update.set_state(state[_UPDATER_STATE])
        if _BUFFER_STATE in state:
            self.local_replay_buffer.set_state(
                state[_BUFFER_STATE], copy=not self._ners_checkpoint_io
            )
        if _RNG_STATE in state:
            set_global_rng_state(state[_RNG_STATE])


class NERSDQN(NERSSamplerMixin, DQN):
    """DQN whose replay sampler is learned (see the module docstring)."""

    @classmethod
    @override(DQN)
    def get_default_config(cls) -> AlgorithmConfig:
        return NERSDQNConfig()

    @override(DQN)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        self._ners_update = NERSSamplerUpdate.from_config(self.config)

    @override(DQN)
    def training_step(self) -> None:
        super().training_step()
        self._ners_update.maybe_update(self)


class NERSCallback(RLlibCallback):
    """Runs the NERS sampler update for a stock DQN built with `enable_ners()`.

    Stock DQN has no per-training-step hook, so the sampler is updated once per
    training iteration, from the episodes finished during it.
    """

    def on_algorithm_init(self, *, algorithm, **kwargs) -> None:
        _check_ners_buffer(algorithm.config.replay_buffer_config, "NERSCallback")
        algorithm._ners_update = NERSSamplerUpdate.from_config(algorithm.config)

    def on_train_result(self, *, algorithm, result, **kwargs) -> None:
        metrics = algorithm._ners_update.maybe_update(algorithm)
        if metrics:
            result.setdefault("ners", {}).update(metrics)


def enable_ners(config: DQNConfig, **ners_settings) -> DQNConfig:
    """Turns a stock `DQNConfig` into NERS-DQN (the a-la-carte route).

    Sets the NERS replay buffer (keeping the given capacity, alpha and beta), the
    NERS learner, `NERSCallback` and the sampler settings (validated here).
    """
    from rllib_ners.algorithms.ners_dqn.torch.ners_dqn_torch_learner import (
        NERSDQNTorchLearner,
    )

    NERSSettings.from_dict(ners_settings)
    buffer_config = dict(config.replay_buffer_config or {})
    buffer_config["type"] = NERS_BUFFER_TYPE
    learner_config = dict(config.learner_config_dict or {})
    learner_config[LEARNER_CONFIG_NERS_KEY] = dict(ners_settings)
    return (
        config.training(replay_buffer_config=buffer_config)
        .learners(learner_class=NERSDQNTorchLearner, learner_config_dict=learner_config)
        .callbacks(NERSCallback)
    )
