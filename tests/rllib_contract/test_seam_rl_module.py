"""Contract of `rllib_ners.seam.rl_module`: the RLModule/Catalog internals we use."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import (
    DefaultPPOTorchRLModule,
)
from ray.rllib.core.columns import Columns

from rllib_ners.seam.rl_module import exploration_pass, inference_pass, training_pass


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/rl_module.py."


@pytest.fixture
def module():
    torch.manual_seed(0)
    from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog

    return DefaultPPOTorchRLModule(
        observation_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
        action_space=gym.spaces.Discrete(2),
        model_config={"fcnet_hiddens": [8]},
        catalog_class=PPOCatalog,
    )


@pytest.mark.parametrize(
    "ours, rllib, mode",
    [
        (exploration_pass, "forward_exploration", "eval"),
        (inference_pass, "forward_inference", "eval"),
        (training_pass, "forward_train", "train"),
    ],
)
def test_each_pass_computes_what_the_public_forward_computes(module, ours, rllib, mode):
    batch = {Columns.OBS: torch.linspace(-1, 1, 12).reshape(3, 4)}
    getattr(module, mode)()
    with torch.no_grad():
        expected = getattr(module, rllib)(batch)
        getattr(module, mode)()
        got = ours(module, batch)
    assert got.keys() == expected.keys(), _fail(f"{rllib}() outputs other keys")
    for key in got:
        torch.testing.assert_close(got[key], expected[key])
    assert module.training == (mode == "train"), _fail(
        f"the {rllib} implementation switches the module's mode"
    )
