"""`benchmarks/peers.py` and `benchmarks/study_costs.py` take the `relo` and
`laber` arms (issue 65's cost targets): their configs are the `per` arm's
with the methods' sampler settings, built here without training."""

from __future__ import annotations

import pytest

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
RELO = {"sampler": "relo", "relo_transform": "clip", "relo_epsilon": 1e-5}
LABER = {"sampler": "laber", "laber_m": 4, "laber_weights": "mean"}


def _buffers(arms):
    return {name: arm.config.replay_buffer_config for name, arm in arms.items()}


@pytest.mark.parametrize("suite", ["sac", "dqn", "td3"])
def test_the_suites_list_relo_and_laber(suite, capsys):
    import peers

    assert {"per", "relo", "laber"} <= set(peers.SUITES[suite])
    parser = peers.suite_parser(peers.__doc__, peers.SUITES)
    args = parser.parse_args(["--suite", suite, "--arms", "per", "relo", "laber"])
    assert peers.chosen_arms(parser, args, peers.SUITES) == ["per", "relo", "laber"]
    with pytest.raises(SystemExit) as done:
        peers.main(["--help"])
    assert done.value.code == 0
    assert "--arms" in capsys.readouterr().out


def test_the_dqn_arms_are_pers_buffer_with_the_samplers_settings():
    import peers

    buffers = _buffers(peers.dqn_arms(["per", "relo", "laber"], steps=100))
    per = {"capacity": 50_000, "type": FAST, "beta": 0.4}
    assert buffers["per"] == {**per, "alpha": 0.6}
    assert buffers["relo"] == {**per, "alpha": 0.5, **RELO}
    assert buffers["laber"] == {**per, "alpha": 0.0, "beta": 0.0, **LABER}
    arms = peers.dqn_arms(["relo", "laber"], steps=100)
    for arm in arms.values():
        arm.config.validate()


@pytest.mark.parametrize("suite", ["sac", "td3"])
def test_the_hopper_arms_are_the_presets_per_with_the_samplers_settings(suite):
    pytest.importorskip("mujoco")
    import peers

    arms = peers.BUILDERS[suite](["per", "relo", "laber"], 100)
    buffers = _buffers(arms)
    per = {"type": FAST, "capacity": 1_000_000}
    assert buffers["per"] == {**per, "alpha": 0.6, "beta": 0.4}
    assert buffers["relo"] == {**per, "alpha": 0.5, "beta": 0.4, **RELO}
    assert buffers["laber"] == {**per, "alpha": 0.0, "beta": 0.0, **LABER}
    per_dict = arms["per"].config.to_dict()
    for name in ("relo", "laber"):
        other = arms[name].config.to_dict()
        differ = {k for k in per_dict if repr(per_dict[k]) != repr(other.get(k))}
        assert differ == {"replay_buffer_config"}, (name, differ)
        arms[name].config.validate()


def test_study_costs_takes_the_arms_from_the_studys_declarations(capsys):
    import argparse

    import study_costs

    from rllib_ners.study.declarations import TASKS

    parser = argparse.ArgumentParser()
    study = argparse.Namespace(
        suite="study", tasks=["hopper_100k", "qbert_100k"], arms=["relo", "laber"]
    )
    assert study_costs.suite_arms(parser, study) == ["relo", "laber"]
    updates = argparse.Namespace(suite="updates", arms=["per", "relo", "laber"])
    assert study_costs.suite_arms(parser, updates) == ["per", "relo", "laber"]
    with pytest.raises(SystemExit) as done:
        study_costs.main(["--help"])
    assert done.value.code == 0
    assert "--arms" in capsys.readouterr().out
    pytest.importorskip("mujoco")
    arms = study_costs.build_arms(TASKS["hopper_100k"], ["relo", "laber"], steps=100)
    assert arms["relo"].config.replay_buffer_config["sampler"] == "relo"
    assert arms["laber"].config.replay_buffer_config["laber_m"] == 4
    for arm in arms.values():
        arm.config.validate()


def test_the_floors_laber_update_draws_each_critics_rows_by_its_surrogates():
    """`baselines.laber_critic_loss`, LaBER's bare critic loss: each critic's
    rows drawn in proportion to its own `min(|Q - y|, 1)` (Huber) with
    LaBER-mean weights, the loss their weighted mean; the policy's rows
    uniform."""
    import baselines
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    critics = [torch.nn.Linear(3, 1) for _ in "12"]
    obs, actions = torch.randn(64, 2), torch.randn(64, 1)
    target = torch.randn(64) * 3
    torch.manual_seed(1)
    loss, actor_obs = baselines.laber_critic_loss(
        critics, obs, actions, target, batch=16, huber=True
    )
    torch.manual_seed(1)
    expected = 0.0
    with torch.no_grad():
        inputs = torch.cat([obs, actions], -1)
        errors = [(c(inputs).squeeze(-1) - target).abs() for c in critics]
        surrogates = [error.clamp(max=1) for error in errors]
        draws = [torch.multinomial(s, 16, replacement=True) for s in surrogates]
    for critic, s, rows in zip(critics, surrogates, draws):
        q = critic(inputs[rows]).squeeze(-1)
        weights = s.mean() / s[rows]
        item_losses = F.huber_loss(q, target[rows], reduction="none")
        expected = expected + (weights * item_losses).mean()
    actor_rows = torch.randint(64, (16,))
    torch.testing.assert_close(loss, expected, rtol=0, atol=0)
    assert torch.equal(actor_obs, obs[actor_rows])


@pytest.mark.parametrize("suite", ["sac", "td3"])
def test_the_floor_laber_arm_updates_on_four_times_the_batch(suite, monkeypatch):
    """The `floor-laber` arm is the floor's update with LaBER's large batch
    (m 4): its critics score 4 x 256 rows, then train on 256."""
    pytest.importorskip("mujoco")
    import baselines
    import peers

    scored = []
    original = baselines.laber_critic_loss

    def spy(critics, obs, actions, target, batch, huber):
        scored.append((len(obs), batch, huber))
        return original(critics, obs, actions, target, batch, huber)

    monkeypatch.setattr(baselines, "laber_critic_loss", spy)
    arms = peers.BUILDERS[suite](["floor", "floor-laber"], 10)
    arms["floor"].update()
    assert scored == []
    arms["floor-laber"].update()
    assert scored == [(4 * 256, 256, suite == "sac")]


def test_the_rates_table_prices_each_arm_against_its_per_arm():
    import peers

    rates = {"per": 100.0, "laber": 60.0, "floor": 200.0, "floor-laber": 110.0}
    median = {
        name: {"wall": rate, "cpu": rate, "updates": rate}
        for name, rate in rates.items()
    }
    title, cell = peers.cost_against_per(median)
    assert "vs per" in title
    assert [cell(name) for name in median] == ["-", "1.67x", "-", "1.82x"]
    assert peers.cost_against_per({"laber": median["laber"]})[1]("laber") == "-"
