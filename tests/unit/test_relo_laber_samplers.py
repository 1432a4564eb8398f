"""ReLo's priorities and LaBER's large batch and sub-sample, on the buffer side
and in the Learner's shared sub-sampler, against hand-computed values."""

import numpy as np
import pytest
import torch
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from scipy import stats

from rllib_ners import FastPrioritizedEpisodeReplayBuffer, NERSEpisodeReplayBuffer
from rllib_ners.algorithms.common.learner.replay_methods import (
    LargeBatchSubsampler,
    distribution_surrogate,
    huber_surrogate,
    mse_surrogate,
    pack_laber_feedback,
    pack_relo_feedback,
    replay_method_of,
)
from rllib_ners.replay_buffers.buffer_names import SAMPLE_POSITION
from rllib_ners.replay_buffers.fast_multi_agent_episode_buffer import (
    FastMultiAgentPrioritizedEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    RELO_LOSSES,
    ReplayFeedback,
)
from rllib_ners.replay_buffers.laber_sampler import (
    LargeBatchSampler,
    laber_probabilities,
    laber_weights,
)
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.relo_sampler import ReLoSampler, relo_priority

INDICES_KEY = "indices"
ONLINE = np.array([2.0, 1.0, 0.5, 3.0])
TARGET = np.array([1.0, 1.5, 0.5, 0.0])  # ReLo = [1, -0.5, 0, 3]
# A p-value below this fails a seeded goodness-of-fit test (a fixed seed: the
# test is deterministic, and a wrong distribution fails by orders of magnitude).
P_VALUE_FLOOR = 1e-3


def _relo_feedback(online=ONLINE, target=TARGET):
    return ReplayFeedback(
        td_errors=np.abs(online - target), online_losses=online, target_losses=target
    )


def _episode(length, seed):
    rng = np.random.default_rng(seed)
    return SingleAgentEpisode(
        observations=list(rng.normal(size=(length + 1, 3)).astype(np.float32)),
        actions=list(rng.integers(0, 2, length)),
        rewards=list(rng.normal(size=length)),
        terminated=True,
        len_lookback_buffer=0,
    )


# ------------------------------------------------------------------ ReLo
def test_relo_priorities_are_the_clipped_or_exponentiated_reducible_loss():
    relo = ONLINE - TARGET
    np.testing.assert_allclose(
        relo_priority(relo, "clip", 1e-5), [1.00001, 1e-5, 1e-5, 3.00001]
    )
    np.testing.assert_allclose(
        relo_priority(relo, "exp", 1e-5), [2.0, np.exp(-0.5), 1.0, 4.0]
    )


@pytest.mark.parametrize(
    "transform, priorities",
    [
        ("clip", np.array([1.00001, 1e-5, 1e-5, 3.00001])),
        ("exp", np.array([2.0, np.exp(-0.5), 1.0, 4.0])),
    ],
)
def test_relo_sampler_sets_per_leaves_and_weights_from_the_losses(
    transform, priorities
):
    sampler = ReLoSampler(16, alpha=0.5, beta=0.4, relo_transform=transform)
    slots = np.arange(4)
    sampler.set_new(slots, np.ones(4, dtype=bool), None)
    applied = sampler.update_priority(slots, _relo_feedback(), np.ones(4, dtype=bool))
    assert applied.all()
    leaves = priorities**0.5
    np.testing.assert_allclose(sampler.sum_tree[slots], leaves)
    assert sampler.max_priority == pytest.approx(max(1.0, priorities.max()))
    # PER's importance weights on those leaves: (leaf / min leaf) ** -beta.
    drawn, weights = sampler.draw(64, 0.4, np.random.default_rng(0))
    np.testing.assert_allclose(
        weights, (leaves[drawn] / leaves.min()) ** -0.4, rtol=1e-6
    )


