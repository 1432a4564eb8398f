"""Bad settings fail early with a ValueError that names the setting.

Every case is checked before any Ray actor could start: buffer constructors and
sample calls, NERS settings, and `NERSDQNConfig.validate()` / `ACERConfig.validate()`
/ `NERSSACConfig.validate()` (which `build_algo()` calls before creating
EnvRunners or Learners).
"""

import re

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import (
    ACERConfig,
    FastMultiAgentPrioritizedEpisodeReplayBuffer,
    FastPrioritizedEpisodeReplayBuffer,
    NERSDQNConfig,
    NERSEpisodeReplayBuffer,
    NERSSACConfig,
    NERSSettings,
    RainbowDQNConfig,
    TD3Config,
)
from rllib_ners.replay_buffers.sampler_choice import ALL_METHOD_SETTINGS


def _filled(cls=FastPrioritizedEpisodeReplayBuffer):
    buffer = cls(100)
    buffer.add(
        SingleAgentEpisode(
            observations=[np.zeros(2, np.float32)] * 6,
            actions=[0] * 5,
            rewards=[1.0] * 5,
            terminated=True,
            len_lookback_buffer=0,
            observation_space=gym.spaces.Box(-1, 1, (2,), np.float32),
            action_space=gym.spaces.Discrete(2),
        )
    )
    return buffer


def _ners_dqn(**ners):
    return NERSDQNConfig().environment("CartPole-v1").ners(**ners)


def _acer(**training):
    return ACERConfig().environment("CartPole-v1").training(**training).validate()


NERS_BUFFER = {"type": "rllib_ners.NERSEpisodeReplayBuffer", "capacity": 5000}
FAST_BUFFER = {"type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer", "alpha": 0.6}


def _two_policies(config):
    return config.environment("CartPole-v1").multi_agent(
        policies={"p0", "p1"},
        policy_mapping_fn=lambda agent_id, *args, **kwargs: "p0",
    )


MULTI_AGENT_BUFFER = {
    "type": "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer",
    "capacity": 5000,
}


def _ners_sac(**training):
    return NERSSACConfig().environment("Pendulum-v1").training(**training)


def _unbounded_actions():
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    return NERSSACConfig().environment(
        "Pendulum-v1",
        observation_space=box,
        action_space=gym.spaces.Box(-np.inf, np.inf, (1,), np.float32),
    )


BUFFER_CASES = [
    ("capacity", lambda: FastPrioritizedEpisodeReplayBuffer(0)),
    ("capacity", lambda: FastPrioritizedEpisodeReplayBuffer(-5)),
    ("capacity", lambda: FastPrioritizedEpisodeReplayBuffer(1)),
    ("capacity", lambda: FastPrioritizedEpisodeReplayBuffer(10.5)),
    ("alpha", lambda: FastPrioritizedEpisodeReplayBuffer(100, alpha=-0.1)),
    ("alpha", lambda: FastPrioritizedEpisodeReplayBuffer(100, alpha=float("nan"))),
    ("beta", lambda: FastPrioritizedEpisodeReplayBuffer(100, beta=1.5)),
    ("batch_size_B", lambda: FastPrioritizedEpisodeReplayBuffer(100, batch_size_B=0)),
    ("min_priority", lambda: FastPrioritizedEpisodeReplayBuffer(100, min_priority=0)),
    (
        "min_priority",
        lambda: FastPrioritizedEpisodeReplayBuffer(100, min_priority=float("inf")),
    ),
    # True is an int to Python, never a priority to a user.
    (
        "min_priority",
        lambda: FastPrioritizedEpisodeReplayBuffer(100, min_priority=True),
    ),
    (
        "min_priority",
        lambda: FastMultiAgentPrioritizedEpisodeReplayBuffer(100, min_priority=-1.0),
    ),
    ("batch_length_T", lambda: NERSEpisodeReplayBuffer(100, batch_length_T=0)),
    ("sampler", lambda: FastPrioritizedEpisodeReplayBuffer(100, sampler="prio")),
    ("sampler=", lambda: NERSEpisodeReplayBuffer(100, sampler="relo")),
    (
        "sampler=",
        lambda: FastMultiAgentPrioritizedEpisodeReplayBuffer(100, sampler="relo"),
    ),
    (
        "learner_sends_feedback",
        lambda: FastPrioritizedEpisodeReplayBuffer(100, learner_sends_feedback="y"),
    ),
    (
        "relo_transform",
        lambda: FastPrioritizedEpisodeReplayBuffer(
            100, sampler="relo", relo_transform="abs"
        ),
    ),
    (
        "relo_epsilon",
        lambda: FastPrioritizedEpisodeReplayBuffer(
            100, sampler="relo", relo_epsilon=-1.0
        ),
    ),
    (
        "laber_m",
        lambda: FastPrioritizedEpisodeReplayBuffer(
            100, sampler="laber", alpha=0.0, laber_m=0
        ),
    ),
    (
        "laber_weights",
        lambda: FastPrioritizedEpisodeReplayBuffer(
            100, sampler="laber", alpha=0.0, laber_weights="sum"
        ),
    ),
    ("does not read", lambda: FastPrioritizedEpisodeReplayBuffer(100, laber_m=4)),
    ("Unknown replay buffer settings", lambda: NERSEpisodeReplayBuffer(100, alfa=1)),
    ("beta", lambda: _filled().sample(4, beta=-0.1)),
    ("n_step", lambda: _filled().sample(4, n_step=(3, 2))),
    ("n_step", lambda: _filled().sample_batch(4, n_step=0)),
    ("n_step", lambda: _filled().sample_batch(4, n_step=(0, 2))),
    ("gamma", lambda: _filled().sample_batch(4, gamma=1.5)),
    ("num_items", lambda: _filled().sample_batch(0)),
    # RLlib's `sample()` arguments: 0 must not fall through to the default size.
    ("num_items", lambda: _filled().sample(num_items=0)),
    ("batch_size_B", lambda: _filled().sample(batch_size_B=0)),
    (r"Pass it to the buffer's `sample\(\)`", lambda: _filled().sample(num_items=-2)),
    (r"config\.training\(", lambda: _filled().sample(4, n_step=0)),
    ("empty replay buffer", lambda: FastPrioritizedEpisodeReplayBuffer(10).sample(2)),
    ("n_step=1", lambda: _filled().sample(batch_size_B=2, batch_length_T=3, n_step=3)),
    (
        "train_size",
        lambda: _filled(NERSEpisodeReplayBuffer).sample_sampler_training_batch(0),
    ),
    (
        "replay_mode='lockstep'",
        lambda: FastMultiAgentPrioritizedEpisodeReplayBuffer(
            100, replay_mode="lockstep"
        ),
    ),
    (
        "Unknown replay buffer settings",
        lambda: FastMultiAgentPrioritizedEpisodeReplayBuffer(100, mode="independent"),
    ),
]

