"""The NERS scorer and its REINFORCE step, without Ray."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_ners.ners import NERSScorer, NERSSettings, log_score_loss

VECTOR_SPACE = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
IMAGE_SPACE = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
ACTIONS = gym.spaces.Discrete(3)


def _batch(num=16, obs_space=VECTOR_SPACE, seed=0):
    rng = np.random.default_rng(seed)
    obs = np.stack([obs_space.sample() for _ in range(2 * num)])
    return {
        "obs": torch.as_tensor(obs[:num]),
        "new_obs": torch.as_tensor(obs[num:]),
        "actions": torch.as_tensor(rng.integers(0, 3, num)),
        "rewards": torch.as_tensor(rng.normal(size=num), dtype=torch.float32),
        "delta": torch.as_tensor(rng.random(num), dtype=torch.float32),
        "q": torch.as_tensor(rng.normal(size=num), dtype=torch.float32),
        "ts": torch.as_tensor(rng.integers(0, 500, num)),
    }


def _scorer(obs_space=VECTOR_SPACE, **settings):
    torch.manual_seed(0)
    return NERSScorer(obs_space, ACTIONS, NERSSettings(**settings))


def test_scores_lie_strictly_between_zero_and_one():
    scorer = _scorer()
    scores = scorer(scorer.featurize_batch(_batch(64)))
    assert scores.shape == (64,)
    assert torch.all(scores > 0) and torch.all(scores < 1)


def test_global_context_is_real():
    """Changing *another* transition of the set changes transition 0's score."""
    scorer = _scorer()
    features = scorer.featurize_batch(_batch(8))
    before = scorer(features)[0]
    changed = features.clone()
    changed[5] = -changed[5] + 0.5
    after = scorer(changed)[0]
    assert not torch.isclose(before, after, rtol=0, atol=1e-7)
    # ...while the local part alone would not see it: f_l(x_0) is unchanged.
    assert torch.equal(scorer.local_net(features[:1]), scorer.local_net(changed[:1]))


def test_features_layout_and_timestep_normalisation():
    """feature_normalization="none": the reference's raw scalars, t / scale."""
    scorer = _scorer(timestep_scale=500.0, feature_normalization="none")
    batch = _batch(4)
    batch["ts"] = torch.tensor([0, 3, 250, 500])
    x = scorer.featurize_batch(batch)
    enc = scorer.settings.encoder_out_dim
    assert x.shape == (4, 2 * enc + 3 + 4)
    t_column = x[:, -1]
    expected = torch.tanh(torch.tensor([0.0, 3 / 500, 0.5, 1.0]))
    torch.testing.assert_close(t_column, expected)
    # Unlike the reference's raw timestep, t=3 and t=250 stay distinguishable.
    assert t_column[2] - t_column[1] > 0.4
    # One-hot actions sit right after enc(s).
    one_hot = x[:, enc : enc + 3]
    torch.testing.assert_close(
        one_hot, torch.tanh(torch.nn.functional.one_hot(batch["actions"], 3).float())
    )
    # Reward, delta and q are squashed copies of the inputs.
    torch.testing.assert_close(x[:, enc + 3], torch.tanh(batch["rewards"]))
    torch.testing.assert_close(x[:, -3], torch.tanh(batch["delta"]))
    torch.testing.assert_close(x[:, -2], torch.tanh(batch["q"]))


def test_scaled_index_actions():
    scorer = _scorer(action_encoding="scaled_index")
    encoded = scorer.encode_actions(torch.tensor([0, 1, 2]))
    torch.testing.assert_close(encoded, torch.tensor([[0.0], [0.5], [1.0]]))


def test_image_encoder_is_the_reference_cnn():
    scorer = _scorer(IMAGE_SPACE)
    convs = [m for m in scorer.encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (5, 5), (5, 5)),
        (64, (5, 5), (5, 5)),
    ]
    scores = scorer(scorer.featurize_batch(_batch(4, IMAGE_SPACE)))
    assert scores.shape == (4,)


def test_reinforce_moves_the_scores_in_the_sign_of_the_reward():
    """One REINFORCE step reaches every sampler parameter, the encoder's too,
    and raises the mean log-score for a positive replay reward, lowers it for
    a negative one. (That it leaves the agent's networks alone, with
    encoder="module", is tested on a Learner in test_ners_dqn.py.)"""
    for reward in (2.0, -2.0):
        scorer = _scorer()
        optimizer = torch.optim.Adam(scorer.parameters(), lr=1e-3)
        features = scorer.featurize_batch(_batch(32))
        before = torch.log(scorer(features)).mean()
        loss = log_score_loss(
            scorer.logits(features), reward, parameterization="sigmoid"
        )
        optimizer.zero_grad()
        loss.backward()
        grads = {n: p.grad for n, p in scorer.named_parameters()}
        assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
        assert any(
            g.abs().sum() > 0 for n, g in grads.items() if n.startswith("encoder")
        )
        optimizer.step()
        after = torch.log(scorer(scorer.featurize_batch(_batch(32)))).mean()
        assert (after - before).item() * np.sign(reward) > 0


