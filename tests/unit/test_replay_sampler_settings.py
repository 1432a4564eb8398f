"""The replay sampler's settings (`sampler`, `relo_*`, `laber_*`) are checked in
`validate()`, each error naming the setting and the fix.

`laber_m` and `relo_epsilon` have ranges in `SETTING_RANGES`; `sampler`,
`relo_transform` and `laber_weights` are choices, which the buffer checks
(`sampler_choice`, the samplers' `check_*_settings`) and `validate()` reports
from its probe of the buffer; a sampler setting on a buffer without a replay
sampler to choose (the NERS buffer, RLlib's), for multi-agent replay, or
belonging to another sampler than the chosen one, is refused. No Ray, no
buffer beyond `validate()`'s probe.
"""

from __future__ import annotations

import re

import pytest
import ray

from rllib_ners import (
    ACERConfig,
    NERSDQNConfig,
    NERSSACConfig,
    RainbowDQNConfig,
    TD3Config,
)
from rllib_ners.algorithms.common.config.setting_range_checks import valid_example
from rllib_ners.algorithms.common.config.setting_ranges import SETTING_RANGES
from rllib_ners.algorithms.common.learner.replay_methods import replay_method_of
from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.sampler_choice import sampler_class_for

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
# The configs whose Learners serve ReLo and LaBER.
CONFIGS = {
    "RainbowDQNConfig": lambda: RainbowDQNConfig().environment("CartPole-v1"),
    "NERSSACConfig": lambda: NERSSACConfig().environment("Pendulum-v1"),
    "TD3Config": lambda: TD3Config().environment("Pendulum-v1"),
}
RELO = {"type": FAST, "sampler": "relo", "alpha": 0.5, "beta": 0.4}
LABER = {"type": FAST, "sampler": "laber", "alpha": 0.0, "beta": 0.0}


def _with_buffer(config_name, **buffer_config):
    return CONFIGS[config_name]().training(replay_buffer_config=buffer_config)


def _rule(key):
    (rule,) = [rule for rule in SETTING_RANGES if rule.key == key]
    return rule


RANGE_CASES = [
    # (key, the sampler it belongs to, values out of range)
    ("laber_m", LABER, (0, -1, 2.5, 4.0, True, "4", float("nan"), None)),
    ("relo_epsilon", RELO, (0, 0.0, -1e-5, float("nan"), float("inf"), True, "x")),
]


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize(
    "key, sampler, value",
    [
        pytest.param(key, sampler, value, id=f"{key}={value!r}")
        for key, sampler, values in RANGE_CASES
        for value in values
    ],
)
def test_a_sampler_number_out_of_range_names_the_setting_and_a_fix(
    config_name, key, sampler, value, ray_down
):
    rule = _rule(key)
    config = _with_buffer(config_name, **sampler, **{key: value})
    with pytest.raises(ValueError) as error:
        config.validate()
    assert not ray.is_initialized()
    message = str(error.value)
    name = f"replay_buffer_config['{key}']"
    assert message.startswith(f"{name}={value!r} is not {rule.what}: "), message
    example = valid_example(rule, config)
    assert f"e.g. config.training(replay_buffer_config={{'{key}': {example!r}}})" in (
        message
    )


def test_the_sampler_numbers_have_the_papers_examples_and_bounds():
    laber_m, relo_epsilon = _rule("laber_m"), _rule("relo_epsilon")
    assert (laber_m.example, laber_m.low, laber_m.integer) == (4, 1, True)
    assert not laber_m.integral_floats  # m * B must stay an int item count
    assert (relo_epsilon.example, relo_epsilon.low, relo_epsilon.low_open) == (
        1e-5,
        0.0,
        True,
    )


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize(
    "buffer_config",
    [
        {**RELO, "relo_transform": "clip", "relo_epsilon": 1e-3},
        {**RELO, "relo_transform": "exp"},
        {**LABER, "laber_m": 1, "laber_weights": "lazy"},
        {**LABER, "laber_m": 8, "laber_weights": "max"},
        {"type": FAST, "sampler": "priority", "alpha": 0.6},
    ],
    ids=["relo-clip", "relo-exp", "laber-m1-lazy", "laber-m8-max", "priority"],
)
def test_valid_sampler_settings_validate(config_name, buffer_config):
    _with_buffer(config_name, **buffer_config).validate()