def test_relo_sampler_skips_nan_losses_and_rows_no_longer_stored():
    sampler = ReLoSampler(16, alpha=1.0)
    slots = np.arange(4)
    sampler.set_new(slots, np.ones(4, dtype=bool), None)
    online = ONLINE.copy()
    online[1] = np.nan
    live = np.array([True, True, True, False])
    applied = sampler.update_priority(slots, _relo_feedback(online), live)
    np.testing.assert_array_equal(applied, [True, False, True, False])
    np.testing.assert_allclose(sampler.sum_tree[slots], [1.00001, 1.0, 1e-5, 1.0])
    assert sampler.num_nonfinite_priorities == 1
    assert sampler.num_stale_priorities == 1


def test_relo_buffer_refuses_plain_td_errors_naming_enable_replay():
    buffer = FastPrioritizedEpisodeReplayBuffer(
        64, sampler="relo", alpha=0.5, beta=0.4, seed=0
    )
    buffer.add([_episode(20, 1)])
    buffer.sample_batch(4)
    with pytest.raises(ValueError, match="enable_replay"):
        buffer.update_priorities(np.ones(4))


def test_relo_rows_from_several_learners_go_back_to_sample_order():
    buffer = FastPrioritizedEpisodeReplayBuffer(
        64, sampler="relo", alpha=1.0, beta=0.0, seed=0
    )
    buffer.add([_episode(30, 2)])
    batch = buffer.sample_batch(4)
    columns = buffer.item_columns(batch)
    np.testing.assert_array_equal(columns[SAMPLE_POSITION], np.arange(4))
    # Two Learners' shards, concatenated: positions 1, 3 then 0, 2.
    rows = np.stack([np.zeros(4), ONLINE, TARGET, np.arange(4)], axis=1)[[1, 3, 0, 2]]
    buffer.update_priorities(rows)
    np.testing.assert_allclose(
        buffer.get_priorities(batch[INDICES_KEY]),
        relo_priority(ONLINE - TARGET, "clip", 1e-5),
    )


def test_relo_sampler_draws_in_proportion_to_its_leaves():
    sampler = ReLoSampler(8, alpha=0.5)
    slots = np.arange(8)
    sampler.set_new(slots, np.ones(8, dtype=bool), None)
    online = np.array([2.0, 1.0, 0.5, 3.0, 5.0, 0.2, 1.2, 0.9])
    target = np.array([1.0, 1.5, 0.1, 0.0, 1.0, 0.3, 0.2, 0.0])
    sampler.update_priority(slots, _relo_feedback(online, target), np.ones(8, bool))
    leaves = relo_priority(online - target, "clip", 1e-5) ** 0.5
    rng = np.random.default_rng(123)
    counts = np.zeros(8)
    for _ in range(200):
        drawn, _ = sampler.draw(1000, 0.0, rng)
        counts += np.bincount(drawn, minlength=8)
    # Slots 1 and 5 have leaf sqrt(1e-5): expected about 50 of 200k draws.
    expected = counts.sum() * leaves / leaves.sum()
    assert stats.chisquare(counts, expected).pvalue > P_VALUE_FLOOR


# ----------------------------------------------------------------- LaBER
def test_laber_probabilities_and_the_three_weight_variants_by_hand():
    s = np.array([1.0, 2.0, 3.0, 2.0])
    np.testing.assert_allclose(laber_probabilities(s), [0.125, 0.25, 0.375, 0.25])
    # Surrogates whose mean (3) and smallest drawn value (2) differ from 1 and
    # from each other, so no two variants give the same weights.
    s = np.array([1.0, 2.0, 3.0, 6.0])
    drawn = np.array([3, 1])
    np.testing.assert_allclose(laber_weights(s, drawn, "mean"), [0.5, 1.5])
    np.testing.assert_allclose(laber_weights(s, drawn, "lazy"), [1 / 6, 0.5])
    np.testing.assert_allclose(laber_weights(s, drawn, "max"), [1 / 3, 1.0])
    zeros = np.zeros(4)
    np.testing.assert_allclose(laber_probabilities(zeros), np.full(4, 0.25))
    np.testing.assert_allclose(laber_weights(zeros, drawn), [1.0, 1.0])


