"""TD3 and DDPG on RLlib's new API stack, with our replay buffers and NERS.

Fujimoto, van Hoof & Meger, "Addressing Function Approximation Error in
Actor-Critic Methods", ICML 2018. RLlib 2.60's new API stack has neither TD3
nor DDPG (they left with the old stack); this is TD3 in RLlib's layout:
`TD3Config` / `TD3` (this module), `TD3Catalog`, `DefaultTD3TorchRLModule` (a
deterministic actor, twin critics on `[s, a]`, target copies) and
`TD3TorchLearner`. Per update, as the paper's Algorithm 1:

* critics: `y = r + gamma^n (1 - d) min_k Q'_k(s', a')` with the target
  policy smoothed, `a' = clip(pi'(s') + clip(eps, -c, c), -1, 1)`,
  `eps ~ N(0, target_noise^2)`, `c = target_noise_clip`; each critic regresses
  on `y` ("mse": the paper's squared error);
* every `policy_delay` updates: the actor ascends `Q_1(s, pi(s))` (with the
  critics just updated), then every target network moves by Polyak averaging
  with `tau`;
* acting: uniform random actions for the first `random_timesteps` env steps,
  then `clip(pi(s) + N(0, exploration_noise^2), -1, 1)`.

DDPG as the TD3 paper runs it ("our DDPG") is the same algorithm with one
critic, no target smoothing and no delay: `DDPGConfig`, or
`TD3Config().training(twin_q=False, target_noise=0.0, policy_delay=1)`.

Replay: our fast buffer (uniform by default, as the paper; `alpha > 0`:
prioritised by the larger twin |TD error|), the NERS buffer (NERS-TD3;
`.ners()` sets its sampler), or LAP (`alpha > 0`, `min_priority=1.0` and
`beta=0.0` in `replay_buffer_config`, with `critic_loss="huber"`); PAL is
LAP's uniform-sampling equivalent (`critic_loss="pal"` on uniform replay). The
training loop is `ReplayLoopMixin`'s (DQN's training step).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.algorithms.dqn.dqn import DQN
from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.learner.add_next_observations_from_episodes_to_train_batch import (  # noqa: E501
    AddNextObservationsFromEpisodesToTrainBatch,
)
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.common.config.buffer_config_checks import (
    check_critic_loss_fits_replay_method,
    check_replay_buffer_config,
    our_replay_buffer_config,
)
from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    NERS_BUFFER_TYPE,
    merged_replay_buffer_config,
)
from rllib_ners.algorithms.common.config.config_checks import (
    check_bounded_box_actions,
    check_catalog_model_config,
    check_frame_stack_fits_observations,
    check_no_cnn_encoder,
)
from rllib_ners.algorithms.common.config.fast_paths_config import FastPathsConfigMixin
from rllib_ners.algorithms.common.config.rllib_validation import (
    check_rollout_fragment_covers_n_step,
    normalize_setting,
)
from rllib_ners.algorithms.common.config.setting_range_checks import (
    SettingRangesMixin,
)
from rllib_ners.algorithms.ners.ners_config import NERSConfigMixin
from rllib_ners.algorithms.ners.sampler_rounds import NERSSamplerRoundsMixin
from rllib_ners.replay_buffers.n_step import normalize_n_step
from rllib_ners.replay_buffers.sampler_choice import LABER, RELO
from rllib_ners.seam.config import (
    ModelConfigIncludesHook,
    custom_optimizer_stepping,
    raise_config_error,
)

# Why TD3 refuses mixed precision and torch LR schedulers (its Learner steps
# the actor's and critics' optimizers itself, on its own schedule).
OWN_OPTIMIZER_STEPS = (
    "TD3 steps its optimizers itself and supports neither mixed precision nor "
    "torch LR schedulers; remove config.experimental(_torch_grad_scaler_class=..., "
    "_torch_lr_scheduler_classes=...)."
)

# The critics' regression loss: the TD3 paper's squared error, LAP's Huber
# loss, or PAL (LAP's uniform-sampling equivalent).
CRITIC_LOSSES = ("mse", "huber", "pal")


class TD3Config(
    SettingRangesMixin,
    NERSConfigMixin,
    FastPathsConfigMixin,
    ModelConfigIncludesHook,
    AlgorithmConfig,
):
    """TD3's settings (Fujimoto et al., ICML 2018); `.ners(...)` holds the NERS
    sampler's settings when the replay buffer is the NERS buffer.

    Defaults are the TD3 paper's: 256-256 ReLU actor and critics, Adam 3e-4,
    batch 256, gamma 0.99, tau 0.005, target noise 0.2 clipped at 0.5, policy
    delay 2, exploration noise 0.1, 10k random steps and 10k steps before
    learning; uniform replay from our fast buffer (capacity 1M), part of
    checkpoints. `rllib_ners.algorithms.td3.presets.td3_config()` adds one
    update per env step (the paper's replay ratio).

    ```python
    from rllib_ners import TD3Config

    config = (
        TD3Config()
        .environment("Pendulum-v1")
        .training(
            num_steps_sampled_before_learning_starts=1000,
            random_timesteps=1000,
        )
    )
    algo = config.build_algo()
    algo.train()
    ```
    """

    continuous_actions_only = True

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or TD3)
        # TD3's own settings.
        self.twin_q = True
        self.policy_delay = 2
        self.target_noise = 0.2
        self.target_noise_clip = 0.5
        self.exploration_noise = 0.1
        self.random_timesteps = 10_000
        self.critic_loss = "mse"
        self.pal_alpha = 0.4
        self.actor_lr = 3e-4
        self.critic_lr = 3e-4
        self.tau = 0.005
        # What DQN's training step (which TD3 runs) reads.
        self.lr = None
        self.gamma = 0.99
        self.n_step = 1
        self.train_batch_size_per_learner = 256
        self.num_steps_sampled_before_learning_starts = 10_000
        self.training_intensity = None
        self.target_network_update_freq = 0
        self.rollout_fragment_length = "auto"
        self.replay_buffer_config = {
            "type": FAST_BUFFER_TYPE,
            "capacity": int(1e6),
            "alpha": 0.0,
            "beta": 0.0,
        }
        # The replay memory is part of our checkpoints (RLlib 2.60 never saves it).
        self.store_buffer_in_checkpoints = True
        self.grad_clip = None
        self.min_sample_timesteps_per_iteration = 100
        self.min_time_s_per_iteration = 1

    @override(AlgorithmConfig)
    def training(
        self,
        *,
        twin_q: Optional[bool] = NotProvided,
        policy_delay: Optional[int] = NotProvided,
        target_noise: Optional[float] = NotProvided,
        target_noise_clip: Optional[float] = NotProvided,
        exploration_noise: Optional[float] = NotProvided,
        random_timesteps: Optional[int] = NotProvided,
        critic_loss: Optional[str] = NotProvided,
        pal_alpha: Optional[float] = NotProvided,
        actor_lr: Optional[float] = NotProvided,
        critic_lr: Optional[float] = NotProvided,
        tau: Optional[float] = NotProvided,
        n_step: Optional[int] = NotProvided,
        num_steps_sampled_before_learning_starts: Optional[int] = NotProvided,
        training_intensity: Optional[float] = NotProvided,
        replay_buffer_config: Optional[Dict[str, Any]] = NotProvided,
        store_buffer_in_checkpoints: Optional[bool] = NotProvided,
        **kwargs,
    ) -> TD3Config:
        """Sets TD3's training settings.

        Args:
            twin_q: Two critics and the clipped double-Q target (TD3); False:
                one critic (DDPG).
            policy_delay: Updates per actor and target update (2; DDPG: 1).
            target_noise: Std of the target policy smoothing noise, in units
                of the `[-1, 1]` action range (0.2; DDPG: 0).
            target_noise_clip: The smoothing noise is clipped to
                `[-target_noise_clip, target_noise_clip]` (0.5).
            exploration_noise: Std of the Gaussian added to the actor's
                action when acting (0.1).
            random_timesteps: Env steps of uniform random actions before the
                actor acts (10000; counted over all EnvRunners).
            critic_loss: "mse" (the default: the TD3 paper's squared error,
                weighted by the importance weights), "huber" (LAP's: Huber with
                threshold 1) or "pal" (PAL: LAP's loss for uniform replay, with
                `pal_alpha`).
            pal_alpha: PAL's exponent (LAP's alpha; 0.4).
            actor_lr: Adam learning rate of the actor (3e-4).
            critic_lr: Adam learning rate of the critics (3e-4).
            tau: Polyak coefficient of the target updates (0.005).
            n_step: n-step returns (1).
            num_steps_sampled_before_learning_starts: Env steps sampled before
                the first update (10000).
            training_intensity: Replayed / sampled env steps (None: RLlib's
                DQN default, one batch per rollout fragment).
            replay_buffer_config: One of this package's buffers, merged into the
                current settings as RLlib's DQN and SAC configs merge them (a
                new `type` replaces them all; default: the fast buffer,
                `rllib_ners.FastPrioritizedEpisodeReplayBuffer`, capacity 1e6,
                `alpha=0.0`: uniform); `alpha > 0`: prioritised by
                the larger twin |TD error|; `alpha > 0`, `min_priority=1.0` and
                `beta=0.0`: LAP; `rllib_ners.NERSEpisodeReplayBuffer`: NERS.
            store_buffer_in_checkpoints: Whether checkpoints hold the replay
                memory (True).
        """
        super().training(**kwargs)
        settings = dict(locals())
        for name in (
            "twin_q",
            "policy_delay",
            "target_noise",
            "target_noise_clip",
            "exploration_noise",
            "random_timesteps",
            "critic_loss",
            "pal_alpha",
            "actor_lr",
            "critic_lr",
            "tau",
            "n_step",
            "num_steps_sampled_before_learning_starts",
            "training_intensity",
            "store_buffer_in_checkpoints",
        ):
            if settings[name] is not NotProvided:
                setattr(self, name, settings[name])
        if replay_buffer_config is not NotProvided:
            self.replay_buffer_config = merged_replay_buffer_config(
                self.replay_buffer_config, replay_buffer_config
            )
        return self

    @override(ModelConfigIncludesHook)
    def extra_model_config_includes(self) -> Dict[str, Any]:
        """What the RLModule acts with: `twin_q`, `exploration_noise`,
        `random_timesteps`; and the paper's ReLU hidden layers, which
        `rl_module(model_config=...)` overrides (RLlib's `DefaultModelConfig`
        would give tanh, filled in by the catalog under a dict that lacks
        `fcnet_activation`)."""
        return {
            "fcnet_activation": "relu",
            "twin_q": self.twin_q,
            "exploration_noise": self.exploration_noise,
            "random_timesteps": self.random_timesteps,
        }

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from rllib_ners.algorithms.td3.torch.default_td3_torch_rl_module import (
            DefaultTD3TorchRLModule,
        )

        return RLModuleSpec(module_class=DefaultTD3TorchRLModule)

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        from rllib_ners.algorithms.td3.torch.td3_torch_learner import TD3TorchLearner

        return TD3TorchLearner

    @override(AlgorithmConfig)
    def get_rollout_fragment_length(self, worker_index: int = 0) -> int:
        """ "auto": `n_step` env steps per fragment (as RLlib's DQN and SAC)."""
        if self.rollout_fragment_length == "auto":
            return normalize_n_step(self.n_step)[1]  # a range's largest n
        return self.rollout_fragment_length

    @override(AlgorithmConfig)
    def build_learner_connector(
        self, input_observation_space, input_action_space, device=None
    ):
        """RLlib's default learner pipeline plus the next observations (the
        pipeline of RLlib's training step; this package's loop replays numpy
        columns instead)."""
        pipeline = super().build_learner_connector(
            input_observation_space=input_observation_space,
            input_action_space=input_action_space,
            device=device,
        )
        pipeline.insert_after(
            AddObservationsFromEpisodesToBatch,
            AddNextObservationsFromEpisodesToTrainBatch(),
        )
        return pipeline

    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        who = getattr(self.algo_class, "__name__", "TD3")
        if self.framework_str != "torch":
            raise_config_error(
                self,
                f"{who} supports framework 'torch' only, got "
                f"{self.framework_str!r}. Use config.framework('torch').",
            )
        if not self.enable_rl_module_and_learner:
            raise_config_error(
                self,
                f"{who} runs on RLlib's new API stack only; remove "
                f"config.api_stack(enable_rl_module_and_learner=False, ...).",
            )
        self._validate_td3_settings(who)
        check_rollout_fragment_covers_n_step(self)
        buffer_config = our_replay_buffer_config(
            self,
            who=who,
            example=f"{{'type': '{FAST_BUFFER_TYPE}', 'capacity': 1000000}}",
            replays="replays from",
            use=f"'{FAST_BUFFER_TYPE}' (alpha=0: uniform, alpha > 0: prioritised, "
            f"min_priority=1 and beta=0: LAP) or '{NERS_BUFFER_TYPE}' (NERS)",
        )
        normalize_setting(self, "replay_buffer_config", buffer_config)
        check_replay_buffer_config(self)
        check_critic_loss_fits_replay_method(self, (RELO, LABER))
        check_bounded_box_actions(self, who)
        check_frame_stack_fits_observations(self)
        check_no_cnn_encoder(self, who)
        self._check_module_settings()
        if self.uses_ners_replay and self.ners_config.get("encoder") == "module":
            raise_config_error(
                self,
                f"{who}'s actor and critics have no shared encoder for NERS to "
                f"read: encoder='module' does not apply. Use "
                f"config.ners(encoder='separate') (the default).",
            )

    def _check_module_settings(self) -> None:
        """The catalog's model_config checks (head layers, `use_lstm`), here
        rather than in the Learner's build."""
        from rllib_ners.algorithms.td3.default_td3_rl_module import DefaultTD3RLModule
        from rllib_ners.algorithms.td3.td3_catalog import TD3Catalog

        check_catalog_model_config(
            self, TD3Catalog.check_model_config, DefaultTD3RLModule
        )

    def _validate_td3_settings(self, who: str) -> None:
        """TD3's own settings beyond their ranges (`SettingRangesMixin`): the
        critic loss, the learning rates, the target updates and the agents."""
        if self.lr is not None:
            # RLlib's SAC refuses `lr` the same way: the Learner builds one
            # Adam per network from `actor_lr` and `critic_lr` and reads no `lr`.
            raise_config_error(
                self,
                f"{who} has no single learning rate: lr={self.lr!r} would be "
                f"unused. Set config.training(actor_lr=..., critic_lr=...) "
                f"(both {TD3Config().actor_lr} by default) and leave lr=None.",
            )
        if self.target_network_update_freq:
            # Set by __init__ for DQN's training step, so update_from_dict and
            # Tune's param_space take it; the Learner never reads it.
            raise_config_error(
                self,
                f"{who} updates its targets by Polyak averaging after every "
                f"actor update: target_network_update_freq="
                f"{self.target_network_update_freq!r} would be unused. Set "
                f"config.training(tau=..., policy_delay=...) instead and leave "
                f"target_network_update_freq at 0.",
            )
        if self.critic_loss not in CRITIC_LOSSES:
            raise_config_error(
                self,
                f"critic_loss={self.critic_loss!r} is not a {who} critic loss; use "
                f"config.training(critic_loss='mse') (the TD3 paper's), 'huber' "
                f"(LAP's) or 'pal' (PAL's).",
            )
        if self.is_multi_agent:
            raise_config_error(
                self,
                f"{who} supports single-agent setups only; remove the multi_agent() "
                f"policies.",
            )
        if custom_optimizer_stepping(self):
            # Refused here, not first in the Learner's build() inside Ray.
            raise_config_error(self, OWN_OPTIMIZER_STEPS)


class TD3(NERSSamplerRoundsMixin, DQN):
    """TD3 (Fujimoto et al., ICML 2018): DQN's replay training step with TD3's
    Learner; with the NERS buffer, the NERS sampler update after each round."""

    @classmethod
    @override(DQN)
    def get_default_config(cls) -> AlgorithmConfig:
        return TD3Config()


class DDPGConfig(TD3Config):
    """DDPG as the TD3 paper runs it ("our DDPG"): `TD3Config` with one critic,
    no target policy smoothing and no policy delay (every other setting
    TD3's)."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DDPG)
        self.twin_q = False
        self.target_noise = 0.0
        self.policy_delay = 1


class DDPG(TD3):
    """TD3's algorithm with `DDPGConfig`'s defaults."""

    @classmethod
    @override(TD3)
    def get_default_config(cls) -> AlgorithmConfig:
        return DDPGConfig()
