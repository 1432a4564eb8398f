"""Contract of `rllib_ners.seam.ray_runtime`: Ray's init hooks, Tune's registry."""

from __future__ import annotations

import gymnasium as gym
import ray
from ray.tune.registry import register_env

from rllib_ners.seam.ray_runtime import registered_env_creator, run_after_every_ray_init


def _fail(what_changed: str) -> str:
    return f"Ray changed: {what_changed}. Adapt rllib_ners/seam/ray_runtime.py."


def test_a_hook_runs_after_every_ray_init_and_is_added_once(ray_down):
    calls = []

    def hook():
        calls.append(ray.is_initialized())

    run_after_every_ray_init(hook)
    run_after_every_ray_init(hook)
    for _ in range(2):
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        ray.shutdown()
    assert calls == [True, True], _fail(
        "ray.init() no longer runs ray._private.worker._post_init_hooks once each"
    )


def test_registered_env_creator_finds_what_register_env_registered():
    """The creator found is the one registered (Tune stores a pickled copy, so
    it is known by what it makes: an env carrying the config it was given
    and the name registered)."""

    def creator(env_config):
        env = gym.make("CartPole-v1")
        env.unwrapped.made_by = ("rllib_ners_contract_env", env_config["marker"])
        return env

    register_env("rllib_ners_contract_env", creator)
    found = registered_env_creator("rllib_ners_contract_env")
    assert found is not None, _fail(
        "ray.tune.registry._global_registry.contains(ENV_CREATOR, name)"
    )
    env = found({"marker": 7})
    assert env.unwrapped.made_by == ("rllib_ners_contract_env", 7), _fail(
        "ray.tune.registry._global_registry.get(ENV_CREATOR, name) returns "
        "another creator"
    )
    env.close()
    assert registered_env_creator("rllib_ners_no_such_env") is None