SETTINGS_CASES = [
    ("objective", lambda: NERSSettings(objective="log_likelihood")),
    ("baseline", lambda: NERSSettings(baseline="median")),
    ("baseline_decay", lambda: NERSSettings(baseline_decay=1.5)),
    ("parameterization", lambda: NERSSettings(parameterization="softplus")),
    ("per_epsilon", lambda: NERSSettings(per_epsilon=-1.0)),
    ("train_draw", lambda: NERSSettings(train_draw="weighted")),
    ("normalizer_size", lambda: NERSSettings(normalizer_size=0)),
    ("update_interval_env_steps", lambda: NERSSettings(update_interval_env_steps=-5)),
    ("linear_skip", lambda: NERSSettings(linear_skip=1)),
    ("cache_encodings", lambda: NERSSettings(cache_encodings="yes")),
    ("linear_skip_lr", lambda: NERSSettings(linear_skip_lr=0.0)),
    ("linear_skip_lr", lambda: NERSSettings(linear_skip_lr=float("nan"))),
    ("max_log_correction", lambda: NERSSettings(max_log_correction=0.0)),
    ("max_log_correction", lambda: NERSSettings(max_log_correction=float("inf"))),
    ("hidden_size", lambda: NERSSettings(hidden_size=0)),
    ("lr", lambda: NERSSettings(lr=0.0)),
    ("lr", lambda: NERSSettings(lr=-1e-4)),
    ("lr", lambda: NERSSettings(lr=True)),
    ("train_size", lambda: NERSSettings(train_size=-1)),
    ("replay_reward_mode", lambda: NERSSettings(replay_reward_mode="best_return")),
    ("encoder", lambda: NERSSettings(encoder="resnet")),
    ("min_episodes_per_update", lambda: NERSSettings(min_episodes_per_update=0)),
    ("timestep_scale", lambda: NERSSettings(timestep_scale=-1.0)),
    ("action_encoding", lambda: NERSSettings(action_encoding="binary")),
    ("encoder_hiddens", lambda: NERSSettings(encoder_hiddens=(64, 0))),
    ("feature_normalization", lambda: NERSSettings(feature_normalization="batch")),
    ("diagnostics_sample_size", lambda: NERSSettings(diagnostics_sample_size=0)),
    ("Unknown NERS settings", lambda: NERSSettings.from_dict({"hidden": 3})),
]

CONFIG_CASES = [
    ("hidden_size", lambda: _ners_dqn(hidden_size=0).validate()),
    ("lr", lambda: _ners_dqn(lr=0).validate()),
    ("cache_encodings", lambda: _ners_dqn(cache_encodings="yes").validate()),
    (
        "diagnostics_sample_size",
        lambda: _ners_dqn(diagnostics_sample_size=1.5).validate(),
    ),
    ("replay_reward_mode", lambda: _ners_dqn(replay_reward_mode="x").validate()),
    (
        "feature_normalization",
        lambda: _ners_dqn(feature_normalization="std").validate(),
    ),
    ("evaluation", lambda: _ners_dqn(replay_reward_mode="eval_return").validate()),
    (
        "needs a NERS replay buffer",
        lambda: (
            NERSDQNConfig()
            .training(replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"})
            .validate()
        ),
    ),
    (
        "Unknown replay buffer type",
        lambda: (
            NERSDQNConfig()
            .training(replay_buffer_config={"type": "no_such_module.NoSuchBuffer"})
            .validate()
        ),
    ),
    (
        "supports Discrete action spaces only",
        lambda: NERSDQNConfig().environment("Pendulum-v1").validate(),
    ),
    (
        "frame_stack",
        lambda: (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={**NERS_BUFFER, "frame_stack": 4})
            .validate()
        ),
    ),
]

# Settings RLlib's own validate() would choke on, and replay buffers that cannot
# serve the config's agents.
VALIDATION_CASES = [
    (
        "n_step.*reversed",
        lambda: RainbowDQNConfig().training(n_step=(5, 2)).validate(),
    ),
    ("n_step", lambda: RainbowDQNConfig().training(n_step=0).validate()),
    ("n_step", lambda: RainbowDQNConfig().training(n_step="3").validate()),
    (
        "rollout_fragment_length",
        lambda: RainbowDQNConfig().env_runners(rollout_fragment_length=0).validate(),
    ),
    (
        # The range's largest n does not fit in a rollout fragment of 4.
        "rollout_fragment_length.*n_step",
        lambda: (
            RainbowDQNConfig()
            .env_runners(rollout_fragment_length=4)
            .training(n_step=(2, 5))
            .validate()
        ),
    ),
    (
        "n_step",
        lambda: (
            _ners_sac(n_step=(0, 3)).env_runners(rollout_fragment_length=4).validate()
        ),
    ),
    (
        "multi-agent config needs a multi-agent replay buffer",
        lambda: (
            _two_policies(RainbowDQNConfig())
            .training(replay_buffer_config=FAST_BUFFER)
            .validate()
        ),
    ),
    (
        "this config is single-agent",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config=MULTI_AGENT_BUFFER)
            .validate()
        ),
    ),
    (
        "Bad replay_buffer_config .*replay_mode='lockstep'",
        lambda: (
            _two_policies(RainbowDQNConfig())
            .training(
                replay_buffer_config={**MULTI_AGENT_BUFFER, "replay_mode": "lockstep"}
            )
            .validate()
        ),
    ),
    (
        "NERS replay\\) supports single-agent setups only",
        lambda: _two_policies(NERSDQNConfig()).validate(),
    ),
]

