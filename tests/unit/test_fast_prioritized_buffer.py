"""FastPrioritizedEpisodeReplayBuffer against a plain python reference.

Every crafted episode encodes `(ep, t)` in its data: obs `[ep, t, 0, 0]`,
reward `ep * 1000 + t`, action `t % 2`, extra output `action_logp = -(ep * 100 + t)`,
so each sampled item can be checked from its own observation.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer

OBS_SPACE = gym.spaces.Box(-1e6, 1e6, (4,), np.float32)
ACT_SPACE = gym.spaces.Discrete(2)
GAMMA = 0.9


def reward(ep, t):
    return ep * 1000.0 + t


def logp(ep, t):
    return np.float32(-(ep * 100 + t))


def chunk(ep, t0, t1, *, terminated=False, truncated=False, id_=None):
    """Episode chunk of `ep` covering steps `t0 .. t1 - 1` (obs `t0 .. t1`)."""
    return SingleAgentEpisode(
        id_=id_ if id_ is not None else f"ep{ep}",
        observations=[np.array([ep, t, 0, 0], np.float32) for t in range(t0, t1 + 1)],
        actions=[t % 2 for t in range(t0, t1)],
        rewards=[reward(ep, t) for t in range(t0, t1)],
        extra_model_outputs={"action_logp": [logp(ep, t) for t in range(t0, t1)]},
        terminated=terminated,
        truncated=truncated,
        t_started=t0,
        len_lookback_buffer=0,
        observation_space=OBS_SPACE,
        action_space=ACT_SPACE,
    )


def peek(value):
    return value.peek() if hasattr(value, "peek") else value


class Reference:
    """What is stored per episode: the connected range `[lo, hi]` of obs t and
    whether `hi` is the episode's terminated/truncated end."""

    def __init__(self):
        self.ranges = {}

    def set(self, ep, lo, hi, terminated=False, truncated=False):
        self.ranges[ep] = (lo, hi, terminated, truncated)

    def expected(self, ep, t, n, gamma=GAMMA):
        lo, hi, term, trunc = self.ranges[ep]
        assert lo <= t < hi, (ep, t)
        used = min(n, hi - t)
        ret = sum(gamma**k * reward(ep, t + k) for k in range(used))
        at_end = t + used == hi
        return {
            "used": used,
            "new_t": t + used,
            "reward": ret,
            "terminated": term and at_end,
            "truncated": trunc and at_end,
        }


def check_columnar(batch, ref, n, gamma=GAMMA):
    eps = batch["obs"][:, 0].astype(int)
    ts = batch["obs"][:, 1].astype(int)
    for i, (ep, t) in enumerate(zip(eps.tolist(), ts.tolist())):
        exp = ref.expected(ep, t, n, gamma)
        assert batch["n_step"][i] == exp["used"], (ep, t)
        np.testing.assert_array_equal(batch["new_obs"][i], [ep, exp["new_t"], 0, 0])
        assert batch["rewards"][i] == pytest.approx(exp["reward"], rel=1e-6)
        assert bool(batch["terminateds"][i]) == exp["terminated"], (ep, t)
        assert bool(batch["truncateds"][i]) == exp["truncated"], (ep, t)
        assert batch["actions"][i] == t % 2
        assert batch["ts"][i] == t
        if "action_logp" in batch:
            assert batch["action_logp"][i] == logp(ep, t)
    return set(zip(eps.tolist(), ts.tolist()))


def check_episodes(episodes, ref, n, gamma=GAMMA):
    seen = set()
    for e in episodes:
        assert len(e) == 1
        o = e.get_observations()
        ep, t = int(o[0][0]), int(o[0][1])
        exp = ref.expected(ep, t, n, gamma)
        np.testing.assert_array_equal(o[1], [ep, exp["new_t"], 0, 0])
        assert e.get_rewards()[0] == pytest.approx(exp["reward"], rel=1e-6)
        assert e.is_terminated == exp["terminated"], (ep, t)
        assert e.is_truncated == exp["truncated"], (ep, t)
        assert int(e.get_actions()[0]) == t % 2
        assert e.t_started == t
        assert int(e.get_extra_model_outputs("n_step")[0]) == exp["used"]
        assert e.get_extra_model_outputs("weights")[0] == pytest.approx(1.0)
        assert e.get_extra_model_outputs("action_logp")[0] == logp(ep, t)
        seen.add((ep, t))
    return seen


def all_steps(ref):
    return {(ep, t) for ep, (lo, hi, _, _) in ref.ranges.items() for t in range(lo, hi)}


