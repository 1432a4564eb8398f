"""`pack_fragments()`: episode fragments as joined columns, what our training
loop's remote EnvRunners ship. A buffer that stores the packed fragments holds
exactly what it holds after storing the episodes (every storage array, the
priorities, the NERS memory, the counters), through continued episodes, ring
wrap and eviction; and the packed form carries neither the spaces nor the
lookback frames. The real EnvRunners' fragments: `tests/integration/
test_fragment_shipping.py`.
"""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from resume_cases import assert_same_state

from rllib_ners.replay_buffers import (
    FastPrioritizedEpisodeReplayBuffer,
    NERSEpisodeReplayBuffer,
)
from rllib_ners.replay_buffers.packed_fragments import PackedFragments, pack_fragments

FRAME = (6, 5, 1)
FRAME_SPACE = gym.spaces.Box(0, 255, FRAME, np.uint8)
ACTION_SPACE = gym.spaces.Discrete(4)
LOOKBACK = 3


def frame(episode: int, t: int) -> np.ndarray:
    return np.full(FRAME, (episode * 31 + t) % 251, dtype=np.uint8)


def fragment(episode, t0, t1, *, terminated=False, truncated=False, extra=True):
    """Steps `t0 .. t1 - 1` of episode `episode`, with `LOOKBACK` earlier
    frames in front (as an EnvRunner's continued episode carries them), infos,
    and extra model outputs; numpy columns, as EnvRunners return them."""
    lookback = min(LOOKBACK, t0)
    times = range(t0 - lookback, t1 + 1)
    steps = range(t0 - lookback, t1)
    episode_ = SingleAgentEpisode(
        id_=f"episode-{episode}",
        observations=[frame(episode, t) for t in times],
        infos=[{"t": t, "lives": 3} for t in times],
        actions=[(episode + t) % 4 for t in steps],
        rewards=[float(episode * 10 + t) / 7 for t in steps],
        extra_model_outputs=(
            {
                "action_logp": [np.float32(-t / 10) for t in steps],
                "q_values": [np.arange(4, dtype=np.float32) + t for t in steps],
            }
            if extra
            else {}
        ),
        terminated=terminated,
        truncated=truncated,
        len_lookback_buffer=lookback,
        t_started=t0,
        observation_space=FRAME_SPACE,
        action_space=ACTION_SPACE,
    )
    return episode_.to_numpy()


# Three sample() calls of two EnvRunners: ongoing fragments continued in later
# calls, an episode ended mid-call, one truncated, a new episode started.
CALLS = [
    [fragment(0, 0, 4), fragment(1, 0, 4)],
    [fragment(0, 4, 7, terminated=True), fragment(2, 0, 1), fragment(1, 4, 8)],
    [fragment(2, 1, 5), fragment(1, 8, 9, truncated=True), fragment(3, 0, 3)],
]


def packed(episodes) -> PackedFragments:
    return pack_fragments(episodes).with_spaces(FRAME_SPACE, ACTION_SPACE)


@pytest.mark.parametrize(
    "buffer_class", [FastPrioritizedEpisodeReplayBuffer, NERSEpisodeReplayBuffer]
)
@pytest.mark.parametrize("capacity", [100, 12])
@pytest.mark.parametrize("frame_stack", [1, 4])
def test_a_buffer_stores_packed_fragments_as_it_stores_the_episodes(
    buffer_class, capacity, frame_stack
):
    """At capacity 12 the ring wraps in the second call: continued episodes
    lose their oldest steps, one fragment's tail is overwritten."""
    from_episodes, from_packed = (
        buffer_class(capacity, alpha=0.6, beta=0.4, seed=3, frame_stack=frame_stack)
        for _ in range(2)
    )
    for call in CALLS:
        from_episodes.add(call)
        from_packed.add(packed(call))
        assert_same_state(from_episodes.get_state(), from_packed.get_state())
    # Draws from equal states are equal, stacks and n-step returns included.
    for buffer in (from_episodes, from_packed):
        buffer.rng = np.random.default_rng(7)
    assert_same_state(
        from_episodes.sample_batch(8, n_step=3, gamma=0.9, beta=0.4),
        from_packed.sample_batch(8, n_step=3, gamma=0.9, beta=0.4),
    )