# replay_buffer_config is checked by our configs' validate(), before build_algo()
# starts any actor (not by the buffer's constructor inside build_algo()).
REPLAY_CONFIG_CASES = [
    (
        "replay_buffer_config\\['alpha'\\]=-1.0 is not a priority exponent",
        lambda: _ners_dqn().training(replay_buffer_config={"alpha": -1.0}).validate(),
    ),
    (
        "replay_buffer_config\\['capacity'\\]=0 is not a replay buffer capacity",
        lambda: _ners_dqn().training(replay_buffer_config={"capacity": 0}).validate(),
    ),
    (
        "Unknown replay buffer settings \\['capcity'\\]",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(
                replay_buffer_config={
                    "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
                    "capcity": 5000,
                }
            )
            .validate()
        ),
    ),
    (
        "replay_buffer_config\\['beta'\\]=2.0 is not an importance-sampling exponent",
        lambda: _acer(replay_buffer_config={"beta": 2.0}),
    ),
    (
        "Bad replay_buffer_config .*beta_annealing_timesteps",
        lambda: (
            _ners_dqn()
            .training(replay_buffer_config={"beta_annealing_timesteps": -5})
            .validate()
        ),
    ),
    (
        "Bad replay_buffer_config .*beta_final",
        lambda: (
            _ners_dqn().training(replay_buffer_config={"beta_final": 1.5}).validate()
        ),
    ),
    ("encoder_out_dim", lambda: _ners_dqn(encoder_out_dim=0).validate()),
    ("log_eps", lambda: _ners_dqn(log_eps=-1.0).validate()),
]

ACER_CASES = [
    ("sequence_length", lambda: _acer(sequence_length=0)),
    ("multiple of sequence_length", lambda: _acer(train_batch_size_per_learner=50)),
    ("replay_ratio", lambda: _acer(replay_ratio=-1.0)),
    ("replay_ratio_distribution", lambda: _acer(replay_ratio_distribution="normal")),
    (
        "must be an integer",
        lambda: _acer(replay_ratio=2.5, replay_ratio_distribution="fixed"),
    ),
    ("truncation_c", lambda: _acer(truncation_c=0.0)),
    ("retrace_c", lambda: _acer(retrace_c=-1.0)),
    ("entropy_coeff", lambda: _acer(entropy_coeff=-0.01)),
    ("tau", lambda: _acer(tau=1.5)),
    ("trust_region_delta", lambda: _acer(trust_region_delta=0.0)),
    ("gamma", lambda: _acer(gamma=1.2)),
    (
        "this package's buffers",
        lambda: _acer(replay_buffer_config={"type": "EpisodeReplayBuffer"}),
    ),
    (
        "too small for ACER",
        lambda: _acer(replay_buffer_config={**NERS_BUFFER, "capacity": 100}),
    ),
    (
        "samples uniformly and ignores the learned scores",
        lambda: _acer(replay_buffer_config={**NERS_BUFFER, "alpha": 0.0}),
    ),
    (
        "have no effect without the NERS replay buffer",
        lambda: ACERConfig().environment("CartPole-v1").ners(lr=1e-3).validate(),
    ),
    (
        "hidden_size",
        lambda: (
            ACERConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={**NERS_BUFFER, "alpha": 0.6})
            .ners(hidden_size=0)
            .validate()
        ),
    ),
    (
        "supports Discrete action spaces only",
        lambda: ACERConfig().environment("Pendulum-v1").validate(),
    ),
    (
        "frame_stack",
        lambda: _acer(replay_buffer_config={"frame_stack": 4}),
    ),
]


