"""`benchmarks/study_costs.py` times the study's own arms, and only the rounds.

The benchmark's ratios stand for the study's arms only if each arm is the
study's config, every arm is timed over the same env steps from the same point
of its run, and the NERS sampler's tallies cover the timed rounds alone. Checked
on the Pendulum study task (warm-up 1000 env steps, then one update per env
step), with the absolute rates left alone: these machines are shared.
"""

from __future__ import annotations

import pytest
import study_costs  # benchmarks/ is on the path (tests/conftest.py)

from rllib_ners.study import declarations as decl
from rllib_ners.study.runs import build_config

POINT, ROUNDS, STEPS = 1200, 2, 100


@pytest.fixture(scope="module")
def measured(ray_session):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    task = decl.TASKS["pendulum"]
    arms = study_costs.build_arms(task, ["uniform", "per", "ners"], STEPS)
    try:
        median = study_costs.measure_at(arms, POINT, ROUNDS, STEPS)
        yield task, arms, median
    finally:
        for arm in arms.values():
            arm.close()
        torch.set_num_threads(threads)


def test_each_arm_is_the_studys_config(measured):
    """The config a study run trains with (`build_config`, as `study run-one`
    builds it), every setting alike but the iteration's size, which the
    benchmark sets to its chunk of env steps."""
    task, arms, _ = measured
    for name, arm in arms.items():
        expected = build_config(task, decl.ARMS[name], study_costs.TUNING_SEED)
        built = arm.config  # as the arm built it (a built one fills in more)
        assert type(built) is type(expected) is type(arm.algo.config)
        ours, theirs = built.to_dict(), expected.to_dict()
        differ = {
            key
            for key in ours.keys() | theirs.keys()
            if repr(ours.get(key)) != repr(theirs.get(key))
        }
        assert differ == {"min_sample_timesteps_per_iteration"}, name
        assert ours["min_sample_timesteps_per_iteration"] == STEPS
        assert built.seed == study_costs.TUNING_SEED
    assert arms["uniform"].algo.config.replay_buffer_config["alpha"] == 0.0
    assert arms["per"].algo.config.replay_buffer_config["alpha"] == task.per_alpha


def test_every_arm_is_timed_over_the_same_steps_from_the_same_point(measured):
    _, arms, median = measured
    for name, arm in arms.items():
        assert arm.measured_from == POINT
        assert arm.counts[0] == POINT + ROUNDS * STEPS
        # One update per env step once learning has started (long before POINT).
        assert median[name]["updates"] == pytest.approx(median[name]["wall"])


def test_sampler_tallies_cover_the_timed_rounds_only(measured):
    _, arms, _ = measured
    assert arms["uniform"].sampler_times == {}
    scoring_calls, _ = arms["ners"].sampler_times["scoring"]
    # Every update scores its replayed batch once; the warm-up's are not counted.
    assert scoring_calls == ROUNDS * STEPS


def test_ratios_are_to_the_reference_arm(measured):
    _, arms, median = measured
    rows = study_costs.table(median, arms, "uniform")
    assert rows[0].startswith("| arm |") and "vs uniform (CPU)" in rows[0]
    cells = {row.split(" | ")[0].lstrip("| "): row.split(" | ") for row in rows[2:]}
    assert set(cells) == {"uniform", "per", "ners"}
    assert cells["uniform"][4:6] == ["1.00x", "1.00x"]
    ratio = float(cells["ners"][5].rstrip("x"))
    assert ratio == pytest.approx(
        median["ners"]["cpu"] / median["uniform"]["cpu"], abs=0.006
    )


def test_every_agent_of_a_declared_task_has_declared_default_arms():
    # `--tasks td3_hopper_100k` without `--arms` once ended in a KeyError.
    agents = {task.algo for task in decl.TASKS.values()}
    assert agents <= set(study_costs.DEFAULT_ARMS)
    for agent, arms in study_costs.DEFAULT_ARMS.items():
        assert set(arms) <= set(decl.ARMS), agent
    assert study_costs.DEFAULT_ARMS["td3"] == ("uniform", "per", "lap", "ners")
