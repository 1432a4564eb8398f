"""Environments: Atari with DeepMind preprocessing (`rllib_ners.env.atari`) and
its RLlib wiring (`rllib_ners.env.atari_rllib`, imported on demand: Ray-heavy)."""

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