SAC_CASES = [
    (
        "supports continuous \\(Box\\) action spaces only",
        lambda: NERSSACConfig().environment("CartPole-v1").validate(),
    ),
    ("action bounds .* must be finite", lambda: _unbounded_actions().validate()),
    (
        "frame_stack",
        lambda: _ners_sac(replay_buffer_config={"frame_stack": 4}).validate(),
    ),
    ("hidden_size", lambda: _ners_sac().ners(hidden_size=0).validate()),
    ("train_size", lambda: _ners_sac().ners(train_size=0).validate()),
    (
        "this package's buffers",
        lambda: _ners_sac(
            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"}
        ).validate(),
    ),
    (
        "Unknown replay buffer type",
        lambda: _ners_sac(replay_buffer_config={"type": "nowhere.NoBuffer"}).validate(),
    ),
    (
        "replay_buffer_config\\['alpha'\\]=-1.0 is not a priority exponent",
        lambda: _ners_sac(replay_buffer_config={"alpha": -1.0}).validate(),
    ),
    (
        "samples uniformly and ignores the learned scores",
        lambda: _ners_sac(replay_buffer_config={"alpha": 0.0}).validate(),
    ),
    (
        "have no effect without the NERS replay buffer",
        lambda: _ners_sac(replay_buffer_config=FAST_BUFFER).ners(lr=1e-3).validate(),
    ),
    (
        "evaluation",
        lambda: _ners_sac().ners(replay_reward_mode="eval_return").validate(),
    ),
    # RLlib's own SAC checks still run under ours.
    ("`lr`", lambda: _ners_sac(lr=1e-3).validate()),
    # LaBER's Rainbow update is this package's, on one Learner.
    (
        "num_learners=2",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .learners(num_learners=2)
            .training(
                replay_buffer_config={"sampler": "laber", "alpha": 0.0, "beta": 0.0}
            )
            .validate()
        ),
    ),
    # PPO's passes over a batch, which no update here makes.
    ("num_epochs=5.*training_intensity", lambda: _ners_sac(num_epochs=5).validate()),
    (
        "minibatch_size=.*replay_ratio",
        lambda: (
            ACERConfig()
            .environment("CartPole-v1")
            .training(minibatch_size=32)
            .validate()
        ),
    ),
    (
        "shuffle_batch_per_epoch=",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .training(shuffle_batch_per_epoch=True)
            .validate()
        ),
    ),
    # Settings only RLlib's old-stack SAC policies read.
    (
        "optimization_config=.*actor_lr",
        lambda: _ners_sac(optimization_config={"actor_learning_rate": 1e-3}).validate(),
    ),
    (
        "q_model_config=.*fcnet_hiddens",
        lambda: _ners_sac(q_model_config={"fcnet_hiddens": [64]}).validate(),
    ),
    (
        "policy_model_config=",
        lambda: _ners_sac(policy_model_config={"fcnet_hiddens": [64]}).validate(),
    ),
    ("_deterministic_loss=", lambda: _ners_sac(_deterministic_loss=True).validate()),
    (
        "_use_beta_distribution=",
        lambda: _ners_sac(_use_beta_distribution=True).validate(),
    ),
    # A negative learning rate would train by gradient ascent.
    ("actor_lr=-0.001", lambda: _ners_sac(actor_lr=-1e-3).validate()),
    ("critic_lr=0", lambda: _ners_sac(critic_lr=0).validate()),
    ("alpha_lr", lambda: _ners_sac(alpha_lr=[[0, 1e-3], [100, -1e-3]]).validate()),
    ("critic_loss", lambda: _ners_sac(critic_loss="l1").validate()),
    ("pal_alpha", lambda: _ners_sac(pal_alpha=-0.4).validate()),
]

# What RLlib's own buffers would end in a bare AssertionError from inside Ray,
# and learning rates <= 0, fail in validate() for every config of ours.
RLLIB_BUFFER = {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 1000}
DEFAULTS_CASES = [
    (
        "replay_buffer_config\\['alpha'\\]=-1.0",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={**RLLIB_BUFFER, "alpha": -1.0})
            .validate()
        ),
    ),
    (
        "replay_buffer_config\\['beta'\\]=2.0",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={**RLLIB_BUFFER, "beta": 2.0})
            .validate()
        ),
    ),
    (
        "replay_buffer_config\\['capacity'\\]=0",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={**RLLIB_BUFFER, "capacity": 0})
            .validate()
        ),
    ),
    (
        "lr=0.0 is not a learning rate",
        lambda: (
            RainbowDQNConfig().environment("CartPole-v1").training(lr=0.0).validate()
        ),
    ),
    ("lr=-1.0 is not a learning rate", lambda: _acer(lr=-1.0)),
]


def _overlapped(num_env_runners=2, **training):
    return (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=num_env_runners)
        .training(**training)
        .validate()
    )


# Overlapped sampling needs remote EnvRunners and our loop; its settings' types.
OVERLAP_CASES = [
    ("overlap_sampling must be True or False", lambda: _overlapped(overlap_sampling=1)),
    (
        "overlap_sampling=True needs remote EnvRunners.*num_env_runners is 0",
        lambda: _overlapped(0, overlap_sampling=True),
    ),
    (
        "overlap_sampling=True runs in this package's training loop.*"
        "fast_training_loop is False",
        lambda: _overlapped(overlap_sampling=True, fast_training_loop=False),
    ),
    (
        "max_weights_staleness must be None or an int >= 1",
        lambda: _overlapped(overlap_sampling=True, max_weights_staleness=0),
    ),
    (
        "max_weights_staleness must be None or an int >= 1",
        lambda: _overlapped(max_weights_staleness=2.5),
    ),
    (
        "weights_sync_interval must be an int >= 1",
        lambda: _overlapped(overlap_sampling=True, weights_sync_interval=0),
    ),
    (
        "weights_sync_interval must be an int >= 1",
        lambda: _overlapped(overlap_sampling=True, weights_sync_interval=True),
    ),
    (
        "weights_sync_interval=4 applies to overlapped sampling.*overlap_sampling=True",
        lambda: _overlapped(weights_sync_interval=4),
    ),
    (
        "max_weights_staleness=4 applies to overlapped sampling.*overlap_sampling=True",
        lambda: _overlapped(max_weights_staleness=4),
    ),
    (
        "max_weights_staleness=3 must be at least weights_sync_interval=4.*"
        "max_weights_staleness to 8",
        lambda: _overlapped(
            overlap_sampling=True, weights_sync_interval=4, max_weights_staleness=3
        ),
    ),
]

