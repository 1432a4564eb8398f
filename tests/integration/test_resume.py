"""Exact resume: `algo.save_to_path()` + `Algorithm.from_checkpoint()`.

What a checkpoint brings back, compared value by value with the saved algorithm:
every stored transition, the priorities (both trees), the NERS feature cache and
I_all, the finished-episode returns, the buffer's RNG, the sampler networks and
their Adam state, the replay-reward baseline, and this process's global RNGs.

From there on the restored algorithm draws the same replay samples, and one
Learner update plus one REINFORCE step on them give bit-identical weights and
priorities. A whole `train()` cannot repeat the uninterrupted run: RLlib 2.60's
EnvRunner state holds neither the environment nor its episode in progress, so the
restored EnvRunner starts a fresh episode (with a re-seeded env) and collects
different transitions. The tests check the strongest property that holds.

Algorithms are listed as `ResumeCase`s (`tests/resume_cases.py`): NERS-DQN,
NERS-DQN on bool images (its sampler's image encoder and encoding cache,
replaying through the columnar path), ACER with NERS replay (also its average
policy network and replay-ratio generator), NERS-SAC (also its temperature
log(alpha), which RLlib 2.60's SAC never saves) and NERS-TD3 (also the policy
delay's phase).
"""

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME
from resume_cases import CASES, assert_same_state

from rllib_ners import (
    ACERConfig,
    DDPGConfig,
    NERSDQNConfig,
    NERSSACConfig,
    RainbowDQNConfig,
    TD3Config,
)
from rllib_ners.utils.rng import global_rng_state, set_global_rng_state

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("ray_session", "one_torch_thread"),
]


@pytest.fixture(params=CASES, ids=lambda case: case.name)
def case(request):
    return request.param


@pytest.fixture
def case_config(case, request):
    """(store_buffer: bool) -> the case's config, from the conftest builder."""
    builder = request.getfixturevalue(case.builder)
    return lambda store_buffer: case.config(builder, store_buffer)


@pytest.fixture
def trained_and_restored(case, case_config, tmp_path):
    """(case, original, restored, global RNG state right after saving)."""
    algo = case_config(True).build_algo()
    restored = None
    try:
        for _ in range(2):
            algo.train()
        # One more replay update, so that the save falls between two sampler
        # updates: I_all is not empty.
        case.replay_update(
            algo,
            algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)),
        )
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        rng_at_save = global_rng_state()
        # Move every global generator on, as the rest of a process would.
        random.random(), np.random.random(), torch.rand(1)
        restored = Algorithm.from_checkpoint(path)
        yield case, algo, restored, rng_at_save
    finally:
        if restored is not None:
            restored.stop()
        algo.stop()


def test_restore_brings_back_buffer_sampler_baseline_and_rngs(trained_and_restored):
    case, algo, restored, rng_at_save = trained_and_restored
    # The process generators continue exactly where the saved run left them.
    assert_same_state(global_rng_state(), rng_at_save, "global rng")

    old, new = algo.local_replay_buffer, restored.local_replay_buffer
    assert len(old) == len(new) > 0
    assert old.sampler.num_nonfinite_priorities == new.sampler.num_nonfinite_priorities
    assert old.sampled_set_size == new.sampled_set_size > 0  # I_all
    # Every transition, both trees, feature cache, I_all, returns and buffer RNG.
    assert_same_state(old.get_state(), new.get_state(), "buffer")
    old_tree, new_tree = old.sampler.sum_tree, new.sampler.sum_tree
    np.testing.assert_array_equal(old_tree.leaves, new_tree.leaves)
    assert old.sampler.sum_tree.total() == new.sampler.sum_tree.total()
    assert_same_state(
        algo.ners_sampler_update.get_state(),
        restored.ners_sampler_update.get_state(),
        "baseline",
    )
    assert algo.ners_sampler_update.baseline.value is not None
    # Sampler networks, their Adam moments, the RLModule and its optimizer, and
    # when the target network was last synced.
    assert_same_state(case.learner_state(algo), case.learner_state(restored))
    case.extra_checks(algo, restored)
    new.check_invariants()


