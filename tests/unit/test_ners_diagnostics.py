"""Sampler diagnostics: the math vs brute force, the scored mask, the probe set."""

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from scipy import stats

from rllib_ners import NERSEpisodeReplayBuffer
from rllib_ners.algorithms.ners.sampler_diagnostics import SamplerDiagnostics
from rllib_ners.ners import diagnostics as D

OBS_SPACE = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)


# ------------------------------------------------------------------ brute force
def _brute(leaves, scored, delta):
    """Every key straight from the definitions, on the whole array."""
    p = leaves / leaves.sum()
    n = leaves.size
    nz = p[p > 0]
    out = {
        D.PRIORITY_ENTROPY_NORMALIZED: -(nz * np.log(nz)).sum() / np.log(n),
        D.EFFECTIVE_SAMPLE_FRACTION: 1.0 / (n * (p**2).sum()),
        D.UNSCORED_MASS: p[~scored].sum(),
    }
    s = leaves[scored]
    if s.size:
        out[D.SCORED_PRIORITY_MAX_OVER_MIN] = s.max() / s.min()
        out[D.SCORED_PRIORITY_CV] = s.std() / s.mean()
    if s.size > 1:
        out[D.PRIORITY_TD_SPEARMAN] = _brute_spearman(s, np.abs(delta[scored]))
    return out


def _brute_ranks(x):
    """Average ranks by the definition: 1 + #smaller + (#equal - 1) / 2."""
    x = np.asarray(x)
    smaller = (x[None, :] < x[:, None]).sum(axis=1)
    equal = (x[None, :] == x[:, None]).sum(axis=1)
    return 1.0 + smaller + (equal - 1) / 2.0


def _brute_spearman(x, y):
    return np.corrcoef(_brute_ranks(x), _brute_ranks(y))[0, 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_diagnostics_match_brute_force_on_random_priorities(seed):
    rng = np.random.default_rng(seed)
    n = 500
    leaves = rng.uniform(0.2, 1.0, n) ** 0.6
    scored = rng.random(n) < 0.8
    delta = rng.normal(size=n)
    got = D.replay_distribution_diagnostics(leaves, scored, delta)
    want = _brute(leaves, scored, delta)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-10, err_msg=key)


def test_uniform_leaves_give_entropy_and_ess_exactly_one():
    for n, leaf in ((2, 0.3), (1000, 0.1), (20000, 0.7**0.6)):
        got = D.replay_distribution_diagnostics(
            np.full(n, leaf), np.ones(n, bool), np.arange(n, dtype=float)
        )
        assert got[D.PRIORITY_ENTROPY_NORMALIZED] == 1.0
        assert got[D.EFFECTIVE_SAMPLE_FRACTION] == 1.0
        assert got[D.SCORED_PRIORITY_MAX_OVER_MIN] == 1.0
        assert got[D.SCORED_PRIORITY_CV] == 0.0
        assert got[D.UNSCORED_MASS] == 0.0
        # Equal priorities have no rank order: Spearman is undefined, left out.
        assert D.PRIORITY_TD_SPEARMAN not in got


def test_peaked_distribution():
    n = 1000
    leaves = np.full(n, 1e-6)
    leaves[7] = 1.0
    scored = np.zeros(n, bool)
    scored[7] = True
    got = D.replay_distribution_diagnostics(leaves, scored, np.ones(n))
    want = _brute(leaves, scored, np.ones(n))
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-9, err_msg=key)
    assert got[D.PRIORITY_ENTROPY_NORMALIZED] < 0.01
    assert got[D.EFFECTIVE_SAMPLE_FRACTION] < 1.01 / n
    assert got[D.UNSCORED_MASS] == pytest.approx(999e-6, rel=1e-3)
    # One scored item: max/min 1, cv 0, no Spearman.
    assert got[D.SCORED_PRIORITY_MAX_OVER_MIN] == 1.0
    assert D.PRIORITY_TD_SPEARMAN not in got


