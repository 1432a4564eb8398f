"""Ray core and Tune: a start-up hook and the env registry.

Pinned by `tests/rllib_contract/test_seam_ray_runtime.py`.
"""

from __future__ import annotations

from typing import Callable, Optional

__all__ = ["registered_env_creator", "run_after_every_ray_init"]


def run_after_every_ray_init(hook: Callable[[], None]) -> None:
    """Runs `hook()` after every `ray.init()` of this process (once per hook).

    Tune's registry writes import-time registrations into the first Ray
    session's KV store and then forgets them, so after `ray.shutdown()` and a
    new `ray.init()` a name registered at import would be unknown. Ray runs
    the hooks of `ray._private.worker._post_init_hooks` after each init, right
    after Tune's own flush hook; there is no public way to add one.
    """
    import ray._private.worker as ray_worker

    if hook not in ray_worker._post_init_hooks:
        ray_worker._post_init_hooks.append(hook)


def registered_env_creator(name: str) -> Optional[Callable]:
    """The env creator registered under `name` with `ray.tune.register_env`,
    or None. Tune exposes registration but no lookup; RLlib itself looks envs
    up in `ray.tune.registry._global_registry`."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    if not _global_registry.contains(ENV_CREATOR, name):
        return None
    return _global_registry.get(ENV_CREATOR, name)
