"""Every numeric setting of every config refuses a value out of its range.

`SETTING_RANGES` (`rllib_ners/algorithms/common/config/setting_ranges.py`)
gives each numeric setting its range. These tests walk every config of the
package and every rule that covers it, set values just outside the range
(both sides where there are two, a non-integer for an integer, NaN, a bool, a
string, a schedule with one bad value) and expect `validate()` to raise a
ValueError naming the setting, with a valid value that validates; the
configs' defaults, the presets and the tuned examples still validate; and a
numeric `training()` setting without a rule (or a reason) fails.
"""

from __future__ import annotations

import inspect
import logging
import numbers
import re
from pathlib import Path

import pytest
import ray
from ray.util.debug import reset_log_once

from rllib_ners import (
    ACERConfig,
    DDPGConfig,
    NERSDQNConfig,
    NERSSACConfig,
    NERSSettings,
    RainbowDQNConfig,
    TD3Config,
)
from rllib_ners.algorithms.common.config.setting_range_checks import (
    UNSET,
    setting_value,
    valid_example,
)
from rllib_ners.algorithms.common.config.setting_ranges import (
    SETTING_RANGES,
    SettingRange,
)
from rllib_ners.algorithms.common.config.switched_settings import (
    SWITCHED_SETTINGS,
    warn_of_switched_off_settings,
)

REPO = Path(__file__).resolve().parents[2]

CONFIGS = {
    "RainbowDQNConfig": lambda: RainbowDQNConfig().environment("CartPole-v1"),
    "NERSDQNConfig": lambda: NERSDQNConfig().environment("CartPole-v1"),
    "NERSSACConfig": lambda: NERSSACConfig().environment("Pendulum-v1"),
    "TD3Config": lambda: TD3Config().environment("Pendulum-v1"),
    "DDPGConfig": lambda: DDPGConfig().environment("Pendulum-v1"),
    "ACERConfig": lambda: ACERConfig().environment("CartPole-v1"),
}

# Numeric settings with a check of their own, each raising a ValueError that
# names the setting (see the table's module docstring): bad values of each.
CHECKED_ELSEWHERE = {
    "weights_sync_interval": (0, 1.5, "1"),
    "max_weights_staleness": (0, 2.5),
    "categorical_distribution_temperature": (0.5,),
    # PPO-style epochs and minibatches: no update here reads them, so any
    # value but the default is refused (`check_no_epoch_settings`).
    "num_epochs": (2,),
    "minibatch_size": (32,),
}

# Numeric `training()` settings the table leaves alone, and why.
NOT_RANGED = {
    # The new stack reads `train_batch_size_per_learner` (ranged), which
    # falls back to train_batch_size // num_learners when unset.
    "train_batch_size": "ranged as train_batch_size_per_learner",
    # RLlib's, for parts these algorithms do not use (stateful modules,
    # aggregator actors).
    "burn_in_len": "RLlib's, for stateful modules",
    "num_aggregator_actors_per_learner": "RLlib's, unused by these algorithms",
    "max_requests_in_flight_per_aggregator_actor": "RLlib's, unused here too",
    # RLlib's SAC refuses any `lr` itself (SAC's rates are actor_lr, ...);
    # TD3 trains with actor_lr and critic_lr and never reads `lr`.
    "lr": "RLlib's SAC refuses it; TD3 does not read it",
}


def _covers(rule: SettingRange, config) -> bool:
    names = {cls.__name__ for cls in type(config).__mro__}
    covered = not rule.configs or not names.isdisjoint(rule.configs)
    return covered and setting_value(config, rule.name) is not UNSET


def _bound(bound, config):
    return setting_value(config, bound) if isinstance(bound, str) else bound


