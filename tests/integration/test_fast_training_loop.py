"""The fast training loop trains exactly as RLlib's training step does.

For the same config and seed, NERS-DQN, Rainbow DQN with our PER buffer and
NERS-SAC trained with `ReplayLoopMixin` (one loop per iteration, columnar
replay, deferred Learner metrics, shared weights) and with RLlib's own
training step and EnvRunner (`fast_training_loop=False`,
`SingleAgentEnvRunner`) end with bit-identical Learner weights, identical
replay buffers (every stored field, the weights seq no the EnvRunner stamped on
each step included) and the same training returns, and report the same
result keys. Configs the loop cannot serve fall back and say why.
"""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)
from resume_cases import assert_same_state

from rllib_ners import RainbowDQNConfig
from rllib_ners.algorithms.common.training.deferred_priorities import (
    DeferredPriorityWrites,
)
from rllib_ners.algorithms.common.training.weight_sharing import (
    MirroredWeights,
    local_learner,
    share_weights_with_local_env_runner,
)
from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
RAY_NUM_CPUS = 2
ITERATIONS = 3

PER = {
    "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
    "capacity": 5000,
    "alpha": 0.6,
    "beta": 0.4,
}


def _flat(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", value


def _train(config, *, mirror=False, defer_priorities=False):
    algo = config.build_algo()
    if mirror:  # what a Learner on a GPU gets: a one-transfer copy per round
        algo._shared_weights = share_weights_with_local_env_runner(algo, mirror=True)
        assert isinstance(algo._shared_weights, MirroredWeights)
    if defer_priorities:  # what a GPU Learner gets with uniform replay
        assert algo._deferred_priorities is None  # a CPU Learner: not by default
        algo._deferred_priorities = DeferredPriorityWrites()
    try:
        results = [algo.train() for _ in range(ITERATIONS)]
        learner = local_learner(algo)
        weights = {
            name: tensor.clone()
            for name, tensor in learner.module[DEFAULT_MODULE_ID].state_dict().items()
        }
        buffer = dict(_flat(algo.local_replay_buffer.get_state()))
        blockers = (algo.replay_loop_blocker, algo.weight_sharing_blocker)
        runner = algo.env_runner_group.local_env_runner
        learning = learner.module[DEFAULT_MODULE_ID]
        shared = all(
            any(p.data_ptr() == q.data_ptr() for q in learning.parameters())
            for p in runner.module.parameters()
        )
    finally:
        algo.stop()
    return results, weights, buffer, blockers, shared


def assert_trained_alike(fast, plain):
    results_fast, weights_fast, buffer_fast, _, _ = fast
    results_plain, weights_plain, buffer_plain, _, _ = plain
    for name, tensor in weights_fast.items():
        assert torch.equal(tensor, weights_plain[name]), name
    # Episode ids (and what is keyed by them) are RLlib's uuid4 draws.
    by_id = (
        "_partial_returns/",
        "_open_episodes/",
        "_episode_ids/",
        "_tail_slot_to_episode_id/",
    )

    def without_ids(keys):
        return sorted(k.split("/")[0] if k.startswith(by_id) else k for k in keys)

    assert without_ids(buffer_fast) == without_ids(buffer_plain)
    for prefix in by_id[:2]:  # the values keyed by id, whatever the ids

        def values(buffer, prefix=prefix):
            return sorted(
                pickle.dumps(v) for k, v in buffer.items() if k.startswith(prefix)
            )

        assert values(buffer_fast) == values(buffer_plain), prefix
    for key, value in buffer_fast.items():
        if key.startswith(by_id):
            continue
        # Every stored field: arrays, counters, the max priority, RNG states.
        assert_same_state(value, buffer_plain[key], key)
    for a, b in zip(results_fast, results_plain):
        assert (
            a[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
            == b[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME]
        )
        assert a[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN] == pytest.approx(
            b[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]
        )
        assert set(a) == set(b)
        assert set(a[LEARNER_RESULTS][DEFAULT_MODULE_ID]) == set(
            b[LEARNER_RESULTS][DEFAULT_MODULE_ID]
        )


def _plain(config):
    return (
        config.copy(copy_frozen=False)
        .training(fast_training_loop=False)
        .env_runners(env_runner_cls=SingleAgentEnvRunner)
    )


@pytest.mark.parametrize("arm", ["ners", "per"])
def test_dqn_fast_loop_equals_rllibs_training_step(arm, small_dqn, one_torch_thread):
    if arm == "ners":
        config = small_dqn()
    else:
        config = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER)
    fast, plain = _train(config), _train(_plain(config))
    assert fast[3] == (None, None) and fast[4]  # the fast loop, shared weights
    assert plain[3][0] == "config.training(fast_training_loop=False)"
    assert not plain[4]
    assert_trained_alike(fast, plain)


def _small_sac_with_exact_iterations(small_sac):
    """NERS-SAC, one update per env step from step 100, iterations of 200 env
    steps: 500 updates and 3 episode ends (the sampler's updates) in 3
    iterations."""
    return small_sac(
        rollout_fragment_length=1,
        training_intensity=32.0,
        learning_starts=100,
        min_sample_timesteps_per_iteration=200,
    ).reporting(min_time_s_per_iteration=0)


def test_sac_fast_loop_equals_rllibs_training_step(small_sac, one_torch_thread):
    # SAC's iterations last at least a second by default: the faster loop would
    # take more steps in it. Iterations of exactly 200 env steps here.
    config = _small_sac_with_exact_iterations(small_sac)
    fast, plain = _train(config), _train(_plain(config))
    assert fast[3] == (None, None) and fast[4]
    assert_trained_alike(fast, plain)


def test_deferred_priority_writes_train_as_rllibs_step_with_uniform_replay(
    small_dqn, one_torch_thread, monkeypatch
):
    """A round's priorities written after its last update, from the Learner's
    tensors (what a GPU Learner does with alpha = 0, forced here on the CPU):
    with uniform replay the same weights and buffer, and every priority
    written to the same items with the same value in the same order, as
    RLlib's training step writing each at once. With alpha = 0.6 the same
    deferral changes the draws, which is why the loop does not defer there."""
    from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer

    writes = []
    write = FastPrioritizedEpisodeReplayBuffer.update_feedback_at

    def recorded(buffer, slots, feedback, stamps=None):
        writes[-1].append((np.array(slots), np.array(feedback.td_errors)))
        return write(buffer, slots, feedback, stamps)

    monkeypatch.setattr(
        FastPrioritizedEpisodeReplayBuffer, "update_feedback_at", recorded
    )
    # 8 updates per round of 4 env steps, from env step 100 to 450: 700 each.
    short = {"learning_starts": 100, "min_sample_timesteps_per_iteration": 150}
    uniform = small_dqn(
        RainbowDQNConfig(),
        replay_buffer_config={**PER, "alpha": 0.0},
        training_intensity=64,
        **short,
    )
    writes.append([])
    deferred = _train(uniform, defer_priorities=True)
    writes.append([])
    plain = _train(_plain(uniform))
    assert_trained_alike(deferred, plain)
    assert deferred[2]["_max_priority"] == plain[2]["_max_priority"] > 1.0
    assert len(writes[0]) == len(writes[1]) > 100
    for (slots, values), (plain_slots, plain_values) in zip(*writes):
        np.testing.assert_array_equal(slots, plain_slots)
        np.testing.assert_array_equal(values, plain_values)

    prioritized = small_dqn(
        RainbowDQNConfig(), replay_buffer_config=PER, training_intensity=64, **short
    )
    deferred, at_once = (
        _train(prioritized, defer_priorities=True),
        _train(prioritized),
    )
    assert not np.array_equal(
        deferred[2]["sum_tree/leaves"], at_once[2]["sum_tree/leaves"]
    )


def test_deferred_laber_feedback_trains_as_feedback_written_at_once(
    small_dqn, one_torch_thread, monkeypatch
):
    """LaBER's feedback rows (its large batch is uniform, alpha 0) held to the
    round's end, as a local GPU Learner holds them: the same weights and
    buffer, and the same surrogates and draw counts written to the same items
    in the same order, as writing each update's at once. On the H200 the held
    rows were flattened into TD errors (2026-12-04: "Got replay feedback on
    384 items for 128 sampled items")."""
    from rllib_ners.algorithms.common.config.sampler_presets import (
        laber_buffer_settings,
    )
    from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer

    writes = []
    write = FastPrioritizedEpisodeReplayBuffer.update_feedback_at

    def recorded(buffer, slots, feedback, stamps=None):
        writes[-1].append(
            (np.array(slots), feedback.td_errors.copy(), feedback.times_drawn.copy())
        )
        return write(buffer, slots, feedback, stamps)

    monkeypatch.setattr(
        FastPrioritizedEpisodeReplayBuffer, "update_feedback_at", recorded
    )
    laber = small_dqn(
        RainbowDQNConfig(),
        replay_buffer_config={**PER, **laber_buffer_settings()},
        training_intensity=64,
        learning_starts=100,
        min_sample_timesteps_per_iteration=150,
    )
    writes.append([])
    deferred = _train(laber, defer_priorities=True)
    writes.append([])
    at_once = _train(laber)
    assert_trained_alike(deferred, at_once)
    assert len(writes[0]) == len(writes[1]) > 50
    for held, written in zip(*writes):
        for held_values, written_values in zip(held, written):
            np.testing.assert_array_equal(held_values, written_values)


@pytest.mark.parametrize("algorithm", ["dqn", "sac"])
def test_mirrored_weights_train_as_rllibs_copy_does(
    algorithm, small_dqn, small_sac, one_torch_thread
):
    """The EnvRunner of a Learner on another device acts with its own copy of
    the weights, refreshed in one flat transfer (`MirroredWeights`): the same
    weights, buffer and returns as RLlib's training step with its weight sync.
    Mirrored here on the CPU; the gpu suite runs it across devices."""
    if algorithm == "dqn":
        config = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER)
    else:
        config = _small_sac_with_exact_iterations(small_sac)
    mirrored, plain = _train(config, mirror=True), _train(_plain(config))
    assert not mirrored[4]  # the EnvRunner's parameters are its own tensors
    assert_trained_alike(mirrored, plain)


