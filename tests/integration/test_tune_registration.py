"""Tune finds our algorithms by name in every Ray session of a process, not just
the first (Tune's registry forgets import-time registrations at ray.shutdown())."""

import ray
from ray.tune.registry import get_trainable_cls

import rllib_ners


def test_names_survive_ray_shutdown_and_reinit():
    for _ in range(2):
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            assert get_trainable_cls("NERS-DQN") is rllib_ners.NERSDQN
            assert get_trainable_cls("RainbowDQN") is rllib_ners.RainbowDQN
        finally:
            ray.shutdown()
