"""Overlapped sampling learns: the CartPole NERS-DQN tuned example with 2
EnvRunners sampling while the Learner updates reaches the example's return
(450) within its budget (60k env steps), at the example's replay ratio.

Marked `learning` (deselected by default; `python -m pytest -m learning`).
"""

import pytest

pytestmark = pytest.mark.learning


def test_ners_dqn_cartpole_with_overlapped_sampling_reaches_450(run_example):
    run_example(
        "tuned_examples/ners_dqn/cartpole_ners_dqn.py",
        "--num-env-runners=2",
        "--overlap-sampling",
        "--stop-reward=450",
        "--stop-timesteps=60000",
        "--num-cpus=3",
        "--seed=0",
    )
