"""Frame stacking in the replay buffers (`frame_stack=k`): frames stored once,
stacks rebuilt at sample time exactly as RLlib's `FrameStackingEnvToModule`
builds them when acting (oldest frame first along the last axis, zeros before
the episode's first frame), never with frames of another episode or stale slots.

Every frame encodes its episode and timestep: pixel (0, 0) is `ep + 1`, pixel
(0, 1) is `t + 1`, the rest is `ep + t + 1`; a blank frame is all zeros.
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rllib_ners.replay_buffers import (
    FastPrioritizedEpisodeReplayBuffer,
    NERSEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.device_frames import DeviceFrames

H, W = 3, 2
K = 4
FRAME_SPACE = gym.spaces.Box(0, 255, (H, W, 1), np.uint8)
ACT_SPACE = gym.spaces.Discrete(3)
GAMMA = 0.9


def frame(ep: int, t: int) -> np.ndarray:
    image = np.full((H, W, 1), ep + t + 1, dtype=np.uint8)
    image[0, 0, 0] = ep + 1
    image[0, 1, 0] = t + 1
    return image


def chunk(ep, t0, t1, *, terminated=False):
    """Chunk of episode `ep` with steps `t0 .. t1 - 1` (frames `t0 .. t1`)."""
    return SingleAgentEpisode(
        id_=f"ep{ep}",
        observations=[frame(ep, t) for t in range(t0, t1 + 1)],
        actions=[t % 3 for t in range(t0, t1)],
        rewards=[float(ep * 100 + t) for t in range(t0, t1)],
        terminated=terminated,
        t_started=t0,
        len_lookback_buffer=0,
        observation_space=FRAME_SPACE,
        action_space=ACT_SPACE,
    )


def decode(stack: np.ndarray):
    """`(ep, t)` of the newest frame of a `(H, W, K)` stack."""
    return int(stack[0, 0, -1]) - 1, int(stack[0, 1, -1]) - 1


def reference_stack(ep, t, first_stored_t=0):
    """The k-stack ending at `(ep, t)`; frames before `first_stored_t` blank."""
    frames = [
        frame(ep, u) if u >= first_stored_t else np.zeros((H, W, 1), np.uint8)
        for u in range(t - K + 1, t + 1)
    ]
    return np.concatenate(frames, axis=-1)


def stored_frames(buffer):
    """`{(ep, t)}` of the frames the buffer holds (read off its storage)."""
    slots = np.flatnonzero(buffer.storage.occupied)
    frames = buffer.storage.obs[slots]
    return {(int(f[0, 0, 0]) - 1, int(f[0, 1, 0]) - 1) for f in frames}


def expected_from_storage(ep, t, stored):
    """Reference stack using only frames still stored, walking back from t."""
    frames, u, alive = [], t, True
    for _ in range(K):
        alive = alive and u >= 0 and (ep, u) in stored
        frames.append(frame(ep, u) if alive else np.zeros((H, W, 1), np.uint8))
        u -= 1
    return np.concatenate(frames[::-1], axis=-1)


def make_buffer(cls=FastPrioritizedEpisodeReplayBuffer, capacity=1000, **kwargs):
    return cls(capacity, alpha=0.6, beta=0.4, seed=0, frame_stack=K, **kwargs)


def test_columnar_stacks_match_the_episode_frames_exactly():
    buffer = make_buffer()
    # Interleaved chunks of three episodes, as several EnvRunners send them.
    buffer.add([chunk(0, 0, 5), chunk(1, 0, 2)])
    buffer.add([chunk(1, 2, 3), chunk(0, 5, 9, terminated=True), chunk(2, 0, 6)])
    buffer.add(chunk(1, 3, 8, terminated=True))
    ends = {0: 9, 1: 8, 2: 6}
    batch = buffer.sample_batch(512, n_step=3, gamma=GAMMA)
    assert batch["obs"].shape == (512, H, W, K)
    assert batch["obs"].dtype == np.uint8
    seen = set()
    for obs, new_obs, n in zip(batch["obs"], batch["new_obs"], batch["n_step"]):
        ep, t = decode(obs)
        seen.add((ep, t))
        np.testing.assert_array_equal(obs, reference_stack(ep, t))
        assert n == min(3, ends[ep] - t)
        np.testing.assert_array_equal(new_obs, reference_stack(ep, t + n))
    # Every transition was drawn, episode starts (t < 3) and chunk joins included.
    assert seen == {(ep, t) for ep, end in ends.items() for t in range(end)}


def test_episode_starts_are_zero_padded_like_rllib_acting():
    buffer = make_buffer()
    buffer.add(chunk(7, 0, 4, terminated=True))
    batch = buffer.sample_batch(200, n_step=1)
    # What FrameStackingEnvToModule hands the module at each step of the episode.
    acting = SingleAgentEpisode(observation_space=FRAME_SPACE, action_space=ACT_SPACE)
    acting.add_env_reset(observation=frame(7, 0))
    rllib_stacks = []
    for t in range(1, 5):
        rllib_stacks.append(
            np.concatenate(acting.get_observations(slice(-K, None), fill=0.0), axis=2)
        )
        acting.add_env_step(observation=frame(7, t), action=0, reward=0.0)
    rllib_stacks.append(
        np.concatenate(acting.get_observations(slice(-K, None), fill=0.0), axis=2)
    )
    for obs, new_obs in zip(batch["obs"], batch["new_obs"]):
        _, t = decode(obs)
        np.testing.assert_array_equal(obs, rllib_stacks[t])
        np.testing.assert_array_equal(new_obs, rllib_stacks[t + 1])
    stack_t1 = batch["obs"][[decode(o)[1] == 1 for o in batch["obs"]]][0]
    assert not stack_t1[..., :2].any() and stack_t1[..., 2:].all()
    assert FrameStackingEnvToModule(num_frames=K).num_frames == K


def test_one_step_chunks_continue_the_stack_across_chunk_joins():
    buffer = make_buffer()
    buffer.add(chunk(3, 0, 1))
    for t in range(1, 7):
        buffer.add([chunk(3, t, t + 1, terminated=t == 6), chunk(4, t - 1, t)])
    batch = buffer.sample_batch(400)
    for obs in batch["obs"]:
        ep, t = decode(obs)
        np.testing.assert_array_equal(obs, reference_stack(ep, t))


def test_chunk_starting_mid_episode_without_its_past_is_blank_padded():
    buffer = make_buffer()
    buffer.add(chunk(5, 10, 14))  # t_started=10, nothing earlier stored
    batch = buffer.sample_batch(100)
    for obs in batch["obs"]:
        ep, t = decode(obs)
        np.testing.assert_array_equal(obs, reference_stack(ep, t, first_stored_t=10))


def test_eviction_blanks_overwritten_frames_even_of_the_same_episode():
    """Capacity 10: ep 0 takes slots 0-4 (t 0..4), ep 1 slots 5-9; ep 0 then
    continues into slots 0-1 (t 5, 6), evicting its own t 0, 1. The frame
    before t 2 sits in slot 1, now ep 0's t 6 (same episode, newer): unusable."""
    buffer = make_buffer(capacity=10)
    buffer.add([chunk(0, 0, 4), chunk(1, 0, 4)])
    buffer.add(chunk(0, 4, 6))
    assert int(buffer.storage.prev[2]) == 1  # stale pointer, still set
    batch = buffer.sample_batch(300)
    got = {decode(obs): obs for obs in batch["obs"]}
    assert set(got) == {(0, 2), (0, 3), (0, 4), (0, 5), (1, 0), (1, 1), (1, 2), (1, 3)}
    for (ep, t), obs in got.items():
        first = 2 if ep == 0 else 0
        np.testing.assert_array_equal(obs, reference_stack(ep, t, first_stored_t=first))
    buffer.check_invariants()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ring_wrap_never_mixes_episodes(seed):
    """Random interleaved chunks through a small ring: every sampled stack holds
    only frames of its own episode that are still stored, newest last."""
    rng = np.random.default_rng(seed)
    buffer = make_buffer(capacity=37)
    progress = {}
    next_ep = 0
    for _ in range(120):
        if len(progress) < 3 or rng.random() < 0.1:
            progress[next_ep] = 0
            next_ep += 1
        ep = int(rng.choice(list(progress)))
        t0 = progress[ep]
        t1 = t0 + int(rng.integers(1, 6))
        done = rng.random() < 0.15
        buffer.add(chunk(ep, t0, t1, terminated=done))
        if done:
            del progress[ep]
        else:
            progress[ep] = t1
        stored = stored_frames(buffer)
        batch = buffer.sample_batch(64, n_step=(1, 3), gamma=GAMMA)
        for obs, new_obs in zip(batch["obs"], batch["new_obs"]):
            ep_, t = decode(obs)
            np.testing.assert_array_equal(obs, expected_from_storage(ep_, t, stored))
            ep_next, t_next = decode(new_obs)
            assert ep_next == ep_ and t_next > t
            np.testing.assert_array_equal(
                new_obs, expected_from_storage(ep_, t_next, stored)
            )
        buffer.check_invariants()


