"""Shared experiment settings, so tuned examples, sweeps and benchmarks agree.

`cartpole_dqn(config)` applies the DQN settings of RLlib's own CartPole DQN
example (`rllib/examples/algorithms/dqn/cartpole_dqn.py`) to any DQN-family
config (stock `DQNConfig` or `NERSDQNConfig`): Adam 5e-4, batch 32, double Q,
dueling, n-step 2-5, epsilon 1 -> 0.02 over 10k steps, learning from 1000
steps, 256-unit tanh encoder and head. Replay settings are left to the caller.
`atari_data_efficient_rainbow()` is the NERS reference's Atari agent;
`cartpole_acer()` and `atari_acer()` are ACER's settings with uniform,
prioritised or NERS replay.
"""

from __future__ import annotations

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig


def cartpole_dqn(config, *, env: str = "CartPole-v1"):
    return (
        config.environment(env)
        .training(
            lr=5e-4,
            train_batch_size_per_learner=32,
            n_step=(2, 5),
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (10000, 0.02)],
            num_steps_sampled_before_learning_starts=1000,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[256],
                head_fcnet_activation="tanh",
            )
        )
    )


# Replay arms of the Atari experiments: buffer type and priority exponent.
ATARI_REPLAYS = {
    "ners": ("rllib_ners.NERSEpisodeReplayBuffer", 0.5),
    "per": ("rllib_ners.FastPrioritizedEpisodeReplayBuffer", 0.5),
    "uniform": ("rllib_ners.FastPrioritizedEpisodeReplayBuffer", 0.0),
}


def atari_data_efficient_rainbow(
    game: str = "MsPacman",
    *,
    replay: str = "ners",
    total_timesteps: int = 100_000,
    capacity: int = 100_000,
    learning_starts: int = 1600,
    rollout_fragment_length: int = 20,
):
    """Data-efficient Rainbow (van Hasselt et al. 2019) as the NERS reference runs
    it (youngmin0oh/NERS on Kaixhin/Rainbow), on an Atari game.

    100k agent steps, replay capacity 100k, learning from 1600 steps, one update
    of batch 32 per agent step, n = 20, target update every 2000 steps, Adam
    lr 1e-4 and eps 1.5e-4, gradient norm clip 10, value/advantage streams of
    256 units, 51 atoms in [-10, 10], noisy nets with sigma0 = 0.1 (no epsilon),
    priority exponent 0.5, importance-sampling beta 0.4 -> 1 over the run, the
    data-efficient CNN (two 5x5 stride-5 convs) on 4 stacked 84x84 frames.

    `replay`: "ners" (`NERSDQNConfig`), "per" or "uniform" (`RainbowDQNConfig`
    with our prioritized buffer, alpha 0.5 or 0). One update per env step is
    kept for any `rollout_fragment_length` (`training_intensity = 32`: that many
    updates follow each fragment of that many steps).
    """
    from rllib_ners.algorithms.ners_dqn import NERSDQNConfig
    from rllib_ners.algorithms.rainbow import RainbowDQNConfig
    from rllib_ners.env.atari_rllib import with_atari

    if replay not in ATARI_REPLAYS:
        raise ValueError(
            f"`replay` must be one of {sorted(ATARI_REPLAYS)}, got replay={replay!r}."
        )
    buffer_type, alpha = ATARI_REPLAYS[replay]
    config = NERSDQNConfig() if replay == "ners" else RainbowDQNConfig()
    batch_size = 32
    config = (
        config.training(
            lr=1e-4,
            adam_epsilon=1.5e-4,
            grad_clip=10.0,
            grad_clip_by="global_norm",
            gamma=0.99,
            train_batch_size_per_learner=batch_size,
            training_intensity=batch_size,
            n_step=20,
            target_network_update_freq=2000,
            num_steps_sampled_before_learning_starts=learning_starts,
            double_q=True,
            dueling=True,
            noisy=True,
            sigma0=0.1,
            num_atoms=51,
            v_min=-10.0,
            v_max=10.0,
            hiddens=[256],
            replay_buffer_config={
                "type": buffer_type,
                "capacity": capacity,
                "alpha": alpha,
                "beta": 0.4,
                "beta_final": 1.0,
                "beta_annealing_timesteps": max(1, total_timesteps - learning_starts),
            },
        )
        .rl_module(model_config={"cnn_encoder": "data_efficient"})
        .env_runners(rollout_fragment_length=rollout_fragment_length)
        .reporting(min_sample_timesteps_per_iteration=1000)
    )
    if replay == "ners":
        config = config.ners(hidden_size=128, lr=1e-4, train_size=batch_size)
    return with_atari(config, game, frame_stack=4)


# Replay arms of the ACER experiments: buffer type and priority exponent.
ACER_REPLAYS = {
    "ners": ("rllib_ners.NERSEpisodeReplayBuffer", 0.6),
    "per": ("rllib_ners.FastPrioritizedEpisodeReplayBuffer", 0.6),
    "uniform": ("rllib_ners.FastPrioritizedEpisodeReplayBuffer", 0.0),
}


