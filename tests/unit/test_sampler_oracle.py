"""Does the learned sampler learn? The replay-reward oracle of
`benchmarks/sampler_oracle.py`: 10% of 2000 stored transitions are marked (their
reward feature is 1), each step replays 320 transitions by priority and the
replay reward is the share of marked ones among them. A sampler that learns puts
more sampling mass on the marked transitions.

Measured, not wished for (`python benchmarks/sampler_oracle.py --seeds 0 1 2
--lr 1e-3 --train-size 256 --normalizer-size 1024`, README): the paper's
objective leaves the mass at its start; the log-probability objective with the
PER-residual parameterisation raises it on average, but not reliably to 0.3
within 300 steps (one seed of three gets there). These tests pin both facts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "sampler_oracle.py"
_spec = importlib.util.spec_from_file_location("sampler_oracle", _PATH)
sampler_oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sampler_oracle)

FAST = {"lr": 1e-3, "train_size": 256, "normalizer_size": 1024}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_papers_objective_leaves_the_marked_mass_where_it_started():
    history = sampler_oracle.run_oracle(
        steps=150,
        seed=0,
        **sampler_oracle.VARIANTS["reference (log_score, sigmoid, first)"],
        **FAST,
    )
    assert max(abs(mass - history[0]) for mass in history) < 0.01


@pytest.mark.slow
def test_log_prob_with_per_residual_moves_mass_to_the_marked_transitions():
    finals = [
        sampler_oracle.run_oracle(steps=300, seed=seed, **FAST)[-1]
        for seed in (0, 1, 2)
    ]
    starts = 0.10
    assert np.mean(finals) > starts + 0.04, finals
