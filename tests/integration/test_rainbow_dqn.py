"""Rainbow DQN inside RLlib: the six extensions switch independently, one train()
each on CartPole; checkpoints keep the replay buffer."""

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_ners import (
    NERSDQNConfig,
    NoisyLinear,
    RainbowDQN,
    RainbowDQNConfig,
    RainbowTorchRLModule,
)
from rllib_ners.algorithms.common.training.weight_sharing import local_learner

pytestmark = pytest.mark.usefixtures("ray_session")

MID = "default_policy"
PER = {
    "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
    "capacity": 5000,
    "alpha": 0.5,
    "beta": 0.4,
}
UNIFORM = {"type": "EpisodeReplayBuffer", "capacity": 5000}
ALL_OFF = {
    "n_step": 1,
    "double_q": False,
    "dueling": False,
    "noisy": False,
    "num_atoms": 1,
    "replay_buffer_config": UNIFORM,
}
# Every config here: a small network and Rainbow's Adam epsilon (small_dqn's
# n-step 3 default is overridden wherever a test sets `n_step`).
SMALL_RAINBOW = {
    "adam_epsilon": 1.5e-4,
    "model_config": {"fcnet_hiddens": [32], "head_fcnet_hiddens": [32]},
}


COMBINATIONS = {
    "nature_dqn_all_off": {},
    "n_step": {"n_step": 3},
    "double_q": {"double_q": True},
    "dueling": {"dueling": True},
    "noisy": {"noisy": True},
    "per": {"replay_buffer_config": PER},
    "c51": {"num_atoms": 21, "v_min": 0.0, "v_max": 50.0},
    "c51_dueling_noisy_double": {
        "num_atoms": 21,
        "v_min": 0.0,
        "v_max": 50.0,
        "dueling": True,
        "noisy": True,
        "double_q": True,
    },
    "full_rainbow": {
        "n_step": 3,
        "double_q": True,
        "dueling": True,
        "noisy": True,
        "num_atoms": 21,
        "v_min": 0.0,
        "v_max": 50.0,
        "replay_buffer_config": PER,
    },
}


def _record_sampled_n_steps(buffer):
    """Records the n of every transition `buffer` hands out from now on: our
    buffers' columnar `sample_batch`, or the episodes of RLlib's `sample`."""
    recorded = []
    if hasattr(buffer, "sample_batch"):
        sample_batch = buffer.sample_batch

        def recording_sample_batch(*args, **kwargs):
            batch = sample_batch(*args, **kwargs)
            recorded.append(np.asarray(batch["n_step"]))
            return batch

        buffer.sample_batch = recording_sample_batch
    else:
        sample = buffer.sample

        def recording_sample(*args, **kwargs):
            episodes = sample(*args, **kwargs)
            recorded.extend(
                np.asarray(e.get_extra_model_outputs("n_step")) for e in episodes
            )
            return episodes

        buffer.sample = recording_sample
    return recorded


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_each_extension_switches_on_alone(name, small_dqn):
    settings = {**ALL_OFF, **COMBINATIONS[name]}
    algo = small_dqn(RainbowDQNConfig(), **SMALL_RAINBOW, **settings).build_algo()
    try:
        module = local_learner(algo).module[MID]
        assert isinstance(module, RainbowTorchRLModule)
        noisy_layers = [m for m in module.modules() if isinstance(m, NoisyLinear)]
        assert bool(noisy_layers) == settings["noisy"]
        assert hasattr(module, "vf") == settings["dueling"]
        assert module.num_atoms == settings["num_atoms"]
        assert module.uses_double_q == settings["double_q"]
        before = [p.detach().clone() for p in module.af.parameters()]
        buffer = algo.local_replay_buffer
        sampled_n_steps = _record_sampled_n_steps(buffer)
        result = algo.train()
        # n steps, fewer only where the episode ends sooner.
        n_steps = np.concatenate(sampled_n_steps)
        assert n_steps.max() == settings["n_step"] and n_steps.min() >= 1
        assert np.mean(n_steps == settings["n_step"]) > 0.8
        learner = result["learners"][MID]
        assert np.isfinite(learner["qf_loss"]) and np.isfinite(learner["td_error_mean"])
        assert any(
            not torch.equal(a, b)
            for a, b in zip(before, module.af.parameters(), strict=True)
        )
        assert (
            type(buffer).__name__
            == settings["replay_buffer_config"]["type"].split(".")[-1]
        )
        if "FastPrioritized" in type(buffer).__name__:
            # TD errors came back as priorities: not all equal to the initial 1.0.
            stored = np.flatnonzero(buffer.storage.is_transition)
            priorities = buffer.get_priorities(stored)
            assert np.any(priorities != 1.0)
    finally:
        algo.stop()