def test_packed_fragments_and_episodes_mix_in_one_add_call():
    first, second = CALLS[0], CALLS[1]
    from_episodes, mixed = (
        FastPrioritizedEpisodeReplayBuffer(100, alpha=0.6, seed=0) for _ in range(2)
    )
    from_episodes.add(first + second)
    mixed.add([packed(first), *second])
    assert_same_state(from_episodes.get_state(), mixed.get_state())


def test_the_columns_hold_each_fragments_own_steps_in_order():
    episodes = CALLS[1]
    columns = packed(episodes)
    assert columns.ids == [e.id_ for e in episodes]
    assert len(columns) == sum(len(e) for e in episodes) == 8
    np.testing.assert_array_equal(columns.lengths, [3, 1, 4])
    np.testing.assert_array_equal(columns.t_started, [4, 0, 4])
    np.testing.assert_array_equal(columns.terminated, [True, False, False])
    # n + 1 observations per fragment, none of the lookback.
    expected_obs = [frame(0, t) for t in range(4, 8)]
    expected_obs += [frame(2, t) for t in range(0, 2)]
    expected_obs += [frame(1, t) for t in range(4, 9)]
    np.testing.assert_array_equal(columns.observations, np.stack(expected_obs))
    assert columns.observations.dtype == np.uint8
    assert [info["t"] for info in columns.infos] == [4, 5, 6, 7, 0, 1, 4, 5, 6, 7, 8]
    np.testing.assert_array_equal(
        columns.rewards,
        [(0 + t) / 7 for t in range(4, 7)]
        + [20 / 7]
        + [(10 + t) / 7 for t in range(4, 8)],
    )
    np.testing.assert_array_equal(
        columns.extra_model_outputs["q_values"][:, 0], [4, 5, 6, 0, 4, 5, 6, 7]
    )


def test_the_packed_form_ships_neither_spaces_nor_lookback_frames():
    """An ongoing 4-step fragment with 3 lookback frames: the episode pickles
    8 frames and its spaces (a Box pickles its bounds), the packed columns the
    fragment's 5 frames and a few hundred bytes besides."""
    big_frame = gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)
    episode = SingleAgentEpisode(
        observations=[np.full((84, 84, 1), t, np.uint8) for t in range(8)],
        actions=[0] * 7,
        rewards=[0.0] * 7,
        len_lookback_buffer=3,
        t_started=3,
        observation_space=big_frame,
        action_space=ACTION_SPACE,
    ).to_numpy()
    frame_bytes = 84 * 84
    shipped = len(pickle.dumps(pack_fragments([episode]), protocol=5))
    assert 5 * frame_bytes <= shipped <= 5 * frame_bytes + 1_500
    assert len(pickle.dumps(episode, protocol=5)) > 8 * frame_bytes + 2 * frame_bytes


def test_fragments_the_columns_cannot_hold_alike_stay_episodes():
    """Fragments with different extra-output keys (random-action steps carry
    none) stay episodes: the buffer fills a missing key per fragment."""
    mixed_keys = [fragment(0, 0, 2), fragment(1, 0, 2, extra=False)]
    assert pack_fragments(mixed_keys) is mixed_keys
    assert pack_fragments([]) == []
    empty = SingleAgentEpisode(observation_space=FRAME_SPACE, action_space=ACTION_SPACE)
    assert pack_fragments([empty]) == []


def test_storing_packed_fragments_needs_their_spaces():
    buffer = FastPrioritizedEpisodeReplayBuffer(100)
    with pytest.raises(ValueError, match=r"with_spaces\(observation_space"):
        buffer.add(pack_fragments(CALLS[0]))
    with pytest.raises(ValueError, match=r"SingleAgentEpisodes \(or PackedFragments\)"):
        buffer.add([{"obs": 1}])
