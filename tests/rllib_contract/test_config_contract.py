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


def _our_configs_with_ranges_and_classes():
    """A builder of each of our configs with the settings our `validate()`
    normalises or swaps for RLlib's checks: an n-step range as a list (DQN and
    SAC family), a buffer `type` given as a class."""
    from rllib_ners import (
        ACERConfig,
        DDPGConfig,
        FastPrioritizedEpisodeReplayBuffer,
        NERSEpisodeReplayBuffer,
        TD3Config,
    )

    fast = {"type": FastPrioritizedEpisodeReplayBuffer}
    ners = {"type": NERSEpisodeReplayBuffer}
    return {
        "ACER": lambda: (
            ACERConfig().environment("CartPole-v1").training(replay_buffer_config=fast)
        ),
        "DDPG": lambda: (
            DDPGConfig().environment("Pendulum-v1").training(replay_buffer_config=fast)
        ),
        "TD3": lambda: (
            TD3Config().environment("Pendulum-v1").training(replay_buffer_config=fast)
        ),
        "NERSDQN": lambda: (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .training(n_step=[2, 4], replay_buffer_config=ners)
        ),
        "RainbowDQN": lambda: (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .training(n_step=[2, 4], replay_buffer_config=fast)
        ),
        "NERSSAC": lambda: (
            NERSSACConfig()
            .environment("Pendulum-v1")
            .training(n_step=[1, 3], replay_buffer_config=fast)
        ),
    }


def test_rllibs_configs_validate_again_when_frozen():
    """What ours must match: RLlib's configs validate again after `freeze()`
    (a user checking `algo.config`)."""
    for config in (
        SACConfig().environment("Pendulum-v1").training(n_step=(1, 3)),
        DQNConfig().environment("CartPole-v1"),
    ):
        config.validate()
        config.freeze()
        config.validate()


@pytest.mark.parametrize("name", sorted(_our_configs_with_ranges_and_classes()))
def test_validate_again_on_a_frozen_config(name):
    """Ours did not validate again when frozen: their `validate()` wrote the
    normalised buffer type and swapped stand-ins for RLlib's checks, and a
    frozen config refuses writes. Now the second run writes nothing and leaves
    the config frozen."""
    config = _our_configs_with_ranges_and_classes()[name]()
    config.validate()
    n_step = getattr(config, "n_step", None)  # ACER has none
    buffer_config = dict(config.replay_buffer_config)  # a copy: in-place edits show
    assert not isinstance(n_step, list)
    assert isinstance(buffer_config["type"], str)
    config.freeze()
    config.validate()
    assert config._is_frozen
    assert getattr(config, "n_step", None) == n_step
    assert config.replay_buffer_config == buffer_config


def test_stand_ins_for_rllibs_checks_leave_a_frozen_config_as_it_was_on_error():
    """`settings_seen_by_rllib` thaws a frozen config for its block only and puts
    the config's own settings back however the block ends."""
    from rllib_ners.algorithms.common.config.rllib_validation import (
        settings_seen_by_rllib,
    )

    config = RainbowDQNConfig().training(n_step=(2, 4))
    config.freeze()
    with pytest.raises(RuntimeError, match="a check failed"):
        with settings_seen_by_rllib(config, n_step=4):
            assert config.n_step == 4
            raise RuntimeError("a check failed")
    assert config.n_step == (2, 4)
    assert config._is_frozen
    with pytest.raises(AttributeError, match="frozen"):
        config.n_step = 3
