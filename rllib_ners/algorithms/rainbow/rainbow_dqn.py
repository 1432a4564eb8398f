"""Rainbow DQN (Hessel et al. 2018) on RLlib 2.60's new API stack.

RLlib's DQN already has four of Rainbow's six extensions on the new stack: n-step
returns (`n_step`), double Q (`double_q`), prioritised replay (the replay buffer)
and C51 (`num_atoms`, `v_min`, `v_max`); dueling is there but combined with C51
per state rather than per atom. It silently ignores `noisy`, `sigma0`,
`adam_epsilon` and `hiddens`. `RainbowDQNConfig` closes the gap:

* its default RLModule is `RainbowTorchRLModule` (per-atom dueling, factorised
  noisy streams, Nature / data-efficient CNNs), which honours `noisy`, `sigma0`
  and `hiddens` (the streams' hidden layers);
* its default Learner is `RainbowDQNTorchLearner`, whose Adam uses `adam_epsilon`;
* `validate()` raises for every DQN setting that still has no effect on the new
  stack instead of ignoring it;
* `RainbowDQN` saves the replay buffer in checkpoints, as all this package's
  algorithms do by default (`store_buffer_in_checkpoints=True`; stock RLlib
  2.60 never does, whatever the setting says).

Every extension switches independently; all off (`n_step=1`, `double_q=False`,
`dueling=False`, `noisy=False`, uniform replay, `num_atoms=1`) is Nature DQN.
With `noisy=True` exploration comes from the noisy weights only: actions are the
argmax of the noisy Q-values and DQN's default epsilon schedule is not used;
setting a non-zero `epsilon` together with `noisy=True` raises.
"""

from __future__ import annotations

from typing import Any, Dict

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.dqn.dqn import DQN, DQNConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.common.config.buffer_config_checks import (
    check_replay_buffer_config,
)
from rllib_ners.algorithms.common.config.buffer_types import FAST_BUFFER_TYPE
from rllib_ners.algorithms.common.config.config_checks import (
    check_catalog_model_config,
    check_cnn_encoder_fits_observations,
    check_discrete_actions,
    check_frame_stack_fits_observations,
)
from rllib_ners.algorithms.common.config.fast_paths_config import FastPathsConfigMixin
from rllib_ners.algorithms.common.config.rllib_validation import rllib_validation
from rllib_ners.algorithms.common.config.setting_range_checks import (
    SettingRangesMixin,
)
from rllib_ners.algorithms.common.training.replay_loop import ReplayLoopMixin
from rllib_ners.seam.config import (
    ModelConfigIncludesHook,
    raise_config_error,
    user_learner_class,
    user_rl_module_spec,
)

# DQNConfig's default epsilon schedule; with noisy=True it is simply not used.
DQN_DEFAULT_EPSILON = [(0, 1.0), (10000, 0.05)]


def epsilon_is_zero(epsilon: Any) -> bool:
    """True for `0.0` or a schedule `[(t, value), ...]` whose values are all 0."""
    if isinstance(epsilon, (int, float)):
        return float(epsilon) == 0.0
    return all(float(value) == 0.0 for _, value in epsilon)


def _schedule(epsilon: Any):
    if isinstance(epsilon, (int, float)):
        return float(epsilon)
    return [(int(t), float(value)) for t, value in epsilon]


