"""Contract of `rllib_ners.seam.config`: the AlgorithmConfig internals we read."""

from __future__ import annotations

from ray.rllib.algorithms.dqn import DQNConfig

from rllib_ners.seam.config import (
    custom_env_to_module_connector,
    custom_module_to_env_connector,
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
