"""The `rllib-ners` command line: every subcommand and error in-process, one run
end to end in subprocesses (train a tuned example, plot it, evaluate it)."""

import argparse
import contextlib
import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch

from rllib_ners import cli
from rllib_ners.cli import main
from rllib_ners.cli.common import module_available
from rllib_ners.ners.settings import NERSSettings
from rllib_ners.utils import plotting as _plotting

REPO = Path(__file__).resolve().parents[2]
PY_EXAMPLE = REPO / "tuned_examples" / "ners_dqn" / "cartpole_ners_dqn.py"
YAML_EXAMPLE = REPO / "tuned_examples" / "ners_dqn" / "cartpole_ners_dqn.yaml"
# ~200 env steps per iteration, learning from step 100: a few seconds a run.
TINY = json.dumps(
    {
        "min_sample_timesteps_per_iteration": 200,
        "num_steps_sampled_before_learning_starts": 100,
    }
)
FAIL_ONCE_ENV = "rllib-ners-test-fail-once"


def _run_main(argv):
    """main(argv) with stdout captured outside pytest's per-test capsys."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in argv])
    return code, out.getvalue()


# Ray's prefix on lines a remote actor prints ("(NERSDQN(...) pid=123) ") and
# terminal colour codes.
_ACTOR_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)*\(.*? pid=\d+\)(?:\x1b\[[0-9;]*m)* ?")


def tracebacks_in(stderr: str):
    """Each traceback printed in `stderr`: (from a remote actor, its final
    exception line)."""
    found = []
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if "Traceback (most recent call last):" not in line:
            continue
        from_actor = _ACTOR_PREFIX.match(line) is not None
        exception = ""
        for later in lines[i + 1 :]:
            body = _ACTOR_PREFIX.sub("", later)
            if body and not body[0].isspace():
                exception = body
                break
        found.append((from_actor, exception))
    return found


def test_tracebacks_in_tells_an_actor_exit_from_an_error():
    actor = "\x1b[36m(NERSDQN(env=CartPole-v1) pid=31605)\x1b[0m "
    stderr = (
        f"{actor}Exception ignored in: <function LearnerGroup.__del__>\n"
        f"{actor}Traceback (most recent call last):\n"
        f'{actor}  File "learner_group.py", line 711, in __del__\n'
        f"{actor}    def __del__(self):\n"
        f"{actor}SystemExit: 1\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in main\n'
        "ValueError: bad\n"
    )
    assert tracebacks_in(stderr) == [
        (True, "SystemExit: 1"),
        (False, "ValueError: bad"),
    ]


def _assert_one_line_error(code, err, expected):
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("rllib-ners: error: "), err
    assert expected in lines[0], err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def ray_cluster(ray_session):
    """The address of the tests' Ray instance, for `--ray-address`."""
    return ray.get_runtime_context().gcs_address


@pytest.fixture(scope="module")
def trained_run(ray_cluster, tmp_path_factory):
    """A 2-iteration NERS-DQN run via `train --algo`, checkpointed at the end."""
    storage = tmp_path_factory.mktemp("runs")
    code, out = _run_main(
        [
            "train",
            "--algo",
            "NERS-DQN",
            "--env",
            "CartPole-v1",
            "--config",
            TINY,
            "--stop-iters",
            2,
            "--stop-timesteps",
            100000,
            "--num-env-runners",
            0,
            "--seed",
            0,
            "--checkpoint-at-end",
            "--storage-path",
            storage,
            "--name",
            "algo-run",
        ]
    )
    assert code == 0, out
    return storage / "algo-run", out


# ------------------------------------------------------------- no Ray needed


_OURS = {"type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer"}

