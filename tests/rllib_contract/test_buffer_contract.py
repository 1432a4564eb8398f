"""Our prioritized episode buffer against RLlib's `PrioritizedEpisodeReplayBuffer`.

Each test runs one scenario on both buffers and compares what a user of the
buffer observes: counters, eviction, `sample()`'s episodes, importance weights,
`update_priorities`, metric keys, and states moved between the two. Where ours
differs on purpose, the test asserts both behaviours and names the difference
by one of the constants below; the table in `docs/drop-in.md` lists them.

Episodes encode `(ep, t)` in their data (obs `[ep, t, 0]`, action `t % 3`,
reward `100 ep + t`), so every sampled item can be checked on its own.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers import (
    EpisodeReplayBuffer,
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners import FastPrioritizedEpisodeReplayBuffer

# The deliberate differences (docs/drop-in.md, "Deliberate differences").
CAPACITY_IN_SLOTS = "capacity counts observation slots, evicted oldest slot first"
N_STEP_TRUNCATED = "n-step returns are cut at episode ends, not redrawn"
N_STEP_INCLUSIVE = "n_step=(a, b) draws a..b inclusive"
BUFFER_INDEX_COLUMN = "sampled episodes carry `buffer_index`"
FLOAT32_WEIGHTS = "importance weights are float32"
VALUE_ERRORS = "bad calls raise ValueError, not AssertionError"
SMOOTHED_PER_REPORT = "windowed metrics average over get_metrics() calls"
ZERO_STEP_EPISODES = "a 0-step episode is neither stored nor counted"
NUMPY_ACTIONS = "sampled actions are numpy scalars of the stored dtype"

OBS_SPACE = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
ACT_SPACE = gym.spaces.Discrete(3)
GAMMA = 0.9


def reward(ep, t):
    return 100.0 * ep + t


def episode(ep, t0, t1, *, terminated=False, truncated=False):
    """Steps `t0 .. t1 - 1` of episode `ep` (observations `t0 .. t1`)."""
    chunk = SingleAgentEpisode(
        id_=f"e{ep}",
        observations=[np.array([ep, t, 0], np.float32) for t in range(t0, t1 + 1)],
        actions=[t % 3 for t in range(t0, t1)],
        rewards=[reward(ep, t) for t in range(t0, t1)],
        extra_model_outputs={
            "action_logp": [np.float32(-(100 * ep + t)) for t in range(t0, t1)]
        },
        terminated=terminated,
        truncated=truncated,
        t_started=t0,
        len_lookback_buffer=0,
        observation_space=OBS_SPACE,
        action_space=ACT_SPACE,
    )
    return chunk.to_numpy()


def buffers(capacity, *, alpha=1.0, ours_capacity=None):
    """RLlib's and ours, built alike (ours seeded)."""
    return {
        "rllib": PrioritizedEpisodeReplayBuffer(capacity, alpha=alpha),
        "ours": FastPrioritizedEpisodeReplayBuffer(
            ours_capacity or capacity, alpha=alpha, seed=0
        ),
    }


def add_to_all(named, episodes, **kwargs):
    for buffer in named.values():
        buffer.add(episodes, **kwargs)


def item(sampled):
    """`(ep, t)` of a sampled 1-step episode."""
    obs = np.asarray(sampled.get_observations()[0])
    return int(obs[0]), int(obs[1])


def stored_steps(buffer):
    """`{(ep, t)}` of every stored transition, read from `episodes`."""
    steps = set()
    for stored in buffer.episodes:
        obs = np.asarray(stored.get_observations())
        steps |= {(int(o[0]), int(o[1])) for o in obs[:-1]}
    return steps


def counters(buffer):
    return {
        "timesteps": buffer.get_num_timesteps(),
        "len": len(buffer),
        "episodes": buffer.get_num_episodes(),
        "evicted": buffer.get_num_episodes_evicted(),
        "added": buffer.get_added_timesteps(),
        "sampled": buffer.get_sampled_timesteps(),
    }


def peek(value):
    return value.peek() if hasattr(value, "peek") else value