# Settings RLlib's configs take that these algorithms would never read.
NOT_READ_CASES = [
    (
        "TD3 has no single learning rate: lr=0.001 would be unused.*actor_lr",
        lambda: TD3Config().environment("Pendulum-v1").training(lr=1e-3).validate(),
    ),
    (
        "train_batch_size=64 is not read.*train_batch_size_per_learner=256.*"
        "train_batch_size_per_learner=64",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .training(train_batch_size=64)
            .validate()
        ),
    ),
    (
        "train_batch_size=64 is not read.*train_batch_size_per_learner=256",
        lambda: (
            NERSSACConfig()
            .environment("Pendulum-v1")
            .training(train_batch_size=64)
            .validate()
        ),
    ),
    (
        "train_batch_size=80 is not read.*train_batch_size_per_learner=320",
        lambda: _acer(train_batch_size=80),
    ),
    # TD3's networks are one MLP each, built from the fcnet_* keys.
    (
        "head_fcnet_hiddens.*one MLP each",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .rl_module(model_config={"head_fcnet_hiddens": [64]})
            .validate()
        ),
    ),
    (
        "use_lstm.*not recurrent",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .rl_module(model_config={"use_lstm": True})
            .validate()
        ),
    ),
    # The catalogs' model_config checks, run by validate() before any build.
    *[
        (
            expected,
            lambda config=config, model_config=model_config: (
                config()
                .environment("CartPole-v1")
                .rl_module(model_config=model_config)
                .validate()
            ),
        )
        for expected, config, model_config in [
            ("Rainbow RLModule is not recurrent", RainbowDQNConfig, {"use_lstm": True}),
            (
                "streams have no layer norm",
                NERSDQNConfig,
                {"head_fcnet_use_layernorm": True},
            ),
            ("ACER's RLModule is not recurrent", ACERConfig, {"use_lstm": True}),
            (
                "heads have no layer norm",
                ACERConfig,
                {"head_fcnet_use_layernorm": True},
            ),
        ]
    ],
    (
        "conv_activation.*configure RLlib's CNN",
        lambda: (
            RainbowDQNConfig()
            .environment(
                "CartPole-v1",
                observation_space=gym.spaces.Box(0, 255, (84, 84, 4), np.uint8),
                action_space=gym.spaces.Discrete(2),
            )
            .rl_module(model_config={"conv_activation": "tanh"})
            .validate()
        ),
    ),
    # The policies act in [-1, 1]: only normalize_actions reaches Pendulum's +-2.
    *[
        (
            "acts in \\[-1, 1\\].*normalize_actions=False",
            lambda config=config: (
                config().environment("Pendulum-v1", normalize_actions=False).validate()
            ),
        )
        for config in (TD3Config, NERSSACConfig)
    ],
    # The old API stack's optimizer dict: the new stack's Learners never read it.
    *[
        (
            "optimizer=.*old-API-stack setting",
            lambda config=config, env=env: (
                config()
                .environment(env)
                .training(optimizer={"adam_epsilon": 0.1})
                .validate()
            ),
        )
        for config, env in (
            (RainbowDQNConfig, "CartPole-v1"),
            (NERSSACConfig, "Pendulum-v1"),
            (TD3Config, "Pendulum-v1"),
            (ACERConfig, "CartPole-v1"),
        )
    ],
    # ACER updates on batches it builds itself: no learner connector runs.
    (
        "runs no learner connector pipeline",
        lambda: _acer(learner_connector=lambda *args: None),
    ),
    (
        "runs no learner connector pipeline",
        lambda: _acer(add_default_connectors_to_learner_pipeline=False),
    ),
    (
        "burn_in_len=10 warms up a recurrent Q-network",
        lambda: (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .training(burn_in_len=10)
            .validate()
        ),
    ),
    # The training step passes the batch to every sample() call, and the
    # Algorithm its own smoothing window: the buffer config's are not read.
    (
        "replay_buffer_config\\['batch_size_B'\\]=64 is not read by the algorithm's "
        "buffer.*train_batch_size_per_learner",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={"batch_size_B": 64})
            .validate()
        ),
    ),
    (
        "replay_buffer_config\\['batch_length_T'\\]=20 is not read",
        lambda: _acer(replay_buffer_config={"batch_length_T": 20}),
    ),
    (
        "replay_buffer_config\\['metrics_num_episodes_for_smoothing'\\]=5 would be "
        "replaced by the Algorithm's own \\(100\\).*"
        "config.reporting\\(metrics_num_episodes_for_smoothing=5\\)",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .training(replay_buffer_config={"metrics_num_episodes_for_smoothing": 5})
            .validate()
        ),
    ),
    (
        # RLlib's DQN copies train_batch_size into the per-Learner batch; set
        # beside a different one, it is not read.
        "train_batch_size=64 is not read.*train_batch_size_per_learner=128",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(train_batch_size=64, train_batch_size_per_learner=128)
            .validate()
        ),
    ),
]

# Combinations the Learners would refuse in build(), from inside build_algo().
LEARNER_BUILD_CASES = [
    (
        "TD3 steps its optimizers itself and supports neither mixed precision",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .experimental(_torch_grad_scaler_class=torch.amp.GradScaler)
            .validate()
        ),
    ),
    (
        "sampler'\\]='relo' needs a per-item critic loss, but critic_loss='pal'",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .training(
                critic_loss="pal",
                replay_buffer_config={**FAST_BUFFER, "sampler": "relo"},
            )
            .validate()
        ),
    ),
    (
        "sampler'\\]='laber' needs a per-item critic loss, but critic_loss='pal'",
        lambda: (
            NERSSACConfig()
            .environment("Pendulum-v1")
            .training(
                critic_loss="pal",
                replay_buffer_config={
                    "type": FAST_BUFFER["type"],
                    "sampler": "laber",
                    "alpha": 0.0,
                    "beta": 0.0,
                },
            )
            .validate()
        ),
    ),
]

# The GPU Learner's opt-in settings: types and what they need.
GPU_LEARNER_CASES = [
    (
        "cuda_graph_updates must be True or False",
        lambda: _overlapped(0, cuda_graph_updates="yes"),
    ),
    (
        "cuda_graph_updates=True captures.*fast_training_loop is False",
        lambda: _overlapped(0, cuda_graph_updates=True, fast_training_loop=False),
    ),
    (
        "act_on_learner_device must be True or False",
        lambda: _overlapped(0, act_on_learner_device=1),
    ),
    (
        "act_on_learner_device=True makes the local EnvRunner.*num_env_runners is 2",
        lambda: _overlapped(2, act_on_learner_device=True),
    ),
    (
        "act_on_learner_device=True shares.*fast_training_loop is False",
        lambda: _overlapped(0, act_on_learner_device=True, fast_training_loop=False),
    ),
]