ERROR_CASES = [
    (["train", "--algo", "FOO", "--env", "CartPole-v1"], "unknown algorithm 'FOO'"),
    (["train", "--algo", "ners-dqn", "--env", "CartPole-v1"], "did you mean NERS-DQN?"),
    (["train", "--algo", "td_3", "--env", "CartPole-v1"], "did you mean TD3?"),
    (
        ["train", "--algo", "ACER", "--env", "Pendulum-v1", "--stop-iters", "1"],
        "invalid config: ACER supports Discrete action spaces only",
    ),
    (
        ["train", "--algo", "DQN", "--env", "NoSuchEnv-v9", "--stop-iters", "1"],
        "unknown environment id 'NoSuchEnv-v9'",
    ),
    (
        ["train", "--algo", "DQN", "--env", "CartPole-v1", "--config", "{bad"],
        "--config is not valid JSON",
    ),
    (
        ["train", "--algo", "DQN", "--env", "CartPole-v1"]
        + ["--stop", '{"trainig_iteration": 5}'],
        "stop criterion 'trainig_iteration' is not a result key: did you mean "
        "'training_iteration'?",
    ),
    (
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--config"]
        + ['{"ners_config": 5}', "--stop-iters", "1"],
        "--config: ners_config must be a JSON object of .ners() settings",
    ),
    (
        ["train", "--algo", "DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--config", json.dumps({"replay_buffer_config": {"alpah": 0.6, **_OURS}})],
        "invalid config: Bad replay_buffer_config for "
        "FastPrioritizedEpisodeReplayBuffer: Unknown replay buffer settings ['alpah']",
    ),
    (
        ["train", "--algo", "DQN", "--env", "CartPole-v1", "--stop", "[1, 2]"],
        "--stop must be a JSON object",
    ),
    (
        ["train", "--algo", "DQN", "--env", "CartPole-v1", "--stop", '{"a": "b"}'],
        "stop criterion 'a' must be a number",
    ),
    (
        ["train", "--algo", "DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--config", '{"no_such_key": 1}'],
        "unknown config key 'no_such_key' for DQNConfig",
    ),
    (
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--config", '{"ners": {"hidden": 3}}'],
        "unknown config key ners.'hidden'",
    ),
    (
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--config", '{"ners": {"encoder": "bogus"}}'],
        "invalid config",
    ),
    (["train", "--algo", "DQN", "--env", "CartPole-v1"], "no stopping criterion"),
    (["train", "--algo", "DQN"], "--algo needs --env"),
    (["train", "file", "no/such/example.py"], "no such file: no/such/example.py"),
    (["train", "file"], "usage: train file PATH"),
    # Flags only the example's own runner applies change nothing here.
    (
        ["train", "file", "ners_sac/pendulum_ners_sac.py", "--"]
        + ["--num-env-runners", "3", "--evaluation-interval", "2"],
        "--num-env-runners: give it to train before `--` (rllib-ners train "
        "--num-env-runners ... file pendulum_ners_sac.py); --evaluation-interval: "
        "run `python",
    ),
    (["train"], "nothing to train"),
    (["train", "--resume", "/no/such/run"], "no such run directory"),
    (["resume", "/no/such/run"], "no such run directory"),
    (["evaluate", "/no/such/checkpoint"], "no such checkpoint"),
    (["evaluate", "x", "--render", "rgb_array"], "--render rgb_array needs --video"),
    (["evaluate", "x", "--episodes", "0"], "--episodes must be at least 1"),
    (["plot", "/no/such/run"], "no such directory"),
    ([], "missing command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["train", "--stop-iters", "x"], "invalid int value: 'x'"),
    # Numbers out of range: refused before Ray starts, naming the flag.
    (
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--num-env-runners", "-1"],
        "argument --num-env-runners: must be an integer >= 0, got -1 (0 samples",
    ),
    (["train", "--num-learners", "-2"], "--num-learners: must be an integer >= 0"),
    (["train", "--num-gpus-per-learner", "-1"], "--num-gpus-per-learner: must be >= 0"),
    (
        ["train", "--num-gpus-per-learner", "nan"],
        "--num-gpus-per-learner: must be >= 0",
    ),
    (
        ["train", "--seed", "0", "-3"],
        "argument --seed: must be an integer in [0, 4294967295], got -3",
    ),
    (["train", "--stop-timesteps", "0"], "--stop-timesteps: must be an integer >= 1"),
    (["train", "--stop-iters", "-1"], "--stop-iters: must be an integer >= 1, got -1"),
    (["train", "--num-cpus", "0"], "--num-cpus: must be an integer >= 1, got 0"),
    (
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--stop-iters"]
        + ["1", "--ray-address", "auto", "--num-cpus", "2"],
        "--num-cpus sizes the local Ray instance",
    ),
    (["train", "--checkpoint-freq", "-1"], "--checkpoint-freq: must be an integer >="),
    (["train", "--max-failures", "-2"], "--max-failures: must be an integer >= -1"),
    (
        ["evaluate", "x", "--seed", "-1"],
        "--seed: must be an integer in [0, 4294967295]",
    ),
    # Resources Ray cannot give: refused, where Tune would wait forever.
    (
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--num-env-runners", "256"],
        "each trial needs 257 CPU, but Ray has ",
    ),
    pytest.param(
        ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--stop-iters", "1"]
        + ["--num-env-runners", "0", "--num-gpus-per-learner", "1"],
        "each trial needs 1 GPU, but Ray has no GPU: --num-gpus-per-learner 0",
        marks=pytest.mark.skipif(
            torch.cuda.is_available(), reason="this machine has a GPU"
        ),
    ),
    (
        ["train", "--resume", "/no/such/run", "--stop-timesteps", "5", "--seed", "1"],
        "--resume continues a run as it was started, so --stop-timesteps, --seed "
        "would change nothing",
    ),
    (
        ["train", "file", str(PY_EXAMPLE), "--stop-iters", "1", "--", "--nope"],
        "unrecognized arguments: --nope",
    ),
]


def test_a_flag_the_example_lacks_points_to_its_help(capsys):
    """Flags after `--` go to the example's own parser; one it lacks is
    named with where to find the example's flags (not told to move it after
    `--`, where it already is)."""
    code = main(["train", "file", str(PY_EXAMPLE), "--", "--no-such-flag"])
    err = capsys.readouterr().err
    _assert_one_line_error(code, err, "the example has no such flag")
    assert f"train file {PY_EXAMPLE} -- --help" in err


def test_stock_sac_takes_our_buffer_type_from_the_config_flag():
    """As in Python through `with_replay_buffer`: RLlib's SACConfig.validate()
    alone refuses a buffer type that is not one of RLlib's names."""
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners import FastPrioritizedEpisodeReplayBuffer
    from rllib_ners.cli.overrides import (
        apply_config_dict,
        fit_our_buffer_into_stock_config,
        validate_config,
    )

    config = SACConfig().environment("Pendulum-v1")
    buffer = {**_OURS, "capacity": 1000, "alpha": 0.6, "beta": 0.4}
    apply_config_dict(config, {"replay_buffer_config": buffer}, "--config")
    with pytest.raises(cli.CLIError, match="must be of type `EpisodeReplayBuffer`"):
        validate_config(config)
    fit_our_buffer_into_stock_config(config)
    validate_config(config)
    assert FastPrioritizedEpisodeReplayBuffer in config.replay_buffer_config.values()
    assert config.replay_buffer_config["capacity"] == 1000


@pytest.mark.parametrize("argv, expected", ERROR_CASES, ids=lambda v: str(v)[:40])
def test_errors_are_one_clear_line(argv, expected, capsys):
    code = main(argv)
    _assert_one_line_error(code, capsys.readouterr().err, expected)


def test_a_run_short_of_resources_on_a_cluster_waits_with_a_note(monkeypatch, capsys):
    """On a cluster an autoscaler may add what a run lacks: one line, no error
    (on a local Ray the same run is refused: ERROR_CASES)."""
    from rllib_ners import NERSDQNConfig
    from rllib_ners.cli.session import check_resources

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    config = NERSDQNConfig().environment("CartPole-v1")
    config.env_runners(num_env_runners=256)
    with pytest.raises(cli.CLIError, match="each trial needs 257 CPU"):
        check_resources(config, argparse.Namespace(ray_address=None))
    check_resources(config, argparse.Namespace(ray_address="auto"))
    out = capsys.readouterr().out
    assert out.startswith("note: each trial needs 257 CPU, but Ray has 4 CPU: ")
    assert out.rstrip().endswith("(waiting: the cluster may add nodes)")
    check_resources(config.env_runners(num_env_runners=0), argparse.Namespace())
    assert capsys.readouterr().out == ""
    # A resource of another kind: the message still says what to do.
    config.env_runners(custom_resources_per_env_runner={"tpu_slice": 1})
    with pytest.raises(cli.CLIError, match="needs 1 tpu_slice, but Ray has no "):
        check_resources(config.env_runners(num_env_runners=1), argparse.Namespace())


def test_every_train_flag_is_either_a_new_runs_or_taken_by_resume():
    """`train --resume` refuses the flags that set up a new run: a flag added to
    `train` must be listed as one, or be one that resuming uses."""
    from rllib_ners.cli import train
    from rllib_ners.cli.parser import build_parser

    (train_parser,) = [
        action.choices["train"]
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    dests = {action.dest for action in train_parser._actions} - {"help"}
    taken_by_resume = {"what", "path", "algo", "resume", "verbose"}
    taken_by_resume |= {"ray_address", "num_cpus"}
    assert dests - taken_by_resume == set(train._NEW_RUN_FLAGS)
    defaults = {dest: train_parser.get_default(dest) for dest in train._NEW_RUN_FLAGS}
    assert defaults == train._NEW_RUN_FLAGS


def test_error_cases_for_directories_without_runs(tmp_path, capsys):
    for argv, expected in [
        (["resume", tmp_path], "not a Tune run directory"),
        (["evaluate", tmp_path], "no RLlib checkpoint"),
        (["plot", tmp_path], "no Tune trials"),
        (["train", "file", tmp_path], "not a file"),
    ]:
        code = main([str(a) for a in argv])
        _assert_one_line_error(code, capsys.readouterr().err, expected)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("exp: {run: DQN, env: CartPole-v1, stopp: {}}", "unknown key 'stopp'"),
        (
            "exp: {run: DQN, env: CartPole-v1, config: {lrr: 1}}",
            "unknown config key 'lrr'",
        ),
        ("exp: {run: NoAlgo, env: CartPole-v1}", "unknown algorithm 'NoAlgo'"),
        ("exp: {env: CartPole-v1}", "has no `run`"),
        ("exp: [1, 2]", "must be a mapping"),
        ("exp: {run: DQN, env: CartPole-v1, stop: 5}", "`stop` must be a mapping"),
        ("exp: {run: DQN\n  bad: [", "invalid YAML"),
        (
            "exp: {run: ACER, env: CartPole-v1, stop: {training_iteration: 1}, "
            "config: {sequence_length: 7}}",
            "train_batch_size_per_learner=320 must be a positive multiple of "
            "sequence_length=7",
        ),
        ("exp: {run: DQN, env: NoSuchEnv-v9, stop: {x: 1}}", "unknown environment"),
    ],
)
def test_yaml_errors_name_the_problem(text, expected, tmp_path, capsys):
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    code = main(["train", "file", str(path)])
    _assert_one_line_error(code, capsys.readouterr().err, expected)


