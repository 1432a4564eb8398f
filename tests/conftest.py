"""Fixtures shared by the test modules: one Ray session, one small CartPole
config builder per algorithm family.

* `ray_session`: a local Ray instance for one test module. Its logical CPUs come
  from the module's `RAY_NUM_CPUS` constant (default 2). Not autouse: a module
  asks for it with `pytest.mark.usefixtures("ray_session")` or as an argument.
* `small_dqn(config=None, **settings)`: a small CartPole DQN-family config
  (NERS-DQN by default; also stock DQN and Rainbow DQN configs).
* `small_acer(replay="uniform", **settings)`: a small CartPole ACER config.
* `small_sac(replay="ners", **settings)`: a small Pendulum NERS-SAC config.
* `one_torch_thread`: torch runs on one thread in this process during a test
  (a local Learner's small networks gain nothing from more, and on a loaded
  machine torch's spinning worker threads made each op several times slower).

The builders' defaults are the values most tests use; each keyword names the
RLlib setting it changes, so a test shows only how its config differs.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest
import ray

from rllib_ners import ACERConfig, NERSDQNConfig, NERSSACConfig

DEFAULT_RAY_NUM_CPUS = 2


class TinyBoolImageEnv(gym.Env):
    """10x10x4 bool frames; reward 1 for action 1; episodes of 12 steps."""

    observation_space = gym.spaces.Box(0, 1, (10, 10, 4), dtype=bool)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config=None):
        self._rng = np.random.default_rng(0)
        self._t = 0

    def _frame(self):
        return self._rng.random((10, 10, 4)) < 0.2

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._frame(), {}

    def step(self, action):
        self._t += 1
        return self._frame(), float(action == 1), self._t >= 12, False, {}


@pytest.fixture(scope="module")
def ray_session(request):
    num_cpus = getattr(request.module, "RAY_NUM_CPUS", DEFAULT_RAY_NUM_CPUS)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    config = config.reporting(
        min_sample_timesteps_per_iteration=min_sample_timesteps_per_iteration
    )
    config = _restart_failed_env_runners(config, restart_failed_env_runners)
    return config.debugging(seed=seed)


@pytest.fixture
def small_dqn():
    """`build_small_dqn`: (config=None, **settings) -> small CartPole DQN config."""
    return build_small_dqn


@pytest.fixture
def small_acer():
    """`build_small_acer`: (replay="uniform", **settings) -> small CartPole ACER
    config."""
    return build_small_acer


@pytest.fixture
def small_sac():
    """`build_small_sac`: (replay="ners", **settings) -> small Pendulum NERS-SAC
    config."""
    return build_small_sac
