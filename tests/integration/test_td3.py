"""TD3 and DDPG train on RLlib's new API stack, with every replay of ours.

Small Pendulum configs (one 32-unit layer per network, batch 32): TD3 trains
with uniform, PER, LAP, PAL and NERS replay and DDPG's settings; the actor
updates every `policy_delay`-th update; LAP keeps every priority at 1 or
above and replays without importance weights; remote EnvRunners act with
the Learner's weights; two Learners stay identical; bad settings fail in
`validate()` naming the setting. That a TD3 checkpoint resumes exactly
(weights, buffer, update counts, the next iteration's results) is
`tests/integration/test_resume.py`'s `ners_td3` case.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import build_small_td3 as small_td3
from ray.rllib.core import DEFAULT_MODULE_ID

from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.td3 import DDPGConfig, TD3Config
from rllib_ners.algorithms.td3.presets import TD3_REPLAYS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]

MID = DEFAULT_MODULE_ID
RAY_NUM_CPUS = 3


@pytest.mark.parametrize("replay", sorted(TD3_REPLAYS))
def test_td3_trains_with_every_replay(replay):
    algo = small_td3(replay).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        learner = local_learner(algo)
        assert learner.update_counts[MID] > 0
        metrics = result["learners"][MID]
        assert np.isfinite(metrics["qf_loss"]) and np.isfinite(metrics["policy_loss"])
        buffer = algo.local_replay_buffer
        assert buffer.get_num_timesteps() == 800
        if replay == "ners":
            assert "ners" in result
    finally:
        algo.stop()


def test_the_actor_updates_every_policy_delay_updates():
    algo = small_td3(policy_delay=3).build_algo()
    try:
        result = algo.train()
        updates = local_learner(algo).update_counts[MID]
        actor_updates = result["learners"][MID]["num_actor_updates_lifetime"]
        assert updates > 0 and actor_updates == updates // 3
    finally:
        algo.stop()


def test_ddpg_trains_with_one_critic():
    algo = small_td3(config=DDPGConfig()).build_algo()
    try:
        algo.train()
        module = local_learner(algo).module[MID].unwrapped()
        assert not module.twin_q and not hasattr(module, "qf_twin")
    finally:
        algo.stop()


def test_lap_priorities_are_at_least_one_and_weights_are_one():
    algo = small_td3("lap").build_algo()
    try:
        algo.train()
        buffer = algo.local_replay_buffer
        stored = np.flatnonzero(buffer.storage.is_transition)
        leaves = buffer.get_priorities(stored)
        assert leaves.min() >= 1.0  # max(|delta|, 1) ** 0.4
        assert leaves.max() > 1.0
        batch = buffer.sample_batch(64)
        np.testing.assert_array_equal(batch["weights"], np.ones(64, np.float32))
        buffer.update_priorities(np.zeros(64))
        assert buffer.get_priorities(batch["indices"]).min() == 1.0
    finally:
        algo.stop()


def test_remote_env_runners_act_with_the_remote_learners_weights():
    algo = small_td3(num_env_runners=2, num_learners=1).build_algo()
    try:
        result = algo.train()
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 400
        learner_pi = algo.learner_group.get_state()["learner"]["rl_module"][MID]
        runner_pi = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.module.get_state(), local_env_runner=False
        )
        for state in runner_pi:
            for key, value in state.items():
                np.testing.assert_array_equal(
                    np.asarray(value), np.asarray(learner_pi[key])
                )
    finally:
        algo.stop()


def test_two_learners_keep_identical_modules():
    """No seed: the Learners' RNGs differ. DDP copies the weights once at
    build, so equal weights prove the updates stayed in step only after
    both Learners updated (the same number of times: the policy-delay phase
    follows the count) and the weights moved."""
    algo = small_td3(num_learners=2, seed=None).build_algo()

    # Defined here: a test module's own functions do not import in the
    # Learner actors, a closure is shipped by value.
    def learner_snapshot(learner):
        return {
            "weights": {
                key: value.detach().cpu().numpy().copy()
                for key, value in learner.module[MID].unwrapped().state_dict().items()
            },
            "update_counts": dict(learner.update_counts),
        }

    def snapshots():
        return [
            s.get() if hasattr(s, "get") else s
            for s in algo.learner_group.foreach_learner(learner_snapshot)
        ]

    try:
        built = snapshots()[0]["weights"]
        algo.train()
        first, second = snapshots()
        assert first["update_counts"] == second["update_counts"]
        assert first["update_counts"][MID] > 0
        for key in first["weights"]:
            np.testing.assert_array_equal(first["weights"][key], second["weights"][key])
        assert any(
            not np.array_equal(built[key], first["weights"][key]) for key in built
        ), "no weight moved: the Learners did not update"
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "settings, names",
    [
        ({"policy_delay": 0}, "policy_delay"),
        ({"target_noise": -0.1}, "target_noise"),
        ({"actor_lr": -1e-3}, "actor_lr"),
        ({"critic_lr": 0.0}, "critic_lr"),
        ({"tau": 1.5}, "tau"),
        ({"critic_loss": "l1"}, "critic_loss"),
        ({"random_timesteps": -1}, "random_timesteps"),
    ],
)
def test_bad_settings_fail_in_validate(settings, names):
    config = TD3Config().environment("Pendulum-v1").training(**settings)
    with pytest.raises(ValueError, match=names):
        config.validate()


def test_discrete_actions_fail_in_validate():
    with pytest.raises(ValueError, match="Box"):
        TD3Config().environment("CartPole-v1").validate()


def _relu_and_tanh_layers(config):
    """(ReLU layers, Tanh layers) of the RLModule `config` builds on Pendulum."""
    import gymnasium as gym
    import torch

    spec = config.environment("Pendulum-v1").get_rl_module_spec(
        env=gym.make("Pendulum-v1")
    )
    layers = list(spec.build().modules())
    return (
        sum(isinstance(layer, torch.nn.ReLU) for layer in layers),
        sum(isinstance(layer, torch.nn.Tanh) for layer in layers),
    )


@pytest.mark.parametrize(
    "config_class, num_networks", [(TD3Config, 3), (DDPGConfig, 2)]
)
def test_hidden_layers_are_the_papers_relu_unless_the_model_config_says_otherwise(
    config_class, num_networks
):
    """RLlib's DefaultModelConfig says tanh; TD3's default is the paper's ReLU
    (two hidden layers in the actor and each critic; the actor's output stays
    tanh), and a model_config's `fcnet_activation` still wins."""
    assert _relu_and_tanh_layers(config_class()) == (2 * num_networks, 1)
    one_layer = config_class().rl_module(model_config={"fcnet_hiddens": [8]})
    assert _relu_and_tanh_layers(one_layer) == (num_networks, 1)
    tanh = config_class().rl_module(model_config={"fcnet_activation": "tanh"})
    assert _relu_and_tanh_layers(tanh) == (0, 2 * num_networks + 1)


def test_layer_norm_is_built_into_every_hidden_layer_and_trains():
    import torch

    config = small_td3().rl_module(
        model_config={"fcnet_hiddens": [32, 32], "fcnet_use_layernorm": True}
    )
    algo = config.build_algo()
    try:
        module = local_learner(algo).module[MID]
        norms = [m for m in module.modules() if isinstance(m, torch.nn.LayerNorm)]
        # Two hidden layers x (actor, two critics), each with its target.
        assert len(norms) == 2 * 3 * 2
        before = [norm.weight.detach().clone() for norm in norms]
        algo.train()
        assert any(
            not torch.equal(norm.weight, was)
            for norm, was in zip(norms, before, strict=True)
        )
    finally:
        algo.stop()
