"""`rllib-ners`: the command line of rllib_ners (RLlib 2.60 ships no `rllib` script).

Subcommands::

    rllib-ners train file <path.py|path.yaml> [--stop-iters N] [...] [-- SCRIPT ARGS]
    rllib-ners train --algo NERS-DQN --env CartPole-v1 --config '{...}' --stop '{...}'
    rllib-ners resume <run dir>            (also: rllib-ners train --resume <run dir>)
    rllib-ners evaluate <checkpoint> --episodes N [--video out.mp4]
    rllib-ners plot <run dir>... -o curves.png
    rllib-ners examples

`train` runs Ray Tune (one experiment directory under `--storage-path`, default
`~/ray_results`), prints one progress line per training iteration (iteration, env
steps, return, steps/s, ETA) and writes `rllib_ners_run.json` into the run
directory, which `resume` reads to pick the trainable again.

Python tuned examples (RLlib's `add_rllib_example_script_args` scripts) are loaded
for their module-level `config` without running their `__main__` block; their own
flags go after `--`. YAML files use the old `rllib train` format::

    experiment-name:
        env: CartPole-v1
        run: NERS-DQN
        stop: {env_runners/episode_return_mean: 450}
        config: {lr: 0.0005, ...}

Errors a user can fix (unknown algorithm or env, bad JSON/YAML, missing files)
print one line, `rllib-ners: error: ...`, and exit non-zero; `main(argv)` returns
the exit code, so the CLI is testable in-process.

One module per subcommand (`train`, `resume`, `evaluate`, `plot`, `examples`);
`common` holds what they share (result keys, the user-facing error, one-line
error texts), `parser` builds the argument parser, `overrides` applies config
overrides and loads tuned examples, `progress` prints the per-iteration lines,
`session` holds the Ray session and the Tune run with its summary.
`run_example(config, args)` (`example_runner`) is how the tuned examples run:
RLlib's example flags, the same progress lines and summary.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Dict, List, Optional, Sequence

from rllib_ners.cli.common import (
    INTERRUPTED_EXIT_CODE,
    ITERS_KEY,
    PROG,
    RETURN_KEY,
    RUN_INFO_FILE,
    STEPS_KEY,
    CLIError,
    one_line,
)
from rllib_ners.cli.evaluate import (
    cmd_evaluate,
    find_checkpoint,
    make_render_env,
    video_writer,
)
from rllib_ners.cli.example_runner import (
    add_gpu_learner_args,
    add_overlap_sampling_args,
    add_seed_arg,
    add_torch_threads_arg,
    gpu_learner_settings,
    overlap_sampling_settings,
    run_example,
)
from rllib_ners.cli.examples import cmd_examples, example_description
from rllib_ners.cli.overrides import (
    config_from_yaml_experiment,
    load_python_example,
    load_yaml_experiments,
)
from rllib_ners.cli.parser import build_parser
from rllib_ners.cli.plot import cmd_plot
from rllib_ners.cli.progress import ProgressCallback, format_duration, format_progress
from rllib_ners.cli.resume import cmd_resume
from rllib_ners.cli.train import cmd_train


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs `rllib-ners ARGV` and returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["study"]:
        return _study(argv[1:])
    script_args: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help, --version
            return int(exit_.code or 0)
        args.script_args = script_args
        if args.command is None:
            raise CLIError(
                "missing command: train, resume, evaluate, plot, examples or study "
                f"(see `{PROG} --help`)",
                code=2,
            )
        if script_args and args.command != "train":
            raise CLIError("arguments after `--` are for `train file X.py` only", 2)
        return _COMMANDS[args.command](args)
    except CLIError as error:
        if error.code == 0:  # a Python example printed its --help
            return 0
        print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE


def _study(argv: List[str]) -> int:
    """`rllib-ners study ...` (`rllib_ners.study.cli`), its errors as one line."""
    from rllib_ners.study.cli import main as study_main

    try:
        return study_main(argv, prog=f"{PROG} study")
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(f"{PROG} study: error: {exit_.code}", file=sys.stderr)
            return 2
        return int(exit_.code or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE


_COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cmd_train,
    "resume": cmd_resume,
    "evaluate": cmd_evaluate,
    "plot": cmd_plot,
    "examples": cmd_examples,
}
