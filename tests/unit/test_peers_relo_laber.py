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