def rllib_leaf(buffer, ep, t):
    """RLlib's sum-tree leaf of step `t` of its stored episode `e{ep}`, read
    off its state (each tree as its node list, the leaves in the upper half)."""
    state = buffer.get_state()
    index = buffer.episode_id_to_index[f"e{ep}"]
    start = buffer.episodes[index - state["_num_episodes_evicted"]].t_started
    tree = state["_sum_segment"]
    for eps_index, ts, tree_index in state["_indices"]:
        if eps_index == index and ts == t - start:
            return tree[len(tree) // 2 + tree_index]
    raise KeyError((ep, t))


def our_leaf(buffer, ep, t):
    storage = buffer.storage
    slots = np.flatnonzero(
        storage.is_transition & (storage.obs[:, 0] == ep) & (storage.obs[:, 1] == t)
    )
    (slot,) = slots
    return float(buffer.get_priorities([slot])[0])


# ----------------------------------------------------------------- counters
def test_counters_and_episodes_of_whole_and_chunked_episodes_match():
    named = buffers(100)
    add_to_all(named, [episode(0, 0, 10, terminated=True), episode(1, 0, 5)])
    add_to_all(named, [episode(1, 5, 12, terminated=True)])
    add_to_all(named, episode(2, 0, 3, truncated=True))
    rllib, ours = named["rllib"], named["ours"]
    assert (
        counters(ours)
        == counters(rllib)
        == {
            "timesteps": 25,
            "len": 25,
            "episodes": 3,
            "evicted": 0,
            "added": 25,
            "sampled": 0,
        }
    )
    for a, b in zip(rllib.episodes, ours.episodes, strict=True):
        assert (a.id_, len(a), a.t_started) == (b.id_, len(b), b.t_started)
        assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)
        np.testing.assert_array_equal(a.get_observations(), b.get_observations())
        np.testing.assert_array_equal(a.get_actions(), b.get_actions())
        np.testing.assert_array_equal(a.get_rewards(), b.get_rewards())
        np.testing.assert_array_equal(
            a.get_extra_model_outputs("action_logp"),
            b.get_extra_model_outputs("action_logp"),
        )
    assert ours.episode_id_to_index == {"e0": 0, "e1": 1, "e2": 2}
    assert rllib.episode_id_to_index == {"e0": 0, "e1": 1, "e2": 2}


def test_a_zero_step_episode_counts_in_rllibs_buffer_only():
    """A just-reset episode (one observation, no step) has no transition to
    replay; RLlib's EnvRunners never send one. RLlib's buffer stores it and
    counts it as an episode, ours neither (ZERO_STEP_EPISODES); every other
    counter agrees."""
    named = buffers(100)
    add_to_all(named, [episode(0, 0, 5), episode(1, 0, 0)])
    rllib, ours = counters(named["rllib"]), counters(named["ours"])
    assert rllib.pop("episodes") == 2 and ours.pop("episodes") == 1
    assert (
        rllib
        == ours
        == {
            "timesteps": 5,
            "len": 5,
            "evicted": 0,
            "added": 5,
            "sampled": 0,
        }
    )
    assert [e.id_ for e in named["rllib"].episodes] == ["e0", "e1"]
    assert [e.id_ for e in named["ours"].episodes] == ["e0"]


def test_sampled_actions_are_numpy_scalars_in_ours_only():
    """From episodes that hold Python values (not `to_numpy()`'d, which
    EnvRunners do), RLlib's sampled episodes return the actions as they were
    added; ours return numpy scalars of the stored action column's dtype
    (NUMPY_ACTIONS), equal in value. Rewards are floats in both."""
    as_lists = SingleAgentEpisode(
        id_="e0",
        observations=[np.array([0, t, 0], np.float32) for t in range(5)],
        actions=[t % 3 for t in range(4)],
        rewards=[reward(0, t) for t in range(4)],
        len_lookback_buffer=0,
        observation_space=OBS_SPACE,
        action_space=ACT_SPACE,
    )
    kinds = {}
    for name, buffer in buffers(100).items():
        buffer.add([as_lists])
        sampled = buffer.sample(num_items=8, n_step=1, gamma=GAMMA)
        for one in sampled:
            _, t = item(one)
            assert one.get_actions()[0] == t % 3
            assert one.get_rewards()[0] == reward(0, t)
            assert isinstance(one.get_rewards()[0], float)
        kinds[name] = {type(one.get_actions()[0]) for one in sampled}
    assert kinds == {"rllib": {int}, "ours": {np.int64}}


