"""NERS sampler presets: the reference code's semantics as one call.

`ners_reference(config)` makes a NERS config (NERS-DQN, or NERS-SAC, TD3/DDPG or
ACER with the NERS buffer) sample the way the NERS reference code (youngmin0oh/NERS, on
Kaixhin/Rainbow) does, as closely as RLlib allows: "the paper's NERS" is then
one setting.

Reference code -> setting here:
- priority `sigma ** 0.5` -> `parameterization="sigmoid"`, buffer `alpha=0.5`;
- loss `-mean(log(sigma + 1e-6) * r_re)` -> `objective="log_score"`,
  `log_eps=1e-6`;
- `r_re = eval_return - first_eval_return` -> `baseline="first"`;
- 5 evaluation episodes every 1000 env steps -> `replay_reward_mode=
  "eval_return"`, `update_interval_env_steps=1000`, `evaluation_duration=5`
  episodes (their env steps are counted and reported in
  `ners/num_eval_env_steps_lifetime`; the reference leaves them out of its
  budget);
- evaluation with epsilon 0.001 -> RLlib evaluation with `explore=False`
  (greedy; noisy nets act with their mean weights);
- I_train: 32 draws with replacement from the list of replayed indices ->
  `train_draw="replay_multiset"`, `train_size=32`;
- raw features into tanh -> `feature_normalization="none"` (where that setting
  exists).

Differences that remain: the reference's evaluation runs in a separate env
outside the step budget; here the evaluation episodes run on RLlib's evaluation
EnvRunner and are reported. The reference's timestep feature saturates tanh (a
known defect); ours is divided by `timestep_scale` first.
"""

from __future__ import annotations

import dataclasses

from rllib_ners.ners.settings import NERSSettings

# RLlib's own evaluation schedule must not fire on top of the sampler's: its
# interval counts training iterations.
_NEVER = 10**9

REFERENCE_SETTINGS = {
    "objective": "log_score",
    "baseline": "first",
    "parameterization": "sigmoid",
    "train_draw": "replay_multiset",
    "train_size": 32,
    "log_eps": 1e-6,
    "replay_reward_mode": "eval_return",
    "update_interval_env_steps": 1000,
    "linear_skip": False,
}
REFERENCE_ALPHA = 0.5
REFERENCE_EVAL_EPISODES = 5


# The sampler's variants the oracle (`tests/sampler_oracle.py`) and
# `tests/sampler_variants.py` compare, by name: the paper's semantics
# and each objective x parameterization, the default among them.
SAMPLER_VARIANTS = {
    # The reference preset's sampler settings (REFERENCE_SETTINGS) without its
    # evaluation schedule, which the oracle's replay reward replaces.
    "reference (log_score, sigmoid, first)": {
        **{
            key: value
            for key, value in REFERENCE_SETTINGS.items()
            if key not in ("replay_reward_mode", "update_interval_env_steps")
        },
        "feature_normalization": "none",
    },
    "log_score, sigmoid, ema": {
        "objective": "log_score",
        "parameterization": "sigmoid",
        "baseline": "ema",
    },
    "log_prob, sigmoid, ema": {
        "objective": "log_prob",
        "parameterization": "sigmoid",
        "baseline": "ema",
    },
    "log_score, per_residual, ema": {
        "objective": "log_score",
        "parameterization": "per_residual",
        "baseline": "ema",
    },
    "log_prob, per_residual, ema (default)": {
        "objective": "log_prob",
        "parameterization": "per_residual",
        "baseline": "ema",
    },
    # The default without the bound on its learned log-correction.
    "log_prob, per_residual, ema, unbounded": {
        "objective": "log_prob",
        "parameterization": "per_residual",
        "baseline": "ema",
        "max_log_correction": None,
    },
}


def ners_reference(config, *, evaluation_episodes: int = REFERENCE_EVAL_EPISODES):
    """Applies the reference code's sampler semantics (module doc) to `config`.

    Keeps every other setting of `config` (network, n-step, buffer capacity and
    beta, ...); sets the NERS settings, the buffer's priority exponent 0.5 and a
    local evaluation EnvRunner that the sampler update drives.
    """
    if not hasattr(config, "ners"):
        raise ValueError(
            f"ners_reference takes a NERS config (NERSDQNConfig, NERSSACConfig, "
            f"ACERConfig, TD3Config), got {type(config).__name__}."
        )
    if (
        isinstance(evaluation_episodes, bool)
        or not isinstance(evaluation_episodes, int)
        or evaluation_episodes < 1
    ):
        raise ValueError(
            f"`evaluation_episodes` (the episodes of each replay-reward "
            f"evaluation) must be an integer >= 1, got {evaluation_episodes!r}."
        )
    settings = dict(REFERENCE_SETTINGS)
    fields = {field.name for field in dataclasses.fields(NERSSettings)}
    if "feature_normalization" in fields:
        settings["feature_normalization"] = "none"
    return (
        config.ners(**settings)
        .training(replay_buffer_config={"alpha": REFERENCE_ALPHA})
        .evaluation(
            evaluation_num_env_runners=0,
            evaluation_interval=_NEVER,
            evaluation_duration=evaluation_episodes,
            evaluation_duration_unit="episodes",
            evaluation_config={"explore": False},
        )
    )
