"""`rllib_ners.enable_replay(config, method, **settings)`: the buffer, sampler
and Learner it sets on stock and package configs, the settings it keeps, and
what it refuses. Configs only: nothing is built (the stock configs training
with it: tests/integration/test_enable_replay_training.py)."""

from __future__ import annotations

import logging
import re

import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.algorithms.sac import SACConfig

import rllib_ners
from rllib_ners import (
    ACERConfig,
    NERSDQNConfig,
    NERSSACConfig,
    RainbowDQNConfig,
    TD3Config,
    enable_replay,
)
from rllib_ners.algorithms.ners_sac.torch.ners_sac_torch_learner import (
    NERSSACTorchLearner,
)
from rllib_ners.algorithms.rainbow.torch.rainbow_dqn_torch_learner import (
    RainbowDQNTorchLearner,
)
from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer, feedback

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
LABER_OFF = {"beta_final": None, "beta_annealing_timesteps": None}
# What a stock algorithm's buffer needs to be told (see `check_learner_sends_
# feedback`).
SENDS = {"learner_sends_feedback": True}
# Where `with_replay_buffer` keeps the buffer class for its swap at init.
BUFFER_CLASS_KEY = "rllib_ners_buffer_class"


def test_it_is_public_next_to_enable_ners():
    assert "enable_replay" in rllib_ners.__all__
    assert rllib_ners.enable_replay is enable_replay


def test_a_stock_dqn_gets_relo_with_its_capacity_alpha_and_beta():
    config = DQNConfig().environment("CartPole-v1")
    assert enable_replay(config, "relo") is config
    # RLlib's DQNConfig defaults (capacity 50000, alpha 0.6, beta 0.4) carry
    # over; scalar Q-values: ReLo's "clip" map with its epsilon.
    assert config.replay_buffer_config == {
        "type": FAST,
        "capacity": 50000,
        "alpha": 0.6,
        "beta": 0.4,
        "sampler": "relo",
        "relo_transform": "clip",
        "relo_epsilon": 1e-5,
        **SENDS,
    }
    assert config.learner_class is RainbowDQNTorchLearner


def test_a_c51_dqn_gets_relos_exp_map():
    config = DQNConfig().training(num_atoms=51, v_min=-10.0, v_max=10.0)
    enable_replay(config, "relo")
    assert config.replay_buffer_config["relo_transform"] == "exp"
    assert config.replay_buffer_config["relo_epsilon"] == 1e-5  # unused by "exp"


def _stock_sac_buffer(config) -> dict:
    """A stock SACConfig's buffer settings: RLlib's SAC takes RLlib's buffer
    names only, so ours rides in under one (`with_replay_buffer`) and is
    swapped in at init; shown here with our type."""
    buffer_config = dict(config.replay_buffer_config)
    assert buffer_config.pop("type") == "PrioritizedEpisodeReplayBuffer"
    assert buffer_config.pop(BUFFER_CLASS_KEY) is FastPrioritizedEpisodeReplayBuffer
    return {"type": FAST, **buffer_config}


def test_a_stock_sac_gets_laber_with_its_capacity_and_no_importance_weights():
    config = SACConfig().environment("Pendulum-v1")
    enable_replay(config, "laber")
    config.validate()  # RLlib's SAC validates it
    assert _stock_sac_buffer(config) == {
        "type": FAST,
        "capacity": 1_000_000,
        "alpha": 0.0,
        "beta": 0.0,
        **LABER_OFF,
        "sampler": "laber",
        "laber_m": 4,
        "laber_weights": "mean",
        **SENDS,
    }
    assert config.learner_class is NERSSACTorchLearner


def test_the_settings_given_win_over_the_config_and_the_defaults():
    config = DQNConfig().training(
        replay_buffer_config={"capacity": 1000, "alpha": 0.7, "beta": 0.5}
    )
    enable_replay(config, "relo", alpha=0.5, relo_epsilon=1e-3)
    assert config.replay_buffer_config == {
        "type": FAST,
        "capacity": 1000,
        "alpha": 0.5,
        "beta": 0.5,
        "sampler": "relo",
        "relo_transform": "clip",
        "relo_epsilon": 1e-3,
        **SENDS,
    }
    config = SACConfig()
    enable_replay(config, "laber", laber_m=2, laber_weights="lazy", capacity=5000)
    assert _stock_sac_buffer(config) == {
        "type": FAST,
        "capacity": 5000,
        "alpha": 0.0,
        "beta": 0.0,
        **LABER_OFF,
        "sampler": "laber",
        "laber_m": 2,
        "laber_weights": "lazy",
        **SENDS,
    }


