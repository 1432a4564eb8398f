"""Contract of `rllib_ners.seam.rl_module`: the RLModule/Catalog internals we use."""

from __future__ import annotations

import dataclasses
import inspect

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import (
    DefaultPPOTorchRLModule,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.core.models.configs import MLPEncoderConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.utils.schedules.scheduler import Scheduler

from rllib_ners.seam.rl_module import (
    advance_schedule,
    catalog_encoder_config,
    catalog_model_config,
    clear_encoder_config,
    exploration_pass,
    inference_pass,
    raise_catalog_error,
    set_catalog_model_config,
    training_pass,
    use_action_space_distribution,
)


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


_BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def _broken_catalog_module(module_class):
    class BrokenCatalog:
        def __init__(self, *args, **kwargs):
            raise ValueError("contract: catalog refused the spaces")

    return module_class(
        observation_space=_BOX,
        action_space=gym.spaces.Discrete(2),
        model_config={},
        catalog_class=BrokenCatalog,
    )


def test_raise_catalog_error_raises_what_the_catalog_raised(module):
    raise_catalog_error(module)  # a module whose catalog was built: nothing
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

    class Module(TorchRLModule):
        def setup(self):
            raise_catalog_error(self)

    with pytest.raises(ValueError, match="contract: catalog refused"):
        _broken_catalog_module(Module)


@pytest.mark.parametrize("which", ["rainbow", "acer"])
def test_our_modules_raise_their_catalog_errors(which):
    if which == "rainbow":
        from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
            RainbowTorchRLModule as Module,
        )
    else:
        from rllib_ners.algorithms.acer.torch.default_acer_torch_rl_module import (
            DefaultACERTorchRLModule as Module,
        )
    # A bad model config must fail with its own message, not as "catalog is
    # None" later.
    with pytest.raises(ValueError, match="contract: catalog refused"):
        _broken_catalog_module(Module)


def test_catalog_model_config_is_what_the_catalog_builds_from():
    catalog = Catalog(_BOX, gym.spaces.Discrete(2), {"fcnet_hiddens": [8, 6]})
    expected = dataclasses.asdict(DefaultModelConfig()) | {"fcnet_hiddens": [8, 6]}
    assert catalog_model_config(catalog) == expected, _fail(
        "Catalog no longer keeps DefaultModelConfig | model_config as "
        "_model_config_dict"
    )

    class Widened(Catalog):
        def _determine_components_hook(self):
            config = catalog_model_config(self)
            set_catalog_model_config(self, {**config, "fcnet_hiddens": [16, 6]})
            super()._determine_components_hook()

    widened = Widened(_BOX, gym.spaces.Discrete(2), {"fcnet_hiddens": [8, 6]})
    assert catalog_model_config(widened)["fcnet_hiddens"] == [16, 6]
    assert catalog_encoder_config(widened).hidden_layer_dims == [16], _fail(
        "Catalog._determine_components_hook no longer reads _model_config_dict"
    )


def test_catalog_encoder_config_builds_the_catalogs_encoder():
    catalog = Catalog(_BOX, gym.spaces.Discrete(2), {"fcnet_hiddens": [8, 6]})
    config = catalog_encoder_config(catalog)
    assert isinstance(config, MLPEncoderConfig), _fail(
        "Catalog no longer keeps an MLPEncoderConfig as _encoder_config for Box "
        "observations"
    )
    assert config.hidden_layer_dims == [8]
    assert tuple(catalog.latent_dims) == tuple(config.output_dims)
    torch.manual_seed(0)
    ours = config.build(framework="torch")
    torch.manual_seed(0)
    rllib = catalog.build_encoder(framework="torch")
    for got, want in zip(ours.parameters(), rllib.parameters(), strict=True):
        torch.testing.assert_close(got, want)


def test_a_catalog_with_its_own_encoder_keeps_rllibs_action_distribution():
    class OwnEncoder(Catalog):
        def _determine_components_hook(self):
            clear_encoder_config(self)
            use_action_space_distribution(self)
            self.latent_dims = (3,)

    for action_space in (gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))):
        ours = OwnEncoder(_BOX, action_space, {})
        rllib = Catalog(_BOX, action_space, {})
        assert catalog_encoder_config(ours) is None, _fail(
            "Catalog keeps its encoder config elsewhere than _encoder_config"
        )
        assert ours.get_action_dist_cls("torch") is rllib.get_action_dist_cls(
            "torch"
        ), _fail(
            "Catalog.get_action_dist_cls no longer calls _action_dist_class_fn "
            "(set from _get_dist_cls_from_action_space)"
        )


