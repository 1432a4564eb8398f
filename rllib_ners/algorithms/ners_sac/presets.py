"""Settings shared by the NERS-SAC tuned examples and benchmarks.

`sac_config()` is SAC's usual continuous-control setting (Haarnoja et al. 2018;
Stable-Baselines3's and CleanRL's defaults) with NERS, prioritised or uniform
replay (PER unless `replay` says otherwise: `RECOMMENDED_REPLAY`);
`mujoco_sac()` and `pendulum_sac()` fill in the env and the warm-up.
Everything is a plain `NERSSACConfig`, so a study can also build NERS-SAC from a
dict: `NERSSACConfig().update_from_dict({...})`.
"""

from __future__ import annotations

import dataclasses

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    NERS_BUFFER_TYPE,
)
from rllib_ners.algorithms.common.config.sampler_presets import (
    RELO_ALPHA,
    laber_buffer_settings,
    relo_buffer_settings,
)

# Replay arms of the SAC experiments: buffer type and priority exponent.
SAC_REPLAYS = {
    "ners": (NERS_BUFFER_TYPE, 0.6),
    "per": (FAST_BUFFER_TYPE, 0.6),
    "uniform": (FAST_BUFFER_TYPE, 0.0),
    "lap": (FAST_BUFFER_TYPE, 0.4),
    "pal": (FAST_BUFFER_TYPE, 0.0),
    "relo": (FAST_BUFFER_TYPE, RELO_ALPHA),
    "laber": (FAST_BUFFER_TYPE, 0.0),
}
# ReLo and LaBER: the buffer's sampler settings (`sampler_presets`); ReLo's
# priority map "clip" for the critics' squared error, as the authors' SAC.
SAMPLER_SETTINGS_OF_REPLAY = {
    "relo": relo_buffer_settings("clip"),
    "laber": laber_buffer_settings(),
}
# LAP and PAL (Fujimoto et al. 2020): the buffer's priority floor and the
# critics' loss; LAP samples without importance weights.
LAP_MIN_PRIORITY = 1.0
CRITIC_LOSS_OF_REPLAY = {"lap": "huber", "pal": "pal"}

SAC_BATCH_SIZE = 256

# The presets' replay when none is given: what this package's pre-registered
# studies recommend for SAC (README, Results), not NERS, which helped in none.
RECOMMENDED_REPLAY = "per"


