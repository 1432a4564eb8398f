"""Atari smoke test: a few thousand MsPacman steps of NERS-Rainbow (data-efficient
settings, smaller buffer and fewer updates), checking that

* every loss is finite and the NERS sampler gets updated from game returns;
* the replay buffer's rebuilt 4-frame stacks are exactly the stacks RLlib's
  `FrameStackingEnvToModule` fed the RLModule when acting (recorded by an extra
  env-to-module connector piece), for `obs` and the n-step `new_obs`, across
  rollout-fragment boundaries and life-loss episode starts;
* the buffer's arrays stay near the raw uint8 frame size.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.core.columns import Columns

from rllib_ners.algorithms.acer.presets import atari_acer
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.ners.ners_learner import NERS_RESULTS
from rllib_ners.algorithms.rainbow.presets import (
    atari_data_efficient_rainbow,
    atari_rainbow,
)
from rllib_ners.env.atari_rllib import GAME_RETURN_MEAN, NUM_GAMES_LIFETIME

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("ale_py") is None, reason="ale-py not installed"),
]

# (timestep, newest frame) -> hashes of the stacks the module got at that point.
ACTING_STACKS = defaultdict(set)


def _digest(array: np.ndarray) -> bytes:
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).digest()


class RecordStacks(ConnectorV2):
    """Records the stacked observation each episode hands the module."""

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        for episode in self.single_agent_episode_iterator(episodes):
            stack = batch[Columns.OBS][(episode.id_,)][-1]
            t = episode.t_started + len(episode)
            ACTING_STACKS[(t, _digest(stack[..., -1]))].add(_digest(stack))
        return batch


def _stack_and_record(env=None, spaces=None, device=None):
    return [FrameStackingEnvToModule(num_frames=4), RecordStacks()]


def test_ms_pacman_ners_rainbow_smoke(ray_session):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ACTING_STACKS.clear()
    capacity = 6000
    config = (
        atari_data_efficient_rainbow(
            "MsPacman",
            replay="ners",
            capacity=capacity,
            learning_starts=400,
            total_timesteps=3000,
        )
        # About one update per 8 env steps (instead of 1) keeps the test short.
        .training(training_intensity=4)
        .env_runners(num_env_runners=0, env_to_module_connector=_stack_and_record)
        .reporting(min_sample_timesteps_per_iteration=500)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        losses, game_returns, steps = [], [], 0
        while steps < 3000:
            result = algo.train()
            steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
            learner = result.get("learners", {}).get("default_policy", {})
            if "qf_loss" in learner:
                losses.append(float(learner["qf_loss"]))
            # NaN in an iteration in which no game ended (RLlib's windowed means
            # cover the iteration's own values).
            game_returns.append(result["env_runners"].get(GAME_RETURN_MEAN, np.nan))
        assert len(losses) >= 4 and np.all(np.isfinite(losses)), losses

        env_results = result["env_runners"]
        assert env_results[NUM_GAMES_LIFETIME] >= 2
        finished = np.array(game_returns)[np.isfinite(game_returns)]
        assert len(finished) >= 1 and np.all(finished > 0), game_returns
        assert result[NERS_RESULTS]["num_sampler_updates_lifetime"] >= 1

        buffer = algo.local_replay_buffer
        module = local_learner(algo).module["default_policy"]
        assert module.observation_space.shape == (84, 84, 4)
        batch = buffer.sample_batch(512, n_step=20, gamma=0.99)
        assert batch["obs"].shape == (512, 84, 84, 4)
        assert batch["obs"].dtype == np.uint8
        checked = 0
        for i in range(512):
            key = (int(batch["ts"][i]), _digest(batch["obs"][i][..., -1]))
            assert _digest(batch["obs"][i]) in ACTING_STACKS[key], i
            if not (batch["terminateds"][i] or batch["truncateds"][i]):
                t_next = int(batch["ts"][i] + batch["n_step"][i])
                key = (t_next, _digest(batch["new_obs"][i][..., -1]))
                assert _digest(batch["new_obs"][i]) in ACTING_STACKS[key], i
                checked += 1
        assert checked > 256
        # Stacks of an episode's first 3 steps begin with blank frames.
        early = np.flatnonzero(batch["ts"] < 3)
        assert early.size > 0
        for i in early:
            blank = 3 - int(batch["ts"][i])
            assert not batch["obs"][i][..., :blank].any()
            assert batch["obs"][i][..., blank:].reshape(-1, 4 - blank).any(axis=0).all()

        frames = buffer.storage.obs.nbytes
        assert frames == capacity * 84 * 84
        # Everything besides the frames (pointers, trees, caches, extras) is small:
        # scaled to 100k transitions this stays far below 1 GB.
        assert buffer.storage_nbytes() < 1.1 * frames
        assert buffer.storage_nbytes() * 100_000 / capacity < 1.0e9
    finally:
        algo.stop()
        torch.set_num_threads(threads)


def test_pong_ners_acer_smoke(ray_session):
    """ACER's Atari config (`pong_acer.py`) with NERS replay, scaled down: the
    sequences replayed from the frame-once buffer carry the same 4-frame stacks
    the module acted on, every loss is finite and the sampler is updated."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ACTING_STACKS.clear()
    config = (
        atari_acer("Pong", replay="ners", num_envs_per_env_runner=2, capacity=4000)
        .training(
            train_batch_size_per_learner=80,
            replay_ratio=1.0,
            num_steps_sampled_before_learning_starts=200,
        )
        .env_runners(num_env_runners=0, env_to_module_connector=_stack_and_record)
        .reporting(min_sample_timesteps_per_iteration=400)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        losses = []
        for _ in range(3):
            result = algo.train()
            learner = result.get("learners", {}).get("default_policy", {})
            if "q_loss" in learner:
                losses.append((learner["q_loss"], learner["policy_loss"]))
        assert len(losses) >= 2 and np.all(np.isfinite(losses)), losses
        module = local_learner(algo).module["default_policy"]
        assert module.observation_space.shape == (84, 84, 4)
        buffer = algo.local_replay_buffer
        batch = buffer.sample_sequences(8, 20)
        assert batch["obs"].shape == (8, 21, 84, 84, 4)
        assert batch["obs"].dtype == np.uint8
        for b in range(8):
            for k in range(int(batch["lengths"][b])):
                stack = batch["obs"][b, k]
                key = (int(batch["ts"][b, k]), _digest(stack[..., -1]))
                assert _digest(stack) in ACTING_STACKS[key], (b, k)
        assert buffer.storage.obs.nbytes == 4000 * 84 * 84
        assert buffer.storage_nbytes() < 1.1 * buffer.storage.obs.nbytes
    finally:
        algo.stop()
        torch.set_num_threads(threads)


def test_rainbow_papers_preset_trains_with_overlapped_sampling(ray_session):
    """`atari_rainbow` (the Rainbow paper's settings, the Nature CNN, one update
    of 32 per 4 env steps) with 2 EnvRunners sampling while the Learner
    updates: finite losses, and 8 trained env steps per sampled one."""
    config = (
        atari_rainbow("MsPacman", replay="per", capacity=5000, learning_starts=200)
        .env_runners(num_env_runners=2)
        .training(overlap_sampling=True)
        .reporting(min_sample_timesteps_per_iteration=200)
        .debugging(seed=0)
    )
    assert config.model_config["cnn_encoder"] == "nature"
    algo = config.build_algo()
    try:
        for _ in range(2):  # the second iteration updates (~50 batches)
            result = algo.train()
        losses = result["learners"]["default_policy"]
        assert np.isfinite(losses["total_loss"])
        sampled = result["env_runners"]["num_env_steps_sampled_lifetime"]
        trained = result["learners"]["__all_modules__"][
            "num_env_steps_trained_lifetime"
        ]
        # One batch of 32 per 4 env steps from the learning start on (the
        # round that passes it counts whole: up to a fragment of 4 steps from
        # each EnvRunner before it).
        assert 8 * (sampled - 200) - 32 <= trained <= 8 * (sampled - 200 + 2 * 4)
    finally:
        algo.stop()


def _small_der_on_cpu(*, steps_per_iteration):
    """Data-efficient Rainbow (PER) on MsPacman with a 2000-step buffer,
    learning from step 200, the local EnvRunner, seed 0."""
    return (
        atari_data_efficient_rainbow(
            "MsPacman", replay="per", capacity=2000, learning_starts=200
        )
        .env_runners(num_env_runners=0)
        .reporting(min_sample_timesteps_per_iteration=steps_per_iteration)
        .debugging(seed=0)
    )


def test_channels_first_frame_stacks_reach_the_module_alike(ray_session):
    """`frames_channels_first` (what the training loop sets for a local GPU
    Learner): the buffer samples the same stacks, laid out NCHW in memory, and
    the Learner's training pass on them (its own column-to-tensor conversion,
    then the RLModule's forward) gives the outputs the channels-last stacks
    give, within float tolerance (the CPU convolution runs another algorithm
    on the other layout)."""
    from rllib_ners.algorithms.common.learner.deferred_updates import columns_to_tensors
    from rllib_ners.seam.rl_module import training_pass

    config = _small_der_on_cpu(steps_per_iteration=250)
    algo = config.build_algo()
    try:
        algo.train()
        buffer, learner = algo.local_replay_buffer, local_learner(algo)
        assert not buffer.frames_channels_first  # a CPU Learner
        module = learner.module["default_policy"].unwrapped()
        rng_state = buffer.rng.bit_generator.state
        sampled, outputs = {}, {}
        for channels_first in (False, True):
            buffer.frames_channels_first = channels_first
            buffer.rng.bit_generator.state = rng_state
            columns = buffer.sample_batch(32, n_step=3, gamma=0.99)
            sampled[channels_first] = columns
            tensors = columns_to_tensors(
                {k: columns[k] for k in ("obs", "new_obs", "actions")}, learner.device
            )
            torch.manual_seed(0)  # the same noisy-net draws
            with torch.no_grad():
                outputs[channels_first] = training_pass(module, tensors)
    finally:
        algo.stop()
    for key in ("obs", "new_obs"):
        plain, planar = sampled[False][key], sampled[True][key]
        np.testing.assert_array_equal(planar, plain)
        assert plain.flags.c_contiguous
        assert torch.from_numpy(planar).permute(0, 3, 1, 2).is_contiguous()
    compared = 0
    for key, value in outputs[False].items():
        if torch.is_tensor(value):
            torch.testing.assert_close(outputs[True][key], value, rtol=1e-5, atol=1e-5)
            compared += 1
    assert compared >= 5


def test_frame_stacks_gathered_from_device_frames_train_alike(ray_session):
    """`device_frames` (what the training loop sets for a local GPU Learner;
    here mirroring on the CPU): data-efficient Rainbow trains to the same
    weights and priorities, bit for bit, as with the host's channels-first
    stacks, since the stacks are the same values in the same layout."""
    from rllib_ners.replay_buffers.device_frames import DeviceFrames

    config = _small_der_on_cpu(steps_per_iteration=125)
    runs = []
    for mirrored in (False, True):
        algo = config.build_algo()
        try:
            buffer = algo.local_replay_buffer
            buffer.frames_channels_first = True
            if mirrored:
                buffer.device_frames = DeviceFrames("cpu")
            # 250 env steps, learning from step 200: ~50 updates, each of
            # which would carry a difference in the stacks into the weights.
            for _ in range(2):
                algo.train()
            weights = local_learner(algo).module["default_policy"].state_dict()
            runs.append(
                (
                    {name: tensor.clone() for name, tensor in weights.items()},
                    buffer.get_state(),
                    buffer.device_frames,
                )
            )
        finally:
            algo.stop()
    (weights, state, _), (weights_mirrored, state_mirrored, frames) = runs
    assert frames.frames is not None and frames.disabled_because is None
    for name, tensor in weights.items():
        assert torch.equal(tensor, weights_mirrored[name]), name
    np.testing.assert_array_equal(
        state["sum_tree"]["leaves"], state_mirrored["sum_tree"]["leaves"]
    )
    assert state["_num_steps_sampled_lifetime"] > 0