def _episode_of(obs_dim: int, action=0) -> SingleAgentEpisode:
    return SingleAgentEpisode(
        observations=[np.zeros(obs_dim, np.float32)] * 4,
        actions=[action] * 3,
        rewards=[1.0] * 3,
        terminated=True,
        len_lookback_buffer=0,
    )


def _add_to_filled(episode):
    _filled().add([episode])


def _stock(name: str):
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig

    return {"dqn": DQNConfig, "sac": SACConfig, "ppo": PPOConfig}[name]()


def _enable_ners(config):
    from rllib_ners import enable_ners

    return enable_ners(config)


def _enable_replay(config, method):
    from rllib_ners import enable_replay

    return enable_replay(config, method)


def _with_replay_buffer(config):
    from rllib_ners import with_replay_buffer

    return with_replay_buffer(config, FastPrioritizedEpisodeReplayBuffer)


# Input that once failed deep inside (a numpy or attribute error), or only at
# build or training time, or not at all.
EARLY_CASES = [
    (
        "config.environment.*unknown environment id 'NotAnEnv-v0'",
        lambda: NERSSACConfig().environment("NotAnEnv-v0").validate(),
    ),
    (
        "unknown environment id.*Did you mean: `CartPole`",
        lambda: RainbowDQNConfig().environment("CartPol-v1").validate(),
    ),
    ("game='NoSuchGame': no Atari game", lambda: _atari("NoSuchGame")),
    (
        "enable_ners takes a config of type DQNConfig.*got SACConfig.*NERSSACConfig",
        lambda: _enable_ners(_stock("sac").environment("Pendulum-v1")),
    ),
    (
        "enable_ners takes a config of type DQNConfig.*got None",
        lambda: _enable_ners(None),
    ),
    (
        "enable_ners supports Discrete action spaces only",
        lambda: _enable_ners(_stock("dqn").environment("Pendulum-v1")),
    ),
    (
        "enable_replay takes a config of type AlgorithmConfig.*got str",
        lambda: _enable_replay("DQN", "relo"),
    ),
    ("with_replay_buffer.*got PPOConfig", lambda: _with_replay_buffer(_stock("ppo"))),
    (
        "with_replay_buffer.*`capacity` must be an integer >= 1, got capacity=0",
        lambda: _with_replay_buffer(
            _stock("sac").training(replay_buffer_config={"capacity": 0})
        ),
    ),
    ("encoder_hiddens=64", lambda: _ners_dqn(encoder_hiddens=64).validate()),
    ("encoder_hiddens=None", lambda: _ners_dqn(encoder_hiddens=None).validate()),
    (
        "num_learners=-1 is not a number of remote Learners",
        lambda: RainbowDQNConfig().learners(num_learners=-1).validate(),
    ),
    (
        "num_env_runners=-1 is not a number of remote EnvRunners",
        lambda: RainbowDQNConfig().env_runners(num_env_runners=-1).validate(),
    ),
    (
        re.escape("model_config['fcnet_hiddens']=[0] is not a list of layer widths"),
        lambda: _mujoco_sac("Pendulum-v1", hiddens=(0,)).validate(),
    ),
    (
        re.escape("observations of shape (3,) per step do not fit the (2,)"),
        lambda: _add_to_filled(_episode_of(3)),
    ),
    (
        re.escape("actions of shape (2,) per step do not fit the ()"),
        lambda: _add_to_filled(_episode_of(2, action=np.zeros(2))),
    ),
    (
        "set_state.. takes what get_state.. of this buffer",
        lambda: FastPrioritizedEpisodeReplayBuffer(100).set_state({}),
    ),
    (
        "set_state.. takes what get_state.. of this buffer.*got None",
        lambda: NERSEpisodeReplayBuffer(100).set_state(None),
    ),
    (
        "set_state.. takes what get_state.. of this buffer.*with keys",
        lambda: FastMultiAgentPrioritizedEpisodeReplayBuffer(100).set_state({"a": 1}),
    ),
    ("`ddpg` must be True or False", lambda: _td3_config("Pendulum-v1", ddpg="yes")),
    (
        "ners_reference takes a NERS config.*got RainbowDQNConfig",
        lambda: _ners_reference(RainbowDQNConfig()),
    ),
    (
        "`evaluation_episodes`.*must be an integer >= 1, got 0",
        lambda: _ners_reference(NERSDQNConfig(), evaluation_episodes=0),
    ),
]