def test_subset_path_equals_full_path_below_the_threshold_and_estimates_above():
    rng = np.random.default_rng(3)
    n = 20000
    leaves = rng.uniform(0.5, 1.0, n)
    scored = rng.random(n) < 0.9
    leaves[~scored] *= 1.4  # the boost never-scored transitions get
    delta = leaves * 3 + rng.normal(size=n)
    full = D.replay_distribution_diagnostics(leaves, scored, delta)
    slots = np.arange(n)
    # At or below the sample size: all slots, no draw, the same numbers.
    draw_rng = np.random.default_rng(0)
    before = draw_rng.bit_generator.state
    everything = D.uniform_subset(draw_rng, slots, n)
    assert draw_rng.bit_generator.state == before
    np.testing.assert_array_equal(everything, slots)
    same = D.replay_distribution_diagnostics(
        leaves[everything], scored[everything], delta[everything], n
    )
    assert same == full
    # Above it: a uniform subset, estimates close to the full values.
    subset = D.uniform_subset(draw_rng, slots, 8192)
    assert subset.size == 8192 and np.unique(subset).size == 8192
    estimate = D.replay_distribution_diagnostics(
        leaves[subset], scored[subset], delta[subset], n
    )
    assert set(estimate) == set(full)
    for key, tolerance in (
        (D.PRIORITY_ENTROPY_NORMALIZED, 1e-3),
        (D.EFFECTIVE_SAMPLE_FRACTION, 0.01),
        (D.UNSCORED_MASS, 0.01),
        (D.SCORED_PRIORITY_CV, 0.02),
        (D.PRIORITY_TD_SPEARMAN, 0.03),
    ):
        assert abs(estimate[key] - full[key]) < tolerance, key


def test_average_ranks_and_spearman_with_ties_by_hand():
    np.testing.assert_array_equal(
        D.average_ranks(np.array([10.0, 20.0, 20.0, 30.0, 20.0])),
        [1.0, 3.0, 3.0, 5.0, 3.0],
    )
    np.testing.assert_array_equal(
        D.average_ranks(np.array([2, 1, 2, 1])), [3.5, 1.5, 3.5, 1.5]
    )
    # Ranks [1, 2.5, 2.5, 4] vs [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10).
    rho = D.spearman(np.array([1.0, 2.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0, 4.0]))
    assert rho == pytest.approx(3 / np.sqrt(10), rel=1e-12)
    assert D.spearman(np.arange(5.0), -np.arange(5.0)) == pytest.approx(-1.0)
    assert np.isnan(D.spearman(np.ones(4), np.arange(4.0)))
    assert np.isnan(D.spearman(np.ones(1), np.ones(1)))


def test_spearman_matches_brute_force_with_many_ties():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 6, 300).astype(float)
    y = x + rng.integers(0, 4, 300)
    assert D.spearman(x, y) == pytest.approx(_brute_spearman(x, y), rel=1e-12)


def test_probe_diagnostics_std_and_drift_leave_out_replaced_items():
    scores = np.array([0.1, 0.4, 0.2, 0.3, 0.9])
    first = D.probe_diagnostics(scores)
    assert first == {D.PROBE_SCORE_STD: pytest.approx(scores.std())}
    # Same order: no drift; item 4 (replaced, NaN) is left out.
    previous = np.array([1.0, 4.0, 2.0, 3.0, np.nan])
    assert D.probe_diagnostics(scores, previous)[D.PROBE_RANK_DRIFT] == 0.0
    reversed_ = np.array([4.0, 1.0, 3.0, 2.0, np.nan])
    assert D.probe_diagnostics(scores, reversed_)[D.PROBE_RANK_DRIFT] == 2.0
    # Fewer than two kept items: undefined, absent.
    assert D.PROBE_RANK_DRIFT not in D.probe_diagnostics(
        scores, np.array([1.0, np.nan, np.nan, np.nan, np.nan])
    )