def test_mirrored_weights_follow_a_restored_learner(
    small_dqn, one_torch_thread, monkeypatch, tmp_path
):
    """A restored algorithm mirrors its restored Learner's weights: the
    EnvRunner acts with them right after the restore and after further
    updates (a mirror of parameters the restore replaced would go stale)."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_ners.algorithms.common.training import replay_loop

    monkeypatch.setattr(
        replay_loop,
        "share_weights_with_local_env_runner",
        lambda algo: share_weights_with_local_env_runner(algo, mirror=True),
    )

    def acts_with_learner_weights(algo):
        learning = dict(
            local_learner(algo).module[DEFAULT_MODULE_ID].named_parameters()
        )
        runner = algo.env_runner_group.local_env_runner
        return all(
            torch.equal(param, learning[name])
            and param.data_ptr() != learning[name].data_ptr()
            for name, param in runner.module.named_parameters()
        )

    algo = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER).build_algo()
    restored = None
    try:
        algo.train()
        algo.train()
        path = algo.save_to_path(str(tmp_path / "checkpoint"))
        restored = Algorithm.from_checkpoint(path)
        assert isinstance(restored._shared_weights, MirroredWeights)
        assert acts_with_learner_weights(restored)
        before = {
            name: p.clone()
            for name, p in local_learner(restored)
            .module[DEFAULT_MODULE_ID]
            .named_parameters()
        }
        restored.train()
        after = local_learner(restored).module[DEFAULT_MODULE_ID].named_parameters()
        assert any(not torch.equal(p, before[name]) for name, p in after)  # updated
        assert acts_with_learner_weights(restored)
    finally:
        if restored is not None:
            restored.stop()
        algo.stop()


def _four_sub_envs(small_dqn):
    """Four sub-envs, one vector step per fragment, one update of 32 per 4 env
    steps configured."""
    return small_dqn(
        RainbowDQNConfig(),
        replay_buffer_config=PER,
        rollout_fragment_length=1,
        training_intensity=8.0,
        n_step=1,
    ).env_runners(num_envs_per_env_runner=4)


def test_vector_envs_keep_the_replay_ratio_per_env_step(small_dqn, one_torch_thread):
    """Four sub-envs, one vector step per fragment; one update of 32 per 4 env
    steps configured. A sub-env's reset step takes no env step, so fragments
    often hold 5-7 env steps: the updates follow the env steps, not the
    fragments (RLlib's step makes one update per fragment)."""
    config = _four_sub_envs(small_dqn)
    algo = config.build_algo()
    try:
        algo.train()
        result = algo.train()
        runner = algo.env_runner_group.local_env_runner
        assert isinstance(runner, FastSingleAgentEnvRunner) and runner.num_envs == 4
        assert runner.uses_fast_sampling
        from ray.rllib.utils.metrics import ALL_MODULES, NUM_ENV_STEPS_TRAINED

        sampled = result[ENV_RUNNER_RESULTS]["num_env_steps_sampled"]
        trained = result[LEARNER_RESULTS][ALL_MODULES][NUM_ENV_STEPS_TRAINED]
        assert abs(trained - 8 * sampled) <= 32  # at most a part-update carried
    finally:
        algo.stop()


def test_a_carried_part_update_is_restored_from_a_checkpoint(
    small_dqn, one_torch_thread, tmp_path
):
    """The fraction of an update a round owes carries over (see above); a
    checkpoint keeps it, so a restored run makes the updates the saved one
    would have made."""
    config = _four_sub_envs(small_dqn)
    algo, restored = config.build_algo(), config.build_algo()
    try:
        for _ in range(5):
            algo.train()
            if algo._updates_owed:
                break
        assert 0 < algo._updates_owed < 1
        algo.save_to_path(str(tmp_path))
        restored.restore_from_path(str(tmp_path))
        assert restored._updates_owed == algo._updates_owed
    finally:
        algo.stop()
        restored.stop()


def test_metrics_are_reduced_once_per_iteration(small_dqn, one_torch_thread):
    config = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER)
    algo = config.build_algo()
    try:
        learner = local_learner(algo)
        reduces = []
        original = learner.metrics.reduce

        def counting_reduce(*args, **kwargs):
            reduces.append(1)
            return original(*args, **kwargs)

        learner.metrics.reduce = counting_reduce
        algo.train()
        result = algo.train()
        assert len(reduces) == 2  # one per iteration, not one per update
        assert result[TIMERS]["learner_update_timer"] > 0
        assert "qf_loss" in result[LEARNER_RESULTS][DEFAULT_MODULE_ID]
    finally:
        algo.stop()