def sac_config(
    env: str,
    *,
    replay: str = RECOMMENDED_REPLAY,
    capacity: int = 1_000_000,
    learning_starts: int = 10_000,
    lr: float = 3e-4,
    hiddens=(256, 256),
    rollout_fragment_length: int = 1,
    greedy_action=None,
    config=None,
):
    """SAC's usual settings on `env`: twin critics and a squashed Gaussian
    policy, each a ReLU MLP with `hiddens` (256, 256) (with `NERSSACConfig`,
    `SACTorchRLModule`'s critics on the concatenated `[s, a]`; a stock
    `SACConfig` keeps RLlib's two-stream critics); Adam with `lr`
    (3e-4) for actor, critics and temperature; batch 256; gamma 0.99; Polyak
    tau 0.005 after every update; 1-step targets; learned temperature from
    alpha 1 towards the target entropy -dim(A); the critics regress on the
    squared error (`critic_loss="mse"`, the SAC paper's; a stock `SACConfig`
    keeps RLlib's Huber loss); `learning_starts` env steps before the first
    update, then one update per env step.

    The EnvRunner acts `rollout_fragment_length` steps between updates (1: a
    fresh policy every step), then that many updates run (`training_intensity`
    = replayed / sampled env steps = the batch size).

    `replay`: "per" (the default, `RECOMMENDED_REPLAY`: our prioritised
    buffer, alpha 0.6, beta 0.4, priority = mean |TD error| of the twin
    critics), "ners" (NERS buffer, alpha 0.6, beta 0.4, the `.ners()`
    defaults: the NERS paper's setting), "uniform", "lap"
    (LAP: priority max(|delta|, 1)^0.4, no importance weights, the critics on
    the Huber loss), "pal" (PAL: uniform replay, PAL's critic loss), "relo"
    (ReLo: PER's alpha 0.5 and beta 0.4 with the reducible loss as the
    priority, max(ReLo, 0) + 1e-5) or "laber" (LaBER: a uniform batch of
    4 x 256, sub-sampled to 256 per critic with LaBER-mean weights).
    `greedy_action`: None (the module's default: the squashed mean) or
    `SACTorchRLModule`'s `model_config["greedy_action"]` ("pre_tanh_mean":
    RLlib 2.60's greedy action, which the studies' SAC runs were evaluated
    with).
    `config`: the config to fill in (default `NERSSACConfig()`; a stock
    `SACConfig` takes the same settings, for comparisons, but its `validate()`
    refuses this package's buffer types: set its `replay_buffer_config` to
    one of RLlib's afterwards, or put ours in with
    `rllib_ners.with_replay_buffer`).
    """
    from rllib_ners.algorithms.ners_sac import NERSSACConfig

    if replay not in SAC_REPLAYS:
        raise ValueError(
            f"`replay` must be one of {sorted(SAC_REPLAYS)}, got replay={replay!r}."
        )
    buffer_type, alpha = SAC_REPLAYS[replay]
    config = (
        (NERSSACConfig() if config is None else config)
        .environment(env)
        .env_runners(rollout_fragment_length=rollout_fragment_length)
        .training(
            actor_lr=lr,
            critic_lr=lr,
            alpha_lr=lr,
            gamma=0.99,
            tau=0.005,
            twin_q=True,
            n_step=1,
            initial_alpha=1.0,
            target_entropy="auto",
            train_batch_size_per_learner=SAC_BATCH_SIZE,
            training_intensity=float(SAC_BATCH_SIZE),
            num_steps_sampled_before_learning_starts=learning_starts,
            replay_buffer_config=_buffer_config(replay, buffer_type, alpha, capacity),
        )
        .rl_module(model_config=_model_config(hiddens, greedy_action))
        .reporting(min_sample_timesteps_per_iteration=1000)
    )
    if isinstance(config, NERSSACConfig):
        # The SAC paper's critic loss (and SB3's and CleanRL's); RLlib's SAC
        # regresses with a Huber loss, whose gradient MuJoCo's TD errors exceed.
        # LAP and PAL come with their own.
        config.training(critic_loss=CRITIC_LOSS_OF_REPLAY.get(replay, "mse"))
    elif replay in CRITIC_LOSS_OF_REPLAY:
        raise ValueError(
            f"replay={replay!r} needs NERSSACConfig's critic losses; a stock "
            f"SACConfig has RLlib's Huber loss only."
        )
    elif replay in SAMPLER_SETTINGS_OF_REPLAY:
        raise ValueError(
            f"replay={replay!r} needs a Learner that computes it; a stock "
            f"SACConfig's does not. Pass config=NERSSACConfig(), or call "
            f"rllib_ners.enable_replay(config, {replay!r}) on the stock config."
        )
    # replay="ners" keeps the `.ners()` defaults (see NERSSettings).
    return config


def _buffer_config(replay: str, buffer_type: str, alpha: float, capacity: int):
    """PER's beta 0.4 with priorities, 0 without; LAP's floor and no weights;
    ReLo's and LaBER's sampler settings."""
    if replay == "lap":
        return {
            "type": buffer_type,
            "capacity": capacity,
            "alpha": alpha,
            "beta": 0.0,
            "min_priority": LAP_MIN_PRIORITY,
        }
    return {
        "type": buffer_type,
        "capacity": capacity,
        "alpha": alpha,
        "beta": 0.4 if alpha > 0 else 0.0,
        **SAMPLER_SETTINGS_OF_REPLAY.get(replay, {}),
    }


def _model_config(hiddens, greedy_action):
    """ReLU MLPs of `hiddens`, no head layers; with `greedy_action`, that
    `model_config` key too."""
    model_config = DefaultModelConfig(
        fcnet_hiddens=list(hiddens), fcnet_activation="relu", head_fcnet_hiddens=[]
    )
    if greedy_action is None:
        return model_config
    return {**dataclasses.asdict(model_config), "greedy_action": greedy_action}


def mujoco_sac(env: str = "Hopper-v5", *, replay: str = RECOMMENDED_REPLAY, **settings):
    """`sac_config` on a gymnasium v5 MuJoCo env (needs `pip install
    rllib-ners[mujoco]`): a 1M-step buffer and 10k env steps of the initial
    policy before the first update (`learning_starts`)."""
    return sac_config(env, replay=replay, **settings)


def pendulum_sac(*, replay: str = RECOMMENDED_REPLAY, **settings):
    """`sac_config` on Pendulum-v1 (200-step episodes): a 100k-step buffer and
    5000 steps before learning, unless `settings` say otherwise."""
    settings = {"capacity": 100_000, "learning_starts": 5000, **settings}
    return sac_config("Pendulum-v1", replay=replay, **settings)
