"""NERS-DQN and NERS-SAC across processes: remote EnvRunners and Learners, two
DDP Learners, and the Learner-device placement of the sampler (checked on the
meta device).

Each test builds one small CartPole algorithm; a module-scoped Ray session with 4
logical CPUs holds 2 EnvRunners + 1 Learner, or 2 Learners.
"""

import gc
import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch

from rllib_ners import NERSEpisodeReplayBuffer
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.ners.torch.torch_ners_sampler import sampler_tensors
from rllib_ners.ners.reinforce import priority_base
from rllib_ners.ners.scorer import SCALAR_STATISTICS, NERSScorer
from rllib_ners.ners.settings import NERSSettings
from rllib_ners.replay_buffers.ners_episode_buffer import (
    DELTA,
    SAMPLE_POSITION,
    TARGET_Q,
)

pytestmark = pytest.mark.slow

# Functions sent to Learner actors must travel by value: the actors cannot
# import this test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


RAY_NUM_CPUS = 4  # for the conftest's `ray_session`
# small_dqn's settings that every config here changes.
SETTINGS = {
    "train_batch_size_per_learner": 16,
    "min_sample_timesteps_per_iteration": 300,
}


# Functions run on the Learners through `foreach_learner` (module level: pickled).
def _learner_snapshot(learner):
    """Everything that must agree between Learners, as CPU numpy arrays."""
    module = learner.module["default_policy"]
    optimizer_state = learner.ners.optimizer.state_dict()["state"]
    return {
        "pid": os.getpid(),
        "module": [p.detach().cpu().numpy().copy() for p in module.parameters()],
        "scorer": {
            k: v.detach().cpu().numpy().copy()
            for k, v in learner.ners.scorer.state_dict().items()
        },
        "adam_exp_avg": [
            s["exp_avg"].cpu().numpy().copy() for s in optimizer_state.values()
        ],
        # Adam counts its steps per parameter: the Learner's REINFORCE steps.
        "reinforce_steps": sorted({int(s["step"]) for s in optimizer_state.values()}),
    }


def _scorer_state(learner):
    return {k: v.detach().cpu() for k, v in learner.ners.scorer.state_dict().items()}


def _snapshots(algo):
    return [r.get() for r in algo.learner_group.foreach_learner(_learner_snapshot)]


