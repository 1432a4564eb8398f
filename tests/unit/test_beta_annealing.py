"""Importance-sampling exponent annealed by the buffer (`beta` -> `beta_final`).

RLlib's DQN passes the constant `replay_buffer_config["beta"]` to every
`sample()`; PER and data-efficient Rainbow anneal it to 1 over the run.
"""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer


def steps(n, id_):
    return SingleAgentEpisode(
        id_=id_,
        observations=[np.array([t], np.float32) for t in range(n + 1)],
        actions=[0] * n,
        rewards=[1.0] * n,
        len_lookback_buffer=0,
    )


def test_beta_rises_linearly_from_the_first_sample_and_weights_follow():
    buffer = FastPrioritizedEpisodeReplayBuffer(
        1000, alpha=1.0, beta=0.4, beta_final=1.0, beta_annealing_timesteps=100, seed=0
    )
    buffer.add(steps(50, "a"))  # 50 steps before learning starts: no annealing yet
    assert buffer.current_beta() == 0.4
    buffer.sample_batch(4)
    buffer.update_priorities(np.array([1.0, 2.0, 4.0, 8.0]))
    assert buffer.current_beta() == 0.4
    buffer.add(steps(25, "b"))
    assert buffer.current_beta() == pytest.approx(0.4 + 0.6 * 25 / 100)
    # Weights use the annealed beta: (p_i / p_min) ** -beta, RLlib passing 0.4.
    batch = buffer.sample_batch(64, beta=0.4)
    leaves = buffer.get_priorities(batch["indices"])
    p_min = buffer.sampler.min_tree.min()
    np.testing.assert_allclose(batch["weights"], (leaves / p_min) ** -0.55, rtol=1e-6)
    buffer.update_priorities(np.ones(64))
    buffer.add(steps(200, "c"))
    assert buffer.current_beta() == 1.0
    state = buffer.get_state()
    restored = FastPrioritizedEpisodeReplayBuffer(
        1000, alpha=1.0, beta=0.4, beta_final=1.0, beta_annealing_timesteps=100
    )
    restored.set_state(state)
    assert restored.current_beta() == 1.0
    assert buffer.get_metrics()["beta"] == 1.0


def test_a_conflicting_beta_or_half_a_schedule_raises():
    buffer = FastPrioritizedEpisodeReplayBuffer(
        100, beta=0.4, beta_final=1.0, beta_annealing_timesteps=10
    )
    buffer.add(steps(5, "a"))
    with pytest.raises(ValueError, match="beta annealing"):
        buffer.sample_batch(2, beta=0.7)
    with pytest.raises(ValueError, match="beta_annealing_timesteps"):
        FastPrioritizedEpisodeReplayBuffer(100, beta=0.4, beta_final=1.0)
    with pytest.raises(ValueError, match="beta"):
        FastPrioritizedEpisodeReplayBuffer(
            100, beta=0.4, beta_final=1.5, beta_annealing_timesteps=10
        )
