"""Settings shared by the DQN/Rainbow tuned examples, sweeps and benchmarks.

`cartpole_dqn(config)` applies the DQN settings of RLlib's own CartPole DQN
example (`rllib/examples/algorithms/dqn/cartpole_dqn.py`) to any DQN-family
config (stock `DQNConfig`, `RainbowDQNConfig` or `NERSDQNConfig`): Adam 5e-4,
batch 32, double Q, dueling, n-step 2-5, epsilon 1 -> 0.02 over 10k steps,
learning from 1000 steps, 256-unit tanh encoder and head. Replay settings are
left to the caller. `atari_data_efficient_rainbow()` is the NERS reference's
Atari agent.
"""

from __future__ import annotations

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from rllib_ners.algorithms.common.config.sampler_presets import (
    RELO_ALPHA,
    laber_buffer_settings,
    relo_buffer_settings,
)


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
    "relo": ("rllib_ners.FastPrioritizedEpisodeReplayBuffer", RELO_ALPHA),
    "laber": ("rllib_ners.FastPrioritizedEpisodeReplayBuffer", 0.0),
}
# ReLo and LaBER: the buffer's sampler settings (`sampler_presets`). ReLo maps
# the C51 cross-entropy's reducible loss with "exp", as the authors' Atari
# Rainbow does; LaBER's beta 0 replaces the arm's annealed one (no importance
# weights: the sub-sample's LaBER weights correct for it). Uniform replay's
# weights are all 1 whatever beta is, so it sets none.
NO_IMPORTANCE_WEIGHTS = {
    "beta": 0.0,
    "beta_final": None,
    "beta_annealing_timesteps": None,
}
ATARI_SAMPLER_SETTINGS = {
    "uniform": NO_IMPORTANCE_WEIGHTS,
    "relo": relo_buffer_settings("exp"),
    "laber": {**laber_buffer_settings(), **NO_IMPORTANCE_WEIGHTS},
}


# `atari_data_efficient_rainbow`'s replay when none is given: what this
# package's pre-registered Atari 100k study recommends (README, Results), not
# NERS, which helped in none of its games.
RECOMMENDED_DATA_EFFICIENT_REPLAY = "uniform"


def _atari_replay(replay: str):
    """(config, buffer type, alpha) of an Atari replay arm: `NERSDQNConfig` for
    "ners", else `RainbowDQNConfig`."""
    from rllib_ners.algorithms.ners_dqn import NERSDQNConfig
    from rllib_ners.algorithms.rainbow import RainbowDQNConfig

    if replay not in ATARI_REPLAYS:
        raise ValueError(
            f"`replay` must be one of {sorted(ATARI_REPLAYS)}, got replay={replay!r}."
        )
    buffer_type, alpha = ATARI_REPLAYS[replay]
    config = NERSDQNConfig() if replay == "ners" else RainbowDQNConfig()
    return config, buffer_type, alpha


def atari_data_efficient_rainbow(
    game: str = "MsPacman",
    *,
    replay: str = RECOMMENDED_DATA_EFFICIENT_REPLAY,
    total_timesteps: int = 100_000,
    capacity: int = 100_000,
    learning_starts: int = 1600,
    rollout_fragment_length: int = 20,
):
    """Data-efficient Rainbow (van Hasselt et al. 2019) as the NERS reference runs
    it (youngmin0oh/NERS on Kaixhin/Rainbow), on an Atari game.

    `replay`: "uniform" (the default, `RECOMMENDED_DATA_EFFICIENT_REPLAY`) or
    "per" (`RainbowDQNConfig` with our prioritized buffer, alpha 0 or 0.5),
    "ners" (`NERSDQNConfig`: the NERS paper's setting), "relo" (ReLo: PER's alpha
    0.5 and beta 0.4 -> 1, the priority ReLo + 1 if ReLo >= 0 else exp(ReLo))
    or "laber" (LaBER: a uniform batch of 4 x 32, sub-sampled to 32 with
    LaBER-mean weights; beta 0). See `data_efficient_rainbow` for the settings.
    """
    config, buffer_type, alpha = _atari_replay(replay)
    config = data_efficient_rainbow(
        config,
        game,
        total_timesteps=total_timesteps,
        capacity=capacity,
        learning_starts=learning_starts,
        rollout_fragment_length=rollout_fragment_length,
    ).training(
        replay_buffer_config={
            **config.replay_buffer_config,
            "type": buffer_type,
            "alpha": alpha,
            **ATARI_SAMPLER_SETTINGS.get(replay, {}),
        }
    )
    return config


