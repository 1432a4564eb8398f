"""NERSEpisodeReplayBuffer: scores become priorities, I_all, feature cache, state."""

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import NERSEpisodeReplayBuffer

OBS_SPACE = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)


def _episode(ep, length, *, start=0, done=True, id_=None):
    """Observation [ep, t], reward ep * 100 + t."""
    ts = range(start, start + length)
    return SingleAgentEpisode(
        id_=id_ or f"ep{ep}",
        observations=[
            np.array([ep, t], np.float32) for t in range(start, start + length + 1)
        ],
        actions=[t % 2 for t in ts],
        rewards=[ep * 100.0 + t for t in ts],
        terminated=done,
        t_started=start,
        len_lookback_buffer=0,
        observation_space=OBS_SPACE,
        action_space=gym.spaces.Discrete(2),
    )


def _filled(capacity=200, alpha=1.0, seed=0):
    buffer = NERSEpisodeReplayBuffer(capacity, alpha=alpha, seed=seed)
    buffer.add([_episode(e, 10) for e in range(1, 6)])
    return buffer


def _rows(scores, delta=None, q=None):
    """NERS feedback rows `[score, delta, q, sample_position]`, in sample order."""
    scores = np.asarray(scores, dtype=np.float64)
    delta = np.full_like(scores, 0.5) if delta is None else np.asarray(delta)
    q = np.full_like(scores, 2.0) if q is None else np.asarray(q)
    positions = np.arange(scores.shape[0], dtype=np.float64)
    return np.stack([scores, delta, q, positions], axis=1)


def test_scores_become_priorities_sigma_to_the_alpha():
    buffer = _filled(alpha=0.5)
    batch = buffer.sample_batch(8)
    scores = np.linspace(0.1, 0.8, 8)
    buffer.update_priorities(_rows(scores))
    slots, first = np.unique(batch["indices"], return_index=True)
    # Repeated items: the last row given for a slot wins.
    last = {s: scores[i] for i, s in enumerate(batch["indices"])}
    expected = np.array([last[s] for s in slots]) ** 0.5
    np.testing.assert_allclose(buffer.get_priorities(slots), expected)
    buffer.check_invariants()


def test_feature_cache_starts_at_one_and_is_refreshed():
    buffer = _filled()
    batch = buffer.sample_batch(6)
    untouched = np.setdiff1d(
        np.flatnonzero(buffer.storage.is_transition), batch["indices"]
    )
    delta = np.arange(6) + 10.0
    q = -np.arange(6) - 1.0
    buffer.update_priorities(_rows(np.full(6, 0.5), delta, q))
    last_delta = {s: delta[i] for i, s in enumerate(batch["indices"])}
    np.testing.assert_allclose(
        buffer.slot_memory.delta[batch["indices"]],
        [last_delta[s] for s in batch["indices"]],
    )
    np.testing.assert_array_equal(buffer.storage.ts[batch["indices"]], batch["ts"])
    assert np.all(buffer.slot_memory.delta[untouched] == 1.0)
    assert np.all(buffer.slot_memory.q[untouched] == 1.0)


def test_sampled_set_collects_every_sampled_index_until_reset():
    buffer = _filled()
    seen = set()
    for _ in range(5):
        batch = buffer.sample_batch(4)
        seen.update(batch["indices"].tolist())
        buffer.update_priorities(_rows(np.full(4, 0.5)))
    assert buffer.sampled_set_size == len(seen)
    train = buffer.sample_sampler_training_batch(1000, n_step=1, gamma=0.9)
    assert set(train["indices"].tolist()) == seen  # without replacement, all of I_all
    small = buffer.sample_sampler_training_batch(3, n_step=1, gamma=0.9)
    assert len(set(small["indices"].tolist())) == 3
    assert set(small["indices"].tolist()) <= seen
    buffer.reset_sampled_set()
    assert buffer.sampled_set_size == 0
    assert buffer.sample_sampler_training_batch(4) is None


def test_sampler_training_batch_columns_are_exact():
    buffer = _filled()
    buffer.sample_batch(16, n_step=2, gamma=0.5)
    buffer.update_priorities(
        _rows(np.full(16, 0.3), np.full(16, 7.0), np.full(16, -3.0))
    )
    batch = buffer.sample_sampler_training_batch(8, gamma=0.5)
    ep, t = batch["obs"][:, 0].astype(int), batch["obs"][:, 1].astype(int)
    n = np.minimum(2, 10 - t)
    expected = np.where(n == 2, ep * 100 + t + 0.5 * (ep * 100 + t + 1), ep * 100 + t)
    np.testing.assert_allclose(batch["rewards"], expected)
    np.testing.assert_array_equal(batch["new_obs"][:, 1], t + n)
    np.testing.assert_array_equal(batch["ts"], t)
    np.testing.assert_array_equal(batch["actions"], t % 2)
    assert np.all(batch["delta"] == 7.0) and np.all(batch["q"] == -3.0)