@pytest.mark.parametrize("seed", [0, 1])
def test_equal_observation_keys_mean_equal_observations_through_ring_wrap(seed):
    """The NERS Learner caches encodings under `ENCODING_KEYS`: through random
    chunks, ring wrap and eviction (which blanks older frames of a stack whose
    own slot survives), a key once seen always comes back with the very same
    stack, and a slot's key changes whenever its stack does."""
    from rllib_ners.replay_buffers.ners_episode_buffer import ENCODING_KEYS

    rng = np.random.default_rng(seed)
    buffer = make_buffer(NERSEpisodeReplayBuffer, capacity=23)
    stack_of_key, key_of_slot_stack = {}, {}
    progress, next_ep, keys_changed = {}, 0, 0
    for _ in range(150):
        if len(progress) < 3 or rng.random() < 0.1:
            progress[next_ep] = 0
            next_ep += 1
        ep = int(rng.choice(list(progress)))
        t1 = progress[ep] + int(rng.integers(1, 6))
        done = rng.random() < 0.15
        buffer.add(chunk(ep, progress[ep], t1, terminated=done))
        if done:
            del progress[ep]
        else:
            progress[ep] = t1
        batch = buffer.sample_batch(64, n_step=(1, 3), gamma=GAMMA)
        keys = buffer.item_columns(batch)[ENCODING_KEYS]
        assert keys.shape == (64, 4) and keys.dtype == np.int64
        np.testing.assert_array_equal(keys[:, 0], batch["indices"])
        np.testing.assert_array_equal(keys[:, 2], batch["next_indices"])
        for slots, codes, stacks in (
            (keys[:, 0], keys[:, 1], batch["obs"]),
            (keys[:, 2], keys[:, 3], batch["new_obs"]),
        ):
            for slot, code, stack in zip(slots.tolist(), codes.tolist(), stacks):
                seen = stack_of_key.setdefault(code, stack.tobytes())
                assert seen == stack.tobytes()
                previous = key_of_slot_stack.get(slot)
                if previous is not None and previous[1] != stack.tobytes():
                    assert previous[0] != code
                    keys_changed += 1
                key_of_slot_stack[slot] = (code, stack.tobytes())
    assert keys_changed > 20  # the ring wrapped and blanked stacks many times