@pytest.mark.parametrize(
    "fixed_value_or_schedule", [[(0, 1.0), (100, 0.05)], [(0, 0.5), (3, 0.1)], 0.3]
)
def test_advance_schedule_leaves_what_update_leaves(fixed_value_or_schedule):
    ours = Scheduler(fixed_value_or_schedule, framework="torch")
    rllib = Scheduler(fixed_value_or_schedule, framework="torch")
    held = ours.get_current_value()
    for t in (0, 1, 7, 50, 99, 100, 10_000):
        advance_schedule(ours, t)
        rllib.update(t)
        got, want = ours.get_current_value(), rllib.get_current_value()
        if isinstance(want, torch.Tensor):
            assert got is held, "advance_schedule must fill the held tensor"
            assert got.dtype == want.dtype and torch.equal(got, want), _fail(
                "Scheduler.update no longer sets _curr_value to _schedule.value(t)"
            )
        else:
            assert got == want


def test_dqn_module_routes_q_values_through_qf_forward_helper():
    """`RainbowTorchRLModule` overrides RLlib's hook `_qf_forward_helper`
    (noisy and C51 heads); it must stay the route of every Q-value."""
    from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import (
        DefaultDQNTorchRLModule,
    )

    def fail(what_changed: str) -> str:
        return (
            f"RLlib changed: {what_changed}. Adapt "
            f"rllib_ners/algorithms/rainbow/torch/rainbow_torch_rl_module.py."
        )

    helper = getattr(DefaultDQNTorchRLModule, "_qf_forward_helper", None)
    assert helper is not None, fail("DefaultDQNTorchRLModule._qf_forward_helper")
    assert list(inspect.signature(helper).parameters)[:4] == [
        "self",
        "batch",
        "encoder",
        "head",
    ], fail("the signature of _qf_forward_helper(batch, encoder, head)")
    routes = {
        "compute_q_values": ("_qf_forward_helper",),
        "forward_target": ("_qf_forward_helper",),
        "_forward_train": ("compute_q_values", "forward_target"),
    }
    for method, callees in routes.items():
        source = inspect.getsource(getattr(DefaultDQNTorchRLModule, method))
        for callee in callees:
            assert callee in source, fail(
                f"DefaultDQNTorchRLModule.{method} no longer calls {callee} (our "
                f"noisy/C51 heads in _qf_forward_helper would be bypassed)"
            )


def test_sac_critic_pass_is_the_critic_rllibs_sac_module_trains():
    from ray.rllib.algorithms.sac.sac_catalog import SACCatalog
    from ray.rllib.algorithms.sac.sac_learner import QF_PREDS, QF_TWIN_PREDS
    from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import (
        DefaultSACTorchRLModule,
    )

    from rllib_ners.seam.rl_module import sac_critic_pass

    torch.manual_seed(0)
    module = DefaultSACTorchRLModule(
        observation_space=gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        model_config={"fcnet_hiddens": [8], "twin_q": True},
        catalog_class=SACCatalog,
    )
    module.make_target_networks()
    batch = {
        Columns.OBS: torch.rand(4, 3),
        Columns.NEXT_OBS: torch.rand(4, 3),
        Columns.ACTIONS: torch.rand(4, 2) * 2 - 1,
    }
    expected = module.forward_train(batch)
    for key, (encoder, head) in (
        (QF_PREDS, (module.qf_encoder, module.qf)),
        (QF_TWIN_PREDS, (module.qf_twin_encoder, module.qf_twin)),
    ):
        got = sac_critic_pass(
            module, encoder, head, batch[Columns.OBS], batch[Columns.ACTIONS]
        )
        assert torch.equal(got, expected[key]), _fail(
            "DefaultSACTorchRLModule._qf_forward_train_helper(batch, encoder, head)"
        )
