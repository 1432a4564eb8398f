"""FastMultiAgentPrioritizedEpisodeReplayBuffer: settings, routing, seeds, errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from multi_agent_episodes import collect_multi_agent_cartpole
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer


@pytest.fixture(scope="module")
def episodes():
    return collect_multi_agent_cartpole(200, seed=3, cut_every=5)


def filled(episodes, **settings):
    buffer = FastMultiAgentPrioritizedEpisodeReplayBuffer(
        **{"capacity": 1000, **settings}
    )
    buffer.add(copy.deepcopy(episodes))
    return buffer


def test_bad_settings_and_calls_raise_value_errors_naming_them(episodes):
    with pytest.raises(ValueError, match="no_such_setting"):
        FastMultiAgentPrioritizedEpisodeReplayBuffer(no_such_setting=1)
    with pytest.raises(ValueError, match="alpha"):
        FastMultiAgentPrioritizedEpisodeReplayBuffer(alpha=-1.0)
    with pytest.raises(ValueError, match="replay_mode"):
        FastMultiAgentPrioritizedEpisodeReplayBuffer(replay_mode="sideways")
    buffer = FastMultiAgentPrioritizedEpisodeReplayBuffer(100)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4)
    with pytest.raises(ValueError, match="FastPrioritizedEpisodeReplayBuffer"):
        buffer.add(SingleAgentEpisode())
    buffer = filled(episodes)
    with pytest.raises(ValueError, match="stored modules"):
        buffer.sample(4, modules_to_sample=["p7"])
    with pytest.raises(ValueError, match="weight"):
        buffer.add(copy.deepcopy(episodes[:1]), weight={"p0": -2.0})
    with pytest.raises(ValueError, match="either"):
        buffer.sample(4, batch_size_B=4)
    # 0 fell through to the buffer's batch size (the single-agent one refuses).
    with pytest.raises(ValueError, match="num_items.*got num_items=0"):
        buffer.sample(0)
    with pytest.raises(ValueError, match="num_items.*got num_items=0"):
        buffer.sample_batch(0)
    buffer.sample_batch(4)
    with pytest.raises(TypeError, match="once per module. Got a dict of .'p0', 'p1'"):
        buffer.update_priorities({"p0": np.ones(4), "p1": np.ones(4)}, "p0")


def test_an_empty_modules_to_sample_means_every_module_as_in_rllib(episodes):
    buffer = filled(episodes)
    modules = {episode.module_id for episode in buffer.sample(4)}
    assert len(modules) == 2
    # Once none were drawn while the counters counted 4 more.
    drawn = buffer.sample(4, modules_to_sample=[])
    assert {episode.module_id for episode in drawn} == modules
    assert len(drawn) == 8


def test_weights_per_module_and_seeds_per_module(episodes):
    buffer = FastMultiAgentPrioritizedEpisodeReplayBuffer(1000, seed=5)
    buffer.add(copy.deepcopy(episodes), weight={"p0": 3.0, "p1": 0.5})
    for module_id, expected in (("p0", 3.0), ("p1", 0.5)):
        module = buffer.module_buffer(module_id)
        leaves = module.get_priorities(np.flatnonzero(module.storage.is_transition))
        np.testing.assert_allclose(leaves, expected)
    # A module draws from its own generator: the same rows whether it is
    # sampled alone or with the other modules.
    alone = FastMultiAgentPrioritizedEpisodeReplayBuffer(1000, seed=5)
    alone.add(copy.deepcopy(episodes), weight={"p0": 3.0, "p1": 0.5})
    a = buffer.sample_batch(16, modules_to_sample=["p1"])["p1"]
    b = alone.sample_batch(16)["p1"]
    np.testing.assert_array_equal(a["indices"], b["indices"])


def test_columnar_samples_and_their_priorities_per_module(episodes):
    buffer = filled(episodes, alpha=1.0, seed=0)
    batches = buffer.sample_batch(8, n_step=2)
    assert set(batches) == {"p0", "p1"}
    for module_id, batch in batches.items():
        assert batch["obs"].shape == (8, 4) and batch["weights"].shape == (8,)
        assert set(buffer.item_columns(module_id, batch)) == {"buffer_index"}
        buffer.update_priorities(np.full(8, 2.0), module_id)
        module = buffer.module_buffer(module_id)
        np.testing.assert_allclose(module.get_priorities(batch["indices"]), 2.0)
    buffer.check_invariants()


def test_small_capacity_keeps_counts_consistent(episodes):
    buffer = FastMultiAgentPrioritizedEpisodeReplayBuffer(20, seed=0)
    for chunk in episodes:
        buffer.add(copy.deepcopy(chunk))
        buffer.check_invariants()
    total = len({e.id_ for e in episodes})
    assert buffer.get_num_episodes() + buffer.get_num_episodes_evicted() == total
    assert buffer.get_added_timesteps() == 200
    state = buffer.get_state()
    restored = FastMultiAgentPrioritizedEpisodeReplayBuffer(20)
    restored.set_state(state)
    restored.check_invariants()
    assert restored.get_num_episodes() == buffer.get_num_episodes()
    a = buffer.sample_batch(8, modules_to_sample=["p0"])["p0"]
    b = restored.sample_batch(8, modules_to_sample=["p0"])["p0"]
    np.testing.assert_array_equal(a["obs"], b["obs"])
    with pytest.raises(ValueError, match="capacity"):
        FastMultiAgentPrioritizedEpisodeReplayBuffer(21).set_state(state)


def test_metrics_after_eviction_count_each_agents_evicted_steps(episodes, monkeypatch):
    """RLlib's add metrics look up every agent with evicted episodes in the
    per-agent evicted steps; each agent's evicted steps add up to what its
    module evicted, and to what it added minus what is stored (agent i plays
    module p{i}), also across a restore."""
    from rllib_ners.replay_buffers import fast_multi_agent_episode_buffer as module

    logged = []
    real_log = module.log_add_metrics

    def spy(buffer, **counts):
        logged.append(counts)
        real_log(buffer, **counts)

    monkeypatch.setattr(module, "log_add_metrics", spy)
    buffer = FastMultiAgentPrioritizedEpisodeReplayBuffer(20, seed=0)
    half = len(episodes) // 2
    for chunk in episodes[:half]:
        buffer.add(copy.deepcopy(chunk))
        buffer.get_metrics()
    restored = FastMultiAgentPrioritizedEpisodeReplayBuffer(20, seed=0)
    restored.set_state(buffer.get_state())
    for chunk in episodes[half:]:
        restored.add(copy.deepcopy(chunk))
        restored.get_metrics()

    def total(key, name):
        return sum(counts[key].get(name, 0) for counts in logged)

    for counts in logged:
        assert set(counts["agent_to_num_episodes_evicted"]) <= set(
            counts["agent_to_num_steps_evicted"]
        )
    assert total("agent_to_num_episodes_evicted", 0) > 0
    for agent_id in (0, 1):
        evicted = total("agent_to_num_steps_evicted", agent_id)
        assert evicted == total("module_to_num_steps_evicted", f"p{agent_id}")
        added = total("agent_to_num_steps_added", agent_id)
        assert evicted == added - restored.get_num_timesteps(f"p{agent_id}")


def test_rllibs_segment_trees_are_built_at_the_smallest_capacity(monkeypatch):
    """RLlib's multi-agent `__init__` runs on our buffer, but its segment trees
    get `RLLIB_STORAGE_CAPACITY` (and its per-module ones are never built:
    `test_seam_replay`)."""
    from ray.rllib.utils.replay_buffers import (
        multi_agent_prioritized_episode_buffer,
        prioritized_episode_buffer,
    )

    from rllib_ners.replay_buffers.ring_replay_buffer import RLLIB_STORAGE_CAPACITY

    tree_sizes = []
    for module in (prioritized_episode_buffer, multi_agent_prioritized_episode_buffer):
        for name in ("SumSegmentTree", "MinSegmentTree"):
            tree_class = getattr(module, name)

            def recording(capacity, *args, _tree_class=tree_class, **kwargs):
                tree_sizes.append(capacity)
                return _tree_class(capacity, *args, **kwargs)

            monkeypatch.setattr(module, name, recording)
    buffer = FastMultiAgentPrioritizedEpisodeReplayBuffer(2**20)
    assert buffer.capacity == 2**20
    # RLlib sizes each tree 2 * 2**ceil(log2(capacity)).
    assert tree_sizes and set(tree_sizes) == {2 * RLLIB_STORAGE_CAPACITY}
