"""Atari games with DeepMind preprocessing, as RLlib's new API stack needs them.

`make_atari_env(env_config)` builds `ALE/<Game>-v5` from the ROMs bundled with
`ale-py` (nothing is downloaded) with sticky actions off and frame skipping off in
the emulator (`frameskip=1`, `repeat_action_probability=0`), and wraps it in
`DeepMindAtari`, which does the rest of the preprocessing of Mnih et al. (2015)
as data-efficient Rainbow (van Hasselt et al., 2019) uses it:

* each agent step repeats the action for `frame_skip` (4) emulator frames and
  returns the pixel-wise max of the last two (Atari sprites flicker);
* frames are grayscale, resized to `screen_size` x `screen_size` (84) with
  area interpolation, `uint8`, shape `(84, 84, 1)` - one frame per step;
  stacking the last 4 frames is left to RLlib's `FrameStackingEnvToModule` for
  acting and to our replay buffer (`frame_stack=4`) for learning, so every frame
  is stored once;
* a full reset takes 1..`noop_max` (30) random no-op frames;
* with `episodic_life` (training), losing a life ends the RLlib episode as
  `terminated` (the value of the next state is not bootstrapped) and the next
  `reset()` continues the same game with one no-op step; without it
  (evaluation), episodes are whole games;
* with `clip_rewards` (training) rewards are their sign.

Because training episodes are lives with clipped rewards, RLlib's
`episode_return_mean` is not the game score. The wrapper therefore reports the
true game in the info dict of the step that ends it: `game_return` (the sum of
*unclipped* rewards over all lives) and `game_length` (agent steps). A step that
ends a life but not the game carries `life_lost=True` instead. Other steps
carry an empty info dict, so that the replay buffer stores nothing per step.

Ray-free on purpose: the RLlib side (Tune registration, frame stacking, the
metrics callback) lives in `rllib_ners.env.atari_rllib`.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Dict, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np

from rllib_ners.utils.episode_info import GAME_RETURN_KEY, LIFE_LOST_KEY
from rllib_ners.utils.spaces import gymnasium_id_error

__all__ = [
    "ATARI_DEFAULTS",
    "DeepMindAtari",
    "GAME_LENGTH_KEY",
    "GAME_RETURN_KEY",
    "LIFE_LOST_KEY",
    "ale_env_id",
    "make_atari_env",
]

# Info keys set by `DeepMindAtari` (see the module docstring); the two that the
# replay buffer reads live in `rllib_ners.utils.episode_info`.
GAME_LENGTH_KEY = "game_length"

# `env_config` keys of `make_atari_env` and their defaults (training settings).
ATARI_DEFAULTS: Dict[str, Any] = {
    "game": None,
    "frame_skip": 4,
    "screen_size": 84,
    "noop_max": 30,
    "episodic_life": True,
    "clip_rewards": True,
    # Emulator frames per game (Machado et al. 2018: 30 minutes at 60 fps).
    "max_episode_frames": 108_000,
    # gymnasium's render mode ("rgb_array": the full-colour screen), for
    # `rllib-ners evaluate --video`; the observations stay the same.
    "render_mode": None,
}


def ale_env_id(game: str) -> str:
    """`"MsPacman"`, `"ms_pacman"` or `"ALE/MsPacman-v5"` -> `"ALE/MsPacman-v5"`."""
    if not isinstance(game, str) or not game:
        raise ValueError(
            f"env_config['game'] must name an Atari game, e.g. 'MsPacman' or "
            f"'ALE/MsPacman-v5', got {game!r}."
        )
    if game.startswith("ALE/"):
        return game
    if "_" in game or game.islower():
        game = "".join(part.capitalize() for part in game.split("_"))
    return f"ALE/{game}-v5"


def unknown_atari_game_error(game: str) -> Optional[str]:
    """Why `game` names no Atari game of ale-py's, or None (also where ale-py
    is not installed: `make_atari_env` says how to install it)."""
    env_id = ale_env_id(game)
    if importlib.util.find_spec("ale_py") is None:
        return None
    reason = gymnasium_id_error(env_id)
    if reason is None:
        return None
    return (
        f"no Atari game {env_id!r} in ale-py ({reason}); name one as 'MsPacman', "
        f"'ms_pacman' or 'ALE/MsPacman-v5'"
    )


class DeepMindAtari(gym.Wrapper):
    """DeepMind Atari preprocessing in one wrapper (see the module docstring).

    Wraps an env that steps *one* emulator frame per `step()` and returns
    grayscale `(H, W)` uint8 frames with `info["lives"]`, i.e. `ALE/<Game>-v5`
    made with `frameskip=1, obs_type="grayscale"`. One wrapper instead of a
    chain keeps the per-step Python overhead low.

    Args:
        env: The single-frame grayscale env.
        frame_skip: Emulator frames per agent step; the observation is the max
            over the last two of them.
        screen_size: Side of the square output frame.
        noop_max: A full reset takes a random number of no-op frames in
            `[1, noop_max]`; 0 disables no-op starts.
        episodic_life: End an episode (terminated) when a life is lost; the next
            reset continues the game.
        clip_rewards: Return `sign(reward)`; the info dict of the game's last step
            still reports the unclipped game return.
        noop_action: The action id of NOOP.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        frame_skip: int = 4,
        screen_size: int = 84,
        noop_max: int = 30,
        episodic_life: bool = True,
        clip_rewards: bool = True,
        noop_action: int = 0,
    ):
        super().__init__(env)
        for name, value, low in (
            ("frame_skip", frame_skip, 1),
            ("screen_size", screen_size, 1),
            ("noop_max", noop_max, 0),
        ):
            if isinstance(value, bool) or int(value) != value or value < low:
                raise ValueError(
                    f"env_config['{name}'] must be an integer >= {low}, got {value!r}."
                )
        frame_shape = env.observation_space.shape
        if len(frame_shape) != 2:
            raise ValueError(
                f"DeepMindAtari needs single grayscale frames of shape (H, W), got "
                f"an observation space of shape {frame_shape}: make the ALE env with "
                f"obs_type='grayscale'."
            )
        self.frame_skip = int(frame_skip)
        self.screen_size = int(screen_size)
        self.noop_max = int(noop_max)
        self.episodic_life = bool(episodic_life)
        self.clip_rewards = bool(clip_rewards)
        self.noop_action = int(noop_action)
        self.observation_space = gym.spaces.Box(
            0, 255, (self.screen_size, self.screen_size, 1), dtype=np.uint8
        )
        self._lives = 0
        self._game_over = True
        self._game_return = 0.0
        self._game_length = 0

    # ------------------------------------------------------------- helpers
    def _resize(self, frame: np.ndarray) -> np.ndarray:
        import cv2

        if frame.shape != (self.screen_size, self.screen_size):
            frame = cv2.resize(
                frame,
                (self.screen_size, self.screen_size),
                interpolation=cv2.INTER_AREA,
            )
        return frame.reshape(self.screen_size, self.screen_size, 1)

    def _repeat(self, action) -> Tuple[np.ndarray, float, bool, bool, dict]:
        """Steps `frame_skip` frames; returns the max of the last two frames and
        the summed reward. Stops early if the game ends."""
        total = 0.0
        terminated = truncated = False
        info: dict = {}
        previous = latest = None
        for _ in range(self.frame_skip):
            frame, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            previous, latest = latest, frame
            if terminated or truncated:
                break
        pooled = latest if previous is None else np.maximum(previous, latest)
        return pooled, total, terminated, truncated, info

    # ----------------------------------------------------------------- API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if not self._game_over and seed is None:
            # A life was lost: continue the game with one no-op agent step
            # (DeepMind's episodic-life reset) instead of restarting it.
            pooled, reward, terminated, truncated, info = self._repeat(self.noop_action)
            self._game_return += reward
            self._game_length += 1
            if not (terminated or truncated):
                self._lives = int(info.get("lives", self._lives))
                return self._resize(pooled), {}
        frame, info = self.env.reset(seed=seed, options=options)
        if self.noop_max > 0:
            num_noops = int(self.np_random.integers(1, self.noop_max + 1))
            for _ in range(num_noops):
                frame, _, terminated, truncated, info = self.env.step(self.noop_action)
                if terminated or truncated:
                    frame, info = self.env.reset()
        self._lives = int(info.get("lives", 0))
        self._game_over = False
        self._game_return = 0.0
        self._game_length = 0
        return self._resize(frame), {}

    def step(self, action):
        pooled, reward, terminated, truncated, info = self._repeat(action)
        self._game_return += reward
        self._game_length += 1
        out_info: Dict[str, Any] = {}
        lives = int(info.get("lives", self._lives))
        if terminated or truncated:
            self._game_over = True
            out_info[GAME_RETURN_KEY] = self._game_return
            out_info[GAME_LENGTH_KEY] = self._game_length
        elif self.episodic_life and 0 < lives < self._lives:
            terminated = True
            out_info[LIFE_LOST_KEY] = True
        self._lives = lives
        if self.clip_rewards:
            reward = float(np.sign(reward))
        return self._resize(pooled), reward, terminated, truncated, out_info