# One rule, once handled differently by the configs (the same message now).
CONSISTENCY_CASES = [
    *[
        (
            r"rollout_fragment_length=1 is smaller than the largest n of "
            r"n_step=3 \(3\).*rollout_fragment_length='auto'",
            lambda make=make: (
                make()
                .env_runners(rollout_fragment_length=1)
                .training(n_step=3)
                .validate()
            ),
        )
        for make in (
            lambda: TD3Config().environment("Pendulum-v1"),
            lambda: NERSSACConfig().environment("Pendulum-v1"),  # a TypeError once
            lambda: RainbowDQNConfig().environment("CartPole-v1"),
        )
    ],
    (
        "replay_buffer_config must be a dict with the buffer's 'type', got None",
        lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config=None)
            .validate()
        ),
    ),
    *[
        (
            "needs replay_buffer_config with a 'type'.*got None",
            lambda make=make: make().training(replay_buffer_config=None).validate(),
        )
        for make in (
            lambda: TD3Config().environment("Pendulum-v1"),  # kept the old ones
            lambda: ACERConfig().environment("CartPole-v1"),
        )
    ],
    (
        "TD3 updates its targets by Polyak averaging.*target_network_update_freq"
        "=100 would be unused",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .update_from_dict({"target_network_update_freq": 100})
            .validate()
        ),
    ),
    (
        "critic_loss='bad' is not a DDPG critic loss",
        lambda: _ddpg().training(critic_loss="bad").validate(),
    ),
    (
        "DDPG has no single learning rate",
        lambda: _ddpg().training(lr=1e-3).validate(),
    ),
    (
        r"replay_buffer_config\['frame_stack'\]=4 stacks image frames",
        lambda: (
            TD3Config()
            .environment("Pendulum-v1")
            .training(replay_buffer_config={"frame_stack": 4})
            .validate()
        ),
    ),
    *[
        (
            f"model_config\\['cnn_encoder'\\]='nature'.*{who}'s networks never read it",
            lambda make=make: (
                make()
                .environment("Pendulum-v1")
                .rl_module(model_config={"cnn_encoder": "nature"})
                .validate()
            ),
        )
        for who, make in (("TD3", TD3Config), ("NERSSAC", NERSSACConfig))
    ],
    (
        "num_steps_sampled_before_learning_starts=5000 is never reached: ACER "
        "starts learning once that many env steps are stored.*capacity'\\]=2000",
        lambda: _acer(
            replay_buffer_config={"capacity": 2000},
            num_steps_sampled_before_learning_starts=5000,
        ),
    ),
    (
        "enable_ners: NERSDQNConfig is NERS-DQN already.*config.ners",
        lambda: _enable_ners(NERSDQNConfig().environment("CartPole-v1")),
    ),
    (
        "needs a NERS replay buffer.*use rllib_ners.RainbowDQNConfig",
        lambda: (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .training(
                replay_buffer_config={
                    "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
                    "capacity": 1000,
                }
            )
            .validate()
        ),
    ),
    *[
        (
            f"with_replay_buffer.. is for stock RLlib configs; {make.__name__} "
            f"takes this package's buffers by name",
            lambda make=make: _with_replay_buffer(make()),
        )
        for make in (RainbowDQNConfig, NERSSACConfig, TD3Config, ACERConfig)
    ],
]


def _ddpg():
    from rllib_ners import DDPGConfig

    return DDPGConfig().environment("Pendulum-v1")


def _ners_reference(config, **kwargs):
    from rllib_ners.algorithms.ners.presets import ners_reference

    return ners_reference(config, **kwargs)


def _atari(game):
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow

    return atari_data_efficient_rainbow(game)


def _mujoco_sac(env, **kwargs):
    from rllib_ners.algorithms.ners_sac.presets import mujoco_sac

    return mujoco_sac(env, **kwargs)


def _td3_config(env, **kwargs):
    from rllib_ners.algorithms.td3.presets import td3_config

    return td3_config(env, **kwargs)