# --------------------------------------------------------------------- n-step
@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_returns_with_truncated_ends_and_continuations(n):
    buf = FastPrioritizedEpisodeReplayBuffer(200, seed=n)
    ref = Reference()
    # ep1: chunk ending mid-episode (continued later); ep2 shorter than n;
    # ep3 truncated; ep4 a chunk that is never continued; ep5 single step.
    buf.add(
        [
            chunk(1, 0, 6),
            chunk(2, 0, 2, terminated=True),
            chunk(3, 0, 7, truncated=True),
        ]
    )
    buf.add([chunk(4, 0, 4), chunk(5, 0, 1, terminated=True)])
    buf.check_invariants()
    ref.set(1, 0, 6)
    ref.set(2, 0, 2, terminated=True)
    ref.set(3, 0, 7, truncated=True)
    ref.set(4, 0, 4)
    ref.set(5, 0, 1, terminated=True)
    assert len(buf) == 6 + 2 + 7 + 4 + 1
    assert buf.get_num_episodes() == 5

    batch = buf.sample_batch(
        2000, n_step=n, gamma=GAMMA, include_extra_model_outputs=True
    )
    buf.check_invariants()
    seen = check_columnar(batch, ref, n)
    # Every step (incl. the last n-1 of each episode) is drawn; tails never.
    assert seen == all_steps(ref)
    # Before the continuation arrives the walk stops at the stored end, unflagged.
    mid = batch["obs"][:, 0] == 1
    assert not batch["terminateds"][mid].any() and not batch["truncateds"][mid].any()

    episodes = buf.sample(2000, n_step=n, gamma=GAMMA, include_extra_model_outputs=True)
    assert check_episodes(episodes, ref, n) == all_steps(ref)
    # buffer_index is the slot the item came from (same slot -> same (ep, t)).
    slot_to_item = {}
    for e in episodes:
        slot = int(e.get_extra_model_outputs("buffer_index")[0])
        item = tuple(e.get_observations()[0][:2].astype(int).tolist())
        assert slot_to_item.setdefault(slot, item) == item
    assert len(slot_to_item) == len(buf)

    # Another episode in between, so the continuation is not adjacent in the ring.
    buf.add(chunk(6, 0, 3, terminated=True))
    ref.set(6, 0, 3, terminated=True)
    buf.add(chunk(1, 6, 11, terminated=True))  # continuation: same id_, t_started=6
    ref.set(1, 0, 11, terminated=True)
    buf.add(chunk(4, 4, 6))  # continuation that still ends mid-episode
    ref.set(4, 0, 6)
    buf.check_invariants()
    # A continuation costs no extra slot: still one fragment per episode.
    assert buf.get_num_episodes() == 6
    assert len(buf) == 11 + 2 + 7 + 6 + 1 + 3

    batch = buf.sample_batch(3000, n_step=n, gamma=GAMMA)
    seen = check_columnar(batch, ref, n)
    assert seen == all_steps(ref)
    episodes = buf.sample(3000, n_step=n, gamma=GAMMA, include_extra_model_outputs=True)
    assert check_episodes(episodes, ref, n) == all_steps(ref)
    if n > 1:
        # Items just before the old chunk boundary now cross it.
        crossing = (batch["obs"][:, 0] == 1) & (batch["obs"][:, 1] == 5)
        assert crossing.any()
        assert np.all(batch["n_step"][crossing] == n)


def test_tuple_n_step_is_inclusive():
    buf = FastPrioritizedEpisodeReplayBuffer(200, seed=3)
    ref = Reference()
    buf.add([chunk(1, 0, 30, terminated=True), chunk(2, 0, 3, truncated=True)])
    ref.set(1, 0, 30, terminated=True)
    ref.set(2, 0, 3, truncated=True)
    batch = buf.sample_batch(4000, n_step=(2, 4), gamma=GAMMA)
    eps = batch["obs"][:, 0].astype(int)
    ts = batch["obs"][:, 1].astype(int)
    used = batch["n_step"]
    remaining = np.array([ref.ranges[e][1] for e in eps]) - ts
    far = remaining >= 4
    assert set(used[far].tolist()) == {2, 3, 4}
    # Roughly uniform over the three values.
    freqs = np.bincount(used[far], minlength=5)[2:] / far.sum()
    np.testing.assert_allclose(freqs, 1 / 3, atol=0.05)
    # Near the end the drawn n is cut at the stored end.
    assert np.all(used >= np.minimum(2, remaining))
    assert np.all(used <= np.minimum(4, remaining))
    for i in range(len(used)):
        exp = ref.expected(int(eps[i]), int(ts[i]), int(used[i]))
        assert exp["used"] == used[i]
        assert batch["rewards"][i] == pytest.approx(exp["reward"], rel=1e-6)
        assert batch["new_obs"][i][1] == exp["new_t"]
        assert batch["terminateds"][i] == exp["terminated"]
        assert batch["truncateds"][i] == exp["truncated"]
    # The drop-in path uses the same inclusive range.
    episodes = buf.sample(3000, n_step=(2, 4))
    ns = {int(e.get_extra_model_outputs("n_step")[0]) for e in episodes}
    assert {2, 3, 4} <= ns and ns <= {1, 2, 3, 4}


def test_two_chunks_of_one_episode_in_one_add_are_joined():
    """The code's comment in `_plan_continuations`: a list holding two chunks of
    one episode -- "the second continues the first in `add`"."""
    buf = FastPrioritizedEpisodeReplayBuffer(100, seed=0)
    buf.add([chunk(1, 0, 5), chunk(1, 5, 10, terminated=True)])
    buf.check_invariants()
    ref = Reference()
    ref.set(1, 0, 10, terminated=True)
    batch = buf.sample_batch(500, n_step=3, gamma=GAMMA)
    check_columnar(batch, ref, 3)


# ----------------------------------------------------------------- priorities
def transition_slots(buf):
    leaves = buf.get_priorities(np.arange(buf.capacity))
    return np.flatnonzero(leaves > 0)