# ------------------------------------------------------------ the scored mask
def _episode(ep, length):
    return SingleAgentEpisode(
        id_=f"ep{ep}",
        observations=[np.array([ep, t], np.float32) for t in range(length + 1)],
        actions=[t % 2 for t in range(length)],
        rewards=[1.0] * length,
        terminated=True,
        len_lookback_buffer=0,
        observation_space=OBS_SPACE,
        action_space=gym.spaces.Discrete(2),
    )


def _rows(num, delta=0.5):
    """NERS feedback rows `[score, delta, q, sample_position]`."""
    return np.stack(
        [np.full(num, 0.5), np.full(num, delta), np.full(num, 2.0), np.arange(num)], 1
    )


def _filled(capacity=66, episodes=range(1, 6)):
    buffer = NERSEpisodeReplayBuffer(capacity, alpha=0.6, seed=0)
    buffer.add([_episode(e, 10) for e in episodes])
    return buffer


def test_scored_mask_set_on_update_cleared_on_overwrite():
    buffer = _filled()
    assert not buffer.diagnostics_columns(buffer.transition_slots())["scored"].any()
    batch = buffer.sample_batch(16)
    buffer.update_priorities(_rows(16))
    scored = np.flatnonzero(buffer.slot_memory.scored)
    np.testing.assert_array_equal(scored, np.unique(batch["indices"]))
    columns = buffer.diagnostics_columns(scored)
    assert columns["scored"].all() and np.all(columns["delta"] == 0.5)
    np.testing.assert_allclose(columns["leaf"], 0.5**0.6)
    # Rows for overwritten slots do not count (stale sample).
    buffer.sample_batch(4)
    buffer.add([_episode(9, 10)])
    buffer.update_priorities(_rows(4))
    # The new episode's 11 slots wrapped the ring: overwritten, unscored.
    written = buffer.last_added_slots
    assert not buffer.slot_memory.scored[written].any()
    assert not buffer.slot_memory.scored[~buffer.storage.is_transition].any()
    still = np.setdiff1d(
        scored, np.r_[written, np.flatnonzero(~buffer.storage.is_transition)]
    )
    assert still.size and buffer.slot_memory.scored[still].all()


def test_scored_mask_survives_get_state_and_old_states_reconstruct_it():
    buffer = _filled()
    buffer.sample_batch(16)
    buffer.update_priorities(_rows(16, delta=-0.25))
    state = buffer.get_state()
    restored = NERSEpisodeReplayBuffer(66, alpha=0.6)
    restored.set_state(state)
    np.testing.assert_array_equal(
        restored.slot_memory.scored, buffer.slot_memory.scored
    )
    old = {k: v for k, v in state.items() if k != "_scored"}
    older = NERSEpisodeReplayBuffer(66, alpha=0.6)
    older.set_state(old)
    # Without the mask: scored where the cached TD error left its initial 1.0.
    np.testing.assert_array_equal(older.slot_memory.scored, buffer.slot_memory.scored)


# --------------------------------------------------------------- probe set
def test_probe_is_drawn_once_enough_are_stored_and_replaced_on_eviction():
    buffer = _filled(capacity=66, episodes=range(1, 3))  # 20 transitions
    diag = SamplerDiagnostics(n_step=(1, 3), gamma=0.9, seed=0, probe_size=30)
    assert diag.refresh_probe(buffer, buffer.transition_slots()) is None
    buffer.add([_episode(e, 10) for e in range(3, 6)])  # 50 transitions
    buffer_rng = buffer.rng.bit_generator.state
    batch = diag.refresh_probe(buffer, buffer.transition_slots())
    assert buffer.rng.bit_generator.state == buffer_rng  # never the buffer's draws
    slots = diag.probe_slots.copy()
    assert slots.size == 30 and np.unique(slots).size == 30
    assert buffer.storage.is_transition[slots].all()
    np.testing.assert_array_equal(batch["indices"], slots)
    assert set(np.unique(diag.probe_n_steps)) <= {1, 2, 3}
    for key in ("obs", "new_obs", "actions", "rewards", "ts", "delta", "q"):
        assert batch[key].shape[0] == 30, key
    diag.probe_previous = np.arange(30.0)
    buffer.add([_episode(e, 10) for e in range(6, 8)])  # evicts the oldest slots
    stored = buffer.transition_slots()
    kept = buffer.still_stored(slots, diag.probe_stamps)
    assert 0 < kept.sum() < 30
    diag.refresh_probe(buffer, stored)
    new = diag.probe_slots
    np.testing.assert_array_equal(new[kept], slots[kept])
    assert np.unique(new).size == 30 and np.isin(new, stored).all()
    assert buffer.still_stored(new, diag.probe_stamps).all()
    np.testing.assert_array_equal(np.isnan(diag.probe_previous), ~kept)


