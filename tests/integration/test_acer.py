"""ACER inside RLlib: training steps with uniform, prioritised and NERS replay,
behaviour logits stored with the data, metrics, several Learners, bad settings."""

import os
import sys

import numpy as np
import pytest
import ray
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns

from rllib_ners import ACER, NERSEpisodeReplayBuffer
from rllib_ners.algorithms.acer.acer import ACER_RESULTS
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.ners.ners_learner import NERS_RESULTS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
RAY_NUM_CPUS = 4  # for the conftest's `ray_session`

# Functions sent to Learner actors must travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("replay", ["ners", "per", "uniform"])  # helpers ACER_REPLAY
def test_train_with_each_buffer(replay, small_acer):
    algo = small_acer(replay).build_algo()
    try:
        module = local_learner(algo).module[DEFAULT_MODULE_ID].unwrapped()
        before = {k: v.clone() for k, v in module.state_dict().items()}
        for _ in range(3):
            result = algo.train()
        learner = result["learners"][DEFAULT_MODULE_ID]
        for key in ("policy_loss", "q_loss", "entropy", "q_ret_mean"):
            assert np.isfinite(learner[key]), key
        # ACER's default: trust region on, KL to the average policy reported.
        assert np.isfinite(learner["kl_average_policy"])
        acer = result[ACER_RESULTS]
        assert acer["num_on_policy_updates_lifetime"] >= 1
        # Poisson(2) off-policy updates per step, on average.
        ratio = (
            acer["num_off_policy_updates_lifetime"]
            / acer["num_on_policy_updates_lifetime"]
        )
        assert 1.0 < ratio < 3.0
        after = module.state_dict()
        for key in before:
            assert not torch.equal(before[key], after[key]), key  # incl. average nets
        buffer = algo.local_replay_buffer
        buffer.check_invariants()
        # Behaviour policy mu: the acting logits are stored with every step.
        storage = buffer.storage
        logits = storage.extra[Columns.ACTION_DIST_INPUTS][storage.is_transition]
        assert logits.shape[1] == 2 and np.isfinite(logits).all()
        assert np.abs(logits).sum() > 0
        priorities = buffer.get_priorities(np.flatnonzero(buffer.storage.is_transition))
        if replay == "uniform":
            np.testing.assert_array_equal(priorities, 1.0)  # never updated
        else:
            assert np.unique(priorities).size > 10  # learned per sequence start
        if replay == "ners":
            assert isinstance(buffer, NERSEpisodeReplayBuffer)
            ners = result[NERS_RESULTS]
            assert ners["num_sampler_updates_lifetime"] >= 1
            assert 0.0 < ners["score_mean"] < 1.0
            # Scored starts hold sigma^alpha in (0, 1) (new data: max priority)
            # and a refreshed feature cache: delta = |Q_ret - Q|, q = V(s).
            slots = np.flatnonzero(buffer.storage.is_transition)
            scored = slots[buffer.get_priorities(slots) < 1.0]
            assert scored.size > 10
            delta = buffer.slot_memory.delta[scored]
            assert np.all(delta >= 0.0) and not np.all(delta == 1.0)
            assert not np.all(buffer.slot_memory.q[scored] == 1.0)
    finally:
        algo.stop()


def test_on_policy_acer_without_replay_and_fixed_ratio(small_acer):
    algo = (
        small_acer("uniform")
        .training(replay_ratio=0, replay_ratio_distribution="fixed")
        .build_algo()
    )
    try:
        result = algo.train()
        assert result[ACER_RESULTS]["num_off_policy_updates_lifetime"] == 0
        assert result[ACER_RESULTS]["num_on_policy_updates_lifetime"] >= 1
    finally:
        algo.stop()


def test_remote_env_runners_and_remote_learner(small_acer):
    algo = small_acer("ners", num_learners=1, num_env_runners=2).build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        assert result[ACER_RESULTS]["num_off_policy_updates_lifetime"] > 0
        assert np.isfinite(result["learners"][DEFAULT_MODULE_ID]["q_loss"])
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


def _snapshot(learner):
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    return {
        "pid": os.getpid(),
        "module": {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()},
        "scorer": {
            k: v.detach().cpu().numpy()
            for k, v in learner.ners.scorer.state_dict().items()
        },
    }


def test_two_learners_keep_modules_average_policies_and_samplers_identical(small_acer):
    """No seed: the Learners start apart; DDP, the Polyak update and the NERS
    broadcast/all-reduce keep every weight equal after each iteration."""
    algo = small_acer("ners", num_learners=2, seed=None).build_algo()
    try:
        for _ in range(2):
            algo.train()
            first, second = [
                r.get() for r in algo.learner_group.foreach_learner(_snapshot)
            ]
            assert first["pid"] != second["pid"]
            for part in ("module", "scorer"):
                assert first[part].keys() == second[part].keys()
                for key in first[part]:
                    np.testing.assert_array_equal(
                        first[part][key], second[part][key], err_msg=key
                    )
        assert algo.ners_sampler_update.num_updates >= 1
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


def test_tune_finds_acer_by_name():
    from ray.tune.registry import get_trainable_cls

    assert get_trainable_cls("ACER") is ACER
