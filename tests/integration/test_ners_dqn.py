"""NERS-DQN inside RLlib: training steps, both routes, metrics, errors, restore."""

import copy
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core.columns import Columns

from rllib_ners import (
    NERSEpisodeReplayBuffer,
    enable_ners,
)
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.ners.ners_learner import NERS_RESULTS
from rllib_ners.algorithms.ners.torch import torch_ners_sampler
from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
    NEXT_OBS_ENCODER_OUT,
    OBS_ENCODER_OUT,
)
from rllib_ners.replay_buffers.feedback import ReplayFeedback
from rllib_ners.replay_buffers.ners_episode_buffer import DELTA, TARGET_Q

pytestmark = pytest.mark.usefixtures("ray_session")


def _learner(algo):
    return local_learner(algo)


def _scorer_params(algo):
    return [p.detach().clone() for p in _learner(algo).ners.scorer.parameters()]


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_train_reports_ners_metrics_and_moves_the_sampler(num_env_runners, small_dqn):
    algo = small_dqn(num_env_runners=num_env_runners).build_algo()
    try:
        before = _scorer_params(algo)
        for _ in range(3):
            result = algo.train()
        ners = result[NERS_RESULTS]
        assert ners["num_sampler_updates_lifetime"] >= 1
        for key in (
            "replay_reward",
            "sampler_loss",
            "score_mean",
            "priority_entropy_normalized",
            "sampled_set_size",
        ):
            assert key in ners and np.isfinite(ners[key]), key
        assert 0.0 < ners["score_mean"] < 1.0
        after = _scorer_params(algo)
        assert any(not torch.equal(a, b) for a, b in zip(before, after))
        buffer = algo.local_replay_buffer
        assert isinstance(buffer, NERSEpisodeReplayBuffer)
        buffer.check_invariants()
        # Scored transitions hold the learner's priorities, ((|delta| + eps) *
        # exp(logit))^alpha by default, no longer the max new transitions get.
        stored = np.flatnonzero(buffer.storage.is_transition)
        scored = buffer.slot_memory.scored[stored]
        assert scored.any()
        priorities = buffer.get_priorities(stored)
        assert np.all(priorities > 0.0) and np.all(np.isfinite(priorities))
        assert len(np.unique(priorities[scored])) > 1
        # The feature cache was refreshed by the learner for scored transitions.
        assert not np.all(buffer.slot_memory.delta[stored][scored] == 1.0)
    finally:
        algo.stop()


def test_lifetime_counters_are_reported_in_iterations_without_an_update(small_dqn):
    """`num_sampler_updates_lifetime` and `num_eval_env_steps_lifetime` are in
    every iteration's result, also when no sampler update ran in it (they were
    NaN or missing then)."""
    config = small_dqn().ners(min_episodes_per_update=10**6)
    algo = config.build_algo()
    try:
        for _ in range(2):
            ners = algo.train()[NERS_RESULTS]
            assert ners["num_sampler_updates_lifetime"] == 0
            assert ners["num_eval_env_steps_lifetime"] == 0
    finally:
        algo.stop()


def test_buffer_type_may_be_the_class_object(small_dqn):
    config = small_dqn().training(
        replay_buffer_config={"type": NERSEpisodeReplayBuffer, "capacity": 3000}
    )
    algo = config.build_algo()
    try:
        assert type(algo.local_replay_buffer) is NERSEpisodeReplayBuffer
        assert algo.local_replay_buffer.capacity == 3000
        algo.train()
    finally:
        algo.stop()


def test_a_la_carte_route_with_stock_dqn_config(small_dqn):
    config = enable_ners(small_dqn(DQNConfig()), hidden_size=32, train_size=16)
    algo = config.build_algo()
    try:
        assert _learner(algo).ners.settings.hidden_size == 32
        for _ in range(2):
            result = algo.train()
        assert result["ners"]["num_sampler_updates_lifetime"] >= 1
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


def test_stock_dqn_with_ners_buffer_but_no_ners_learner_fails_at_build(small_dqn):
    config = small_dqn(DQNConfig()).training(
        replay_buffer_config={
            "type": "rllib_ners.NERSEpisodeReplayBuffer",
            "capacity": 1000,
        }
    )
    with pytest.raises(ValueError, match="enable_ners"):
        config.build_algo()