def _settings(env_config: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    values = dict(env_config or {})
    unknown = set(values) - set(ATARI_DEFAULTS)
    if unknown:
        raise ValueError(
            f"Unknown Atari env_config keys {sorted(unknown)}; known ones are "
            f"{sorted(ATARI_DEFAULTS)}."
        )
    settings = dict(ATARI_DEFAULTS, **values)
    if settings["game"] is None:
        raise ValueError(
            "The Atari env needs env_config={'game': ...}, e.g. "
            "config.environment('rllib_ners.atari', env_config={'game': 'MsPacman'})."
        )
    return settings


def make_atari_env(env_config: Optional[Mapping[str, Any]] = None) -> gym.Env:
    """The env creator registered with Tune as `"rllib_ners.atari"`.

    `env_config` keys (defaults are the training settings): `game` (required:
    "MsPacman", "Pong", "ALE/Breakout-v5"...), `frame_skip` (4), `screen_size`
    (84), `noop_max` (30), `episodic_life` (True; set False for evaluation),
    `clip_rewards` (True; False for evaluation), `max_episode_frames` (108000),
    `render_mode` (None).
    RLlib's `EnvContext` fields (worker index etc.) are ignored.
    """
    import ale_py

    settings = _settings(env_config)
    gym.register_envs(ale_py)
    env = gym.make(
        ale_env_id(settings["game"]),
        frameskip=1,
        repeat_action_probability=0.0,
        full_action_space=False,
        obs_type="grayscale",
        max_num_frames_per_episode=int(settings["max_episode_frames"]),
        render_mode=settings["render_mode"],
    )
    return DeepMindAtari(
        env,
        frame_skip=settings["frame_skip"],
        screen_size=settings["screen_size"],
        noop_max=settings["noop_max"],
        episodic_life=settings["episodic_life"],
        clip_rewards=settings["clip_rewards"],
    )