def _out_of_range(rule: SettingRange, config):
    """Values of `rule.name` just outside its range, and of the wrong kind."""
    if rule.boolean:
        # A string reads as True in Python; 1 and None are not switches either.
        return ["False", 1, None]
    low, high = _bound(rule.low, config), _bound(rule.high, config)
    step = 1 if rule.integer else 0.1
    values = [float("nan"), float("inf"), True, "x"]
    if low is not None:
        values.append(low if rule.low_open else low - step)
    if high is not None:
        values.append(high if rule.high_open else high + step)
    if rule.integer:
        values.append((low if low is not None else 0) + 1.5)
    if rule.schedule:
        good = valid_example(rule, config)
        bad = low if rule.low_open else (high + step if high is not None else "x")
        values.append([[0, good], [1000, bad]])
    if rule.n_step_range:
        values += [(3, 2), (low - step, 3)]
    return values


def _set(config, rule: SettingRange, value):
    if rule.key is not None:
        return config.training(replay_buffer_config={rule.key: value})
    return getattr(config, rule.method)(**{rule.setting: value})


def _cases():
    for config_name, make in CONFIGS.items():
        config = make()
        for rule in SETTING_RANGES:
            if _covers(rule, config):
                for value in _out_of_range(rule, config):
                    yield pytest.param(
                        config_name,
                        rule,
                        value,
                        id=f"{config_name}-{rule.name}={value!r}",
                    )


@pytest.mark.parametrize("config_name, rule, value", list(_cases()))
def test_a_value_out_of_range_names_the_setting(config_name, rule, value, ray_down):
    # Set and validated together: RLlib's setters refuse some values already.
    with pytest.raises(ValueError, match=re.escape(rule.name)) as error:
        _set(CONFIGS[config_name](), rule, value).validate()
    assert not ray.is_initialized()
    message = str(error.value)
    if f"is not {rule.what}" in message:  # ours, not an earlier check's
        assert message.startswith(f"{rule.name}={value!r} is not {rule.what}: ")
        # The fix the error quotes is a valid value.
        example = valid_example(rule, CONFIGS[config_name]())
        fix = message.split("), e.g. ")[-1]
        assert fix.startswith(f"config.{rule.method}({rule.setting}=")
        assert repr(example) in fix
        _set(CONFIGS[config_name](), rule, example).validate()


@pytest.mark.parametrize(
    "config_name, setting",
    [
        (config_name, setting)
        for config_name, make in CONFIGS.items()
        for setting in CHECKED_ELSEWHERE
        if hasattr(make(), setting)
    ],
)
def test_the_numeric_settings_checked_elsewhere_name_themselves(config_name, setting):
    for value in CHECKED_ELSEWHERE[setting]:
        bad = CONFIGS[config_name]().training(**{setting: value})
        with pytest.raises(ValueError, match=setting):
            bad.validate()


NERS_BUFFER = {
    "type": "rllib_ners.NERSEpisodeReplayBuffer",
    "alpha": 0.6,
    "beta": 0.4,
}
NUMERIC_TYPES = ("int", "float", "Optional[int]", "Optional[float]")


def _ners_cases():
    """Every numeric `.ners()` setting (`NERSSettings`, which holds their
    ranges), on every config that has `.ners()`, replaying from the NERS
    buffer."""
    import dataclasses

    from rllib_ners import NERSSettings

    fields = [
        field
        for field in dataclasses.fields(NERSSettings)
        if field.type in NUMERIC_TYPES
    ]
    assert len(fields) >= 10, fields
    ners_configs = [name for name, make in CONFIGS.items() if hasattr(make(), "ners")]
    assert len(ners_configs) == 5, ners_configs  # all but RainbowDQNConfig
    for config_name in ners_configs:
        for field in fields:
            bad = [-1, 0, float("nan"), float("inf"), True, "x"]
            if field.type.endswith("int]") or field.type == "int":
                bad.append(2.5)
            if field.name == "baseline_decay":
                bad.append(1.0)
            for value in bad:
                yield pytest.param(
                    config_name,
                    field.name,
                    value,
                    id=f"{config_name}-ners-{field.name}={value!r}",
                )


