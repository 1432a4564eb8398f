"""Our multi-agent buffer against RLlib's `MultiAgentPrioritizedEpisodeReplayBuffer`.

The same `MultiAgentCartPole` episodes (two agents, modules "p0" and "p1",
random actions, seeded) go into both buffers; each test compares what a user
observes. Deliberate differences are asserted both ways and named by the
constants below (the table in `docs/drop-in.md` lists them).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from multi_agent_episodes import collect_multi_agent_cartpole, to_module
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers import (
    MultiAgentEpisodeReplayBuffer,
    MultiAgentPrioritizedEpisodeReplayBuffer,
)

from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer

STEP_COUNTS_IN_AGENT_STEPS = (
    "multi-agent step counters without a module id count agent steps"
)
CAPACITY_PER_MODULE = "multi-agent capacity is per module"
NO_LOCKSTEP = "replay_mode 'lockstep'/'synchronized' raises"
MODULE_SAMPLE_METRICS = "multi-agent sample metrics are per module, not per agent"
VALUE_ERRORS = "bad calls raise ValueError"

MODULES = ("p0", "p1")


def buffers(capacity=10_000, alpha=0.6):
    return {
        "rllib": MultiAgentPrioritizedEpisodeReplayBuffer(capacity, alpha=alpha),
        "ours": FastMultiAgentPrioritizedEpisodeReplayBuffer(
            capacity, alpha=alpha, seed=0
        ),
    }


def add_to_all(named, episodes):
    for buffer in named.values():
        buffer.add(copy.deepcopy(episodes))


def transitions(episodes):
    """`(agent episode id, t) -> (obs, action, reward, next obs)` of every step."""
    table = {}
    for episode in episodes:
        for agent_episode in episode.agent_episodes.values():
            n = len(agent_episode)
            obs = agent_episode.get_observations(slice(0, n + 1))
            actions = agent_episode.get_actions(slice(0, n))
            rewards = agent_episode.get_rewards(slice(0, n))
            for i in range(n):
                t = agent_episode.t_started + i
                key = (agent_episode.id_, t)
                table[key] = (obs[i], actions[i], rewards[i], obs[i + 1])
    return table


def peek(value):
    return value.peek() if hasattr(value, "peek") else value


@pytest.fixture(scope="module")
def episodes():
    return collect_multi_agent_cartpole(400, cut_every=7)


def test_counters_per_module_match_and_totals_count_agent_steps(episodes):
    named = buffers()
    add_to_all(named, episodes)
    rllib, ours = named["rllib"], named["ours"]
    ours.check_invariants()
    assert sorted(ours.get_module_ids()) == sorted(rllib.get_module_ids())
    for module_id in MODULES:
        for counter in ("get_num_timesteps", "get_num_episodes", "get_added_timesteps"):
            assert getattr(ours, counter)(module_id) == getattr(rllib, counter)(
                module_id
            ), (counter, module_id)
    assert ours.get_num_episodes() == rllib.get_num_episodes()
    assert ours.get_added_timesteps() == rllib.get_added_timesteps() == 400
    assert ours.get_added_agent_timesteps() == rllib.get_added_agent_timesteps()
    assert ours.get_num_agent_timesteps() == rllib.get_num_agent_timesteps()
    # STEP_COUNTS_IN_AGENT_STEPS: RLlib's total counts env steps.
    assert rllib.get_num_timesteps() == 400
    assert ours.get_num_timesteps() == len(ours) == rllib.get_num_agent_timesteps()
    with pytest.raises(AttributeError, match="module_buffer"):
        ours.episodes  # noqa: B018
    module_episodes = ours.module_buffer("p0").episodes
    assert len(module_episodes) == rllib.get_num_episodes("p0")


def test_sample_gives_each_module_its_own_one_step_agent_transitions(episodes):
    named = buffers()
    add_to_all(named, episodes)
    table = transitions(episodes)
    for name, buffer in named.items():
        sampled = buffer.sample(num_items=24, n_step=1, gamma=0.99, beta=0.4)
        assert len(sampled) == 48, name
        per_module = dict.fromkeys(MODULES, 0)
        for one in sampled:
            assert isinstance(one, SingleAgentEpisode) and len(one) == 1
            assert one.module_id == to_module(one.agent_id)
            assert one.multi_agent_episode_id is not None
            per_module[one.module_id] += 1
            obs, action, reward, next_obs = table[(one.id_, one.t_started)]
            np.testing.assert_array_equal(one.get_observations()[0], obs)
            np.testing.assert_array_equal(one.get_observations()[1], next_obs)
            assert one.get_actions()[0] == action
            assert float(one.get_rewards()[0]) == pytest.approx(reward)
            assert "weights" in one.extra_model_outputs
        assert per_module == {"p0": 24, "p1": 24}, name
        buffer.sample(num_items=4, n_step=1, modules_to_sample=["p1"])
        assert buffer.get_sampled_timesteps("p1") == 28
        assert buffer.get_sampled_timesteps("p0") == 24


def test_update_priorities_goes_to_one_module(episodes):
    named = buffers(alpha=1.0)
    add_to_all(named, episodes)
    for buffer in named.values():
        buffer.sample(num_items=8, n_step=1)
        buffer.update_priorities(np.full(8, 5.0), "p0")
    rllib, ours = named["rllib"], named["ours"]
    max_priority = dict(rllib.get_state()["_module_to_max_priority"])
    assert max_priority["p0"] == 5.0
    assert max_priority["p1"] == 1.0
    leaves = {
        m: ours.module_buffer(m).get_priorities(
            np.flatnonzero(ours.module_buffer(m).storage.is_transition)
        )
        for m in MODULES
    }
    assert leaves["p0"].max() == 5.0 and np.all(leaves["p1"] == 1.0)
    # RLlib requires the module id too (a TypeError); ours names it.
    with pytest.raises(TypeError):
        rllib.update_priorities(np.ones(8))
    with pytest.raises(ValueError, match="module_id"):  # VALUE_ERRORS
        ours.update_priorities(np.ones(8))


def test_lockstep_replay_is_refused_not_served_unweighted(episodes):
    """RLlib's prioritized buffer answers replay_mode="synchronized" with a
    dict of uniform columns whose `weights` are empty, or an IndexError on
    chunked episodes (and swallows a `replay_mode` constructor argument);
    ours raises, naming the mode (NO_LOCKSTEP)."""
    named = buffers()
    add_to_all(named, episodes)
    rllib = named["rllib"]
    for seed in range(20):
        rllib.rng = np.random.default_rng(seed)
        try:
            columns = rllib.sample(num_items=8, replay_mode="synchronized")
        except IndexError:
            continue  # on chunked episodes some draws crash inside RLlib
        assert isinstance(columns, dict)
        assert all(len(columns[m]["weights"]) == 0 for m in columns)
        break
    else:
        pytest.fail("RLlib's synchronized sampling never succeeded")
    MultiAgentPrioritizedEpisodeReplayBuffer(100, replay_mode="lockstep")
    with pytest.raises(ValueError, match="replay_mode='synchronized'"):
        named["ours"].sample(num_items=8, replay_mode="synchronized")
    with pytest.raises(ValueError, match="replay_mode='lockstep'"):
        FastMultiAgentPrioritizedEpisodeReplayBuffer(100, replay_mode="lockstep")


def test_eviction_per_module_capacity(episodes):
    """RLlib evicts whole multi-agent episodes once the env steps exceed its
    capacity; ours evicts each module's oldest slots once that module's
    steps and episode ends exceed the capacity (CAPACITY_PER_MODULE)."""
    named = buffers(capacity=150)
    for chunk in episodes:  # all at once, RLlib's buffer would raise IndexError
        add_to_all(named, [chunk])
    rllib, ours = named["rllib"], named["ours"]
    ours.check_invariants()
    assert rllib.get_num_timesteps() <= 150 + 60  # whole episodes, may overflow
    for module_id in MODULES:
        buffer = ours.module_buffer(module_id)
        assert len(buffer) + buffer.storage.num_tails <= 150
        assert ours.get_num_episodes_evicted(module_id) > 0
    assert ours.get_num_episodes_evicted() > 0 and rllib.get_num_episodes_evicted() > 0
    evicted_or_stored = ours.get_num_episodes() + ours.get_num_episodes_evicted()
    assert evicted_or_stored == len({e.id_ for e in episodes})


def test_metrics_keys(episodes):
    named = buffers()
    add_to_all(named, episodes)
    keys = {}
    for name, buffer in named.items():
        buffer.sample(num_items=8, n_step=3)
        keys[name] = set(buffer.get_metrics())
    # MODULE_SAMPLE_METRICS: RLlib's per-agent sample counts credit a module's
    # whole sample to its last agent; ours reports sample counts per module.
    assert keys["rllib"] - keys["ours"] == {
        "agent_actual_n_step",
        "agent_step_utilization",
        "num_agent_episodes_per_sample",
        "num_agent_resamples",
        "num_agent_steps_per_sample",
        "num_agent_steps_per_sample_lifetime",
        "num_agent_steps_sampled",
        "num_agent_steps_sampled_lifetime",
    }
    assert keys["ours"] - keys["rllib"] == {"max_priority", "beta"}
    metrics = named["ours"].get_metrics()
    assert set(metrics["max_priority"]) == set(MODULES)


def test_state_round_trip_and_rllibs_state_into_ours(episodes):
    named = buffers(alpha=1.0)
    add_to_all(named, episodes[: len(episodes) // 2])
    rllib, ours = named["rllib"], named["ours"]
    for buffer in named.values():
        buffer.sample(num_items=8, n_step=1)
        buffer.update_priorities(np.linspace(1.0, 8.0, 8), "p1")

    restored = FastMultiAgentPrioritizedEpisodeReplayBuffer(10_000, alpha=1.0)
    restored.set_state(ours.get_state())
    restored.check_invariants()
    from_rllib = FastMultiAgentPrioritizedEpisodeReplayBuffer(10_000, alpha=1.0)
    from_rllib.set_state(rllib.get_state())
    from_rllib.check_invariants()
    for target in (restored, from_rllib):
        for module_id in MODULES:
            for counter in ("get_num_timesteps", "get_num_episodes"):
                assert getattr(target, counter)(module_id) == getattr(rllib, counter)(
                    module_id
                )
        assert target.get_num_episodes() == rllib.get_num_episodes()
        assert target.get_added_timesteps() == rllib.get_added_timesteps()
    # RLlib's leaves of module p1 carry over: the same leaf values, one per
    # stored step (the eight updated ones among them), and the same total.
    state = rllib.get_state()
    tree = dict(state["_module_to_sum_segment"])["p1"]
    rllib_leaves = np.sort(
        [tree[index[-1]] for index in dict(state["_module_to_indices"])["p1"]]
    )
    p1 = from_rllib.module_buffer("p1")
    our_leaves = np.sort(p1.get_priorities(np.flatnonzero(p1.storage.is_transition)))
    np.testing.assert_allclose(our_leaves, rllib_leaves, rtol=1e-6)
    assert np.any(rllib_leaves > 1.0)  # updated ones (1 is the initial)
    assert p1.sampler.sum_tree.total() == pytest.approx(tree.sum())
    assert p1.sampler.max_priority == 8.0
    # Both go on: the open episode's next chunks continue it.
    rest = episodes[len(episodes) // 2 :]
    for target in (restored, from_rllib):
        target.add(copy.deepcopy(rest))
        target.check_invariants()
        assert target.get_added_timesteps() == 400
    uniform = MultiAgentEpisodeReplayBuffer(10_000)
    uniform.add(copy.deepcopy(episodes))
    from_uniform = FastMultiAgentPrioritizedEpisodeReplayBuffer(10_000)
    from_uniform.set_state(uniform.get_state())
    assert from_uniform.get_num_timesteps("p0") == uniform.get_num_timesteps("p0")