def test_sample_returns_stacked_episodes_with_the_stacked_space():
    buffer = make_buffer()
    buffer.add([chunk(0, 0, 6, terminated=True), chunk(1, 0, 3)])
    episodes = buffer.sample(num_items=32, n_step=2, gamma=GAMMA, beta=0.4)
    assert len(episodes) == 32
    for episode in episodes:
        assert episode.observation_space.shape == (H, W, K)
        assert episode.observation_space.dtype == np.uint8
        obs, new_obs = episode.get_observations(0), episode.get_observations(1)
        ep, t = decode(obs)
        np.testing.assert_array_equal(obs, reference_stack(ep, t))
        assert episode.observation_space.contains(obs)
        n = int(episode.get_extra_model_outputs("n_step", 0))
        np.testing.assert_array_equal(new_obs, reference_stack(ep, t + n))


def test_sequences_carry_stacks_for_every_step():
    buffer = make_buffer()
    buffer.add([chunk(0, 0, 9, terminated=True), chunk(1, 0, 7)])
    batch = buffer.sample_sequences(16, 5)
    assert batch["obs"].shape == (16, 6, H, W, K)
    for row, length in zip(batch["obs"], batch["lengths"]):
        ep, t0 = decode(row[0])
        for j in range(length + 1):
            np.testing.assert_array_equal(row[j], reference_stack(ep, t0 + j))