def test_plain_td_errors_are_refused():
    buffer = _filled()
    buffer.sample_batch(4)
    with pytest.raises(ValueError, match="not a NERS learner"):
        buffer.update_priorities(np.ones(4))


def test_non_finite_scores_and_features_never_reach_tree_or_cache():
    buffer = _filled()
    batch = buffer.sample_batch(4)
    before = buffer.get_priorities(batch["indices"]).copy()
    rows = _rows(
        [np.nan, np.inf, -1.0, 0.5], [np.nan, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, np.inf]
    )
    buffer.update_priorities(rows)
    after = buffer.get_priorities(batch["indices"])
    bad = np.isin(batch["indices"], batch["indices"][:3]) & ~np.isin(
        batch["indices"], batch["indices"][3:]
    )
    np.testing.assert_array_equal(after[bad], before[bad])
    assert np.all(np.isfinite(buffer.slot_memory.delta)) and np.all(
        np.isfinite(buffer.slot_memory.q)
    )
    assert buffer.sampler.num_nonfinite_priorities == 3
    buffer.check_invariants()


def test_finished_episode_returns_join_chunks():
    buffer = NERSEpisodeReplayBuffer(500)
    buffer.add([_episode(1, 5, done=False), _episode(2, 3)])
    assert buffer.pop_finished_episode_returns() == [200.0 + 201 + 202]
    buffer.add([_episode(1, 4, start=5, done=True)])
    assert buffer.pop_finished_episode_returns() == [sum(100.0 + t for t in range(9))]
    assert buffer.pop_finished_episode_returns() == []


def test_eviction_drops_evicted_slots_from_the_sampled_set():
    """Episode 3 (11 slots) overwrites the ring's free slots and some of
    episode 1's: exactly the sampled slots it overwrote leave I_all, and
    I_train draws only from the sampled transitions that survive."""
    buffer = NERSEpisodeReplayBuffer(30, seed=1)
    buffer.add([_episode(1, 10), _episode(2, 10)])
    sampled = buffer.sample_batch(10)["indices"]
    buffer.update_priorities(_rows(np.full(10, 0.5)))
    buffer.add([_episode(3, 10)])
    storage = buffer.storage
    overwritten = storage.obs[sampled, 0] == 3
    assert 0 < overwritten.sum() < sampled.size  # this seed hits both cases
    surviving = np.sort(sampled[~overwritten])
    assert buffer.sampled_set_size == surviving.size
    stale = buffer.slot_memory.in_sampled_set & ~storage.is_transition
    assert not stale.any()
    train = buffer.sample_sampler_training_batch(100)
    assert train is not None
    np.testing.assert_array_equal(np.sort(train["indices"]), surviving)
    assert np.all(train["obs"][:, 0] < 3)


def test_state_round_trip_includes_cache_and_sampled_set():
    buffer = _filled(seed=3)
    buffer.sample_batch(8)
    buffer.update_priorities(
        _rows(np.linspace(0.2, 0.9, 8), np.arange(8.0), -np.arange(8.0))
    )
    buffer.add([_episode(9, 4, done=False)])
    state = buffer.get_state()
    restored = NERSEpisodeReplayBuffer(200, alpha=1.0)
    restored.set_state(state)
    assert restored.sampled_set_size == buffer.sampled_set_size
    np.testing.assert_array_equal(restored.slot_memory.delta, buffer.slot_memory.delta)
    a, b = buffer.sample_batch(16), restored.sample_batch(16)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    a = buffer.sample_sampler_training_batch(5)
    b = restored.sample_sampler_training_batch(5)
    np.testing.assert_array_equal(a["indices"], b["indices"])
    # The open episode continues in the restored buffer exactly as in the original.
    for target in (buffer, restored):
        target.add([_episode(9, 3, start=4, done=True)])
    assert (
        buffer.pop_finished_episode_returns() == restored.pop_finished_episode_returns()
    )


def _n_step_return(ep, t, n, gamma, length=10):
    """Exact truncated n-step return of `_episode(ep, length)` from step t."""
    steps = range(t, min(t + n, length))
    return sum(gamma ** (k - t) * (ep * 100.0 + k) for k in steps)