@pytest.mark.parametrize("config_name, setting, value", list(_ners_cases()))
def test_a_ners_setting_out_of_range_names_the_setting(config_name, setting, value):
    config = CONFIGS[config_name]().training(replay_buffer_config=NERS_BUFFER)
    config.validate()  # the NERS buffer itself is fine
    with pytest.raises(ValueError, match=f"NERS setting `{setting}="):
        config.ners(**{setting: value}).validate()


def _numeric(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Real):
        return True
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(item, numbers.Real) for item in _flatten(value))
    )


def _flatten(value):
    for item in value:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield item


def _training_settings(config):
    names = set()
    for cls in type(config).__mro__:
        if "training" in vars(cls):
            names |= set(inspect.signature(vars(cls)["training"]).parameters)
    return names - {"self", "kwargs"}


@pytest.mark.parametrize("config_name", CONFIGS)
def test_every_numeric_training_setting_has_a_range_or_a_reason(config_name):
    """A numeric setting added to a config's `training()` without a rule in
    SETTING_RANGES (or a reason here) fails."""
    config = CONFIGS[config_name]()
    ranged = {rule.name for rule in SETTING_RANGES if _covers(rule, config)}
    numeric = {
        name
        for name in _training_settings(config)
        if _numeric(getattr(config, name, None))
    }
    missing = numeric - ranged - set(CHECKED_ELSEWHERE) - set(NOT_RANGED)
    assert not missing, f"{config_name}: numeric settings without a range: {missing}"
    buffer_keys = {
        key for key, value in config.replay_buffer_config.items() if _numeric(value)
    }
    buffer_ranged = {rule.key for rule in SETTING_RANGES if rule.key}
    # Our buffers check their other keys themselves (the probe in validate()).
    assert buffer_keys <= buffer_ranged, buffer_keys - buffer_ranged


# Switches with a check of their own (`FastPathsConfigMixin.validate()`).
SWITCHES_CHECKED_ELSEWHERE = (
    "fast_training_loop",
    "overlap_sampling",
    "cuda_graph_updates",
    "act_on_learner_device",
)

# `training()` switches of RLlib's that these algorithms never read, and why;
# each is refused when set (test_bad_input.py).
SWITCHES_NOT_READ = {
    "shuffle_batch_per_epoch": "RLlib's, for PPO-style epochs over one batch",
    "_deterministic_loss": "RLlib's old-stack SAC loss; its new stack ignores it",
    "_use_beta_distribution": "RLlib's old-stack SAC policy; ignored as above",
}


@pytest.mark.parametrize("config_name", CONFIGS)
def test_every_switch_in_training_has_a_rule(config_name):
    """A True/False `training()` setting added without a switch rule in
    SETTING_RANGES (or a check of its own) fails: `"False"` would switch on."""
    config = CONFIGS[config_name]()
    switches = {
        name
        for name in _training_settings(config)
        if isinstance(getattr(config, name, None), bool)
    }
    ruled = {
        rule.name for rule in SETTING_RANGES if rule.boolean and _covers(rule, config)
    }
    missing = (
        switches - ruled - set(SWITCHES_CHECKED_ELSEWHERE) - set(SWITCHES_NOT_READ)
    )
    assert not missing, f"{config_name}: switches without a rule: {missing}"
    assert ruled, config_name


def test_every_rule_is_well_formed():
    for rule in SETTING_RANGES:
        assert rule.what and rule.why, rule
        for bound in (rule.low, rule.high):
            assert bound is None or isinstance(bound, (int, float, str)), rule
        assert rule.method in ("training", "env_runners", "learners"), rule
        if isinstance(rule.low, (int, float)) and isinstance(rule.high, (int, float)):
            assert rule.low < rule.high, rule
    covered = {
        config_name
        for config_name, make in CONFIGS.items()
        for rule in SETTING_RANGES
        if _covers(rule, make())
    }
    assert covered == set(CONFIGS)


