"""The sampler diagnostics in `result["ners"]`, every iteration, on every NERS route."""

import numpy as np
import pytest
from ray.rllib.algorithms.dqn import DQNConfig

from rllib_ners import ACERConfig, NERSCallback, NERSDQNConfig, enable_ners
from rllib_ners.algorithms.ners.ners_learner import (
    NERS_DIAGNOSTICS_KEYS,
    NERS_PROBE_RANK_DRIFT_KEY,
    NERS_RESULTS,
)

pytestmark = pytest.mark.usefixtures("ray_session")


def _small_dqn(config):
    return (
        config.environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=4)
        .training(
            n_step=3,
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=100,
            replay_buffer_config={"capacity": 5000, "alpha": 0.6, "beta": 0.4},
        )
        .reporting(min_sample_timesteps_per_iteration=300)
        .debugging(seed=0)
    )


def _small_acer_ners(num_learners):
    return (
        ACERConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .learners(num_learners=num_learners)
        .rl_module(model_config={"fcnet_hiddens": [32]})
        .training(
            sequence_length=10,
            train_batch_size_per_learner=40,
            replay_ratio=2.0,
            num_steps_sampled_before_learning_starts=100,
            replay_buffer_config={
                "type": "rllib_ners.NERSEpisodeReplayBuffer",
                "capacity": 4000,
                "alpha": 0.6,
                "beta": 0.4,
            },
        )
        .reporting(min_sample_timesteps_per_iteration=300)
        .debugging(seed=0)
    )


def _sampler_update(algo):
    """The NERS sampler update: the algorithm's, or on the stock-DQN route
    (`enable_ners`) the one `NERSCallback` holds."""
    for callback in algo.callbacks:  # one object per callbacks class
        if isinstance(callback, NERSCallback):
            return callback.sampler_update
    return algo.ners_sampler_update


def _check_every_key_every_iteration(algo, iterations=2):
    for _ in range(iterations):
        ners = algo.train()[NERS_RESULTS]
        # Present each iteration (the probe's drift from its second scoring on).
        for key in NERS_DIAGNOSTICS_KEYS:
            if key == NERS_PROBE_RANK_DRIFT_KEY and algo.iteration < 2:
                continue
            assert key in ners, key
            assert np.isfinite(ners[key]), (key, ners[key])
        assert 0.0 < ners["priority_entropy_normalized"] <= 1.0 + 1e-12
        assert 0.0 < ners["effective_sample_fraction"] <= 1.0 + 1e-12
        assert 0.0 <= ners["unscored_mass"] <= 1.0
        assert ners["scored_priority_max_over_min"] >= 1.0
        assert -1.0 <= ners["priority_td_spearman"] <= 1.0
    assert "priority_entropy" not in ners
    state = _sampler_update(algo).get_state()["diagnostics"]
    assert state["probe_slots"] is not None and state["probe_previous"] is not None
    return ners


def test_ners_dqn_reports_every_diagnostic_each_iteration():
    algo = _small_dqn(NERSDQNConfig()).build_algo()
    try:
        _check_every_key_every_iteration(algo)
    finally:
        algo.stop()


def test_stock_dqn_route_reports_them_through_the_callback():
    algo = enable_ners(_small_dqn(DQNConfig()), hidden_size=32).build_algo()
    try:
        _check_every_key_every_iteration(algo)
    finally:
        algo.stop()


def test_acer_with_ners_buffer_and_a_remote_learner_reports_them():
    algo = _small_acer_ners(num_learners=1).build_algo()
    try:
        _check_every_key_every_iteration(algo)
    finally:
        algo.stop()
