"""RLlib wiring for Atari: env registration, frame stacking, game metrics.

`with_atari(config, "MsPacman")` is the one call that sets up a DQN-family
config (stock `DQNConfig` or `NERSDQNConfig`) for Atari the way this package
intends:

* env `"rllib_ners.atari"` (registered with Tune when `rllib_ners` is imported)
  with `env_config={"game": ..., **training settings}`; evaluation runs whole
  games with unclipped rewards (`episodic_life=False, clip_rewards=False`);
* acting: RLlib's `FrameStackingEnvToModule(num_frames=k)`, so the RLModule sees
  `(84, 84, k)` stacks, and `episode_lookback_horizon >= k - 1`. RLlib's default
  horizon of 1 is a trap: when a rollout fragment ends mid-episode, the next
  chunk keeps only one past frame, and the connector zero-fills the rest of the
  stack in the middle of the episode;
* learning: the replay buffer stores each frame once and rebuilds the same
  stacks (`replay_buffer_config["frame_stack"] = k`). RLlib's
  `FrameStackingLearner` is not used: it crashes on 1-step replay samples;
* metrics: `AtariGameMetricsCallback` logs the true game score (summed
  unclipped rewards over all lives) as `env_runners/game_return_mean`, since
  RLlib's `episode_return_mean` is then per life and clipped.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils.annotations import override

from rllib_ners.env import ATARI_ENV_NAME
from rllib_ners.env.atari import (
    ATARI_DEFAULTS,
    GAME_LENGTH_KEY,
    GAME_RETURN_KEY,
    unknown_atari_game_error,
)
from rllib_ners.env.frame_stacking import FrameStackingConnector

# Keys under `result["env_runners"]` (and `result["evaluation"]["env_runners"]`).
GAME_RETURN_MEAN = "game_return_mean"
GAME_RETURN_MAX = "game_return_max"
GAME_LENGTH_MEAN = "game_length_mean"
NUM_GAMES_LIFETIME = "num_games_lifetime"

EVAL_ENV_SETTINGS = {"episodic_life": False, "clip_rewards": False}


def register_atari_env() -> None:
    """Registers `make_atari_env` with Tune as `"rllib_ners.atari"`."""
    from ray.tune.registry import register_env

    from rllib_ners.env.atari import make_atari_env

    register_env(ATARI_ENV_NAME, make_atari_env)


class AtariGameMetricsCallback(RLlibCallback):
    """Logs whole-game scores reported by `DeepMindAtari` (see the module doc).

    A game ends on the step whose info carries `game_return`; training episodes
    that end with a lost life carry none and are skipped.
    """

    @override(RLlibCallback)
    def on_episode_end(
        self, *, episode, env_runner=None, metrics_logger=None, **kwargs
    ) -> None:
        if metrics_logger is None:
            return
        info = episode.get_infos(-1)
        if not isinstance(info, dict) or GAME_RETURN_KEY not in info:
            return
        window = getattr(
            getattr(env_runner, "config", None),
            "metrics_num_episodes_for_smoothing",
            100,
        )
        game_return = float(info[GAME_RETURN_KEY])
        metrics_logger.log_value(GAME_RETURN_MEAN, game_return, window=window)
        metrics_logger.log_value(
            GAME_RETURN_MAX, game_return, reduce="max", window=window
        )
        metrics_logger.log_value(
            GAME_LENGTH_MEAN, float(info[GAME_LENGTH_KEY]), window=window
        )
        metrics_logger.log_value(NUM_GAMES_LIFETIME, 1, reduce="lifetime_sum")


def _with_callback(config, callback_class) -> list:
    current = config.callbacks_class
    if isinstance(current, (list, tuple)):
        classes = list(current)
    elif current is None or current is RLlibCallback:
        classes = []
    else:
        classes = [current]
    if callback_class not in classes:
        classes.append(callback_class)
    return classes


def with_atari(
    config,
    game: str,
    *,
    frame_stack: int = 4,
    env_config: Optional[Dict[str, Any]] = None,
    evaluation_env_config: Optional[Dict[str, Any]] = None,
):
    """Sets up `config` (a DQN-family config or an `ACERConfig`) for an
    Atari game; returns it.

    Args:
        config: A `DQNConfig` / `RainbowDQNConfig` / `NERSDQNConfig` or an
            `ACERConfig` whose replay buffer is one of this package's
            (`frame_stack` is their setting).
        game: "MsPacman", "Pong", "ALE/Breakout-v5", ...
        frame_stack: Frames per observation for acting and learning.
        env_config: Overrides of the training env settings (`ATARI_DEFAULTS`).
        evaluation_env_config: Overrides of the evaluation env settings; by
            default whole games with unclipped rewards.
    """
    if isinstance(frame_stack, bool) or int(frame_stack) != frame_stack:
        raise ValueError(f"`frame_stack` must be an integer >= 1, got {frame_stack!r}.")
    frame_stack = int(frame_stack)
    if frame_stack < 1:
        raise ValueError(f"`frame_stack` must be an integer >= 1, got {frame_stack}.")
    unknown_game = unknown_atari_game_error(game)
    if unknown_game is not None:
        raise ValueError(f"game={game!r}: {unknown_game}.")
    train_env = {"game": game, **(env_config or {})}
    eval_env = {**train_env, **EVAL_ENV_SETTINGS, **(evaluation_env_config or {})}
    for settings in (train_env, eval_env):
        unknown = set(settings) - set(ATARI_DEFAULTS)
        if unknown:
            raise ValueError(
                f"Unknown Atari env_config keys {sorted(unknown)}; known ones are "
                f"{sorted(ATARI_DEFAULTS)}."
            )
    buffer_config = dict(config.replay_buffer_config or {})
    buffer_config["frame_stack"] = frame_stack
    evaluation_config = dict(config.evaluation_config or {})
    evaluation_config["env_config"] = eval_env
    # Registered again here: Tune forgets registrations at ray.shutdown(), and
    # an EnvRunner built without Ray afterwards would not find the env.
    register_atari_env()
    config.environment(ATARI_ENV_NAME, env_config=train_env)
    if frame_stack > 1:
        config.env_runners(
            env_to_module_connector=FrameStackingConnector(frame_stack),
            episode_lookback_horizon=max(
                config.episode_lookback_horizon, frame_stack - 1
            ),
        )
    return (
        config.training(replay_buffer_config=buffer_config)
        .evaluation(evaluation_config=evaluation_config)
        .callbacks(_with_callback(config, AtariGameMetricsCallback))
    )
