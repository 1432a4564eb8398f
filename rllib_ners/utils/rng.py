"""Snapshots of a process's global random generators (Python, NumPy, torch).

Checkpoints of our algorithms and Learners carry them, so that a restored run
draws the same random numbers from there on as the uninterrupted one would
(epsilon-greedy exploration on a local EnvRunner, noisy-net noise on a Learner).
Plain lists and arrays only: the state pickles without torch objects.
"""

from __future__ import annotations

import random
from typing import Any, Dict

import numpy as np

# The largest seed numpy's and Ray's seeding accepts (seeds are in [0, MAX_SEED]).
MAX_SEED = 2**32 - 1


def global_rng_state() -> Dict[str, Any]:
    """The current state of `random`, `numpy.random` and torch's CPU generator."""
    import torch

    version, internal, gauss = random.getstate()
    return {
        "python": [version, list(internal), gauss],
        "numpy": np.random.get_state(legacy=False),
        "torch": torch.get_rng_state().numpy().copy(),
    }


def set_global_rng_state(state: Dict[str, Any]) -> None:
    """Restores what `global_rng_state()` returned."""
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np.random.set_state(state["numpy"])
    torch.set_rng_state(torch.as_tensor(np.asarray(state["torch"], dtype=np.uint8)))