def test_sampling_frequencies_match_priorities():
    alpha = 0.7
    buf = FastPrioritizedEpisodeReplayBuffer(64, alpha=alpha, seed=11)
    buf.add(
        [
            chunk(1, 0, 8, terminated=True),
            chunk(2, 0, 6),
            chunk(3, 0, 5, truncated=True),
        ]
    )
    slots = transition_slots(buf)
    assert len(slots) == len(buf) == 19
    # Tail slots (one per fragment) hold priority 0.
    assert buf.get_num_episodes() == 3
    prios = np.arange(1, len(slots) + 1, dtype=float) ** 1.5
    applied = buf.update_priorities_at(slots, prios)
    assert applied.all()
    np.testing.assert_allclose(buf.get_priorities(slots), prios**alpha)
    buf.check_invariants()

    counts = np.zeros(buf.capacity)
    tails = {(1, 8), (2, 6), (3, 5)}
    for _ in range(100):
        batch = buf.sample_batch(500)
        np.add.at(counts, batch["indices"], 1)
        items = set(
            zip(
                batch["obs"][:, 0].astype(int).tolist(),
                batch["obs"][:, 1].astype(int).tolist(),
            )
        )
        assert not items & tails
    total = counts.sum()
    assert counts[np.setdiff1d(np.arange(buf.capacity), slots)].sum() == 0
    expected = prios**alpha / np.sum(prios**alpha)
    observed = counts[slots] / total
    chi2 = np.sum((observed - expected) ** 2 / expected) * total
    # df = 18; the 0.9999 quantile is ~45. Stratified sampling only lowers it.
    assert chi2 < 45.0, chi2
    np.testing.assert_allclose(observed, expected, atol=0.004)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights(beta):
    alpha = 0.6
    buf = FastPrioritizedEpisodeReplayBuffer(100, alpha=alpha, beta=0.5, seed=5)
    buf.add([chunk(1, 0, 10, terminated=True), chunk(2, 0, 12)])
    buf.sample_batch(len(buf))
    rng = np.random.default_rng(0)
    buf.update_priorities(rng.uniform(0.1, 5.0, size=len(buf)))

    def expected_weights(indices):
        leaves = buf.get_priorities(np.arange(buf.capacity))
        p = leaves / leaves.sum()
        n = len(buf)
        p_min = p[p > 0].min()
        return (n * p[indices]) ** -beta / (n * p_min) ** -beta

    batch = buf.sample_batch(300, beta=beta)
    np.testing.assert_allclose(
        batch["weights"], expected_weights(batch["indices"]), rtol=1e-5
    )
    if beta > 0:
        assert batch["weights"].min() < 0.99
    assert batch["weights"].max() <= 1.0 + 1e-6

    episodes = buf.sample(300, beta=beta)
    idx = np.array(
        [int(e.get_extra_model_outputs("buffer_index")[0]) for e in episodes]
    )
    w = np.array([float(e.get_extra_model_outputs("weights")[0]) for e in episodes])
    np.testing.assert_allclose(w, expected_weights(idx), rtol=1e-5)

    # Without a beta argument the constructor's default (0.5) is used.
    batch = buf.sample_batch(100)
    beta = 0.5
    np.testing.assert_allclose(
        batch["weights"], expected_weights(batch["indices"]), rtol=1e-5
    )


def test_update_priorities_validation_nonfinite_and_max_priority():
    alpha = 0.5
    buf = FastPrioritizedEpisodeReplayBuffer(100, alpha=alpha, seed=2)
    buf.add(chunk(1, 0, 20, terminated=True))
    # New transitions enter with the initial max priority 1.
    np.testing.assert_array_equal(buf.get_priorities(transition_slots(buf)), 1.0)

    batch = buf.sample_batch(10)
    with pytest.raises(ValueError):
        buf.update_priorities(np.ones(9))
    with pytest.raises(ValueError):
        buf.update_priorities(np.ones(11))
    # After a failed call the sample is still pending; a correct call works.
    idx = batch["indices"]
    # Stratified over 20 equal priorities: one item per pair of leaves.
    assert len(np.unique(idx)) == 10
    before = buf.get_priorities(idx).copy()
    new = np.array([np.nan, np.inf, -np.inf, -1.0, 4.0, 0.5, 2.0, 3.0, 0.0, 1.5])
    buf.update_priorities(new)
    after = buf.get_priorities(idx)
    np.testing.assert_array_equal(after[:4], before[:4])
    np.testing.assert_allclose(after[4:8], new[4:8] ** alpha)
    # Priority 0 is valid but floored, so the item stays reachable.
    assert 0.0 < after[8] < 1e-5
    np.testing.assert_allclose(after[9], 1.5**alpha)
    buf.check_invariants()

    metrics = buf.get_metrics()
    assert peek(metrics["num_priorities_nonfinite_skipped_lifetime"]) == 4
    assert peek(metrics["max_priority"]) == pytest.approx(4.0)

    # New data enters with the running max priority ** alpha (not inf).
    buf.add(chunk(2, 0, 5))
    batch = buf.sample_batch(400)
    new_items = batch["obs"][:, 0] == 2
    assert new_items.any()
    np.testing.assert_allclose(
        buf.get_priorities(batch["indices"][new_items]), 4.0**alpha
    )
    buf.check_invariants()

    # Counting accumulates.
    buf.sample_batch(2)
    buf.update_priorities([np.nan, 1.0])
    assert peek(buf.get_metrics()["num_priorities_nonfinite_skipped_lifetime"]) == 5


def test_update_priorities_duplicates_last_wins():
    buf = FastPrioritizedEpisodeReplayBuffer(20, alpha=1.0, seed=0)
    buf.add(chunk(1, 0, 4, terminated=True))
    slots = transition_slots(buf)
    buf.update_priorities_at([slots[0], slots[1], slots[0]], [5.0, 6.0, 7.0])
    np.testing.assert_allclose(buf.get_priorities(slots[:2]), [7.0, 6.0])


