"""`run_example`: runs a tuned example script with `--as-test` in a subprocess.

`--as-test` makes RLlib's example runner raise unless the stop reward is reached
within the stop timesteps, so a test calling it fails if the agent does not learn.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parents[2]


def run_example(relative_path, *args, timeout=1500, env=None):
    """Runs `ROOT/relative_path --as-test *args`; `env`: extra environment
    variables for the script. Fails with the output's last 40 lines."""
    # Each example starts and stops its own Ray instance.
    if ray.is_initialized():
        ray.shutdown()
    cmd = [sys.executable, str(ROOT / relative_path), "--as-test", *args]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(os.environ, **env),
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{tail}"


@pytest.fixture(name="run_example")
def run_example_fixture():
    """`run_example(relative_path, *args, timeout=1500, env=None)`."""
    return run_example