@pytest.mark.parametrize("config_name", CONFIGS)
def test_the_defaults_validate(config_name):
    CONFIGS[config_name]().validate()


@pytest.mark.parametrize(
    "make",
    [
        lambda: RainbowDQNConfig().training(gamma=1.5),
        lambda: NERSDQNConfig().training(tau=-0.1),
        lambda: NERSSACConfig().environment("Pendulum-v1").training(tau=-0.1),
        lambda: DDPGConfig().environment("Pendulum-v1").training(gamma=1.5),
        lambda: TD3Config().environment("Pendulum-v1").training(tau=2.0),
    ],
)
def test_the_issues_examples_are_refused(make):
    with pytest.raises(ValueError, match=r"(gamma|tau)=-?\d"):
        make().validate()


def test_a_batch_larger_than_the_buffer_is_refused():
    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=512, replay_buffer_config={"capacity": 100})
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "train_batch_size_per_learner=512 is not a train batch size for this "
            "replay buffer: use an integer in [1, replay_buffer_config['capacity']"
            "=100]"
        ),
    ):
        config.validate()
    config.training(train_batch_size=100).validate()


def test_schedules_none_and_auto_stay_allowed():
    RainbowDQNConfig().environment("CartPole-v1").training(
        lr=[[0, 1e-3], [1000, 1e-4]],
        epsilon=[(0, 1.0), (1000, 0.0)],
        grad_clip=None,
        training_intensity=None,
        n_step=(1, 3),
    ).env_runners(rollout_fragment_length="auto").validate()
    NERSSACConfig().environment("Pendulum-v1").training(
        actor_lr=[[0, 3e-4], [1000, 1e-4]],
        target_entropy="auto",
        n_step=[1, 3],
        replay_buffer_config={"capacity": 5000.0},  # Tune's quantised floats
    ).validate()
    TD3Config().environment("Pendulum-v1").training(
        critic_lr=[[0, 3e-4], [1000, 1e-4]], target_noise=0.0
    ).validate()


def test_validation_switched_off_warns_instead(caplog):
    config = (
        RainbowDQNConfig()
        .environment("CartPole-v1")
        .training(gamma=1.5)
        .experimental(_validate_config=False)
    )
    # RLlib's loggers do not propagate to the root logger caplog listens on.
    rllib_logger = logging.getLogger("ray.rllib.algorithms.algorithm_config")
    rllib_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level("WARNING"):
            config.validate()
    finally:
        rllib_logger.removeHandler(caplog.handler)
    assert any(
        "gamma=1.5 is not a discount factor" in r.message for r in caplog.records
    )


def _presets():
    from rllib_ners.algorithms.acer.presets import (
        ACER_REPLAYS,
        atari_acer,
        cartpole_acer,
    )
    from rllib_ners.algorithms.ners.presets import SAMPLER_VARIANTS, ners_reference
    from rllib_ners.algorithms.ners_sac.presets import (
        SAC_REPLAYS,
        mujoco_sac,
        pendulum_sac,
    )
    from rllib_ners.algorithms.rainbow.presets import (
        ATARI_REPLAYS,
        atari_data_efficient_rainbow,
        atari_rainbow,
        cartpole_dqn,
        data_efficient_rainbow,
    )
    from rllib_ners.algorithms.td3.presets import TD3_REPLAYS, mujoco_td3, pendulum_td3

    yield "cartpole_dqn(Rainbow)", lambda: cartpole_dqn(RainbowDQNConfig())
    yield "cartpole_dqn(NERS)", lambda: cartpole_dqn(NERSDQNConfig())
    yield (
        "data_efficient_rainbow",
        lambda: data_efficient_rainbow(RainbowDQNConfig(), "Pong"),
    )
    yield "ners_reference", lambda: ners_reference(cartpole_dqn(NERSDQNConfig()))
    for name, settings in SAMPLER_VARIANTS.items():
        yield (
            f"sampler {name}",
            lambda settings=settings: cartpole_dqn(NERSDQNConfig()).ners(**settings),
        )
    for replay in ATARI_REPLAYS:
        yield f"atari_rainbow({replay})", lambda r=replay: atari_rainbow(replay=r)
        yield (
            f"atari_data_efficient_rainbow({replay})",
            (lambda r=replay: atari_data_efficient_rainbow(replay=r)),
        )
    for replay in ACER_REPLAYS:
        yield f"cartpole_acer({replay})", lambda r=replay: cartpole_acer(replay=r)
        yield f"atari_acer({replay})", lambda r=replay: atari_acer(replay=r)
    for replay in SAC_REPLAYS:
        yield f"pendulum_sac({replay})", lambda r=replay: pendulum_sac(replay=r)
        yield f"mujoco_sac({replay})", lambda r=replay: mujoco_sac(replay=r)
    for replay in TD3_REPLAYS:
        yield f"pendulum_td3({replay})", lambda r=replay: pendulum_td3(replay=r)
        yield f"mujoco_td3({replay})", lambda r=replay: mujoco_td3(replay=r)


