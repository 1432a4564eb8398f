"""LaBER's replay loop hands the Learner m * B rows per update and trains on B
of them: the Learner's trained-steps counts (all modules, per module) are
PER's on the same config, B per update. So is the loop's own count, which
ends one `training_step` under `min_train_timesteps_per_iteration`: counting
m * B per update would end LaBER's after a quarter of PER's updates. (Within
`train()`, RLlib calls `training_step` again until the Learner's count is
reached, so only a lone `training_step` shows the loop's count.)"""

from __future__ import annotations

import pytest
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
)

from rllib_ners import RainbowDQNConfig

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
RAY_NUM_CPUS = 1

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
BATCH = 16
# Each iteration ends on env steps trained alone: 8 updates' worth.
TRAINED_PER_ITERATION = 8 * BATCH
TRAINED = (LEARNER_RESULTS, ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME)
SAMPLED = (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
REPLAYS = {
    "per": {"type": FAST, "capacity": 5000, "alpha": 0.6, "beta": 0.4},
    "laber": {
        "type": FAST,
        "capacity": 5000,
        "sampler": "laber",
        "laber_m": 4,
        "alpha": 0.0,
        "beta": 0.0,
    },
}


def _trained_counts(small_dqn, replay):
    """The Learner's trained counts after two iterations, and what one more
    `training_step` trains and samples."""
    config = small_dqn(
        RainbowDQNConfig(),
        train_batch_size_per_learner=BATCH,
        replay_buffer_config=REPLAYS[replay],
        model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [16]},
        min_sample_timesteps_per_iteration=0,
    ).reporting(min_train_timesteps_per_iteration=TRAINED_PER_ITERATION)
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        before = [algo.metrics.peek(key) for key in (TRAINED, SAMPLED)]
        algo.training_step()
        step = [
            algo.metrics.peek(key) - n for key, n in zip((TRAINED, SAMPLED), before)
        ]
    finally:
        algo.stop()
    learner = result[LEARNER_RESULTS]
    return (
        learner[ALL_MODULES][NUM_ENV_STEPS_TRAINED_LIFETIME],
        learner[DEFAULT_MODULE_ID][NUM_MODULE_STEPS_TRAINED_LIFETIME],
        *step,
    )


def test_laber_counts_the_rows_trained_on_as_per_does(small_dqn, one_torch_thread):
    per, laber = (_trained_counts(small_dqn, replay) for replay in ("per", "laber"))
    env_steps, module_steps, step_trained, step_sampled = per
    assert env_steps == module_steps and env_steps % BATCH == 0
    # A training step of at least 8 updates (a round may take more), each
    # after sampling.
    assert step_trained >= TRAINED_PER_ITERATION and step_sampled > 0
    assert laber == per
