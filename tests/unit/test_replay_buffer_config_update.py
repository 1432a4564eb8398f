"""`training(replay_buffer_config=...)` merges an update that names the current
buffer class, however it is spelled, and logs what a new class drops.

RLlib's DQN and SAC configs replace the whole buffer config when the update's
`type` differs from the current one, comparing spellings: the class object of
the default buffer dropped the config's capacity, alpha and beta for the
buffer's own defaults (10000, 1.0, 0.0).
"""

from __future__ import annotations

import logging

import pytest

from rllib_ners import NERSSACConfig, RainbowDQNConfig
from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    NERS_BUFFER_TYPE,
    replay_buffer_config_update,
)
from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer

LOGGER = "rllib_ners.algorithms.common.config.buffer_types"


@pytest.mark.parametrize(
    "spelling",
    [
        FastPrioritizedEpisodeReplayBuffer,
        "rllib_ners.replay_buffers.FastPrioritizedEpisodeReplayBuffer",
        "rllib_ners.replay_buffers.fast_prioritized_episode_buffer."
        "FastPrioritizedEpisodeReplayBuffer",
    ],
    ids=["class", "package-path", "module-path"],
)
def test_the_current_class_spelled_otherwise_merges(spelling, caplog):
    config = RainbowDQNConfig()
    default = dict(config.replay_buffer_config)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        config.training(replay_buffer_config={"type": spelling, "alpha": 0.5})
    assert config.replay_buffer_config == {**default, "alpha": 0.5}
    assert config.replay_buffer_config["type"] == FAST_BUFFER_TYPE
    assert default["capacity"] == 50000 and default["beta"] == 0.4
    assert not caplog.records


def test_a_new_class_replaces_the_settings_and_names_what_it_drops(caplog):
    config = NERSSACConfig()
    assert config.replay_buffer_config["type"] == NERS_BUFFER_TYPE
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        config.training(replay_buffer_config={"type": FAST_BUFFER_TYPE, "alpha": 0.0})
    # RLlib's documented rule stands: a new type replaces the whole dict ...
    assert config.replay_buffer_config == {"type": FAST_BUFFER_TYPE, "alpha": 0.0}
    # ... and the settings it drops are said, with their values.
    (record,) = caplog.records
    assert (
        f"type {FAST_BUFFER_TYPE} replaces the whole replay_buffer_config"
        in record.message
    )
    assert "capacity=1000000, beta=0.4 no longer apply" in record.message


def test_an_update_without_a_type_merges_without_a_word(caplog):
    config = RainbowDQNConfig()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        config.training(replay_buffer_config={"capacity": 1000})
    assert config.replay_buffer_config["capacity"] == 1000
    assert config.replay_buffer_config["alpha"] == 0.6
    assert not caplog.records


def test_an_unknown_type_is_left_for_validate_to_name():
    update = {"type": "no.such.Buffer", "capacity": 5}
    assert replay_buffer_config_update({"type": FAST_BUFFER_TYPE}, update) is update


def test_acer_keeps_uniform_replay_for_its_own_buffer_spelled_as_a_class():
    # The class of ACER's own buffer is no new type: it merges, so alpha and
    # beta stay 0 (uniform), not the buffer's own alpha 1 (prioritised).
    from rllib_ners import ACERConfig

    config = ACERConfig().training(
        replay_buffer_config={
            "type": FastPrioritizedEpisodeReplayBuffer,
            "capacity": 20000,
        }
    )
    assert config.replay_buffer_config["alpha"] == 0.0
    assert config.replay_buffer_config["beta"] == 0.0
    assert config.replay_buffer_config["capacity"] == 20000
    ners = ACERConfig().training(replay_buffer_config={"type": NERS_BUFFER_TYPE})
    assert ners.replay_buffer_config == {"type": NERS_BUFFER_TYPE}


def _package_configs():
    import rllib_ners

    return [
        getattr(rllib_ners, name)
        for name in rllib_ners.__all__
        if name.endswith("Config") and name != "NERSConfig"
    ]


@pytest.mark.parametrize("config_class", _package_configs(), ids=lambda c: c.__name__)
def test_every_config_of_the_package_follows_rllibs_rule(config_class, caplog):
    """TD3 and ACER, whose `training()` RLlib's does not serve, merge and
    replace as the configs built on RLlib's DQN and SAC do."""
    default = dict(config_class().replay_buffer_config)
    other = (
        NERS_BUFFER_TYPE if default["type"] == FAST_BUFFER_TYPE else FAST_BUFFER_TYPE
    )
    merged = config_class().training(replay_buffer_config={"capacity": 1234})
    assert merged.replay_buffer_config == {**default, "capacity": 1234}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        replaced = config_class().training(
            replay_buffer_config={"type": other, "capacity": 4321}
        )
    assert replaced.replay_buffer_config == {"type": other, "capacity": 4321}
    (record,) = caplog.records
    dropped = ", ".join(
        f"{key}={value!r}"
        for key, value in default.items()
        if key not in ("type", "capacity")
    )
    assert f"so {dropped} no longer apply" in record.message
