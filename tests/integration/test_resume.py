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

Algorithms are listed as `ResumeCase`s: NERS-DQN, NERS-DQN on bool images (its
sampler's image encoder and encoding cache, replaying through the columnar
path), ACER (with NERS replay;
ACER also brings back its average policy network and replay-ratio generator) and
NERS-SAC (also its temperature log(alpha), which RLlib 2.60's SAC never saves).
"""

import pickle
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from helpers import TinyBoolImageEnv
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    TD_ERROR_KEY,
)
from ray.rllib.utils.numpy import convert_to_numpy

from rllib_ners.algorithms.common.columnar_replay import replay_train_batch
from rllib_ners.algorithms.common.replay_checkpoint import pop_priority_rows
from rllib_ners.algorithms.common.weight_sharing import local_learner
from rllib_ners.utils.rng import global_rng_state, set_global_rng_state

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("ray_session", "one_torch_thread"),
]


def assert_same_state(a, b, where="state"):
    """Recursive exact equality of two state dicts (arrays, tensors, scalars)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
        assert a.dtype == b.dtype, where
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), where
    else:
        assert a == b, where


# ------------------------------------------------------------------ NERS-DQN
def ners_dqn_config(small_dqn, store_buffer=True):
    return small_dqn(
        rollout_fragment_length=8,
        learning_starts=100,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=store_buffer,
    )


def ners_dqn_replay_update(algo, env_steps):
    """DQN's sample -> Learner update -> update_priorities, without the EnvRunner.

    Returns the sampled buffer slots.
    """
    config, buffer = algo.config, algo.local_replay_buffer
    episodes = buffer.sample(
        num_items=config.total_train_batch_size,
        n_step=config.n_step,
        gamma=config.gamma,
        beta=config.replay_buffer_config.get("beta"),
        sample_episodes=True,
    )
    slots = buffer.last_sampled_slots.copy()
    results = algo.learner_group.update(
        episodes=episodes, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps}
    )
    # As DQN's training step does: each Learner's item series, Learner by Learner.
    rows = np.concatenate(
        [
            item
            for result in results
            for item in convert_to_numpy(result[DEFAULT_MODULE_ID][TD_ERROR_KEY].peek())
        ]
    )
    buffer.update_priorities(rows)
    return slots


def ners_sampler_step(algo):
    """One REINFORCE step on I_train drawn from the buffer; returns its slots."""
    batch = algo._ners_update.sampler_training_batch(algo.local_replay_buffer)
    learner = local_learner(algo)
    learner.ners_reinforce(batch, replay_reward=1.0)
    return batch["indices"]


def learner_state(algo, components):
    state = local_learner(algo).get_state(components=components)
    # The process RNG snapshot is checked on its own (both algorithms share it).
    state["ners_sampler"].pop("global_rng")
    return state


def ners_dqn_learner_state(algo):
    return learner_state(
        algo, ["rl_module", "optimizer", "ners_sampler", "last_target_update_ts"]
    )


def ners_dqn_extra_checks(algo, restored):
    # When the target network was last synced (RLlib 2.60 forgets it).
    state = ners_dqn_learner_state(algo)
    assert state["last_target_update_ts"][DEFAULT_MODULE_ID] > 0


# ------------------------------------------------- NERS-DQN on bool images
def ners_dqn_images_config(small_dqn, store_buffer=True):
    """NERS-DQN on 10x10 bool images: the sampler's image encoder and its
    encoding cache (used on the columnar replay path) are part of the state."""
    return small_dqn(
        env=TinyBoolImageEnv,
        rollout_fragment_length=8,
        learning_starts=100,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=store_buffer,
    )


def columnar_replay_update(algo, env_steps):
    """The columnar training step's sample -> Learner update ->
    update_priorities (NERS-DQN's and NERS-SAC's own step; the batch carries the
    encoding-cache keys); returns the sampled slots."""
    config, buffer = algo.config, algo.local_replay_buffer
    columns = buffer.sample_batch(
        config.total_train_batch_size,
        n_step=config.n_step,
        gamma=config.gamma,
        beta=config.replay_buffer_config.get("beta"),
    )
    results = algo.learner_group.update(
        batch=replay_train_batch(buffer, columns),
        timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps},
    )
    buffer.update_priorities(pop_priority_rows(results))
    return columns["indices"]


