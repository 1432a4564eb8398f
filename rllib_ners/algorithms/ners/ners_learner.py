"""Metric keys and the settings lookup shared by every NERS algorithm and Learner.

RLlib keeps an algorithm's metric keys in its `<algo>_learner.py`; these belong to
the NERS sampler, whichever algorithm runs it (NERS-DQN, ACER). All NERS metrics
appear in the result dict under `result["ners"]`.
"""

from __future__ import annotations

from typing import Any

from rllib_ners.ners import diagnostics
from rllib_ners.ners.settings import NERSSettings

NERS_RESULTS = "ners"
NERS_REPLAY_REWARD_KEY = "replay_reward"
NERS_SAMPLER_LOSS_KEY = "sampler_loss"
NERS_SCORE_MEAN_KEY = "score_mean"
NERS_SAMPLED_SET_SIZE_KEY = "sampled_set_size"
NERS_NUM_SAMPLER_UPDATES_KEY = "num_sampler_updates_lifetime"
NERS_WINDOW_RETURN_KEY = "window_return_mean"
NERS_EVAL_ENV_STEPS_KEY = "num_eval_env_steps_lifetime"
# Sampler diagnostics, every iteration (see `rllib_ners.ners.diagnostics`).
NERS_PRIORITY_ENTROPY_NORMALIZED_KEY = diagnostics.PRIORITY_ENTROPY_NORMALIZED
NERS_EFFECTIVE_SAMPLE_FRACTION_KEY = diagnostics.EFFECTIVE_SAMPLE_FRACTION
NERS_SCORED_PRIORITY_MAX_OVER_MIN_KEY = diagnostics.SCORED_PRIORITY_MAX_OVER_MIN
NERS_SCORED_PRIORITY_CV_KEY = diagnostics.SCORED_PRIORITY_CV
NERS_UNSCORED_MASS_KEY = diagnostics.UNSCORED_MASS
NERS_PRIORITY_TD_SPEARMAN_KEY = diagnostics.PRIORITY_TD_SPEARMAN
NERS_PROBE_SCORE_STD_KEY = diagnostics.PROBE_SCORE_STD
NERS_PROBE_RANK_DRIFT_KEY = diagnostics.PROBE_RANK_DRIFT
NERS_DIAGNOSTICS_KEYS = (
    NERS_PRIORITY_ENTROPY_NORMALIZED_KEY,
    NERS_EFFECTIVE_SAMPLE_FRACTION_KEY,
    NERS_SCORED_PRIORITY_MAX_OVER_MIN_KEY,
    NERS_SCORED_PRIORITY_CV_KEY,
    NERS_UNSCORED_MASS_KEY,
    NERS_PRIORITY_TD_SPEARMAN_KEY,
    NERS_PROBE_SCORE_STD_KEY,
    NERS_PROBE_RANK_DRIFT_KEY,
)

# Where a stock DQNConfig keeps NERS settings (the a-la-carte route).
LEARNER_CONFIG_NERS_KEY = "ners"


def ners_settings_from_config(config: Any) -> NERSSettings:
    """The NERS settings of a `NERSDQNConfig` or of a stock config set up with
    `rllib_ners.enable_ners()` (kept in `learner_config_dict["ners"]`)."""
    values = getattr(config, "ners_config", None)
    if values is None:
        values = (getattr(config, "learner_config_dict", None) or {}).get(
            LEARNER_CONFIG_NERS_KEY, {}
        )
    return NERSSettings.from_dict(values)