@pytest.mark.parametrize(
    "expected, make",
    BUFFER_CASES
    + SETTINGS_CASES
    + CONFIG_CASES
    + REPLAY_CONFIG_CASES
    + VALIDATION_CASES
    + ACER_CASES
    + SAC_CASES
    + DEFAULTS_CASES
    + OVERLAP_CASES
    + NOT_READ_CASES
    + LEARNER_BUILD_CASES
    + GPU_LEARNER_CASES
    + EARLY_CASES
    + CONSISTENCY_CASES,
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_input_names_the_setting_before_ray_starts(expected, make, ray_down):
    with pytest.raises(ValueError, match=expected):
        make()
    assert not ray.is_initialized()


def test_every_setting_of_the_buffers_and_of_ners_has_a_bad_input_case():
    """A new constructor argument or NERS setting without a case here fails."""
    import dataclasses
    import inspect

    cases = BUFFER_CASES + SETTINGS_CASES + CONFIG_CASES + REPLAY_CONFIG_CASES
    # The settings the patterns name, as whole words (`lr` is not `actor_lr`).
    expected = {
        word
        for pattern, _ in cases + ACER_CASES
        for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", pattern)
    }
    buffer_settings = [
        name
        for buffer_class in (
            FastPrioritizedEpisodeReplayBuffer,
            FastMultiAgentPrioritizedEpisodeReplayBuffer,
        )
        for name, parameter in inspect.signature(
            buffer_class.__init__
        ).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY
        or parameter.kind is parameter.POSITIONAL_OR_KEYWORD
    ]
    untested = {"self", "seed", "metrics_num_episodes_for_smoothing"}
    ners_settings = [field.name for field in dataclasses.fields(NERSSettings)]
    missing = [
        name
        # The samplers' own settings reach the buffer through **kwargs.
        for name in buffer_settings + list(ALL_METHOD_SETTINGS) + ners_settings
        if name not in untested and name not in expected
    ]
    assert not missing, f"No bad-input case names these settings: {missing}"


def test_an_n_step_range_with_an_explicit_rollout_fragment_length_validates():
    """RLlib's DQNConfig.validate() raises a TypeError comparing the two (see
    tests/rllib_contract/test_config_contract.py); ours compares the range's
    largest n and keeps the range, which the buffer draws inclusively."""
    for config in (RainbowDQNConfig(), NERSDQNConfig()):
        config = config.env_runners(rollout_fragment_length=5).training(n_step=(2, 5))
        config.validate()
        assert config.n_step == (2, 5)
    sac = _ners_sac(n_step=[1, 3]).env_runners(rollout_fragment_length=4)
    sac.validate()
    assert sac.n_step == (1, 3)  # a list (Tune's JSON round trip) -> a tuple


def test_acer_takes_the_ners_buffer_type_alone_with_its_own_alpha():
    config = (
        ACERConfig()
        .environment("CartPole-v1")
        .training(replay_buffer_config={"type": "rllib_ners.NERSEpisodeReplayBuffer"})
    )
    config.validate()
    assert "alpha" not in config.replay_buffer_config  # the buffer's default (1.0)
    assert config.uses_ners_replay
    # An alpha given beside the new type stays, and fails for NERS replay.
    explicit = (
        ACERConfig()
        .environment("CartPole-v1")
        .training(
            replay_buffer_config={
                "type": "rllib_ners.NERSEpisodeReplayBuffer",
                "alpha": 0.0,
            }
        )
    )
    with pytest.raises(ValueError, match="alpha"):
        explicit.validate()


def test_sac_validate_keeps_our_buffer_type_when_rllibs_checks_fail():
    """NERSSACConfig shows RLlib's SAC checks a buffer name they accept; the
    user's buffer config comes back whether those checks pass or raise."""
    config = _ners_sac(lr=1e-3, replay_buffer_config={"capacity": 777})
    with pytest.raises(ValueError, match="`lr`"):
        config.validate()
    assert config.replay_buffer_config["type"] == "rllib_ners.NERSEpisodeReplayBuffer"
    assert config.replay_buffer_config["capacity"] == 777
    config.training(lr=None).validate()
    assert config.replay_buffer_config["type"] == "rllib_ners.NERSEpisodeReplayBuffer"


def test_rainbow_replays_from_our_buffer_by_default():
    buffer_config = RainbowDQNConfig().replay_buffer_config
    assert buffer_config == {
        "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
        "capacity": 50000,
        "alpha": 0.6,
        "beta": 0.4,
    }
    # A setting without a type keeps ours.
    config = RainbowDQNConfig().training(replay_buffer_config={"capacity": 1000})
    assert config.replay_buffer_config["type"].endswith(
        "FastPrioritizedEpisodeReplayBuffer"
    )


def test_act_on_learner_device_says_why_the_cpu_acts(caplog):
    """An EnvRunner that samples through RLlib's connector pipelines (inputs
    on the CPU) keeps acting on the CPU and says so."""
    import logging
    from types import SimpleNamespace

    import torch

    from rllib_ners.algorithms.common.training import weight_sharing

    runner = SimpleNamespace(uses_fast_sampling=False, module=torch.nn.Linear(2, 2))
    learner = SimpleNamespace(device=torch.device("cuda"))
    with caplog.at_level(logging.INFO, logger=weight_sharing.__name__):
        weight_sharing._act_on_learner_device(runner, learner, graphs=True)
    assert runner.module.weight.device.type == "cpu"
    assert not hasattr(runner, "acting_graph")  # no graphs for CPU acting
    (said,) = [r.getMessage() for r in caplog.records]
    assert "acts on the CPU" in said and "connector pipelines" in said


def test_act_on_learner_device_with_graphs_says_how_the_gpu_acts(caplog, monkeypatch):
    """With `cuda_graph_updates=True` the fast EnvRunner acting on the GPU
    replays its exploration passes from graphs where the module says how its
    exploration depends on the timestep, else acts eagerly; one line says
    which. (The move to the GPU is skipped: no CUDA here.)"""
    import logging
    from types import SimpleNamespace

    import torch

    from rllib_ners.algorithms.common.training import weight_sharing

    monkeypatch.setattr(weight_sharing, "set_runner_device", lambda *args: None)
    learner = SimpleNamespace(device=torch.device("cuda"))

    class Explores(torch.nn.Linear):
        def exploration_graph_key(self, t):
            return "policy"

    for module, expected in (
        (Explores(2, 2), "replay from CUDA graphs"),
        (torch.nn.Linear(2, 2), "run eagerly: Linear does not say"),
    ):
        runner = SimpleNamespace(uses_fast_sampling=True, module=module)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=weight_sharing.__name__):
            weight_sharing._act_on_learner_device(runner, learner, graphs=True)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2 and "acts on the Learner's cuda" in said[0]
        assert expected in said[1], said
        installed = getattr(runner, "acting_graph", None)
        assert (installed is not None) == isinstance(module, Explores)
        # Without graphs: no acting graph, no second line.
        runner = SimpleNamespace(uses_fast_sampling=True, module=module)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=weight_sharing.__name__):
            weight_sharing._act_on_learner_device(runner, learner, graphs=False)
        assert len(caplog.records) == 1 and not hasattr(runner, "acting_graph")


def test_numpy_numbers_are_numbers_to_the_settings():
    # Tune's search spaces and numpy arithmetic hand out numpy scalars.
    settings = NERSSettings(lr=np.float32(3e-4), max_log_correction=np.float64(2.0))
    assert settings.lr == np.float32(3e-4)
    buffer = FastPrioritizedEpisodeReplayBuffer(100, min_priority=np.float32(0.5))
    assert buffer.sampler.min_priority == 0.5


def test_td3_takes_an_n_step_range_as_rllibs_dqn_and_sac_do():
    config = TD3Config().environment("Pendulum-v1").training(n_step=(2, 5))
    config.validate()
    assert config.get_rollout_fragment_length() == 5  # the range's largest n
    assert config.n_step == (2, 5)


def test_the_acer_ners_preset_leaves_the_buffer_free_to_change():
    from rllib_ners.algorithms.acer.presets import cartpole_acer

    config = cartpole_acer(replay="ners")
    config.validate()
    # No `.ners()` call in the preset: another buffer on top of it validates
    # (with one, validate() said the NERS settings had no effect).
    config.training(
        replay_buffer_config={
            "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
            "capacity": 50000,
        }
    ).validate()


@pytest.mark.parametrize("config_class", [TD3Config, NERSSACConfig])
def test_normalize_actions_off_passes_where_the_bounds_are_the_policys(config_class):
    """MountainCarContinuous acts in [-1, 1]: the policy reaches it unmapped."""
    config = config_class().environment(
        "MountainCarContinuous-v0", normalize_actions=False
    )
    config.validate()