def test_help_and_version_exit_zero(capsys):
    assert main(["--help"]) == 0
    assert "examples" in capsys.readouterr().out
    assert main(["train", "--help"]) == 0
    assert "--stop-timesteps" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert "rllib-ners" in capsys.readouterr().out
    # The flags of a Python example's own parser, after `--`.
    assert main(["train", "file", str(PY_EXAMPLE), "--", "--help"]) == 0
    assert "--stop-reward" in capsys.readouterr().out


def test_parser_accepts_flags_on_both_sides_of_file():
    parser = cli.build_parser()
    for argv in (
        ["train", "file", "x.py", "--stop-iters", "2"],
        ["train", "--stop-iters", "2", "file", "x.py"],
    ):
        args = parser.parse_args(argv)
        assert (args.what, args.path, args.stop_iters) == ("file", "x.py", 2)


def test_examples_lists_tuned_examples_with_descriptions(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    assert "ners_dqn/cartpole_ners_dqn.py" in out
    assert "NERS-DQN on CartPole-v1: DQN whose replay sampler is learned" in out
    assert "ners_dqn/cartpole_ners_dqn.yaml" in out
    assert "old rllib-train YAML" in out
    assert "dqn/cartpole_dqn_fast_per.py" in out


def test_yaml_example_matches_the_python_example():
    python_config, example_args = cli.load_python_example(PY_EXAMPLE)
    ((name, spec),) = cli.load_yaml_experiments(YAML_EXAMPLE)
    yaml_config, stop = cli.config_from_yaml_experiment(name, spec, str(YAML_EXAMPLE))
    assert type(yaml_config) is type(python_config)
    assert stop == {
        cli.RETURN_KEY: example_args.stop_reward,
        cli.STEPS_KEY: example_args.stop_timesteps,
    }
    for key in (
        "env",
        "lr",
        "train_batch_size_per_learner",
        "double_q",
        "dueling",
        "num_steps_sampled_before_learning_starts",
        "training_intensity",
        "ners_config",
        "replay_buffer_config",
    ):
        assert getattr(yaml_config, key) == getattr(python_config, key), key
    assert tuple(yaml_config.n_step) == tuple(python_config.n_step)
    assert [tuple(p) for p in yaml_config.epsilon] == list(python_config.epsilon)
    # A dict model_config is merged with RLlib's DefaultModelConfig at build time.
    for key, value in spec["config"]["model_config"].items():
        assert python_config.model_config[key] == value, key
        assert yaml_config.model_config[key] == value, key


def test_config_dict_routes_methods_and_properties():
    from rllib_ners.cli.overrides import apply_config_dict, resolve_algo

    config = resolve_algo("NERS-DQN").get_default_config()
    apply_config_dict(
        config,
        {
            "lr": 0.001,
            "num_workers": 0,  # old name of num_env_runners
            "ners_config": {"hidden_size": 64},
            "model_config": {"fcnet_hiddens": [32]},
            "replay_buffer_config": {"capacity": 1000},
            "env_runners": {"rollout_fragment_length": 4},
            "learner_class": "rllib_ners.algorithms.ners_dqn.torch."
            "ners_dqn_torch_learner.NERSDQNTorchLearner",
        },
        "test",
    )
    assert config.lr == 0.001 and config.num_env_runners == 0
    assert config.ners_config["hidden_size"] == 64
    # The other NERS settings keep their defaults.
    assert config.ners_config["train_size"] == NERSSettings().train_size
    assert config.model_config["fcnet_hiddens"] == [32]
    assert config.replay_buffer_config["capacity"] == 1000
    assert config.replay_buffer_config["type"] == "rllib_ners.NERSEpisodeReplayBuffer"
    assert config.rollout_fragment_length == 4
    assert config.learner_class.__name__ == "NERSDQNTorchLearner"


class _FakeTuner:
    """Stands in for tune.Tuner: records what the CLI would run."""

    calls = []

    def __init__(self, trainable, param_space, run_config):
        self.calls.append((trainable, param_space, run_config))

    def fit(self):
        return []


def test_train_flags_reach_config_stop_and_tune(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ray.tune, "Tuner", _FakeTuner)
    monkeypatch.setattr(cli.train, "ray_session", lambda args: contextlib.nullcontext())
    # No Ray here: the resources a local Ray would have.
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    _FakeTuner.calls.clear()
    argv = ["train", "file", str(PY_EXAMPLE), "--config", TINY, "--env", "CartPole-v1"]
    argv += ["--num-env-runners", "1", "--num-learners", "0"]
    argv += ["--num-gpus-per-learner", "0", "--seed", "1", "2", "3"]
    argv += ["--stop-reward", "100", "--stop-timesteps", "5000", "--stop-iters", "7"]
    argv += ["--checkpoint-freq", "2", "--checkpoint-at-end"]
    argv += ["--storage-path", str(tmp_path), "--name", "flags"]
    assert main(argv) == 0
    ((trainable, config, run_config),) = _FakeTuner.calls
    assert trainable.__name__ == "NERSDQN"
    assert config.num_env_runners == 1 and config.num_learners == 0
    assert config.num_gpus_per_learner == 0
    assert config.min_sample_timesteps_per_iteration == 200
    assert config.num_steps_sampled_before_learning_starts == 100
    assert config.seed == {"grid_search": [1, 2, 3]}
    stop = {cli.RETURN_KEY: 100.0, cli.STEPS_KEY: 5000, cli.ITERS_KEY: 7}
    assert run_config.stop == stop
    assert run_config.name == "flags" and run_config.storage_path == str(tmp_path)
    assert run_config.checkpoint_config.checkpoint_frequency == 2
    assert run_config.checkpoint_config.checkpoint_at_end
    assert isinstance(run_config.callbacks[0], cli.ProgressCallback)
    info = json.loads((tmp_path / "flags" / cli.RUN_INFO_FILE).read_text())
    assert info["seeds"] == [1, 2, 3] and info["stop"] == stop
    assert info["source"] == str(PY_EXAMPLE)
    assert "Run directory: " + str(tmp_path / "flags") in capsys.readouterr().out
    # The same name again would mix two runs in one directory.
    (tmp_path / "flags" / "tuner.pkl").write_text("")
    code = main(argv)
    _assert_one_line_error(code, capsys.readouterr().err, "exists already")


@pytest.mark.parametrize(
    "seeds, replay, buffer_seeds",
    [
        (["4"], "fast-per", [4]),
        (["1", "2"], "fast-per", [1, 2]),
        (["1", "2"], "rllib-per", [None, None]),
    ],
)
def test_train_seeds_our_buffer_on_a_stock_config(
    seeds, replay, buffer_seeds, tmp_path, monkeypatch
):
    """A stock DQN does not pass its seed to its buffer: `--seed` gives each
    trial's seed to our buffer too (RLlib's buffer takes none)."""
    from ray.tune.search.variant_generator import generate_variants

    monkeypatch.setattr(ray.tune, "Tuner", _FakeTuner)
    monkeypatch.setattr(cli.train, "ray_session", lambda args: contextlib.nullcontext())
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    _FakeTuner.calls.clear()
    example = REPO / "tuned_examples" / "dqn" / "cartpole_dqn_fast_per.py"
    argv = ["train", "file", str(example), "--seed", *seeds, "--num-env-runners", "0"]
    argv += ["--storage-path", str(tmp_path), "--name", "seeds"]
    assert main(argv + ["--", "--replay", replay]) == 0
    ((_, config, _),) = _FakeTuner.calls
    trials = [spec for _, spec in generate_variants(config.to_dict())]
    assert [trial["seed"] for trial in trials] == [int(seed) for seed in seeds]
    assert [trial["replay_buffer_config"].get("seed") for trial in trials] == (
        buffer_seeds
    )


@pytest.mark.parametrize(
    "flag, at_end", [([], True), (["--no-checkpoint-at-end"], False)]
)
def test_train_checkpoints_at_the_end_by_default(
    flag, at_end, tmp_path, monkeypatch, capsys
):
    """A final checkpoint (what `evaluate` takes) unless asked not to, as the
    tuned examples run by themselves write one."""
    monkeypatch.setattr(ray.tune, "Tuner", _FakeTuner)
    monkeypatch.setattr(cli.train, "ray_session", lambda args: contextlib.nullcontext())
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    _FakeTuner.calls.clear()
    argv = ["train", "--algo", "NERS-DQN", "--env", "CartPole-v1", "--config", TINY]
    argv += ["--stop-iters", "1", "--storage-path", str(tmp_path), *flag]
    assert main(argv) == 0
    ((_, _, run_config),) = _FakeTuner.calls
    assert run_config.checkpoint_config.checkpoint_at_end is at_end


def test_progress_line_has_rate_and_eta():
    result = {
        "training_iteration": 2,
        "time_total_s": 10.0,
        "num_env_steps_sampled_lifetime": 2000,
        "env_runners": {"episode_return_mean": 42.5},
    }
    stop = {cli.STEPS_KEY: 10000, cli.ITERS_KEY: 100}
    line = cli.format_progress(result, (1000, 5.0), stop)
    assert "iter    2" in line and "env steps      2000" in line
    assert "return    42.50" in line and "200.0 steps/s" in line
    assert "ETA 0:00:40" in line  # 8000 steps at 200/s, sooner than 98 iterations
    no_return = cli.format_progress({"training_iteration": 1}, None, {})
    assert "n/a" in no_return and "ETA ?" in no_return


def test_a_stop_key_missing_from_the_first_result_is_named_once(capsys):
    """A typo in --stop would stop nothing, and the run would go on: the first
    result names each such key with the closest result keys, once; the keys
    that some runs only report later (the return) are not named."""
    from rllib_ners.cli.progress import ProgressCallback

    stop = {"env_runners/episode_reward_mean": 100, cli.RETURN_KEY: 100}
    callback = ProgressCallback(stop)

    class Trial:
        trial_id = "t"

    result = {"training_iteration": 1, "env_runners": {"num_episodes": 2}}
    result["env_runners"]["episode_len_mean"] = 20.0
    for _ in range(2):
        callback.on_trial_result(0, [Trial()], Trial(), result)
    notes = [
        line for line in capsys.readouterr().out.splitlines() if "stop key" in line
    ]
    assert len(notes) == 1
    assert "'env_runners/episode_reward_mean'" in notes[0]
    assert "closest: env_runners/episode_len_mean" in notes[0]
    assert cli.RETURN_KEY not in notes[0]


def test_an_interrupted_run_is_not_reported_as_done(tmp_path, capsys):
    """Tune returns normally from Ctrl-C, leaving the trials it stopped short
    without `done`: the summary says so and exits 130 with the resume command,
    as a finished run (every trial `done`) exits 0."""
    from types import SimpleNamespace

    from rllib_ners.cli.session import report_results

    def trial(name, done):
        metrics = {"training_iteration": 5, "done": done}
        return SimpleNamespace(
            metrics=metrics, error=None, path=str(tmp_path / name), checkpoint=None
        )

    assert report_results([trial("a", True), trial("b", True)], tmp_path) == 0
    assert "trial a: done, iter 5" in capsys.readouterr().out
    with pytest.raises(cli.CLIError) as raised:
        report_results([trial("a", True), trial("b", False)], tmp_path)
    assert raised.value.code == 130
    assert str(raised.value) == (
        "interrupted: 1 of 2 trial(s) stopped before their stop criteria; "
        f"continue with `rllib-ners resume {tmp_path}`"
    )
    assert "trial b: interrupted, iter 5" in capsys.readouterr().out


def _ray_worker_pids() -> set:
    """The pids of this machine's Ray worker processes (`ray::...`)."""
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True)
    return {
        int(line.split(None, 1)[0])
        for line in done.stdout.splitlines()[1:]
        if line.split(None, 1)[-1].startswith("ray::")
    }


