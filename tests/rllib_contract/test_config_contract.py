"""Our configs against RLlib's on settings RLlib's own `validate()` mishandles.

Each test shows what RLlib 2.60 does with the setting and what ours does; if
an RLlib upgrade fixes its side, the first assertion fails and tells which of
our work-arounds (`rllib_ners/algorithms/common/config/rllib_validation.py`) to drop.
"""

import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.sac import SACConfig

from rllib_ners import NERSDQNConfig, NERSSACConfig, RainbowDQNConfig


def test_n_step_range_with_a_rollout_fragment_length():
    """RLlib's DQNConfig compares `rollout_fragment_length < n_step` with the
    tuple itself (a TypeError); ours compares the range's largest n."""
    with pytest.raises(TypeError, match="'<' not supported"):
        DQNConfig().env_runners(rollout_fragment_length=5).training(
            n_step=(2, 5)
        ).validate()
    for config in (RainbowDQNConfig(), NERSDQNConfig()):
        config.env_runners(rollout_fragment_length=5).training(n_step=(2, 5))
        config.validate()
        assert config.n_step == (2, 5)


def test_n_step_range_as_a_list():
    """A range comes back from Tune's JSON round trips as a list: RLlib's
    SACConfig raises a TypeError on it; ours takes it (as a tuple)."""
    with pytest.raises(TypeError, match="'<' not supported"):
        SACConfig().environment("Pendulum-v1").env_runners(
            rollout_fragment_length=4
        ).training(n_step=[1, 3]).validate()
    config = (
        NERSSACConfig()
        .environment("Pendulum-v1")
        .env_runners(rollout_fragment_length=4)
        .training(n_step=[1, 3])
    )
    config.validate()
    assert config.n_step == (1, 3)