def test_ners_buffer_stacks_its_sampler_training_batch():
    buffer = make_buffer(NERSEpisodeReplayBuffer)
    buffer.add([chunk(0, 0, 8, terminated=True), chunk(1, 0, 5)])
    sampled = buffer.sample_batch(32, n_step=2, gamma=GAMMA)
    positions = np.arange(32.0)[:, None]
    buffer.update_priorities(np.hstack([np.tile([0.5, 0.1, 0.2], (32, 1)), positions]))
    assert sampled["obs"].shape == (32, H, W, K)
    train = buffer.sample_sampler_training_batch(8, n_step=2, gamma=GAMMA)
    assert train["obs"].shape[1:] == (H, W, K)
    for obs, new_obs in zip(train["obs"], train["new_obs"]):
        ep, t = decode(obs)
        np.testing.assert_array_equal(obs, reference_stack(ep, t))
        assert decode(new_obs)[0] == ep


def test_state_round_trip_restores_frames_pointers_and_rng():
    buffer = make_buffer(capacity=23)
    for ep in range(6):
        buffer.add([chunk(ep, 0, 3), chunk(ep + 10, 0, 2)])
        buffer.add(chunk(ep, 3, 5, terminated=True))
    buffer.sample_batch(7)  # the generator moves past its seed's state
    state = buffer.get_state()
    restored = make_buffer(capacity=23)
    restored.set_state(state)
    a = buffer.sample_batch(50, n_step=3, gamma=GAMMA)
    b = restored.sample_batch(50, n_step=3, gamma=GAMMA)
    for key in ("obs", "new_obs", "indices", "weights"):
        np.testing.assert_array_equal(a[key], b[key])
    # Both go on identically after more adds (pointers restored too).
    for buf in (buffer, restored):
        buf.add(chunk(10, 2, 6))
    a = buffer.sample_batch(50)
    b = restored.sample_batch(50)
    np.testing.assert_array_equal(a["obs"], b["obs"])
    with pytest.raises(ValueError, match="frame_stack"):
        FastPrioritizedEpisodeReplayBuffer(23, frame_stack=2).set_state(state)


def test_frame_stack_needs_images_and_a_positive_integer():
    vector_episode = SingleAgentEpisode(
        observations=[np.zeros(4, np.float32)] * 3,
        actions=[0, 1],
        rewards=[0.0, 0.0],
        len_lookback_buffer=0,
    )
    buffer = FastPrioritizedEpisodeReplayBuffer(100, frame_stack=4)
    with pytest.raises(ValueError, match="frame_stack"):
        buffer.add(vector_episode)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="frame_stack"):
            FastPrioritizedEpisodeReplayBuffer(100, frame_stack=bad)
    # Without stacking, vectors are fine and (H, W) frames come out unchanged.
    FastPrioritizedEpisodeReplayBuffer(100).add(vector_episode)


def test_two_dimensional_frames_stack_to_k_channels():
    buffer = FastPrioritizedEpisodeReplayBuffer(100, seed=0, frame_stack=3)
    buffer.add(
        SingleAgentEpisode(
            observations=[np.full((2, 2), t + 1, np.uint8) for t in range(4)],
            actions=[0, 0, 0],
            rewards=[0.0, 0.0, 0.0],
            len_lookback_buffer=0,
        )
    )
    batch = buffer.sample_batch(30)
    for obs in batch["obs"]:
        t = int(obs[0, 0, -1]) - 1
        expected = [max(u + 1, 0) if u >= 0 else 0 for u in range(t - 2, t + 1)]
        np.testing.assert_array_equal(obs[0, 0], expected)
        assert obs.shape == (2, 2, 3)


