"""The CI-sized run of `tests/soak_buffer.py`: invariants hold, memory flat."""

import pytest
import soak_buffer


@pytest.mark.slow
def test_soak_keeps_invariants_and_memory_flat():
    # Raises on any broken invariant or non-finite value in trees or cache.
    start_mb, end_mb = soak_buffer.soak(
        cycles=20_000, capacity=5_000, check_every=2_000, sampler_every=50, seed=1
    )
    # The buffer is preallocated: 20k cycles through a full buffer may not grow it.
    assert end_mb - start_mb < 20.0
