"""The sampler variants: settings, replay-reward baselines, I_train draws, the
reference preset and the sampler-training batch's normaliser draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rllib_ners import NERSDQNConfig, NERSEpisodeReplayBuffer, NERSSettings
from rllib_ners.algorithms.ners.presets import REFERENCE_SETTINGS, ners_reference
from rllib_ners.algorithms.ners.sampler_update import (
    ReplayRewardBaseline,
    ReplayRewardWindow,
)
from rllib_ners.replay_buffers.feedback import ReplayFeedback


# ------------------------------------------------------------------ baselines
def test_previous_window_baseline_compares_consecutive_windows():
    baseline = ReplayRewardBaseline("previous_window")
    assert baseline.reward(10.0) is None
    assert baseline.reward(15.0) == 5.0
    assert baseline.reward(12.0) == -3.0


def test_first_baseline_is_frozen_at_the_first_window():
    baseline = ReplayRewardBaseline("first")
    assert baseline.reward(10.0) is None
    assert [baseline.reward(g) for g in (15.0, 12.0, 30.0)] == [5.0, 2.0, 20.0]


def test_ema_baseline_is_scale_free_and_tracks_the_returns():
    rewards = {}
    for scale in (1.0, 1000.0):
        baseline = ReplayRewardBaseline("ema", decay=0.9)
        rng = np.random.default_rng(0)
        returns = scale * (rng.normal(size=200) + np.linspace(0, 5, 200))
        rewards[scale] = [baseline.reward(g) for g in returns][1:]
        # The baseline follows the rising returns.
        assert abs(baseline.value - returns[-20:].mean()) < 1.5 * scale
    # Same replay rewards whatever the scale of the returns.
    np.testing.assert_allclose(rewards[1.0], rewards[1000.0], rtol=1e-6)
    assert 0.3 < np.std(rewards[1.0]) < 3.0
    # By hand: second window G=3 after G=1: deviation 2, variance 0.1 * 4.
    baseline = ReplayRewardBaseline("ema", decay=0.9)
    baseline.reward(1.0)
    assert baseline.reward(3.0) == pytest.approx(2.0 / math.sqrt(0.4))
    assert baseline.value == pytest.approx(1.2)


def test_baseline_state_round_trips():
    baseline = ReplayRewardBaseline("ema")
    for g in (1.0, 4.0, 2.0):
        baseline.reward(g)
    copy = ReplayRewardBaseline("ema")
    copy.set_state(baseline.get_state())
    assert copy.reward(7.0) == baseline.reward(7.0)


def test_window_closes_by_episodes_or_by_env_steps():
    by_episodes = ReplayRewardWindow(min_episodes=2)
    by_episodes.add([1.0])
    assert not by_episodes.ready(env_steps=10_000)
    by_episodes.add([3.0])
    assert by_episodes.ready(env_steps=0) and by_episodes.mean() == 2.0
    by_steps = ReplayRewardWindow(min_episodes=1, interval_env_steps=1000)
    by_steps.add([5.0, 6.0])
    assert not by_steps.ready(env_steps=999)
    assert by_steps.ready(env_steps=1000)
    by_steps.close(env_steps=1000)
    assert not by_steps.ready(env_steps=1999) and math.isnan(by_steps.mean())


# ------------------------------------------------------------------- buffer
def _buffer_with_replays(seed=0):
    import gymnasium as gym
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    buffer = NERSEpisodeReplayBuffer(200, alpha=1.0, seed=seed)
    buffer.add(
        [
            SingleAgentEpisode(
                id_=f"e{e}",
                observations=[np.array([e, t], np.float32) for t in range(11)],
                actions=[0] * 10,
                rewards=[float(t) for t in range(10)],
                terminated=True,
                len_lookback_buffer=0,
                observation_space=space,
                action_space=gym.spaces.Discrete(2),
            )
            for e in range(5)
        ]
    )
    # Replay slots: one item three times, two once, through NERS rows.
    for slots in ([3, 3, 7], [3, 12]):
        buffer.sample_batch(len(slots))
        buffer.set_last_sample(np.asarray(slots))
        buffer.update_feedback(
            ReplayFeedback(
                scores=np.full(len(slots), 0.5),
                td_errors=np.ones(len(slots)),
                target_q=np.full(len(slots), 2.0),
            )
        )
    return buffer


def test_replay_multiset_draws_in_proportion_to_replays():
    buffer = _buffer_with_replays()
    assert buffer.sampled_set_size == 3
    batch = buffer.sample_sampler_training_batch(20_000, draw="replay_multiset")
    slots, counts = np.unique(batch["indices"], return_counts=True)
    assert list(slots) == [3, 7, 12]
    np.testing.assert_allclose(counts / counts.sum(), [0.6, 0.2, 0.2], atol=0.02)
    unique = buffer.sample_sampler_training_batch(20, draw="uniform_set")
    assert sorted(unique["indices"]) == [3, 7, 12]
    buffer.reset_sampled_set()
    assert buffer.sample_sampler_training_batch(4, draw="replay_multiset") is None


def test_normaliser_draws_come_with_their_leaves_and_scored_mask():
    buffer = _buffer_with_replays()
    batch = buffer.sample_sampler_training_batch(2, normalizer_size=500)
    normalizer = batch["normalizer"]
    assert normalizer["obs"].shape == (500, 2)
    assert batch["num_stored"] == len(buffer)
    np.testing.assert_array_equal(
        batch["normalizer_leaf"], buffer.get_priorities(normalizer["indices"])
    )
    scored = np.isin(normalizer["indices"], [3, 7, 12])
    np.testing.assert_array_equal(batch["normalizer_scored"], scored)


# --------------------------------------------------------- settings, preset
@pytest.mark.parametrize(
    "name, value",
    [
        ("objective", "log_likelihood"),
        ("baseline", "median"),
        ("baseline_decay", 1.0),
        ("parameterization", "softplus"),
        ("per_epsilon", 0.0),
        ("train_draw", "weighted"),
        ("normalizer_size", 0),
        ("update_interval_env_steps", 0),
        ("linear_skip", "yes"),
        ("linear_skip_lr", -1.0),
        ("max_log_correction", -2.0),
    ],
)
def test_each_variant_setting_is_validated(name, value):
    with pytest.raises(ValueError, match=f"config.ners\\({name}="):
        NERSSettings(**{name: value})
    with pytest.raises(ValueError, match=name):
        NERSDQNConfig().environment("CartPole-v1").ners(**{name: value}).validate()


def test_reference_preset_sets_the_reference_semantics():
    config = ners_reference(NERSDQNConfig().environment("CartPole-v1"))
    config.validate()
    for key, value in REFERENCE_SETTINGS.items():
        assert config.ners_config[key] == value
    assert config.replay_buffer_config["alpha"] == 0.5
    assert config.evaluation_duration == 5
    assert config.evaluation_duration_unit == "episodes"
    # The rest of the buffer config is kept.
    assert config.replay_buffer_config["capacity"] == 50000