def test_restored_algorithm_continues_bit_identically(trained_and_restored):
    """Both algorithms share this process's generators: each step starts both
    from the same generator state, as two separate processes would be."""
    case, algo, restored, rng_at_save = trained_and_restored
    env_steps = algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))
    assert env_steps == restored.metrics.peek(
        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
    )

    def both(step):
        start = global_rng_state()
        out_a = step(algo)
        after_a = global_rng_state()
        set_global_rng_state(start)
        out_b = step(restored)
        assert_same_state(global_rng_state(), after_a, "global rng after the step")
        return out_a, out_b

    set_global_rng_state(rng_at_save)
    for _ in range(3):
        slots_a, slots_b = both(lambda a: case.replay_update(a, env_steps))
        np.testing.assert_array_equal(slots_a, slots_b)
        np.testing.assert_array_equal(
            algo.local_replay_buffer.sampler.sum_tree.leaves,
            restored.local_replay_buffer.sampler.sum_tree.leaves,
        )
        assert_same_state(case.learner_state(algo), case.learner_state(restored))
    slots_a, slots_b = both(case.sampler_step)
    np.testing.assert_array_equal(slots_a, slots_b)
    assert_same_state(case.learner_state(algo), case.learner_state(restored))
    assert_same_state(
        algo.local_replay_buffer.get_state(), restored.local_replay_buffer.get_state()
    )
    # A real train() goes on from the restored state (fresh env episode).
    added = restored.local_replay_buffer.get_added_timesteps()
    result = restored.train()
    assert restored.local_replay_buffer.get_added_timesteps() >= added + 300
    assert result["ners"]["num_sampler_updates_lifetime"] >= 1
    restored.local_replay_buffer.check_invariants()


@pytest.mark.parametrize(
    "config_class",
    [RainbowDQNConfig, NERSDQNConfig, NERSSACConfig, TD3Config, DDPGConfig, ACERConfig],
)
def test_our_algorithms_keep_the_buffer_in_checkpoints_by_default(config_class):
    # RLlib's configs default to False and RLlib 2.60 never saves a buffer.
    assert config_class().store_buffer_in_checkpoints is True


@pytest.mark.parametrize("store_buffer", [True, False])
def test_store_buffer_in_checkpoints_is_honoured(
    case, case_config, tmp_path, store_buffer
):
    config = case_config(store_buffer)
    assert case_config(True).store_buffer_in_checkpoints  # our default
    algo = config.build_algo()
    try:
        algo.train()
        stored = len(algo.local_replay_buffer)
        assert stored > 0
        buffer_get_state = algo.local_replay_buffer.get_state
        copies = []

        def spy(*, copy=True):
            copies.append(copy)
            return buffer_get_state(copy=copy)

        algo.local_replay_buffer.get_state = spy
        path = Path(algo.save_to_path(str(tmp_path / "ckpt")))
        algo.get_state()
        # Saving writes the live arrays out (no second copy of the storage in
        # memory); a state handed to the caller is a copy.
        assert copies == ([False, True] if store_buffer else [])
        with open(path / f"{Algorithm.STATE_FILE_NAME}.pkl", "rb") as f:
            saved = pickle.load(f)
        assert ("replay_buffer" in saved) is store_buffer
        # The sampler's baseline is saved either way.
        assert "ners_sampler_update" in saved
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(path))
    try:
        buffer = restored.local_replay_buffer
        assert len(buffer) == (stored if store_buffer else 0)
        assert buffer.get_added_timesteps() == (
            algo.local_replay_buffer.get_added_timesteps() if store_buffer else 0
        )
        restored.train()
        assert len(buffer) > (stored if store_buffer else 0)
        buffer.check_invariants()
    finally:
        restored.stop()
