"""NERS-DQN: RLlib's DQN (new API stack) with the Neural Experience Replay Sampler.

Oh, Lee, Yang & Hwang, "Learning to Sample with Local and Global Contexts in
Experience Replay Buffer", ICLR 2021.

Per training step this is DQN's own step, with two changes:
  * the replay buffer is `NERSEpisodeReplayBuffer` and the Learner is
    `NERSDQNTorchLearner`, so priorities come from the sampler (by default PER's
    |TD error| times a learned correction, `per_residual`; the paper's learned
    scores `sigma^alpha` with `parameterization="sigmoid"`), and the buffer keeps
    the latest TD error / target value per transition;
  * after the step, once `min_episodes_per_update` training episodes have finished,
    the replay reward `r_re` (the mean return of this window of episodes against
    the `baseline`, by default an exponential moving average) drives one
    REINFORCE step of the sampler on every Learner.

Two routes lead here: `NERSDQNConfig` (below), or a stock `DQNConfig` passed to
`enable_ners(config)`, which sets the NERS buffer, learner and `NERSCallback`.
"""

from __future__ import annotations

from typing import Optional

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.dqn.dqn import DQN, DQNConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils import force_list
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.common.config.buffer_config_checks import (
    buffer_settings_problem,
)
from rllib_ners.algorithms.common.config.buffer_types import (
    NERS_BUFFER_TYPE,
    buffer_type_to_string,
    resolve_buffer_class,
)
from rllib_ners.algorithms.common.config.config_checks import check_discrete_actions
from rllib_ners.algorithms.common.config.rllib_validation import normalize_setting
from rllib_ners.algorithms.common.config.stock_config_refusals import (
    refuse_a_users_learner_class,
    refuse_multi_agent,
    refuse_other_configs,
)
from rllib_ners.algorithms.ners.ners_config import (
    NERSConfigMixin,
    ners_replay_problem,
    warn_of_switched_off_ners_settings,
)
from rllib_ners.algorithms.ners.ners_learner import (
    LEARNER_CONFIG_NERS_KEY,
    NERS_RESULTS,
)
from rllib_ners.algorithms.ners.sampler_rounds import NERSSamplerRoundsMixin
from rllib_ners.algorithms.ners.sampler_update import NERSSamplerUpdate
from rllib_ners.algorithms.rainbow.rainbow_dqn import RainbowDQN, RainbowDQNConfig
from rllib_ners.replay_buffers.rllib_compat import seed_our_buffer_at_init


def _check_ners_buffer(replay_buffer_config: Optional[dict], setting: str) -> None:
    from rllib_ners.replay_buffers.ners_episode_buffer import NERSEpisodeReplayBuffer

    if not replay_buffer_config or "type" not in replay_buffer_config:
        raise ValueError(f"{setting} needs replay_buffer_config with a 'type'.")
    cls = resolve_buffer_class(replay_buffer_config["type"])
    if not (isinstance(cls, type) and issubclass(cls, NERSEpisodeReplayBuffer)):
        raise ValueError(
            f"{setting} needs a NERS replay buffer, got replay_buffer_config['type']="
            f"{replay_buffer_config['type']!r}. Set it to '{NERS_BUFFER_TYPE}', or "
            f"for prioritized or uniform replay use rllib_ners.RainbowDQNConfig "
            f"(the same module and Learner, without the sampler)."
        )