@pytest.mark.parametrize("name, make", list(_presets()), ids=lambda v: v)
def test_the_presets_validate(name, make):
    config = make()
    config.validate()
    assert warn_of_switched_off_settings(config) == []
    if hasattr(config, "ners_config"):
        assert NERSSettings.from_dict(config.ners_config).switched_off() == []


# Tune resolves the sweep's search spaces before any config validates.
TUNED_EXAMPLES = sorted(
    str(path.relative_to(REPO))
    for path in (REPO / "tuned_examples").glob("*/*.py")
    if path.parent.name != "sweeps"
)


@pytest.mark.parametrize("example", TUNED_EXAMPLES)
def test_the_tuned_examples_validate(example):
    from rllib_ners.cli.overrides import load_python_example

    config, _ = load_python_example(REPO / example)
    config.validate()
    assert warn_of_switched_off_settings(config) == []
    if hasattr(config, "ners_config"):
        assert NERSSettings.from_dict(config.ners_config).switched_off() == []


def test_the_walk_tries_both_sides_of_two_sided_ranges():
    two_sided = [
        rule
        for rule in SETTING_RANGES
        if rule.low is not None and rule.high is not None
    ]
    assert {rule.name for rule in two_sided} >= {
        "gamma",
        "tau",
        "epsilon",
        "replay_buffer_config['beta']",
        "train_batch_size_per_learner",
    }
    config = RainbowDQNConfig().environment("CartPole-v1")
    values = _out_of_range(
        next(rule for rule in two_sided if rule.name == "gamma"), config
    )
    assert -0.1 in values and 1.1 in values


def test_train_batch_size_is_taken_where_rllib_reads_it():
    # RLlib's DQN copies train_batch_size into train_batch_size_per_learner.
    config = RainbowDQNConfig().environment("CartPole-v1").training(train_batch_size=64)
    config.validate()
    assert config.train_batch_size_per_learner == 64
    # The class defaults never count as the user's setting.
    for config_class, env in (
        (NERSSACConfig, "Pendulum-v1"),
        (TD3Config, "Pendulum-v1"),
        (ACERConfig, "CartPole-v1"),
    ):
        config_class().environment(env).validate()