CHOICE_CASES = [
    # (key, the rest of replay_buffer_config, a wrong value, what the error says)
    ("sampler", {"type": FAST}, "per",
     "Unknown replay method sampler='per' in `replay_buffer_config`; choose one "
     "of ['laber', 'priority', 'relo']"),
    ("relo_transform", RELO, "log",
     "`relo_transform` must be one of ('clip', 'exp'), got relo_transform='log'."),
    ("relo_transform", RELO, 1,
     "`relo_transform` must be one of ('clip', 'exp'), got relo_transform=1."),
    ("laber_weights", LABER, "sum",
     "`laber_weights` must be one of ('mean', 'lazy', 'max'), got "
     "laber_weights='sum';"),
]  # fmt: skip


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize(
    "key, base, value, expected",
    [pytest.param(*case, id=f"{case[0]}={case[2]!r}") for case in CHOICE_CASES],
)
def test_a_wrong_choice_names_the_setting_the_choices_and_a_fix(
    config_name, key, base, value, expected
):
    config = _with_buffer(config_name, **base, **{key: value})
    with pytest.raises(ValueError, match=re.escape(expected)) as error:
        config.validate()
    assert str(error.value).startswith(
        "Bad replay_buffer_config for FastPrioritizedEpisodeReplayBuffer: "
    )
    assert "config.training(replay_buffer_config=" in str(error.value)


def test_acer_refuses_a_replay_sampler_it_cannot_use():
    """ACER replays sequences, which no replay sampler but PER's serves."""
    config = ACERConfig().environment("CartPole-v1")
    config.training(replay_buffer_config={**config.replay_buffer_config, **RELO})
    with pytest.raises(ValueError, match="sampler='relo'") as error:
        config.validate()
    assert "replay_buffer_config" in str(error.value)


@pytest.mark.parametrize("config_name", CONFIGS)
def test_sampler_none_is_the_buffers_default_sampler(config_name):
    """`"sampler": None`, as RLlib's settings read None: the default (PER's
    sampler, uniform at alpha 0), the same as leaving it out."""
    config = _with_buffer(config_name, type=FAST, sampler=None)
    config.validate()
    left_out = _with_buffer(config_name, type=FAST)
    assert replay_method_of(config) == replay_method_of(left_out) == "priority"
    buffer_class = FastPrioritizedEpisodeReplayBuffer
    assert sampler_class_for(None, buffer_class, {}) is buffer_class.sampler_class
    assert buffer_class.sampler_class is PrioritySampler


@pytest.mark.parametrize(
    "make",
    [
        lambda: NERSDQNConfig().environment("CartPole-v1"),
        lambda: (
            NERSSACConfig()
            .environment("Pendulum-v1")
            .training(
                replay_buffer_config={"type": "rllib_ners.NERSEpisodeReplayBuffer"}
            )
        ),
    ],
    ids=["NERSDQNConfig", "NERSSACConfig"],
)
@pytest.mark.parametrize("sampler", ["relo", "laber", "priority"])
def test_the_ners_buffer_refuses_a_sampler(make, sampler):
    config = make()
    config.validate()  # the NERS buffer without the key is fine
    config.training(replay_buffer_config={"sampler": sampler})
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"NERSEpisodeReplayBuffer replays with its own sampler ('ners'); "
            f"remove sampler={sampler!r} from `replay_buffer_config`, or use "
            f"'{FAST}' for {sampler!r}."
        ),
    ):
        config.validate()


def _with_rllibs_buffer(key, value):
    return (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(
            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", key: value}
        )
    )


@pytest.mark.parametrize(
    "key, value",
    [
        ("beta_final", 1.0),
        ("beta_annealing_timesteps", 1000),
        ("min_priority", 1.0),
        ("frame_stack", 4),
    ],
)
def test_rllibs_buffer_refuses_a_setting_it_would_ignore(key, value):
    # RLlib's buffer takes unknown keys through **kwargs and drops them.
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"replay_buffer_config['{key}'] is a setting of this package's buffers; "
            f"PrioritizedEpisodeReplayBuffer would ignore it. Set "
            f"replay_buffer_config['type'] to '{FAST}', or remove '{key}'."
        ),
    ):
        _with_rllibs_buffer(key, value).validate()
    # None is RLlib's behaviour already: accepted.
    _with_rllibs_buffer(key, None).validate()


@pytest.mark.parametrize("key, value", [("sampler", "relo"), ("laber_m", 4)])
def test_rllibs_buffer_refuses_a_sampler_setting(key, value):
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"replay_buffer_config['{key}'] (the replay sampler: ReLo, LaBER) needs "
            f"this package's buffer, got PrioritizedEpisodeReplayBuffer. Set "
            f"replay_buffer_config['type'] to '{FAST}'"
        ),
    ):
        _with_rllibs_buffer(key, value).validate()


