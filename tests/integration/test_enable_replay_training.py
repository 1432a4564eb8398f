"""`rllib_ners.enable_replay` on stock RLlib configs: a stock DQN and a stock
SAC train with ReLo and LaBER replay (the package's Learner sending the
methods' feedback through RLlib's own training step), and the same config
without `enable_replay` stops at build naming it."""

from __future__ import annotations

import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.sac import SACConfig
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_ners import enable_replay
from rllib_ners.replay_buffers.sampler_choice import SAMPLER_CLASSES

pytestmark = pytest.mark.usefixtures("ray_session")


def _small_sac():
    return (
        SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=4)
        .rl_module(model_config={"fcnet_hiddens": [32]})
        .training(
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=200,
            replay_buffer_config={"capacity": 5000},
        )
        # SACConfig's one-second floor per iteration would make the number
        # of env steps an iteration samples depend on the machine's speed.
        .reporting(min_sample_timesteps_per_iteration=400, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )


@pytest.mark.parametrize("method", ["relo", "laber"])
@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_a_stock_config_trains_with_the_method(algorithm, method, small_dqn):
    stock = small_dqn(DQNConfig()) if algorithm == "dqn" else _small_sac()
    algo = enable_replay(stock, method).build_algo()
    try:
        buffer = algo.local_replay_buffer
        assert isinstance(buffer.sampler, SAMPLER_CLASSES[method])
        for _ in range(2):
            result = algo.train()
        sampled = result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
        assert buffer.get_num_timesteps() == sampled == 800
        if method == "relo":
            # Stored leaves moved off the new items' max priority 1: ReLo
            # feedback came back from the Learner and was written.
            leaves = buffer.sampler.sum_tree.leaves[: buffer.get_num_timesteps()]
            assert (leaves != 1.0).any()
        else:
            # The Learner trained on B rows drawn from the large batch of m * B
            # (SAC: each of its two critics and its actor drew B of their own),
            # never on all of it.
            draws = 3 if algorithm == "sac" else 1
            assert 0 < buffer.sampler.drawn_fraction <= draws / buffer.sampler.laber_m
    finally:
        algo.stop()


@pytest.mark.parametrize("method", ["relo", "laber"])
def test_without_enable_replay_a_stock_dqn_stops_at_build(method, small_dqn):
    settings = {"alpha": 0.0, "beta": 0.0} if method == "laber" else {}
    config = small_dqn(DQNConfig()).training(
        replay_buffer_config={
            "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
            "capacity": 1000,
            "sampler": method,
            **settings,
        }
    )
    with pytest.raises(ValueError, match=f"enable_replay\\(config, '{method}'\\)"):
        config.build_algo()