def _assert_same_arrays(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_remote_learner_holds_the_sampler_and_runs_reinforce(ray_session, small_dqn):
    """2 EnvRunners + 1 remote Learner: the scorer exists only in the Learner
    actor, and its REINFORCE steps (Adam's step count) match the algorithm's."""
    gc.collect()
    # Scorers an earlier test left alive (e.g. in a saved traceback) are not
    # this Learner's.
    scorers_before = {id(o) for o in gc.get_objects() if type(o) is NERSScorer}
    algo = small_dqn(num_env_runners=2, num_learners=1, **SETTINGS).build_algo()
    try:
        before = _snapshots(algo)[0]
        for _ in range(3):
            result = algo.train()
        after = _snapshots(algo)[0]

        assert local_learner(algo) is None
        assert after["pid"] != os.getpid()
        gc.collect()
        assert not [
            o
            for o in gc.get_objects()
            if type(o) is NERSScorer and id(o) not in scorers_before
        ]
        assert algo.env_runner_group.num_healthy_remote_workers() == 2

        num_updates = algo.ners_sampler_update.num_updates
        assert num_updates >= 1
        assert result["ners"]["num_sampler_updates_lifetime"] == num_updates
        assert before["reinforce_steps"] == []
        assert after["reinforce_steps"] == [num_updates]
        assert any(
            not np.array_equal(before["scorer"][k], after["scorer"][k])
            for k in before["scorer"]
        )
        buffer = algo.local_replay_buffer
        buffer.check_invariants()
        # Scores came back from the remote Learner: sigma^alpha in (0, 1).
        priorities = buffer.get_priorities(np.flatnonzero(buffer.storage.is_transition))
        assert np.any(priorities < 1.0)
    finally:
        algo.stop()


def test_two_learners_keep_modules_and_samplers_identical(ray_session, small_dqn):
    """No seed, so the two Learners' torch RNGs differ: DDP syncs the RLModules,
    and the sampler must be broadcast at build and averaged in REINFORCE."""
    algo = small_dqn(num_learners=2, seed=None, **SETTINGS).build_algo()
    try:
        first, second = _snapshots(algo)
        assert first["pid"] != second["pid"]
        for name in first["scorer"]:
            np.testing.assert_array_equal(first["scorer"][name], second["scorer"][name])
        initial_scorer = first["scorer"]
        for _ in range(3):
            algo.train()
            first, second = _snapshots(algo)
            _assert_same_arrays(first["module"], second["module"])
            for name in first["scorer"]:
                np.testing.assert_array_equal(
                    first["scorer"][name], second["scorer"][name]
                )
            assert first["reinforce_steps"] == second["reinforce_steps"]
            if first["reinforce_steps"]:
                _assert_same_arrays(first["adam_exp_avg"], second["adam_exp_avg"])
        assert first["reinforce_steps"] == [algo.ners_sampler_update.num_updates]
        assert algo.ners_sampler_update.num_updates >= 1
        assert any(
            not np.array_equal(initial_scorer[k], first["scorer"][k])
            for k in initial_scorer
        )
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


def _sac_snapshot(learner):
    """`_learner_snapshot` plus SAC's temperature, which lives outside the
    RLModule (so outside DDP)."""
    snapshot = _learner_snapshot(learner)
    snapshot["log_alpha"] = float(learner.curr_log_alpha["default_policy"])
    return snapshot


def test_sac_remote_env_runners_and_remote_learner(ray_session, small_sac):
    """NERS-SAC with 2 EnvRunners + 1 remote Learner: the scorer lives in the
    Learner actor, REINFORCE steps match the algorithm's, scores come back."""
    algo = small_sac(num_env_runners=2, num_learners=1, **SETTINGS).build_algo()
    try:
        before = [r.get() for r in algo.learner_group.foreach_learner(_sac_snapshot)]
        for _ in range(3):
            result = algo.train()
        (after,) = [r.get() for r in algo.learner_group.foreach_learner(_sac_snapshot)]
        assert local_learner(algo) is None
        assert after["pid"] != os.getpid()
        assert algo.env_runner_group.num_healthy_remote_workers() == 2
        num_updates = algo.ners_sampler_update.num_updates
        assert num_updates >= 1
        assert result["ners"]["num_sampler_updates_lifetime"] == num_updates
        assert before[0]["reinforce_steps"] == []
        assert after["reinforce_steps"] == [num_updates]
        assert after["log_alpha"] != before[0]["log_alpha"]
        buffer = algo.local_replay_buffer
        buffer.check_invariants()
        assert np.any(buffer.slot_memory.scored)
        assert not np.allclose(buffer.slot_memory.delta[buffer.slot_memory.scored], 1.0)
    finally:
        algo.stop()


def test_sac_two_learners_keep_modules_samplers_and_temperature_identical(
    ray_session, small_sac
):
    """No seed: the Learners' torch RNGs differ. DDP syncs the RLModules; the
    sampler is broadcast and averaged; SAC's temperature gradient is averaged
    too (RLlib 2.60's own SAC lets the Learners' alphas drift apart)."""
    algo = small_sac(num_learners=2, seed=None, **SETTINGS).build_algo()
    try:
        for _ in range(3):
            algo.train()
            first, second = [
                r.get() for r in algo.learner_group.foreach_learner(_sac_snapshot)
            ]
            assert first["pid"] != second["pid"]
            _assert_same_arrays(first["module"], second["module"])
            for name in first["scorer"]:
                np.testing.assert_array_equal(
                    first["scorer"][name], second["scorer"][name]
                )
            assert first["log_alpha"] == second["log_alpha"]
            assert first["reinforce_steps"] == second["reinforce_steps"]
        assert first["log_alpha"] != 0.0  # the temperature did train
        assert first["reinforce_steps"] == [algo.ners_sampler_update.num_updates]
        assert algo.ners_sampler_update.num_updates >= 1
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


class RecordingNERSBuffer(NERSEpisodeReplayBuffer):
    """Keeps every sampled batch, the rows `update_priorities()` got for it and
    the priorities of the sampled slots right after the update."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []

    def sample_batch(self, *args, **kwargs):
        self._recorded_batch = super().sample_batch(*args, **kwargs)
        return self._recorded_batch

    def update_priorities(self, priorities, module_id=None):
        rows = np.array(priorities, dtype=np.float64)
        super().update_priorities(priorities, module_id)
        slots = self._recorded_batch["indices"]
        self.records.append((self._recorded_batch, rows, self.get_priorities(slots)))


def test_two_learners_send_whole_batch_scores_in_sample_order(ray_session, small_dqn):
    """RLlib splits the sampled items between the two Learners (episodes
    alternately, columnar batches in blocks) and joins their rows Learner by
    Learner. Each stored priority must be the score of its own transition,
    computed with the whole batch as global context."""
    config = small_dqn(
        num_learners=2,
        replay_buffer_config={"capacity": 5000, "type": RecordingNERSBuffer},
        **SETTINGS,
    )
    algo = config.build_algo()
    try:
        # Freeze the sampler (no REINFORCE) so that one copy of its weights
        # reproduces every score of the run.
        algo.ners_sampler_update.maybe_update = lambda algorithm: None
        algo.train()
        state = [r.get() for r in algo.learner_group.foreach_learner(_scorer_state)][0]
        env = gym.make("CartPole-v1")
        scorer = NERSScorer(
            env.observation_space,
            env.action_space,
            NERSSettings.from_dict(algo.config.ners_config),
        )
        scorer.load_state_dict(state)
        # The scalar features' running statistics grew batch by batch: replay
        # them from scratch alongside the scores.
        final_statistics = {name: state[name] for name in SCALAR_STATISTICS}
        for name in SCALAR_STATISTICS:
            getattr(scorer, name).zero_()
        buffer = algo.local_replay_buffer
        alpha = buffer.alpha
        assert len(buffer.records) >= 3
        for batch, rows, priorities in buffer.records:
            total = batch["indices"].shape[0]
            assert rows.shape == (total, 4)  # 16 items from each of 2 Learners
            positions = rows[:, 3].astype(np.int64)
            assert sorted(positions) == list(range(total))
            in_order = rows[np.argsort(positions)]
            # The scores fit their own transitions, whole batch as context.
            columns = {
                name: torch.as_tensor(batch[name])
                for name in ("obs", "new_obs", "actions", "rewards", "ts")
            }
            columns[DELTA] = torch.as_tensor(in_order[:, 1])
            columns[TARGET_Q] = torch.as_tensor(in_order[:, 2])
            scorer.update_scalar_statistics(columns)
            with torch.no_grad():
                # What the buffer raises to alpha: sigma, or PER's priority
                # times exp(logit) (per_residual).
                expected = priority_base(
                    scorer.logits(scorer.featurize_batch(columns)),
                    columns[DELTA],
                    parameterization=scorer.settings.parameterization,
                    per_epsilon=scorer.settings.per_epsilon,
                ).numpy()
            np.testing.assert_allclose(in_order[:, 0], expected, rtol=2e-5)
            # Each slot sampled once holds its own score^alpha in the tree.
            slots, counts = np.unique(batch["indices"], return_counts=True)
            once = np.isin(batch["indices"], slots[counts == 1])
            np.testing.assert_allclose(
                priorities[once], expected[once] ** alpha, rtol=1e-4
            )
            # For terminal transitions the target is the n-step return itself.
            done = batch["terminateds"]
            np.testing.assert_allclose(
                in_order[done, 2], batch["rewards"][done], rtol=1e-5
            )
        # The two Learners' all-reduced statistics are those of the whole batches.
        for name, value in final_statistics.items():
            torch.testing.assert_close(
                getattr(scorer, name), value, rtol=1e-9, atol=1e-6
            )
    finally:
        algo.stop()


def test_rows_out_of_sample_order_are_put_back_by_position():
    """The buffer side alone, on crafted rows: positions reorder, gaps raise."""
    buffer = NERSEpisodeReplayBuffer(100, alpha=1.0, seed=0)
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    buffer.add(
        SingleAgentEpisode(
            observations=[np.full(2, i, np.float32) for i in range(9)],
            actions=[0] * 8,
            rewards=[1.0] * 8,
            terminated=True,
            len_lookback_buffer=0,
            observation_space=gym.spaces.Box(-10, 10, (2,), np.float32),
            action_space=gym.spaces.Discrete(2),
        )
    )
    episodes = buffer.sample(4)
    slots = buffer.last_sampled_slots.copy()
    positions = [int(e.get_extra_model_outputs(SAMPLE_POSITION)[0]) for e in episodes]
    assert positions == [0, 1, 2, 3]
    scores = np.array([0.1, 0.2, 0.3, 0.4])
    # Learner 0 had items 0 and 2, Learner 1 items 1 and 3.
    order = [0, 2, 1, 3]
    rows = np.stack([scores[order], scores[order], scores[order], order], axis=1)
    buffer.update_priorities(rows)
    if np.unique(slots).size == slots.size:
        np.testing.assert_allclose(buffer.get_priorities(slots), scores)
    delta = buffer.slot_memory.delta
    np.testing.assert_allclose(delta[slots[-1]], scores[-1], rtol=1e-6)
    buffer.sample(4)
    with pytest.raises(ValueError, match=SAMPLE_POSITION):
        buffer.update_priorities(np.tile([0.5, 1.0, 1.0, 0.0], (4, 1)))


def test_sampler_and_its_batches_live_on_the_learners_device(monkeypatch, small_dqn):
    """`num_gpus_per_learner=1` makes RLlib choose a CUDA device for the Learner;
    no GPU here, so the choice is forced to PyTorch's data-less `meta` device. A
    tensor left on the CPU by our code would fail to mix with it."""
    import ray.rllib.core.learner.torch.torch_learner as torch_learner

    meta = torch.device("meta")
    monkeypatch.setattr(torch_learner, "get_device", lambda config, num_gpus: meta)
    config = small_dqn(num_learners=0, **SETTINGS)
    learner = config.build_learner(env=gym.make("CartPole-v1"))
    assert learner._device == meta
    assert {p.device for p in learner.module["default_policy"].parameters()} == {meta}
    assert {p.device for p in learner.ners.scorer.parameters()} == {meta}

    batch = {
        "obs": np.zeros((4, 4), np.float32),
        "new_obs": np.zeros((4, 4), np.float32),
        "actions": np.array([0, 1, 0, 1]),
        "rewards": np.ones(4, np.float32),
        DELTA: np.ones(4, np.float32),
        TARGET_Q: np.ones(4, np.float32),
        "ts": np.arange(4),
    }
    assert {t.device for t in sampler_tensors(batch, learner._device).values()} == {
        meta
    }
    # The whole REINFORCE step (features, scores, loss, backward, Adam) runs on
    # the Learner's device; only copying its two result numbers to the host
    # fails, because meta tensors hold no data.
    with pytest.raises(NotImplementedError, match="meta"):
        learner.ners.reinforce(_with_normalizer(batch), replay_reward=1.0)
    adam_state = learner.ners.optimizer.state_dict()["state"]
    assert len(adam_state) == len(list(learner.ners.scorer.parameters()))
    assert {s["exp_avg"].device for s in adam_state.values()} == {meta}


def _with_normalizer(batch, alpha=0.6):
    """What the NERS buffer adds to a sampler-training batch for the default
    "log_prob" objective: K normaliser draws (here the batch itself), their
    scored mask and tree leaves, N and the buffer's alpha."""
    size = len(batch["ts"])
    return dict(
        batch,
        normalizer=dict(batch),
        normalizer_scored=np.ones(size, np.float32),
        normalizer_leaf=np.ones(size),
        num_stored=size,
        alpha=alpha,
    )


def test_reinforce_on_cpu_returns_host_floats(small_dqn):
    config = small_dqn(num_learners=0, **SETTINGS)
    learner = config.build_learner(env=gym.make("CartPole-v1"))
    assert learner._device == torch.device("cpu")
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(8, 4)).astype(np.float32),
        "new_obs": rng.normal(size=(8, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, 8),
        "rewards": np.ones(8, np.float32),
        DELTA: rng.random(8).astype(np.float32),
        TARGET_Q: rng.random(8).astype(np.float32),
        "ts": np.arange(8),
    }
    out = learner.ners.reinforce(_with_normalizer(batch), replay_reward=1.0)
    assert type(out["loss"]) is float and type(out["score_mean"]) is float
    assert 0.0 < out["score_mean"] < 1.0