SWITCHED_OFF = {
    "sigma0": ("RainbowDQNConfig", {"sigma0": 0.1}, {"noisy": True}),
    "v_min": ("RainbowDQNConfig", {"v_min": -5.0}, {"num_atoms": 51}),
    "v_max": ("NERSDQNConfig", {"v_max": 5.0}, {"num_atoms": 51}),
    "pal_alpha": ("TD3Config", {"pal_alpha": 0.9}, {"critic_loss": "pal"}),
    "target_noise_clip": (
        "DDPGConfig",
        {"target_noise_clip": 0.3},
        {"target_noise": 0.2},
    ),
    "trust_region_delta": (
        "ACERConfig",
        {"trust_region_delta": 5.0, "use_trust_region": False},
        {"use_trust_region": True},
    ),
    "tau": (
        "ACERConfig",
        {"tau": 0.05, "use_trust_region": False},
        {"use_trust_region": True},
    ),
    "grad_clip_by": ("NERSSACConfig", {"grad_clip_by": "value"}, {"grad_clip": 1.0}),
    **{
        f"replay_buffer_config[{key!r}]": (
            config_name,
            {"replay_buffer_config": {"alpha": 0.0, key: value}},
            {"replay_buffer_config": {"alpha": 0.6}},
        )
        for key, value, config_name in [
            ("beta", 0.4, "TD3Config"),
            ("min_priority", 1.0, "DDPGConfig"),
        ]
    },
    # The buffer takes beta's annealing only as the pair.
    **{
        f"replay_buffer_config[{key!r}]": (
            config_name,
            {
                "replay_buffer_config": {
                    "alpha": 0.0,
                    "beta_final": 1.0,
                    "beta_annealing_timesteps": 1000,
                }
            },
            {"replay_buffer_config": {"alpha": 0.6}},
        )
        for key, config_name in [
            ("beta_final", "RainbowDQNConfig"),
            ("beta_annealing_timesteps", "ACERConfig"),
        ]
    },
}
ANNEALING = [
    "replay_buffer_config['beta_final']",
    "replay_buffer_config['beta_annealing_timesteps']",
]
# What the settings of SWITCHED_OFF[setting] make warn_of_switched_off_settings name.
NAMED_TOGETHER = dict.fromkeys(ANNEALING, ANNEALING)


@pytest.mark.parametrize("setting", [rule.setting for rule in SWITCHED_SETTINGS])
def test_a_setting_its_switch_leaves_off_is_named_once(setting, caplog):
    reset_log_once()  # an earlier test may have warned already
    config_name, settings, switch_on = SWITCHED_OFF[setting]
    config = CONFIGS[config_name]().training(**settings)
    logger = "rllib_ners.algorithms.common.config.switched_settings"
    with caplog.at_level(logging.WARNING, logger=logger):
        config.validate()  # a warning, not an error: Tune may sweep the switch
        assert warn_of_switched_off_settings(config) == NAMED_TOGETHER.get(
            setting, [setting]
        )
        config.validate()
    messages = [r.getMessage() for r in caplog.records if setting in r.getMessage()]
    assert len(messages) == 1  # once per config class and setting
    assert messages[0].startswith(f"{setting}=")
    assert warn_of_switched_off_settings(CONFIGS[config_name]()) == []
    assert warn_of_switched_off_settings(config.training(**switch_on)) == []


@pytest.mark.parametrize(
    "buffer_config, method",
    [
        ({"type": "rllib_ners.NERSEpisodeReplayBuffer", "alpha": 0.6}, "NERS replay"),
        ({"alpha": 0.6, "beta": 0.4}, "prioritised replay (alpha=0.6)"),
    ],
)
def test_on_policy_acer_names_a_replay_method_it_never_uses(
    buffer_config, method, caplog
):
    reset_log_once()
    logger = "rllib_ners.algorithms.acer.acer"
    on_policy = CONFIGS["ACERConfig"]().training(
        replay_ratio=0, replay_buffer_config=buffer_config
    )
    with caplog.at_level(logging.WARNING, logger=logger):
        on_policy.validate()
        CONFIGS["ACERConfig"]().training(replay_buffer_config=buffer_config).validate()
        CONFIGS["ACERConfig"]().training(replay_ratio=0).validate()  # uniform
    (record,) = [record for record in caplog.records if record.name == logger]
    assert record.getMessage().startswith(
        f"ACER with replay_ratio=0 is on-policy: nothing is replayed, so {method}"
    )