@pytest.mark.slow
def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path):
    """`kill`, `timeout` and job schedulers send SIGTERM: the run is saved and
    reported interrupted with the resume command (exit 130), and the Ray it
    started ends with it. (Ray's own SIGTERM handler left the trial's actors
    running.)"""
    before = _ray_worker_pids()
    command = [sys.executable, "-m", "rllib_ners.cli", "train", "--algo", "NERS-DQN"]
    command += ["--env", "CartPole-v1", "--stop-timesteps", "1000000", "--num-cpus"]
    command += ["2", "--num-env-runners", "0", "--storage-path", str(tmp_path)]
    command += ["--name", "run"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in process.stdout:  # until the first iteration's progress line
        lines.append(line)
        if line.startswith("iter "):
            break
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=120)
    output = "".join(lines) + rest
    assert process.returncode == 130, output
    assert ": interrupted, iter " in output, output
    assert f"continue with `rllib-ners resume {tmp_path / 'run'}`" in output
    assert (tmp_path / "run" / "tuner.pkl").exists()
    # The actors end within a few seconds of the driver; a loaded 2-core
    # machine gets a minute.
    for _ in range(120):
        left = _ray_worker_pids() - before
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"Ray workers left running: {left}"


def test_the_outcome_of_a_trial_that_failed_before_a_result_reads_n_a():
    """A trial that failed at start has no result: its summary line says n/a,
    not "env steps nan"."""
    from rllib_ners.cli.progress import format_outcome

    assert format_outcome({}, {cli.RETURN_KEY: 450}) == (
        "iter 0, env steps n/a, return n/a (stop reward 450 not reached)"
    )
    done = {"training_iteration": 3, "num_env_steps_sampled_lifetime": 3000}
    assert format_outcome(done, None).startswith("iter 3, env steps 3000, return n/a")


def test_progress_line_shows_the_ners_diagnostics_it_finds():
    result = {
        "training_iteration": 3,
        "ners": {
            "priority_entropy_normalized": 0.9712,
            "priority_entropy": 6.5,  # the old absolute-nats key: not shown
            "effective_sample_fraction": 0.41,
            "scored_priority_max_over_min": 1.0033,
            "num_sampler_updates_lifetime": 12,
            "replay_reward": 3.21,
            "some_future_key": 1.0,
            "sampler_loss": "not a number",
        },
    }
    line = cli.format_progress(result, None, {})
    assert line.endswith(
        "ners: entropy/max 0.9712, ess frac 0.41, max/min 1.0033, updates 12, "
        "replay reward 3.21"
    )
    older = {"ners": {"priority_entropy": 6.5, "num_sampler_updates_lifetime": 4}}
    assert cli.format_progress(older, None, {}).endswith("ners: updates 4")
    assert "ners" not in cli.format_progress({"ners": {"x": 1}}, None, {})
    # RLlib's examples put the step budget under env_runners/.
    stop = {"env_runners/num_env_steps_sampled_lifetime": 3000}
    steps = {"num_env_steps_sampled_lifetime": 1000, "time_total_s": 10.0}
    assert "ETA 0:00:20" in cli.format_progress(steps, None, stop)


