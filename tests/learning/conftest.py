"""The `run_example` fixture: a tuned example script with `--as-test` in a
subprocess (`helpers.run_example_as_test`)."""

import pytest
from helpers import run_example_as_test


@pytest.fixture(name="run_example")
def run_example_fixture():
    """`run_example(relative_path, *args, timeout=1500, env=None)`."""
    return run_example_as_test