def test_sampler_training_batch_uses_the_n_each_item_was_scored_with():
    """I_train's `rewards` and `new_obs` are those its priority was scored on."""
    buffer = _filled(seed=5)
    scored = {}
    for _ in range(6):
        batch = buffer.sample_batch(12, n_step=(1, 5), gamma=0.9)
        buffer.update_priorities(_rows(np.full(12, 0.5)))
        # Repeated slots: the last row wins, as for the priority itself.
        for i, slot in enumerate(batch["indices"]):
            scored[int(slot)] = (batch["rewards"][i], batch["new_obs"][i], i)
        assert len(set(batch["n_step"].tolist())) > 1
    train = buffer.sample_sampler_training_batch(1000, n_step=(1, 5), gamma=0.9)
    assert sorted(train["indices"].tolist()) == sorted(scored)
    for i, slot in enumerate(train["indices"]):
        rewards, new_obs, _ = scored[int(slot)]
        assert train["rewards"][i] == rewards
        np.testing.assert_array_equal(train["new_obs"][i], new_obs)
    # And they are the exact n-step returns of the crafted episodes.
    ep, t = train["obs"][:, 0].astype(int), train["obs"][:, 1].astype(int)
    n = train["new_obs"][:, 1].astype(int) - t
    assert n.min() >= 1 and n.max() <= 5 and len(set(n.tolist())) > 1
    expected = [_n_step_return(e, s, k, 0.9) for e, s, k in zip(ep, t, n)]
    np.testing.assert_allclose(train["rewards"], expected, rtol=1e-6)


def test_scored_n_step_is_in_the_state_and_older_states_restore():
    buffer = _filled(seed=2)
    buffer.sample_batch(10, n_step=(2, 4))
    buffer.update_priorities(_rows(np.full(10, 0.5)))
    buffer.sample_batch(6, n_step=(2, 4))  # rows not yet returned
    state = buffer.get_state()
    restored = NERSEpisodeReplayBuffer(200, alpha=1.0)
    restored.set_state(state)
    np.testing.assert_array_equal(
        restored.slot_memory.scored_n_step, buffer.slot_memory.scored_n_step
    )
    for target in (buffer, restored):
        target.update_priorities(_rows(np.full(6, 0.4)))
    np.testing.assert_array_equal(
        restored.slot_memory.scored_n_step, buffer.slot_memory.scored_n_step
    )
    a = buffer.sample_sampler_training_batch(8, n_step=(2, 4))
    b = restored.sample_sampler_training_batch(8, n_step=(2, 4))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # A state saved before the n was recorded: the n of I_all is drawn afresh.
    old = {
        k: v
        for k, v in state.items()
        if k not in ("_scored_n_step", "_last_sampled_n_steps")
    }
    legacy = NERSEpisodeReplayBuffer(200, alpha=1.0)
    legacy.set_state(old)
    assert not legacy.slot_memory.scored_n_step.any()
    legacy.update_priorities(_rows(np.full(6, 0.4)))
    train = legacy.sample_sampler_training_batch(8, n_step=3)
    n = train["new_obs"][:, 1] - train["obs"][:, 1]
    assert np.all((n == 3) | (train["new_obs"][:, 1] == 10))


def test_an_rllib_per_state_loads_its_steps_not_its_td_priorities():
    """RLlib's priorities are TD errors, not NERS scores: the loaded steps
    enter as new steps do (priority 1, unscored), their returns are known."""
    from ray.rllib.utils.replay_buffers import PrioritizedEpisodeReplayBuffer

    rllib = PrioritizedEpisodeReplayBuffer(100)
    rllib.add([_episode(1, 10), _episode(2, 6, done=False)])
    rllib.sample(num_items=4, n_step=1)
    rllib.update_priorities(np.array([50.0, 20.0, 0.1, 3.0]))
    buffer = _filled(capacity=100)
    buffer.set_state(rllib.get_state())
    buffer.check_invariants()
    assert len(buffer) == 16 and buffer.get_num_episodes() == 2
    slots = np.flatnonzero(buffer.storage.is_transition)
    np.testing.assert_array_equal(buffer.get_priorities(slots), 1.0)
    assert not buffer.slot_memory.scored.any() and buffer.sampled_set_size == 0
    assert buffer.sampler.max_priority == 1.0
    assert buffer.pop_finished_episode_returns() == [sum(100.0 + t for t in range(10))]
    # The open episode's return goes on with its next chunk.
    buffer.add(_episode(2, 2, start=6, id_="ep2"))
    assert buffer.pop_finished_episode_returns() == [sum(200.0 + t for t in range(8))]
