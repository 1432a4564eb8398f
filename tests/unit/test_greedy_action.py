"""The greedy action of `rllib-ners evaluate --render` and of the study's
evaluations maps the module's action to the env's bounds as RLlib's EnvRunner
does (unsquash with `normalize_actions`, clip with `clip_actions`)."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_ners.env.greedy_action import greedy_action


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
    action = greedy_action(_FixedModule(squashed), np.zeros(3), PENDULUM_TORQUE, config)
    np.testing.assert_allclose(action, expected)


def test_discrete_actions_stay_integers():
    config = SimpleNamespace(normalize_actions=True, clip_actions=False)
    action = greedy_action(_FixedModule(1), np.zeros(4), gym.spaces.Discrete(2), config)
    assert action == 1 and isinstance(action, int)


def _sac_module(**model_config):
    from rllib_ners.algorithms.ners_sac.torch.sac_torch_rl_module import (
        SACTorchRLModule,
    )

    torch.manual_seed(0)
    return SACTorchRLModule(
        observation_space=gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        action_space=PENDULUM_TORQUE,
        model_config={"fcnet_hiddens": [8], "twin_q": True, **model_config},
    )


# Pre-tanh means and log-stds as the policy head would output them.
SAC_LOGITS = torch.tensor([[0.9, -1.0], [1.5, 0.0], [-3.0, 0.5]])


def test_sacs_greedy_action_is_the_squashed_mean():
    """tanh(mean) in [-1, 1] (the SAC paper's and SB3's greedy action), where
    RLlib 2.60 acts with the pre-tanh mean, clipped by the EnvRunner."""
    module = _sac_module()
    dist = module.get_inference_action_dist_cls().from_logits(SAC_LOGITS)
    greedy = dist.to_deterministic().sample()
    torch.testing.assert_close(greedy, torch.tanh(SAC_LOGITS[:, :1]))
    assert abs(float(greedy[0, 0]) - 0.7163) < 1e-4  # not 0.9
    assert abs(float(greedy[1, 0]) - 0.9051) < 1e-4  # not 1.0 after clipping


def test_sacs_greedy_action_reaches_the_bounds_through_the_evaluation():
    module = _sac_module()
    with torch.no_grad():
        out = module.forward_inference({"obs": torch.zeros(1, 3)})
    expected = 2.0 * torch.tanh(out["action_dist_inputs"][0, :1]).numpy()
    config = SimpleNamespace(normalize_actions=True, clip_actions=False)
    action = greedy_action(module, np.zeros(3), PENDULUM_TORQUE, config)
    np.testing.assert_allclose(action, expected, rtol=1e-6)


def test_rllibs_greedy_action_stays_available():
    module = _sac_module(greedy_action="pre_tanh_mean")
    dist = module.get_inference_action_dist_cls().from_logits(SAC_LOGITS)
    torch.testing.assert_close(dist.to_deterministic().sample(), SAC_LOGITS[:, :1])
    with pytest.raises(ValueError, match="greedy_action"):
        _sac_module(greedy_action="mode")


def test_sac_explores_and_trains_with_rllibs_distribution():
    from ray.rllib.core.distribution.torch.torch_distribution import (
        TorchSquashedGaussian,
    )

    module = _sac_module()
    assert module.get_exploration_action_dist_cls() is TorchSquashedGaussian
    assert module.get_train_action_dist_cls() is TorchSquashedGaussian