def test_100k_atari_buffer_arrays_stay_under_one_gigabyte():
    """Capacity 100k of 84x84x1 uint8 frames: 0.706 GB of frames (each stored
    once) plus bookkeeping and trees, for the NERS buffer (the largest)."""
    buffer = NERSEpisodeReplayBuffer(100_000, alpha=0.5, beta=0.4, frame_stack=4)
    space = gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)
    buffer.add(
        SingleAgentEpisode(
            observations=[np.zeros((84, 84, 1), np.uint8)] * 3,
            actions=[0, 1],
            rewards=[0.0, 1.0],
            extra_model_outputs={"weights_seq_no": [0, 0]},
            observation_space=space,
            action_space=gym.spaces.Discrete(9),
            len_lookback_buffer=0,
        )
    )
    frames = buffer.storage.obs.nbytes
    total = buffer.storage_nbytes()
    assert frames == 100_000 * 84 * 84
    assert frames < total < 1.0e9
    # Stock RLlib keeps 4 float32 frames per observation (and new_obs again).
    stock_per_transition = 84 * 84 * 4 * 4
    assert 100_000 * stock_per_transition / total > 3.5


def coloured_chunk(ep, t0, t1, channels):
    """`chunk(ep, t0, t1)` with each frame repeated into `channels` channels."""
    episode = chunk(ep, t0, t1)
    for t, obs in enumerate(episode.observations):
        episode.observations[t] = np.repeat(obs, channels, axis=-1)
    episode.observation_space = gym.spaces.Box(0, 255, (H, W, channels), np.uint8)
    return episode


