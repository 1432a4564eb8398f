"""Small and bool image observations (MinAtar-like: 10x10 channels of 0/1) through
NERS-DQN (Rainbow module) and ACER with NERS replay: the CNNs that fit are picked
by default, and a configured CNN that does not fit fails at `validate()`."""

import gymnasium as gym
import numpy as np
import pytest
import ray

from rllib_ners import ACERConfig, NERSDQNConfig
from rllib_ners.algorithms.ners.ners_learner import NERS_RESULTS

MID = "default_policy"


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
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _ners_dqn():
    return (
        NERSDQNConfig()
        .environment(TinyBoolImageEnv)
        .env_runners(num_env_runners=0, rollout_fragment_length=4)
        .training(
            n_step=3,
            train_batch_size_per_learner=16,
            num_steps_sampled_before_learning_starts=48,
            replay_buffer_config={"capacity": 2000},
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )


def _acer():
    return (
        ACERConfig()
        .environment(TinyBoolImageEnv)
        .env_runners(num_env_runners=0)
        .training(
            sequence_length=6,
            train_batch_size_per_learner=24,
            num_steps_sampled_before_learning_starts=48,
            replay_buffer_config={
                "type": "rllib_ners.NERSEpisodeReplayBuffer",
                "capacity": 2000,
                "alpha": 0.6,
                "beta": 0.4,
            },
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )


@pytest.mark.parametrize(
    "make_config, losses",
    [(_ners_dqn, ("qf_loss",)), (_acer, ("policy_loss", "q_loss"))],
    ids=["ners_dqn", "acer_ners"],
)
def test_bool_10x10_images_train(ray_session, make_config, losses):
    algo = make_config().build_algo()
    try:
        learner = algo.learner_group._learner
        assert learner.module[MID].unwrapped().encoder.kind == "small"
        assert learner.ners_scorer.encoder.convs.kind == "small"
        for _ in range(2):
            result = algo.train()
        for key in losses:
            assert np.isfinite(result["learners"][MID][key]), key
        assert result[NERS_RESULTS]["num_sampler_updates_lifetime"] >= 1
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


@pytest.mark.parametrize("make_config", [_ners_dqn, _acer], ids=["ners_dqn", "acer"])
@pytest.mark.parametrize("kind", ["data_efficient", "nature"])
def test_a_configured_cnn_too_large_for_the_images_fails_at_validate(make_config, kind):
    config = make_config().rl_module(model_config={"cnn_encoder": kind})
    with pytest.raises(ValueError, match=f"too small for cnn_encoder='{kind}'"):
        config.validate()
    # The small CNN fits, and so does leaving cnn_encoder unset.
    make_config().rl_module(model_config={"cnn_encoder": "small"}).validate()
    make_config().validate()
