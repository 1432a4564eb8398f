"""The algorithms whose checkpoints resume exactly, as `ResumeCase`s: how to
build each one's small config, replay one Learner update, take one NERS sampler
step and read its comparable Learner state (`tests/integration/test_resume.py`
restores on the same device, `tests/gpu/test_cuda.py` across devices).

A module of its own, like `helpers.py`: test modules import it by name.
"""

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
from helpers import TinyBoolImageEnv
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, TD_ERROR_KEY
from ray.rllib.utils.numpy import convert_to_numpy

from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch
from rllib_ners.algorithms.common.training.training_ops import pop_replay_feedback
from rllib_ners.algorithms.common.training.weight_sharing import local_learner


def assert_same_state(a, b, where="state", *, rtol=0.0, atol=0.0):
    """Recursive equality of two state dicts (arrays, tensors, scalars): exact,
    or with `rtol`/`atol` floats within that tolerance (integers stay exact;
    tensors are compared on the host, so the two may live on different
    devices)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}[{key!r}]", rtol=rtol, atol=atol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]", rtol=rtol, atol=atol)
    elif rtol or atol:
        _assert_close(a, b, where, rtol, atol)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
        assert a.dtype == b.dtype, where
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), where
    else:
        assert a == b, where


def _assert_close(a, b, where, rtol, atol):
    if isinstance(a, (np.ndarray, torch.Tensor)):
        a, b = (x.detach().cpu().numpy() if torch.is_tensor(x) else x for x in (a, b))
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=rtol, abs=atol, nan_ok=True), where
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
    batch = algo.ners_sampler_update.sampler_training_batch(algo.local_replay_buffer)
    learner = local_learner(algo)
    learner.ners.reinforce(batch, replay_reward=1.0)
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
    buffer.update_priorities(pop_replay_feedback(results))
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