def atari_rainbow(
    game: str = "MsPacman",
    *,
    replay: str = "per",
    total_timesteps: int = 12_500_000,
    capacity: int = 1_000_000,
    learning_starts: int = 20_000,
    rollout_fragment_length: int = 4,
):
    """Rainbow as its paper runs Atari (Hessel et al. 2018), on an Atari game.

    `replay`: "ners" (`NERSDQNConfig`), "per" or "uniform" (`RainbowDQNConfig`
    with our prioritized buffer, alpha 0.5 or 0), "relo" or "laber" (as in
    `atari_data_efficient_rainbow`). One update of batch 32 per 4
    agent steps (`training_intensity = 8`; in lockstep with N remote EnvRunners
    (N + 1) / N times that, as RLlib's round weights make it; exact with
    `overlap_sampling=True`),
    replay capacity 1M, learning from 20k agent steps (80k frames), n = 3,
    target update every 8k agent steps (32k frames), Adam lr 6.25e-5 and eps
    1.5e-4, gradient norm clip 10, value/advantage streams of 512 units, 51
    atoms in [-10, 10], noisy nets with sigma0 = 0.5, importance-sampling beta
    0.4 -> 1 over `total_timesteps` (the paper's 50M frames), the Nature CNN on
    4 stacked 84x84 frames. With many EnvRunners add
    `.training(overlap_sampling=True)`, and larger requests than
    `rollout_fragment_length`'s 4 env steps: each costs the driver a fixed
    overhead, so `.env_runners(num_envs_per_env_runner=4,
    rollout_fragment_length=8)` (docs/scaling.md, "Env steps per request").
    """
    from rllib_ners.env.atari_rllib import with_atari

    config, buffer_type, alpha = _atari_replay(replay)
    batch_size, env_steps_per_update = 32, 4
    config = (
        config.training(
            lr=6.25e-5,
            adam_epsilon=1.5e-4,
            grad_clip=10.0,
            grad_clip_by="global_norm",
            gamma=0.99,
            train_batch_size_per_learner=batch_size,
            training_intensity=batch_size / env_steps_per_update,
            n_step=3,
            target_network_update_freq=8000,
            num_steps_sampled_before_learning_starts=learning_starts,
            double_q=True,
            dueling=True,
            noisy=True,
            sigma0=0.5,
            num_atoms=51,
            v_min=-10.0,
            v_max=10.0,
            hiddens=[512],
            replay_buffer_config={
                **(config.replay_buffer_config or {}),
                "type": buffer_type,
                "alpha": alpha,
                "capacity": capacity,
                "beta": 0.4,
                "beta_final": 1.0,
                "beta_annealing_timesteps": max(1, total_timesteps - learning_starts),
                **ATARI_SAMPLER_SETTINGS.get(replay, {}),
            },
        )
        .rl_module(model_config={"cnn_encoder": "nature"})
        .env_runners(rollout_fragment_length=rollout_fragment_length)
        .reporting(min_sample_timesteps_per_iteration=1000)
    )
    config = with_atari(config, game, frame_stack=4)
    return config


def data_efficient_rainbow(
    config,
    game: str,
    *,
    total_timesteps: int = 100_000,
    capacity: int = 100_000,
    learning_starts: int = 1600,
    rollout_fragment_length: int = 20,
):
    """Data-efficient Rainbow's settings on `config` (a `RainbowDQNConfig` or
    `NERSDQNConfig`), for an Atari game; the replay buffer's type and alpha are
    left to the caller (the buffer gets capacity, beta and frame stacking).

    100k agent steps, replay capacity 100k, learning from 1600 steps, one update
    of batch 32 per agent step, n = 20, target update every 2000 steps, Adam
    lr 1e-4 and eps 1.5e-4, gradient norm clip 10, value/advantage streams of
    256 units, 51 atoms in [-10, 10], noisy nets with sigma0 = 0.1 (no epsilon),
    importance-sampling beta 0.4 -> 1 over the run, the data-efficient CNN (two
    5x5 stride-5 convs) on 4 stacked 84x84 frames. One update per env step is
    kept for any `rollout_fragment_length` (`training_intensity = 32`: that many
    updates follow each fragment of that many steps).
    """
    from rllib_ners.env.atari_rllib import with_atari

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
                **(config.replay_buffer_config or {}),
                "capacity": capacity,
                "beta": 0.4,
                "beta_final": 1.0,
                "beta_annealing_timesteps": max(1, total_timesteps - learning_starts),
            },
        )
        .rl_module(model_config={"cnn_encoder": "data_efficient"})
        .env_runners(rollout_fragment_length=rollout_fragment_length)
        .reporting(min_sample_timesteps_per_iteration=1000)
    )
    return with_atari(config, game, frame_stack=4)
