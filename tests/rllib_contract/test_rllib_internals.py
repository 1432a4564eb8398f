"""The RLlib/Ray internals this package still relies on, one check each.

The package is pinned to `ray[rllib]>=2.60,<2.61`. Where RLlib 2.60 has no public
route for what we need, we use a private name; each such use has a test here that
fails with a message saying what changed in RLlib and which of our modules to
adapt. After a Ray upgrade, run `python -m pytest tests/rllib_contract` first: it
is the upgrade check (see docs/contributing.md, "Upgrading Ray").
"""

from __future__ import annotations

import inspect

import gymnasium as gym
import numpy as np
import pytest


def _fail(what_changed: str, ours: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt {ours}."


# -------------------------------------------------------------- AlgorithmConfig
def test_algorithm_config_value_error_raises_value_error():
    from ray.rllib.algorithms.dqn import DQNConfig

    config = DQNConfig()
    assert hasattr(config, "_value_error"), _fail(
        "AlgorithmConfig._value_error is gone", "every validate() of ours"
    )
    with pytest.raises(ValueError, match="contract"):
        config._value_error("contract")


def test_algorithm_config_translates_special_keys_and_keeps_learner_connector():
    from ray.rllib.algorithms.dqn import DQNConfig

    config = DQNConfig()
    params = inspect.signature(config._translate_special_keys).parameters
    assert "warn_deprecated" in params, _fail(
        "AlgorithmConfig._translate_special_keys(key, warn_deprecated=...)",
        "rllib_ners/cli (config overrides)",
    )
    assert config._translate_special_keys("lr", warn_deprecated=False) == "lr"
    assert hasattr(config, "_learner_connector"), _fail(
        "AlgorithmConfig._learner_connector (set by config.training(learner_"
        "connector=...)) is gone",
        "rllib_ners/algorithms/common/columnar_replay.py (_can_replay_columns)",
    )
    assert config._learner_connector is None
    config.training(learner_connector=lambda *a, **k: None)
    assert config._learner_connector is not None


# ------------------------------------------------------------------ Algorithm
def test_algorithm_builds_replay_buffers_through_the_hook_we_override():
    from ray.rllib.algorithms.algorithm import Algorithm

    hook = getattr(Algorithm, "_create_local_replay_buffer_if_necessary", None)
    assert hook is not None, _fail(
        "Algorithm._create_local_replay_buffer_if_necessary is gone",
        "rllib_ners/algorithms/common/replay_checkpoint.py (ReplayStateMixin)",
    )
    # Ray adds `_ray_trace_ctx` to Algorithm methods once it has run an
    # Algorithm as an actor in this process; that is not a change of the hook.
    params = [
        name
        for name in inspect.signature(hook).parameters
        if not name.startswith("_ray_trace")
    ]
    assert params == ["self", "config"], _fail(
        "the signature of Algorithm._create_local_replay_buffer_if_necessary",
        "rllib_ners/algorithms/common/replay_checkpoint.py (ReplayStateMixin)",
    )
    setup_source = inspect.getsource(Algorithm.setup)
    assert "_create_local_replay_buffer_if_necessary" in setup_source, _fail(
        "Algorithm.setup no longer builds the replay buffer through "
        "_create_local_replay_buffer_if_necessary",
        "rllib_ners/algorithms/common/replay_checkpoint.py (ReplayStateMixin)",
    )
    # RLlib marks the buffers it builds by passing this kwarg; the NERS buffer
    # tells a stock algorithm's build from a hand-made buffer by it.
    assert "metrics_num_episodes_for_smoothing" in inspect.getsource(hook), _fail(
        "Algorithm no longer passes metrics_num_episodes_for_smoothing to episode "
        "buffers",
        "rllib_ners/replay_buffers/ners_episode_buffer.py "
        "(_check_scored_by_ners_learner)",
    )


def test_checkpointable_check_component():
    from ray.rllib.algorithms.algorithm import Algorithm

    check = getattr(Algorithm, "_check_component", None)
    assert check is not None, _fail(
        "Checkpointable._check_component is gone",
        "ReplayStateMixin.get_state and the NERS learner's get_state",
    )
    assert list(inspect.signature(check).parameters)[1:4] == [
        "name",
        "components",
        "not_components",
    ], _fail("the signature of Checkpointable._check_component", "our get_state()s")


def test_synchronous_parallel_sample_takes_the_new_stack_flags():
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    params = inspect.signature(synchronous_parallel_sample).parameters
    for flag in ("_uses_new_env_runners", "_return_metrics"):
        assert flag in params, _fail(
            f"synchronous_parallel_sample lost its `{flag}` argument (DQN's new-"
            f"stack training step passed it in 2.60)",
            "rllib_ners/algorithms/common/training_ops.py (sample_into_buffer)",
        )


# ------------------------------------------------------------------- Learner
def test_torch_learner_attributes_of_the_fused_gradient_step():
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    source = inspect.getsource(TorchLearner)
    for name in ("_grad_scalers", "_lr_scheduler_classes", "_params"):
        assert f"self.{name}" in source, _fail(
            f"TorchLearner.{name} is gone",
            "rllib_ners/algorithms/common/fast_torch_learner.py",
        )
    from ray.rllib.core.learner.learner import Learner

    assert "self._module_optimizers" in inspect.getsource(Learner), _fail(
        "Learner._module_optimizers is gone",
        "rllib_ners/algorithms/common/fast_torch_learner.py",
    )
    apply_source = inspect.getsource(TorchLearner.apply_gradients)
    assert "isfinite" in apply_source, _fail(
        "TorchLearner.apply_gradients no longer checks gradients for nan/inf; "
        "our fused check replaces exactly that pass",
        "rllib_ners/algorithms/common/fast_torch_learner.py",
    )


# ----------------------------------------------------------------- RLModules
def _broken_catalog_module(module_class):
    class BrokenCatalog:
        def __init__(self, *args, **kwargs):
            raise ValueError("contract: catalog refused the spaces")

    return module_class(
        observation_space=gym.spaces.Box(-1, 1, (4,), np.float32),
        action_space=gym.spaces.Discrete(2),
        model_config={},
        catalog_class=BrokenCatalog,
    )


@pytest.mark.parametrize("which", ["rainbow", "acer"])
def test_rl_module_keeps_catalog_errors_for_setup_to_raise(which):
    if which == "rainbow":
        from rllib_ners.rl_modules.rainbow import RainbowTorchRLModule as Module
    else:
        from rllib_ners.algorithms.acer.torch.default_acer_torch_rl_module import (
            DefaultACERTorchRLModule as Module,
        )
    # Our setup() re-raises RLModule._catalog_ctor_error: a bad model config
    # must fail with its own message, not as "catalog is None" later.
    with pytest.raises(ValueError, match="contract: catalog refused"):
        _broken_catalog_module(Module)


def test_dqn_module_routes_q_values_through_qf_forward_helper():
    from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import (
        DefaultDQNTorchRLModule,
    )

    helper = getattr(DefaultDQNTorchRLModule, "_qf_forward_helper", None)
    assert helper is not None, _fail(
        "DefaultDQNTorchRLModule._qf_forward_helper is gone",
        "rllib_ners/rl_modules/rainbow/torch/rainbow_torch_rl_module.py",
    )
    assert list(inspect.signature(helper).parameters)[:4] == [
        "self",
        "batch",
        "encoder",
        "head",
    ], _fail(
        "the signature of _qf_forward_helper(batch, encoder, head)",
        "RainbowTorchRLModule._qf_forward_helper",
    )
    routes = {
        "compute_q_values": ("_qf_forward_helper",),
        "forward_target": ("_qf_forward_helper",),
        "_forward_train": ("compute_q_values", "forward_target"),
    }
    for method, callees in routes.items():
        source = inspect.getsource(getattr(DefaultDQNTorchRLModule, method))
        for callee in callees:
            assert callee in source, _fail(
                f"DefaultDQNTorchRLModule.{method} no longer calls {callee} (our "
                f"noisy/C51 heads in _qf_forward_helper would be bypassed)",
                "RainbowTorchRLModule",
            )


# -------------------------------------------------------------- replay buffer
def test_our_buffer_answers_every_public_method_of_rllibs_prioritized_buffer():
    """We subclass RLlib's `PrioritizedEpisodeReplayBuffer` (DQN routes TD errors
    only to instances of it) without running its `__init__`: our storage is
    different. A public method RLlib adds or changes would then read state that
    we never set; every one must work on our buffer."""
    from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
        PrioritizedEpisodeReplayBuffer,
    )
    from ray.rllib.utils.replay_buffers.utils import (
        update_priorities_in_episode_replay_buffer,
    )

    from rllib_ners import FastPrioritizedEpisodeReplayBuffer

    assert "PrioritizedEpisodeReplayBuffer" in inspect.getsource(
        update_priorities_in_episode_replay_buffer
    ), _fail(
        "DQN no longer routes TD errors to PrioritizedEpisodeReplayBuffer instances",
        "the base class of rllib_ners/replay_buffers/fast_prioritized_episode_"
        "buffer.py",
    )
    _check_public_methods(
        PrioritizedEpisodeReplayBuffer, FastPrioritizedEpisodeReplayBuffer(100)
    )


