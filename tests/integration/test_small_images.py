"""Small and bool image observations (MinAtar-like: 10x10 channels of 0/1) through
NERS-DQN (Rainbow module) and ACER with NERS replay: the CNNs that fit are picked
by default, and a configured CNN that does not fit fails at `validate()`."""

import copy

import numpy as np
import pytest
import torch
from helpers import TinyBoolImageEnv

from rllib_ners import ACERConfig, NERSDQNConfig
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.ners.ners_learner import NERS_RESULTS
from rllib_ners.replay_buffers.ners_episode_buffer import ENCODING_KEYS

MID = "default_policy"


def _ners_dqn():
    return (
        NERSDQNConfig()
        .environment(TinyBoolImageEnv)
        .env_runners(num_env_runners=0, rollout_fragment_length=4)
        .training(
            n_step=3,
            train_batch_size_per_learner=16,
            num_steps_sampled_before_learning_starts=48,
            replay_buffer_config={"capacity": 2000},
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )


def _acer():
    return (
        ACERConfig()
        .environment(TinyBoolImageEnv)
        .env_runners(num_env_runners=0)
        .training(
            sequence_length=6,
            train_batch_size_per_learner=24,
            num_steps_sampled_before_learning_starts=48,
            replay_buffer_config={
                "type": "rllib_ners.NERSEpisodeReplayBuffer",
                "capacity": 2000,
                "alpha": 0.6,
                "beta": 0.4,
            },
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )


@pytest.mark.parametrize(
    "make_config, losses",
    [(_ners_dqn, ("qf_loss",)), (_acer, ("policy_loss", "q_loss"))],
    ids=["ners_dqn", "acer_ners"],
)
def test_bool_10x10_images_train(ray_session, make_config, losses):
    algo = make_config().build_algo()
    try:
        learner = local_learner(algo)
        assert learner.module[MID].unwrapped().encoder.kind == "small"
        assert learner.ners.scorer.encoder.convs.kind == "small"
        # Transition replay caches image encodings; ACER's sequences carry no keys.
        has_cache = learner.ners.encoding_cache is not None
        assert has_cache == (make_config is _ners_dqn)
        for _ in range(2):
            result = algo.train()
        for key in losses:
            assert np.isfinite(result["learners"][MID][key]), key
        assert result[NERS_RESULTS]["num_sampler_updates_lifetime"] >= 1
        algo.local_replay_buffer.check_invariants()
    finally:
        algo.stop()


@pytest.mark.parametrize("make_config", [_ners_dqn, _acer], ids=["ners_dqn", "acer"])
@pytest.mark.parametrize("kind", ["data_efficient", "nature"])
def test_a_configured_cnn_too_large_for_the_images_fails_at_validate(make_config, kind):
    config = make_config().rl_module(model_config={"cnn_encoder": kind})
    with pytest.raises(ValueError, match=f"too small for cnn_encoder='{kind}'"):
        config.validate()
    # The small CNN fits, and so does leaving cnn_encoder unset.
    make_config().rl_module(model_config={"cnn_encoder": "small"}).validate()
    make_config().validate()


def test_scoring_reuses_cached_image_encodings_with_the_same_scores(ray_session):
    """The separate image encoder's outputs are cached between sampler updates:
    scoring a replayed batch again runs no CNN and gives the scores encoding
    afresh gives; every sampler update (REINFORCE step) empties the cache."""
    from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch
    from rllib_ners.algorithms.ners.torch.torch_ners_sampler import (
        NERS_ENCODING_CACHE_HIT_RATE,
    )

    algo = _ners_dqn().build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        learner = local_learner(algo)
        cache = learner.ners.encoding_cache
        updates = result[NERS_RESULTS]["num_sampler_updates_lifetime"]
        assert updates >= 2 and cache.version == updates
        assert 0.0 < result["learners"][MID][NERS_ENCODING_CACHE_HIT_RATE] < 1.0

        buffer = algo.local_replay_buffer
        sampled = buffer.sample_batch(16, n_step=3, gamma=0.99)
        batch = replay_train_batch(buffer, sampled).policy_batches[MID]
        columns = {
            "obs": torch.as_tensor(batch["obs"]),
            "new_obs": torch.as_tensor(batch["new_obs"]),
            "actions": torch.as_tensor(batch["actions"]),
            "rewards": torch.as_tensor(batch["rewards"]),
            "ts": torch.as_tensor(batch["ts"]),
            "delta": torch.linspace(0.0, 2.0, 16),
            "q": torch.linspace(-1.0, 1.0, 16),
        }
        keys = torch.as_tensor(batch[ENCODING_KEYS])
        encoded = []
        hook = learner.ners.scorer.encoder.register_forward_hook(
            lambda module, args, out: encoded.append(args[0].shape[0])
        )
        state = copy.deepcopy(learner.ners.scorer.state_dict())
        try:
            learner.ners.score(columns, encoding_keys=keys)  # fills the cache
            learner.ners.scorer.load_state_dict(state)  # same running statistics
            encoded.clear()
            cached = learner.ners.score(columns, encoding_keys=keys)
            assert encoded == []  # every encoding came from the cache
            learner.ners.scorer.load_state_dict(state)
            fresh = learner.ners.score(columns)
            assert encoded == [32]  # obs and new_obs, encoded afresh
        finally:
            hook.remove()
        torch.testing.assert_close(cached, fresh)
    finally:
        algo.stop()