def _run_example_script(tmp_path, *flags):
    """The main tuned example as the README runs it, with results under tmp_path."""
    command = [sys.executable, str(PY_EXAMPLE), "--num-env-runners=0", *flags]
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )


def _assert_reads_well(output, max_bytes=6000):
    """One progress line per iteration, the summary, and nothing else big."""
    assert len(output.encode()) < max_bytes, output
    for dump in ("replay_buffer_config", "train_batch_size_per_learner", "== Status"):
        assert dump not in output, output
    assert "new API stack" not in output and "RLModule(config" not in output, output
    iterations = int(re.search(r"done, iter (\d+),", output).group(1))
    progress = [line for line in output.splitlines() if line.startswith("iter ")]
    assert len(progress) == iterations >= 1, output
    assert all("steps/s" in line and "ETA" in line for line in progress), output
    assert "Wall time: " in output and "Run directory: " in output, output
    assert "Plot it: rllib-ners plot " in output, output
    assert "Evaluate it: rllib-ners evaluate " in output, output


@pytest.mark.slow
def test_example_script_as_test_prints_progress_summary_and_fails(tmp_path):
    """`python cartpole_ners_dqn.py --as-test` on a tiny budget: Tune's run reads
    as progress lines and a summary, and the unreached reward fails the process."""
    done = _run_example_script(
        tmp_path, "--stop-timesteps=1500", "--stop-reward=1000", "--as-test"
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    _assert_reads_well(output)
    assert "(stop reward 1000 not reached)" in output
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("cartpole_ners_dqn.py: error: --as-test failed: "), output
    assert "below the required 1000" in last
    checkpoint = output.split("Evaluate it: rllib-ners evaluate ")[1].split()[0]
    assert Path(checkpoint).is_relative_to(tmp_path / "ray_results")
    assert cli.find_checkpoint(Path(checkpoint)) == Path(checkpoint)


@pytest.mark.slow
def test_example_script_no_tune_trains_in_process(tmp_path):
    done = _run_example_script(tmp_path, "--stop-timesteps=1500", "--no-tune")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    _assert_reads_well(output)
    run_dir = Path(output.split("Run directory: ")[1].split()[0])
    assert run_dir.parent == tmp_path / "ray_results"
    assert _plotting.find_trial_dirs([run_dir]) == [run_dir]  # its result.json
    assert cli.find_checkpoint(run_dir).parent == run_dir


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-env-runners=-1"], "--num-env-runners=-1: must be >= 0"),
        (["--num-envs-per-env-runner=0"], "--num-envs-per-env-runner=0: must be >= 1"),
        (["--num-gpus-per-learner=-1"], "--num-gpus-per-learner=-1.0: must be >= 0"),
        (["--stop-timesteps=0"], "--stop-timesteps=0: must be >= 1"),
        (["--env=Pendulum-v1"], "--env=Pendulum-v1: this example sets its own env"),
        (["--algo=PPO"], "--algo: not used by this example"),
        (["--alg", "PPO"], "--algo: not used by this example"),  # argparse's prefix
        (["--stop-reward=nan"], "--stop-reward=nan: must be a finite number"),
        (["--old-api-stack"], "--old-api-stack: not used by this example"),
        (["--evaluation-duration=5"], "--evaluation-duration: evaluation runs only"),
        # A flag that is a prefix of another is itself, not an abbreviation.
        (
            ["--evaluation-duration-unit=timesteps"],
            "--evaluation-duration-unit: evaluation runs only",
        ),
        (["--no-tune", "--num-samples=3"], "--num-samples: Tune's, and --no-tune"),
        (["--wandb-project=p"], "--wandb-project and --wandb-run-name log to"),
        (["--num-samples=-1"], "--num-samples=-1: must be >= 1"),
        (["--num-agents=2"], "--num-agents: not used by this example"),
        (["--tune-max-report-freq=5"], "--tune-max-report-freq: not used"),
        (["--framework=tf2"], "--framework=tf2: this package's algorithms are"),
    ],
)
def test_an_example_refuses_flags_it_cannot_use(flags, message, capsys, monkeypatch):
    """A tuned example's flags out of range, an --env the example does not
    train on, or a flag of RLlib's example parser that it does not use: one
    line naming the flag, exit code 2 (before, -1 EnvRunners failed inside the
    trial and the others were dropped without a word)."""
    from ray.rllib.examples.utils import add_rllib_example_script_args

    from rllib_ners import NERSDQNConfig
    from rllib_ners.cli.example_runner import run_example

    config = NERSDQNConfig().environment("CartPole-v1")
    argv = ["--stop-iters=1", *flags]
    monkeypatch.setattr(sys, "argv", ["example.py", *argv])
    args = add_rllib_example_script_args().parse_args(argv)
    with pytest.raises(SystemExit) as exit_info:
        run_example(config, args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_example_with_its_own_stop_still_stops_at_stop_iters(
    monkeypatch, ray_cluster
):
    """The Atari examples pass stop criteria of their own (the game score);
    --stop-iters is added to them, not dropped."""
    from ray.rllib.examples.utils import add_rllib_example_script_args

    from rllib_ners import NERSDQNConfig
    from rllib_ners.cli import example_runner

    stops = []

    def record(config, stop, success_key):
        stops.append(stop)
        return {}, None

    monkeypatch.setattr(example_runner, "_train_in_process", record)
    argv = ["--no-tune", "--stop-iters=3"]
    monkeypatch.setattr(sys, "argv", ["example.py", *argv])
    args = add_rllib_example_script_args().parse_args(argv)
    config = NERSDQNConfig().environment("CartPole-v1")
    example_runner.run_example(config, args, stop={cli.RETURN_KEY: 10.0})
    assert stops == [{cli.RETURN_KEY: 10.0, cli.ITERS_KEY: 3}]


def test_a_config_the_flags_make_invalid_is_one_error_line(
    capsys, monkeypatch, ray_cluster
):
    """validate()'s error, raised once the flags are applied, ends the run with
    one line naming the setting, not a traceback from inside Tune."""
    from ray.rllib.examples.utils import add_rllib_example_script_args

    from rllib_ners import NERSDQNConfig
    from rllib_ners.cli.example_runner import run_example

    config = NERSDQNConfig().environment("CartPole-v1").training(overlap_sampling=True)
    argv = ["--stop-iters=1", "--num-env-runners=0"]
    monkeypatch.setattr(sys, "argv", ["example.py", *argv])
    args = add_rllib_example_script_args().parse_args(argv)
    with pytest.raises(SystemExit) as exit_info:
        run_example(config, args)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "error: the config with these flags is invalid: overlap_sampling=True" in err
    assert "Traceback" not in err and "_validate_config" not in err


@pytest.mark.parametrize(
    "flags, gpus_per_learner",
    [([], 0), (["--num-gpus-per-learner=1"], 1), (["--num-gpus-per-learner=0"], 0)],
)
def test_example_learner_stays_on_cpu_unless_the_gpu_is_asked_for(
    flags, gpus_per_learner, monkeypatch, capsys
):
    """Where the cluster has a GPU, a tuned example's Learner runs on the CPU
    unless --num-gpus-per-learner asks for it (with one small update per env
    step the CPU is faster), and says so in one line naming the flag."""
    from ray.rllib.examples.utils import add_rllib_example_script_args

    from rllib_ners import NERSDQNConfig
    from rllib_ners.cli.example_runner import _apply_example_args

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "GPU": 1.0})
    config = NERSDQNConfig().environment("CartPole-v1")
    args = add_rllib_example_script_args().parse_args(flags)
    _apply_example_args(config, args)
    assert config.num_gpus_per_learner == gpus_per_learner
    said = capsys.readouterr().out
    assert ("--num-gpus-per-learner=1" in said) == (not flags)
    if not flags:
        assert said.count("\n") == 1 and "CPU" in said