# ACER's loss settings of Wang et al. 2016 (and OpenAI baselines' `acer`), shared
# by the CartPole and Atari presets.
ACER_PAPER_SETTINGS = {
    "gamma": 0.99,
    "sequence_length": 20,
    "replay_ratio": 4.0,
    "replay_ratio_distribution": "poisson",
    "truncation_c": 10.0,
    "retrace_c": 1.0,
    "entropy_coeff": 0.01,
    "q_loss_coeff": 0.5,
    "tau": 0.01,
    "use_trust_region": True,
    "trust_region_delta": 1.0,
}


def _acer_replay(config, replay: str, capacity: int, batch_size: int):
    if replay not in ACER_REPLAYS:
        raise ValueError(
            f"`replay` must be one of {sorted(ACER_REPLAYS)}, got replay={replay!r}."
        )
    buffer_type, alpha = ACER_REPLAYS[replay]
    config = config.training(
        replay_buffer_config={
            "type": buffer_type,
            "capacity": capacity,
            "alpha": alpha,
            "beta": 0.4 if alpha > 0 else 0.0,
        }
    )
    if replay == "ners":
        config = config.ners(hidden_size=128, lr=1e-4, train_size=batch_size)
    return config


def cartpole_acer(*, replay: str = "uniform", env: str = "CartPole-v1"):
    """ACER on CartPole: sequences of 20 steps, 16 per off-policy batch, replay
    ratio Poisson(4), Adam 5e-4, gradient norm clip 40, entropy 0.01, c = 10,
    Retrace c = 1, trust region delta 1 against an average policy with tau
    0.01, learning from 200 stored steps, a 256-256 tanh trunk with linear
    policy and Q heads, replay capacity 50k.

    `replay`: "uniform" (default), "per" (alpha 0.6 on sequence starts) or
    "ners" (NERS buffer, alpha 0.6, beta 0.4; sampler hidden 128, Adam 1e-4,
    |I_train| = 32).
    """
    from rllib_ners.algorithms.acer import ACERConfig

    config = (
        ACERConfig()
        .environment(env)
        .training(
            **ACER_PAPER_SETTINGS,
            lr=5e-4,
            grad_clip=40.0,
            train_batch_size_per_learner=320,
            num_steps_sampled_before_learning_starts=200,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256, 256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[],
            )
        )
    )
    return _acer_replay(config, replay, capacity=50_000, batch_size=32)


def atari_acer(
    game: str = "Pong",
    *,
    replay: str = "uniform",
    num_envs_per_env_runner: int = 16,
    capacity: int = 50_000,
):
    """ACER's Atari settings (Wang et al. 2016; OpenAI baselines' `acer`):
    sequences of 20 steps from `num_envs_per_env_runner` envs (16 in the paper),
    replay ratio Poisson(4), replay capacity 50k steps, learning from 10k stored
    steps, lr 7e-4, gradient norm clip 10, entropy 0.01, q loss 0.5, c = 10,
    Retrace c = 1, trust region delta 1, average policy tau 0.01, gamma 0.99,
    the Nature CNN with a 512-unit layer before the policy and Q heads, 4
    stacked 84x84 grayscale frames stored once in the buffer (`with_atari`).
    """
    from rllib_ners.algorithms.acer import ACERConfig
    from rllib_ners.env.atari_rllib import with_atari

    sequence_length = ACER_PAPER_SETTINGS["sequence_length"]
    config = (
        ACERConfig()
        .training(
            **ACER_PAPER_SETTINGS,
            lr=7e-4,
            grad_clip=10.0,
            train_batch_size_per_learner=num_envs_per_env_runner * sequence_length,
            num_steps_sampled_before_learning_starts=10_000,
        )
        .env_runners(num_envs_per_env_runner=num_envs_per_env_runner)
        .rl_module(model_config={"cnn_encoder": "nature", "head_fcnet_hiddens": [512]})
        .reporting(min_sample_timesteps_per_iteration=2000)
    )
    config = _acer_replay(config, replay, capacity=capacity, batch_size=32)
    return with_atari(config, game, frame_stack=4)


def with_learner_threads(config, threads: int):
    """Gives a local Learner `threads` CPU threads, under Tune too.

    Acting and learning alternate in the Algorithm's process when
    `num_env_runners=0`, so its torch ops may use every core. Ray sets a trial
    process's OMP/torch threads to the CPUs it reserves for it, hence
    `num_cpus_for_main_process=threads`; `torch.set_num_threads` covers runs in
    this process (`--no-tune`, benchmarks).
    """
    import torch

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"`threads` must be a positive integer, got {threads!r}.")
    torch.set_num_threads(threads)
    return config.resources(num_cpus_for_main_process=threads)
