"""The study's `relo` and `laber` arms (issue 65): on the SAC and the
data-efficient Rainbow tasks they build the `per` arm's agent with the papers'
replay settings, and nothing else differs. Configs only: no training."""

from __future__ import annotations

import pytest

from rllib_ners.algorithms.common.config.sampler_presets import (
    laber_buffer_settings,
    relo_buffer_settings,
)
from rllib_ners.algorithms.ners_sac.presets import mujoco_sac
from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow
from rllib_ners.study import declarations as decl
from rllib_ners.study import runs

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
SAC_TASKS = ("hopper_100k", "halfcheetah_100k", "walker2d_100k")
ATARI_TASKS = ("ms_pacman_100k", "alien_100k", "qbert_100k")


def _configs(task_name):
    task = decl.TASKS[task_name]
    if task.requires:
        pytest.importorskip(task.requires)
    runs.register_envs()
    return task, {
        name: runs.build_config(task, decl.ARMS[name], seed=101)
        for name in ("per", "relo", "laber")
    }


def _comparable(config) -> dict:
    """`config.to_dict()` with callables (built anew per config, e.g. Atari's
    env-to-module connector) by their type."""
    return {
        key: type(value).__qualname__ if callable(value) else repr(value)
        for key, value in config.to_dict().items()
    }


@pytest.mark.parametrize("task_name", SAC_TASKS + ATARI_TASKS)
def test_relo_and_laber_arms_build_the_papers_settings(task_name):
    task, configs = _configs(task_name)
    atari = task_name in ATARI_TASKS
    learning_starts = 1600 if atari else 5000
    frame_stack = {"frame_stack": 4} if atari else {}
    # ReLo: alpha 0.5 on both domains, the task's beta 0.4 annealed to 1 over
    # the budget after learning starts (as `per`), the priority map by loss.
    assert configs["relo"].replay_buffer_config == {
        **frame_stack,
        "type": FAST,
        "capacity": task.capacity,
        "alpha": 0.5,
        "beta": 0.4,
        "beta_final": 1.0,
        "beta_annealing_timesteps": 100_000 - learning_starts,
        "sampler": "relo",
        "relo_epsilon": 1e-5,
        "relo_transform": "exp" if atari else "clip",
    }
    # LaBER: m 4, LaBER-mean, a uniform large batch without importance weights.
    assert configs["laber"].replay_buffer_config == {
        **frame_stack,
        "type": FAST,
        "capacity": task.capacity,
        "alpha": 0.0,
        "beta": 0.0,
        "beta_final": None,
        "beta_annealing_timesteps": None,
        "sampler": "laber",
        "laber_m": 4,
        "laber_weights": "mean",
    }
    # Everything but the replay is the `per` arm's.
    per = _comparable(configs["per"])
    for name in ("relo", "laber"):
        config = configs[name]
        assert type(config) is type(configs["per"])
        assert config.learner_class is configs["per"].learner_class
        other = _comparable(config)
        differ = {key for key in per if per[key] != other.get(key)}
        assert differ == {"replay_buffer_config"}, (name, differ)
        config.validate()


@pytest.mark.parametrize("task_name", SAC_TASKS + ATARI_TASKS)
def test_the_arms_agree_with_the_presets(task_name):
    """`replay="relo"`/`"laber"` of `mujoco_sac` and
    `atari_data_efficient_rainbow` set the same sampler settings as the arms
    (the arms write theirs out; the presets take theirs from
    `sampler_presets`)."""
    task, configs = _configs(task_name)
    transform = "exp" if task_name in ATARI_TASKS else "clip"
    for name, settings in (
        ("relo", relo_buffer_settings(transform)),
        ("laber", laber_buffer_settings()),
    ):
        if task_name in ATARI_TASKS:
            game = task.env.removeprefix("ALE/").removesuffix("-v5")
            preset = atari_data_efficient_rainbow(game, replay=name)
        else:
            preset = mujoco_sac(task.env, replay=name)
        arm_buffer = configs[name].replay_buffer_config
        preset_buffer = preset.replay_buffer_config
        assert {key: arm_buffer[key] for key in settings} == settings, name
        assert {key: preset_buffer[key] for key in settings} == settings, name


def test_the_arms_are_declared_but_not_in_the_default_study():
    assert decl.ARMS["relo"].sampler == "relo"
    assert decl.ARMS["laber"].sampler == "laber"
    assert "relo" not in decl.STUDY_ARMS and "laber" not in decl.STUDY_ARMS


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"sampler": "per"}, "`sampler` must be one of 'relo', 'laber', got 'per'"),
        ({"sampler": "relo", "algo": "ners"}, "`sampler` needs algo='rainbow'"),
        ({"sampler_settings": {"laber_m": 4}}, "`sampler_settings` need a `sampler`"),
        (
            {"sampler": "relo", "sampler_settings": {"laber_m": 4}},
            r"sampler='relo' take relo_transform, relo_epsilon, got \['laber_m'\]",
        ),
        ({"sampler": "laber", "sampler_settings": ["laber_m"]}, "must be a dict"),
    ],
)
def test_an_arm_with_a_wrong_sampler_field_is_refused_naming_it(fields, message):
    fields = {"name": "a", "algo": "rainbow", **fields}
    with pytest.raises(decl.DeclarationError, match=message):
        decl.Arm(**fields)


def test_the_study_cli_plans_the_new_arms(capsys, tmp_path):
    """`rllib-ners study run --arms relo laber --dry-run` builds, validates and
    plans their runs (the mechanism `results/td3_lap` ran its arms with)."""
    pytest.importorskip("mujoco")
    pytest.importorskip("ale_py")
    from rllib_ners.study import cli

    argv = ["run", "--tasks", "hopper_100k", "ms_pacman_100k", "--arms", "relo"]
    argv += ["laber", "--seeds", "100", "--results-dir", str(tmp_path), "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    for task in ("hopper_100k", "ms_pacman_100k"):
        for arm in ("relo", "laber"):
            assert f"  {task} {arm} seed100\n" in out