def test_laber_mean_weights_make_the_subsample_unbiased_for_the_large_batch():
    # sum_i P(i) w_i g_i = mean_i g_i for any per-item gradients g.
    rng = np.random.default_rng(0)
    s = rng.exponential(size=12)
    g = rng.normal(size=(12, 5))
    every = np.arange(12)
    weighted = laber_probabilities(s)[:, None] * laber_weights(s, every)[:, None] * g
    np.testing.assert_allclose(weighted.sum(0), g.mean(0), rtol=1e-12)


def test_surrogates_are_the_loss_gradient_norms_at_the_output():
    delta = torch.tensor([-2.0, 0.5])
    torch.testing.assert_close(mse_surrogate(delta), torch.tensor([2.0, 0.5]))
    torch.testing.assert_close(huber_surrogate(delta), torch.tensor([1.0, 0.5]))
    probs = torch.tensor([[0.2, 0.5, 0.3]])
    target = torch.tensor([[0.0, 1.0, 0.0]])
    torch.testing.assert_close(
        distribution_surrogate(probs, target), torch.tensor([0.38]).sqrt()
    )
    # ... which is the gradient norm of -sum m log softmax(z) w.r.t. z.
    logits = probs.log().requires_grad_()
    (-(target * torch.log_softmax(logits, -1)).sum()).backward()
    torch.testing.assert_close(
        logits.grad.norm(dim=-1), distribution_surrogate(probs, target)
    )


def test_large_batch_is_the_uniform_samplers_draw_of_m_times_the_items():
    laber = LargeBatchSampler(32, laber_m=4)
    uniform = PrioritySampler(32, alpha=0.0)
    for sampler in (laber, uniform):
        sampler.set_new(np.arange(20), np.ones(20, dtype=bool), None)
    assert laber.items_per_draw(8) == 32
    laber_slots, laber_weights_ = laber.draw(32, 0.0, np.random.default_rng(5))
    uniform_slots, _ = uniform.draw(32, 0.0, np.random.default_rng(5))
    np.testing.assert_array_equal(laber_slots, uniform_slots)
    # Stratified: one draw per 1/32 of the 20 stored slots, so each slot
    # (1.6 strata wide) is drawn once or twice.
    assert set(np.bincount(laber_slots, minlength=20)) <= {1, 2}
    np.testing.assert_array_equal(laber_weights_, np.ones(32, np.float32))


def test_laber_buffer_samples_m_times_the_batch_and_keeps_no_priority():
    buffer = FastPrioritizedEpisodeReplayBuffer(
        128, sampler="laber", alpha=0.0, beta=0.0, laber_m=3, seed=0
    )
    buffer.add([_episode(40, 3), _episode(50, 4)])
    batch = buffer.sample_batch(8)
    assert batch["obs"].shape[0] == 24 and (batch["weights"] == 1.0).all()
    leaves = buffer.sampler.sum_tree.leaves.copy()
    rows = np.stack([np.linspace(0, 2, 24), np.tile([0, 1, 2], 8), np.arange(24)], 1)
    buffer.update_priorities(rows)
    np.testing.assert_array_equal(buffer.sampler.sum_tree.leaves, leaves)
    assert buffer.sampler.drawn_fraction == pytest.approx(16 / 24)
    buffer.sample_batch(8)
    with pytest.raises(ValueError, match="LaBER feedback"):
        buffer.update_priorities(np.ones(24))
    with pytest.raises(ValueError, match="sequences"):
        buffer.sample_sequences(4, 5)