def test_ners_dqn_refuses_a_non_ners_buffer(small_dqn):
    config = small_dqn().training(
        replay_buffer_config={
            "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
            "capacity": 1000,
        }
    )
    with pytest.raises(ValueError, match="needs a NERS replay buffer"):
        config.validate()


def test_bad_ners_setting_fails_in_validate(small_dqn):
    with pytest.raises(ValueError, match="train_size"):
        small_dqn().ners(train_size=0).validate()
    with pytest.raises(ValueError, match="replay_reward_mode"):
        small_dqn().ners(replay_reward_mode="best").validate()


def test_save_restore_resumes_sampler_buffer_and_baseline(tmp_path, small_dqn):
    algo = small_dqn().build_algo()
    try:
        for _ in range(2):
            algo.train()
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        restored = Algorithm.from_checkpoint(path)
        try:
            for a, b in zip(_scorer_params(algo), _scorer_params(restored)):
                assert torch.equal(a, b)
            opt_a = _learner(algo).ners.optimizer.state_dict()["state"]
            opt_b = _learner(restored).ners.optimizer.state_dict()["state"]
            assert opt_a.keys() == opt_b.keys() and len(opt_a) > 0
            for k in opt_a:
                assert torch.equal(opt_a[k]["exp_avg"], opt_b[k]["exp_avg"])
            assert (
                algo.ners_sampler_update.baseline.get_state()
                == restored.ners_sampler_update.baseline.get_state()
            )
            old, new = algo.local_replay_buffer, restored.local_replay_buffer
            assert len(old) == len(new) > 0
            old_memory, new_memory = old.slot_memory, new.slot_memory
            np.testing.assert_array_equal(old_memory.delta, new_memory.delta)
            np.testing.assert_array_equal(
                old_memory.in_sampled_set, new_memory.in_sampled_set
            )
            a, b = old.sample_batch(32), new.sample_batch(32)
            np.testing.assert_array_equal(a["indices"], b["indices"])
            restored.train()
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_eval_return_mode_uses_evaluation_episodes_and_counts_their_steps(small_dqn):
    config = (
        small_dqn()
        .ners(replay_reward_mode="eval_return", min_episodes_per_update=5)
        .evaluation(
            evaluation_num_env_runners=0,
            evaluation_interval=1000,  # RLlib's own schedule never fires here
            evaluation_duration=2,
            evaluation_duration_unit="episodes",
        )
    )
    algo = config.build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        ners = result[NERS_RESULTS]
        assert ners["num_eval_env_steps_lifetime"] > 0
        assert ners["num_sampler_updates_lifetime"] >= 1
        assert (
            algo.ners_sampler_update.num_eval_env_steps
            == ners["num_eval_env_steps_lifetime"]
        )
    finally:
        algo.stop()


def test_eval_return_mode_without_evaluation_workers_fails_in_validate(small_dqn):
    config = small_dqn().ners(replay_reward_mode="eval_return")
    with pytest.raises(ValueError, match="evaluation"):
        config.validate()


def test_module_encoder_mode_scores_with_the_rlmodule_encoder_detached(small_dqn):
    config = small_dqn().ners(encoder="module")
    algo = config.build_algo()
    try:
        algo.train()
        learner = _learner(algo)
        assert learner.ners.scorer.encoder is None
        buffer = algo.local_replay_buffer
        buffer.sample_batch(32)
        buffer.update_feedback(
            ReplayFeedback(
                td_errors=np.ones(32), scores=np.full(32, 0.5), target_q=np.ones(32)
            )
        )
        batch = buffer.sample_sampler_training_batch(
            16, n_step=3, gamma=0.99, normalizer_size=64
        )
        batch["alpha"] = buffer.alpha
        module_params = list(learner.module["default_policy"].parameters())
        module_before = [p.detach().clone() for p in module_params]
        # RLlib zeroes grads before each update, not after: compare, not test 0.
        grads_before = [
            None if p.grad is None else p.grad.clone() for p in module_params
        ]
        scorer_before = _scorer_params(algo)
        out = learner.ners.reinforce(batch, replay_reward=1.0)
        assert np.isfinite(out["loss"])
        for p, before, grad in zip(module_params, module_before, grads_before):
            assert torch.equal(p, before)
            assert (p.grad is None and grad is None) or torch.equal(p.grad, grad)
        assert any(
            not torch.equal(a, b) for a, b in zip(scorer_before, _scorer_params(algo))
        )
    finally:
        algo.stop()