# ------------------------------------------------------------------ eviction
def test_eviction_with_interleaved_runners():
    rng = np.random.default_rng(123)
    capacity = 50
    n = 3
    buf = FastPrioritizedEpisodeReplayBuffer(capacity, alpha=0.6, seed=9)
    # Two "runners" alternate chunks of their current episode.
    runners = [{"ep": 0, "t": 0}, {"ep": 1, "t": 0}]
    next_ep = 2
    boundaries = {}  # ep -> chunk-end timesteps
    ends = {}  # ep -> (final t, terminated, truncated)
    total_added = 0
    for step in range(300):
        r = runners[step % 2]
        length = int(rng.integers(1, 12))
        kind = rng.choice(["open", "open", "terminated", "truncated"])
        ep, t0 = r["ep"], r["t"]
        c = chunk(
            ep,
            t0,
            t0 + length,
            terminated=kind == "terminated",
            truncated=kind == "truncated",
        )
        buf.add(c)
        total_added += length
        boundaries.setdefault(ep, set()).add(t0 + length)
        if kind == "open":
            r["t"] = t0 + length
        else:
            ends[ep] = (t0 + length, kind == "terminated", kind == "truncated")
            r["ep"], r["t"] = next_ep, 0
            next_ep += 1
        buf.check_invariants()
        assert len(buf) <= capacity
        assert buf.get_num_timesteps() == len(buf)
        assert len(buf) + buf.get_num_episodes() <= capacity

        batch = buf.sample_batch(
            64, n_step=n, gamma=GAMMA, include_extra_model_outputs=True
        )
        buf.check_invariants()
        eps = batch["obs"][:, 0].astype(int)
        ts = batch["obs"][:, 1].astype(int)
        used = batch["n_step"]
        assert np.all((used >= 1) & (used <= n))
        np.testing.assert_array_equal(batch["new_obs"][:, 0], eps)
        np.testing.assert_array_equal(batch["new_obs"][:, 1], ts + used)
        np.testing.assert_array_equal(batch["actions"], ts % 2)
        np.testing.assert_array_equal(batch["ts"], ts)
        np.testing.assert_array_equal(
            batch["action_logp"], [logp(e, t) for e, t in zip(eps, ts)]
        )
        for i in range(len(eps)):
            e, t, u = int(eps[i]), int(ts[i]), int(used[i])
            exp_r = sum(GAMMA**k * reward(e, t + k) for k in range(u))
            assert batch["rewards"][i] == pytest.approx(exp_r, rel=1e-6)
            final = ends.get(e)
            is_end = final is not None and t + u == final[0]
            assert batch["terminateds"][i] == (is_end and final[1])
            assert batch["truncateds"][i] == (is_end and final[2])
            if u < n and not is_end:
                # Cut short only at the stored end of a chunk.
                assert t + u in boundaries[e], (e, t, u)

        # Drop-in path plus priority updates (some of them stale after the next add).
        episodes = buf.sample(16, n_step=n)
        for e in episodes:
            o = e.get_observations()
            u = int(e.get_extra_model_outputs("n_step")[0])
            assert o[1][0] == o[0][0] and o[1][1] == o[0][1] + u
        buf.check_invariants()
        if step % 3 == 0:
            buf.add(chunk(10_000 + step, 0, 2, terminated=True))
            ends[10_000 + step] = (2, True, False)
            boundaries[10_000 + step] = {2}
            total_added += 2
            buf.check_invariants()
        buf.update_priorities(rng.uniform(0.01, 3.0, size=16))
        buf.check_invariants()

    metrics = buf.get_metrics()
    assert peek(metrics["num_env_steps_added_lifetime"]) == total_added
    assert peek(metrics["num_env_steps_evicted_lifetime"]) == total_added - len(buf)
    assert peek(metrics["num_priorities_stale_skipped_lifetime"]) > 0


def test_continuation_after_tail_eviction_starts_fresh_fragment():
    buf = FastPrioritizedEpisodeReplayBuffer(12, seed=0)
    buf.add(chunk(1, 0, 3))  # slots 0-3 (tail 3)
    buf.add(chunk(2, 0, 7, terminated=True))  # slots 4-11: the ring is full
    buf.add(chunk(3, 0, 3, terminated=True))  # slots 0-3: all of ep1 evicted
    buf.check_invariants()
    # ep1's tail is gone, so its continuation is stored as a new fragment
    # (slots 4-6), evicting the start of ep2, which stays sampleable from t=3.
    buf.add(chunk(1, 3, 5, terminated=True))
    buf.check_invariants()
    ref = Reference()
    ref.set(1, 3, 5, terminated=True)
    ref.set(2, 3, 7, terminated=True)
    ref.set(3, 0, 3, terminated=True)
    assert len(buf) == 2 + 4 + 3
    assert buf.get_num_episodes() == 3
    batch = buf.sample_batch(300, n_step=3, gamma=GAMMA)
    assert check_columnar(batch, ref, 3) == all_steps(ref)


# ----------------------------------------------------------------- sequences
def test_recent_sequences_cut_the_last_add_into_rows_inside_each_chunk():
    """On-policy rows: the last add's chunks split at 0, T, 2T..., never crossing
    into the next chunk of the same episode added in the same call, never
    touching older data, and not counted as a sample."""
    buf = FastPrioritizedEpisodeReplayBuffer(200, seed=0)
    buf.add([chunk(1, 0, 5)])  # older data: must not appear
    buf.add(
        [
            chunk(1, 5, 12, terminated=True),  # continues ep 1: 7 steps
            chunk(2, 0, 3),  # 3 steps, first chunk of ep 2
            chunk(2, 3, 8),  # 5 more steps of ep 2 in the same call
        ]
    )
    batch = buf.recent_sequences(3)
    # ep1 7 steps -> 3+3+1; ep2 3 steps -> 3; ep2 5 steps -> 3+2.
    expected_rows = [(1, 5, 3), (1, 8, 3), (1, 11, 1), (2, 0, 3), (2, 3, 3), (2, 6, 2)]
    got = [
        (int(batch["obs"][r, 0, 0]), int(batch["obs"][r, 0, 1]), int(length))
        for r, length in enumerate(batch["lengths"])
    ]
    assert got == expected_rows
    np.testing.assert_array_equal(batch["weights"], 1.0)
    for r, (ep, t0, length) in enumerate(expected_rows):
        np.testing.assert_array_equal(
            batch["obs"][r, : length + 1, 1], t0 + np.arange(length + 1)
        )
        np.testing.assert_array_equal(
            batch["action_logp"][r, :length], [logp(ep, t0 + k) for k in range(length)]
        )
        np.testing.assert_array_equal(
            batch["rewards"][r, :length], [reward(ep, t0 + k) for k in range(length)]
        )
    # Only ep 1's last row ends the episode (terminated at t=11).
    assert batch["terminateds"].sum() == 1 and batch["terminateds"][2, 0]
    # Not a sample: nothing is waiting for update_priorities().
    assert buf.last_sampled_slots.size == 0
    # ... nor counted as one in RLlib's sample metrics.
    metrics = buf.get_metrics()
    assert "num_env_steps_sampled" not in metrics
    assert "num_env_steps_sampled_lifetime" not in metrics
    buf.add([])
    with pytest.raises(ValueError, match="preceding add"):
        buf.recent_sequences(3)