class RainbowDQNConfig(
    SettingRangesMixin, FastPathsConfigMixin, ModelConfigIncludesHook, DQNConfig
):
    """`DQNConfig` whose `noisy`, `sigma0`, `adam_epsilon` and `hiddens` work.

    Defaults are DQNConfig's (double Q and dueling on, the rest off), except
    the replay buffer: this package's `FastPrioritizedEpisodeReplayBuffer`
    with DQNConfig's settings (capacity 50000, alpha 0.6, beta 0.4), where
    DQNConfig replays from RLlib's own `PrioritizedEpisodeReplayBuffer` (set
    `replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"}` to use
    it). Switch the other extensions on as with stock DQN. Full Rainbow on
    CartPole:

    ```python
    from rllib_ners import RainbowDQNConfig

    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(
            n_step=3,
            double_q=True,
            dueling=True,
            noisy=True,
            sigma0=0.5,
            num_atoms=51,
            v_min=0.0,
            v_max=100.0,
            adam_epsilon=1.5e-4,
            replay_buffer_config={
                "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
                "capacity": 50000,
                "alpha": 0.5,
                "beta": 0.4,
            },
        )
    )
    algo = config.build_algo()
    algo.train()
    ```

    Model config keys of `RainbowTorchRLModule` beyond RLlib's: `cnn_encoder`
    ("nature", "data_efficient" or "small", for `[H, W, C]` image observations;
    unset: "nature" when the images are at least 36x36, else "small"), e.g.
    `config.rl_module(model_config={"cnn_encoder": "data_efficient"})`.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or RainbowDQN)
        # DQNConfig's replay settings in our buffer (DQNConfig: RLlib's).
        self.replay_buffer_config = {
            **self.replay_buffer_config,
            "type": FAST_BUFFER_TYPE,
        }
        # The replay memory is part of our checkpoints, so a restored run goes
        # on with what it had replayed from (RLlib 2.60 never saves it).
        self.store_buffer_in_checkpoints = True
        # None: the streams' hidden layers come from model_config
        # `head_fcnet_hiddens` (RLlib's default). A list sets them (old-stack name).
        self.hiddens = None

    @override(ModelConfigIncludesHook)
    def extra_model_config_includes(self) -> Dict[str, Any]:
        """`noisy`, which DQNConfig leaves out of `model_config`, and the
        streams' hidden layers when `hiddens` sets them."""
        includes = {"noisy": self.noisy}
        if self.hiddens is not None:
            includes["head_fcnet_hiddens"] = list(self.hiddens)
        return includes

    @override(DQNConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        if self.framework_str != "torch":
            raise ValueError(
                f"Rainbow DQN supports framework 'torch' only, got "
                f"{self.framework_str!r}. Use config.framework('torch')."
            )
        from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
            RainbowTorchRLModule,
        )

        return RLModuleSpec(
            module_class=RainbowTorchRLModule, model_config=self.model_config
        )

    @override(DQNConfig)
    def get_default_learner_class(self):
        from rllib_ners.algorithms.rainbow.torch.rainbow_dqn_torch_learner import (
            RainbowDQNTorchLearner,
        )

        return RainbowDQNTorchLearner

    @override(DQNConfig)
    def validate(self) -> None:
        # RLlib's DQNConfig.validate() cannot compare an n-step range with an
        # explicit rollout_fragment_length (a TypeError): it sees the range's
        # largest n, our buffers still draw the whole range.
        with rllib_validation(self):
            super().validate()
        self._validate_rainbow_settings()

    def _validate_rainbow_settings(self) -> None:
        """Raises for DQN settings the new stack (still) cannot honour."""
        if not self.enable_rl_module_and_learner:
            raise_config_error(
                self,
                "RainbowDQNConfig runs on RLlib's new API stack only; remove "
                "config.api_stack(enable_rl_module_and_learner=False, ...).",
            )
        if self.noisy and not epsilon_is_zero(self.epsilon):
            if _schedule(self.epsilon) != DQN_DEFAULT_EPSILON:
                raise_config_error(
                    self,
                    f"noisy=True explores through the noisy weights (greedy "
                    f"actions of the noisy Q-network), so epsilon-greedy is off; got "
                    f"epsilon={self.epsilon!r}. Remove the epsilon setting or set "
                    f"config.training(epsilon=0.0), or use noisy=False for "
                    f"epsilon-greedy exploration.",
                )
        if self.hiddens is not None:
            heads = self.model_config.get("head_fcnet_hiddens")
            if list(heads) != list(self.hiddens):
                raise_config_error(
                    self,
                    f"hiddens={list(self.hiddens)} (the value/advantage streams' "
                    f"hidden layers) disagrees with model_config "
                    f"head_fcnet_hiddens={list(heads)}. Set only one of them, e.g. "
                    f"config.rl_module(model_config={{'head_fcnet_hiddens': "
                    f"{list(self.hiddens)}}}) and config.training(hiddens=None).",
                )
        if self.categorical_distribution_temperature != 1.0:
            raise_config_error(
                self,
                "categorical_distribution_temperature has no effect on RLlib's new "
                "API stack; remove it (leave it at 1.0).",
            )
        if self.before_learn_on_batch is not None:
            raise_config_error(
                self,
                "before_learn_on_batch is an old-API-stack hook that the new stack "
                "never calls; remove it (use a learner connector instead: "
                "config.training(learner_connector=...)).",
            )
        if self.clip_rewards:
            raise_config_error(
                self,
                f"clip_rewards={self.clip_rewards!r} is not applied on RLlib's new "
                f"API stack; remove it and clip in the env (e.g. a gymnasium "
                f"TransformReward wrapper) or in an env-to-module connector.",
            )
        if self.burn_in_len:
            raise_config_error(
                self,
                f"burn_in_len={self.burn_in_len} warms up a recurrent Q-network "
                f"(R2D2); RainbowDQN's networks are not recurrent (model_config "
                f"use_lstm is refused), so it would be ignored. Remove it (leave "
                f"burn_in_len at 0).",
            )
        if self.num_atoms > 1 and self.td_error_loss_fn != "huber":
            raise_config_error(
                self,
                f"td_error_loss_fn={self.td_error_loss_fn!r} has no effect with "
                f"num_atoms={self.num_atoms} (C51 minimises a cross-entropy); "
                f"remove it or set num_atoms=1.",
            )
        self._check_custom_classes()
        check_discrete_actions(self, type(self).__name__.replace("Config", ""))
        check_replay_buffer_config(self)
        self._check_laber_takes_our_update()
        check_frame_stack_fits_observations(self)
        check_cnn_encoder_fits_observations(self)
        self._check_module_settings()

    def _check_module_settings(self) -> None:
        """The Rainbow catalog's model_config checks (`use_lstm`, layer norm in
        the streams, noisy streams with initializers, the C51 support), here
        rather than in the Learner's build."""
        from rllib_ners.algorithms.rainbow.rainbow_catalog import RainbowCatalog
        from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
            RainbowTorchRLModule,
        )

        check_catalog_model_config(
            self, RainbowCatalog.check_model_config, RainbowTorchRLModule
        )

    def _check_laber_takes_our_update(self) -> None:
        """LaBER's gradient pass runs outside RLlib's `forward_train`, so DDP
        (several Learners) would not average it and a torch-compiled update
        is RLlib's own; the Learner refuses both in `build()`, from inside
        `build_algo()`, so they are refused here first."""
        from rllib_ners.algorithms.common.learner.replay_methods import (
            uses_laber_replay,
        )

        if not uses_laber_replay(self):
            return
        if self.num_learners > 1 or self.torch_compile_learner:
            raise_config_error(
                self,
                f"replay_buffer_config['sampler']='laber' needs one Learner "
                f"without torch_compile_learner for RainbowDQN (got num_learners="
                f"{self.num_learners}, torch_compile_learner="
                f"{self.torch_compile_learner}); set config.learners("
                f"num_learners=0 or 1) and config.framework("
                f"torch_compile_learner=False).",
            )

    def _check_custom_classes(self) -> None:
        from rllib_ners.algorithms.rainbow.torch.rainbow_dqn_torch_learner import (
            DEFAULT_ADAM_EPSILON,
            RainbowDQNTorchLearner,
        )
        from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
            RainbowTorchRLModule,
        )

        learner_class = user_learner_class(self)
        if (
            isinstance(learner_class, type)
            and not issubclass(learner_class, RainbowDQNTorchLearner)
            and self.adam_epsilon != DEFAULT_ADAM_EPSILON
        ):
            raise_config_error(
                self,
                f"adam_epsilon={self.adam_epsilon} needs a learner derived from "
                f"rllib_ners RainbowDQNTorchLearner, got {learner_class.__name__} "
                f"(RLlib's TorchLearner ignores adam_epsilon).",
            )
        spec = user_rl_module_spec(self)
        module_class = getattr(spec, "module_class", None)
        if (
            isinstance(module_class, type)
            and not issubclass(module_class, RainbowTorchRLModule)
            and self.noisy
        ):
            raise_config_error(
                self,
                f"noisy=True needs rllib_ners RainbowTorchRLModule (or a subclass), "
                f"got module_class={module_class.__name__}, which has no noisy "
                f"layers.",
            )


class RainbowDQN(ReplayLoopMixin, DQN):
    """RLlib's DQN with `RainbowDQNConfig`; checkpoints include the replay buffer
    unless `store_buffer_in_checkpoints=False` (see `ReplayStateMixin`).

    With one of this package's buffers, its training step is DQN's run as one
    loop per iteration (`ReplayLoopMixin`): replayed transitions go to the
    Learners as numpy columns (`FastPrioritizedEpisodeReplayBuffer.sample_batch()`),
    not as one RLlib episode per transition through the learner connector
    pipeline (the same batch, tested), metrics are reduced once per iteration
    and a local Learner shares its weights with a local EnvRunner. Configs it
    cannot serve (a custom learner connector, a stateful RLModule, multi-agent
    without this package's multi-agent buffer or counting agent steps, RLlib's
    own buffers) keep RLlib's training step.
    """

    @classmethod
    @override(DQN)
    def get_default_config(cls) -> AlgorithmConfig:
        return RainbowDQNConfig()