def test_log_score_loss_value():
    logits = torch.logit(torch.tensor([0.5, 0.25]))
    loss = log_score_loss(logits, 3.0, parameterization="sigmoid", log_eps=1e-12)
    expected = -3.0 * (np.log(0.5) + np.log(0.25)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # per_residual: the log of the learned correction exp(logit) is the logit.
    loss = log_score_loss(logits, 3.0, parameterization="per_residual")
    assert loss.item() == pytest.approx(-3.0 * logits.mean().item(), rel=1e-6)
    with pytest.raises(ValueError, match="replay reward"):
        log_score_loss(logits, float("nan"), parameterization="sigmoid")


@pytest.mark.parametrize(
    "setting, value",
    [
        ("hidden_size", 0),
        ("lr", 0.0),
        ("lr", -1e-3),
        ("train_size", 0),
        ("replay_reward_mode", "eval"),
        ("encoder", "cnn"),
        ("min_episodes_per_update", 0),
        ("timestep_scale", 0),
        ("action_encoding", "binary"),
        ("encoder_out_dim", -3),
        ("feature_normalization", "batch"),
    ],
)
def test_bad_settings_name_the_setting(setting, value):
    with pytest.raises(ValueError, match=setting):
        NERSSettings(**{setting: value})


def test_unknown_setting_is_rejected():
    with pytest.raises(ValueError, match="Unknown NERS settings"):
        NERSSettings.from_dict({"hiden_size": 64})


def _large_scale_batch(num, seed):
    """Returns and targets in the thousands, as on tasks with large rewards."""
    rng = np.random.default_rng(seed)
    batch = _batch(num, seed=seed)
    batch["rewards"] = torch.as_tensor(rng.normal(3000, 400, num), dtype=torch.float32)
    batch["delta"] = torch.as_tensor(abs(rng.normal(0, 800, num)), dtype=torch.float32)
    batch["q"] = torch.as_tensor(rng.normal(5000, 900, num), dtype=torch.float32)
    batch["ts"] = torch.as_tensor(rng.integers(0, 27000, num))
    return batch


def _scalar_feature_columns(scorer, x):
    enc = scorer.settings.encoder_out_dim
    return torch.stack([x[:, enc + 3], x[:, -3], x[:, -2], x[:, -1]], dim=-1)


@pytest.mark.parametrize("mode", ["running", "none"])
def test_running_normalisation_keeps_scalar_features_spread(mode):
    scorer = _scorer(feature_normalization=mode)
    for seed in range(4):
        scorer.update_scalar_statistics(_large_scale_batch(64, seed))
    batch = _large_scale_batch(64, 10)
    scorer.update_scalar_statistics(batch)
    columns = _scalar_feature_columns(scorer, scorer.featurize_batch(batch))
    std, mean = columns.std(dim=0), columns.mean(dim=0)
    if mode == "running":
        assert torch.all(std > 0.1) and torch.all(mean.abs() < 0.9), (std, mean)
    else:
        # r and q sit at tanh's ceiling; t / 1000 mostly too.
        assert torch.all(columns[:, [0, 2]] > 0.999)
        assert std[0] < 1e-3 and std[2] < 1e-3
        assert int(scorer.scalar_count) == 0  # "none" keeps no statistics


def test_running_statistics_equal_numpy_over_all_scored_rows():
    scorer = _scorer()
    batches = [_large_scale_batch(n, seed) for seed, n in enumerate((7, 64, 1, 33))]
    batches[1]["q"][3] = float("nan")  # non-finite rows are left out
    for batch in batches:
        scorer.update_scalar_statistics(batch)
    rows = np.concatenate([scorer.scalar_columns(b).numpy() for b in batches], axis=0)
    rows = rows[np.isfinite(rows).all(axis=1)]
    assert scorer.scalar_count.dtype == torch.float64
    assert int(scorer.scalar_count) == rows.shape[0] == 104
    np.testing.assert_allclose(scorer.scalar_mean.numpy(), rows.mean(0), rtol=1e-12)
    np.testing.assert_allclose(
        (scorer.scalar_m2 / scorer.scalar_count).numpy(), rows.var(0), rtol=1e-10
    )


def test_moments_without_host_reads_equal_dropping_non_finite_rows():
    """A GPU scorer reads nothing on the host: non-finite rows add zeros
    instead of being dropped, to the same moments within float64 rounding (and
    bit for bit where every row is finite)."""
    scorer = _scorer()
    batch = _large_scale_batch(64, 5)
    scorer.update_scalar_statistics(batch)  # a non-zero shift
    scalars = scorer.scalar_columns(_large_scale_batch(48, 6))
    assert torch.equal(
        scorer.scalar_moments(scalars, host_reads=False),
        scorer.scalar_moments(scalars, host_reads=True),
    )
    scalars[3, 1] = float("nan")
    scalars[10, 2] = float("inf")
    dropped = scorer.scalar_moments(scalars, host_reads=True)
    zeroed = scorer.scalar_moments(scalars, host_reads=False)
    assert float(dropped[0]) == float(zeroed[0]) == 46
    torch.testing.assert_close(zeroed, dropped, rtol=1e-12, atol=1e-9)


def test_sharded_statistics_equal_the_whole_batch_and_match_across_shards():
    """Two Learners' shards merged by the all-reduce: the same statistics on both
    as one process scoring the whole batch."""
    whole, first, second = _scorer(), _scorer(), _scorer()
    for seed in range(3):
        batch = _large_scale_batch(40, seed)
        halves = [{k: v[i::2] for k, v in batch.items()} for i in range(2)]
        moments = [
            s.scalar_moments(s.scalar_columns(h))
            for s, h in zip((first, second), halves)
        ]
        total = moments[0] + moments[1]
        for shard, half in zip((first, second), halves):
            shard.update_scalar_statistics(
                half, all_reduce_sum=lambda _, t=total: t.clone()
            )
        whole.update_scalar_statistics(batch)
    for name in ("scalar_count", "scalar_mean", "scalar_m2"):
        assert torch.equal(getattr(first, name), getattr(second, name))
        torch.testing.assert_close(
            getattr(first, name), getattr(whole, name), rtol=1e-12, atol=1e-9
        )


def test_running_statistics_are_in_the_state_dict_and_round_trip():
    scorer = _scorer()
    for seed in range(3):
        scorer.update_scalar_statistics(_large_scale_batch(32, seed))
    state = scorer.state_dict()
    for name in ("scalar_count", "scalar_mean", "scalar_m2"):
        assert state[name].dtype == torch.float64
    torch.manual_seed(1)
    restored = NERSScorer(VECTOR_SPACE, ACTIONS, NERSSettings())
    restored.load_state_dict(state)
    for name in ("scalar_count", "scalar_mean", "scalar_m2"):
        assert torch.equal(getattr(restored, name), getattr(scorer, name))
    batch = _large_scale_batch(16, 9)
    torch.testing.assert_close(
        restored(restored.featurize_batch(batch)),
        scorer(scorer.featurize_batch(batch)),
        rtol=0,
        atol=0,
    )


def test_linear_path_trains_at_its_own_learning_rate():
    scorer = _scorer(lr=1e-4, linear_skip_lr=1e-2)
    groups = scorer.parameter_groups()
    skip = {id(p) for p in scorer.linear_skip.parameters()}
    assert [g["lr"] for g in groups] == [1e-4, 1e-2]
    assert {id(p) for p in groups[1]["params"]} == skip
    # Every parameter is in exactly one group.
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in scorer.parameters())
    # One Adam step moves each weight by about its group's rate (Adam's first
    # step is lr * sign(grad)).
    from rllib_ners.utils.optimizer_steps import make_adam

    optimizer = make_adam(groups)
    before = {n: p.detach().clone() for n, p in scorer.named_parameters()}
    logits = scorer.logits(scorer.featurize_batch(_batch(32)))
    (-(logits * torch.linspace(-1, 1, 32)).mean()).backward()
    optimizer.step()
    moved = {
        n: (p.detach() - before[n]).abs().max().item()
        for n, p in scorer.named_parameters()
    }
    assert moved["linear_skip.weight"] == pytest.approx(1e-2, rel=1e-3)
    assert max(v for n, v in moved.items() if not n.startswith("linear_skip")) <= (
        1e-4 * 1.001
    )
    # None: one rate for all.
    one_rate = _scorer(lr=3e-4, linear_skip_lr=None).parameter_groups()
    assert [g["lr"] for g in one_rate] == [3e-4, 3e-4]