def test_sample_sequences():
    buf = FastPrioritizedEpisodeReplayBuffer(200, seed=4)
    stored = {
        1: (0, 10, True, False),
        2: (0, 2, False, True),
        3: (0, 7, False, False),
        4: (5, 9, True, False),
    }
    buf.add([chunk(1, 0, 10, terminated=True), chunk(2, 0, 2, truncated=True)])
    buf.add([chunk(3, 0, 7), chunk(4, 5, 9, terminated=True)])
    B, T = 500, 4
    batch = buf.sample_sequences(B, T)
    buf.check_invariants()
    assert batch["obs"].shape == (B, T + 1, 4)
    lengths = batch["lengths"]
    np.testing.assert_array_equal(lengths, batch["mask"].sum(axis=1))
    starts = set()
    for b in range(B):
        L = int(lengths[b])
        ep, t0 = int(batch["obs"][b, 0, 0]), int(batch["obs"][b, 0, 1])
        lo, hi, term, trunc = stored[ep]
        starts.add((ep, t0))
        assert lo <= t0 < hi
        assert L == min(T, hi - t0)
        np.testing.assert_array_equal(batch["mask"][b], np.arange(T) < L)
        np.testing.assert_array_equal(batch["obs"][b, : L + 1, 0], ep)
        np.testing.assert_array_equal(
            batch["obs"][b, : L + 1, 1], t0 + np.arange(L + 1)
        )
        # Padding repeats the bootstrap observation.
        np.testing.assert_array_equal(batch["obs"][b, L:, 1], t0 + L)
        np.testing.assert_array_equal(batch["ts"][b, :L], t0 + np.arange(L))
        np.testing.assert_array_equal(batch["actions"][b, :L], (t0 + np.arange(L)) % 2)
        np.testing.assert_array_equal(
            batch["rewards"][b],
            [reward(ep, t0 + k) if k < L else 0.0 for k in range(T)],
        )
        np.testing.assert_array_equal(
            batch["action_logp"][b, :L], [logp(ep, t0 + k) for k in range(L)]
        )
        at_end = t0 + L == hi
        exp_term = np.zeros(T, bool)
        exp_trunc = np.zeros(T, bool)
        exp_term[L - 1] = term and at_end
        exp_trunc[L - 1] = trunc and at_end
        np.testing.assert_array_equal(batch["terminateds"][b], exp_term)
        np.testing.assert_array_equal(batch["truncateds"][b], exp_trunc)
        assert batch["weights"][b] == pytest.approx(1.0)
    assert starts == {
        (ep, t) for ep, (lo, hi, _, _) in stored.items() for t in range(lo, hi)
    }

    episodes = buf.sample(
        batch_size_B=4, batch_length_T=3, include_extra_model_outputs=True
    )
    assert len(episodes) == 4
    for e in episodes:
        assert 1 <= len(e) <= 3
        obs = np.asarray(e.get_observations())
        ep, t0 = int(obs[0, 0]), int(obs[0, 1])
        lo, hi, term, trunc = stored[ep]
        assert len(e) == min(3, hi - t0)
        np.testing.assert_array_equal(obs[:, 1], t0 + np.arange(len(e) + 1))
        assert e.t_started == t0
        np.testing.assert_array_equal(
            e.get_extra_model_outputs("action_logp"),
            [logp(ep, t0 + k) for k in range(len(e))],
        )
        assert len(e.get_extra_model_outputs("weights")) == len(e)
        assert e.is_terminated == (term and t0 + len(e) == hi)
        assert e.is_truncated == (trunc and t0 + len(e) == hi)
    # As RLlib's sample(): without include_extra_model_outputs only the
    # weights; to_numpy=True hands numpy episodes (both were ignored once).
    (lean,) = buf.sample(batch_size_B=1, batch_length_T=3, to_numpy=True)
    assert set(lean.extra_model_outputs) == {"weights"}
    assert lean.is_numpy
    assert isinstance(lean.get_observations(), np.ndarray)


def test_sample_refuses_what_rllibs_refuses_or_it_cannot_serve():
    buf = FastPrioritizedEpisodeReplayBuffer(200, seed=4)
    buf.add([chunk(1, 0, 10, terminated=True)])
    with pytest.raises(ValueError, match="num_items=3 and batch_size_B=7; give eith"):
        buf.sample(num_items=3, batch_size_B=7)
    with pytest.raises(ValueError, match="sample_episodes=False: this buffer returns"):
        buf.sample(num_items=3, sample_episodes=False)
    with pytest.raises(ValueError, match=r"num_items=2\) with batch_length_T=4"):
        buf.sample(num_items=2, batch_length_T=4)
    with pytest.raises(ValueError, match="It takes RLlib's: num_items or batch_size_B"):
        buf.sample(num_items=3, foo=1)
    buf.sample(num_items=3)
    with pytest.raises(ValueError, match="stores module 'default_policy' only"):
        buf.update_priorities(np.ones(3), module_id="foo")
    buf.update_priorities(np.ones(3), module_id="default_policy")  # RLlib's DQN


# --------------------------------------------------------------------- state
def _batches_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _filled_buffer(capacity=60):
    buf = FastPrioritizedEpisodeReplayBuffer(capacity, alpha=0.6, beta=0.4, seed=21)
    buf.add([chunk(1, 0, 12), chunk(2, 0, 9, terminated=True)])
    buf.add([chunk(3, 0, 15, truncated=True), chunk(4, 0, 6)])
    buf.sample_batch(10)
    buf.update_priorities(np.linspace(0.2, 4.0, 10))
    buf.add([chunk(1, 12, 20), chunk(5, 0, 10, terminated=True)])  # wraps the ring
    buf.sample_batch(7, n_step=2)
    return buf


