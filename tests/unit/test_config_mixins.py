"""The config mixins set themselves up: a config that lists them calls nothing.

`NERSConfigMixin` and `FastPathsConfigMixin` set their defaults in `__init__`
and check them in `validate()`; these tests build a config class that only
lists them (no call to any of their methods) and expect the defaults and the
checks, on RLlib's stock `DQNConfig`.
"""

from __future__ import annotations

import logging

import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.util.debug import reset_log_once

from rllib_ners.algorithms.common.config.fast_paths_config import FastPathsConfigMixin
from rllib_ners.algorithms.ners.ners_config import NERSConfigMixin
from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner
from rllib_ners.ners.settings import NERSSettings

NERS_BUFFER = "rllib_ners.NERSEpisodeReplayBuffer"


class ListsTheMixinsOnly(NERSConfigMixin, FastPathsConfigMixin, DQNConfig):
    """A config author's class: the mixins listed, nothing called."""


def _config(**buffer):
    config = ListsTheMixinsOnly().environment("CartPole-v1")
    if buffer:
        config.training(replay_buffer_config=buffer)
    return config


def test_the_mixins_set_their_defaults():
    config = ListsTheMixinsOnly()
    assert config.ners_config == NERSSettings().to_dict()
    assert config.env_runner_cls is FastSingleAgentEnvRunner
    assert config.fast_training_loop is True
    assert config.overlap_sampling is False
    assert config.weights_sync_interval == 1
    assert config.max_weights_staleness is None
    assert config.cuda_graph_updates is False
    assert config.act_on_learner_device is False
    # RLlib's own defaults are still set (the mixins call the parent first).
    assert config.gamma == DQNConfig().gamma


def test_a_valid_config_validates():
    _config(type=NERS_BUFFER, capacity=1000, alpha=0.6, beta=0.4).validate()


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("fast_training_loop", "yes", "fast_training_loop must be True or False"),
        ("overlap_sampling", 1, "overlap_sampling must be True or False"),
        ("weights_sync_interval", 0, "weights_sync_interval must be an int >= 1"),
        ("max_weights_staleness", 0, "max_weights_staleness must be None or an int"),
        ("cuda_graph_updates", None, "cuda_graph_updates must be True or False"),
    ],
)
def test_validate_runs_the_fast_paths_checks(setting, value, message):
    config = _config().training(**{setting: value})
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_validate_runs_the_ners_checks():
    ners_replay = _config(type=NERS_BUFFER, capacity=1000, alpha=0.6, beta=0.4)
    with pytest.raises(ValueError, match="objective"):
        ners_replay.ners(objective="nonsense").validate()
    uniform_ners = _config(type=NERS_BUFFER, capacity=1000, alpha=0.0, beta=0.4)
    with pytest.raises(ValueError, match=r"replay_buffer_config\['alpha'\]=0.0"):
        uniform_ners.validate()
    # Without the NERS buffer, .ners() settings would do nothing: refused.
    with pytest.raises(ValueError, match="have no effect without the NERS replay"):
        _config().ners(lr=3e-4).validate()
    # .ners() holds the sampler's settings; it does not choose the NERS
    # buffer. A bare call, which sets only defaults, is refused as well, and
    # the refusal survives a copy and RLlib's dict round trip (Tune's route).
    bare = _config().ners()
    for config in (bare, bare.copy(), ListsTheMixinsOnly.from_dict(bare.to_dict())):
        with pytest.raises(ValueError, match=r"\.ners\(\) does not choose it"):
            config.validate()
    _config().validate()  # no .ners() call: uniform replay, no error
    ners_replay = _config(type=NERS_BUFFER, capacity=1000, alpha=0.6, beta=0.4)
    ners_replay.ners().validate()


# A sampler setting another leaves unused, with a value other than its
# default, and the switch that uses it.
PER_RESIDUAL = {"parameterization": "per_residual"}
SWITCHED_OFF_NERS = [
    ({"timestep_scale": 50.0}, {"feature_normalization": "none"}),
    ({"per_epsilon": 1e-3, "parameterization": "sigmoid"}, PER_RESIDUAL),
    ({"max_log_correction": 2.0, "parameterization": "sigmoid"}, PER_RESIDUAL),
    ({"log_eps": 1e-4}, {"parameterization": "sigmoid"}),
    ({"baseline_decay": 0.5, "baseline": "first"}, {"baseline": "ema"}),
    ({"linear_skip_lr": 1e-2, "linear_skip": False}, {"linear_skip": True}),
    ({"normalizer_size": 64, "objective": "log_score"}, {"objective": "log_prob"}),
    ({"encoder_hiddens": (64,), "encoder": "module"}, {"encoder": "separate"}),
    ({"encoder_out_dim": 16, "encoder": "module"}, {"encoder": "separate"}),
    ({"cache_encodings": False, "encoder": "module"}, {"encoder": "separate"}),
    (
        {"min_episodes_per_update": 5, "update_interval_env_steps": 1000},
        {"update_interval_env_steps": None},
    ),
]  # fmt: skip


@pytest.mark.parametrize("settings, switch_on", SWITCHED_OFF_NERS, ids=lambda v: str(v))
def test_a_ners_setting_its_switch_leaves_off_is_named_once(
    settings, switch_on, caplog
):
    from rllib_ners.algorithms.ners import ners_config

    reset_log_once()  # an earlier test may have warned already
    (name,) = [key for key in settings if key not in switch_on]
    config = _config(type=NERS_BUFFER).ners(**settings)
    with caplog.at_level(logging.WARNING, logger=ners_config.__name__):
        config.validate()
        config.validate()
    messages = [
        r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()
    ]
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        f"NERS setting {name}={settings[name]!r} has no effect"
    )
    switched = NERSSettings.from_dict({**settings, **switch_on})
    assert switched.switched_off() == []


@pytest.mark.parametrize("config_name", ["NERSSACConfig", "TD3Config", "RainbowDQN"])
def test_action_encoding_is_named_as_unused_with_box_actions_only(config_name, caplog):
    """SAC and TD3 act in Box spaces, whose actions the sampler's features take
    as they are; a DQN's discrete actions are encoded as the setting says."""
    import rllib_ners
    from rllib_ners.algorithms.ners import ners_config

    reset_log_once()
    config_class = {
        "NERSSACConfig": rllib_ners.NERSSACConfig,
        "TD3Config": rllib_ners.TD3Config,
        "RainbowDQN": ListsTheMixinsOnly,
    }[config_name]
    environment = "CartPole-v1" if config_name == "RainbowDQN" else "Pendulum-v1"
    config = (
        config_class()
        .environment(environment)
        .training(replay_buffer_config={"type": NERS_BUFFER, "alpha": 0.6})
        .ners(action_encoding="scaled_index")
    )
    with caplog.at_level(logging.WARNING, logger=ners_config.__name__):
        config.validate()
        config.validate()
    messages = [
        r.getMessage() for r in caplog.records if "action_encoding" in r.getMessage()
    ]
    assert len(messages) == (0 if config_name == "RainbowDQN" else 1), messages
