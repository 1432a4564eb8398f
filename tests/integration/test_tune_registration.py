"""Tune finds our algorithms and env by name: after the import, in every Ray
session of a process (Tune's registry forgets import-time names at
ray.shutdown()), and after `register_with_tune()` while Ray is down."""

import subprocess
import sys

import ray
from ray.tune.registry import get_trainable_cls

import rllib_ners
from rllib_ners.seam.ray_runtime import registered_env_creator


def _assert_names_known():
    assert get_trainable_cls("NERS-DQN") is rllib_ners.NERSDQN
    assert get_trainable_cls("NERS-SAC") is rllib_ners.NERSSAC
    assert get_trainable_cls("RainbowDQN") is rllib_ners.RainbowDQN
    assert registered_env_creator("rllib_ners.atari") is not None


def test_import_registers_names_without_ray():
    code = (
        "import ray, rllib_ners\n"
        "from ray.tune.registry import get_trainable_cls\n"
        "assert not ray.is_initialized()\n"
        "assert get_trainable_cls('NERS-DQN') is rllib_ners.NERSDQN\n"
        "assert get_trainable_cls('NERS-SAC') is rllib_ners.NERSSAC\n"
        "assert get_trainable_cls('RainbowDQN') is rllib_ners.RainbowDQN\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_names_survive_ray_shutdown_and_reinit(ray_down):
    for _ in range(2):
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            _assert_names_known()
        finally:
            ray.shutdown()
    rllib_ners.register_with_tune()  # Ray is down again: names come back
    _assert_names_known()


def test_an_atari_config_finds_its_env_after_ray_shut_down(ray_down):
    """`with_atari` registers the env itself: an EnvRunner built without Ray
    after a Ray session ended (Tune forgot the import-time name) finds it."""
    import pytest

    pytest.importorskip("ale_py")
    from rllib_ners import RainbowDQNConfig
    from rllib_ners.env.atari_rllib import with_atari
    from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    ray.shutdown()
    config = with_atari(RainbowDQNConfig(), "MsPacman").env_runners(num_env_runners=0)
    runner = FastSingleAgentEnvRunner(config=config)
    try:
        assert sum(len(e) for e in runner.sample(num_timesteps=3)) == 3
    finally:
        runner.stop()