@pytest.mark.parametrize("channels", [1, 3])
def test_channels_first_layout_holds_the_same_stacks(channels):
    """`frames_channels_first`: through ring wrap and eviction, the sampled
    stacks equal the channels-last ones value for value (same shape and
    dtype), laid out `[n, k * C, H, W]` in memory."""
    buffers = [make_buffer(capacity=29) for _ in range(2)]
    buffers[1].frames_channels_first = True
    rng = np.random.default_rng(3)
    for step in range(40):
        ep, t0 = step % 5, (step // 5) * 3
        t1 = t0 + int(rng.integers(1, 4))
        for buffer in buffers:
            buffer.add(coloured_chunk(ep, t0, t1, channels))
        plain, planar = (
            buffer.sample_batch(16, n_step=(1, 3), gamma=GAMMA) for buffer in buffers
        )
        for key in ("obs", "new_obs"):
            assert planar[key].shape == plain[key].shape == (16, H, W, K * channels)
            np.testing.assert_array_equal(planar[key], plain[key])
            assert np.moveaxis(planar[key], -1, 1).flags.c_contiguous
        np.testing.assert_array_equal(planar["indices"], plain["indices"])


def _same_stacks_through_ring_wrap(buffers, channels, *, adds_between_samples):
    rng = np.random.default_rng(4)
    for step in range(60):
        ep, t0 = step % 5, (step // 5) * 3
        t1 = t0 + int(rng.integers(1, 4))
        for buffer in buffers:
            buffer.add(coloured_chunk(ep, t0, t1, channels))
        if step % adds_between_samples:
            continue
        host, device = (
            buffer.sample_batch(16, n_step=(1, 3), gamma=GAMMA) for buffer in buffers
        )
        for key in ("obs", "new_obs"):
            assert isinstance(device[key], torch.Tensor)
            assert device[key].dtype == torch.uint8
            assert device[key].shape == host[key].shape == (16, H, W, K * channels)
            np.testing.assert_array_equal(device[key].numpy(), host[key])
            # The memory a GPU convolution takes as it is: [n, k * C, H, W].
            assert device[key].permute(0, 3, 1, 2).is_contiguous()
        np.testing.assert_array_equal(device["indices"], host["indices"])


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("adds_between_samples", [1, 7, 40])
def test_device_frames_gather_the_same_stacks(channels, adds_between_samples):
    """`device_frames` (here on the CPU): through ring wrap, eviction and
    more frames written between two samples than the ring holds (40 adds),
    `sample_batch()`'s stacks gathered from the mirror are the host's stacks
    value for value, as tensors laid out channels-first in memory."""
    buffers = [make_buffer(capacity=29) for _ in range(2)]
    buffers[0].frames_channels_first = True
    buffers[1].device_frames = DeviceFrames("cpu")
    _same_stacks_through_ring_wrap(
        buffers, channels, adds_between_samples=adds_between_samples
    )
    assert buffers[1].device_frames.frames.shape[0] == 29


def test_device_frames_send_a_samples_slots_and_new_frames_in_one_copy(monkeypatch):
    """Each sample makes one host-to-device transfer: the stacks' slots, with
    the frames written since the last sample and their slots where there are
    any; every frame is sent once."""
    from rllib_ners.replay_buffers import device_frames as module
    from rllib_ners.utils.tensor_conversion import host_tensors_in_one_copy

    transfers = []

    def one_copy(tensors, device, *, pinned):
        transfers.append({name: tuple(t.shape) for name, t in tensors.items()})
        return host_tensors_in_one_copy(tensors, device, pinned=pinned)

    monkeypatch.setattr(module, "host_tensors_in_one_copy", one_copy)
    buffer = make_buffer(capacity=29)
    buffer.device_frames = DeviceFrames("cpu")
    buffer.add(chunk(0, 0, 10))
    buffer.sample_batch(8, n_step=1, gamma=GAMMA)  # the first sample: the whole ring
    buffer.sample_batch(8, n_step=1, gamma=GAMMA)  # nothing new
    buffer.add(chunk(0, 10, 13))
    buffer.sample_batch(8, n_step=1, gamma=GAMMA)
    assert [sorted(t) for t in transfers] == [
        ["frames", "index", "slots"],
        ["index"],
        ["frames", "index", "slots"],
    ]
    assert transfers[0]["frames"][0] == 29 and transfers[2]["frames"][0] == 3
    assert transfers[1]["index"] == (2 * 8, K)  # obs and new_obs stacks


def test_device_frames_follow_a_restored_buffer():
    """A restored buffer (new arrays, another ring position) is mirrored
    anew: the next samples equal the host's."""
    source, host, device = (make_buffer(capacity=31) for _ in range(3))
    device.device_frames = DeviceFrames("cpu")
    for t0 in range(0, 30, 3):
        host.add(chunk(0, t0, t0 + 3))
        device.add(chunk(0, t0, t0 + 3))
    device.sample_batch(8, n_step=1, gamma=GAMMA)  # mirrors the first run
    for t0 in range(0, 45, 5):
        source.add(chunk(1, t0, t0 + 5))
    for buffer in (host, device):
        buffer.set_state(source.get_state())
    for _ in range(3):
        a, b = (
            buffer.sample_batch(8, n_step=2, gamma=GAMMA) for buffer in (host, device)
        )
        np.testing.assert_array_equal(b["obs"].numpy(), a["obs"])
        np.testing.assert_array_equal(b["new_obs"].numpy(), a["new_obs"])


def test_device_frames_leave_frames_they_cannot_serve_on_the_host(caplog):
    """Float frames are no uint8 images: the buffer keeps building numpy
    stacks, and says why once."""
    space = gym.spaces.Box(0.0, 1.0, (H, W, 1), np.float32)
    buffer = make_buffer()
    buffer.device_frames = DeviceFrames("cpu")
    buffer.add(
        SingleAgentEpisode(
            observations=[frame(0, t).astype(np.float32) / 255 for t in range(7)],
            actions=[0] * 6,
            rewards=[0.0] * 6,
            len_lookback_buffer=0,
            observation_space=space,
            action_space=ACT_SPACE,
        )
    )
    with caplog.at_level(
        logging.INFO, logger="rllib_ners.replay_buffers.device_frames"
    ):
        for _ in range(2):
            batch = buffer.sample_batch(4, n_step=1, gamma=GAMMA)
    assert isinstance(batch["obs"], np.ndarray)
    assert "not uint8 images" in buffer.device_frames.disabled_because
    assert len([r for r in caplog.records if "on the host" in r.getMessage()]) == 1