def test_from_the_fast_buffer_everything_but_another_samplers_settings_carries():
    config = RainbowDQNConfig().training(
        replay_buffer_config={
            "type": FAST,
            "capacity": 2000,
            "alpha": 0.5,
            "beta": 0.4,
            "beta_final": 1.0,
            "beta_annealing_timesteps": 900,
            "frame_stack": 4,
            "sampler": "laber",
            "laber_m": 8,
        }
    )
    enable_replay(config, "relo", relo_transform="exp")
    assert config.replay_buffer_config == {
        "type": FAST,
        "capacity": 2000,
        "alpha": 0.5,
        "beta": 0.4,
        "beta_final": 1.0,
        "beta_annealing_timesteps": 900,
        "frame_stack": 4,
        "sampler": "relo",
        "relo_transform": "exp",
        "relo_epsilon": 1e-5,
        **SENDS,
    }


@pytest.mark.parametrize("method", ["relo", "laber"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: RainbowDQNConfig().environment("CartPole-v1"),
        lambda: NERSSACConfig().environment("Pendulum-v1"),
        lambda: TD3Config().environment("Pendulum-v1"),
    ],
    ids=["RainbowDQNConfig", "NERSSACConfig", "TD3Config"],
)
def test_the_packages_configs_keep_their_learner_and_validate(make, method):
    default_learner = make().learner_class
    config = enable_replay(make(), method)
    assert config.learner_class is default_learner
    assert config.replay_buffer_config["sampler"] == method
    config.validate()


@pytest.mark.parametrize("method", ["relo", "laber"])
def test_a_learner_of_the_users_that_sends_the_feedback_is_kept(method):
    class MyLearner(RainbowDQNTorchLearner):
        pass

    class StockLearner(DQNTorchLearner):
        pass

    layouts = getattr(RainbowDQNTorchLearner, feedback.LEARNER_FEEDBACK_LAYOUTS_ATTR)
    assert {feedback.RELO_LOSSES, feedback.LABER_SURROGATES} <= set(layouts)
    config = DQNConfig().learners(learner_class=MyLearner)
    assert enable_replay(config, method).learner_class is MyLearner
    # One that sends TD errors only would have to be replaced, dropping the
    # user's update: refused, naming both classes. Left unset: ours is set.
    config = DQNConfig().learners(learner_class=StockLearner)
    with pytest.raises(
        ValueError,
        match="learner_class StockLearner would be replaced by RainbowDQNTorchLearner",
    ):
        enable_replay(config, method)
    assert config.learner_class is StockLearner
    assert enable_replay(DQNConfig(), method).learner_class is RainbowDQNTorchLearner


def test_enable_ners_keeps_the_users_callbacks_and_refuses_their_learner():
    from ray.rllib.callbacks.callbacks import RLlibCallback

    from rllib_ners import enable_ners
    from rllib_ners.algorithms.ners_dqn.ners_dqn import NERSCallback

    class MyCallback(RLlibCallback):
        pass

    config = enable_ners(DQNConfig().environment("CartPole-v1").callbacks(MyCallback))
    assert config.callbacks_class == [MyCallback, NERSCallback]
    # Idempotent; RLlib's no-op default gives way.
    assert enable_ners(config).callbacks_class == [MyCallback, NERSCallback]
    assert enable_ners(DQNConfig()).callbacks_class is NERSCallback
    with pytest.raises(ValueError, match="learner_class DQNTorchLearner would be"):
        enable_ners(DQNConfig().learners(learner_class=DQNTorchLearner))


def test_an_unknown_method_names_the_choices():
    with pytest.raises(
        ValueError,
        match=re.escape("method must be one of 'relo', 'laber', got 'per'."),
    ):
        enable_replay(DQNConfig(), "per")


@pytest.mark.parametrize(
    "method, settings, expected",
    [
        ("laber", {"alpha": 0.6}, "got alpha."),
        ("relo", {"laber_m": 4}, "got laber_m."),
        ("relo", {"sampler": "laber"}, "got sampler."),
    ],
)
def test_a_setting_the_method_does_not_take_is_refused(method, settings, expected):
    with pytest.raises(ValueError, match=re.escape(expected)) as error:
        enable_replay(DQNConfig(), method, **settings)
    assert f"enable_replay(config, {method!r}) takes the settings " in str(error.value)