def test_ners_with_noisy_c51_trains(small_dqn):
    config = small_dqn(
        NERSDQNConfig(),
        **SMALL_RAINBOW,
        n_step=3,
        noisy=True,
        num_atoms=21,
        v_min=0.0,
        v_max=50.0,
        replay_buffer_config={"capacity": 5000},
    )
    algo = config.build_algo()
    try:
        for _ in range(2):
            result = algo.train()
        assert np.isfinite(result["learners"][MID]["qf_loss"])
        module = local_learner(algo).module[MID]
        assert any(isinstance(m, NoisyLinear) for m in module.modules())
    finally:
        algo.stop()


def test_checkpoint_restores_weights_and_replay_buffer(tmp_path, small_dqn):
    config = small_dqn(
        RainbowDQNConfig(),
        **SMALL_RAINBOW,
        n_step=3,
        noisy=True,
        num_atoms=11,
        replay_buffer_config=PER,
        # A sync every 150 env steps: one falls inside the 200 trained ones.
        target_network_update_freq=150,
    )
    assert config.store_buffer_in_checkpoints  # the default
    algo = config.build_algo()
    try:
        algo.train()
        algo.save_to_path(str(tmp_path))
        buffer_len = len(algo.local_replay_buffer)
        weights = local_learner(algo).module[MID].state_dict()
        # When the target network was last synced (RLlib 2.60's DQN Learner
        # forgets it, and a restored one would sync at its first update).
        last_target_update = dict(local_learner(algo).last_update_ts_by_mid)
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path))
    try:
        assert isinstance(restored, RainbowDQN)
        assert len(restored.local_replay_buffer) == buffer_len > 0
        new_weights = local_learner(restored).module[MID].state_dict()
        assert weights.keys() == new_weights.keys()
        for key in weights:
            assert torch.equal(weights[key], new_weights[key]), key
        assert last_target_update[MID] > 0
        assert dict(local_learner(restored).last_update_ts_by_mid) == last_target_update
        restored.train()
    finally:
        restored.stop()


@pytest.mark.parametrize("config_class", [NERSDQNConfig, RainbowDQNConfig])
def test_columnar_replay_feeds_the_learner_what_rllibs_connectors_would(
    config_class, small_dqn
):
    """Our training step hands the Learner numpy columns straight from the buffer;
    RLlib's learner connector, given the same transitions as episodes, builds
    the very same batch (names, dtypes, values; the n-step values are the
    buffer's on both sides, checked in test_fast_prioritized_buffer)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch

    buffer_config = {**PER, "type": "rllib_ners.NERSEpisodeReplayBuffer"}
    if config_class is RainbowDQNConfig:
        buffer_config = PER
    algo = small_dqn(
        config_class(), **SMALL_RAINBOW, n_step=3, replay_buffer_config=buffer_config
    ).build_algo()
    try:
        algo.train()
        assert algo.uses_replay_loop
        buffer, config = algo.local_replay_buffer, algo.config
        kwargs = {"n_step": config.n_step, "gamma": config.gamma, "beta": 0.4}
        rng_state = buffer.rng.bit_generator.state
        episodes = buffer.sample(num_items=16, sample_episodes=True, **kwargs)
        buffer.rng.bit_generator.state = rng_state  # draw the same items again
        columns = buffer.sample_batch(16, **kwargs)
        learner = local_learner(algo)
        expected = learner._learner_connector(
            rl_module=learner.module,
            batch={},
            episodes=episodes,
            shared_data={},
            metrics=learner.metrics,
        )[DEFAULT_MODULE_ID]
        ours = replay_train_batch(buffer, columns).policy_batches[DEFAULT_MODULE_ID]
        assert set(ours) == set(expected)
        for key in expected:
            want = np.asarray(expected[key])
            np.testing.assert_array_equal(ours[key], want, err_msg=key)
            assert np.asarray(ours[key]).dtype == want.dtype, key
    finally:
        algo.stop()


def test_custom_learner_connector_keeps_rllibs_episode_path(small_dqn):
    from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate

    algo = small_dqn(
        RainbowDQNConfig(),
        **SMALL_RAINBOW,
        n_step=1,  # RainbowDQNConfig's default
        replay_buffer_config=PER,
        learner_connector=lambda obs_space, act_space: AddOneTsToEpisodesAndTruncate(),
    ).build_algo()
    try:
        assert not algo.uses_replay_loop
    finally:
        algo.stop()
