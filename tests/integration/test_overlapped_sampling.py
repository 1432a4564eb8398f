"""Overlapped sampling (`config.training(overlap_sampling=True)`): remote
EnvRunners sample while the Learner updates.

Checked here: every fragment that comes back is stored once (the buffer's added
steps equal the sampled steps the metrics count); the replay ratio per env step
is the lockstep loop's; every fragment's weights are at most
`max_weights_staleness` updates old and the staleness is reported; the
Learner's updates run while requests are in flight; off, training is the
lockstep loop's, update for update; NERS-SAC and TD3 take it too. A killed EnvRunner
under overlapped sampling is in `test_faults.py`; the learning run in
`tests/learning/test_overlapped_sampling_learning.py`.
"""

import logging

import numpy as np
import pytest
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
)

from rllib_ners import RainbowDQNConfig
from rllib_ners.algorithms.common.training import replay_loop
from rllib_ners.algorithms.common.training.overlapped_sampling import (
    NUM_WEIGHTS_SYNCS,
    UPDATES_WHILE_SAMPLING_FRACTION,
    WEIGHTS_STALENESS_MAX,
    WEIGHTS_STALENESS_MEAN,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
RAY_NUM_CPUS = 4  # for the conftest's `ray_session`

FRAGMENT, BATCH, LEARNING_STARTS = 8, 32, 100
# Two EnvRunners of 8-step fragments and batches of 32: RLlib's native replay
# ratio is one update per round of 16 env steps, 2 trained env steps per
# sampled one.
SETTINGS = {
    "num_env_runners": 2,
    "rollout_fragment_length": FRAGMENT,
    "train_batch_size_per_learner": BATCH,
    "learning_starts": LEARNING_STARTS,
    "min_sample_timesteps_per_iteration": 400,
}
TRAINED_PER_SAMPLED = BATCH / (2 * FRAGMENT)


def _counts(result):
    sampled = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
    trained = int(result[LEARNER_RESULTS][ALL_MODULES][NUM_ENV_STEPS_TRAINED_LIFETIME])
    return sampled, trained


def _weights(algo):
    module = algo.learner_group.get_state()["learner"]["rl_module"]
    return {k: np.asarray(v) for k, v in module[DEFAULT_MODULE_ID].items()}


def test_overlapped_sampling_stores_every_fragment_and_holds_the_replay_ratio(
    small_dqn, caplog
):
    algo = small_dqn(**SETTINGS, overlap_sampling=True, max_weights_staleness=2)
    with caplog.at_level(logging.INFO, logger=replay_loop.__name__):
        algo = algo.build_algo()
    # The setup line names the request size, and what makes it larger.
    assert (
        f"2 EnvRunner(s), {FRAGMENT} env steps per request "
        f"(rollout_fragment_length={FRAGMENT} x num_envs_per_env_runner=1). "
        "Each request costs the driver" in caplog.text
    )
    try:
        for _ in range(3):
            result = algo.train()
        sampled, trained = _counts(result)
        buffer = algo.local_replay_buffer
        # Held fragments (stored while the Learner waited) are counted in the
        # next round: at most a few fragments between the two counts.
        assert 0 <= buffer.get_added_timesteps() - sampled <= 2 * FRAGMENT
        assert sampled >= 3 * 400
        # Updates are owed from the round that passes the learning start on
        # (counted whole: up to a fragment from each EnvRunner before it);
        # whole updates only, the rest carried over.
        assert TRAINED_PER_SAMPLED * (sampled - LEARNING_STARTS) - BATCH <= trained
        assert trained <= TRAINED_PER_SAMPLED * (
            sampled - LEARNING_STARTS + 2 * FRAGMENT
        )
        assert result[WEIGHTS_STALENESS_MAX] <= 2
        assert 0 <= result[WEIGHTS_STALENESS_MEAN] <= result[WEIGHTS_STALENESS_MAX]
        # Requests are sent before the updates a round owes: the EnvRunners
        # sample while the Learner works.
        assert result[UPDATES_WHILE_SAMPLING_FRACTION] == 1.0
    finally:
        algo.stop()


def test_the_staleness_bound_makes_the_learner_wait(small_dqn):
    """With 8 updates of 8 per fragment of 8 steps (training_intensity 8) and a
    bound of 1 update, the Learner waits for requests between updates: each
    fragment still arrives at most 1 update stale, and the replay ratio is the
    configured one."""
    settings = {**SETTINGS, "train_batch_size_per_learner": 8, "training_intensity": 8}
    algo = small_dqn(**settings, overlap_sampling=True, max_weights_staleness=1)
    algo = algo.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        assert result[WEIGHTS_STALENESS_MAX] <= 1
        # The configured ratio itself (RLlib's lockstep weights would give
        # (2 + 1) / 2 times it with 2 EnvRunners): 8 trained per sampled step.
        sampled, trained = _counts(result)
        # (A round can also count fragments stored while the Learner waited.)
        assert 8 * (sampled - LEARNING_STARTS) - 8 <= trained
        assert trained <= 8 * (sampled - LEARNING_STARTS + 4 * FRAGMENT)
    finally:
        algo.stop()


def test_weights_are_synced_at_most_every_weights_sync_interval_updates(small_dqn):
    """One update per 16 sampled env steps: rounds of one or two 8-step
    fragments make at most one update or two, so with an interval of 1 nearly
    every such round syncs, and with 3 at most one sync per 3 updates; each
    fragment's staleness stays within the default bound (twice the interval)."""
    syncs = {}
    for interval in (1, 3):
        algo = small_dqn(
            **SETTINGS, overlap_sampling=True, weights_sync_interval=interval
        ).build_algo()
        try:
            for _ in range(2):
                result = algo.train()
            trained_before = _counts(result)[1]
            result = algo.train()
            updates = (_counts(result)[1] - trained_before) // BATCH
        finally:
            algo.stop()
        syncs[interval] = result[NUM_WEIGHTS_SYNCS]
        assert updates >= 20
        # (The iteration's first sync can count updates of the one before.)
        assert 1 <= syncs[interval] <= updates // interval + 1
        assert result[WEIGHTS_STALENESS_MAX] <= 2 * interval
    assert syncs[1] >= updates // 3
    assert syncs[3] < syncs[1]


def test_without_overlap_training_is_the_lockstep_loops(small_dqn):
    """`overlap_sampling=False` (the default) is the lockstep loop: no requests
    in flight, every round samples one fragment from each EnvRunner (16 env
    steps) and stores all of it before its updates, and from the round that
    passes the learning start on, each round makes exactly its one update of
    32 (RLlib's native ratio, 2 trained env steps per sampled one)."""
    algo = small_dqn(**SETTINGS, overlap_sampling=False).build_algo()
    try:
        assert algo.overlapped_sampler is None
        for _ in range(2):
            result = algo.train()
        for key in (WEIGHTS_STALENESS_MEAN, NUM_WEIGHTS_SYNCS):
            assert key not in result
        sampled, trained = _counts(result)
        assert algo.local_replay_buffer.get_added_timesteps() == sampled
        rounds = sampled // (2 * FRAGMENT)
        assert sampled == rounds * 2 * FRAGMENT
        rounds_before_learning = LEARNING_STARTS // (2 * FRAGMENT)
        assert trained == (rounds - rounds_before_learning) * BATCH
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "algorithm, weights_sync_interval", [("ners_sac", 1), ("td3_ners", 4)]
)
def test_continuous_control_trains_with_overlapped_sampling(
    algorithm, weights_sync_interval, small_sac, small_td3
):
    build = small_sac if algorithm == "ners_sac" else small_td3
    config = build(
        "ners",
        num_env_runners=2,
        learning_starts=100,
        min_sample_timesteps_per_iteration=200,
        overlap_sampling=True,
        weights_sync_interval=weights_sync_interval,
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        sampled, trained = _counts(result)
        assert trained > 0
        assert algo.local_replay_buffer.get_added_timesteps() >= sampled
        # The sampler's scores reached the tree.
        buffer = algo.local_replay_buffer
        stored = np.flatnonzero(buffer.storage.is_transition)
        assert np.ptp(buffer.get_priorities(stored)) > 0
        assert WEIGHTS_STALENESS_MAX in result
        assert result[NUM_WEIGHTS_SYNCS] >= 1
    finally:
        algo.stop()


def test_a_config_our_loop_cannot_serve_fails_at_build(small_dqn):
    config = small_dqn(
        RainbowDQNConfig(),
        **SETTINGS,
        overlap_sampling=True,
        replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"},
    )
    with pytest.raises(ValueError, match="overlap_sampling=True.*cannot serve"):
        config.build_algo()


@pytest.mark.parametrize("flag", ["cuda_graph_updates", "act_on_learner_device"])
def test_a_learner_device_flag_our_loop_cannot_serve_fails_at_build(small_dqn, flag):
    # Both work through this package's loop only (the deferred updates, the
    # shared weights); RLlib's training step would silently leave them unused.
    config = small_dqn(
        RainbowDQNConfig(),
        replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"},
        **{flag: True},
    )
    with pytest.raises(ValueError, match=f"{flag}=True.*cannot serve"):
        config.build_algo()
