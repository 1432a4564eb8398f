"""LaBER's replay loop hands the Learner m * B rows per update and trains on B
of them: the Learner's trained-steps counts (all modules, per module) are
PER's on the same config, B per update. They also show the loop's own count:
the loop owes updates by the env steps it counts trained (the replay ratio),
so counting m * B per update would make a quarter of PER's updates."""

from __future__ import annotations

import pytest
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
)

from rllib_ners import RainbowDQNConfig

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
RAY_NUM_CPUS = 1

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
BATCH = 16
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
    config = small_dqn(
        RainbowDQNConfig(),
        train_batch_size_per_learner=BATCH,
        replay_buffer_config=REPLAYS[replay],
        model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [16]},
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
    finally:
        algo.stop()
    learner = result[LEARNER_RESULTS]
    return (
        learner[ALL_MODULES][NUM_ENV_STEPS_TRAINED_LIFETIME],
        learner[DEFAULT_MODULE_ID][NUM_MODULE_STEPS_TRAINED_LIFETIME],
    )


def test_laber_counts_the_rows_trained_on_as_per_does(small_dqn, one_torch_thread):
    per, laber = (_trained_counts(small_dqn, replay) for replay in ("per", "laber"))
    env_steps, module_steps = per
    assert env_steps == module_steps > 0 and env_steps % BATCH == 0
    assert laber == per