def test_oldest_data_is_evicted_first_whole_episodes_or_slots():
    """Both evict the oldest episode first. RLlib evicts whole episodes once
    the steps exceed `capacity`; ours overwrites the oldest observation slots
    (an episode of n steps takes n + 1), so an episode can be partly stored
    (CAPACITY_IN_SLOTS)."""
    named = buffers(30)
    for ep in range(3):
        add_to_all(named, episode(ep, 0, 10, terminated=True))
    rllib, ours = named["rllib"], named["ours"]
    assert rllib.get_num_timesteps() == 30  # exactly at capacity
    assert ours.get_num_timesteps() == 27  # 33 slots needed: e0's t=0..2 went
    assert [e.t_started for e in ours.episodes] == [3, 0, 0]
    assert ours.get_num_episodes() == rllib.get_num_episodes() == 3

    add_to_all(named, episode(3, 0, 10, terminated=True))
    for buffer in named.values():
        assert [e.id_ for e in buffer.episodes] == ["e1", "e2", "e3"]
        assert buffer.get_num_episodes_evicted() == 1
    assert [e.t_started for e in rllib.episodes] == [0, 0, 0]
    assert [e.t_started for e in ours.episodes] == [3, 0, 0]
    # What ours lacks of RLlib's data is the oldest of it.
    missing = stored_steps(rllib) - stored_steps(ours)
    assert missing == {(1, 0), (1, 1), (1, 2)}
    assert counters(ours)["added"] == counters(rllib)["added"] == 40


def test_an_episode_longer_than_the_capacity_is_stored_without_error():
    """RLlib stores a 158-step episode in a capacity-100 buffer whole (a
    temporary overflow) and drops all of it when the next episode comes; ours
    keeps its newest 99 steps, and still has them after the next episode
    (CAPACITY_IN_SLOTS)."""
    named = buffers(100)
    add_to_all(named, episode(0, 0, 30, terminated=True))
    add_to_all(named, episode(1, 0, 158, terminated=True))
    rllib, ours = named["rllib"], named["ours"]
    assert rllib.get_num_timesteps() == 158
    assert ours.get_num_timesteps() == 99
    assert stored_steps(ours) == {(1, t) for t in range(59, 158)}
    for buffer in named.values():
        assert [e.id_ for e in buffer.episodes] == ["e1"]
        assert buffer.get_num_episodes_evicted() == 1
        assert buffer.get_added_timesteps() == 188

    add_to_all(named, episode(2, 0, 10, terminated=True))
    assert rllib.get_num_timesteps() == 10
    assert [e.id_ for e in rllib.episodes] == ["e2"]
    assert [e.id_ for e in ours.episodes] == ["e1", "e2"]
    assert stored_steps(ours) >= stored_steps(rllib)
    assert ours.get_num_timesteps() == 100 - 1 - 11 + 10


def test_adds_far_beyond_the_capacity_break_rllibs_buffer_not_ours():
    """RLlib's prioritized buffer raises IndexError (its free tree nodes run
    out) for one episode over twice its tree size, or for two new episodes
    together over its capacity; ours keeps the newest steps."""
    for episodes in (
        [episode(0, 0, 300, terminated=True)],
        [episode(0, 0, 60, terminated=True), episode(1, 0, 60, terminated=True)],
    ):
        named = buffers(100)
        with pytest.raises(IndexError):
            named["rllib"].add(episodes)
        ours = named["ours"]
        ours.add(episodes)
        ours.check_invariants()
        assert ours.get_num_timesteps() == 100 - len(ours.episodes)
        newest = episodes[-1]
        assert ours.episodes[-1].id_ == newest.id_


