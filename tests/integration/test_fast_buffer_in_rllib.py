"""FastPrioritizedEpisodeReplayBuffer as a drop-in for stock RLlib algorithms."""

import numpy as np
import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.sac import SACConfig

from rllib_ners import (
    FastMultiAgentPrioritizedEpisodeReplayBuffer,
    FastPrioritizedEpisodeReplayBuffer,
    with_replay_buffer,
)
from rllib_ners.algorithms.common.training.weight_sharing import local_learner

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"


pytestmark = pytest.mark.usefixtures("ray_session")


def _check_trained(algo, result):
    buffer = algo.local_replay_buffer
    assert type(buffer) is FastPrioritizedEpisodeReplayBuffer
    buffer.check_invariants()
    # TD errors reached the trees: some priorities moved off the initial 1.0.
    leaves = buffer.get_priorities(np.flatnonzero(buffer.storage.is_transition))
    assert np.any(np.abs(leaves - 1.0) > 1e-6)
    assert np.isfinite(result["learners"]["default_policy"]["total_loss"])


def test_stock_dqn_trains_with_the_fast_buffer():
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(
            replay_buffer_config={
                "type": FAST,
                "capacity": 5000,
                "alpha": 0.6,
                "beta": 0.4,
            },
            n_step=(1, 3),
            num_steps_sampled_before_learning_starts=200,
        )
        .reporting(min_sample_timesteps_per_iteration=400)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        _check_trained(algo, result)
        # n drawn from 1-3 per sample (fewer steps where an episode ends): a
        # mean well inside the range, neither a fixed n of 1 nor of 3.
        assert 1.3 < result["replay_buffer"]["sampled_n_step_mean"] < 2.7
    finally:
        algo.stop()


def test_stock_sac_refuses_custom_buffer_types_so_we_swap_ours_in():
    """RLlib 2.60's SACConfig.validate() accepts only RLlib's own buffer names."""
    base = (
        SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(
            replay_buffer_config={"capacity": 5000, "alpha": 0.6, "beta": 0.4},
            num_steps_sampled_before_learning_starts=200,
            train_batch_size_per_learner=64,
        )
        .reporting(min_sample_timesteps_per_iteration=250)
    )
    with pytest.raises(ValueError, match="must be of type"):
        base.copy().training(replay_buffer_config={"type": FAST}).validate()
    algo = with_replay_buffer(base, FastPrioritizedEpisodeReplayBuffer).build_algo()
    try:
        result = algo.train()
        buffer = algo.local_replay_buffer
        assert buffer.capacity == 5000 and buffer.alpha == 0.6
        assert buffer.storage.actions.dtype == np.float32
        assert buffer.storage.actions.shape[1:] == (1,)
        _check_trained(algo, result)
    finally:
        algo.stop()


@pytest.mark.parametrize("buffer_seed", [None, 11])
def test_the_swapped_in_buffer_draws_as_the_algorithms_seed_says(buffer_seed):
    """`with_replay_buffer`: the buffer is seeded by `config.seed`, as this
    package's algorithms seed theirs, unless its own config names a seed."""
    settings = {"capacity": 5000} if buffer_seed is None else {"seed": buffer_seed}
    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(replay_buffer_config={"capacity": 5000, **settings})
        .debugging(seed=7)
    )
    algo = with_replay_buffer(config, FastPrioritizedEpisodeReplayBuffer).build_algo()
    try:
        expected = FastPrioritizedEpisodeReplayBuffer(
            capacity=100, seed=7 if buffer_seed is None else buffer_seed
        )
        assert (
            algo.local_replay_buffer.rng.bit_generator.state
            == expected.rng.bit_generator.state
        )
    finally:
        algo.stop()


@pytest.mark.parametrize("route", ["enable_ners", "enable_replay"])
def test_a_stock_dqn_switched_by_enable_seeds_our_buffer(route):
    """`enable_ners` / `enable_replay` on a stock DQN: RLlib builds our buffer
    without `config.seed`; their init hook rebuilds it seeded, as this
    package's algorithms seed theirs (the draws then follow the seed)."""
    from rllib_ners import NERSEpisodeReplayBuffer, enable_ners, enable_replay

    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(replay_buffer_config={"capacity": 5000})
        .debugging(seed=5)
    )
    if route == "enable_ners":
        config, buffer_class = enable_ners(config), NERSEpisodeReplayBuffer
    else:
        config = enable_replay(config, "relo")
        buffer_class = FastPrioritizedEpisodeReplayBuffer
    algo = config.build_algo()
    try:
        buffer = algo.local_replay_buffer
        assert type(buffer) is buffer_class and buffer.capacity == 5000
        expected = FastPrioritizedEpisodeReplayBuffer(capacity=100, seed=5)
        assert buffer.rng.bit_generator.state == expected.rng.bit_generator.state
        algo.train()
        buffer.check_invariants()
    finally:
        algo.stop()


