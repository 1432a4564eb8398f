"""Environments and acting in them: Atari, and the EnvRunner of the fast paths.

Atari:

* `atari`: Atari games with DeepMind preprocessing, as RLlib's new API stack
  needs them (no Ray);
* `atari_rllib`: its RLlib wiring (env registration, game metrics), imported on
  demand: Ray-heavy;
* `frame_stacking`: the env-to-module connector factory of its frame stacking.

The fast EnvRunner:

* `fast_env_runner`: `FastSingleAgentEnvRunner`, RLlib's EnvRunner whose
  sampling loop skips the per-step connector pipelines;
* `sampling_steps`: the steps of its loop that need no EnvRunner;
* `sampling_metrics`: its counters and timers, logged once per `get_metrics()`;
* `acting_graphs`: its exploration pass replayed from a CUDA graph.

Acting greedily:

* `greedy_action`: an RLModule's deterministic action, as the EnvRunner takes it
  to the env (`rllib-ners evaluate` and the study's evaluations).
"""

from rllib_ners.env.atari import (
    GAME_LENGTH_KEY,
    GAME_RETURN_KEY,
    LIFE_LOST_KEY,
    DeepMindAtari,
    make_atari_env,
)

ATARI_ENV_NAME = "rllib_ners.atari"

__all__ = [
    "ATARI_ENV_NAME",
    "DeepMindAtari",
    "GAME_LENGTH_KEY",
    "GAME_RETURN_KEY",
    "LIFE_LOST_KEY",
    "make_atari_env",
]