@pytest.mark.parametrize(
    "flags, gpus_per_learner, gpus_in_cluster",
    [([], 1, 1.0), (["--num-gpus-per-learner=0"], 0, 1.0), ([], 0, 0.0)],
)
def test_atari_example_learner_takes_the_gpu_where_there_is_one(
    flags, gpus_per_learner, gpus_in_cluster, monkeypatch, capsys
):
    """The DQN family on Atari frames trained faster with a GPU Learner (as
    measured): a tuned example puts it there by default, says so in one line
    naming the flag that keeps it on the CPU, and stays on the CPU without a
    GPU or with --num-gpus-per-learner=0."""
    from ray.rllib.examples.utils import add_rllib_example_script_args

    from rllib_ners import RainbowDQNConfig
    from rllib_ners.cli.example_runner import _apply_example_args
    from rllib_ners.env.atari_rllib import with_atari

    monkeypatch.setattr(
        ray, "cluster_resources", lambda: {"CPU": 2.0, "GPU": gpus_in_cluster}
    )
    config = with_atari(RainbowDQNConfig(), "MsPacman")
    args = add_rllib_example_script_args().parse_args(flags)
    _apply_example_args(config, args)
    assert config.num_gpus_per_learner == gpus_per_learner
    said = capsys.readouterr().out
    if gpus_in_cluster and not flags:
        assert said.count("\n") == 1 and "--num-gpus-per-learner=0" in said
    else:
        assert "GPU:" not in said


def test_example_requests_take_the_fragment_length_flag(monkeypatch):
    """The examples with --overlap-sampling take --rollout-fragment-length
    (env steps per sub-env in each request), leave the example's own where it
    is not given, and refuse a length below 1 before Ray starts."""
    from ray.rllib.examples.utils import add_rllib_example_script_args

    from rllib_ners import RainbowDQNConfig
    from rllib_ners.cli import add_overlap_sampling_args
    from rllib_ners.cli.common import CLIError
    from rllib_ners.cli.example_runner import (
        _apply_example_args,
        _check_example_numbers,
    )

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    parser = add_rllib_example_script_args()
    add_overlap_sampling_args(parser)
    for flags, expected in (([], 4), (["--rollout-fragment-length=8"], 8)):
        config = RainbowDQNConfig().env_runners(rollout_fragment_length=4)
        config.environment("CartPole-v1")
        _apply_example_args(config, parser.parse_args(flags))
        assert config.rollout_fragment_length == expected
    with pytest.raises(CLIError, match="--rollout-fragment-length=0: must be >= 1"):
        _check_example_numbers(parser.parse_args(["--rollout-fragment-length=0"]))


# The tuned examples whose Learner may run on a GPU.
GPU_EXAMPLES = [
    "tuned_examples/ners_dqn/atari_rainbow.py",
    "tuned_examples/ners_dqn/ms_pacman_ners_rainbow_100k.py",
    "tuned_examples/ners_dqn/pong_ners_rainbow.py",
    "tuned_examples/ners_sac/halfcheetah_ners_sac.py",
    "tuned_examples/ners_sac/hopper_ners_sac.py",
    "tuned_examples/td3/hopper_td3.py",
]


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], (False, False)),
        (["--cuda-graph-updates"], (True, False)),
        (["--cuda-graph-updates", "--act-on-learner-device"], (True, True)),
    ],
)
def test_gpu_examples_take_the_cuda_graph_and_acting_flags(flags, expected):
    """`--cuda-graph-updates` and `--act-on-learner-device` reach each GPU
    example's config (`cuda_graph_updates`, `act_on_learner_device`); both off
    unless given, as in the config."""
    from rllib_ners.cli.overrides import load_python_example

    for example in GPU_EXAMPLES:
        config = load_python_example(REPO / example, flags)[0]
        settings = (config.cuda_graph_updates, config.act_on_learner_device)
        assert settings == expected, example


