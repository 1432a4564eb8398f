"""Contract of `rllib_ners.seam.config`: the AlgorithmConfig internals we use."""

from __future__ import annotations

from unittest import mock

import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rllib_ners.seam.config import (
    ModelConfigIncludesHook,
    config_attribute_for_key,
    custom_env_to_module_connector,
    custom_learner_connector,
    custom_module_to_env_connector,
    custom_optimizer_stepping,
    raise_config_error,
    thawed,
    user_learner_class,
    user_rl_module_spec,
)


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/config.py."


def _connector(env, spaces, device):
    return []


def test_custom_connectors_are_the_ones_the_user_set():
    config = DQNConfig()
    assert custom_env_to_module_connector(config) is None, _fail(
        "a fresh config has an env-to-module connector"
    )
    assert custom_module_to_env_connector(config) is None
    config.env_runners(
        env_to_module_connector=_connector, module_to_env_connector=_connector
    )
    assert custom_env_to_module_connector(config) is _connector, _fail(
        "env_runners(env_to_module_connector=...) is no longer kept as "
        "_env_to_module_connector"
    )
    assert custom_module_to_env_connector(config) is _connector, _fail(
        "env_runners(module_to_env_connector=...) is no longer kept as "
        "_module_to_env_connector"
    )


def test_custom_learner_connector_is_the_one_the_user_set():
    config = DQNConfig()
    assert custom_learner_connector(config) is None, _fail(
        "a fresh config has a learner connector"
    )
    config.training(learner_connector=_connector)
    assert custom_learner_connector(config) is _connector, _fail(
        "training(learner_connector=...) is no longer kept as _learner_connector"
    )


def test_user_learner_class_is_only_the_one_the_user_set():
    config = DQNConfig()
    assert user_learner_class(config) is None, _fail(
        "a fresh config has a user Learner class (_learner_class)"
    )
    assert config.learner_class is DQNTorchLearner
    config.learners(learner_class=DQNTorchLearner)
    assert user_learner_class(config) is DQNTorchLearner, _fail(
        "learners(learner_class=...) is no longer kept as _learner_class"
    )


def test_custom_optimizer_stepping_is_what_experimental_set():
    import torch

    config = DQNConfig()
    assert custom_optimizer_stepping(config) == [], _fail(
        "a fresh config sets a grad scaler or LR schedulers"
    )
    schedulers = [lambda optimizer: torch.optim.lr_scheduler.StepLR(optimizer, 1)]
    config.experimental(
        _torch_grad_scaler_class=torch.amp.GradScaler,
        _torch_lr_scheduler_classes=schedulers,
    )
    assert custom_optimizer_stepping(config) == [
        "_torch_grad_scaler_class",
        "_torch_lr_scheduler_classes",
    ], _fail("experimental(...) no longer keeps them under these names")


def test_user_rl_module_spec_is_only_the_one_the_user_set():
    config = DQNConfig()
    assert user_rl_module_spec(config) is None, _fail(
        "a fresh config has a user RLModule spec (_rl_module_spec)"
    )
    spec = RLModuleSpec(model_config={"fcnet_hiddens": [8]})
    config.rl_module(rl_module_spec=spec)
    assert user_rl_module_spec(config) is spec, _fail(
        "rl_module(rl_module_spec=...) is no longer kept as _rl_module_spec"
    )


def test_raise_config_error_raises_as_validate_does_unless_switched_off():
    from ray.rllib.algorithms import algorithm_config

    config = DQNConfig()
    with pytest.raises(ValueError, match="contract") as raised:
        raise_config_error(config, "contract")
    assert "_validate_config" in str(raised.value), _fail(
        "AlgorithmConfig._value_error no longer adds its hint on _validate_config"
    )
    config.experimental(_validate_config=False)
    with mock.patch.object(algorithm_config.logger, "warning") as warning:
        raise_config_error(config, "contract: only logged")
    assert warning.call_args == mock.call("contract: only logged"), _fail(
        "AlgorithmConfig._value_error no longer logs when _validate_config=False"
    )


class _IncludesNoisy(ModelConfigIncludesHook, DQNConfig):
    def extra_model_config_includes(self):
        return {"noisy": self.noisy}


def test_model_config_includes_hook_adds_settings_the_user_can_override():
    assert "noisy" not in DQNConfig().model_config
    config = _IncludesNoisy().training(noisy=True, num_atoms=7)
    model_config = config.model_config
    assert model_config["noisy"] is True, _fail(
        "model_config no longer merges _model_config_auto_includes"
    )
    assert model_config["num_atoms"] == 7, _fail(
        "DQNConfig's own auto-includes are lost behind ModelConfigIncludesHook"
    )
    keys = list(model_config)
    assert keys.index("noisy") > keys.index("num_atoms"), _fail(
        "the parent's auto-includes no longer come first"
    )
    config.rl_module(model_config={"noisy": False})
    assert config.model_config["noisy"] is False, _fail(
        "the user's model_config no longer wins over the auto-includes"
    )
    # RLlib's configs extend the same property.
    assert "vf_share_layers" in PPOConfig().model_config


def test_config_attribute_for_key_is_what_update_from_dict_sets():
    config = DQNConfig()
    assert config_attribute_for_key(config, "lr") == "lr", _fail(
        "AlgorithmConfig._translate_special_keys renames a plain key"
    )
    for key, attribute, value in (
        ("num_workers", "num_env_runners", 3),
        ("framework", "framework_str", "torch"),
    ):
        assert config_attribute_for_key(config, key) == attribute, _fail(
            f"AlgorithmConfig._translate_special_keys({key!r}) is no longer "
            f"{attribute!r}"
        )
        config.update_from_dict({key: value})
        assert getattr(config, attribute) == value, _fail(
            f"update_from_dict({{{key!r}: ...}}) no longer sets {attribute!r}"
        )
    assert config_attribute_for_key(config, "lambda") == "lambda_"


def test_config_attribute_for_key_passes_deprecated_keys_through():
    # RLlib raises for these only when asked to warn; update_from_dict does not.
    config = DQNConfig()
    assert config_attribute_for_key(config, "min_iter_time_s") == "min_iter_time_s", (
        _fail("AlgorithmConfig._translate_special_keys(..., warn_deprecated=False)")
    )


def test_thawed_takes_writes_and_freezes_again_however_the_block_ends():
    """RLlib refuses writes to a frozen config; `thawed` lets them through for
    its block and leaves the config as frozen as it found it."""
    config = DQNConfig().training(lr=1e-3)
    config.freeze()
    with pytest.raises(AttributeError, match="frozen"):
        config.lr = 2e-3
    with pytest.raises(RuntimeError, match="in the block"):
        with thawed(config):
            config.lr = 2e-3
            raise RuntimeError("in the block")
    assert config.lr == 2e-3
    with pytest.raises(AttributeError, match="frozen"):
        config.lr = 3e-3
    unfrozen = DQNConfig()
    with thawed(unfrozen):
        unfrozen.lr = 4e-3
    unfrozen.lr = 5e-3  # still takes writes
    assert unfrozen.lr == 5e-3