def test_replacement_items_are_uniform_over_the_stored_ones_outside_the_probe():
    """A large buffer: replacements are drawn by rejection (no sort of the
    buffer), distinct, stored, outside the probe, and uniform over the rest."""
    diag = SamplerDiagnostics(n_step=1, gamma=0.9, seed=3, probe_size=30)
    stored = np.arange(0, 400, 2)  # 200 stored slots
    probe = stored[::10]  # 20 of them
    counts = np.zeros(400, np.int64)
    for _ in range(2000):
        fresh = diag._fresh_items(stored, probe, 25)
        assert fresh.size == 25 and np.unique(fresh).size == 25
        counts[fresh] += 1
    outside = np.setdiff1d(stored, probe)
    assert counts.sum() == counts[outside].sum()  # only stored, never the probe
    assert stats.chisquare(counts[outside]).pvalue > 1e-3
    # Fewer stored slots than the probe and the replacements need: what is left.
    small = diag._fresh_items(stored[:30], probe[:3], 40)
    np.testing.assert_array_equal(np.sort(small), np.setdiff1d(stored[:30], probe[:3]))


class _FakeResult:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class _FakeAlgorithm:
    """A buffer and a 'learner group' scoring each item by obs[0] * 10 + obs[1]."""

    def __init__(self, buffer):
        self.local_replay_buffer = buffer
        self.learner_group = self

    def foreach_learner(self, func, *, batch):
        obs = np.asarray(batch["obs"], dtype=np.float64)
        return [_FakeResult(obs[:, 0] * 10 + obs[:, 1])]


def test_compute_reports_every_key_and_state_round_trips():
    buffer = _filled(capacity=200)
    buffer.sample_batch(32)
    buffer.update_priorities(
        np.stack(
            [
                np.linspace(0.2, 0.8, 32),
                np.linspace(1, 3, 32),
                np.ones(32),
                np.arange(32),
            ],
            1,
        )
    )
    algo = _FakeAlgorithm(buffer)
    diag = SamplerDiagnostics(sample_size=30, n_step=1, seed=1, probe_size=20)
    first = diag.compute(algo)
    every_key = {
        D.PRIORITY_ENTROPY_NORMALIZED,
        D.EFFECTIVE_SAMPLE_FRACTION,
        D.SCORED_PRIORITY_MAX_OVER_MIN,
        D.SCORED_PRIORITY_CV,
        D.UNSCORED_MASS,
        D.PRIORITY_TD_SPEARMAN,
        D.PROBE_SCORE_STD,
        D.PROBE_RANK_DRIFT,
    }
    assert set(first) == every_key - {D.PROBE_RANK_DRIFT}  # no previous scoring
    twin = SamplerDiagnostics(sample_size=30, n_step=1, seed=1, probe_size=20)
    twin.set_state(diag.get_state())
    second, again = diag.compute(algo), twin.compute(algo)
    assert second == again  # same subset draw and probe: exact resume
    # Scores are fixed per item here: no drift.
    assert second[D.PROBE_RANK_DRIFT] == pytest.approx(0.0, abs=1e-12)
    assert set(second) == every_key
    for value in second.values():
        assert np.isfinite(value)
