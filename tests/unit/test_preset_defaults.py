"""The presets replay as the studies recommend unless told otherwise.

README's Results name one replay per agent (PER with SAC, uniform replay with
TD3 and with data-efficient Rainbow on Atari 100k); a preset called without
`replay=` builds that arm, exactly as when it is named.
"""

from __future__ import annotations

import pytest

from rllib_ners.algorithms.ners_sac.presets import (
    mujoco_sac,
    pendulum_sac,
    sac_config,
)
from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow
from rllib_ners.algorithms.td3.presets import mujoco_td3, pendulum_td3


def _replay_of(config):
    return (
        type(config),
        config.replay_buffer_config,
        getattr(config, "ners_config", None),
    )


@pytest.mark.parametrize(
    "preset, recommended",
    [
        (lambda **kw: sac_config("Pendulum-v1", **kw), "per"),
        (mujoco_sac, "per"),
        (pendulum_sac, "per"),
        (mujoco_td3, "uniform"),
        (pendulum_td3, "uniform"),
        (atari_data_efficient_rainbow, "uniform"),
    ],
    ids=[
        "sac_config",
        "mujoco_sac",
        "pendulum_sac",
        "mujoco_td3",
        "pendulum_td3",
        "atari_data_efficient_rainbow",
    ],
)
def test_a_preset_without_replay_builds_the_recommended_arm(preset, recommended):
    assert _replay_of(preset()) == _replay_of(preset(replay=recommended))
    assert _replay_of(preset()) != _replay_of(preset(replay="ners"))


def test_ddpg_is_built_from_a_ddpg_config_only():
    # ddpg=True used to return plain TD3 when a TD3Config was passed in.
    from rllib_ners.algorithms.td3 import DDPGConfig, TD3Config
    from rllib_ners.algorithms.td3.presets import td3_config

    built = td3_config("Pendulum-v1", ddpg=True)
    given = td3_config("Pendulum-v1", ddpg=True, config=DDPGConfig())
    for config in (built, given):
        assert type(config) is DDPGConfig
        assert (config.twin_q, config.target_noise, config.policy_delay) == (
            False,
            0.0,
            1,
        )
    with pytest.raises(
        ValueError, match=r"ddpg=True with config=TD3Config.*DDPGConfig"
    ):
        td3_config("Pendulum-v1", ddpg=True, config=TD3Config())
