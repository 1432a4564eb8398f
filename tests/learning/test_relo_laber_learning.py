"""ReLo and LaBER learn: the tuned examples with `--replay relo|laber` and
`--as-test` (each exits non-zero unless its stop reward is reached in time).

The settings are those of the other learning tests of the same examples
(`test_pendulum_learning.py`, `test_rainbow_learning.py`): random play scores
about -1200 per episode on Pendulum and 22 on CartPole. SAC with LaBER (about
25 s on a Xeon, 53 s on an EPYC) is in the default run: its update is the one
that differs most from PER's. SAC with ReLo (PER's update, other priorities,
whose values the integration tests check exactly), TD3's (25-30 s) and
Rainbow's (31 and 71 s) are marked `learning`, deselected by default (`python
-m pytest -m learning`), to keep the default run short.
"""

import pytest

PENDULUM_CI_SETTINGS = (
    "--num-env-runners=0",
    "--stop-reward=-400",
    "--hidden=64",
    "--lr=1e-3",
    "--learning-starts=1000",
    "--rollout-fragment-length=4",
    "--num-cpus=2",
    "--seed=0",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "replay", [pytest.param("relo", marks=pytest.mark.learning), "laber"]
)
def test_sac_pendulum_with_relo_and_laber_beats_random_by_far(run_example, replay):
    run_example(
        "tuned_examples/ners_sac/pendulum_ners_sac.py",
        f"--replay={replay}",
        "--stop-timesteps=10000",
        *PENDULUM_CI_SETTINGS,
    )


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.parametrize("replay", ["relo", "laber"])
def test_td3_pendulum_with_relo_and_laber_beats_random_by_far(run_example, replay):
    run_example(
        "tuned_examples/td3/pendulum_td3.py",
        f"--replay={replay}",
        "--stop-timesteps=12000",
        *PENDULUM_CI_SETTINGS,
    )


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.parametrize("replay", ["relo", "laber"])
def test_full_rainbow_cartpole_with_relo_and_laber_learns(run_example, replay):
    run_example(
        "tuned_examples/rainbow/cartpole_rainbow.py",
        f"--replay={replay}",
        "--num-env-runners=0",
        "--stop-reward=200",
        "--stop-timesteps=30000",
        "--num-cpus=2",
        "--seed=0",
        timeout=1500,
        env={"OMP_NUM_THREADS": "1"},
    )
