"""`rllib-ners evaluate`: greedy episodes of a checkpoint, optionally on video."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

from rllib_ners.cli.common import (
    CLIError,
    last_line,
    module_available,
    one_line,
    remove_if_empty,
)
from rllib_ners.cli.overrides import check_env
from rllib_ners.cli.session import ray_session
from rllib_ners.env.greedy_action import greedy_action
from rllib_ners.utils.log_noise import silence_known_noise

# Frames per second of a video of an env whose metadata names no `render_fps`.
DEFAULT_VIDEO_FPS = 30


def _is_checkpoint(path: Path) -> bool:
    return (path / "class_and_ctor_args.pkl").exists() and (
        (path / "algorithm_state.pkl").exists()
        or (path / "algorithm_state.msgpck").exists()
        or (path / "rllib_checkpoint.json").exists()
    )


def find_checkpoint(path: Path) -> Path:
    """`path` itself if it is a checkpoint, else the latest one of its single trial."""
    path = path.expanduser().resolve()
    if not path.exists():
        raise CLIError(f"no such checkpoint: {path}")
    if _is_checkpoint(path):
        return path
    found = [p for p in path.rglob("checkpoint_*") if p.is_dir() and _is_checkpoint(p)]
    if not found:
        raise CLIError(f"no RLlib checkpoint in {path}")
    trials = {p.parent for p in found}
    if len(trials) > 1:
        raise CLIError(
            f"{path} holds checkpoints of {len(trials)} trials; pass one trial "
            "directory or checkpoint"
        )
    return max(found, key=lambda p: (p.name, p.stat().st_mtime))


def _checkpoint_config(checkpoint: Path):
    """The AlgorithmConfig stored in a checkpoint, set up for local evaluation."""
    import pickle

    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    try:
        with open(checkpoint / "class_and_ctor_args.pkl", "rb") as f:
            ctor_info = pickle.load(f)
        state = ctor_info["ctor_args_and_kwargs"][0][0]
        config = (
            state
            if isinstance(state, AlgorithmConfig)
            else AlgorithmConfig.from_state(state)
        )
    except Exception as error:
        raise CLIError(
            f"cannot read the config of checkpoint {checkpoint}: {one_line(error)}"
        ) from None
    return local_evaluation_config(config)


def local_evaluation_config(config):
    """A copy of a checkpoint's `config` set up to play a few greedy episodes
    in this process: one local EnvRunner and a local Learner (no actors), and
    for this package's Atari env the config's evaluation env (`with_atari`'s:
    whole games with the game's own rewards), not the training's lives and
    clipped rewards."""
    from rllib_ners.env import ATARI_ENV_NAME
    from rllib_ners.env.atari_rllib import EVAL_ENV_SETTINGS

    config = config.copy(copy_frozen=False)
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=1)
    config.learners(num_learners=0, num_gpus_per_learner=0)
    config.evaluation(evaluation_interval=None, evaluation_num_env_runners=0)
    if config.env == ATARI_ENV_NAME:
        evaluation_env = (config.evaluation_config or {}).get("env_config")
        config.environment(
            env_config=evaluation_env or {**config.env_config, **EVAL_ENV_SETTINGS}
        )
    return config


# What the writers below write: GIFs with Pillow; with imageio's ffmpeg any of
# these; with OpenCV .mp4 and .avi.
VIDEO_SUFFIXES = (".gif", ".mp4", ".avi", ".mov", ".mkv", ".webm")


def video_writer(path: Path) -> Callable[[List[np.ndarray], float], None]:
    """A function writing RGB frames to `path`, or CLIError if nothing can."""
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise CLIError(
            f"--video {path}: not a video file name; end it in .mp4 or .gif "
            f"(or {', '.join(sorted(set(VIDEO_SUFFIXES) - {'.mp4', '.gif'}))})"
        )
    if suffix == ".gif" and module_available("PIL"):

        def write_gif(frames, fps):
            from PIL import Image

            images = [
                Image.fromarray(np.asarray(frame, dtype=np.uint8)) for frame in frames
            ]
            images[0].save(
                path,
                save_all=True,
                append_images=images[1:],
                duration=max(int(1000 / fps), 1),
                loop=0,
            )

        return write_gif
    if (
        suffix != ".gif"
        and module_available("imageio")
        and module_available("imageio_ffmpeg")
    ):

        def write_imageio(frames, fps):
            import imageio.v2 as imageio

            imageio.mimwrite(
                path, [np.asarray(f, dtype=np.uint8) for f in frames], fps=fps
            )

        return write_imageio
    if suffix in (".mp4", ".avi") and module_available("cv2"):

        def write_cv2(frames, fps):
            import cv2

            height, width = np.asarray(frames[0]).shape[:2]
            fourcc = cv2.VideoWriter_fourcc(*("mp4v" if suffix == ".mp4" else "MJPG"))
            writer = cv2.VideoWriter(str(path), fourcc, float(fps), (width, height))
            if not writer.isOpened():
                raise CLIError(f"OpenCV cannot write {path}")
            try:
                for frame in frames:
                    rgb = np.asarray(frame, dtype=np.uint8)
                    writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            finally:
                writer.release()

        return write_cv2
    raise CLIError(
        f"cannot write video {path}: no video writer available (pip install imageio "
        "imageio-ffmpeg, or name a .gif file)"
    )


def make_render_env(config, render_mode: str):
    """A single env of the checkpoint's config that renders in `render_mode`."""
    env = config.env
    env_config = dict(config.env_config or {})
    from rllib_ners.seam.ray_runtime import registered_env_creator

    try:
        creator = registered_env_creator(env) if isinstance(env, str) else None
        if creator is not None:
            from ray.rllib.env.env_context import EnvContext

            return creator(EnvContext({**env_config, "render_mode": render_mode}, 0))
        if isinstance(env, str):
            import gymnasium as gym

            check_env(env)
            env_id = env.partition(":")[2] if ":" in env else env
            return gym.make(env_id, render_mode=render_mode, **env_config)
        if isinstance(env, type):
            return env({**env_config, "render_mode": render_mode})
    except CLIError:
        raise
    except Exception as error:
        raise CLIError(f"cannot render {env!r}: {one_line(error)}") from None
    raise CLIError(f"cannot render {env!r}: unsupported env specification")


def _rendered_episodes(module, env, episodes, render_mode, seed, config=None):
    returns, lengths, frames = [], [], []
    for episode in range(episodes):
        observation, _ = env.reset(seed=None if seed is None else seed + episode)
        total, steps, done = 0.0, 0, False
        while not done:
            if render_mode == "rgb_array":
                frames.append(env.render())
            observation, reward, terminated, truncated, _ = env.step(
                greedy_action(module, observation, env.action_space, config)
            )
            total += float(reward)
            steps += 1
            done = terminated or truncated
        if render_mode == "rgb_array":
            frames.append(env.render())
        returns.append(total)
        lengths.append(steps)
    return returns, lengths, frames


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise CLIError("--episodes must be at least 1", 2)
    render = _render_mode(args)
    write = video_writer(Path(args.video)) if args.video else None
    checkpoint = find_checkpoint(Path(args.checkpoint))
    config = _checkpoint_config(checkpoint)
    if args.seed is not None:
        config.debugging(seed=args.seed)
    env = _open_render_env(config, render, args.seed) if render else None
    returns, lengths, frames = _greedy_episodes(args, checkpoint, config, env, render)
    for i, (episode_return, length) in enumerate(zip(returns, lengths), 1):
        print(f"episode {i}: return {episode_return:.2f} ({length} steps)")
    values = np.asarray(returns, dtype=float)
    print(
        f"{config.env}: {values.size} greedy episode(s), mean return "
        f"{values.mean():.2f} +/- {values.std():.2f} (std), min {values.min():.2f}, "
        f"max {values.max():.2f}"
    )
    if write is not None:
        _write_video(write, frames, env, Path(args.video))
    return 0


def _render_mode(args: argparse.Namespace) -> Optional[str]:
    """The env's render mode the flags ask for (`--video` records rgb_array
    frames), or None."""
    render = args.render
    if args.video:
        if render == "human":
            raise CLIError("--video records rgb_array frames; drop --render human", 2)
        render = "rgb_array"
    elif render == "rgb_array":
        raise CLIError("--render rgb_array needs --video FILE", 2)
    return render


def _open_render_env(config, render: str, seed: Optional[int]):
    """The rendering env, reset and checked to render a frame."""
    env = make_render_env(config, render)
    try:
        env.reset(seed=seed)
        if render == "rgb_array" and env.render() is None:
            raise CLIError(f"{config.env!r} rendered no rgb_array frame")
    except CLIError:
        raise
    except Exception as error:
        raise CLIError(f"cannot render {config.env!r}: {one_line(error)}") from None
    return env


def _greedy_episodes(args, checkpoint: Path, config, env, render: Optional[str]):
    """Restores the checkpoint and plays `args.episodes` greedy episodes: on the
    rendering `env`, else on the algorithm's own EnvRunner. Returns (returns,
    lengths, frames); closes `env`."""
    from ray.rllib.algorithms.algorithm import Algorithm

    import rllib_ners  # noqa: F401  (NERS classes for unpickling)

    silence_known_noise()  # e.g. "Install gputil" from the restored Trainable
    print(f"Restoring {checkpoint}", flush=True)
    with ray_session(args):
        try:
            algo = Algorithm.from_checkpoint(str(checkpoint), config=config)
        except Exception as error:
            raise CLIError(
                f"cannot restore {checkpoint}: {type(error).__name__}: "
                f"{last_line(error)}"
            ) from None
        try:
            if render:
                return _rendered_episodes(
                    algo.get_module(), env, args.episodes, render, args.seed, config
                )
            episodes = algo.env_runner.sample(
                num_episodes=args.episodes, explore=False
            )[: args.episodes]
            returns = [float(e.get_return()) for e in episodes]
            return returns, [len(e) for e in episodes], []
        finally:
            algo.stop()
            remove_if_empty(getattr(algo, "logdir", None))
            if env is not None:
                env.close()


def _write_video(write, frames: List[np.ndarray], env, video: Path) -> None:
    """Writes the rendered frames at the env's frame rate."""
    if not frames:
        raise CLIError("no frames were rendered")
    metadata = getattr(env, "metadata", None) or {}
    fps = float(metadata.get("render_fps") or DEFAULT_VIDEO_FPS)
    if video.parent and not video.parent.exists():
        video.parent.mkdir(parents=True, exist_ok=True)
    write(frames, fps)
    print(f"wrote {video} ({len(frames)} frames)")