def ners_dqn_images_extra_checks(algo, restored):
    ners_dqn_extra_checks(algo, restored)
    cache = ners_dqn_learner_state(restored)["ners_sampler"]["encoding_cache"]
    assert cache["rows"].size > 0 and cache["num_hits"] > 0


# ---------------------------------------------------------------------- ACER
def acer_config(small_acer, store_buffer=True):
    return small_acer(
        "ners",
        capacity=5000,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=store_buffer,
    )


def acer_replay_update(algo, env_steps):
    """ACER's off-policy update on replayed sequences (NERS rows -> priorities);
    returns the sampled sequence starts."""
    config = algo.config
    batch = algo.local_replay_buffer.sample_sequences(
        config.replay_sequences_per_learner, config.sequence_length
    )
    algo._update(batch, replayed=True)
    return batch["indices"]


def acer_learner_state(algo):
    # The RLModule state includes the average policy network.
    return learner_state(algo, ["rl_module", "optimizer", "ners_sampler"])


def acer_extra_checks(algo, restored):
    # The Poisson generator of the replay ratio and the update counters.
    assert_same_state(
        algo._extra_checkpoint_state(), restored._extra_checkpoint_state(), "acer"
    )
    assert algo._num_off_policy_updates > 0
    module = local_learner(restored).module[DEFAULT_MODULE_ID].unwrapped()
    assert any(k.startswith("_average_pi.") for k in module.state_dict())


# ------------------------------------------------------------------ NERS-SAC
def ners_sac_config(small_sac, store_buffer=True):
    return small_sac(
        learning_starts=100,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=store_buffer,
    )


def ners_sac_learner_state(algo):
    return learner_state(
        algo, ["rl_module", "optimizer", "ners_sampler", "sac_log_alpha"]
    )


def ners_sac_extra_checks(algo, restored):
    # The temperature trained away from its initial log(alpha) = 0 and came back.
    log_alpha = ners_sac_learner_state(restored)["sac_log_alpha"][DEFAULT_MODULE_ID]
    assert float(log_alpha) != 0.0


# ------------------------------------------------------------------ NERS-TD3
def ners_td3_config(small_td3, store_buffer=True):
    return small_td3(
        "ners",
        learning_starts=100,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=store_buffer,
    )


def ners_td3_learner_state(algo):
    return learner_state(
        algo, ["rl_module", "optimizer", "ners_sampler", "td3_update_counts"]
    )


def ners_td3_extra_checks(algo, restored):
    # The policy delay's phase: the restored Learner updates its actor when
    # the original does.
    counts = ners_td3_learner_state(restored)["td3_update_counts"]
    assert counts[DEFAULT_MODULE_ID] > 0


@dataclass
class ResumeCase:
    name: str
    builder: str  # the conftest fixture that builds its config
    config: Callable  # (builder, store_buffer: bool) -> AlgorithmConfig
    replay_update: Callable  # (algo, env_steps) -> sampled slots
    sampler_step: Callable  # (algo) -> slots the sampler trained on
    learner_state: Callable  # (algo) -> comparable Learner state
    extra_checks: Callable  # (algo, restored) -> None


CASES = [
    ResumeCase(
        "ners_dqn",
        "small_dqn",
        ners_dqn_config,
        ners_dqn_replay_update,
        ners_sampler_step,
        ners_dqn_learner_state,
        ners_dqn_extra_checks,
    ),
    ResumeCase(
        "ners_dqn_images",
        "small_dqn",
        ners_dqn_images_config,
        columnar_replay_update,
        ners_sampler_step,
        ners_dqn_learner_state,
        ners_dqn_images_extra_checks,
    ),
    ResumeCase(
        "acer",
        "small_acer",
        acer_config,
        acer_replay_update,
        ners_sampler_step,  # the same NERS sampler update
        acer_learner_state,
        acer_extra_checks,
    ),
    ResumeCase(
        "ners_sac",
        "small_sac",
        ners_sac_config,
        columnar_replay_update,
        ners_sampler_step,
        ners_sac_learner_state,
        ners_sac_extra_checks,
    ),
    ResumeCase(
        "ners_td3",
        "small_td3",
        ners_td3_config,
        columnar_replay_update,
        ners_sampler_step,
        ners_td3_learner_state,
        ners_td3_extra_checks,
    ),
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
        algo._ners_update.get_state(), restored._ners_update.get_state(), "baseline"
    )
    assert algo._ners_update.baseline.value is not None
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
