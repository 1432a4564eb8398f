"""The greedy action of `rllib-ners evaluate --render` and of the study's
evaluations maps the module's action to the env's bounds as RLlib's EnvRunner
does (unsquash with `normalize_actions`, clip with `clip_actions`)."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_ners.cli.evaluate import _greedy_action


class _FixedModule:
    """Stands in for an RLModule whose inference action is always `action`."""

    def __init__(self, action):
        self.action = torch.as_tensor([action])

    def forward_inference(self, batch):
        assert batch["obs"].shape[0] == 1
        return {"actions": self.action}


PENDULUM_TORQUE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


@pytest.mark.parametrize(
    "normalize, clip, squashed, expected",
    [
        (True, False, [0.5], [1.0]),  # [-1, 1] -> [-2, 2]
        (True, False, [-1.0], [-2.0]),
        (False, True, [3.0], [2.0]),  # clipped to the bounds
        (False, False, [0.5], [0.5]),  # passed through
    ],
)
def test_box_actions_reach_the_env_bounds_like_rllibs_env_runner(
    normalize, clip, squashed, expected
):
    config = SimpleNamespace(normalize_actions=normalize, clip_actions=clip)
    action = _greedy_action(
        _FixedModule(squashed), np.zeros(3), PENDULUM_TORQUE, config
    )
    np.testing.assert_allclose(action, expected)


def test_discrete_actions_stay_integers():
    config = SimpleNamespace(normalize_actions=True, clip_actions=False)
    action = _greedy_action(
        _FixedModule(1), np.zeros(4), gym.spaces.Discrete(2), config
    )
    assert action == 1 and isinstance(action, int)
