"""NERS-SAC: RLlib's SAC (new API stack) with the Neural Experience Replay Sampler.

Oh, Lee, Yang & Hwang, "Learning to Sample with Local and Global Contexts in
Experience Replay Buffer", ICLR 2021: the paper's main results are SAC and TD3
on continuous control (MuJoCo).

Per training step this is SAC's own step (which is DQN's), with three changes:
  * the rounds of sampling and updates run as one loop per iteration
    (`ReplayLoopMixin`): replayed transitions go to the Learners as numpy
    columns straight from the buffer, not one RLlib episode per transition
    through the learner connectors (the batch and SAC's losses on it are the
    same, tested), metrics are reduced once per iteration and a local Learner
    shares its weights with a local EnvRunner;
  * with the NERS buffer (the default) the Learner is `NERSSACTorchLearner`, so
    priorities are learned scores, and the buffer keeps the latest soft TD error
    and soft TD target per transition;
  * after the step, once `min_episodes_per_update` training episodes have
    finished, the replay reward drives one REINFORCE step of the sampler on
    every Learner (as in NERS-DQN).

Our PER and uniform buffers (`FastPrioritizedEpisodeReplayBuffer`) plug in as
`replay_buffer_config["type"]` too; stock `SACConfig.validate()` refuses them.
"""

from __future__ import annotations

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.algorithms.sac.sac import SAC, SACConfig
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
)
from rllib_ners.algorithms.common.config.config_checks import (
    check_bounded_box_actions,
    check_frame_stack_fits_observations,
    check_no_cnn_encoder,
)
from rllib_ners.algorithms.common.config.fast_paths_config import FastPathsConfigMixin
from rllib_ners.algorithms.common.config.rllib_validation import (
    normalize_setting,
    rllib_validation,
    settings_seen_by_rllib,
)
from rllib_ners.algorithms.common.config.setting_range_checks import (
    SettingRangesMixin,
)
from rllib_ners.algorithms.ners.ners_config import NERSConfigMixin
from rllib_ners.algorithms.ners.sampler_rounds import NERSSamplerRoundsMixin
from rllib_ners.replay_buffers.sampler_choice import LABER
from rllib_ners.seam.config import raise_config_error

# A buffer name `SACConfig.validate()` accepts; it stands in for ours while
# RLlib's own checks run.
RLLIB_ACCEPTED_BUFFER_TYPE = "PrioritizedEpisodeReplayBuffer"
# The critics' regression loss: RLlib's Huber loss (delta 1; LAP's loss too),
# the SAC paper's squared error, or PAL (LAP's loss for uniform replay).
CRITIC_LOSSES = ("huber", "mse", "pal")


class SACConfigTakingOurBuffers(SACConfig):
    """RLlib's `SACConfig` whose `validate()` takes this package's buffers.

    RLlib 2.60's `SACConfig.validate()` accepts only the names of RLlib's four
    episode buffers as `replay_buffer_config["type"]` (its "the replay buffer
    must be of type `EpisodeReplayBuffer`" check), with no switch for it. So
    the type is checked here to name one of our buffers, and while RLlib's
    checks run (on everything else, as they are) the config holds one of
    RLlib's names in its place.
    """

    @override(SACConfig)
    def validate(self) -> None:
        buffer_config = our_replay_buffer_config(
            self,
            who="NERSSAC",
            example=f"{{'type': '{NERS_BUFFER_TYPE}', 'capacity': 1000000}}",
            replays="replays from",
            use=f"'{NERS_BUFFER_TYPE}' (NERS) or '{FAST_BUFFER_TYPE}' (alpha > 0: "
            f"prioritised; alpha=0: uniform), or RLlib's SACConfig for RLlib's "
            f"own buffers",
        )
        normalize_setting(self, "replay_buffer_config", buffer_config)
        rllib_buffer_config = dict(buffer_config, type=RLLIB_ACCEPTED_BUFFER_TYPE)
        with settings_seen_by_rllib(self, replay_buffer_config=rllib_buffer_config):
            with rllib_validation(self):
                super().validate()


