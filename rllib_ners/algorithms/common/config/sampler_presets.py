"""The ReLo and LaBER replay settings, in one place for every user of them.

`replay_buffer_config["sampler"]` of `rllib_ners.FastPrioritizedEpisodeReplayBuffer`
picks the replay method: "priority" (uniform, PER or LAP, by `alpha` and the
priority floor), "relo" (ReLo, Sujit et al., NeurIPS 2023) or "laber" (LaBER,
Lahire et al., ICML 2022). The presets (`mujoco_sac`, `mujoco_td3`,
`atari_data_efficient_rainbow`, ...), `rllib_ners.enable_replay` and the
benchmarks take the methods' settings from here, so that "relo" and "laber"
mean the same wherever a user meets them (but `enable_replay` keeps a
config's own PER alpha and beta for ReLo); the study's arms write theirs out
(a later change here must not change a pre-registered arm) and a test checks
that they agree.

- ReLo: PER with the reducible loss as the priority; alpha 0.5 (the authors'
  SAC and Atari Rainbow settings), beta as the caller's PER (0.4, annealed to
  1 where the preset anneals). The priority map follows the loss: "clip"
  (max(ReLo, 0) + 1e-5; SAC, TD3 and scalar DQN, the authors' SAC and MinAtar
  code) or "exp" (ReLo + 1 if ReLo >= 0 else exp(ReLo); C51 Rainbow, the
  authors' Atari code, whose cross-entropy ReLo is often negative).
- LaBER: a uniform large batch of m = 4 times the batch (the paper's "LaBER-mean
  with m = 4"), sub-sampled by the Learner with LaBER-mean weights; no stored
  priorities, so alpha 0 and beta 0 (the sub-sample's own weights replace
  PER's importance weights).
"""

from __future__ import annotations

from typing import Tuple

from rllib_ners.replay_buffers.laber_sampler import DEFAULT_LABER_M
from rllib_ners.replay_buffers.relo_sampler import (
    DEFAULT_RELO_EPSILON,
    RELO_TRANSFORMS,
)
from rllib_ners.replay_buffers.sampler_choice import (  # noqa: F401 (re-exported)
    LABER,
    METHOD_SETTINGS,
    PRIORITY,
    RELO,
    SAMPLER_CLASSES,
)

# The replay methods a user can switch a config to (`enable_replay`).
REPLAY_METHODS: Tuple[str, ...] = (RELO, LABER)

RELO_ALPHA = 0.5
RELO_EPSILON = DEFAULT_RELO_EPSILON
LABER_M = DEFAULT_LABER_M
LABER_WEIGHTING = "mean"


def relo_buffer_settings(transform: str = "clip") -> dict:
    """ReLo's `replay_buffer_config` entries (beyond type, capacity and beta):
    alpha 0.5, the priority map `transform` and the epsilon 1e-5 that "clip"
    adds (written for "exp" too, which has none, so that every ReLo config
    names the same settings)."""
    if transform not in RELO_TRANSFORMS:
        raise ValueError(
            f"relo_transform must be one of {RELO_TRANSFORMS}, got {transform!r}."
        )
    return {
        "sampler": RELO,
        "alpha": RELO_ALPHA,
        "relo_transform": transform,
        "relo_epsilon": RELO_EPSILON,
    }


def laber_buffer_settings() -> dict:
    """LaBER's `replay_buffer_config` entries (beyond type and capacity): m 4,
    LaBER-mean weights, alpha 0 and beta 0 (a uniform large batch)."""
    return {
        "sampler": LABER,
        "alpha": 0.0,
        "beta": 0.0,
        "laber_m": LABER_M,
        "laber_weights": LABER_WEIGHTING,
    }


def relo_transform_for(config) -> str:
    """ReLo's priority map for `config`'s loss: "exp" for a distributional
    (C51) DQN, as the authors' Atari Rainbow maps its cross-entropy ReLo
    (often negative: the target network can fit the projected target better
    than the online one), "clip" for every other loss (the authors' SAC and
    MinAtar DQN)."""
    from ray.rllib.algorithms.dqn import DQNConfig

    if isinstance(config, DQNConfig) and (config.num_atoms or 1) > 1:
        return "exp"
    return "clip"