def test_class_object_type_survives_tunes_dict_round_trip():
    """Tune rebuilds trial configs with `update_from_dict`, which turns a dotted
    buffer `type` into the class; stock RLlib 2.60 then crashes on its
    `"EpisodeReplayBuffer" in type` test unless the class answers `in`."""
    base = DQNConfig().training(replay_buffer_config={"type": FAST, "capacity": 2000})
    config = DQNConfig().update_from_dict(base.to_dict())
    assert config.replay_buffer_config["type"] is FastPrioritizedEpisodeReplayBuffer
    config = config.environment("CartPole-v1").env_runners(num_env_runners=0)
    algo = config.build_algo()
    try:
        assert type(algo.local_replay_buffer) is FastPrioritizedEpisodeReplayBuffer
        assert algo.local_replay_buffer.capacity == 2000
    finally:
        algo.stop()


# ---------------------------------------------------------------- multi-agent
MULTI_AGENT_FAST = "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer"


def _two_agents(config, env_class):
    from ray.tune.registry import register_env

    name = f"rllib_ners_test_{env_class.__name__}"
    register_env(name, lambda cfg: env_class({"num_agents": 2}))
    return (
        config.environment(name)
        .env_runners(num_env_runners=0, rollout_fragment_length=4)
        .multi_agent(
            policies={"p0", "p1"},
            policy_mapping_fn=lambda agent_id, *args, **kwargs: f"p{agent_id}",
        )
        .rl_module(model_config={"fcnet_hiddens": [32]})
        .reporting(min_sample_timesteps_per_iteration=100)
    )


def _check_trained_per_module(algo, result):
    buffer = algo.local_replay_buffer
    assert type(buffer) is FastMultiAgentPrioritizedEpisodeReplayBuffer
    buffer.check_invariants()
    for module_id in ("p0", "p1"):
        assert np.isfinite(result["learners"][module_id]["total_loss"])
        module = buffer.module_buffer(module_id)
        # This module's TD errors reached its own tree.
        leaves = module.get_priorities(np.flatnonzero(module.storage.is_transition))
        assert np.any(np.abs(leaves - 1.0) > 1e-6), module_id


def test_stock_multi_agent_dqn_trains_with_the_fast_multi_agent_buffer():
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    config = _two_agents(DQNConfig(), MultiAgentCartPole).training(
        replay_buffer_config={
            "type": MULTI_AGENT_FAST,
            "capacity": 2000,
            "alpha": 0.6,
            "beta": 0.4,
        },
        n_step=2,
        num_steps_sampled_before_learning_starts=60,
        train_batch_size_per_learner=16,
    )
    algo = config.build_algo()
    try:
        _check_trained_per_module(algo, algo.train())
    finally:
        algo.stop()


def test_stock_multi_agent_sac_trains_with_the_fast_multi_agent_buffer():
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentPendulum

    config = _two_agents(SACConfig(), MultiAgentPendulum).training(
        replay_buffer_config={"capacity": 2000, "alpha": 0.6, "beta": 0.4},
        num_steps_sampled_before_learning_starts=60,
        train_batch_size_per_learner=16,
    )
    algo = with_replay_buffer(
        config, FastMultiAgentPrioritizedEpisodeReplayBuffer
    ).build_algo()
    try:
        _check_trained_per_module(algo, algo.train())
    finally:
        algo.stop()


def test_stock_multi_agent_dqn_given_the_single_agent_type_says_which_to_use():
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    config = _two_agents(DQNConfig(), MultiAgentCartPole).training(
        replay_buffer_config={"type": FAST, "capacity": 2000},
        num_steps_sampled_before_learning_starts=60,
    )
    algo = config.build_algo()
    try:
        with pytest.raises(ValueError, match=MULTI_AGENT_FAST):
            algo.train()
    finally:
        algo.stop()