# ------------------------------------------------------------------ sampling
def test_sample_returns_the_same_kind_of_one_step_episodes():
    named = buffers(100, alpha=0.6)
    add_to_all(named, [episode(0, 0, 10, terminated=True), episode(1, 0, 7)])
    kinds = {}
    for name, buffer in named.items():
        sampled = buffer.sample(
            num_items=64,
            n_step=1,
            gamma=GAMMA,
            beta=0.4,
            include_extra_model_outputs=True,
        )
        assert isinstance(sampled, list) and len(sampled) == 64
        for one in sampled:
            assert isinstance(one, SingleAgentEpisode) and len(one) == 1
            ep, t = item(one)
            assert one.t_started == t
            np.testing.assert_array_equal(one.get_observations()[1], [ep, t + 1, 0])
            assert int(one.get_actions()[0]) == t % 3
            assert float(one.get_rewards()[0]) == reward(ep, t)
            ends = ep == 0 and t == 9
            assert one.is_terminated == ends and not one.is_truncated
            assert one.get_extra_model_outputs("action_logp")[0] == -(100 * ep + t)
            assert int(one.get_extra_model_outputs("n_step")[0]) == 1
        one = sampled[0].to_numpy()
        kinds[name] = {
            "keys": set(one.extra_model_outputs),
            "obs": (one.get_observations().dtype, one.get_observations().shape),
            "actions": one.get_actions().dtype,
            "rewards": one.get_rewards().dtype,
            "weights": one.get_extra_model_outputs("weights").dtype,
        }
    rllib, ours = kinds["rllib"], kinds["ours"]
    assert rllib["keys"] == {"weights", "n_step", "action_logp"}
    assert ours["keys"] == rllib["keys"] | {"buffer_index"}  # BUFFER_INDEX_COLUMN
    for key in ("obs", "actions", "rewards"):
        assert ours[key] == rllib[key], key
    assert rllib["weights"] == np.float64 and ours["weights"] == np.float32
    # FLOAT32_WEIGHTS: the learner's losses are float32 anyway.