def test_configs_it_cannot_serve_take_rllibs_step(small_dqn, caplog):
    config = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER).training(
        learner_connector=lambda *args, **kwargs: []
    )
    with caplog.at_level(logging.INFO, logger="rllib_ners.algorithms.common"):
        algo = config.build_algo()
    try:
        assert algo.replay_loop_blocker == "a custom learner connector is set"
        assert any("RLlib's training step" in r.getMessage() for r in caplog.records)
        algo.train()
    finally:
        algo.stop()


def test_log_level_info_prints_why_a_config_takes_rllibs_step(
    small_dqn, capfd, monkeypatch
):
    """`log_level="INFO"` prints this package's lines as it does RLlib's, with
    no logging set up by the user (pytest's own handlers taken off)."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    package = logging.getLogger("rllib_ners")
    monkeypatch.setattr(package, "handlers", [])
    level = package.level
    config = (
        small_dqn(RainbowDQNConfig(), replay_buffer_config=PER)
        .training(fast_training_loop=False)
        .debugging(log_level="INFO")
    )
    algo = config.build_algo()
    try:
        err = capfd.readouterr().err
        assert (
            "-- RainbowDQN trains with RLlib's training step: "
            "config.training(fast_training_loop=False)." in err
        )
    finally:
        algo.stop()
        package.setLevel(level)


def test_remote_env_runners_get_the_weights_sent(small_dqn, one_torch_thread):
    config = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER, num_env_runners=1)
    algo = config.build_algo()
    try:
        assert algo.uses_replay_loop
        assert "remote EnvRunners" in algo.weight_sharing_blocker
        algo.train()
        result = algo.train()
        assert result[TIMERS]["synch_weights"] > 0
        learner_weights = (
            local_learner(algo).module[DEFAULT_MODULE_ID].get_state(inference_only=True)
        )
        runner_weights = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.module.get_state(), local_env_runner=False
        )[0]
        for name, value in runner_weights.items():
            np.testing.assert_array_equal(
                np.asarray(value), np.asarray(learner_weights[name]), err_msg=name
            )
    finally:
        algo.stop()