def test_get_state_set_state_round_trip():
    buf = _filled_buffer()
    state = buf.get_state()
    restored = FastPrioritizedEpisodeReplayBuffer(60, seed=999)
    restored.set_state(state)
    restored.check_invariants()
    assert len(restored) == len(buf)
    assert restored.get_num_episodes() == buf.get_num_episodes()

    kwargs = {"n_step": (1, 3), "gamma": 0.95, "include_extra_model_outputs": True}
    _batches_equal(buf.sample_batch(64, **kwargs), restored.sample_batch(64, **kwargs))
    a = buf.sample(32, n_step=2)
    b = restored.sample(32, n_step=2)
    assert [int(e.get_extra_model_outputs("buffer_index")[0]) for e in a] == [
        int(e.get_extra_model_outputs("buffer_index")[0]) for e in b
    ]
    prios = np.random.default_rng(0).uniform(0.1, 2.0, 32)
    buf.update_priorities(prios)
    restored.update_priorities(prios)

    # Further adds: continuation of the open ep1 / ep4 and new episodes.
    for target in (buf, restored):
        target.add([chunk(1, 20, 25, terminated=True), chunk(6, 0, 8)])
        target.add(chunk(4, 6, 9, truncated=True))
        target.check_invariants()
    _batches_equal(buf.sample_batch(64, **kwargs), restored.sample_batch(64, **kwargs))
    seqs_a = buf.sample_sequences(8, 4)
    seqs_b = restored.sample_sequences(8, 4)
    _batches_equal(seqs_a, seqs_b)

    with pytest.raises(ValueError, match="capacity"):
        FastPrioritizedEpisodeReplayBuffer(61).set_state(state)


def test_get_state_is_a_snapshot():
    """Restoring a state taken earlier must replay the original's later history,
    even if the original buffer kept running after `get_state()`."""
    buf = _filled_buffer()
    state = buf.get_state()

    def continue_run(target):
        target.add([chunk(7, 0, 20), chunk(1, 20, 24)])
        target.add(chunk(8, 0, 15, terminated=True))
        return target.sample_batch(64, n_step=3, include_extra_model_outputs=True)

    original = continue_run(buf)
    restored = FastPrioritizedEpisodeReplayBuffer(60)
    restored.set_state(state)
    _batches_equal(original, continue_run(restored))


def test_state_of_empty_buffer_round_trips():
    buf = FastPrioritizedEpisodeReplayBuffer(30, seed=1)
    restored = FastPrioritizedEpisodeReplayBuffer(30)
    restored.set_state(buf.get_state())
    for target in (buf, restored):
        target.add(chunk(1, 0, 5, terminated=True))
    _batches_equal(buf.sample_batch(10), restored.sample_batch(10))


def test_lap_priorities_are_raised_to_min_priority_before_the_exponent():
    """LAP (Fujimoto et al. 2020): leaf `max(|delta|, 1) ** alpha`, new steps
    at the max priority, no importance weights with beta 0; the setting
    survives a state round trip."""
    buf = FastPrioritizedEpisodeReplayBuffer(
        60, alpha=0.4, beta=0.0, min_priority=1.0, seed=3
    )
    buf.add([chunk(1, 0, 12), chunk(2, 0, 9, terminated=True)])
    slots = transition_slots(buf)
    np.testing.assert_array_equal(buf.get_priorities(slots), np.ones(slots.size))
    batch = buf.sample_batch(16)
    np.testing.assert_array_equal(batch["weights"], np.ones(16, np.float32))
    deltas = np.linspace(0.0, 4.0, 16)
    buf.update_priorities(deltas)
    expected = np.maximum(deltas, 1.0) ** 0.4
    # Duplicated slots keep the last write.
    last = {int(slot): value for slot, value in zip(batch["indices"], expected)}
    np.testing.assert_allclose(
        buf.get_priorities(list(last)), list(last.values()), rtol=1e-12
    )
    buf.add(chunk(3, 0, 5))  # new steps: the max priority's leaf
    newest = transition_slots(buf)[-5:]
    np.testing.assert_allclose(buf.get_priorities(newest), 4.0**0.4)
    restored = FastPrioritizedEpisodeReplayBuffer(60)
    restored.set_state(buf.get_state())
    assert restored.sampler.min_priority == 1.0
    restored.sample_batch(4)
    restored.update_priorities(np.zeros(4))
    assert restored.get_priorities(restored.sample_batch(64)["indices"]).min() >= 1.0


def test_states_saved_before_min_priority_existed_load_with_the_default():
    buf = _filled_buffer()
    state = buf.get_state()
    del state["_min_priority"]
    restored = FastPrioritizedEpisodeReplayBuffer(60)
    restored.set_state(state)
    assert restored.sampler.min_priority == 1e-12