def test_importance_weights_and_frequencies_follow_the_priorities():
    """Steps of e1 enter with priority 4, e0's with 1 (alpha 1): both buffers
    draw an e1 step 4x as often as an e0 step and weigh it (4)^-beta
    relative to the largest weight, w_i = (N p_i)^-beta / max_j w_j."""
    named = buffers(200)
    add_to_all(named, episode(0, 0, 50, terminated=True), weight=1.0)
    add_to_all(named, episode(1, 0, 50, terminated=True), weight=4.0)
    beta = 0.5
    for name, buffer in named.items():
        sampled = buffer.sample(num_items=2000, n_step=1, beta=beta)
        eps = np.array([item(one)[0] for one in sampled])
        weights = np.array(
            [float(one.get_extra_model_outputs("weights")[0]) for one in sampled]
        )
        np.testing.assert_allclose(weights[eps == 0], 1.0, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(
            weights[eps == 1], 4.0**-beta, rtol=1e-6, err_msg=name
        )
        share = (eps == 1).mean()
        assert share == pytest.approx(0.8, abs=0.04), name


def test_update_priorities_sets_leaves_and_the_max_priority_alike():
    named = buffers(100, alpha=0.5)
    add_to_all(named, episode(0, 0, 20, terminated=True))
    for buffer in named.values():
        buffer.rng = np.random.default_rng(1)
    updated = {}
    for name, buffer in named.items():
        sampled = buffer.sample(num_items=4, n_step=1)
        priorities = np.array([9.0, 0.25, 1.0, 0.0])
        buffer.update_priorities(priorities)
        updated[name] = dict(zip([item(one) for one in sampled], priorities))
    add_to_all(named, episode(1, 0, 3, terminated=True))
    for name, leaf in (("rllib", rllib_leaf), ("ours", our_leaf)):
        buffer = named[name]
        for (ep, t), priority in updated[name].items():
            # A 0 priority is floored at 1e-12 in both, then raised to alpha.
            assert leaf(buffer, ep, t) == pytest.approx(max(priority, 1e-12) ** 0.5)
        # New steps enter with the max priority seen: 9 ** alpha.
        assert leaf(buffer, 1, 0) == pytest.approx(3.0)


def test_update_priorities_must_follow_its_sample():
    named = buffers(100)
    add_to_all(named, episode(0, 0, 20, terminated=True))
    for buffer in named.values():
        buffer.sample(num_items=4, n_step=1)
    with pytest.raises(AssertionError):
        named["rllib"].update_priorities(np.ones(3))
    with pytest.raises(ValueError, match="once after each sample"):  # VALUE_ERRORS
        named["ours"].update_priorities(np.ones(3))


def test_n_step_items_near_episode_ends_are_truncated_not_redrawn():
    """RLlib redraws an item whose n steps cross the episode's end, so the
    last n-1 steps are never replayed; ours truncates the return there
    (N_STEP_TRUNCATED). Items that fit are the same transition in both."""
    named = buffers(100)
    add_to_all(named, episode(0, 0, 12, terminated=True))
    n = 3
    starts = {}
    for name, buffer in named.items():
        sampled = buffer.sample(num_items=600, n_step=n, gamma=GAMMA)
        starts[name] = set()
        for one in sampled:
            ep, t = item(one)
            starts[name].add(t)
            used = int(one.get_extra_model_outputs("n_step")[0])
            assert used == min(n, 12 - t)
            np.testing.assert_array_equal(one.get_observations()[1], [0, t + used, 0])
            expected = sum(GAMMA**k * reward(0, t + k) for k in range(used))
            assert float(one.get_rewards()[0]) == pytest.approx(expected, rel=1e-6)
            assert one.is_terminated == (t + used == 12)
    assert starts["rllib"] == set(range(0, 12 - n + 1))
    assert starts["ours"] == set(range(0, 12))
    resamples = {
        name: peek(buffer.get_metrics()["num_resamples"])
        for name, buffer in named.items()
    }
    assert resamples["rllib"] > 0 and resamples["ours"] == 0


def test_an_n_step_range_is_inclusive_in_ours_only():
    """`n_step=(2, 5)`: RLlib draws n from {2, 3, 4} (numpy's exclusive upper
    bound, though its docstring says closed); ours from {2, ..., 5}
    (N_STEP_INCLUSIVE)."""
    named = buffers(500)
    add_to_all(named, episode(0, 0, 400, terminated=True))
    drawn = {}
    for name, buffer in named.items():
        sampled = buffer.sample(num_items=400, n_step=(2, 5))
        # Away from the episode's end, where ours would cut n short.
        drawn[name] = {
            int(one.get_extra_model_outputs("n_step")[0])
            for one in sampled
            if item(one)[1] < 395
        }
    assert drawn == {"rllib": {2, 3, 4}, "ours": {2, 3, 4, 5}}


# ------------------------------------------------------------------ metrics
def test_metrics_have_rllibs_keys_and_values():
    named = buffers(100)
    add_to_all(named, [episode(0, 0, 10, terminated=True), episode(1, 0, 5)])
    add_to_all(named, episode(1, 5, 8, terminated=True))
    metrics = {}
    for name, buffer in named.items():
        buffer.sample(num_items=16, n_step=1)
        metrics[name] = buffer.get_metrics()
    rllib, ours = metrics["rllib"], metrics["ours"]
    assert set(rllib) <= set(ours)
    assert set(ours) - set(rllib) == {
        "max_priority",
        "beta",
        "sampled_n_step_mean",
        "num_priorities_nonfinite_skipped_lifetime",
        "num_priorities_stale_skipped_lifetime",
    }
    # SMOOTHED_PER_REPORT: RLlib averages `num_env_steps_stored` over its
    # add() calls (15 then 18 steps here), ours over get_metrics() calls.
    assert peek(rllib["num_env_steps_stored"]) == (15 + 18) / 2
    assert peek(ours["num_env_steps_stored"]) == 18
    for key in (
        "num_episodes_stored",
        "num_env_steps_added",
        "num_env_steps_added_lifetime",
        "num_episodes_added_lifetime",
        "num_episodes_evicted_lifetime",
        "num_env_steps_sampled",
        "num_env_steps_sampled_lifetime",
        "actual_n_step",
    ):
        assert peek(ours[key]) == peek(rllib[key]), key


# ------------------------------------------------------------------- states
def test_rllibs_prioritized_state_resumes_in_ours():
    rllib = PrioritizedEpisodeReplayBuffer(80, alpha=0.6)
    rllib.add([episode(0, 0, 30, terminated=True), episode(1, 0, 40, terminated=True)])
    rllib.add(episode(2, 0, 20))  # evicts e0; e2 goes on below
    rllib.sample(num_items=8, n_step=1)
    rllib.update_priorities(np.linspace(0.5, 6.0, 8))
    sampled = rllib.sample(num_items=4, n_step=1)  # priorities still owed

    ours = FastPrioritizedEpisodeReplayBuffer(100, alpha=0.6, seed=0)
    ours.set_state(rllib.get_state())
    ours.check_invariants()
    assert counters(ours) == counters(rllib)
    assert stored_steps(ours) == stored_steps(rllib)
    for ep, start, stop in ((1, 0, 40), (2, 0, 20)):
        for t in range(start, stop):
            assert our_leaf(ours, ep, t) == pytest.approx(rllib_leaf(rllib, ep, t))
    assert ours.sampler.max_priority == rllib.get_state()["_max_priority"]
    # The sample RLlib owed priorities for is answered in ours.
    ours.update_priorities(np.full(4, 7.0))
    for one in sampled:
        assert our_leaf(ours, *item(one)) == pytest.approx(7.0**0.6)
    # The open episode goes on with its next chunk.
    ours.add(episode(2, 20, 25, terminated=True))
    assert [e.id_ for e in ours.episodes] == ["e1", "e2"]
    assert len(ours.episodes[-1]) == 25


def test_rllibs_uniform_state_resumes_in_ours():
    rllib = EpisodeReplayBuffer(100)
    rllib.add([episode(0, 0, 30, terminated=True), episode(1, 0, 20)])
    ours = FastPrioritizedEpisodeReplayBuffer(100, alpha=0.6, seed=0)
    ours.set_state(rllib.get_state())
    assert counters(ours) == counters(rllib)
    assert stored_steps(ours) == stored_steps(rllib)
    assert our_leaf(ours, 0, 0) == our_leaf(ours, 1, 19) == 1.0


def test_our_state_goes_to_rllibs_buffers_through_to_rllib_state():
    ours = FastPrioritizedEpisodeReplayBuffer(120, alpha=0.6, seed=0)
    ours.add([episode(0, 0, 60, terminated=True), episode(1, 0, 40)])
    ours.add(episode(2, 0, 30, terminated=True))  # e0 partly evicted
    ours.sample_batch(16)
    ours.update_priorities(np.linspace(0.5, 6.0, 16))

    rllib = PrioritizedEpisodeReplayBuffer(120, alpha=0.6)
    with pytest.raises(KeyError):  # RLlib reads its own layout only.
        rllib.set_state(ours.get_state())
    rllib = PrioritizedEpisodeReplayBuffer(120, alpha=0.6)
    rllib.set_state(ours.to_rllib_state())
    assert counters(rllib) == counters(ours)
    assert stored_steps(rllib) == stored_steps(ours)
    for stored in ours.episodes:
        ep = int(stored.get_observations()[0][0])
        for t in range(stored.t_started, stored.t_started + len(stored)):
            assert rllib_leaf(rllib, ep, t) == pytest.approx(our_leaf(ours, ep, t))
    tree = rllib.get_state()["_sum_segment"]
    assert sum(tree[len(tree) // 2 :]) == pytest.approx(ours.sampler.sum_tree.total())
    rllib.sample(num_items=8, n_step=1)
    rllib.update_priorities(np.ones(8))
    rllib.add(episode(1, 40, 45, terminated=True))  # the open episode goes on
    assert len(rllib.episodes[rllib.episode_id_to_index["e1"] - 1]) == 45

    uniform = EpisodeReplayBuffer(120)
    uniform.set_state(ours.to_rllib_state(EpisodeReplayBuffer))
    assert uniform.get_num_timesteps() == ours.get_num_timesteps()
    assert len(uniform.sample(batch_size_B=4, batch_length_T=2)["obs"]) == 4
