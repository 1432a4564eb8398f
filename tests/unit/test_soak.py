"""The CI-sized run of `tests/soak_buffer.py`: invariants hold, memory flat.

It runs in a process of its own: the test session's process also holds Ray's
driver threads and the allocator thresholds earlier tests raised, so its
resident memory says little about the buffer's."""

import re
import subprocess
import sys

import pytest
import soak_buffer


@pytest.mark.slow
def test_soak_keeps_invariants_and_memory_flat():
    # Exits non-zero on any broken invariant or non-finite value in trees or cache.
    command = [sys.executable, soak_buffer.__file__, "--cycles", "20000"]
    command += ["--capacity", "5000", "--check-every", "2000"]
    command += ["--sampler-every", "50", "--seed", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    (growth,) = re.findall(r"growth ([+-][0-9.]+) MiB", output)
    # The buffer is preallocated: 20k cycles through a full buffer may not grow it.
    assert float(growth) < 20.0, output[-4000:]