@pytest.mark.parametrize(
    "buffer_config, key, owner, sampler",
    [
        ({**RELO, "laber_m": 4}, "laber_m", "laber", "relo"),
        ({**LABER, "relo_transform": "exp"}, "relo_transform", "relo", "laber"),
        ({"type": FAST, "alpha": 0.6, "laber_weights": "mean"}, "laber_weights",
         "laber", "priority"),
        ({"type": FAST, "alpha": 0.6, "relo_epsilon": 1e-5}, "relo_epsilon",
         "relo", "priority"),
    ],
    ids=["laber_m-with-relo", "relo_transform-with-laber", "laber-key-alone",
         "relo-key-alone"],
)  # fmt: skip
def test_a_setting_of_another_sampler_is_refused(buffer_config, key, owner, sampler):
    config = _with_buffer("NERSSACConfig", **buffer_config)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"`replay_buffer_config` sets [{key!r}], which the {sampler!r} sampler "
            f'does not read; set `"sampler"` to the method they belong to'
        ),
    ) as error:
        config.validate()
    assert f"{owner!r}: [" in str(error.value)


@pytest.mark.parametrize("sampler", ["relo", "laber"])
def test_multi_agent_replay_refuses_relo_and_laber(sampler):
    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda aid, *a, **k: "a")
        .training(
            replay_buffer_config={
                "type": "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer",
                "sampler": sampler,
            }
        )
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"FastMultiAgentPrioritizedEpisodeReplayBuffer replays with PER's "
            f"sampler only, got sampler={sampler!r}"
        ),
    ):
        config.validate()


@pytest.mark.parametrize("config_name", CONFIGS)
def test_relo_with_alpha_0_is_refused_as_uniform_replay(config_name):
    # TD3's default buffer has alpha 0: {"sampler": "relo"} alone would draw
    # uniformly under ReLo's name.
    config = _with_buffer(config_name, **{**RELO, "alpha": 0.0})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`alpha` must be > 0 with sampler='relo', got alpha=0, which draws "
            "every item with the same probability"
        ),
    ):
        config.validate()
    _with_buffer(config_name, **RELO).validate()


def test_td3s_uniform_default_with_relo_alone_is_refused():
    config = CONFIGS["TD3Config"]().training(replay_buffer_config={"sampler": "relo"})
    with pytest.raises(ValueError, match=re.escape("replay_buffer_config['alpha']")):
        config.validate()


BETA_RANGE = "must be a number in [0, 1], got"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"beta_final": 1.5}, f"`beta_final` {BETA_RANGE} beta_final=1.5"),
        ({"beta_final": "high"}, f"`beta_final` {BETA_RANGE} beta_final='high'"),
        ({"beta_final": True}, f"`beta_final` {BETA_RANGE} beta_final=True"),
        ({"beta": "0.4"}, f"`beta` {BETA_RANGE} beta='0.4'"),
        ({"alpha": "0.6"}, "`alpha` must be a finite number >= 0, got alpha='0.6'"),
        ({"seed": -1}, "`seed` must be an integer >= 0, got seed=-1"),
        ({"seed": 1.5}, "`seed` must be an integer >= 0, got seed=1.5"),
        ({"seed": "abc"}, "`seed` must be an integer >= 0, got seed='abc'"),
    ],
)
def test_a_bad_buffer_number_names_its_own_setting(settings, message):
    (name,) = settings
    if name == "beta_final":
        settings = {**settings, "beta_annealing_timesteps": 1000}
    with pytest.raises(ValueError, match=re.escape(message)):
        FastPrioritizedEpisodeReplayBuffer(capacity=100, **settings)
    # validate() reports it (the table's rule, or its probe of the buffer).
    with pytest.raises(ValueError, match=re.escape(name)):
        _with_buffer("RainbowDQNConfig", type=FAST, **settings).validate()


def test_relo_epsilon_with_the_exp_transform_is_refused():
    # "exp" maps ReLo to > 0 itself; an epsilon there would be dropped.
    config = _with_buffer(
        "RainbowDQNConfig", **RELO, relo_transform="exp", relo_epsilon=0.5
    )
    with pytest.raises(
        ValueError,
        match=re.escape("`relo_epsilon` is added by relo_transform='clip' only"),
    ):
        config.validate()
    # The default epsilon, as the presets write it beside "exp", is fine.
    _with_buffer(
        "RainbowDQNConfig", **RELO, relo_transform="exp", relo_epsilon=1e-5
    ).validate()


@pytest.mark.parametrize(
    "setting",
    [{"min_priority": 1.0}, {"beta_annealing_timesteps": 1000}],
    ids=["min_priority", "beta_annealing_timesteps"],
)
def test_laber_refuses_prioritized_replay_settings_it_would_ignore(setting):
    with pytest.raises(ValueError, match=re.escape(f"{next(iter(setting))}=")):
        _with_buffer("NERSSACConfig", **LABER, **setting).validate()
