"""Overlapped sampling learns: the CartPole NERS-DQN tuned example with 2
EnvRunners sampling while the Learner updates reaches the example's return
(450) within its budget (60k env steps), at the example's replay ratio, with
the weights synced after every round with updates and at most every 8 updates.

Marked `learning` (deselected by default; `python -m pytest -m learning`).
"""

import pytest

pytestmark = pytest.mark.learning


@pytest.mark.parametrize("weights_sync_interval", [1, 8])
def test_ners_dqn_cartpole_with_overlapped_sampling_reaches_450(
    run_example, weights_sync_interval
):
    run_example(
        "tuned_examples/ners_dqn/cartpole_ners_dqn.py",
        "--num-env-runners=2",
        "--overlap-sampling",
        f"--weights-sync-interval={weights_sync_interval}",
        "--stop-reward=450",
        "--stop-timesteps=60000",
        "--num-cpus=3",
        "--seed=0",
    )