# --------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": -1}, "capacity"),
        ({"capacity": 1}, "capacity"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"beta": 1.5}, "beta"),
        ({"beta": -0.1}, "beta"),
        ({"batch_size_B": 0}, "batch_size_B"),
        ({"batch_length_T": 0}, "batch_length_T"),
        ({"no_such_setting": 3}, "no_such_setting"),
        ({"min_priority": 0.0}, "min_priority"),
        ({"min_priority": float("inf")}, "min_priority"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FastPrioritizedEpisodeReplayBuffer(**kwargs)


def test_sample_and_add_reject_bad_arguments():
    buf = FastPrioritizedEpisodeReplayBuffer(20, seed=0)
    with pytest.raises(ValueError, match="empty"):
        buf.sample_batch(4)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(4)
    buf.add(chunk(1, 0, 19))  # exactly 20 observations fit
    assert len(buf) == 19
    buf.check_invariants()

    with pytest.raises(ValueError, match="beta"):
        buf.sample(4, beta=1.5)
    with pytest.raises(ValueError, match="beta"):
        buf.sample_batch(4, beta=1.5)
    with pytest.raises(ValueError, match="beta"):
        buf.sample_sequences(2, 3, beta=1.5)
    with pytest.raises(ValueError, match="n_step"):
        buf.sample(4, n_step=(3, 2))
    with pytest.raises(ValueError, match="n_step"):
        buf.sample_batch(4, n_step=(3, 2))
    with pytest.raises(ValueError, match="n_step"):
        buf.sample(4, n_step=0)
    with pytest.raises(ValueError, match="n_step"):
        buf.sample_batch(4, n_step=0)
    with pytest.raises(ValueError, match="n_step"):
        buf.sample_batch(4, n_step=(0, 2))
    with pytest.raises(ValueError, match="batch_size_B"):
        buf.sample_sequences(0, 3)
    with pytest.raises(ValueError, match="batch_length_T"):
        buf.sample_sequences(2, 0)
    with pytest.raises(ValueError, match="num_items"):
        buf.sample_batch(0)
    with pytest.raises(ValueError, match="gamma"):
        buf.sample_batch(4, gamma=1.5)
    with pytest.raises(ValueError, match="n_step"):
        buf.sample(batch_size_B=2, batch_length_T=3, n_step=3)
    with pytest.raises(ValueError):
        buf.sample(4, lookback=2)
    with pytest.raises(ValueError, match="weight"):
        buf.add(chunk(2, 0, 2), weight=-1.0)
    # None of the failures changed the buffer.
    buf.check_invariants()
    assert len(buf) == 19


def test_rllibs_segment_trees_are_built_at_the_smallest_capacity(monkeypatch):
    """RLlib's `__init__` runs on our buffer, but RLlib's Python-list segment
    trees (hundreds of MiB at a large capacity, unused by ours) are built for
    `RLLIB_STORAGE_CAPACITY` (see `RingReplayBuffer`)."""
    from ray.rllib.utils.replay_buffers import prioritized_episode_buffer

    from rllib_ners.replay_buffers.ring_replay_buffer import RLLIB_STORAGE_CAPACITY

    tree_sizes = []
    for name in ("SumSegmentTree", "MinSegmentTree"):
        tree_class = getattr(prioritized_episode_buffer, name)

        def recording(capacity, *args, _tree_class=tree_class, **kwargs):
            tree_sizes.append(capacity)
            return _tree_class(capacity, *args, **kwargs)

        monkeypatch.setattr(prioritized_episode_buffer, name, recording)
    buf = FastPrioritizedEpisodeReplayBuffer(2**20)
    assert isinstance(buf, PrioritizedEpisodeReplayBuffer)
    assert buf.capacity == 2**20
    # RLlib sizes each tree 2 * 2**ceil(log2(capacity)).
    assert tree_sizes == [2 * RLLIB_STORAGE_CAPACITY] * 2


def test_sampled_episodes_get_distinct_uuid4_ids_as_rllibs_do():
    """RLlib's sampled 1-step episodes get `uuid.uuid4().hex` ids; ours are
    drawn in bulk, with the same form (32 hex digits, version 4, RFC 4122)."""
    import uuid

    buf = FastPrioritizedEpisodeReplayBuffer(1000, seed=0)
    buf.add([chunk(1, 0, 50, terminated=True), chunk(2, 0, 50, terminated=True)])
    ids = [episode.id_ for episode in buf.sample(num_items=64, n_step=1)]
    buf.update_priorities(np.ones(64))
    ids += [episode.id_ for episode in buf.sample(num_items=64, n_step=1)]
    assert len(set(ids)) == len(ids) == 128
    for id_ in ids:
        parsed = uuid.UUID(hex=id_)
        assert (parsed.hex, parsed.version, parsed.variant) == (
            id_,
            4,
            uuid.RFC_4122,
        )


# ------------------------------------------------- episode counters and views
def test_episode_counters_count_stored_and_fully_evicted_episodes():
    """An episode is stored while one of its transitions is, evicted when the
    last one goes; stored + evicted = added, at every step."""
    buf = FastPrioritizedEpisodeReplayBuffer(20, seed=0)
    buf.add([chunk(1, 0, 5, terminated=True), chunk(2, 0, 5, terminated=True)])
    assert (buf.get_num_episodes(), buf.get_num_episodes_evicted()) == (2, 0)
    buf.add(chunk(3, 0, 5, terminated=True))  # 18 slots used
    buf.add(chunk(4, 0, 3, terminated=True))  # evicts ep1's first 2 steps
    assert (buf.get_num_episodes(), buf.get_num_episodes_evicted()) == (4, 0)
    assert buf.episodes[0].t_started == 2  # ep1, partly evicted
    buf.add(chunk(5, 0, 4, terminated=True))  # the rest of ep1, ep2's first step
    buf.check_invariants()
    assert (buf.get_num_episodes(), buf.get_num_episodes_evicted()) == (4, 1)
    assert [e.id_ for e in buf.episodes] == ["ep2", "ep3", "ep4", "ep5"]
    assert buf.get_added_timesteps() == 22
    assert len(buf) == buf.get_num_timesteps() == 22 - 5 - 1
    metrics = buf.get_metrics()
    assert peek(metrics["num_episodes_stored"]) == 4


def test_an_open_episode_whose_steps_were_all_evicted_comes_back_as_a_new_one():
    buf = FastPrioritizedEpisodeReplayBuffer(12, seed=0)
    buf.add(chunk(1, 0, 3))  # slots 0-3, tail 3 stays open
    buf.add(chunk(2, 0, 7, terminated=True))  # slots 4-11
    buf.add(chunk(3, 0, 2, terminated=True))  # slots 0-2: ep1's steps, not its tail
    assert buf.get_num_episodes_evicted() == 1
    # ep1's tail is still stored but no longer continued: a new fragment.
    buf.add(chunk(1, 3, 5, terminated=True))
    buf.check_invariants()
    assert buf.get_num_episodes() == 3
    episodes = {e.id_: e for e in buf.episodes}
    assert episodes["ep1"].t_started == 3 and len(episodes["ep1"]) == 2


def test_an_episode_longer_than_the_capacity_keeps_its_newest_steps():
    """RLlib stores such an episode whole (a temporary overflow); ours keeps
    its newest `capacity - 1` steps: capacity counts observation slots."""
    buf = FastPrioritizedEpisodeReplayBuffer(20, seed=0)
    buf.add(chunk(1, 0, 6, terminated=True))
    buf.add(chunk(2, 0, 30, terminated=True))  # 31 observations
    buf.check_invariants()
    assert len(buf) == 19 and buf.get_num_episodes() == 1
    (episode,) = buf.episodes
    assert episode.id_ == "ep2" and episode.t_started == 11
    assert episode.is_terminated
    assert buf.get_num_episodes_evicted() == 1
    assert buf.get_added_timesteps() == 36
    assert peek(buf.get_metrics()["num_env_steps_evicted_lifetime"]) == 36 - 19
    ref = Reference()
    ref.set(2, 11, 30, terminated=True)
    batch = buf.sample_batch(500, n_step=3, gamma=GAMMA)
    assert check_columnar(batch, ref, 3) == all_steps(ref)


def test_one_add_of_many_episodes_beyond_the_capacity_keeps_the_newest_steps():
    buf = FastPrioritizedEpisodeReplayBuffer(20, seed=0)
    buf.add(chunk(9, 0, 4))  # open episode, entirely overwritten below
    buf.add(
        [
            chunk(1, 0, 8, terminated=True),
            chunk(2, 0, 6),
            chunk(3, 0, 9, terminated=True),
            chunk(2, 6, 10, terminated=True),
        ]
    )
    buf.check_invariants()
    # Newest first: ep2's second chunk (4 steps, continuing its first), ep3
    # (9 steps + 1 obs), then what fits of ep2's first chunk (5 slots: 5 steps
    # as the continuation brings none of its own first observation).
    episodes = {e.id_: e for e in buf.episodes}
    assert sorted(episodes) == ["ep2", "ep3"]
    assert (episodes["ep2"].t_started, len(episodes["ep2"])) == (1, 9)
    assert len(buf) == 9 + 9
    # ep9 and ep1 are gone (ep1 was never stored: added and evicted at once).
    assert buf.get_num_episodes_evicted() == 2
    assert buf.get_num_episodes() + buf.get_num_episodes_evicted() == 4
    # A later chunk of the cut episode continues it.
    buf.add(chunk(9, 4, 6, terminated=True))
    buf.check_invariants()


def test_episodes_view_round_trips_the_stored_data():
    buf = FastPrioritizedEpisodeReplayBuffer(60, seed=0)
    buf.add([chunk(1, 0, 6), chunk(2, 0, 4, truncated=True)])
    buf.add(chunk(1, 6, 9, terminated=True))
    view = buf.episodes
    assert [e.id_ for e in view] == ["ep1", "ep2"]
    assert buf.episode_id_to_index == {"ep1": 0, "ep2": 1}
    ep1 = view[0]
    assert len(ep1) == 9 and ep1.is_terminated and ep1.t_started == 0
    np.testing.assert_array_equal(ep1.get_rewards(), [reward(1, t) for t in range(9)])
    np.testing.assert_array_equal(
        ep1.get_extra_model_outputs("action_logp"), [logp(1, t) for t in range(9)]
    )
    assert view[1].is_truncated
    # Another buffer fed the view stores the same data.
    copy = FastPrioritizedEpisodeReplayBuffer(60, seed=0)
    copy.add(list(view))
    for a, b in zip(copy.episodes, buf.episodes):
        np.testing.assert_array_equal(a.get_observations(), b.get_observations())
    # The view is a copy, cached until the buffer changes.
    view.clear()
    assert len(buf.episodes) == 2
    buf.add(chunk(3, 0, 2))
    assert len(buf.episodes) == 3
    with pytest.raises(ValueError, match="view"):
        buf.episodes = [ep1]


def test_single_agent_buffer_names_the_multi_agent_one_for_multi_agent_episodes():
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    buf = FastPrioritizedEpisodeReplayBuffer(20)
    with pytest.raises(
        ValueError, match="FastMultiAgentPrioritizedEpisodeReplayBuffer"
    ):
        buf.add(MultiAgentEpisode())
    with pytest.raises(ValueError, match="FastMultiAgent"):
        buf.get_num_timesteps("module_1")


def test_metrics_use_rllibs_keys_and_lifetime_counts_survive_a_restore():
    buf = FastPrioritizedEpisodeReplayBuffer(20, seed=0)
    buf.add([chunk(1, 0, 3, terminated=True), chunk(2, 0, 12, terminated=True)])
    buf.add(chunk(3, 0, 5, terminated=True))  # evicts ep1's 3 steps
    buf.sample_batch(8, n_step=2)
    metrics = buf.get_metrics()
    assert peek(metrics["num_env_steps_added"]) == 20
    assert peek(metrics["num_env_steps_evicted_lifetime"]) == 20 - len(buf) == 3
    assert peek(metrics["num_episodes_evicted_lifetime"]) == 1
    assert peek(metrics["num_episodes_stored"]) == 2
    assert peek(metrics["num_env_steps_sampled"]) == 8
    assert peek(metrics["num_resamples"]) == 0  # truncated n-steps: no redraws
    assert peek(metrics["num_module_steps_added"]["default_policy"]) == 20
    # As RLlib's buffers (non-root metrics loggers), each report holds what
    # happened since the last one; the Algorithm's metrics add them up. A
    # restored buffer reports what happens after the restore.
    buf.add(chunk(3, 0, 2, terminated=True))
    restored = FastPrioritizedEpisodeReplayBuffer(20)
    restored.set_state(buf.get_state())
    assert peek(buf.get_metrics()["num_env_steps_added_lifetime"]) == 2
    assert peek(restored.get_metrics()["num_env_steps_added_lifetime"]) == 0
    restored.add(chunk(4, 0, 3, terminated=True))
    assert peek(restored.get_metrics()["num_env_steps_added_lifetime"]) == 3
    assert restored.get_added_timesteps() == 25
