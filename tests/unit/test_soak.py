"""The CI-sized run of `benchmarks/soak_buffer.py`: invariants hold, memory flat."""

import importlib.util
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak_buffer.py"


@pytest.mark.slow
def test_soak_keeps_invariants_and_memory_flat():
    spec = importlib.util.spec_from_file_location("soak_buffer", SOAK)
    soak_buffer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak_buffer)
    # Raises on any broken invariant or non-finite value in trees or cache.
    start_mb, end_mb = soak_buffer.soak(
        cycles=20_000, capacity=5_000, check_every=2_000, sampler_every=50, seed=1
    )
    # The buffer is preallocated: 20k cycles through a full buffer may not grow it.
    assert end_mb - start_mb < 20.0