class NERSSACConfig(
    SettingRangesMixin,
    NERSConfigMixin,
    FastPathsConfigMixin,
    SACConfigTakingOurBuffers,
):
    """SAC config with the NERS sampler; `.ners(...)` holds the sampler's settings.

    Defaults are `SACConfig`'s, except the replay buffer: the NERS buffer
    (capacity 1M, alpha 0.6, beta 0.4), part of checkpoints.

    ```python
    from rllib_ners import NERSSACConfig

    config = (
        NERSSACConfig()
        .environment("Pendulum-v1")
        .training(replay_buffer_config={"capacity": 100000})
        .ners(hidden_size=128, lr=1e-4)
    )
    algo = config.build_algo()
    algo.train()
    ```

    Prioritised or uniform replay through our fast buffer instead:

    ```python
    config.training(
        replay_buffer_config={
            "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
            "capacity": 100000,
            "alpha": 0.6,  # 0.0: uniform
            "beta": 0.4,
        }
    )
    ```
    """

    continuous_actions_only = True

    default_replay_buffer_type = NERS_BUFFER_TYPE

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or NERSSAC)
        self.replay_buffer_config = {
            "type": NERS_BUFFER_TYPE,
            "capacity": int(1e6),
            "alpha": 0.6,
            "beta": 0.4,
        }
        # The replay memory is part of our checkpoints (RLlib 2.60 never saves it).
        self.store_buffer_in_checkpoints = True
        self.critic_loss = "huber"
        self.pal_alpha = 0.4

    @override(SACConfig)
    def training(
        self, *, critic_loss=NotProvided, pal_alpha=NotProvided, **kwargs
    ) -> NERSSACConfig:
        """`SACConfig.training()`, plus:

        Args:
            critic_loss: The critics' regression loss on the soft TD target `y`,
                weighted by the importance weights: "huber" (RLlib's SAC, the
                default: Huber with delta 1) or "mse" (the SAC paper's, and
                Stable-Baselines3's and CleanRL's: `0.5 (Q(s, a) - y)^2`). With
                returns of hundreds (MuJoCo), TD errors far exceed 1 and the
                Huber loss caps their gradient; `sac_config()` (the presets)
                uses "mse". "huber" is also LAP's loss (with a LAP buffer:
                `min_priority=1.0`, `beta=0.0`); "pal" is PAL, LAP's loss for
                uniform replay (Fujimoto et al. 2020), with `pal_alpha`.
            pal_alpha: PAL's exponent (LAP's alpha; 0.4).
        """
        super().training(**kwargs)
        if critic_loss is not NotProvided:
            self.critic_loss = critic_loss
        if pal_alpha is not NotProvided:
            self.pal_alpha = pal_alpha
        return self

    @override(SACConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        """`SACTorchRLModule`: RLlib's SAC module with the SAC paper's critics,
        MLPs on the concatenated `[s, a]` (RLlib's own are multi-stream networks
        about ten times as costly per transition)."""
        if self.framework_str != "torch":
            raise ValueError(
                f"NERSSAC supports framework 'torch' only, got "
                f"{self.framework_str!r}. Use config.framework('torch')."
            )
        from rllib_ners.algorithms.ners_sac.torch.sac_torch_rl_module import (
            SACTorchRLModule,
        )

        return RLModuleSpec(module_class=SACTorchRLModule)

    @override(SACConfig)
    def get_default_learner_class(self):
        from rllib_ners.algorithms.ners_sac.torch.ners_sac_torch_learner import (
            NERSSACTorchLearner,
        )

        return NERSSACTorchLearner

    @override(SACConfig)
    def validate(self) -> None:
        super().validate()
        if not self.enable_rl_module_and_learner:
            raise_config_error(
                self,
                "NERSSACConfig runs on RLlib's new API stack only; remove "
                "config.api_stack(enable_rl_module_and_learner=False, ...).",
            )
        if self.framework_str != "torch":
            raise_config_error(
                self,
                f"NERSSAC supports framework 'torch' only, got "
                f"{self.framework_str!r}. Use config.framework('torch').",
            )
        if self.critic_loss not in CRITIC_LOSSES:
            raise_config_error(
                self,
                f"critic_loss={self.critic_loss!r} is not a SAC critic loss; use "
                f"config.training(critic_loss='mse') (the SAC paper's), 'huber' "
                f"(RLlib's, and LAP's) or 'pal' (PAL's).",
            )
        self._refuse_old_stack_settings()
        check_replay_buffer_config(self)
        # ReLo takes PAL's loss here: NERS-SAC's per-item losses are PAL's,
        # each divided by the batch's normaliser, online and target alike.
        check_critic_loss_fits_replay_method(self, (LABER,))
        check_bounded_box_actions(self, "NERSSAC")
        check_frame_stack_fits_observations(self)
        check_no_cnn_encoder(self, "NERSSAC")

    def _refuse_old_stack_settings(self) -> None:
        """SACConfig keeps settings only its old-API-stack policies read; set,
        each would be ignored here (and by RLlib's new-stack SAC)."""
        defaults = SACConfig()
        fixes = {
            "optimization": "set config.training(actor_lr=..., critic_lr=..., "
            "alpha_lr=...) instead of optimization_config",
            "q_model_config": "set the critics' layers with "
            "config.rl_module(model_config={'fcnet_hiddens': [...]})",
            "policy_model_config": "set the policy's layers with "
            "config.rl_module(model_config={'fcnet_hiddens': [...]})",
            "_deterministic_loss": "remove it",
            "_use_beta_distribution": "remove it (the policy is a squashed Gaussian)",
        }
        for attribute, fix in fixes.items():
            if getattr(self, attribute) != getattr(defaults, attribute):
                setting = (
                    "optimization_config" if attribute == "optimization" else attribute
                )
                raise_config_error(
                    self,
                    f"{setting}={getattr(self, attribute)!r} is read only by "
                    f"RLlib's old API stack, so NERSSAC would ignore it; {fix}.",
                )


class NERSSAC(NERSSamplerRoundsMixin, SAC):
    """SAC whose replay sampler is learned: SAC's training step on the NERS buffer,
    whose priorities come from the sampler (by default PER's |TD error| times
    its learned correction); once `min_episodes_per_update`
    training episodes have finished, their replay reward drives one REINFORCE
    step of the sampler on every Learner."""

    @classmethod
    @override(SAC)
    def get_default_config(cls) -> AlgorithmConfig:
        return NERSSACConfig()