def test_large_batch_slots_are_uniform():
    sampler = LargeBatchSampler(16, laber_m=4)
    sampler.set_new(np.arange(10), np.ones(10, dtype=bool), None)
    rng = np.random.default_rng(9)
    counts = sum(
        np.bincount(sampler.draw(400, 0.0, rng)[0], minlength=16) for _ in range(100)
    )
    assert (counts[10:] == 0).all()
    assert stats.chisquare(counts[:10]).pvalue > P_VALUE_FLOOR


def test_subsampler_matches_the_numpy_formulas_and_draws_in_proportion():
    s = torch.tensor([1.0, 2.0, 3.0, 2.0, 0.0, 4.0])
    for variant in ("mean", "lazy", "max"):
        subsampler = LargeBatchSubsampler(2, variant, seed=3)
        index, weights = subsampler.draw(s, 3)
        assert s[index].min() > 0  # an item with s = 0 is never drawn
        np.testing.assert_allclose(
            weights.numpy(), laber_weights(s.numpy(), index.numpy(), variant), rtol=1e-6
        )
    subsampler = LargeBatchSubsampler(4, "mean", seed=11)
    counts = sum(
        torch.bincount(subsampler.draw(s, 1000)[0], minlength=6) for _ in range(200)
    ).numpy()
    assert counts[4] == 0
    expected = counts.sum() * laber_probabilities(s.numpy().astype(np.float64))
    keep = expected > 0
    assert stats.chisquare(counts[keep], expected[keep]).pvalue > P_VALUE_FLOOR


@pytest.mark.parametrize("surrogate", [0.7, 0.0], ids=["equal", "all_zero"])
def test_equal_surrogates_draw_uniformly_with_unit_weights(surrogate):
    subsampler = LargeBatchSubsampler(4, "mean", seed=0)
    index, weights = subsampler.draw(torch.full((8,), surrogate), 8000)
    torch.testing.assert_close(weights, torch.ones(8000))
    counts = np.bincount(index.numpy(), minlength=8)
    assert stats.chisquare(counts, np.full(8, 1000.0)).pvalue > P_VALUE_FLOOR


def test_the_subsamplers_batch_size_and_bad_surrogates():
    subsampler = LargeBatchSubsampler(4, "mean", seed=0)
    assert subsampler.minibatch_size(8) == 2
    with pytest.raises(ValueError, match="laber_m=4"):
        subsampler.minibatch_size(10)
    with pytest.raises(ValueError, match="not finite"):
        subsampler.draw(torch.tensor([1.0, float("nan")]), 1)


def test_subsampler_resumes_the_same_draws_from_its_state():
    s = torch.rand(64) + 0.1
    subsampler = LargeBatchSubsampler(4, "mean", seed=0)
    subsampler.draw(s, 16)
    state = subsampler.get_state()
    after = [subsampler.draw(s, 16)[0], subsampler.uniform(64, 16, "cpu")]
    restored = LargeBatchSubsampler(4, "mean", seed=99)
    restored.set_state(state)
    for expected, got in zip(
        after, [restored.draw(s, 16)[0], restored.uniform(64, 16, "cpu")]
    ):
        torch.testing.assert_close(expected, got)
    counted = LargeBatchSubsampler.times_drawn(
        [torch.tensor([0, 2, 2]), torch.tensor([3])], 5
    )
    torch.testing.assert_close(counted, torch.tensor([1, 0, 2, 1, 0]))


def test_packed_rows_follow_the_layouts():
    batch = {SAMPLE_POSITION: np.array([3, 1, 0, 2])}
    relo = pack_relo_feedback(
        torch.ones(4), torch.tensor(ONLINE), torch.tensor(TARGET), batch
    )
    feedback = RELO_LOSSES.unpack(relo.numpy()).in_sample_order()
    np.testing.assert_allclose(feedback.online_losses, ONLINE[[2, 1, 3, 0]])
    laber = pack_laber_feedback(torch.ones(4), torch.tensor([0, 1, 2, 0]), {})
    feedback = LABER_SURROGATES.unpack(laber.numpy())
    np.testing.assert_allclose(feedback.times_drawn, [0, 1, 2, 0])
    np.testing.assert_allclose(feedback.sample_positions, np.arange(4))