@pytest.mark.parametrize(
    "method, settings, expected",
    [
        ("relo", {"relo_transform": "log"},
         "`relo_transform` must be one of ('clip', 'exp'), got relo_transform='log'"),
        ("laber", {"laber_weights": "sum"},
         "`laber_weights` must be one of ('mean', 'lazy', 'max'), got "
         "laber_weights='sum'"),
        ("laber", {"laber_m": 0}, "laber_m"),
    ],
)  # fmt: skip
def test_a_wrong_value_is_refused_naming_the_setting(method, settings, expected):
    """The buffer's own checks, on a probe of it, before the config changes."""
    config = SACConfig()
    before = dict(config.replay_buffer_config)
    with pytest.raises(ValueError, match=re.escape(expected)) as error:
        enable_replay(config, method, **settings)
    assert str(error.value).startswith(
        "enable_replay: Bad replay_buffer_config for "
        "FastPrioritizedEpisodeReplayBuffer: "
    )
    assert config.replay_buffer_config == before  # left as it was


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: ACERConfig(), "ACERConfig has no Learner"),
        (lambda: NERSDQNConfig(), "NERSDQNConfig replays with NERS"),
    ],
)
def test_configs_without_a_learner_for_it_are_refused(make, name):
    with pytest.raises(ValueError, match=name):
        enable_replay(make(), "relo")


def test_a_frozen_config_is_refused():
    config = DQNConfig()
    config.freeze()
    with pytest.raises(AttributeError, match="frozen"):
        enable_replay(config, "laber")


@pytest.mark.parametrize("route", ["enable_replay", "enable_ners"])
def test_a_multi_agent_config_is_refused_before_training(route):
    from rllib_ners import enable_ners

    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .multi_agent(
            policies={"p0", "p1"},
            policy_mapping_fn=lambda agent_id, *args, **kwargs: "p0",
        )
    )
    enable = (
        (lambda c: enable_replay(c, "relo"))
        if route == "enable_replay"
        else enable_ners
    )
    with pytest.raises(
        ValueError,
        match=f"{route}: single-agent configs only.*FastMultiAgentPrioritized",
    ):
        enable(config)


def test_relo_on_a_uniform_config_takes_relos_alpha_and_beta():
    # TD3's default buffer replays uniformly (alpha 0, beta 0): carried over,
    # ReLo's priorities would never reach the draw.
    assert TD3Config().replay_buffer_config["alpha"] == 0.0
    config = enable_replay(TD3Config().environment("Pendulum-v1"), "relo")
    assert config.replay_buffer_config["alpha"] == 0.5
    assert config.replay_buffer_config["beta"] == 0.4
    config.validate()
    with pytest.raises(ValueError, match=re.escape("got alpha=0, which draws")):
        enable_replay(TD3Config().environment("Pendulum-v1"), "relo", alpha=0.0)


@pytest.mark.parametrize(
    "buffer_config, settings, message",
    [
        ({"alpha": 0.0}, {}, "NERS replay with replay_buffer_config['alpha']=0.0"),
        ({"min_priority": -1.0}, {}, "`min_priority` must be a finite number > 0"),
        ({"storage_unit": "timesteps"}, {}, "Unknown replay buffer settings"),
        ({}, {"replay_reward_mode": "eval_return"}, "needs evaluation workers"),
        (
            {},
            {"lr": -1},
            "`lr=-1` is invalid: the sampler learning rate must be a "
            "finite number > 0. Fix it with `enable_ners(config, lr=...)`.",
        ),
    ],
)
def test_enable_ners_refuses_what_a_stock_validate_would_let_through(
    buffer_config, settings, message
):
    config = DQNConfig().environment("CartPole-v1")
    config.training(replay_buffer_config=buffer_config)
    with pytest.raises(ValueError, match=r"^enable_ners: .*" + re.escape(message)):
        rllib_ners.enable_ners(config, **settings)


def test_laber_names_the_prioritized_settings_it_replaces(caplog):
    logger = "rllib_ners.algorithms.enable_replay"
    config = DQNConfig().environment("CartPole-v1")
    with caplog.at_level(logging.WARNING, logger=logger):
        enable_replay(config, "laber")  # RLlib's default alpha and beta
    assert not caplog.records
    config.training(replay_buffer_config={"alpha": 0.4, "min_priority": 1.0})
    with caplog.at_level(logging.WARNING, logger=logger):
        buffer_config = enable_replay(config, "laber").replay_buffer_config
    (record,) = caplog.records
    assert "the config's alpha=0.4, min_priority=1.0 are replaced" in record.message
    assert buffer_config["alpha"] == 0.0 and buffer_config["beta"] == 0.0
    assert "min_priority" not in buffer_config
