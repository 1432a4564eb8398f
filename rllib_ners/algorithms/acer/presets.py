"""Settings shared by the ACER tuned examples and benchmarks.

`cartpole_acer()` and `atari_acer()` are ACER's settings with uniform,
prioritised or NERS replay.
"""

from __future__ import annotations

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

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


def _acer_replay(config, replay: str, capacity: int):
    if replay not in ACER_REPLAYS:
        raise ValueError(
            f"`replay` must be one of {sorted(ACER_REPLAYS)}, got replay={replay!r}."
        )
    buffer_type, alpha = ACER_REPLAYS[replay]
    # replay="ners" keeps the sampler's defaults (NERSSettings): no .ners()
    # call, so the buffer can still be swapped or swept on top of the preset.
    return config.training(
        replay_buffer_config={
            "type": buffer_type,
            "capacity": capacity,
            "alpha": alpha,
            "beta": 0.4 if alpha > 0 else 0.0,
        }
    )


def cartpole_acer(*, replay: str = "uniform", env: str = "CartPole-v1"):
    """ACER on CartPole: sequences of 20 steps, 16 per off-policy batch, replay
    ratio Poisson(4), Adam 5e-4, gradient norm clip 40, entropy 0.01, c = 10,
    Retrace c = 1, trust region delta 1 against an average policy with tau
    0.01, learning from 200 stored steps, a 256-256 tanh trunk with linear
    policy and Q heads, replay capacity 50k.

    `replay`: "uniform" (default), "per" (alpha 0.6 on sequence starts) or
    "ners" (NERS buffer, alpha 0.6, beta 0.4; the `.ners()` sampler defaults).
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
    return _acer_replay(config, replay, capacity=50_000)


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
    config = _acer_replay(config, replay, capacity=capacity)
    return with_atari(config, game, frame_stack=4)
