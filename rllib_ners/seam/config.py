"""RLlib's `AlgorithmConfig`: settings it keeps under private names.

Functions here read or raise through the config's private attributes and
methods; each is pinned by `tests/rllib_contract/test_seam_config.py`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["custom_env_to_module_connector", "custom_module_to_env_connector"]


def custom_env_to_module_connector(config) -> Any:
    """The user's `config.env_runners(env_to_module_connector=...)`, or None.

    RLlib keeps the setting as `_env_to_module_connector` (the public name is
    a method building the whole pipeline)."""
    return config._env_to_module_connector


def custom_module_to_env_connector(config) -> Any:
    """The user's `config.env_runners(module_to_env_connector=...)`, or None."""
    return config._module_to_env_connector
