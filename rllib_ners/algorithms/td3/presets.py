"""Settings shared by the TD3 tuned examples, benchmarks and study.

`td3_config()` is the TD3 paper's continuous-control setting (Fujimoto et al.
2018, and their code's defaults: Stable-Baselines3's too) with one of our
replay methods; `mujoco_td3()` and `pendulum_td3()` fill in the env and the
warm-up. Everything is a plain `TD3Config`, so a study can also build TD3
from a dict: `TD3Config().update_from_dict({...})`.
"""

from __future__ import annotations

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    NERS_BUFFER_TYPE,
)
from rllib_ners.algorithms.common.config.sampler_presets import (
    laber_buffer_settings,
    relo_buffer_settings,
)

TD3_BATCH_SIZE = 256
# PER's priority exponent and initial importance-sampling exponent (the SAC
# arms' and the NERS defaults').
PER_ALPHA, PER_BETA = 0.6, 0.4
# LAP's (Fujimoto, Meger & Precup 2020): priority max(|delta|, 1)^0.4, no
# importance weights, Huber loss.
LAP_ALPHA, LAP_MIN_PRIORITY = 0.4, 1.0

# Replay arms: `replay_buffer_config` beyond the capacity, and the critics' loss.
TD3_REPLAYS = {
    "uniform": ({"type": FAST_BUFFER_TYPE, "alpha": 0.0, "beta": 0.0}, "mse"),
    "per": ({"type": FAST_BUFFER_TYPE, "alpha": PER_ALPHA, "beta": PER_BETA}, "mse"),
    "lap": (
        {
            "type": FAST_BUFFER_TYPE,
            "alpha": LAP_ALPHA,
            "beta": 0.0,
            "min_priority": LAP_MIN_PRIORITY,
        },
        "huber",
    ),
    "pal": ({"type": FAST_BUFFER_TYPE, "alpha": 0.0, "beta": 0.0}, "pal"),
    "ners": ({"type": NERS_BUFFER_TYPE, "alpha": PER_ALPHA, "beta": PER_BETA}, "mse"),
    # ReLo: PER's beta with ReLo's alpha 0.5 and priority max(ReLo, 0) + 1e-5
    # (the authors' SAC settings: they ran no TD3); LaBER: m 4, LaBER-mean.
    "relo": (
        {"type": FAST_BUFFER_TYPE, "beta": PER_BETA, **relo_buffer_settings("clip")},
        "mse",
    ),
    "laber": ({"type": FAST_BUFFER_TYPE, **laber_buffer_settings()}, "mse"),
}


def td3_config(
    env: str,
    *,
    replay: str = "uniform",
    capacity: int = 1_000_000,
    learning_starts: int = 10_000,
    lr: float = 3e-4,
    hiddens=(256, 256),
    rollout_fragment_length: int = 1,
    ddpg: bool = False,
    config=None,
):
    """The TD3 paper's settings on `env`: actor and twin critics each a ReLU
    MLP with `hiddens` (256, 256), the critics on `[s, a]`; Adam with `lr`
    (3e-4) for both; batch 256; gamma 0.99; Polyak tau 0.005; target policy
    noise 0.2 clipped at 0.5; the actor and targets updated every 2nd update;
    Gaussian exploration noise 0.1; `learning_starts` env steps of uniform
    random actions before the first update, then one update per env step.

    `replay`: "uniform" (the paper's), "per" (alpha 0.6, beta 0.4, priority
    the larger twin |TD error|), "lap" (LAP: priority max(|delta|, 1)^0.4, no
    importance weights, Huber loss), "pal" (PAL: LAP's loss on uniform replay),
    "ners" (the NERS buffer with the `.ners()` defaults), "relo" (ReLo: alpha
    0.5, beta 0.4, priority max(ReLo, 0) + 1e-5 of the twin critics' mean
    reducible loss) or "laber" (LaBER: a uniform batch of 4 x 256, sub-sampled
    to 256 per critic with LaBER-mean weights; the actor on 256 uniform rows
    of it). `ddpg=True`: DDPG as the TD3 paper runs it (one critic, no
    smoothing, no delay).
    `config`: the config to fill in (default `TD3Config()`, with `ddpg=True`
    `DDPGConfig()`, the only kind `ddpg=True` takes).
    """
    from rllib_ners.algorithms.td3 import DDPGConfig, TD3Config

    if replay not in TD3_REPLAYS:
        raise ValueError(
            f"`replay` must be one of {sorted(TD3_REPLAYS)}, got replay={replay!r}."
        )
    if not isinstance(ddpg, bool):
        raise ValueError(f"`ddpg` must be True or False, got ddpg={ddpg!r}.")
    buffer_settings, critic_loss = TD3_REPLAYS[replay]
    if config is None:
        config = DDPGConfig() if ddpg else TD3Config()
    elif ddpg and not isinstance(config, DDPGConfig):
        raise ValueError(
            f"ddpg=True with config={type(config).__name__}(...) would train TD3: "
            f"the DDPG settings (one critic, no smoothing, no delay) are "
            f"DDPGConfig's. Pass config=DDPGConfig() or leave `config` out."
        )
    return (
        config.environment(env)
        .env_runners(rollout_fragment_length=rollout_fragment_length)
        .training(
            actor_lr=lr,
            critic_lr=lr,
            gamma=0.99,
            tau=0.005,
            n_step=1,
            critic_loss=critic_loss,
            train_batch_size_per_learner=TD3_BATCH_SIZE,
            training_intensity=float(TD3_BATCH_SIZE),
            num_steps_sampled_before_learning_starts=learning_starts,
            random_timesteps=learning_starts,
            replay_buffer_config={**buffer_settings, "capacity": capacity},
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=list(hiddens), fcnet_activation="relu"
            )
        )
        .reporting(min_sample_timesteps_per_iteration=1000)
    )


def mujoco_td3(env: str = "Hopper-v5", *, replay: str = "uniform", **settings):
    """`td3_config` on a gymnasium v5 MuJoCo env (needs `pip install
    rllib-ners[mujoco]`): a 1M-step buffer and 10k env steps of random actions
    before the first update."""
    return td3_config(env, replay=replay, **settings)


def pendulum_td3(*, replay: str = "uniform", **settings):
    """`td3_config` on Pendulum-v1 (200-step episodes): a 100k-step buffer and
    1000 random steps before learning, unless `settings` say otherwise."""
    settings = {"capacity": 100_000, "learning_starts": 1000, **settings}
    return td3_config("Pendulum-v1", replay=replay, **settings)