def _write_trial(run_dir, name, buffer, returns, steps_per_iter=100, use_json=False):
    trial = run_dir / name
    trial.mkdir(parents=True)
    params = {"env": "CartPole-v1"}
    if buffer is not None:
        params["replay_buffer_config"] = buffer
    (trial / "params.json").write_text(json.dumps(params))
    steps = [steps_per_iter * (i + 1) for i in range(len(returns))]
    if use_json:
        with open(trial / "result.json", "w") as f:
            for s, r in zip(steps, returns):
                result = {"num_env_steps_sampled_lifetime": s}
                result["env_runners"] = {"episode_return_mean": r}
                f.write(json.dumps(result) + "\n")
        return trial
    with open(trial / "progress.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["num_env_steps_sampled_lifetime", cli.RETURN_KEY])
        writer.writerows(zip(steps, returns))
    return trial


def test_plot_groups_trials_by_replay_type(tmp_path, capsys):
    ners = {"type": "rllib_ners.NERSEpisodeReplayBuffer", "alpha": 0.6}
    fast = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
    run_a, run_b = tmp_path / "ners_run", tmp_path / "baselines"
    _write_trial(run_a, "NERS-DQN_CartPole-v1_0", ners, [10, 20, 30])
    _write_trial(run_a, "NERS-DQN_CartPole-v1_1", ners, [20, 40, 60], use_json=True)
    _write_trial(run_b, "DQN_CartPole-v1_0", {"type": fast, "alpha": 0.6}, [5, 6, 7])
    _write_trial(run_b, "DQN_CartPole-v1_1", {"type": fast, "alpha": 0.0}, [5, 5, 5])
    rllib_per = {"type": "<class 'ray...PrioritizedEpisodeReplayBuffer'>", "alpha": 0.6}
    _write_trial(run_b, "DQN_CartPole-v1_2", rllib_per, [1, 2, 3])
    _write_trial(run_b, "PPO_CartPole-v1_3", None, [9, 9, 9])
    output = tmp_path / "out" / "curves.png"
    code = main(["plot", str(run_a), str(run_b), "-o", str(output), "--band", "std"])
    assert code == 0
    assert output.exists() and output.stat().st_size > 0
    out = capsys.readouterr().out
    for label in ("NERS: 2", "PER: 1", "uniform: 1", "RLlib PER: 1", "PPO: 1"):
        assert label in out
    curves = [_plotting.load_trial(d) for d in _plotting.find_trial_dirs([run_a])]
    grid, mean, low, high, count = _plotting.aggregate(curves, "minmax", points=3)
    np.testing.assert_allclose(grid, [100, 200, 300])
    np.testing.assert_allclose(mean, [15, 30, 45])
    np.testing.assert_allclose(low, [10, 20, 30])
    np.testing.assert_allclose(high, [20, 40, 60])
    assert list(count) == [2, 2, 2]
    assert (
        main(["plot", str(run_a), "-o", str(tmp_path / "r.png"), "--label-by", "run"])
        == 0
    )
    assert "ners_run: 2" in capsys.readouterr().out


FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"


@pytest.mark.parametrize(
    "replay, label",
    [
        ({"type": FAST, "alpha": 0.6}, "PER"),
        ({"type": FAST, "alpha": 0.0}, "uniform"),
        ({"type": FAST, "alpha": 0.4, "min_priority": 1.0}, "LAP"),
        ({"type": FAST, "alpha": 0.5, "sampler": "relo"}, "ReLo"),
        ({"type": FAST, "alpha": 0.0, "sampler": "laber"}, "LaBER"),
        ({"type": FAST, "alpha": 0.6, "sampler": "priority"}, "PER"),
        (
            {"type": "SAC's name", "rllib_ners_buffer_class": FAST, "alpha": 0.0},
            "uniform",
        ),
    ],
)
def test_plot_labels_each_replay_method_apart(replay, label):
    assert _plotting.trial_label({"replay_buffer_config": replay}) == label
    pal = {"replay_buffer_config": replay, "critic_loss": "pal"}
    assert _plotting.trial_label(pal) == ("PAL" if label == "uniform" else label)


def test_evaluate_plays_whole_atari_games_with_the_games_rewards():
    """An Atari checkpoint trains on lives with clipped rewards; `evaluate`
    plays whole games and reports the game's score, as the presets evaluate."""
    from rllib_ners import RainbowDQNConfig
    from rllib_ners.cli.evaluate import local_evaluation_config
    from rllib_ners.env.atari_rllib import with_atari

    config = with_atari(RainbowDQNConfig(), "Pong", env_config={"noop_max": 5})
    evaluated = local_evaluation_config(config)
    assert evaluated.env_config == {
        "game": "Pong",
        "noop_max": 5,
        "episodic_life": False,
        "clip_rewards": False,
    }
    assert config.env_config == {"game": "Pong", "noop_max": 5}  # unchanged
    # The config's own evaluation env, where the user changed it.
    config.evaluation(evaluation_config={"env_config": {"episodic_life": True}})
    assert local_evaluation_config(config).env_config["episodic_life"] is True
    cartpole = local_evaluation_config(RainbowDQNConfig().environment("CartPole-v1"))
    assert cartpole.env_config == {}
    # --video renders the game's full-colour screen.
    env = cli.make_render_env(evaluated, "rgb_array")
    env.reset(seed=0)
    assert env.render().shape == (210, 160, 3)
    env.close()


def test_plot_output_is_an_image_file(tmp_path, capsys):
    """`-o` without a suffix writes (and names) a PNG; a suffix matplotlib
    cannot write is refused in one line before any run is read."""
    run = tmp_path / "run"
    _write_trial(run, "DQN_CartPole-v1_0", None, [1, 2, 3])
    assert main(["plot", str(run), "-o", str(tmp_path / "curves")]) == 0
    assert (tmp_path / "curves.png").exists()
    assert f"wrote {tmp_path / 'curves.png'} " in capsys.readouterr().out
    code = main(["plot", str(tmp_path / "no_run"), "-o", str(tmp_path / "c.txt")])
    _assert_one_line_error(code, capsys.readouterr().err, "-o/--output")
    assert not (tmp_path / "c.txt").exists()


def test_video_writer_missing_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(cli.evaluate, "module_available", lambda name: False)
    code = main(["evaluate", "/no/such/checkpoint", "--video", "out.mp4"])
    _assert_one_line_error(code, capsys.readouterr().err, "no video writer available")


def test_a_video_file_name_without_a_video_suffix_is_refused(capsys):
    code = main(["evaluate", "/no/such/checkpoint", "--video", "out.txt"])
    _assert_one_line_error(code, capsys.readouterr().err, "end it in .mp4 or .gif")


def _gif_frames(path) -> List[np.ndarray]:
    """The frames of the GIF at `path`, as RGB arrays."""
    from PIL import Image, ImageSequence

    with Image.open(path) as gif:
        return [
            np.asarray(frame.convert("RGB")) for frame in ImageSequence.all_frames(gif)
        ]


def test_video_writers_write_frames(tmp_path):
    frames = [np.full((32, 48, 3), i * 20, dtype=np.uint8) for i in range(5)]
    cli.video_writer(tmp_path / "v.gif")(frames, 10)
    written = _gif_frames(tmp_path / "v.gif")
    assert [frame.shape for frame in written] == [(32, 48, 3)] * 5
    assert [int(frame[0, 0, 0]) for frame in written] == [0, 20, 40, 60, 80]
    try:
        write_mp4 = cli.video_writer(tmp_path / "v.mp4")
    except cli.CLIError:
        pytest.skip("no mp4 writer (imageio-ffmpeg or OpenCV) installed")
    write_mp4(frames, 10)
    cv2 = pytest.importorskip("cv2")
    capture = cv2.VideoCapture(str(tmp_path / "v.mp4"))
    read = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        read.append(frame)
    capture.release()
    assert [frame.shape for frame in read] == [(32, 48, 3)] * 5
    # Lossy compression: each gray level comes back within a few steps.
    levels = [float(frame.mean()) for frame in read]
    np.testing.assert_allclose(levels, [0, 20, 40, 60, 80], atol=6)


# ---------------------------------------------------------------- with Ray


def test_train_algo_prints_progress_and_records_the_run(trained_run):
    run_dir, out = trained_run
    assert "iter    1 |" in out and "iter    2 |" in out
    assert "steps/s" in out and "ETA" in out
    info = json.loads((run_dir / cli.RUN_INFO_FILE).read_text())
    assert info["trainable"] == "NERS-DQN" and info["env"] == "CartPole-v1"
    assert info["stop"] == {cli.ITERS_KEY: 2, cli.STEPS_KEY: 100000}
    (trial,) = [p for p in run_dir.iterdir() if (p / "progress.csv").exists()]
    params = json.loads((trial / "params.json").read_text())
    assert params["seed"] == 0
    assert params["min_sample_timesteps_per_iteration"] == 200
    assert cli.find_checkpoint(run_dir).parent == trial
    assert "Evaluate it: rllib-ners evaluate" in out


def test_evaluate_runs_greedy_episodes(trained_run, capsys):
    """Greedy acting from a seeded reset repeats itself exactly; the summary
    is the episodes' mean."""
    run_dir, _ = trained_run
    outputs = []
    for _ in range(2):
        assert main(["evaluate", str(run_dir), "--episodes", "2", "--seed", "1"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    returns = [
        float(value) for value in re.findall(r"episode \d: return (\S+)", outputs[0])
    ]
    assert len(returns) == 2
    mean = float(re.search(r"2 greedy episode\(s\), mean return (\S+)", outputs[0])[1])
    assert mean == pytest.approx(np.mean(returns), abs=0.005)


def test_acer_example_trains_and_its_checkpoint_evaluates(ray_cluster, tmp_path):
    """`train file acer/cartpole_acer.py` (its own flags after `--`), then
    `evaluate` on the checkpoint: ACER acts greedily on its policy logits."""
    storage = tmp_path / "runs"
    code, out = _run_main(
        [
            "train",
            "file",
            "acer/cartpole_acer.py",
            "--config",
            json.dumps({"num_steps_sampled_before_learning_starts": 100}),
            "--stop-iters",
            1,
            "--num-env-runners",
            0,
            "--checkpoint-at-end",
            "--storage-path",
            storage,
            "--name",
            "acer-run",
            "--",
            "--replay",
            "ners",
        ]
    )
    assert code == 0, out
    assert "iter    1 |" in out
    run_dir = storage / "acer-run"
    (trial,) = [p for p in run_dir.iterdir() if (p / "progress.csv").exists()]
    params = json.loads((trial / "params.json").read_text())
    assert "NERSEpisodeReplayBuffer" in str(params["replay_buffer_config"]["type"])
    assert main(["evaluate", str(run_dir), "--episodes", "1", "--seed", "1"]) == 0


class _FramesCartPole(gym.Wrapper):
    """CartPole whose render() returns a small frame (no pygame needed), each
    frame of an episode another gray (the GIF writer merges equal frames)."""

    def reset(self, **kwargs):
        self.frames_rendered = 0
        return self.env.reset(**kwargs)

    def render(self):
        self.frames_rendered += 1
        return np.full((40, 60, 3), self.frames_rendered % 256, dtype=np.uint8)


def test_evaluate_writes_a_video(trained_run, tmp_path, monkeypatch, capsys):
    run_dir, _ = trained_run
    monkeypatch.setattr(
        cli.evaluate,
        "make_render_env",
        lambda config, mode: _FramesCartPole(gym.make("CartPole-v1")),
    )
    video = tmp_path / "episodes.gif"
    code = main(["evaluate", str(run_dir), "--episodes", "1", "--video", str(video)])
    assert code == 0
    out = capsys.readouterr().out
    steps = int(re.search(r"episode 1: return \S+ \((\d+) steps\)", out).group(1))
    # A frame after the reset and one after each step.
    assert f"wrote {video} ({steps + 1} frames)" in out
    written = _gif_frames(video)
    assert len(written) == steps + 1
    assert [int(frame[0, 0, 0]) for frame in written[:3]] == [1, 2, 3]


@pytest.mark.skipif(
    module_available("pygame"), reason="pygame installed: CartPole can render"
)
def test_evaluate_render_without_pygame_is_a_clear_error(trained_run, tmp_path, capsys):
    run_dir, _ = trained_run
    code = main(["evaluate", str(run_dir), "--video", str(tmp_path / "x.gif")])
    _assert_one_line_error(code, capsys.readouterr().err, "cannot render 'CartPole-v1'")


def test_plot_of_a_real_run(trained_run, tmp_path, capsys):
    run_dir, _ = trained_run
    output = tmp_path / "curves.png"
    assert main(["plot", str(run_dir), "-o", str(output)]) == 0
    from PIL import Image

    with Image.open(output) as image:
        assert image.format == "PNG"
        pixels = np.asarray(image.convert("L"))
    # Something was drawn: a blank canvas has one gray level.
    assert min(pixels.shape) >= 200 and len(np.unique(pixels)) > 10
    assert "NERS: 1 trial(s)" in capsys.readouterr().out


def test_train_resume_of_a_finished_run_reports_it(trained_run):
    run_dir, _ = trained_run
    code, out = _run_main(["train", "--resume", run_dir])
    assert code == 0, out
    assert f"Resuming {run_dir}" in out and "done, iter 2" in out


class _FailOnce(gym.Wrapper):
    """Raises once (marker file absent) at step `fail_at` of the env's life."""

    def __init__(self, env, marker, fail_at):
        super().__init__(env)
        self.marker, self.fail_at, self.steps = Path(marker), fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at and not self.marker.exists():
            self.marker.touch()
            raise RuntimeError("injected env failure")
        return self.env.step(action)


def _fail_once_creator(env_config):
    env = gym.make("CartPole-v1")
    return _FailOnce(env, env_config["marker"], env_config["fail_at"])


def test_failed_yaml_run_resumes_from_its_checkpoint(ray_cluster, tmp_path, capsys):
    from ray import cloudpickle
    from ray.tune.registry import register_env

    # The env creator runs in the trial actor, which cannot import this module.
    this_module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(this_module)
    try:
        register_env(FAIL_ONCE_ENV, _fail_once_creator)
    finally:
        cloudpickle.unregister_pickle_by_value(this_module)
    marker = tmp_path / "failed-once"
    experiment = {
        "fail-once": {
            "run": "DQN",
            "env": FAIL_ONCE_ENV,
            "stop": {"training_iteration": 3},
            "config": {
                **json.loads(TINY),
                "env_config": {"marker": str(marker), "fail_at": 300},
                "replay_buffer_config": {
                    "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
                },
            },
        }
    }
    path = tmp_path / "fail_once.yaml"
    path.write_text(json.dumps(experiment))  # JSON is YAML
    storage = tmp_path / "runs"
    code, out = _run_main(
        ["train", "file", path, "--num-env-runners", 0, "--checkpoint-freq", 1]
        + ["--storage-path", storage, "--name", "fail-once"]
    )
    err = capsys.readouterr().err
    assert code == 1 and marker.exists(), out
    assert "injected env failure" in out
    assert "rllib-ners resume" in err and "Traceback" not in err
    run_dir = storage / "fail-once"
    info = json.loads((run_dir / cli.RUN_INFO_FILE).read_text())
    assert info["trainable"] == "DQN" and info["source"] == str(path)

    code, out = _run_main(["resume", run_dir])
    assert code == 0, out
    # Restored from the checkpoint of iteration 1: iterations 2 and 3 ran again.
    assert "iter    1 |" not in out
    assert "iter    3 |" in out and "done, iter 3" in out


def test_end_to_end_train_plot_evaluate_in_subprocesses(ray_cluster, tmp_path):
    """The shipped Python example through `python -m rllib_ners.cli`; the
    subprocesses join this test's Ray instance with --ray-address."""

    def cli_run(*argv):
        command = [sys.executable, "-m", "rllib_ners.cli", *map(str, argv)]
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # No traceback, except where Ray stopped a finished trial's actor while
        # it ran a `__del__`: Ray's exit, raised as SystemExit in whatever
        # Python code the actor was running at that moment (a rare race).
        errors = [
            exception
            for from_actor, exception in tracebacks_in(done.stderr)
            if not (from_actor and exception.startswith("SystemExit"))
        ]
        assert not errors, done.stderr
        return done.stdout

    storage = tmp_path / "runs"
    out = cli_run(
        "train",
        "file",
        "tuned_examples/ners_dqn/cartpole_ners_dqn.py",
        "--stop-iters",
        2,
        "--num-env-runners",
        0,
        "--checkpoint-at-end",
        "--storage-path",
        storage,
        "--config",
        TINY,
        "--name",
        "e2e",
        "--ray-address",
        ray_cluster,
    )
    assert "iter    2 |" in out
    run_dir = storage / "e2e"
    info = json.loads((run_dir / cli.RUN_INFO_FILE).read_text())
    assert info["trainable_class"] == "rllib_ners.algorithms.ners_dqn.ners_dqn.NERSDQN"
    assert info["stop"][cli.RETURN_KEY] == 450.0  # the example's own default

    png = tmp_path / "curves.png"
    out = cli_run("plot", run_dir, "-o", png)
    assert png.exists() and png.stat().st_size > 0

    out = cli_run("evaluate", run_dir, "--episodes", 2, "--ray-address", ray_cluster)
    assert "2 greedy episode(s), mean return" in out
