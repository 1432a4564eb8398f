"""Helpers the tests share: a tiny image env, small config builders and the
tuned-example runner of the learning tests.

A module of its own, not in a `conftest.py` (which keep only fixtures): the
conftest files of `tests/` and `tests/learning/` are both imported as
`conftest`, so `from conftest import ...` would depend on collection order.
`tests/` is on `sys.path` while pytest runs (it holds the root `conftest.py`),
so tests write `from helpers import TinyBoolImageEnv`.

* `TinyBoolImageEnv`: 10x10x4 bool frames, MinAtar-like.
* `build_small_dqn(config=None, **settings)`: a small CartPole DQN-family config
  (NERS-DQN by default; also stock DQN and Rainbow DQN configs).
* `build_small_acer(replay="uniform", **settings)`: a small CartPole ACER config.
* `build_small_sac(replay="ners", **settings)`: a small Pendulum NERS-SAC config.
* `run_example_as_test(relative_path, *args)`: a tuned example script with
  `--as-test` in a subprocess.

The builders' defaults are the values most tests use; each keyword names the
RLlib setting it changes, so a test shows only how its config differs.
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import ray

from rllib_ners import ACERConfig, NERSDQNConfig, NERSSACConfig

ROOT = Path(__file__).resolve().parents[1]

# TinyBoolImageEnv's frames, fraction of pixels set, and episode length.
TINY_IMAGE_SHAPE = (10, 10, 4)
TINY_IMAGE_DENSITY = 0.2
TINY_EPISODE_STEPS = 12


class TinyBoolImageEnv(gym.Env):
    """10x10x4 bool frames; reward 1 for action 1; episodes of 12 steps."""

    observation_space = gym.spaces.Box(0, 1, TINY_IMAGE_SHAPE, dtype=bool)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config=None):
        self._rng = np.random.default_rng(0)
        self._t = 0

    def _frame(self):
        return self._rng.random(TINY_IMAGE_SHAPE) < TINY_IMAGE_DENSITY

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._frame(), {}

    def step(self, action):
        self._t += 1
        done = self._t >= TINY_EPISODE_STEPS
        return self._frame(), float(action == 1), done, False, {}


def _restart_failed_env_runners(config, restart):
    if not restart:
        return config
    return config.fault_tolerance(
        restart_failed_env_runners=True,
        delay_between_env_runner_restarts_s=0.0,
    )


def build_small_dqn(
    config=None,
    *,
    num_env_runners=0,
    num_learners=None,
    rollout_fragment_length=4,
    train_batch_size_per_learner=32,
    learning_starts=200,
    replay_buffer_config=None,
    min_sample_timesteps_per_iteration=400,
    model_config=None,
    restart_failed_env_runners=False,
    seed=0,
    env="CartPole-v1",
    **training,
):
    """CartPole, n-step 3, a 5000-step buffer, 200 steps before learning starts.

    `config`: the config object to fill in (default `NERSDQNConfig()`).
    `num_learners=None` and `model_config=None` leave RLlib's defaults untouched;
    `learning_starts` is `num_steps_sampled_before_learning_starts`;
    `replay_buffer_config` replaces the default `{"capacity": 5000}` whole;
    `restart_failed_env_runners=True` restarts killed EnvRunners at once; `env`
    replaces CartPole (e.g. `TinyBoolImageEnv`); other
    keywords go to `.training()` (e.g. `n_step`, `store_buffer_in_checkpoints`,
    Rainbow's switches).
    """
    if config is None:
        config = NERSDQNConfig()
    if replay_buffer_config is None:
        replay_buffer_config = {"capacity": 5000}
    training = {"n_step": 3, **training}
    config = config.environment(env).env_runners(
        num_env_runners=num_env_runners,
        rollout_fragment_length=rollout_fragment_length,
    )
    if num_learners is not None:
        config = config.learners(num_learners=num_learners)
    config = config.training(
        train_batch_size_per_learner=train_batch_size_per_learner,
        num_steps_sampled_before_learning_starts=learning_starts,
        replay_buffer_config=replay_buffer_config,
        **training,
    )
    if model_config is not None:
        config = config.rl_module(model_config=copy.deepcopy(model_config))
    config = config.reporting(
        min_sample_timesteps_per_iteration=min_sample_timesteps_per_iteration
    )
    config = _restart_failed_env_runners(config, restart_failed_env_runners)
    return config.debugging(seed=seed)


# ACER's replay choices by name (`small_acer(replay=...)`).
ACER_REPLAY = {
    "uniform": {"type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer", "alpha": 0.0},
    "per": {"type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer", "alpha": 0.6},
    "ners": {"type": "rllib_ners.NERSEpisodeReplayBuffer", "alpha": 0.6, "beta": 0.4},
}


def build_small_acer(
    replay="uniform",
    *,
    capacity=4000,
    num_env_runners=0,
    num_learners=None,
    sequence_length=10,
    train_batch_size_per_learner=40,
    replay_ratio=2.0,
    min_sample_timesteps_per_iteration=400,
    restart_failed_env_runners=False,
    seed=0,
    **training,
):
    """CartPole, one 32-unit layer, sequences of 10, replay ratio 2, 100 steps
    before learning starts.

    `replay`: a name in `ACER_REPLAY` or a dict of buffer settings; the buffer
    config is `{"capacity": capacity, **replay}`. `num_learners=None` leaves
    RLlib's default untouched; `restart_failed_env_runners=True` restarts killed
    EnvRunners at once; other keywords go to `.training()`.
    """
    if isinstance(replay, str):
        replay = ACER_REPLAY[replay]
    config = ACERConfig().environment("CartPole-v1")
    config = config.env_runners(num_env_runners=num_env_runners)
    if num_learners is not None:
        config = config.learners(num_learners=num_learners)
    config = config.rl_module(model_config={"fcnet_hiddens": [32]}).training(
        sequence_length=sequence_length,
        train_batch_size_per_learner=train_batch_size_per_learner,
        replay_ratio=replay_ratio,
        num_steps_sampled_before_learning_starts=100,
        replay_buffer_config={"capacity": capacity, **replay},
        **training,
    )
    config = config.reporting(
        min_sample_timesteps_per_iteration=min_sample_timesteps_per_iteration
    )
    config = _restart_failed_env_runners(config, restart_failed_env_runners)
    return config.debugging(seed=seed)


# NERS-SAC's replay choices by name (`small_sac(replay=...)`).
SAC_REPLAY = {
    "ners": {"type": "rllib_ners.NERSEpisodeReplayBuffer", "alpha": 0.6, "beta": 0.4},
    "per": {
        "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
        "alpha": 0.6,
        "beta": 0.4,
    },
    "uniform": {"type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer", "alpha": 0.0},
}


def build_small_sac(
    replay="ners",
    *,
    env="Pendulum-v1",
    capacity=5000,
    num_env_runners=0,
    num_learners=None,
    rollout_fragment_length=4,
    train_batch_size_per_learner=32,
    learning_starts=200,
    min_sample_timesteps_per_iteration=400,
    restart_failed_env_runners=False,
    seed=0,
    **training,
):
    """Pendulum, one 32-unit layer per network, batch 32, 200 steps before
    learning starts, one update per `rollout_fragment_length` env steps.

    `replay`: a name in `SAC_REPLAY` or a dict of buffer settings; the buffer
    config is `{"capacity": capacity, **replay}`. `num_learners=None` leaves
    RLlib's default untouched; `restart_failed_env_runners=True` restarts killed
    EnvRunners at once; other keywords go to `.training()`.
    """
    if isinstance(replay, str):
        replay = SAC_REPLAY[replay]
    config = (
        NERSSACConfig()
        .environment(env)
        .env_runners(
            num_env_runners=num_env_runners,
            rollout_fragment_length=rollout_fragment_length,
        )
    )
    if num_learners is not None:
        config = config.learners(num_learners=num_learners)
    config = config.rl_module(model_config={"fcnet_hiddens": [32]}).training(
        train_batch_size_per_learner=train_batch_size_per_learner,
        num_steps_sampled_before_learning_starts=learning_starts,
        replay_buffer_config={"capacity": capacity, **replay},
        **training,
    )
    # No one-second floor per iteration (SACConfig's default): an iteration
    # samples `min_sample_timesteps_per_iteration` env steps on any machine.
    config = config.reporting(
        min_sample_timesteps_per_iteration=min_sample_timesteps_per_iteration,
        min_time_s_per_iteration=0,
    )
    config = _restart_failed_env_runners(config, restart_failed_env_runners)
    return config.debugging(seed=seed)


def build_small_td3(
    replay="uniform",
    *,
    config=None,
    env="Pendulum-v1",
    capacity=5000,
    num_env_runners=0,
    num_learners=None,
    learning_starts=200,
    min_sample_timesteps_per_iteration=400,
    seed=0,
    **training,
):
    """Pendulum, one 32-unit layer per network, batch 32, `learning_starts`
    random steps before learning, one update per 4 env steps.

    `replay`: a name in `TD3_REPLAYS` (its buffer settings and critic loss);
    `config`: `TD3Config()` by default (`DDPGConfig()` for DDPG);
    `num_learners=None` leaves RLlib's default; other keywords go to
    `.training()`."""
    from rllib_ners.algorithms.td3 import TD3Config
    from rllib_ners.algorithms.td3.presets import TD3_REPLAYS

    buffer_settings, critic_loss = TD3_REPLAYS[replay]
    config = (config or TD3Config()).environment(env)
    config = config.env_runners(
        num_env_runners=num_env_runners, rollout_fragment_length=4
    )
    if num_learners is not None:
        config = config.learners(num_learners=num_learners)
    return (
        config.rl_module(model_config={"fcnet_hiddens": [32]})
        .training(
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=learning_starts,
            random_timesteps=learning_starts,
            critic_loss=critic_loss,
            replay_buffer_config={**buffer_settings, "capacity": capacity},
            **training,
        )
        .reporting(
            min_sample_timesteps_per_iteration=min_sample_timesteps_per_iteration,
            min_time_s_per_iteration=0,
        )
        .debugging(seed=seed)
    )


def run_example_as_test(relative_path, *args, timeout=1500, env=None):
    """Runs `ROOT/relative_path --as-test *args`; `env`: extra environment
    variables for the script. Fails with the output's last 40 lines.

    `--as-test` makes the example runner raise unless the stop reward is reached
    within the stop timesteps, so the call fails if the agent does not learn."""
    # Each example starts and stops its own Ray instance.
    if ray.is_initialized():
        ray.shutdown()
    cmd = [sys.executable, str(ROOT / relative_path), "--as-test", *args]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(os.environ, **env),
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{tail}"
