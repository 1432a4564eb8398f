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
    # ACER drops its uniform defaults (alpha 0, beta 0) for a new buffer type
    # only; the class of its own buffer is no new type (it fell back to the
    # buffer's alpha 1: prioritised replay).
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
    assert "alpha" not in ners.replay_buffer_config  # the NERS buffer's own
