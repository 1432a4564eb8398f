"""With a LaBER buffer the Learner trains on B = rows // m rows per update, so
the replay loop and the Learner's bookkeeping count B trained env steps per
update, not the m * B rows of the large batch; every other buffer counts its
rows, as before. No Ray: a real buffer, the loop's batch and the Learner's
counting helpers."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners import FastPrioritizedEpisodeReplayBuffer, RainbowDQNConfig
from rllib_ners.algorithms.common.learner.fast_torch_learner import trained_rows
from rllib_ners.algorithms.common.learner.replay_methods import (
    large_batch_factor_of,
)
from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch

FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
LABER = {"type": FAST, "sampler": "laber", "alpha": 0.0, "beta": 0.0}


def _episode(length, seed):
    rng = np.random.default_rng(seed)
    return SingleAgentEpisode(
        observations=list(rng.normal(size=(length + 1, 3)).astype(np.float32)),
        actions=list(rng.integers(0, 2, length)),
        rewards=list(rng.normal(size=length)),
        terminated=True,
        len_lookback_buffer=0,
    )


def _buffer(**settings):
    buffer = FastPrioritizedEpisodeReplayBuffer(128, seed=0, **settings)
    buffer.add([_episode(40, 1), _episode(50, 2)])
    return buffer


@pytest.mark.parametrize(
    "buffer_config, factor",
    [
        ({**LABER, "laber_m": 3}, 3),
        (LABER, 4),  # the default m
        ({"type": FAST, "sampler": "relo", "alpha": 0.5, "beta": 0.4}, 1),
        ({"type": FAST, "alpha": 0.6, "beta": 0.4}, 1),
        ({"type": FAST, "alpha": 0.0}, 1),
    ],
    ids=["laber-m3", "laber-default", "relo", "per", "uniform"],
)  # fmt: skip
def test_the_loop_counts_the_rows_the_learner_trains_on(buffer_config, factor):
    """The factor both the loop and the Learners count by, from the config,
    is what the buffer built from that config returns per row trained."""
    config = RainbowDQNConfig().training(replay_buffer_config=buffer_config)
    assert large_batch_factor_of(config) == factor
    buffer = _buffer(
        **{key: value for key, value in buffer_config.items() if key != "type"}
    )
    batch_size = 8
    batch = replay_train_batch(buffer, buffer.sample_batch(batch_size))
    assert batch.env_steps() == factor * batch_size
    # That the loop and the Learners then count B per update is
    # tests/integration/test_laber_trained_counts.py.


def test_the_multi_agent_buffer_counts_its_rows():
    config = RainbowDQNConfig().training(
        replay_buffer_config={
            "type": "rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer"
        }
    )
    assert large_batch_factor_of(config) == 1


@pytest.mark.parametrize(
    "buffer_config, factor",
    [
        ({**LABER, "laber_m": 3}, 3),
        (LABER, 4),
        ({"type": FAST, "sampler": "relo", "alpha": 0.5}, 1),
        ({"type": FAST, "alpha": 0.6}, 1),
    ],
    ids=["laber-m3", "laber-default", "relo", "per"],
)  # fmt: skip
def test_the_learner_divides_its_counts_by_laber_m(buffer_config, factor):
    config = RainbowDQNConfig().training(replay_buffer_config=buffer_config)
    assert large_batch_factor_of(config) == factor
    buffer = _buffer(
        **{key: value for key, value in buffer_config.items() if key != "type"}
    )
    batch = replay_train_batch(buffer, buffer.sample_batch(8))
    counted = trained_rows(batch, factor)
    # The module and env steps `log_steps_trained` logs: B = 8 per update.
    assert counted.env_steps() == 8
    assert {mid: len(b) for mid, b in counted.policy_batches.items()} == {
        DEFAULT_MODULE_ID: 8
    }
    if factor == 1:
        assert counted is batch  # nothing changes for every other replay


def test_a_stock_config_without_a_sampler_counts_its_rows():
    assert large_batch_factor_of(DQNConfig()) == 1