class NERSDQNConfig(NERSConfigMixin, RainbowDQNConfig):
    """DQN config with the NERS sampler; `.ners(...)` holds the sampler's settings.

    A `RainbowDQNConfig`: its RLModule is `RainbowTorchRLModule`, so `noisy`,
    `sigma0`, `adam_epsilon` and C51/dueling all work (defaults give RLlib's own
    dueling DQN network).

    ```python
    from rllib_ners import NERSDQNConfig

    config = (
        NERSDQNConfig()
        .environment("CartPole-v1")
        .training(n_step=3, replay_buffer_config={"capacity": 50000})
        .ners(objective="log_prob", train_size=256)
    )
    algo = config.build_algo()
    algo.train()
    ```
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or NERSDQN)
        self.replay_buffer_config = {
            "type": NERS_BUFFER_TYPE,
            "capacity": 50000,
            "alpha": 0.6,
            "beta": 0.4,
        }
        # The replay memory is part of our checkpoints (RLlib 2.60 never saves it).
        self.store_buffer_in_checkpoints = True

    @override(DQNConfig)
    def validate(self) -> None:
        super().validate()
        if (
            isinstance(self.replay_buffer_config, dict)
            and "type" in self.replay_buffer_config
        ):
            normalize_setting(
                self,
                "replay_buffer_config",
                dict(
                    self.replay_buffer_config,
                    type=buffer_type_to_string(self.replay_buffer_config["type"]),
                ),
            )
        _check_ners_buffer(self.replay_buffer_config, "NERSDQNConfig")

    @override(DQNConfig)
    def get_default_learner_class(self):
        from rllib_ners.algorithms.ners_dqn.torch.ners_dqn_torch_learner import (
            NERSDQNTorchLearner,
        )

        return NERSDQNTorchLearner


class NERSDQN(NERSSamplerRoundsMixin, RainbowDQN):
    """DQN whose replay sampler is learned: DQN's training step on the NERS buffer,
    whose priorities come from the sampler (by default PER's |TD error| times
    its learned correction); once `min_episodes_per_update`
    training episodes have finished, their replay reward drives one REINFORCE
    step of the sampler on every Learner."""

    @classmethod
    @override(DQN)
    def get_default_config(cls) -> AlgorithmConfig:
        return NERSDQNConfig()


class NERSCallback(RLlibCallback):
    """Runs the NERS sampler update for a stock DQN built with `enable_ners()`.

    Stock DQN has no per-training-step hook, so the sampler is updated once per
    training iteration, from the episodes finished during it; the sampler
    diagnostics are added to `result["ners"]` then too. The callback holds the
    sampler update (`sampler_update`; RLlib builds one object of each
    callbacks class per algorithm, `algorithm.callbacks`); a stock DQN's
    checkpoints do not include its state.
    """

    sampler_update = None

    @override(RLlibCallback)
    def on_algorithm_init(self, *, algorithm, **kwargs) -> None:
        _check_ners_buffer(algorithm.config.replay_buffer_config, "NERSCallback")
        self.sampler_update = NERSSamplerUpdate.from_config(algorithm.config)

    @override(RLlibCallback)
    def on_train_result(self, *, algorithm, result, **kwargs) -> None:
        metrics = self.sampler_update.maybe_update(algorithm)
        if metrics:
            result.setdefault(NERS_RESULTS, {}).update(metrics)
        self.sampler_update.report(algorithm, result)


def enable_ners(config: DQNConfig, **ners_settings) -> DQNConfig:
    """Turns a stock `DQNConfig` into NERS-DQN (the a-la-carte route).

    Sets the NERS replay buffer (keeping the given capacity, alpha and beta), the
    NERS learner, `NERSCallback` beside the config's own callbacks and the
    sampler settings. The buffer and sampler settings are checked here as the
    NERS configs' `validate()` checks them (a stock config's checks none). A
    Learner class of the user's that does not derive from `NERSDQNTorchLearner`
    raises: it would be replaced. Each call sets the sampler settings anew (a
    second call does not keep the first's). A `NERSDQNConfig` raises: it is
    NERS-DQN already, and takes its settings with `config.ners(...)`.
    """
    from rllib_ners.algorithms.ners_dqn.torch.ners_dqn_torch_learner import (
        NERSDQNTorchLearner,
    )

    refuse_other_configs(
        config,
        DQNConfig,
        who="enable_ners",
        instead=(
            "NERS with SAC is NERSSACConfig(), with TD3 TD3Config() with the NERS "
            "buffer as replay_buffer_config's type"
        ),
    )
    if isinstance(config, NERSConfigMixin):
        # Its `ners_config` is what the sampler reads: settings stored here
        # would go unread.
        raise ValueError(
            f"enable_ners: {type(config).__name__} is NERS-DQN already; give the "
            f"sampler settings with config.ners(...), e.g. config.ners(lr=1e-3)."
        )
    refuse_multi_agent(config, who="enable_ners")
    refuse_a_users_learner_class(config, NERSDQNTorchLearner, who="enable_ners")
    check_discrete_actions(config, "enable_ners")
    buffer_config = dict(config.replay_buffer_config or {})
    buffer_config["type"] = NERS_BUFFER_TYPE
    buffer_config["scored_by_ners_learner"] = True
    # A stock DQNConfig's validate() checks none of this: refused here, before
    # a traceback from inside the algorithm's build.
    problem = ners_replay_problem(
        buffer_config,
        ners_settings,
        evaluates=bool(config.evaluation_interval or config.evaluation_num_env_runners),
        settings_call="enable_ners(config, ",
    ) or buffer_settings_problem(resolve_buffer_class(NERS_BUFFER_TYPE), buffer_config)
    if problem is not None:
        raise ValueError(f"enable_ners: {problem}")
    warn_of_switched_off_ners_settings(type(config), ners_settings)
    learner_config = dict(config.learner_config_dict or {})
    learner_config[LEARNER_CONFIG_NERS_KEY] = dict(ners_settings)
    # The user's callbacks stay (RLlib takes a list); RLlib's default
    # no-op class and an earlier call's NERSCallback give way.
    callbacks = [
        callback
        for callback in force_list(config.callbacks_class)
        if callback not in (RLlibCallback, NERSCallback)
    ]
    return seed_our_buffer_at_init(
        config.training(replay_buffer_config=buffer_config)
        .learners(learner_class=NERSDQNTorchLearner, learner_config_dict=learner_config)
        .callbacks([*callbacks, NERSCallback] if callbacks else NERSCallback)
    )