def test_our_multi_agent_buffer_answers_every_public_method_of_rllibs():
    """The same for the multi-agent buffer, which skips the `__init__`s of
    RLlib's multi-agent buffers."""
    from ray.rllib.utils.replay_buffers import (
        MultiAgentPrioritizedEpisodeReplayBuffer,
    )

    from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer

    _check_public_methods(
        MultiAgentPrioritizedEpisodeReplayBuffer,
        FastMultiAgentPrioritizedEpisodeReplayBuffer(100),
    )


def _check_public_methods(rllib_class, buffer) -> None:
    """Every public method of `rllib_class` callable without arguments works on
    our (empty) `buffer`."""
    no_argument_methods = [
        name
        for name, member in inspect.getmembers(rllib_class)
        if not name.startswith("_")
        and callable(member)
        and all(
            p.default is not inspect.Parameter.empty
            or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            for p in list(inspect.signature(member).parameters.values())[1:]
        )
    ]
    broken = {}
    for name in no_argument_methods:
        if name in ("sample", "add", "update_priorities", "set_state"):
            continue  # need data; covered by the buffer's own tests
        try:
            getattr(buffer, name)()
        except Exception as error:  # noqa: BLE001 - report them all at once
            broken[name] = f"{type(error).__name__}: {error}"
    assert not broken, _fail(
        f"these public methods of {rllib_class.__name__} fail on our buffer: {broken}",
        f"{type(buffer).__name__} (override them)",
    )


def test_item_series_stats_keep_the_logged_values_in_items():
    import torch
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    logger = MetricsLogger()
    rows = torch.arange(8.0).reshape(4, 2)
    logger.log_value(("m", "td_error"), rows, reduce="item_series")
    stats = logger.reduce()["m"]["td_error"]
    items = getattr(stats, "items", None)
    assert items is not None and len(items) == 1, _fail(
        "item-series stats no longer keep the logged values in `.items`",
        "rllib_ners/algorithms/common/replay_checkpoint.py (_logged_arrays)",
    )
    np.testing.assert_array_equal(np.asarray(items[0]), rows.numpy())
    np.testing.assert_array_equal(np.asarray(stats.peek()[0]), rows.numpy())