def test_multi_agent_rainbow_counting_agent_steps_takes_rllibs_step():
    """The fast loop counts env steps; with count_steps_by='agent_steps' RLlib
    starts learning and ends iterations by agent steps, so its step runs."""
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    from rllib_ners import RainbowDQNConfig

    config = (
        _two_agents(RainbowDQNConfig(), MultiAgentCartPole)
        .multi_agent(count_steps_by="agent_steps")
        .training(
            replay_buffer_config={"type": MULTI_AGENT_FAST, "capacity": 2000},
            num_steps_sampled_before_learning_starts=60,
            train_batch_size_per_learner=16,
        )
    )
    algo = config.build_algo()
    try:
        assert not algo.uses_replay_loop
        assert "count_steps_by='agent_steps'" in algo.replay_loop_blocker
        _check_trained_per_module(algo, algo.train())
    finally:
        algo.stop()


def test_multi_agent_rainbow_replays_columns_per_module_in_its_fast_loop():
    """RainbowDQN's training loop serves multi-agent configs with the
    multi-agent buffer: numpy columns per module, the very batch RLlib's
    learner connector builds from the sampled episodes, each module's
    priorities back to its own tree."""
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    from rllib_ners import RainbowDQNConfig
    from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch

    config = _two_agents(RainbowDQNConfig(), MultiAgentCartPole).training(
        replay_buffer_config={
            "type": MULTI_AGENT_FAST,
            "capacity": 2000,
            "alpha": 0.6,
            "beta": 0.4,
        },
        n_step=(1, 3),
        num_steps_sampled_before_learning_starts=60,
        train_batch_size_per_learner=16,
    )
    algo = config.build_algo()
    try:
        assert algo.uses_replay_loop, algo.replay_loop_blocker
        _check_trained_per_module(algo, algo.train())
        buffer, config = algo.local_replay_buffer, algo.config
        kwargs = {"n_step": config.n_step, "gamma": config.gamma, "beta": 0.4}
        states = {
            m: buffer.module_buffer(m).rng.bit_generator.state for m in "p0 p1".split()
        }
        episodes = buffer.sample(num_items=8, sample_episodes=True, **kwargs)
        for module_id, state in states.items():  # draw the same items again
            buffer.module_buffer(module_id).rng.bit_generator.state = state
        ours = replay_train_batch(buffer, buffer.sample_batch(8, **kwargs))
        learner = local_learner(algo)
        expected = learner._learner_connector(
            rl_module=learner.module,
            batch={},
            episodes=episodes,
            shared_data={},
            metrics=learner.metrics,
        )
        assert set(ours.policy_batches) == set(expected) == {"p0", "p1"}
        for module_id, want in expected.items():
            got = ours.policy_batches[module_id]
            assert set(got) == set(want), module_id
            for key in want:
                np.testing.assert_array_equal(got[key], np.asarray(want[key]), key)
                assert np.asarray(got[key]).dtype == np.asarray(want[key]).dtype, key
    finally:
        algo.stop()


def test_a_run_moves_between_rllibs_buffer_and_ours_on_a_checkpoint(tmp_path):
    """A Rainbow DQN run checkpointed with RLlib's PER resumes with ours, and
    the other way round: the replay memory goes with it."""
    from rllib_ners import RainbowDQNConfig

    def rainbow(buffer_type, capacity):
        return (
            RainbowDQNConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=0, rollout_fragment_length=8)
            .training(
                replay_buffer_config={
                    "type": buffer_type,
                    "capacity": capacity,
                    "alpha": 0.6,
                    "beta": 0.4,
                },
                store_buffer_in_checkpoints=True,
                num_steps_sampled_before_learning_starts=64,
                train_batch_size_per_learner=16,
            )
            .reporting(min_sample_timesteps_per_iteration=96)
            .debugging(seed=0)
        )

    def memory(buffer):
        return buffer.get_num_timesteps(), buffer.get_num_episodes()

    # Ours holds RLlib's steps plus one slot per episode.
    for first, second in (
        (("PrioritizedEpisodeReplayBuffer", 2000), (FAST, 3000)),
        ((FAST, 3000), ("PrioritizedEpisodeReplayBuffer", 3000)),
    ):
        before = rainbow(*first).build_algo()
        try:
            before.train()
            path = before.save_to_path(tmp_path / first[0])
            stored = memory(before.local_replay_buffer)
        finally:
            before.stop()
        after = rainbow(*second).build_algo()
        try:
            after.restore_from_path(path)
            assert memory(after.local_replay_buffer) == stored
            after.train()
        finally:
            after.stop()