# -------------------------------------------------------------- settings
class _Config:
    def __init__(self, **buffer_config):
        self.replay_buffer_config = buffer_config


def test_the_replay_method_comes_from_the_buffer_config():
    assert replay_method_of(_Config()) == "priority"
    assert replay_method_of(_Config(sampler="relo")) == "relo"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"sampler": "relox"}, "Unknown replay method"),
        ({"sampler": "laber"}, "alpha=0.0 and beta=0.0"),
        ({"sampler": "laber", "alpha": 0.0, "laber_m": 0}, "laber_m"),
        ({"sampler": "laber", "alpha": 0.0, "laber_weights": "sum"}, "laber_weights"),
        ({"sampler": "relo", "relo_transform": "log"}, "relo_transform"),
        ({"sampler": "relo", "relo_epsilon": 0.0}, "relo_epsilon"),
        ({"laber_m": 4}, "does not read"),
        ({"sampler": "relo", "laber_m": 4}, "does not read"),
    ],
)
def test_bad_sampler_settings_are_refused_naming_the_setting(settings, message):
    with pytest.raises(ValueError, match=message):
        FastPrioritizedEpisodeReplayBuffer(64, **settings)


def test_buffers_with_their_own_sampler_refuse_a_replay_method():
    with pytest.raises(ValueError, match="replays with its own sampler"):
        NERSEpisodeReplayBuffer(64, sampler="relo")
    with pytest.raises(ValueError, match="single-agent"):
        FastMultiAgentPrioritizedEpisodeReplayBuffer(64, sampler="laber")


@pytest.mark.parametrize("method", ["relo", "laber"])
def test_a_stock_algorithms_buffer_refuses_relo_and_laber_naming_the_fix(method):
    settings = {"sampler": method, "alpha": 0.5 if method == "relo" else 0.0}
    # RLlib's Algorithm passes metrics_num_episodes_for_smoothing, not our flag.
    with pytest.raises(ValueError, match=f"enable_replay\\(config, '{method}'\\)"):
        FastPrioritizedEpisodeReplayBuffer(
            64, metrics_num_episodes_for_smoothing=100, **settings
        )
    FastPrioritizedEpisodeReplayBuffer(
        64,
        metrics_num_episodes_for_smoothing=100,
        learner_sends_feedback=True,
        **settings,
    )
    FastPrioritizedEpisodeReplayBuffer(64, **settings)  # by hand: not checked


@pytest.mark.parametrize(
    "settings",
    [
        {"sampler": "relo", "alpha": 0.5, "beta": 0.4, "relo_transform": "exp"},
        {"sampler": "laber", "alpha": 0.0, "laber_m": 2},
    ],
)
def test_relo_and_laber_buffers_resume_the_same_draws(settings):
    buffer = FastPrioritizedEpisodeReplayBuffer(256, seed=0, **settings)
    buffer.add([_episode(60, 5), _episode(70, 6)])
    rows = len(buffer.sample_batch(8)["obs"])
    layout = buffer.sampler.feedback_layout
    values = np.random.default_rng(0).random((rows, layout.num_columns))
    values[:, -1] = np.arange(rows)
    buffer.update_priorities(values)
    restored = FastPrioritizedEpisodeReplayBuffer(256, seed=42, **settings)
    restored.set_state(buffer.get_state())
    assert type(restored.sampler) is type(buffer.sampler)
    for _ in range(3):
        expected, got = buffer.sample_batch(8), restored.sample_batch(8)
        np.testing.assert_array_equal(expected["indices"], got["indices"])
        np.testing.assert_array_equal(expected["weights"], got["weights"])
        buffer.update_priorities(values)
        restored.update_priorities(values)