def test_module_encoder_mode_scores_with_the_training_pass_encodings(small_dqn):
    """encoder="module" scores with the encodings the agent's own forward pass
    made: the same scores as encoding again, without running the encoder."""
    algo = small_dqn().ners(encoder="module").build_algo()
    try:
        algo.train()
        learner = _learner(algo)
        module = learner.module["default_policy"]
        sample = algo.local_replay_buffer.sample_batch(32)
        batch = {
            name: torch.as_tensor(np.asarray(sample[name]))
            for name in ("obs", "new_obs", "actions", "rewards", "ts")
        }
        fwd_out = module.forward_train(
            {Columns.OBS: batch["obs"], Columns.NEXT_OBS: batch["new_obs"]}
        )
        encodings = (fwd_out[OBS_ENCODER_OUT], fwd_out[NEXT_OBS_ENCODER_OUT])
        columns = {
            **batch,
            DELTA: torch.rand(32, generator=torch.Generator().manual_seed(0)),
            TARGET_Q: torch.linspace(-1.0, 1.0, 32),
        }
        scorer_state = copy.deepcopy(learner.ners.scorer.state_dict())
        encoder_calls = []
        hook = module.encoder.register_forward_hook(
            lambda *args: encoder_calls.append(1)
        )
        try:
            shared = learner.ners.score(columns, module_encodings=encodings)
            assert not encoder_calls
            learner.ners.scorer.load_state_dict(scorer_state)  # same statistics
            encoded_again = learner.ners.score(columns)
            assert encoder_calls
        finally:
            hook.remove()
        torch.testing.assert_close(shared, encoded_again)
    finally:
        algo.stop()


@pytest.mark.slow
def test_remote_learner_runs_scoring_and_reinforce_and_sends_scores_back(small_dqn):
    """num_learners=1 puts the Learner (and the sampler nets) in its own actor;
    scores, delta and q must still reach the buffer in the Algorithm process."""
    config = small_dqn(num_env_runners=1, num_learners=1)
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        assert local_learner(algo) is None  # the Learner is remote
        assert result[NERS_RESULTS]["num_sampler_updates_lifetime"] >= 1
        buffer = algo.local_replay_buffer
        # Scored transitions hold the scorer's priorities; unscored ones the max.
        priorities = buffer.get_priorities(np.flatnonzero(buffer.storage.is_transition))
        assert np.any(priorities != priorities.max()) and np.all(priorities > 0.0)
        buffer.check_invariants()
    finally:
        algo.stop()


def test_nan_scores_never_reach_the_trees_and_training_goes_on(small_dqn):
    algo = small_dqn().build_algo()
    try:
        scorer = _learner(algo).ners.scorer
        clean_logits = scorer.logits

        def logits_with_nan(features, **kwargs):
            logits = clean_logits(features, **kwargs)
            if not torch.is_grad_enabled():  # per-batch scoring, not REINFORCE
                logits = logits.clone()
                logits[0] = float("nan")
                logits[1] = float("inf")
            return logits

        scorer.logits = logits_with_nan
        for _ in range(2):
            result = algo.train()
        buffer = algo.local_replay_buffer
        buffer.check_invariants()
        leaves = buffer.get_priorities(np.arange(buffer.capacity))
        assert np.all(np.isfinite(leaves))
        skipped = result["replay_buffer"]["num_priorities_nonfinite_skipped_lifetime"]
        # The metric is read at sample time, before that step's update.
        assert 2 <= skipped <= buffer.sampler.num_nonfinite_priorities <= skipped + 2
        assert result["ners"]["num_sampler_updates_lifetime"] >= 1
    finally:
        algo.stop()


def test_cache_encodings_with_vector_observations_is_named_as_unused(small_dqn, caplog):
    """Only image encodings are cached: asked for on CartPole, the Learner
    builds no cache and says the setting has no effect."""
    env = gym.make("CartPole-v1")
    with caplog.at_level(logging.WARNING, logger=torch_ners_sampler.__name__):
        learner = small_dqn().ners(cache_encodings=True).build_learner(env=env)
    assert learner.ners.encoding_cache is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("NERS setting cache_encodings=True has no effect")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=torch_ners_sampler.__name__):
        small_dqn().ners().build_learner(env=env)
    assert caplog.records == []
